// Structured output end to end: response_format json_object and json_schema through the
// official openai client, on chat and completions, streamed and not. Every output that
// finishes with "stop" is parsed with JSON.parse and validated against its schema by
// Ajv (a third-party JSON Schema validator), on random schemas over the tiny random
// model (which writes whatever the grammar lets it) and on the trained default model.
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const Ajv = require('ajv');
const h = require('./harness');

const ROOT = path.resolve(__dirname, '../..');
let server, client;

before(async () => {
  server = await h.startServer(h.makeModel(), ['--served-model-name', 'tiny']);
  client = server.client();
});

after(async () => {
  assert.equal(await server.stop(), 0, 'latte serve exits 0 on SIGTERM');
});

// A seeded generator (mulberry32), so a failing schema can be made again.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// A random schema of what OpenAI's strict mode allows: objects with every property
// listed (some optional) and additionalProperties false, arrays with bounds, scalars,
// enum, const, anyOf, and a $ref to $defs.
function randomSchema(r, depth = 0) {
  const pick = (xs) => xs[Math.floor(r() * xs.length)];
  const kinds = depth >= 2 ? ['integer', 'boolean', 'null', 'enum', 'number', 'const', 'shortString']
                           : ['object', 'object', 'array', 'anyOf', 'integer', 'boolean', 'enum', 'shortString'];
  switch (pick(kinds)) {
    case 'object': {
      const properties = {};
      const n = 1 + Math.floor(r() * 3);
      for (let i = 0; i < n; ++i) properties[`p${depth}${i}`] = randomSchema(r, depth + 1);
      const names = Object.keys(properties);
      return { type: 'object', properties, required: names.filter(() => r() < 0.7), additionalProperties: false };
    }
    case 'array': {
      const minItems = Math.floor(r() * 2);
      return { type: 'array', items: randomSchema(r, depth + 1), minItems, maxItems: minItems + Math.floor(r() * 3) };
    }
    case 'anyOf': return { anyOf: [randomSchema(r, depth + 1), randomSchema(r, depth + 1)] };
    case 'enum': return { enum: ['red', 'green', 7, null, true].filter(() => r() < 0.6).concat(['blue']) };
    case 'const': return { const: pick([42, 'x', [1, { a: null }], false]) };
    // The random model stops a free string only by chance: an enum of strings keeps
    // most outputs short, and one free string per schema here and there still tests them.
    case 'shortString': return r() < 0.3 ? { type: 'string' } : { enum: ['a b', 'é', 'tab\tx', 'q"uote'] };
    default: return { type: pick(['integer', 'boolean', 'null', 'number']) };
  }
}

function withDefs(r) {
  return { $defs: { item: randomSchema(r, 1) }, type: 'object',
           properties: { first: { $ref: '#/$defs/item' }, rest: { type: 'array', items: { $ref: '#/$defs/item' }, maxItems: 2 } },
           required: ['first', 'rest'], additionalProperties: false };
}

// Asks `c` for `rounds` random schemas (every fourth with $defs), n choices each, and
// checks every output that finished with "stop" with Ajv. Returns [complete, total].
async function checkRandomSchemas(c, model, { seed, rounds, prompts, n, maxTokens }) {
  const ajv = new Ajv({ strict: false });
  const r = rng(seed);
  let complete = 0, total = 0;
  for (let i = 0; i < rounds; ++i) {
    const schema = i % 4 === 3 ? withDefs(r) : randomSchema(r);
    const validate = ajv.compile(schema);
    const reply = await c.chat.completions.create({
      model, messages: [{ role: 'user', content: prompts[i % prompts.length] }], max_tokens: maxTokens,
      temperature: 1, seed: i, n,
      response_format: { type: 'json_schema', json_schema: { name: `s${i}`, schema, strict: true } },
    });
    for (const choice of reply.choices) {
      ++total;
      assert.ok(['stop', 'length'].includes(choice.finish_reason), choice.finish_reason);
      if (choice.finish_reason !== 'stop') continue;
      ++complete;
      let value;
      assert.doesNotThrow(() => { value = JSON.parse(choice.message.content); }, choice.message.content);
      assert.ok(validate(value), `schema ${JSON.stringify(schema)}\noutput ${choice.message.content}\n` +
                JSON.stringify(validate.errors));
    }
  }
  return [complete, total];
}

test('json_schema on chat: every complete output parses and validates (random schemas, Ajv)', async () => {
  const [complete, total] = await checkRandomSchemas(client, 'tiny', {
    seed: 20261203, rounds: 16, n: 3, maxTokens: 160, prompts: ['Answer as JSON', 'x', 'Give me an object: ', '{'] });
  assert.ok(complete >= total / 3, `only ${complete} of ${total} outputs completed`);
});

