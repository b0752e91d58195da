// Tools through the official openai client: tools and tool_choice read as vLLM reads
// them, the tool-call history rendered by the template, the server flags
// (--enable-auto-tool-choice, --tool-call-parser, or the format told from the chat
// template), tool_choice "required" and named functions by constrained decoding on a
// random model and on the trained default model (every call's arguments validated by
// Ajv against its function's schema; the openai client's runTools), and the 400s.
// (The calls a model writes under "auto" are read by the parser tested in
// tests/tool_call_parser_test.cc and tests/response_format_test.cc: neither model
// here writes call markers.)
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const Ajv = require('ajv');
const h = require('./harness');

const TOOLS = [{ type: 'function', function: { name: 'get_weather', description: 'Weather in a city',
                                                parameters: { type: 'object', properties: { city: { type: 'string' } },
                                                              required: ['city'] } } }];
// The call's turn with content '' (the tiny model's template cannot add null to a
// string; DeepSeek's templates take either, and the R1 test below sends null).
const HISTORY = [
  { role: 'user', content: 'Weather in Paris?' },
  { role: 'assistant', content: '',
    tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
  { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 21}' },
  { role: 'user', content: 'And now?' },
];
let server, client;

before(async () => {
  server = await h.startServer(h.makeModel(), ['--served-model-name', 'tiny', '--enable-auto-tool-choice',
                                               '--tool-call-parser', 'deepseek_v3']);
  client = server.client();
});

after(async () => {
  assert.equal(await server.stop(), 0, 'latte serve exits 0 on SIGTERM');
});

test('tools with tool_choice auto: a reply in OpenAI\'s shape; the stream equals it', async () => {
  assert.match(server.log(), /tool calls read as deepseek_v3 \(--tool-call-parser\)/);
  const body = { model: 'tiny', messages: HISTORY, tools: TOOLS, max_tokens: 12, temperature: 0 };
  const r = await client.chat.completions.create(body);
  const c = r.choices[0];
  assert.ok(['stop', 'length', 'tool_calls'].includes(c.finish_reason));
  assert.equal(c.message.role, 'assistant');
  let streamed = '';
  let finish;
  for await (const chunk of await client.chat.completions.create({ ...body, stream: true })) {
    for (const ch of chunk.choices) {
      streamed += ch.delta.content ?? '';
      finish = ch.finish_reason ?? finish;
    }
  }
  assert.equal(streamed, c.message.content ?? '');
  assert.equal(finish, c.finish_reason);
});

test('the tool-call history is rendered as the chat template writes it', async () => {
  const r = await client.chat.completions.create({ model: 'tiny', messages: HISTORY, tools: TOOLS, max_tokens: 1 });
  const tok = await h.post(server.base, '/tokenize', { model: 'tiny', messages: HISTORY, tools: TOOLS });
  assert.equal(tok.status, 200, tok.text);
  assert.equal(r.usage.prompt_tokens, tok.json.count);
});

test('what is not there yet, and bad tools, are 400s naming the field', async () => {
  const user = [{ role: 'user', content: 'x' }];
  const cases = [
    [{ tools: TOOLS, tool_choice: { type: 'function', function: { name: 'no_such_tool' } } }, 'tool_choice.function.name'],
    [{ tools: TOOLS, tool_choice: 'required', response_format: { type: 'json_object' } }, 'response_format'],
    [{ tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'string', format: 'email' } } }],
       tool_choice: 'required' }, 'tools'],
    [{ tool_choice: 'auto' }, 'tool_choice'],
    [{ tools: [{ type: 'function', function: { name: 'has space' } }] }, 'tools[0].function.name'],
    [{ tools: [{ type: 'code_interpreter' }] }, 'tools[0].type'],
  ];
  for (const [extra, param] of cases) {
    await assert.rejects(client.chat.completions.create({ model: 'tiny', messages: user, max_tokens: 2, ...extra }),
                         (e) => e.status === 400 && e.error?.param === param, JSON.stringify(extra));
  }
});

