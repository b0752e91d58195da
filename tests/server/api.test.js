// End to end through the official openai client: completions and chat, streaming and
// not, logprobs and echo against `latte generate --logits-out`, stop strings, n > 1,
// seeds, usage, and the side endpoints (models, tokenize, detokenize, version, health).
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const h = require('./harness');

let server, client, model;

before(async () => {
  model = h.makeModel();
  server = await h.startServer(model, ['--served-model-name', 'tiny']);
  client = server.client();
});

after(async () => {
  const code = await server.stop();
  assert.equal(code, 0, 'latte serve exits 0 on SIGTERM');
});

const PROMPT = 'The quick brown fox';

async function tokenize(body) {
  const r = await h.post(server.base, '/tokenize', body);
  assert.equal(r.status, 200, r.text);
  return r.json.tokens;
}

test('completion: text, finish reason, usage equal to /tokenize and the token count', async () => {
  const r = await client.completions.create({ model: 'tiny', prompt: PROMPT, max_tokens: 12, temperature: 0,
                                              ignore_eos: true, logprobs: 0, return_tokens_as_token_ids: true,
                                              skip_special_tokens: false });
  assert.equal(r.object, 'text_completion');
  assert.match(r.id, /^cmpl-/);
  assert.equal(r.model, 'tiny');
  assert.equal(r.choices.length, 1);
  const c = r.choices[0];
  assert.equal(c.index, 0);
  assert.equal(c.finish_reason, 'length');
  assert.equal(c.logprobs.tokens.length, 12);
  const promptIds = await tokenize({ prompt: PROMPT });
  assert.equal(promptIds[0], 0, 'BOS first (add_special_tokens defaults to true, as vLLM)');
  assert.deepEqual(r.usage, { prompt_tokens: promptIds.length, completion_tokens: 12, total_tokens: promptIds.length + 12 });
  // The text is the generated ids decoded (special tokens kept on both sides).
  const detok = await h.post(server.base, '/detokenize', { tokens: h.ids(c.logprobs.tokens) });
  assert.equal(detok.json.prompt, c.text);
});

test('completion: the stream concatenates to the whole answer; include_usage adds a last usage chunk', async () => {
  const body = { model: 'tiny', prompt: PROMPT, max_tokens: 16, temperature: 0, ignore_eos: true };
  const whole = await client.completions.create(body);
  const stream = await client.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  let text = '', finish = null, usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    assert.equal(chunk.object, 'text_completion');
    if (chunk.choices.length) {
      text += chunk.choices[0].text;
      if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
      assert.equal(chunk.usage, null);
    } else {
      usage = chunk.usage;
    }
  }
  assert.ok(chunks > 2);
  assert.equal(text, whole.choices[0].text);
  assert.equal(finish, 'length');
  assert.deepEqual(usage, whole.usage);
});

test('echo + max_tokens 0 + logprobs 1 scores the prompt with the logits of latte generate --logits-out', async () => {
  const promptIds = [0, 17, 200, 33, 5, 410, 77, 90, 3, 260];
  const r = await client.completions.create({ model: 'tiny', prompt: promptIds, max_tokens: 0, echo: true, logprobs: 1,
                                              return_tokens_as_token_ids: true });
  const lp = r.choices[0].logprobs;
  assert.deepEqual(h.ids(lp.tokens), promptIds);
  assert.equal(lp.token_logprobs[0], null, 'the first token has nothing before it');
  assert.equal(r.usage.completion_tokens, 0);
  // The reference: the engine's own logits rows from the CLI, log-softmaxed here.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'latte-logits-'));
  const npy = path.join(dir, 'logits.npy');
  execFileSync(h.LATTE, ['generate', '--model', model, '--prompt-ids', promptIds.join(','), '--max-tokens', '1',
                         '--logits-out', npy, '--threads', '1'], { stdio: ['ignore', 'ignore', 'ignore'] });
  const { shape, data } = h.readNpy(npy);
  fs.rmSync(dir, { recursive: true });
  const V = shape[1];
  assert.equal(shape[0], promptIds.length);
  for (let i = 1; i < promptIds.length; i++) {
    const row = data.subarray((i - 1) * V, i * V);
    const want = h.logSoftmaxAt(row, promptIds[i]);
    assert.ok(Math.abs(lp.token_logprobs[i] - want) < 1e-4, `position ${i}: ${lp.token_logprobs[i]} vs ${want}`);
    // top_logprobs: the most likely token, and the prompt token itself.
    const top = lp.top_logprobs[i];
    let best = 0;
    for (let v = 1; v < V; v++) if (row[v] > row[best]) best = v;
    assert.ok(`token_id:${best}` in top, `position ${i}: the argmax ${best} is in ${JSON.stringify(top)}`);
    assert.ok(Math.abs(top[`token_id:${promptIds[i]}`] - want) < 1e-4);
  }
  assert.equal(lp.text_offset[0], 0);
});

