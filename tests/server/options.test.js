// The serve flags a client can see: --max-queue and --queue-timeout (503 + Retry-After),
// --api-key, --served-model-name and --reasoning-parser deepseek_r1.
'use strict';
const { test } = require('node:test');
const assert = require('node:assert/strict');
const h = require('./harness');

const LONG = { prompt: 'Tell me a long story', max_tokens: 4000, ignore_eos: true, temperature: 0 };

test('--max-queue and --queue-timeout: 503 with Retry-After while the engine is busy', async () => {
  // One sequence at a time, one request may wait, for at most 0.5 s. The busy request is
  // 8 prompts of 4000 tokens each: they run one after another, whatever the CPU's speed,
  // far longer than the test needs.
  const server = await h.startServer(h.makeModel(), ['--max-num-seqs', '1', '--max-queue', '1', '--queue-timeout', '0.5']);
  try {
    const busy = new AbortController();
    const running = fetch(server.base + '/v1/completions', {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, signal: busy.signal,
      body: JSON.stringify({ ...LONG, prompt: Array.from({ length: 8 }, (_, i) => `story ${i}`) }),
    }).catch(() => 'aborted');
    const [started] = await h.waitForMetrics(server.base, (m) => m['latte:num_requests_running'] === 1 &&
                                             m['latte:generation_tokens_total'] > 0, 5000);
    assert.ok(started);
    const waiting = h.post(server.base, '/v1/completions', { prompt: 'queued', max_tokens: 4 });
    const [queued] = await h.waitForMetrics(server.base, (m) => m['latte:num_requests_waiting'] === 8, 2000);
    assert.ok(queued, 'the other 7 prompts and the queued request wait');
    // The queue holds one: a third request is refused at once.
    const full = await h.post(server.base, '/v1/completions', { prompt: 'no room', max_tokens: 4 });
    assert.equal(full.status, 503, full.text);
    assert.equal(full.headers.get('retry-after'), '1');
    assert.equal(full.json.error.type, 'service_unavailable');
    assert.match(full.json.error.message, /queue is full/);
    // The waiting one times out after 0.5 s.
    const timedOut = await waiting;
    assert.equal(timedOut.status, 503, timedOut.text);
    assert.equal(timedOut.headers.get('retry-after'), '1');
    assert.match(timedOut.json.error.message, /queue-timeout/);
    // Dropping the busy request frees everything; a new request is served again.
    busy.abort();
    await running;
    const [idle, , m] = await h.waitForMetrics(server.base, (x) => x['latte:kv_cache_usage_perc'] === 0 &&
                                                x['latte:num_requests_waiting'] === 0 && x['latte:num_requests_running'] === 0, 1000);
    assert.ok(idle, JSON.stringify(m));
    const after = await h.post(server.base, '/v1/completions', { prompt: 'after', max_tokens: 4 });
    assert.equal(after.status, 200, after.text);
  } finally {
    assert.equal(await server.stop(), 0);
  }
});

test('--api-key and --served-model-name through the openai client', async () => {
  const server = await h.startServer(h.makeModel(), ['--api-key', 'k-123', '--served-model-name', 'my-model']);
  try {
    const good = server.client({ apiKey: 'k-123' });
    const r = await good.completions.create({ model: 'my-model', prompt: 'Hi', max_tokens: 2 });
    assert.equal(r.model, 'my-model');
    await assert.rejects(server.client({ apiKey: 'wrong' }).completions.create({ model: 'my-model', prompt: 'Hi', max_tokens: 2 }),
                         (e) => e.status === 401);
    await assert.rejects(good.completions.create({ model: 'other', prompt: 'Hi', max_tokens: 2 }),
                         (e) => e.status === 404 && e.code === 'model_not_found');
  } finally {
    assert.equal(await server.stop(), 0);
  }
});

test('--reasoning-parser deepseek_r1: output without </think> is all reasoning_content', async () => {
  // The random model never writes "</think>": the whole answer is the thought (vLLM's
  // parser), equal to the plain server's content for the same greedy request.
  const body = { model: 'tiny', messages: [{ role: 'user', content: 'Why?' }], max_tokens: 10, temperature: 0, ignore_eos: true };
  const plain = await h.startServer(h.makeModel(), ['--served-model-name', 'tiny']);
  let want;
  try {
    want = (await plain.client().chat.completions.create(body)).choices[0].message.content;
  } finally {
    assert.equal(await plain.stop(), 0);
  }
  const server = await h.startServer(h.makeModel(), ['--served-model-name', 'tiny', '--reasoning-parser', 'deepseek_r1']);
  try {
    const r = await server.client().chat.completions.create(body);
    assert.equal(r.choices[0].message.reasoning_content, want);
    assert.equal(r.choices[0].message.content, null);
    let reasoning = '';
    for await (const c of await server.client().chat.completions.create({ ...body, stream: true })) {
      if (c.choices.length) {
        reasoning += c.choices[0].delta.reasoning_content || '';
        assert.ok(!c.choices[0].delta.content, 'no content before </think>');
      }
    }
    assert.equal(reasoning, want);

    // /v1/responses: the thought is a reasoning item, and no message item follows.
    const { ignore_eos, ...noEos } = body;
    const thought = (await server.client().chat.completions.create(noEos)).choices[0].message.reasoning_content;
    assert.ok(thought);
    const req = { model: 'tiny', input: 'Why?', max_output_tokens: 10, temperature: 0 };
    const resp = await server.client().responses.create(req);
    assert.deepEqual(resp.output.map((o) => o.type), ['reasoning']);
    assert.match(resp.output[0].id, /^rs_/);
    assert.deepEqual(resp.output[0].content, [{ type: 'reasoning_text', text: thought }]);
    const events = [];
    for await (const e of await server.client().responses.create({ ...req, stream: true })) events.push(e);
    const types = events.map((e) => e.type);
    const deltas = events.filter((e) => e.type === 'response.reasoning_text.delta');
    assert.deepEqual(types, ['response.created', 'response.in_progress', 'response.output_item.added',
                             ...deltas.map(() => 'response.reasoning_text.delta'), 'response.reasoning_text.done',
                             'response.output_item.done', `response.${resp.status}`]);
    assert.equal(deltas.map((e) => e.delta).join(''), thought);
    const streamed = events.at(-1).response.output;
    assert.equal(streamed.length, 1);
    assert.deepEqual(streamed[0].content, resp.output[0].content);
  } finally {
    assert.equal(await server.stop(), 0);
  }
});