test('without --enable-auto-tool-choice, tools are vLLM\'s 400; the flags are checked at start', async () => {
  const plain = await h.startServer(h.makeModel(), ['--served-model-name', 'tiny']);
  try {
    await assert.rejects(
      plain.client().chat.completions.create({ model: 'tiny', messages: HISTORY, tools: TOOLS, max_tokens: 2 }),
      (e) => e.status === 400 && e.error?.param === 'tool_choice' && /--enable-auto-tool-choice/.test(e.message));
    const none = await plain.client().chat.completions.create({ model: 'tiny', messages: HISTORY, tools: TOOLS,
                                                                tool_choice: 'none', max_tokens: 2 });
    assert.equal(none.choices.length, 1);
  } finally {
    assert.equal(await plain.stop(), 0);
  }
  const run = (args) => spawnSync(h.LATTE, ['serve', '--model', h.makeModel(), '--port', '0', '--memory-gb', '1', ...args],
                                  { encoding: 'utf8', timeout: 60000 });
  let r = run(['--tool-call-parser', 'deepseek_v3']);
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /--tool-call-parser needs --enable-auto-tool-choice/);
  r = run(['--enable-auto-tool-choice', '--tool-call-parser', 'hermes']);
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /--tool-call-parser must be deepseek_v3 or deepseek_v31/);
  // The tiny model's template writes no tool calls: the format cannot be told from it.
  r = run(['--enable-auto-tool-choice']);
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /give --tool-call-parser/);
});

// A copy of the tiny model (its files linked) whose chat template is `template`; the
// caller removes the directory.
function tinyModelWithTemplate(template) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'latte-tools-'));
  const src = h.makeModel();
  for (const f of fs.readdirSync(src)) fs.symlinkSync(path.join(src, f), path.join(dir, f));
  const config = JSON.parse(fs.readFileSync(path.join(src, 'tokenizer_config.json'), 'utf8'));
  config.chat_template = template;
  fs.unlinkSync(path.join(dir, 'tokenizer_config.json'));
  fs.writeFileSync(path.join(dir, 'tokenizer_config.json'), JSON.stringify(config));
  return dir;
}