test("lm-eval's loglikelihood request (echo, max_tokens 1, logprobs 1, a batch of id lists) scores every prompt", async () => {
  const prompts = [[0, 17, 200, 33, 5], [0, 90, 3, 260, 41, 77, 12]];
  const r = await client.completions.create({ model: 'tiny', prompt: prompts, max_tokens: 1, echo: true, logprobs: 1,
                                              temperature: 0, seed: 1234, return_tokens_as_token_ids: true });
  assert.equal(r.choices.length, 2);
  for (let i = 0; i < 2; i++) {
    const lp = r.choices[i].logprobs;
    assert.equal(lp.tokens.length, prompts[i].length + 1, 'the prompt, then the one generated token');
    assert.deepEqual(h.ids(lp.tokens).slice(0, -1), prompts[i]);
    // The same prompt scored alone (max_tokens 0) gives the same prompt logprobs.
    const alone = await client.completions.create({ model: 'tiny', prompt: prompts[i], max_tokens: 0, echo: true, logprobs: 1,
                                                    return_tokens_as_token_ids: true });
    const want = alone.choices[0].logprobs.token_logprobs;
    for (let p = 1; p < prompts[i].length; p++) assert.ok(Math.abs(lp.token_logprobs[p] - want[p]) < 1e-5, `prompt ${i} position ${p}`);
    // lm-eval's is_greedy: the token's logprob is the largest in its top_logprobs; for the
    // generated (greedy) token it must be.
    const last = lp.top_logprobs[lp.tokens.length - 1];
    assert.equal(Math.max(...Object.values(last)), lp.token_logprobs[lp.tokens.length - 1]);
  }
});

test('echo with generation: the prompt text comes first', async () => {
  const r = await client.completions.create({ model: 'tiny', prompt: PROMPT, max_tokens: 4, temperature: 0, echo: true });
  const plain = await client.completions.create({ model: 'tiny', prompt: PROMPT, max_tokens: 4, temperature: 0 });
  assert.equal(r.choices[0].text, PROMPT + plain.choices[0].text);
  // max_tokens 0: the prompt alone, no token generated.
  const zero = await client.completions.create({ model: 'tiny', prompt: PROMPT, max_tokens: 0, echo: true });
  assert.equal(zero.choices[0].text, PROMPT);
  assert.equal(zero.choices[0].finish_reason, 'length');
  assert.equal(zero.usage.completion_tokens, 0);
});

test('stop strings end the text just before the first match', async () => {
  const base = { model: 'tiny', prompt: 'Once upon a time', max_tokens: 40, temperature: 0, ignore_eos: true };
  const full = (await client.completions.create(base)).choices[0].text;
  // A stop string taken from the middle of the greedy answer (two characters, so it can span tokens).
  // Two printable ASCII characters (so the stop string is plain text), as late as the 4th.
  const chars = Array.from(full);
  let at = 3;
  while (at + 1 < chars.length && !/^[ -~]{2}$/.test(chars[at] + chars[at + 1])) at++;
  assert.ok(at + 1 < chars.length, `no ASCII pair in the answer: ${JSON.stringify(full)}`);
  const stop = chars[at] + chars[at + 1];
  const want = full.slice(0, full.indexOf(stop));
  const r = await client.completions.create({ ...base, stop: [stop, 'never-appears-xyz'] });
  assert.equal(r.choices[0].text, want);
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.choices[0].stop_reason, stop);
  // The same through a stream.
  let text = '';
  for await (const chunk of await client.completions.create({ ...base, stop, stream: true })) text += chunk.choices[0]?.text || '';
  assert.equal(text, want);
});

test('n > 1: greedy choices equal the single answer; a seeded choice i samples with seed + i', async () => {
  const base = { model: 'tiny', prompt: PROMPT, max_tokens: 10, ignore_eos: true };
  const greedy = await client.completions.create({ ...base, temperature: 0 });
  const three = await client.completions.create({ ...base, temperature: 0, n: 3 });
  assert.deepEqual(three.choices.map((c) => c.index), [0, 1, 2]);
  for (const c of three.choices) assert.equal(c.text, greedy.choices[0].text);
  assert.equal(three.usage.completion_tokens, 30);
  assert.equal(three.usage.prompt_tokens, greedy.usage.prompt_tokens);
  const two = await client.completions.create({ ...base, temperature: 1, seed: 42, n: 2, logprobs: 0, return_tokens_as_token_ids: true });
  const s42 = await client.completions.create({ ...base, temperature: 1, seed: 42, logprobs: 0, return_tokens_as_token_ids: true });
  const s43 = await client.completions.create({ ...base, temperature: 1, seed: 43, logprobs: 0, return_tokens_as_token_ids: true });
  assert.deepEqual(two.choices[0].logprobs.tokens, s42.choices[0].logprobs.tokens);
  assert.deepEqual(two.choices[1].logprobs.tokens, s43.choices[0].logprobs.tokens);
});