// Members come in the order the schema lists its properties, as OpenAI's structured
// outputs write them: the names are chosen so that no order by name agrees. (The server
// once read request bodies into sorted objects and wrote members by name.)
test('json_schema: members come in the schema\'s property order, nested too; on completions and responses too', async () => {
  const inner = { type: 'object', properties: { zulu: { type: 'boolean' }, alpha: { enum: [1, 2] }, mike: { type: 'null' } },
                  required: ['zulu', 'alpha', 'mike'], additionalProperties: false };
  const schema = { type: 'object', properties: { yankee: { type: 'boolean' }, bravo: inner, xray: { enum: ['a', 'b'] } },
                   required: ['yankee', 'bravo', 'xray'], additionalProperties: false };
  const response_format = { type: 'json_schema', json_schema: { name: 'order', schema, strict: true } };
  const outputs = [];
  for (const seed of [1, 2, 3]) {
    const chat = await client.chat.completions.create({
      model: 'tiny', messages: [{ role: 'user', content: 'x' }], max_tokens: 200, temperature: 1, seed, response_format });
    outputs.push(chat.choices[0]);
    const completion = await client.completions.create({
      model: 'tiny', prompt: 'JSON:', max_tokens: 200, temperature: 1, seed, response_format });
    outputs.push({ finish_reason: completion.choices[0].finish_reason, message: { content: completion.choices[0].text } });
    const response = await client.responses.create({
      model: 'tiny', input: 'x', max_output_tokens: 200, temperature: 1,
      text: { format: { type: 'json_schema', name: 'order', schema, strict: true } } });
    outputs.push({ finish_reason: response.status === 'completed' ? 'stop' : response.status,
                   message: { content: response.output_text } });
  }
  for (const c of outputs) {
    assert.equal(c.finish_reason, 'stop', c.message.content);  // every value is bounded
    const v = JSON.parse(c.message.content);
    assert.deepEqual(Object.keys(v), ['yankee', 'bravo', 'xray'], c.message.content);
    assert.deepEqual(Object.keys(v.bravo), ['zulu', 'alpha', 'mike'], c.message.content);
  }
});

test('json_object on completions; the stream equals the whole reply', async () => {
  const body = { model: 'tiny', prompt: 'Some JSON:', max_tokens: 120, temperature: 0,
                 response_format: { type: 'json_object' } };
  const whole = await client.completions.create(body);
  const text = whole.choices[0].text;
  assert.equal(text[0], '{');
  if (whole.choices[0].finish_reason === 'stop') {
    const v = JSON.parse(text);
    assert.equal(typeof v, 'object');
    assert.ok(!Array.isArray(v) && v !== null);
  }
  let streamed = '';
  for await (const chunk of await client.completions.create({ ...body, stream: true })) {
    streamed += chunk.choices[0]?.text ?? '';
  }
  assert.equal(streamed, text);
});

test('the client\'s parse helper gets a parsed object from a schema', async () => {
  const schema = { type: 'object', properties: { ok: { type: 'boolean' }, n: { enum: [1, 2, 3] } },
                   required: ['ok', 'n'], additionalProperties: false };
  const reply = await client.chat.completions.parse({
    model: 'tiny', messages: [{ role: 'user', content: 'x' }], max_tokens: 40, temperature: 0,
    response_format: { type: 'json_schema', json_schema: { name: 'flag', schema, strict: true } },
  });
  const choice = reply.choices[0];
  assert.equal(choice.finish_reason, 'stop');
  assert.equal(typeof choice.message.parsed.ok, 'boolean');
  assert.ok([1, 2, 3].includes(choice.message.parsed.n));
});

test('a schema feature latte cannot honour is a 400 naming it; the server keeps serving', async () => {
  const bad = [
    [{ type: 'string', pattern: '^a+$' }, '"pattern" is not supported'],
    [{ type: 'object', properties: { when: { type: 'string', format: 'date-time' } } }, '"format" at properties.when'],
    [{ type: 'array', maxItems: 5000 }, '"maxItems" must be an integer'],
    [{ $ref: '#/$defs/none' }, 'points at nothing'],
  ];
  for (const [schema, says] of bad) {
    await assert.rejects(
      client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'x' }], max_tokens: 4,
                                       response_format: { type: 'json_schema', json_schema: { name: 'b', schema } } }),
      (e) => e.status === 400 && e.error?.param === 'response_format.json_schema.schema' && e.message.includes(says),
    );
  }
  await assert.rejects(
    client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'x' }], max_tokens: 4,
                                     response_format: { type: 'grammar' } }),
    (e) => e.status === 400 && e.error?.param === 'response_format.type');
  const ok = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'x' }], max_tokens: 4 });
  assert.equal(ok.choices.length, 1);
});

test('the trained default model answers in the schema, and on random schemas and prompts', async () => {
  const s = await h.startServer(path.join(ROOT, 'models/default'), ['--served-model-name', 'default']);
  try {
    const c = s.client();
    const schema = { type: 'object', properties: { answer: { type: 'integer' }, unit: { enum: ['apples', 'books', 'none'] } },
                     required: ['answer', 'unit'], additionalProperties: false };
    const validate = new Ajv({ strict: false }).compile(schema);
    for (const seed of [1, 2, 3]) {
      const reply = await c.chat.completions.create({
        model: 'default', max_tokens: 40, temperature: 0.7, seed,
        messages: [{ role: 'user', content: 'Question: Tom has 25 apples. He buys 17 more apples. How many apples does Tom have now?' }],
        response_format: { type: 'json_schema', json_schema: { name: 'answer', schema } },
      });
      const choice = reply.choices[0];
      assert.equal(choice.finish_reason, 'stop', choice.message.content);
      assert.ok(validate(JSON.parse(choice.message.content)), choice.message.content);
    }
    const [complete, total] = await checkRandomSchemas(c, 'default', {
      seed: 77, rounds: 12, n: 2, maxTokens: 120,
      prompts: ['Question: Zoe has 9 books. She loses 4 of them. How many books does she have left?',
                'Question: What is 123 + 456?', 'List some items as JSON.', 'Hello'] });
    assert.ok(complete >= total / 3, `only ${complete} of ${total} outputs completed`);
  } finally {
    assert.equal(await s.stop(), 0);
  }
});