test('the format is told from a DeepSeek chat template', async () => {
  // The tiny model with R1's template (which writes calls back in V3's format).
  const dir = tinyModelWithTemplate(
    fs.readFileSync(path.join(__dirname, '../npm/deepseek_r1_chat_template.jinja'), 'utf8'));
  try {
    const s = await h.startServer(dir, ['--served-model-name', 'r1t', '--enable-auto-tool-choice']);
    try {
      assert.match(s.log(), /tool calls read as deepseek_v3 \(the format the chat template writes\)/);
      const messages = HISTORY.map((m) => (m.tool_calls ? { ...m, content: null } : m));
      const tok = await h.post(s.base, '/tokenize', { model: 'r1t', messages, tools: TOOLS });
      assert.equal(tok.status, 200, tok.text);
      const detok = await h.post(s.base, '/detokenize', { model: 'r1t', tokens: tok.json.tokens });
      assert.match(detok.json.prompt,
                   /<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n\{"city": "Paris"\}\n```<｜tool▁call▁end｜>/);
      assert.match(detok.json.prompt, /<｜tool▁output▁begin｜>\{"temp": 21\}<｜tool▁output▁end｜>/);
      // The same history as Responses input items renders the same prompt.
      const input = [
        HISTORY[0],
        { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city": "Paris"}' },
        { type: 'function_call_output', call_id: 'call_1', output: '{"temp": 21}' },
        HISTORY[3],
      ];
      const tools = TOOLS.map((t) => ({ type: 'function', ...t.function }));
      const r = await s.client().responses.create({ model: 'r1t', input, tools, tool_choice: 'none',
                                                    max_output_tokens: 1 });
      assert.equal(r.usage.input_tokens, tok.json.count);
    } finally {
      assert.equal(await s.stop(), 0);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

// Two tools with schemas a random model must fill; enums keep the outputs short.
const FORCED_TOOLS = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather in a city',
    parameters: { type: 'object', properties: { city: { enum: ['Paris', 'Oslo', 'Lima'] },
                                                days: { type: 'integer' }, metric: { type: 'boolean' } },
                  required: ['city', 'days'], additionalProperties: false } } },
  { type: 'function', function: { name: 'now', parameters: { type: 'object', properties: {}, additionalProperties: false } } },
];

test('tool_choice required: one or more calls, each validating against its function', async () => {
  const ajv = new Ajv({ strict: false });
  const validators = Object.fromEntries(FORCED_TOOLS.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));
  let complete = 0;
  for (let seed = 0; seed < 8; ++seed) {
    const body = { model: 'tiny', messages: [{ role: 'user', content: `Call a tool ${seed}` }], tools: FORCED_TOOLS,
                   tool_choice: 'required', max_tokens: 120, temperature: 1, seed };
    const r = await client.chat.completions.create(body);
    const c = r.choices[0];
    if (c.finish_reason === 'length') continue;
    ++complete;
    assert.equal(c.finish_reason, 'tool_calls');
    assert.equal(c.message.content, null);
    assert.ok(c.message.tool_calls.length >= 1);
    for (const call of c.message.tool_calls) {
      assert.equal(call.type, 'function');
      assert.match(call.id, /^chatcmpl-tool-/);
      const validate = validators[call.function.name];
      assert.ok(validate, call.function.name);
      assert.ok(validate(JSON.parse(call.function.arguments)), `${call.function.arguments} ${JSON.stringify(validate.errors)}`);
    }
    // Streamed, the same seed gives the same calls, call by call.
    const calls = [];
    let finish;
    for await (const chunk of await client.chat.completions.create({ ...body, stream: true })) {
      for (const ch of chunk.choices) {
        for (const piece of ch.delta.tool_calls ?? []) {
          if (piece.id) calls[piece.index] = { name: piece.function.name, arguments: '' };
          calls[piece.index].arguments += piece.function.arguments ?? '';
        }
        finish = ch.finish_reason ?? finish;
      }
    }
    assert.equal(finish, 'tool_calls');
    assert.deepEqual(calls, c.message.tool_calls.map((t) => ({ name: t.function.name, arguments: t.function.arguments })));
  }
  assert.ok(complete >= 4, `only ${complete} of 8 finished within max_tokens`);
});

// A forced call's arguments list the parameters in the order the function's schema does
// (names chosen so that no order by name agrees), and so does the prompt the template
// renders the tools into: the server keeps the request's member order.
test('forced arguments and the rendered tools keep the parameters\' order', async () => {
  const tool = { type: 'function', function: { name: 'book', parameters: {
    type: 'object', properties: { zone: { enum: ['a', 'b'] }, count: { type: 'integer' }, after: { type: 'boolean' } },
    required: ['zone', 'count', 'after'], additionalProperties: false } } };
  let complete = 0;
  for (const seed of [1, 2, 3, 4]) {
    const r = await client.chat.completions.create({
      model: 'tiny', messages: [{ role: 'user', content: 'Book' }], tools: [tool], max_tokens: 120, temperature: 1, seed,
      tool_choice: { type: 'function', function: { name: 'book' } } });
    const c = r.choices[0];
    if (c.finish_reason === 'length') continue;  // a free integer may run on
    ++complete;
    assert.deepEqual(Object.keys(JSON.parse(c.message.tool_calls[0].function.arguments)), ['zone', 'count', 'after'],
                     c.message.tool_calls[0].function.arguments);
  }
  assert.ok(complete >= 2, `only ${complete} of 4 finished within max_tokens`);
  // A template with a tools section (as V3.1's), on the tiny model.
  const dir = tinyModelWithTemplate('{% for t in tools %}{{ t.function.parameters | tojson }}\n{% endfor %}' +
                                    '{% for m in messages %}{{ m.content }}{% endfor %}');
  try {
    const s = await h.startServer(dir, ['--served-model-name', 'listed']);
    try {
      const tok = await h.post(s.base, '/tokenize', { model: 'listed', messages: [{ role: 'user', content: 'Book' }],
                                                      tools: [tool] });
      assert.equal(tok.status, 200, tok.text);
      const detok = await h.post(s.base, '/detokenize', { model: 'listed', tokens: tok.json.tokens });
      const prompt = detok.json.prompt;
      const at = (name) => prompt.indexOf(`"${name}"`);
      assert.ok(at('zone') >= 0 && at('zone') < at('count') && at('count') < at('after'), prompt);
    } finally {
      assert.equal(await s.stop(), 0);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('a named tool_choice calls that function; the client\'s runTools runs it, streamed or not', async () => {
  const validate = new Ajv({ strict: false }).compile(FORCED_TOOLS[0].function.parameters);
  for (const stream of [false, true]) {
    const seen = [];
    const runner = client.chat.completions.runTools({
      model: 'tiny', messages: [{ role: 'user', content: 'Weather?' }], max_tokens: 60, temperature: 0, stream,
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
      tools: [{ type: 'function', function: { name: 'get_weather', parameters: FORCED_TOOLS[0].function.parameters,
                                              parse: JSON.parse, function: (args) => { seen.push(args); return 'sunny'; } } }],
    });
    await runner.done();
    assert.equal(seen.length, 1, 'runTools called the function once');
    assert.ok(validate(seen[0]), JSON.stringify(seen[0]));
    const call = await runner.finalFunctionToolCall();
    assert.equal(call.name, 'get_weather');
    assert.deepEqual(JSON.parse(call.arguments), seen[0]);
  }
});

test('on the trained default model: required and named calls validate, runTools runs them, streamed or not', async () => {
  const s = await h.startServer(path.join(__dirname, '../../models/default'), ['--served-model-name', 'default']);
  try {
    const c = s.client();
    const ajv = new Ajv({ strict: false });
    const validate = Object.fromEntries(FORCED_TOOLS.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));
    const messages = [{ role: 'user', content: 'What is the weather in Oslo for 2 days?' }];
    // parallel_tool_calls false: one call (this model would write call after call).
    const body = { model: 'default', messages, tools: FORCED_TOOLS, tool_choice: 'required', parallel_tool_calls: false,
                   max_tokens: 120, temperature: 0 };
    const r = await c.chat.completions.create(body);
    assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(r.choices[0].message));
    const calls = r.choices[0].message.tool_calls;
    assert.equal(calls.length, 1);
    assert.ok(validate[calls[0].function.name](JSON.parse(calls[0].function.arguments)), calls[0].function.arguments);
    const streamed = [];
    for await (const chunk of await c.chat.completions.create({ ...body, stream: true })) {
      for (const piece of chunk.choices[0]?.delta?.tool_calls ?? []) streamed.push(piece.function);
    }
    assert.deepEqual(streamed, [calls[0].function]);
    for (const stream of [false, true]) {
      const seen = [];
      const runner = c.chat.completions.runTools({
        model: 'default', messages, max_tokens: 60, temperature: 0, stream,
        tool_choice: { type: 'function', function: { name: 'get_weather' } },
        tools: [{ type: 'function', function: { name: 'get_weather', parameters: FORCED_TOOLS[0].function.parameters,
                                                parse: JSON.parse, function: (args) => { seen.push(args); return 'sunny'; } } }],
      });
      await runner.done();
      assert.equal(seen.length, 1, 'runTools called the function once');
      assert.ok(validate.get_weather(seen[0]), JSON.stringify(seen[0]));
    }
  } finally {
    assert.equal(await s.stop(), 0);
  }
});
