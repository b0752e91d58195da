// 32 clients at once: every greedy answer equals the answer the same request gets
// alone, in absorbed and materialized mode, and with a pool small enough that the
// engine must preempt (checked through latte:num_preemptions_total).
'use strict';
const { test } = require('node:test');
const assert = require('node:assert/strict');
const h = require('./harness');

const CLIENTS = 32;

// Requests of different lengths and shapes (text and ids), every one greedy.
function requests() {
  const out = [];
  for (let i = 0; i < CLIENTS; i++) {
    const body = { model: 'tiny', max_tokens: 12 + (i % 5) * 4, temperature: 0, ignore_eos: true, logprobs: 0,
                   return_tokens_as_token_ids: true };
    if (i % 2) {
      body.prompt = Array.from({ length: 5 + (i * 7) % 40 }, (_, k) => 2 + ((i * 31 + k * 17) % 500));
    } else {
      body.prompt = `Request ${i}: ` + 'the quick brown fox jumps over the lazy dog '.repeat(1 + (i % 4));
    }
    out.push(body);
  }
  return out;
}

async function runMode(args, check = () => {}) {
  const server = await h.startServer(h.makeModel(), ['--served-model-name', 'tiny', ...args]);
  try {
    const client = server.client();
    const reqs = requests();
    const alone = [];
    for (const r of reqs) alone.push((await client.completions.create(r)).choices[0].logprobs.tokens);
    const together = await Promise.all(reqs.map(async (r, i) => {
      if (i % 3 === 0) {  // a third of them streamed
        const tokens = [];
        for await (const c of await client.completions.create({ ...r, stream: true })) {
          if (c.choices.length && c.choices[0].logprobs) tokens.push(...c.choices[0].logprobs.tokens);
        }
        return tokens;
      }
      return (await client.completions.create(r)).choices[0].logprobs.tokens;
    }));
    for (let i = 0; i < reqs.length; i++) {
      assert.deepEqual(h.ids(together[i]), h.ids(alone[i]), `request ${i} differs when run with the others`);
      assert.equal(together[i].length, reqs[i].max_tokens);
    }
    const m = await h.metrics(server.base);
    check(m);
    const [ok, , after] = await h.waitForMetrics(server.base, (x) => x['latte:kv_cache_usage_perc'] === 0, 1000);
    assert.ok(ok, JSON.stringify(after));
  } finally {
    assert.equal(await server.stop(), 0);
  }
}

test('32 concurrent greedy clients = alone (absorbed)', async () => {
  await runMode(['--mla-mode', 'absorbed']);
});

test('32 concurrent greedy clients = alone (materialized)', async () => {
  await runMode(['--mla-mode', 'materialized']);
});

test('32 concurrent greedy clients = alone with a pool that forces preemption', async () => {
  // 24 blocks of 16 tokens: the largest request (60 tokens) fits alone, 32 at once do not.
  await runMode(['--num-kv-blocks', '24', '--block-size', '16'], (m) => {
    assert.ok(m['latte:num_preemptions_total'] > 0, `no preemption: ${JSON.stringify(m)}`);
  });
});
