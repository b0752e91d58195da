#!/usr/bin/env node
// What `latte serve` adds over the engine, measured:
//  1. throughput: the requests `latte bench engine` makes (the same random prompt ids,
//     drawn with its splitmix64 stream, the same per-request seeds, temperature 1, EOS
//     ignored), sent as streaming /v1/completions by C concurrent clients, output tok/s
//     against `latte bench engine --max-concurrency C` on the same model and flags;
//  2. TTFT at idle: one streaming request at a time (max_tokens 1), the time from
//     sending it to its first token event, against the engine's own time to that token
//     for the same request (engine_ttft in the server's log line: from Engine::Submit
//     to the token's output). The difference is what HTTP, parsing, tokenizing, queueing
//     and the wake-up add. Three clients: fetch (undici) and node:http on a kept-alive
//     connection, alternating (ttft_overhead_ms_*, node_http_ttft_overhead_ms_*), then
//     latte's own C++ client, `latte bench serve` (latte_client_ttft_overhead_ms_*); and
//     the server's own share from its log: arrival to Submit, first token to the poll
//     that sends it (server_*_ms_median; the log has 0.1 ms resolution).
// Usage: node bench/serve_bench.js --model DIR [--num-prompts 64] [--input-len 128]
//          [--output-len 128] [--concurrency 16] [--ttft-requests 50] [--seed 0]
//          [-- extra engine flags for both, e.g. --threads 2]
'use strict';
const { spawn, execFile, execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const http = require('node:http');
const path = require('node:path');
const { splitmix } = require('./splitmix64');

const LATTE = process.env.LATTE_BINARY || path.resolve(__dirname, '../build/latte');

function parseArgs(argv) {
  const o = { model: null, numPrompts: 64, inputLen: 128, outputLen: 128, concurrency: 16, ttftRequests: 50, seed: 0, extra: [] };
  const keys = { '--model': 'model', '--num-prompts': 'numPrompts', '--input-len': 'inputLen', '--output-len': 'outputLen',
                 '--concurrency': 'concurrency', '--ttft-requests': 'ttftRequests', '--seed': 'seed' };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--') { o.extra = argv.slice(i + 1); break; }
    const k = keys[argv[i]];
    if (!k) throw new Error('unknown flag ' + argv[i]);
    o[k] = k === 'model' ? argv[++i] : Number(argv[++i]);
  }
  if (!o.model) throw new Error('--model DIR is required');
  return o;
}

// src/bench/engine_benchmark.cc's MakeRequest: prompt ids and seed of request `index`.
function benchRequest(o, vocab, index, outputLen) {
  const next = splitmix(BigInt(o.seed) * 1000003n + BigInt(index));
  const prompt = Array.from({ length: o.inputLen }, () => Number(next() % BigInt(vocab)));
  return { prompt, max_tokens: outputLen, temperature: 1, ignore_eos: true, seed: o.seed + index, stream: true,
           stream_options: { include_usage: true } };
}

async function startServer(o) {
  const proc = spawn(LATTE, ['serve', '--model', o.model, '--port', '0', ...o.extra], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const port = await new Promise((resolve, reject) => {
    proc.stderr.on('data', (d) => {
      log += d;
      const m = log.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) resolve(Number(m[1]));
    });
    proc.on('exit', (code) => reject(new Error(`latte serve exited ${code}: ${log}`)));
  });
  return { proc, base: `http://127.0.0.1:${port}`, log: () => log };
}

// An SSE reader for a streamed /v1/completions response: feed it the body's text as it
// arrives; it records the time of the first event (it carries the first token's text),
// the id and the usage, and says when [DONE] has come.
function completionStream(t0) {
  const r = { id: null, ttft: null, tokens: 0, done: false };
  let buffer = '';
  r.push = (text) => {
    buffer += text;
    let cut;
    while (!r.done && (cut = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      if (!event.startsWith('data: ')) continue;
      if (event === 'data: [DONE]') { r.done = true; break; }
      const chunk = JSON.parse(event.slice(6));
      if (r.ttft === null) r.ttft = performance.now() - t0;
      r.id = chunk.id;
      if (chunk.usage) r.tokens = chunk.usage.completion_tokens;
    }
  };
  return r;
}

// One streaming request through fetch (undici): resolves to { id, ttft (ms), tokens }
// once [DONE] arrives.
async function streamOne(base, body) {
  const t0 = performance.now();
  const res = await fetch(base + '/v1/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
                                                     body: JSON.stringify(body) });
  if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  const stream = completionStream(t0);
  while (!stream.done) {
    const { value, done: end } = await reader.read();
    if (end) break;
    stream.push(decoder.decode(value, { stream: true }));
  }
  return { id: stream.id, ttft: stream.ttft, tokens: stream.tokens };
}

