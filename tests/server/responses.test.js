// POST /v1/responses through the official openai client's `responses` resource, on the
// trained default model: plain, streaming (OpenAI's event sequence), structured
// (text.format json_schema, validated by Ajv, and the client's parse helper), function
// tools (tool_choice required and named: function_call items whose arguments Ajv
// validates, streamed through the client's responses.stream; the calls and their
// outputs sent back as input items render as chat's tool_calls and tool messages), the
// answer equal to chat completions' for the same messages, and the errors.
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const Ajv = require('ajv');
const h = require('./harness');

const ROOT = path.resolve(__dirname, '../..');
const QUESTION = 'Question: Tom has 25 apples. He buys 17 more apples. How many apples does Tom have now?';
let server, client;

before(async () => {
  server = await h.startServer(path.join(ROOT, 'models/default'), ['--served-model-name', 'default']);
  client = server.client();
});

after(async () => {
  assert.equal(await server.stop(), 0, 'latte serve exits 0 on SIGTERM');
});

test('a plain response equals the chat completion of the same messages', async () => {
  const r = await client.responses.create({ model: 'default', input: QUESTION, instructions: 'Answer the question.',
                                            max_output_tokens: 64, temperature: 0 });
  assert.equal(r.object, 'response');
  assert.match(r.id, /^resp_/);
  assert.equal(r.model, 'default');
  assert.equal(r.instructions, 'Answer the question.');
  assert.equal(r.store, false);
  assert.equal(r.output.length, 1);
  const item = r.output[0];
  assert.equal(item.type, 'message');
  assert.equal(item.role, 'assistant');
  assert.match(item.id, /^msg_/);
  assert.equal(item.content[0].type, 'output_text');
  assert.ok(r.output_text.length > 0, 'the client\'s output_text joins the output_text parts');
  const chat = await client.chat.completions.create({
    model: 'default', max_tokens: 64, temperature: 0,
    messages: [{ role: 'system', content: 'Answer the question.' }, { role: 'user', content: QUESTION }] });
  assert.equal(r.output_text, chat.choices[0].message.content);
  assert.equal(r.usage.input_tokens, chat.usage.prompt_tokens);
  assert.equal(r.usage.output_tokens, chat.usage.completion_tokens);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
  assert.equal(r.status, chat.choices[0].finish_reason === 'length' ? 'incomplete' : 'completed');
});

test('input as a list of messages with parts; max_output_tokens cuts it: incomplete', async () => {
  const r = await client.responses.create({
    model: 'default', max_output_tokens: 3, temperature: 0,
    input: [{ role: 'user', content: [{ type: 'input_text', text: QUESTION }] },
            { role: 'assistant', content: [{ type: 'output_text', text: '25 + 17' }] },
            { type: 'message', role: 'user', content: 'Go on.' }] });
  assert.equal(r.status, 'incomplete');
  assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
  assert.equal(r.usage.output_tokens, 3);
  assert.equal(r.output[0].status, 'incomplete');
});

test('streaming sends OpenAI\'s event sequence; the deltas add up to the whole response', async () => {
  const body = { model: 'default', input: QUESTION, max_output_tokens: 48, temperature: 0 };
  const whole = await client.responses.create(body);
  const events = [];
  for await (const e of await client.responses.create({ ...body, stream: true })) events.push(e);
  const types = events.map((e) => e.type);
  const deltas = types.filter((t) => t === 'response.output_text.delta').length;
  assert.ok(deltas >= 1);
  assert.deepEqual(types, ['response.created', 'response.in_progress', 'response.output_item.added',
                           'response.content_part.added', ...Array(deltas).fill('response.output_text.delta'),
                           'response.output_text.done', 'response.content_part.done', 'response.output_item.done',
                           whole.status === 'completed' ? 'response.completed' : 'response.incomplete']);
  events.forEach((e, i) => assert.equal(e.sequence_number, i));
  assert.equal(events[0].response.status, 'in_progress');
  const text = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
  assert.equal(text, whole.output_text);
  assert.equal(events.at(-4).text, text);
  const last = events.at(-1).response;
  assert.equal(last.id, events[0].response.id);
  assert.equal(last.output[0].content[0].text, text);
  assert.deepEqual(last.usage, whole.usage);
});