test('seeds: the same seed gives the same tokens, through a stream too', async () => {
  const base = { model: 'tiny', prompt: PROMPT, max_tokens: 24, ignore_eos: true, temperature: 1, top_p: 0.9, seed: 7,
                 logprobs: 0, return_tokens_as_token_ids: true };
  const a = await client.completions.create(base);
  const b = await client.completions.create(base);
  assert.deepEqual(a.choices[0].logprobs.tokens, b.choices[0].logprobs.tokens);
  const streamed = [];
  for await (const chunk of await client.completions.create({ ...base, stream: true })) {
    if (chunk.choices.length && chunk.choices[0].logprobs) streamed.push(...chunk.choices[0].logprobs.tokens);
  }
  assert.deepEqual(streamed, a.choices[0].logprobs.tokens);
});

test('a list of prompts: one choice per prompt, index = prompt position', async () => {
  const prompts = ['Hello', 'The quick brown fox'];
  const r = await client.completions.create({ model: 'tiny', prompt: prompts, max_tokens: 5, temperature: 0 });
  assert.equal(r.choices.length, 2);
  for (let i = 0; i < 2; i++) {
    const alone = await client.completions.create({ model: 'tiny', prompt: prompts[i], max_tokens: 5, temperature: 0 });
    assert.equal(r.choices[i].index, i);
    assert.equal(r.choices[i].text, alone.choices[0].text);
  }
  const lengths = await Promise.all(prompts.map(async (p) => (await tokenize({ prompt: p })).length));
  assert.equal(r.usage.prompt_tokens, lengths[0] + lengths[1]);
});

test('chat: the template renders the messages; stream equals the whole answer; usage', async () => {
  const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' },
                    { role: 'assistant', content: 'Hello.' }, { role: 'user', content: 'Tell me more' }];
  const r = await client.chat.completions.create({ model: 'tiny', messages, max_tokens: 12, temperature: 0, ignore_eos: true });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(r.choices[0].finish_reason, 'length');
  const promptIds = await tokenize({ messages });
  assert.deepEqual(r.usage, { prompt_tokens: promptIds.length, completion_tokens: 12, total_tokens: promptIds.length + 12 });
  let content = '', role = null, finish = null, usage = null;
  const stream = await client.chat.completions.create({ model: 'tiny', messages, max_tokens: 12, temperature: 0, ignore_eos: true,
                                                        stream: true, stream_options: { include_usage: true } });
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (!chunk.choices.length) { usage = chunk.usage; continue; }
    const d = chunk.choices[0].delta;
    if (d.role) role = d.role;
    content += d.content || '';
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  assert.equal(role, 'assistant');
  assert.equal(content, r.choices[0].message.content);
  assert.equal(finish, 'length');
  assert.deepEqual(usage, r.usage);
});

test('chat logprobs: the chosen token is the top alternative when greedy', async () => {
  const r = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 6,
                                                   temperature: 0, ignore_eos: true, logprobs: true, top_logprobs: 3 });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, 6);
  for (const t of content) {
    assert.equal(t.top_logprobs.length, 3);
    assert.equal(t.top_logprobs[0].token, t.token);
    assert.ok(Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-6);
    assert.ok(t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob);
    assert.ok(Array.isArray(t.bytes));
  }
});

test('side endpoints: models, version, health, tokenize/detokenize round trip', async () => {
  const models = await client.models.list();
  const ids = [];
  for await (const m of models) ids.push(m.id);
  assert.deepEqual(ids, ['tiny']);
  const version = await (await fetch(server.base + '/version')).json();
  assert.match(version.version, /^\d+\.\d+\.\d+$/);
  assert.equal((await fetch(server.base + '/health')).status, 200);
  const t = await h.post(server.base, '/tokenize', { prompt: 'hello world', add_special_tokens: false });
  assert.equal(t.json.count, t.json.tokens.length);
  const d = await h.post(server.base, '/detokenize', { tokens: t.json.tokens });
  assert.equal(d.json.prompt, 'hello world');
});