// The same request through Node's own http module on a kept-alive connection: the
// second client of the TTFT measurement, to tell the client's cost from the server's.
const keepAlive = new http.Agent({ keepAlive: true, maxSockets: 1 });
function streamOneHttp(base, body) {
  const t0 = performance.now();
  const data = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = http.request(base + '/v1/completions', { method: 'POST', agent: keepAlive,
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) } }, (res) => {
      if (res.statusCode !== 200) { reject(new Error(`HTTP ${res.statusCode}`)); res.resume(); return; }
      res.setEncoding('utf8');
      const stream = completionStream(t0);
      res.on('data', (text) => stream.push(text));
      res.on('end', () => resolve({ id: stream.id, ttft: stream.ttft, tokens: stream.tokens }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.setNoDelay(true);
    req.end(data);
  });
}

// The server's log line per finished request, in log order, times in ms.
function serverLogLines(text) {
  return [...text.matchAll(/latte serve: (\S+) .* ttft=([\d.]+)s engine_ttft=([\d.]+)s total=([\d.]+)s/g)].map((m) => (
    { id: m[1], ttft: 1000 * Number(m[2]), engine: 1000 * Number(m[3]), total: 1000 * Number(m[4]) }));
}

// latte:engine_steps_total, _step_seconds_total, _forward_seconds_total from /metrics.
async function engineCounters(base) {
  const text = await (await fetch(base + '/metrics')).text();
  const value = (name) => Number(text.match(new RegExp(`^${name}\\{[^}]*\\} (\\S+)$`, 'm'))[1]);
  return { steps: value('latte:engine_steps_total'), step: value('latte:engine_step_seconds_total'),
           forward: value('latte:engine_forward_seconds_total') };
}

