// Bad HTTP input (malformed JSON, bad UTF-8, wrong Content-Type, oversized bodies,
// unknown models, paths and methods, bad API keys, non-HTTP bytes): for each the
// status, OpenAI's error object with the field named, and the next good request still
// succeeding; nothing leaks KV blocks.
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const h = require('./harness');

const KEY = 'sk-test-key';
let server;
const auth = { Authorization: `Bearer ${KEY}` };

before(async () => {
  // A small pool (16 blocks of 16 tokens = 256 tokens) so a request can outgrow it.
  server = await h.startServer(h.makeModel(), ['--served-model-name', 'tiny', '--num-kv-blocks', '16', '--block-size', '16',
                                               '--max-num-seqs', '4'], { LATTE_API_KEY: KEY });
});

after(async () => {
  assert.equal(await server.stop(), 0);
});

async function expectGood() {
  const r = await h.post(server.base, '/v1/completions', { prompt: 'Hello', max_tokens: 3 }, { headers: auth });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.choices[0].finish_reason.length > 0, true);
}

function expectError(r, status, { type = 'invalid_request_error', param, mentions } = {}) {
  assert.equal(r.status, status, r.text);
  assert.ok(r.json && r.json.error, `an OpenAI error object: ${r.text}`);
  const e = r.json.error;
  assert.deepEqual(Object.keys(e).sort(), ['code', 'message', 'param', 'type']);
  assert.equal(e.type, type);
  assert.equal(typeof e.message, 'string');
  if (param !== undefined) assert.equal(e.param, param, e.message);
  if (mentions) assert.ok(e.message.includes(mentions), `"${e.message}" names ${mentions}`);
}

async function completion(body, extra = {}) {
  return h.post(server.base, '/v1/completions', body, { headers: auth, ...extra });
}

const badCompletions = [
  ['max_tokens < 0', { prompt: 'x', max_tokens: -1 }, 'max_tokens'],
  ['max_tokens of the wrong type', { prompt: 'x', max_tokens: '5' }, 'max_tokens'],
  ['prompt + max_tokens past the pool', { prompt: 'x', max_tokens: 300 }, 'max_tokens'],
  ['prompt + max_tokens past the context length', { prompt: 'x', max_tokens: 5000 }, 'max_tokens'],
  ['temperature < 0', { prompt: 'x', temperature: -0.1 }, 'temperature'],
  ['temperature of the wrong type', { prompt: 'x', temperature: 'hot' }, 'temperature'],
  ['top_p = 0', { prompt: 'x', top_p: 0 }, 'top_p'],
  ['top_p > 1', { prompt: 'x', top_p: 1.01 }, 'top_p'],
  ['top_k < -1', { prompt: 'x', top_k: -2 }, 'top_k'],
  ['logprobs > 20', { prompt: 'x', logprobs: 21 }, 'logprobs'],
  ['n < 1', { prompt: 'x', n: 0 }, 'n'],
  ['n over max-num-seqs', { prompt: 'x', n: 5 }, 'n'],
  ['best_of != n', { prompt: 'x', best_of: 2 }, 'best_of'],
  ['empty prompt', { prompt: '' }, 'prompt'],
  ['empty prompt list', { prompt: [] }, 'prompt'],
  ['missing prompt', { max_tokens: 3 }, 'prompt'],
  ['prompt of the wrong type', { prompt: { text: 'x' } }, 'prompt'],
  ['token id outside the vocabulary', { prompt: [1, 2, 512] }, 'prompt'],
  ['negative token id', { prompt: [[1, -3]] }, 'prompt'],
  ['stop of the wrong type', { prompt: 'x', stop: 7 }, 'stop'],
  ['stream of the wrong type', { prompt: 'x', stream: 'yes' }, 'stream'],
  ['stream_options without stream', { prompt: 'x', stream_options: { include_usage: true } }, 'stream_options'],
  ['stop_token_ids outside the vocabulary', { prompt: 'x', stop_token_ids: [99999] }, 'stop_token_ids'],
  ['seed of the wrong type', { prompt: 'x', seed: 'abc' }, 'seed'],
  ['presence_penalty out of range', { prompt: 'x', presence_penalty: 2.5 }, 'presence_penalty'],
];

