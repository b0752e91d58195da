// A client that drops a long stream (or a long non-streamed request) has its request
// aborted: /metrics shows the KV cache back at its idle value within a second, and
// generation stops long before max_tokens. SIGTERM ends running streams with an error
// event, then [DONE], and the process exits 0.
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const http = require('node:http');
const h = require('./harness');

let server;
const LONG = { prompt: 'Tell me a long story', max_tokens: 4000, ignore_eos: true, temperature: 0 };
// Eight choices of LONG: several seconds of decoding even on a fast, idle core (one
// LONG alone can finish within the 300 ms a test below waits before it acts).
const HEAVY = { ...LONG, n: 8 };

before(async () => {
  server = await h.startServer(h.makeModel(), ['--served-model-name', 'tiny']);
});

after(async () => {
  if (server) assert.equal(await server.stop(), 0);
});

const idle = (m) => m['latte:kv_cache_usage_perc'] === 0 && m['latte:num_requests_running'] === 0;

test('a client that drops its stream: KV usage back to idle within 1 s', async () => {
  const [wasIdle] = await h.waitForMetrics(server.base, idle, 1000);
  assert.ok(wasIdle);
  const client = server.client();
  const stream = await client.completions.create({ ...LONG, stream: true });
  let chunks = 0;
  for await (const chunk of stream) {
    if (++chunks === 20) break;  // leaving the loop aborts the HTTP request
  }
  const dropped = Date.now();
  const m0 = await h.metrics(server.base);
  const [ok, waited, m] = await h.waitForMetrics(server.base, idle, 1000);
  assert.ok(ok, `not idle ${Date.now() - dropped} ms after the drop: ${JSON.stringify(m)}`);
  console.log(`# idle again ${waited} ms after the drop was noticed`);
  // It stopped: far fewer than max_tokens were generated, and the count does not grow.
  await new Promise((r) => setTimeout(r, 300));
  const m1 = await h.metrics(server.base);
  assert.equal(m1['latte:generation_tokens_total'], m['latte:generation_tokens_total']);
  assert.ok(m1['latte:generation_tokens_total'] < LONG.max_tokens, JSON.stringify(m0));
});

test('a client that hangs up on a non-streamed request: aborted too', async () => {
  const before = await h.metrics(server.base);
  await new Promise((resolve) => {
    const req = http.request(`${server.base}/v1/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json' } });
    req.on('error', () => resolve());
    req.end(JSON.stringify(HEAVY));
    setTimeout(() => { req.destroy(); resolve(); }, 300);
  });
  const [ok, , m] = await h.waitForMetrics(server.base, idle, 1000);
  assert.ok(ok, JSON.stringify(m));
  const generated = m['latte:generation_tokens_total'] - before['latte:generation_tokens_total'];
  assert.ok(generated < HEAVY.n * HEAVY.max_tokens, `${generated} tokens: the request ran to the end`);
  assert.ok(m['latte:request_success_total{model_name="tiny",finished_reason="abort"}'] >= 2, JSON.stringify(m));
});

test('SIGTERM: a running stream gets an error event then [DONE]; exit code 0', async () => {
  const events = [];
  const done = (async () => {
    const res = await fetch(server.base + '/v1/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
                                                               body: JSON.stringify({ ...HEAVY, stream: true }) });
    const text = await res.text();
    for (const e of text.split('\n\n')) if (e.startsWith('data: ')) events.push(e.slice(6));
  })();
  const [running] = await h.waitForMetrics(server.base, (m) => m['latte:num_requests_running'] >= 1, 2000);
  assert.ok(running);
  const code = await server.stop();
  await done;
  server = null;
  assert.equal(code, 0);
  assert.ok(events.length >= 3, events.join('\n'));
  assert.equal(events[events.length - 1], '[DONE]');
  const error = JSON.parse(events[events.length - 2]);
  assert.equal(error.error.type, 'service_unavailable');
  assert.match(error.error.message, /shutting down/);
  for (const e of events.slice(0, -2)) assert.equal(JSON.parse(e).choices[0].finish_reason, null);
});