function benchEngine(o, args) {
  const out = execFileSync(LATTE, ['bench', 'engine', '--model', o.model, '--seed', String(o.seed), '--json', ...args, ...o.extra],
                           { stdio: ['ignore', 'pipe', 'ignore'] }).toString();
  return JSON.parse(out.trim().split('\n').pop());
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const vocab = JSON.parse(require('node:fs').readFileSync(path.join(o.model, 'config.json'), 'utf8')).vocab_size;
  // bench engine runs before and after the server (the machine's speed drifts: on a
  // shared host the two can differ by more than the server's cost).
  const engineArgs = ['--num-prompts', String(o.numPrompts), '--input-len', String(o.inputLen),
                      '--output-len', String(o.outputLen), '--max-concurrency', String(o.concurrency)];
  const engineBefore = benchEngine(o, engineArgs);
  const server = await startServer(o);
  try {
    for (let i = 0; i < 3; i++) await streamOne(server.base, benchRequest(o, vocab, 1000 + i, 8));  // warm-up

    // 1. Throughput: C clients, each taking the next request as its last one ends. The
    // engine's counters before and after split the wall time into engine steps (forward
    // passes and the rest of the step) and time the engine waited for requests.
    const before = await engineCounters(server.base);
    let next = 0, tokens = 0;
    const t0 = performance.now();
    await Promise.all(Array.from({ length: o.concurrency }, async () => {
      while (next < o.numPrompts) {
        const r = await streamOne(server.base, benchRequest(o, vocab, next++, o.outputLen));
        tokens += r.tokens;  // after the await: `tokens += await ...` would read tokens before it
      }
    }));
    const seconds = (performance.now() - t0) / 1000;
    const after = await engineCounters(server.base);
    if (tokens !== o.numPrompts * o.outputLen) throw new Error(`got ${tokens} tokens`);
    const httpTokS = tokens / seconds;

    // 2. TTFT at idle, one request at a time, paired with the engine's own time; the two
    // clients (fetch, node:http) alternate, each on requests of its own.
    const runs = [], httpRuns = [];
    for (let i = 0; i < o.ttftRequests; i++) {
      const viaFetch = () => streamOne(server.base, benchRequest(o, vocab, 2000 + 2 * i, 1));
      const viaHttp = () => streamOneHttp(server.base, benchRequest(o, vocab, 2001 + 2 * i, 1));
      if (i % 2) { httpRuns.push(await viaHttp()); runs.push(await viaFetch()); }
      else { runs.push(await viaFetch()); httpRuns.push(await viaHttp()); }
    }
    // A third client, latte's own (C++, `latte bench serve`): the same number of
    // requests of input-len tokens (text, sized with /tokenize), max_tokens 1, one at a
    // time; its requests' log lines follow the Node clients' in the log, in order.
    await new Promise((r) => setTimeout(r, 200));  // the Node clients' last log lines
    const nodeLogLength = server.log().length;
    const jsonFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'serve-bench-')), 'ttft.json');
    await new Promise((resolve, reject) => execFile(LATTE, ['bench', 'serve', '--base-url', server.base,
      '--input-len', String(o.inputLen), '--output-len', '1', '--num-prompts', String(o.ttftRequests),
      '--max-concurrency', '1', '--seed', String(o.seed), '--json', jsonFile], (e) => (e ? reject(e) : resolve())));
    const latteClient = JSON.parse(fs.readFileSync(jsonFile, 'utf8')).runs[0].requests.sort((a, b) => a.index - b.index);
    await new Promise((r) => setTimeout(r, 200));  // its last log lines
    const latteClientLog = server.log().slice(nodeLogLength);
    // 3. Throughput again with latte's C++ client (one process, a thread per stream):
    // the same shapes (input-len text tokens, output-len tokens, EOS ignored, C
    // streams), so the clients take less of the 2 cores than 16 Node streams do.
    await new Promise((resolve, reject) => execFile(LATTE, ['bench', 'serve', '--base-url', server.base,
      '--input-len', String(o.inputLen), '--output-len', String(o.outputLen), '--num-prompts', String(o.numPrompts),
      '--max-concurrency', String(o.concurrency), '--seed', String(o.seed + 1), '--json', jsonFile],
      (e) => (e ? reject(e) : resolve())));
    const latteClientTokS = JSON.parse(fs.readFileSync(jsonFile, 'utf8')).runs[0].output_throughput;
    await new Promise((r) => setTimeout(r, 200));  // the last log lines
    // The server's log line per request: ttft from the body's arrival, engine_ttft from
    // Engine::Submit, total to the reply's end (with max_tokens 1, the poll that took the
    // first token): the server's own share before Submit and after the token.
    const logged = {};
    for (const l of serverLogLines(server.log())) logged[l.id] = l;
    const latteLogged = serverLogLines(latteClientLog);
    if (latteLogged.length !== latteClient.length) throw new Error(`latte client: ${latteClient.length} requests, ${latteLogged.length} log lines`);
    const latteOverheads = latteClient.map((r, i) => r.ttft_ms - latteLogged[i].engine).sort((a, b) => a - b);
    const both = [...runs, ...httpRuns].map((r) => logged[r.id]);
    const beforeSubmit = both.map((l) => l.ttft - l.engine).sort((a, b) => a - b);
    const afterToken = both.map((l) => l.total - l.ttft).sort((a, b) => a - b);
    const ttfts = runs.map((r) => r.ttft).sort((a, b) => a - b);
    const overheadsOf = (rs) => rs.map((r) => r.ttft - logged[r.id].engine).sort((a, b) => a - b);
    const overheads = overheadsOf(runs), httpOverheads = overheadsOf(httpRuns);
    const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;
    server.proc.kill('SIGTERM');

    await new Promise((r) => server.proc.on('exit', r));
    const engineAfter = benchEngine(o, engineArgs);
    const engine = {};  // the two runs' mean
    for (const k of ['output_tok_s', 'seconds', 'steps', 'step_seconds', 'model_seconds']) {
      engine[k] = (engineBefore[k] + engineAfter[k]) / 2;
    }
    const result = {
      num_prompts: o.numPrompts, input_len: o.inputLen, output_len: o.outputLen, concurrency: o.concurrency,
      http_output_tok_s: +httpTokS.toFixed(1), engine_output_tok_s: +engine.output_tok_s.toFixed(1),
      engine_output_tok_s_before: +engineBefore.output_tok_s.toFixed(1), engine_output_tok_s_after: +engineAfter.output_tok_s.toFixed(1),
      http_vs_engine: +(httpTokS / engine.output_tok_s).toFixed(3),
      latte_client_output_tok_s: +latteClientTokS.toFixed(1),
      latte_client_vs_engine: +(latteClientTokS / engine.output_tok_s).toFixed(3),
      http_seconds: +seconds.toFixed(3), http_engine_steps: after.steps - before.steps,
      http_step_seconds: +(after.step - before.step).toFixed(3), http_forward_seconds: +(after.forward - before.forward).toFixed(3),
      engine_seconds: +engine.seconds.toFixed(3), engine_steps: engine.steps,
      engine_step_seconds: +engine.step_seconds.toFixed(3), engine_forward_seconds: +engine.model_seconds.toFixed(3),
      http_ttft_ms_mean: +mean(ttfts).toFixed(3), http_ttft_ms_median: +ttfts[ttfts.length >> 1].toFixed(3),
      engine_ttft_ms_mean: +mean(runs.map((r) => logged[r.id].engine)).toFixed(3),
      ttft_overhead_ms_mean: +mean(overheads).toFixed(3), ttft_overhead_ms_median: +overheads[overheads.length >> 1].toFixed(3),
      node_http_ttft_overhead_ms_mean: +mean(httpOverheads).toFixed(3),
      node_http_ttft_overhead_ms_median: +httpOverheads[httpOverheads.length >> 1].toFixed(3),
      latte_client_ttft_overhead_ms_mean: +mean(latteOverheads).toFixed(3),
      latte_client_ttft_overhead_ms_median: +latteOverheads[latteOverheads.length >> 1].toFixed(3),
      server_arrival_to_submit_ms_median: +beforeSubmit[beforeSubmit.length >> 1].toFixed(3),
      server_token_to_poll_ms_median: +afterToken[afterToken.length >> 1].toFixed(3),
    };
    console.log(JSON.stringify(result));
  } finally {
    if (server.proc.exitCode === null) server.proc.kill('SIGTERM');
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