for (const [name, body, param] of badCompletions) {
  test(`completions: ${name} → 400 naming ${param}`, async () => {
    expectError(await completion(body), 400, { param, mentions: param });
    await expectGood();
  });
}

const badChats = [
  ['empty messages', { messages: [] }, 'messages'],
  ['messages of the wrong type', { messages: 'hi' }, 'messages'],
  ['a message without a role', { messages: [{ content: 'hi' }] }, 'messages[0].role'],
  ['an unknown role', { messages: [{ role: 'wizard', content: 'hi' }] }, 'messages[0].role'],
  ['content of the wrong type', { messages: [{ role: 'user', content: 42 }] }, 'messages[0].content'],
  ['top_logprobs > 20', { messages: [{ role: 'user', content: 'hi' }], logprobs: true, top_logprobs: 21 }, 'top_logprobs'],
  ['logprobs of the wrong type', { messages: [{ role: 'user', content: 'hi' }], logprobs: 1 }, 'logprobs'],
  ['max_tokens past the pool', { messages: [{ role: 'user', content: 'hi' }], max_tokens: 1000 }, 'max_tokens'],
];

for (const [name, body, param] of badChats) {
  test(`chat: ${name} → 400 naming ${param}`, async () => {
    expectError(await h.post(server.base, '/v1/chat/completions', body, { headers: auth }), 400, { param });
    await expectGood();
  });
}

test('malformed JSON → 400', async () => {
  expectError(await completion('{"prompt": "x", '), 400, { mentions: 'JSON' });
  expectError(await completion('[1, 2]'), 400, { mentions: 'object' });
  await expectGood();
});

