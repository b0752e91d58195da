// `latte bench serve` end to end: against the real `latte serve` (rows printed, every
// request counted, exact input and output token counts, checked against the server's
// own /metrics counters; the summary figures recomputed here from the per-request
// timings in --json), and against servers that fail (a fake one that answers 500, cuts
// streams short or streams properly, in turn; a port nobody listens on): every failure
// counted and reported, none dropped, exit code 1.
'use strict';
const { test } = require('node:test');
const assert = require('node:assert/strict');
const { execFile } = require('node:child_process');
const fs = require('node:fs');
const http = require('node:http');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const h = require('./harness');
const { splitmix } = require('../../bench/splitmix64');

function benchServe(args) {
  return new Promise((resolve) => {
    execFile(h.LATTE, ['bench', 'serve', ...args], { timeout: 300000 }, (error, stdout, stderr) => {
      resolve({ code: error ? error.code : 0, stdout, stderr });
    });
  });
}

function tmpFile(name) {
  return path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'latte-bench-serve-')), name);
}

// numpy.percentile's default (linear interpolation), in ms.
function percentile(values, q) {
  const v = [...values].sort((a, b) => a - b);
  const rank = (q / 100) * (v.length - 1);
  const lo = Math.floor(rank), hi = Math.min(lo + 1, v.length - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - lo);
}

const close = (a, b) => Math.abs(a - b) <= 1e-6 * Math.max(1, Math.abs(b));

test('against latte serve: two runs, rows printed, exact token counts, figures consistent with the timings', async () => {
  const server = await h.startServer(h.makeModel(), ['--max-num-seqs', '4']);
  try {
    const before = await h.metrics(server.base);
    const json = tmpFile('bench.json');
    const NUM = 6, OUT = 7, INPUTS = [16, 41];
    const r = await benchServe(['--base-url', server.base, '--input-len', INPUTS.join(','), '--output-len', String(OUT),
                                '--num-prompts', String(NUM), '--max-concurrency', '3', '--seed', '5', '--label', 'tiny',
                                '--json', json]);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    const lines = r.stdout.split('\n');
    assert.match(lines[0], /^\s*backend\s+input_tokens\s+output_tokens\s+output_toks\/s\s+req\/s\s+median_itl_ms\s+median_ttft_ms$/);
    for (const [i, input] of INPUTS.entries()) {
      assert.match(lines[1 + i], new RegExp(`^\\s*tiny\\s+${input}\\s+${OUT}\\s+[0-9.]+\\s+[0-9.]+\\s+[0-9.]+\\s+[0-9.]+$`));
    }
    assert.ok(r.stdout.includes(`input 16: ${NUM} requests completed, 0 failed`), r.stdout);
    assert.ok(!r.stdout.includes('warning'), r.stdout);

    const report = JSON.parse(fs.readFileSync(json, 'utf8'));
    assert.equal(report.label, 'tiny');
    assert.equal(report.runs.length, INPUTS.length);
    for (const [i, run] of report.runs.entries()) {
      assert.equal(run.input_len, INPUTS[i]);
      assert.equal(run.completed, NUM);
      assert.equal(run.failed, 0);
      assert.equal(run.requests.length, NUM);
      assert.equal(run.total_input_tokens, NUM * INPUTS[i]);
      assert.equal(run.total_output_tokens, NUM * OUT);
      const ttft = [], e2el = [], itl = [], tpot = [];
      for (const q of run.requests) {
        assert.equal(q.ok, true);
        assert.equal(q.prompt_tokens, INPUTS[i], 'the server counted exactly --input-len prompt tokens');
        assert.equal(q.output_tokens, OUT);
        assert.equal(q.output_tokens_from, 'usage');
        assert.ok(q.itl_ms.length <= OUT - 1, 'at most one gap per token after the first');
        assert.ok(q.ttft_ms > 0 && q.ttft_ms <= q.e2el_ms);
        assert.ok(close(q.tpot_ms, (q.e2el_ms - q.ttft_ms) / (OUT - 1)));
        ttft.push(q.ttft_ms); e2el.push(q.e2el_ms); tpot.push(q.tpot_ms); itl.push(...q.itl_ms);
      }
      assert.ok(close(run.median_ttft_ms, percentile(ttft, 50)));
      assert.ok(close(run.p99_ttft_ms, percentile(ttft, 99)));
      assert.ok(close(run.mean_e2el_ms, e2el.reduce((a, b) => a + b, 0) / e2el.length));
      assert.ok(close(run.median_itl_ms, percentile(itl, 50)));
      assert.ok(close(run.p99_tpot_ms, percentile(tpot, 99)));
      assert.ok(close(run.output_throughput, run.total_output_tokens / run.duration_s));
      assert.ok(close(run.request_throughput, NUM / run.duration_s));
      // The longest request cannot outlast the run.
      assert.ok(Math.max(...run.requests.map((q) => q.start_s * 1000 + q.e2el_ms)) <= run.duration_s * 1000 + 1);
    }
    // The server saw exactly these requests and tokens (the tokenize call adds none).
    const after = await h.metrics(server.base);
    const total = NUM * INPUTS.length;
    assert.equal(after['latte:request_success_total'] - before['latte:request_success_total'], total);
    assert.equal(after['latte:prompt_tokens_total'] - before['latte:prompt_tokens_total'],
                 NUM * INPUTS.reduce((a, b) => a + b, 0));
    assert.equal(after['latte:generation_tokens_total'] - before['latte:generation_tokens_total'], total * OUT);
  } finally {
    assert.equal(await server.stop(), 0);
  }
});