test('text.format json_schema: the output validates; the client\'s parse helper reads it', async () => {
  const schema = { type: 'object', properties: { answer: { type: 'integer' }, unit: { enum: ['apples', 'books'] } },
                   required: ['answer', 'unit'], additionalProperties: false };
  const validate = new Ajv({ strict: false }).compile(schema);
  const format = { type: 'json_schema', name: 'answer', schema, strict: true };
  const r = await client.responses.create({ model: 'default', input: QUESTION, max_output_tokens: 40,
                                            temperature: 0, text: { format } });
  assert.equal(r.status, 'completed', r.output_text);
  assert.ok(validate(JSON.parse(r.output_text)), r.output_text);
  assert.deepEqual(r.text.format, format);
  const parsed = await client.responses.parse({ model: 'default', input: QUESTION, max_output_tokens: 40,
                                                temperature: 0, text: { format } });
  assert.ok(validate(parsed.output_parsed), JSON.stringify(parsed.output_parsed));
  const streamed = [];
  for await (const e of await client.responses.create({ model: 'default', input: QUESTION, max_output_tokens: 40,
                                                        temperature: 0, text: { format }, stream: true })) {
    if (e.type === 'response.output_text.delta') streamed.push(e.delta);
  }
  assert.equal(streamed.join(''), r.output_text);
});

const WEATHER = { type: 'function', name: 'get_weather', description: 'Weather in a city', strict: true,
                  parameters: { type: 'object', properties: { city: { enum: ['Paris', 'Rome'] }, days: { type: 'integer' } },
                                required: ['city', 'days'], additionalProperties: false } };
const NOW = { type: 'function', name: 'now', parameters: { type: 'object', properties: {} } };
const validateWeather = new Ajv({ strict: false }).compile(WEATHER.parameters);

// The output items without their random ids.
function withoutIds(output) {
  return output.map(({ id, call_id, ...rest }) => rest);  // eslint-disable-line no-unused-vars
}

// (parallel_tool_calls false: one call, where this model would write call after call
// until max_output_tokens.)
test('function tools: required and named tool_choice give function_call items; streamed the same', async () => {
  for (const tool_choice of ['required', { type: 'function', name: 'get_weather' }]) {
    const body = { model: 'default', input: 'Weather in Paris for 3 days?', tools: [WEATHER, NOW], tool_choice,
                   parallel_tool_calls: false, max_output_tokens: 120, temperature: 0 };
    const r = await client.responses.create(body);
    assert.equal(r.status, 'completed', JSON.stringify(r.output));
    assert.deepEqual(r.tools, [WEATHER, NOW]);
    assert.deepEqual(r.tool_choice, tool_choice);
    assert.equal(r.parallel_tool_calls, false);
    assert.equal(r.output.length, 1);
    for (const item of r.output) {
      assert.equal(item.type, 'function_call', JSON.stringify(item));
      assert.match(item.id, /^fc_/);
      assert.match(item.call_id, /^call_/);
      assert.equal(item.status, 'completed');
      const args = JSON.parse(item.arguments);
      if (typeof tool_choice === 'object') assert.equal(item.name, 'get_weather');
      if (item.name === 'get_weather') assert.ok(validateWeather(args), item.arguments);
      else assert.equal(item.name, 'now');
    }
    const stream = client.responses.stream(body);
    const deltas = [];
    stream.on('response.function_call_arguments.delta', (e) => deltas.push(e.delta));
    const final = await stream.finalResponse();
    for (const item of final.output) {  // the client parses a strict tool's arguments
      assert.deepEqual(item.parsed_arguments, JSON.parse(item.arguments));
      delete item.parsed_arguments;
    }
    assert.deepEqual(withoutIds(final.output), withoutIds(r.output));
    assert.equal(deltas.join(''), r.output.map((item) => item.arguments).join(''));
  }
});