test('invalid UTF-8 → 400', async () => {
  const bytes = Buffer.concat([Buffer.from('{"prompt": "a'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]);
  expectError(await completion(bytes), 400, { mentions: 'UTF-8' });
  await expectGood();
});

test('wrong Content-Type → 415', async () => {
  expectError(await completion('{"prompt": "x"}', { contentType: 'text/plain' }), 415, { mentions: 'Content-Type' });
  await expectGood();
});

test('a body over the size limit → 413', async () => {
  const big = JSON.stringify({ prompt: 'a'.repeat(9 << 20) });
  expectError(await completion(big), 413);
  await expectGood();
});

test('unknown model → 404 model_not_found', async () => {
  const r = await completion({ prompt: 'x', model: 'gpt-4' });
  expectError(r, 404, { param: 'model', mentions: 'gpt-4' });
  assert.equal(r.json.error.code, 'model_not_found');
  await expectGood();
});

test('missing or wrong API key → 401; the key is not needed off /v1', async () => {
  expectError(await h.post(server.base, '/v1/completions', { prompt: 'x' }), 401, { type: 'authentication_error' });
  expectError(await h.post(server.base, '/v1/completions', { prompt: 'x' }, { headers: { Authorization: 'Bearer nope' } }), 401,
              { type: 'authentication_error' });
  const client = server.client({ apiKey: 'nope' });
  await assert.rejects(client.models.list(), (e) => e.status === 401);
  assert.equal((await fetch(server.base + '/health')).status, 200);
  await expectGood();
});

test('unknown path → 404, wrong method → 405', async () => {
  const r = await fetch(server.base + '/v1/engines', { headers: auth });
  assert.equal(r.status, 404);
  assert.ok((await r.json()).error);
  const m = await fetch(server.base + '/v1/completions', { headers: auth });
  assert.equal(m.status, 405);
  assert.equal(m.headers.get('allow'), 'POST');
  assert.ok((await m.json()).error);
  await expectGood();
});

test('garbage that is not HTTP → 400 and the connection closes; the server keeps serving', async () => {
  const reply = await new Promise((resolve, reject) => {
    const s = net.connect(server.port, '127.0.0.1', () => s.write('NOT HTTP AT ALL\r\n\r\n'));
    let data = '';
    s.on('data', (d) => { data += d; });
    s.on('end', () => resolve(data));
    s.on('error', reject);
  });
  assert.match(reply, /^HTTP\/1\.1 400/);
  await expectGood();
});

// Bytes that are not UTF-8 in the path and in a header: the error message quotes them,
// and must still be a JSON body (not an exception in the server).
function rawRequest(bytes) {
  return new Promise((resolve, reject) => {
    const s = net.connect(server.port, '127.0.0.1', () => s.write(bytes));
    let data = Buffer.alloc(0);
    s.on('data', (d) => {
      data = Buffer.concat([data, d]);
      if (data.includes('\r\n\r\n') && /Content-Length: (\d+)/i.test(data.toString('latin1'))) {
        const head = data.toString('latin1');
        const len = Number(head.match(/Content-Length: (\d+)/i)[1]);
        if (data.length >= head.indexOf('\r\n\r\n') + 4 + len) s.end();
      }
    });
    s.on('end', () => resolve(data.toString('utf8')));
    s.on('error', reject);
  });
}

test('bytes that are not UTF-8 in the path or the Content-Type → a 404 / 415 with a JSON error', async () => {
  const path = await rawRequest(Buffer.concat([Buffer.from('GET /v1/\xff'.replace('\xff', ''), 'latin1'), Buffer.from([0xff, 0xfe]),
                                               Buffer.from(` HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\n\r\n`)]));
  assert.match(path, /^HTTP\/1\.1 (404|400)/);
  const json = JSON.parse(path.slice(path.indexOf('\r\n\r\n') + 4));
  assert.ok(json.error.message);
  const body = '{"prompt": "x"}';
  const ct = await rawRequest(Buffer.concat([Buffer.from(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\n` +
                                                         `Content-Length: ${body.length}\r\nContent-Type: text/`),
                                             Buffer.from([0xff]), Buffer.from('\r\n\r\n' + body)]));
  assert.match(ct, /^HTTP\/1\.1 415/);
  assert.ok(JSON.parse(ct.slice(ct.indexOf('\r\n\r\n') + 4)).error.message.includes('Content-Type'));
  await expectGood();
});

test('Expect: 100-continue: "100 Continue" before the body; an oversized Content-Length gets 413 before it', async () => {
  const body = JSON.stringify({ prompt: 'Hello', max_tokens: 2 });
  const head = `POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\n` +
               'Expect: 100-continue\r\nConnection: close\r\n';
  const exchange = (contentLength, sendBody) => new Promise((resolve, reject) => {
    const s = net.connect(server.port, '127.0.0.1', () => s.write(head + `Content-Length: ${contentLength}\r\n\r\n`));
    let data = '';
    s.on('data', (d) => {
      data += d;
      if (sendBody && data.startsWith('HTTP/1.1 100 Continue\r\n\r\n') && !s.sent) {
        s.sent = true;
        s.write(body);
      }
    });
    s.on('end', () => resolve(data));
    s.on('error', reject);
  });
  const ok = await exchange(body.length, true);
  assert.match(ok, /^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 OK/);
  const big = await exchange(64 << 20, false);
  assert.match(big, /^HTTP\/1\.1 413/);
  await expectGood();
});

test('after all that: no request running, no KV block held', async () => {
  const [ok, , m] = await h.waitForMetrics(server.base, (m) => m['latte:kv_cache_usage_perc'] === 0 &&
                                           m['latte:num_requests_running'] === 0 && m['latte:num_requests_waiting'] === 0, 2000);
  assert.ok(ok, JSON.stringify(m));
});