test('the model defaults to the first of /v1/models; a base URL may end in /v1', async () => {
  const server = await h.startServer(h.makeModel(), ['--served-model-name', 'named-model']);
  try {
    const a = tmpFile('a.json');
    const r = await benchServe(['--base-url', server.base + '/v1', '--input-len', '8', '--output-len', '2',
                                '--num-prompts', '2', '--json', a]);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    const report = JSON.parse(fs.readFileSync(a, 'utf8'));
    assert.equal(report.model, 'named-model');
    assert.match(r.stdout.split('\n')[1], /^\s*named-model\s+8\s+2\s/);
  } finally {
    assert.equal(await server.stop(), 0);
  }
});

test('--request-rate: Poisson arrivals (exponential gaps from the seed), no request sent before its time', async () => {
  const server = await h.startServer(h.makeModel());
  try {
    const json = tmpFile('rate.json');
    const RATE = 40, NUM = 8, SEED = 11;
    const r = await benchServe(['--base-url', server.base, '--input-len', '4', '--output-len', '2', '--num-prompts',
                                String(NUM), '--request-rate', String(RATE), '--seed', String(SEED), '--json', json]);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    assert.ok(r.stdout.includes('request rate 40)'), r.stdout);
    const run = JSON.parse(fs.readFileSync(json, 'utf8')).runs[0];
    // The schedule, recomputed: gaps -log(1 - u) / rate, u from splitmix64(seed ^ 0x5eed).
    const next = splitmix(BigInt(SEED) ^ 0x5eedn);
    let t = 0;
    for (const q of run.requests) {
      assert.ok(Math.abs(q.scheduled_s - t) < 1e-9, `request ${q.index}: scheduled ${q.scheduled_s}, expected ${t}`);
      assert.ok(q.start_s >= q.scheduled_s, `request ${q.index} sent at ${q.start_s} before ${q.scheduled_s}`);
      const u = Number(next() >> 11n) * 2 ** -53;
      t += -Math.log1p(-u) / RATE;
    }
    assert.ok(run.duration_s >= run.requests[NUM - 1].scheduled_s);
  } finally {
    assert.equal(await server.stop(), 0);
  }
});