test('function_call and function_call_output items render as chat\'s tool calls and tool messages', async () => {
  const input = [
    { role: 'user', content: 'Weather in Paris?' },
    { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris","days":1}' },
    { type: 'function_call_output', call_id: 'call_1', output: '{"temp": 21}' },
    { type: 'reasoning', id: 'rs_1', summary: [] },
    { role: 'user', content: 'And tomorrow?' },
  ];
  const r = await client.responses.create({ model: 'default', input, tools: [WEATHER], tool_choice: 'none',
                                            max_output_tokens: 8, temperature: 0 });
  const messages = [
    { role: 'user', content: 'Weather in Paris?' },
    { role: 'assistant', content: '', tool_calls: [{ id: 'call_1', type: 'function',
                                                     function: { name: 'get_weather',
                                                                 arguments: '{"city":"Paris","days":1}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 21}' },
    { role: 'user', content: 'And tomorrow?' },
  ];
  const chat = await client.chat.completions.create({
    model: 'default', messages, max_tokens: 8, temperature: 0,
    tools: [{ type: 'function', function: { name: WEATHER.name, description: WEATHER.description,
                                            parameters: WEATHER.parameters, strict: true } }],
    tool_choice: 'none' });
  assert.equal(r.usage.input_tokens, chat.usage.prompt_tokens);
  assert.equal(r.output_text, chat.choices[0].message.content);
  assert.equal(r.output[0].type, 'message');
});

test('what latte cannot do is a 400 naming the field', async () => {
  const cases = [
    [{ input: 'x', previous_response_id: 'resp_123' }, 'previous_response_id'],
    [{ input: 'x', tools: [{ type: 'web_search' }] }, 'tools[0].type'],
    [{ input: 'x', tools: [{ type: 'function', name: 'bad name' }], tool_choice: 'required' }, 'tools[0].name'],
    [{ input: 'x', tools: [{ type: 'function', name: 'f', parameters: { type: 'object' } }] }, 'tool_choice'],
    [{ input: 'x', tools: [NOW], tool_choice: { type: 'function', name: 'g' } }, 'tool_choice.name'],
    [{ input: 'x', tools: [NOW], tool_choice: { type: 'file_search' } }, 'tool_choice'],
    [{ input: [{ type: 'function_call', call_id: 'c', name: 'f' }] }, 'input[0].arguments'],
    [{ input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'http://x/y.png' }] }] },
     'input[0].content[0].type'],
    [{ input: [{ type: 'function_call_output', call_id: 'c' }] }, 'input[0].output'],
    [{ input: [{ type: 'computer_call_output', call_id: 'c' }] }, 'input[0].type'],
    [{ input: [{ role: 'robot', content: 'x' }] }, 'input[0].role'],
    [{}, 'input'],
    [{ input: 'x', max_output_tokens: 0 }, 'max_output_tokens'],
    [{ input: 'x', text: { format: { type: 'json_schema', name: 'n', schema: { type: 'string', pattern: 'a' } } } },
     'text.format.schema'],
    [{ input: 'x', text: { format: { type: 'regex' } } }, 'text.format.type'],
  ];
  for (const [body, param] of cases) {
    const r = await h.post(server.base, '/v1/responses', { model: 'default', ...body });
    assert.equal(r.status, 400, `${JSON.stringify(body)}: ${r.text}`);
    assert.equal(r.json.error.param, param, r.text);
    assert.equal(r.json.error.type, 'invalid_request_error');
  }
  const ok = await client.responses.create({ model: 'default', input: 'Hello', max_output_tokens: 4 });
  assert.equal(ok.object, 'response');
});