// A fake OpenAI server: /v1/models and /tokenize answer; the n-th completion (0-based)
// gets a 500 with OpenAI's error object (n % 3 == 0), a stream cut before [DONE]
// (n % 3 == 1), or a whole stream of max_tokens one-token events with usage (n % 3 == 2).
function fakeServer() {
  let n = 0;
  const bodies = [];
  const server = http.createServer((req, res) => {
    let raw = '';
    req.on('data', (d) => { raw += d; });
    req.on('end', () => {
      if (req.url === '/v1/models') {
        res.writeHead(200, { 'Content-Type': 'application/json' });
        return res.end(JSON.stringify({ object: 'list', data: [{ id: 'fake', object: 'model' }] }));
      }
      if (req.url === '/tokenize') {
        res.writeHead(200, { 'Content-Type': 'application/json' });
        return res.end(JSON.stringify({ tokens: Array.from({ length: 300 }, (_, i) => 1000 + i) }));
      }
      const body = JSON.parse(raw);
      bodies.push(body);
      const kind = n++ % 3;
      if (kind === 0) {
        res.writeHead(500, { 'Content-Type': 'application/json' });
        return res.end(JSON.stringify({ error: { message: 'boom', type: 'server_error', param: null, code: null } }));
      }
      res.writeHead(200, { 'Content-Type': 'text/event-stream' });
      const chunk = (text) => `data: ${JSON.stringify({ id: 'x', object: 'text_completion', choices: [{ index: 0, text, finish_reason: null }] })}\n\n`;
      res.write(chunk('a'));
      if (kind === 1) return res.end();
      for (let i = 1; i < body.max_tokens; i++) res.write(chunk('b'));
      res.write(`data: ${JSON.stringify({ id: 'x', choices: [], usage: { prompt_tokens: body.prompt.length, completion_tokens: body.max_tokens } })}\n\n`);
      res.end('data: [DONE]\n\n');
    });
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({ server, bodies, port: server.address().port })));
}

test('a server that fails: 500s and cut streams are counted as failures, with their errors', async () => {
  const fake = await fakeServer();
  try {
    const json = tmpFile('fail.json');
    const r = await benchServe(['--base-url', `http://127.0.0.1:${fake.port}`, '--input-len', '12', '--output-len', '5',
                                '--num-prompts', '9', '--max-concurrency', '1', '--json', json]);
    assert.equal(r.code, 1, r.stdout + r.stderr);
    assert.ok(r.stderr.includes('latte bench serve: error: 6 of 9 requests failed'), r.stderr);
    assert.ok(r.stdout.includes('input 12: 3 requests completed, 6 failed'), r.stdout);
    assert.ok(r.stdout.includes('3 x HTTP 500: boom'), r.stdout);
    assert.ok(r.stdout.includes('3 x the stream ended without data: [DONE]'), r.stdout);
    const run = JSON.parse(fs.readFileSync(json, 'utf8')).runs[0];
    assert.equal(run.completed, 3);
    assert.equal(run.failed, 6);
    assert.equal(run.total_output_tokens, 15);
    assert.equal(run.requests.filter((q) => !q.ok).length, 6);
    for (const q of run.requests.filter((x) => x.ok)) {
      assert.equal(q.output_tokens, 5);
      assert.equal(q.itl_ms.length, 4);
    }
    // What was sent: the OpenAI fields of a streaming completion, ids from the pool.
    assert.equal(fake.bodies.length, 9);
    for (const b of fake.bodies) {
      assert.equal(b.model, 'fake');
      assert.equal(b.stream, true);
      assert.equal(b.ignore_eos, true);
      assert.equal(b.max_tokens, 5);
      assert.deepEqual(b.stream_options, { include_usage: true });
      assert.equal(b.prompt.length, 12);
      assert.ok(b.prompt.every((id) => id >= 1000 && id < 1300));
    }
    assert.notDeepEqual(fake.bodies[0].prompt, fake.bodies[1].prompt);
  } finally {
    fake.server.close();
  }
});

test('a port nobody listens on: every request fails with the connection error', async () => {
  const port = await new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const p = s.address().port;
      s.close(() => resolve(p));
    });
  });
  const json = tmpFile('down.json');
  const r = await benchServe(['--base-url', `http://127.0.0.1:${port}`, '--model', 'm', '--input-len', '4',
                              '--output-len', '2', '--num-prompts', '3', '--json', json]);
  assert.equal(r.code, 1, r.stdout + r.stderr);
  assert.ok(r.stderr.includes('3 of 3 requests failed'), r.stderr);
  assert.match(r.stdout, /3 x http:\/\/127\.0\.0\.1:\d+: connect: Connection refused/);
  const run = JSON.parse(fs.readFileSync(json, 'utf8')).runs[0];
  assert.equal(run.completed, 0);
  assert.equal(run.failed, 3);
  assert.equal(run.median_ttft_ms, null);
});

test('bad flags are refused before any request', async () => {
  let r = await benchServe(['--base-url', 'https://example.com', '--model', 'm']);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /https is not supported/);
  r = await benchServe(['--base-url', 'http://127.0.0.1:1', '--model', 'm', '--request-rate', '0']);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /--request-rate must be a number > 0 or inf, got "0"/);
});
