// Hostile traffic over raw sockets, as an attacker on the internet sends it: lines that
// never end inside a chunked body, framings a proxy could read differently (request
// smuggling), requests without Host, /v1/ probes without a key, a flood of idle
// connections past the process's file-descriptor limit, and the extremes of every
// integer field. For each: the status, that the connection closes where it must, that
// /health answers within a second meanwhile, that memory stays bounded, and that the
// next normal request gets its answer.
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const net = require('node:net');
const h = require('./harness');

const KEY = 'sk-hostile';
const auth = { Authorization: `Bearer ${KEY}` };
let server;
// What an AddressSanitizer build's quarantine and redzones add to a peak (harness.js).
const ASAN_SLACK_MIB = h.sanitized ? 512 : 0;

before(async () => {
  server = await h.startServer(h.makeModel(), ['--served-model-name', 'tiny'], { LATTE_API_KEY: KEY },
                               { launcher: '' });
});

after(async () => {
  assert.equal(await server.stop(), 0, server.log());
});

async function expectGood(s = server) {
  const r = await h.post(s.base, '/v1/completions', { prompt: 'Hello', max_tokens: 2 }, { headers: auth });
  assert.equal(r.status, 200, r.text);
}

// /health on a fresh connection, answered within `ms`.
async function healthWithin(ms, s = server) {
  const start = Date.now();
  const r = await fetch(s.base + '/health', { signal: AbortSignal.timeout(ms) });
  assert.equal(r.status, 200);
  return Date.now() - start;
}

// Sends `head`, then `filler` bytes in 64 KiB writes until the server answers or closes
// (or `total` bytes went out); resolves to { reply, closed, sent }.
function flood(head, filler, total) {
  return new Promise((resolve) => {
    const s = net.connect(server.port, '127.0.0.1');
    let reply = '';
    let sent = 0;
    let done = false;
    const piece = Buffer.alloc(64 << 10, filler);
    const finish = (closed) => {
      if (done) return;
      done = true;
      s.destroy();
      resolve({ reply, closed, sent });
    };
    const pump = () => {
      while (!done && sent < total) {
        sent += piece.length;
        if (!s.write(piece)) return s.once('drain', pump);
      }
    };
    s.on('connect', () => {
      s.write(head);
      pump();
    });
    s.on('data', (d) => { reply += d.toString('latin1'); });
    s.on('end', () => finish(true));
    s.on('close', () => finish(true));
    s.on('error', () => finish(true));
    setTimeout(() => finish(false), 20000).unref();
  });
}

// One raw request; resolves to { reply, closed } once the server closes or `ms` pass.
function exchange(bytes, ms = 5000) {
  return new Promise((resolve) => {
    const s = net.connect(server.port, '127.0.0.1', () => s.write(bytes));
    let reply = '';
    let done = false;
    const finish = (closed) => {
      if (done) return;
      done = true;
      s.destroy();
      resolve({ reply, closed });
    };
    s.on('data', (d) => { reply += d.toString('latin1'); });
    s.on('end', () => finish(true));
    s.on('error', () => finish(true));
    setTimeout(() => finish(false), ms).unref();
  });
}

const CHUNKED_HEAD = `POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\n` +
                     'Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n';

test('a chunk-size line or a trailer that never ends → 400 and close, memory bounded', async () => {
  const before = h.rssMiB(server.proc.pid);
  // Four at once, each offering 64 MiB without a CRLF. After its 400 the server reads
  // and drops what still arrives (so the client sees the reply, not a reset): the bound
  // is on what it keeps, its memory.
  const floods = [
    flood(CHUNKED_HEAD + '1;ext=', 'a', 64 << 20),
    flood(CHUNKED_HEAD + '1;ext=', 'b', 64 << 20),
    flood(CHUNKED_HEAD + '0\r\nX-Trailer: ', 'c', 64 << 20),
    flood(CHUNKED_HEAD + '0\r\nX-Trailer: ', 'd', 64 << 20),
  ];
  assert.ok(await healthWithin(1000) < 1000);
  for (const f of await Promise.all(floods)) {
    assert.ok(f.closed, 'the server closed the connection');
    assert.match(f.reply, /^HTTP\/1\.1 (400|431) /, f.reply.slice(0, 200));
  }
  const grown = h.rssMiB(server.proc.pid) - before;
  assert.ok(grown < 32, `RSS grew ${grown.toFixed(1)} MiB for four floods`);
  await expectGood();
});

test('a chunked body of many chunks (under the body limit) is still read', async () => {
  const body = JSON.stringify({ prompt: 'Hello ' + 'x'.repeat(200000), max_tokens: 1 });
  let chunks = '';
  for (let i = 0; i < body.length; i += 1000) {
    const part = body.slice(i, i + 1000);
    chunks += part.length.toString(16) + '\r\n' + part + '\r\n';
  }
  const r = await exchange(CHUNKED_HEAD.replace('\r\n\r\n', '\r\nConnection: close\r\n\r\n') + chunks + '0\r\n\r\n',
                           60000);
  // The prompt is long for the tiny model's context: a 400 naming it, read whole.
  assert.match(r.reply, /^HTTP\/1\.1 (200|400) /, r.reply.slice(0, 300));
  if (r.reply.startsWith('HTTP/1.1 400')) assert.match(r.reply, /prompt|context/);
});

test('Transfer-Encoding other than a lone chunked → 501 and the connection closes', async () => {
  const head = `POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\n`;
  const body = JSON.stringify({ prompt: 'Hello', max_tokens: 1 });
  for (const te of ['identity', 'gzip, chunked', 'chunked, chunked', 'gzip']) {
    // What follows would be a second request to a server that ignores the coding.
    const smuggled = `${body}GET /health HTTP/1.1\r\nHost: x\r\n\r\n`;
    const r = await exchange(`${head}Transfer-Encoding: ${te}\r\n\r\n${smuggled}`);
    assert.match(r.reply, /^HTTP\/1\.1 501 /, `${te}: ${r.reply.slice(0, 200)}`);
    assert.ok(r.closed, `${te}: the connection closed`);
    assert.equal((r.reply.match(/HTTP\/1\.1 /g) || []).length, 1, `${te}: one reply, no second request read`);
  }
  await expectGood();
});

test('HTTP/1.1 without exactly one Host → 400 and close; HTTP/1.0 needs none', async () => {
  const none = await exchange('GET /health HTTP/1.1\r\n\r\n');
  assert.match(none.reply, /^HTTP\/1\.1 400 /);
  assert.match(none.reply, /Host/);
  assert.ok(none.closed);
  const two = await exchange('GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n');
  assert.match(two.reply, /^HTTP\/1\.1 400 /);
  const old = await exchange('GET /health HTTP/1.0\r\n\r\n');
  assert.match(old.reply, /^HTTP\/1\.[01] 200 /);
  await expectGood();
});

test('/v1/ checks the API key before routing: unknown paths and wrong methods are 401 without it', async () => {
  for (const [method, path] of [['GET', '/v1/engines'], ['GET', '/v1/completions'], ['DELETE', '/v1/models'],
                                ['POST', '/v1/']]) {
    const r = await fetch(server.base + path, { method });
    assert.equal(r.status, 401, `${method} ${path}`);
    assert.ok((await r.json()).error.message.includes('API key'));
  }
  const found = await fetch(server.base + '/v1/engines', { headers: auth });
  assert.equal(found.status, 404);
  assert.equal((await fetch(server.base + '/health')).status, 200);  // outside /v1/: no key
});

// Every integer field a client sets, at the extremes of int64 and beyond, written as
// JSON text (JavaScript numbers cannot hold them exactly). No sum of client values may
// overflow (an UBSan build stops the process if one does): 400 naming the field, or
// 200 where the value is legal.
test('integer fields at the extremes → 400 naming the field (or 200), never a 5xx', async () => {
  const extremes = ['9223372036854775807', '-9223372036854775808', '9223372036854775808', '18446744073709551615',
                    '1e308', '-1', '9007199254740993'];
  const completion = ['max_tokens', 'n', 'logprobs', 'seed', 'top_k', 'prompt_logprobs', 'min_tokens', 'best_of'];
  const chat = ['max_tokens', 'max_completion_tokens', 'n', 'top_logprobs', 'seed', 'top_k'];
  const send = async (path, base, field, value) => {
    const text = JSON.stringify(base).replace(/}$/, `, "${field}": ${value}}`);
    const r = await h.post(server.base, path, text, { headers: auth });
    assert.ok(r.status === 200 || r.status === 400, `${path} ${field}=${value}: ${r.status} ${r.text}`);
    if (r.status === 400) assert.ok(r.json && r.json.error, r.text);
    return r;
  };
  // max_tokens 1 unless the field under test sets the length.
  const length = (field) => (field.startsWith('max_') ? {} : { max_tokens: 1 });
  for (const value of extremes) {
    for (const field of completion) await send('/v1/completions', { prompt: 'Hi', ...length(field) }, field, value);
    for (const field of chat) {
      await send('/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi' }], ...length(field) }, field, value);
    }
    // Prompt token ids and stop ids at the extremes.
    const ids = await h.post(server.base, '/v1/completions', `{"prompt": [1, ${value}], "max_tokens": 1}`,
                             { headers: auth });
    assert.equal(ids.status, 400, ids.text);
  }
  const max = await h.post(server.base, '/v1/completions',
                           '{"prompt": "Hi", "max_tokens": 9223372036854775807}', { headers: auth });
  assert.equal(max.status, 400);
  assert.equal(max.json.error.param, 'max_tokens');
  assert.ok(await healthWithin(1000) < 1000);
  await expectGood();
});

test('bodies of megabytes are tokenized off the io threads: /health and a small request stay fast', async () => {
  const peak = h.peakRssMiB(server.proc.pid);
  // 7.5 MB prompts (under the 8 MiB body limit), tokenized and then refused as longer
  // than the context: the work is the server's, the replies stay small for this client.
  const prompt = 'Hello world, 12345! '.repeat(375000);
  const body = JSON.stringify({ prompt, max_tokens: 1 });
  let inFlight = 2;
  const big = [0, 1].map(() => h.post(server.base, '/v1/completions', body, { headers: auth })
    .finally(() => { --inFlight; }));
  let checks = 0;
  while (inFlight > 0) {
    assert.ok(await healthWithin(1000) < 1000);
    const start = Date.now();
    const small = await h.post(server.base, '/tokenize', { prompt: 'Hello world', add_special_tokens: false });
    assert.equal(small.status, 200, small.text);
    assert.ok(Date.now() - start < 1000, `a small /tokenize took ${Date.now() - start} ms beside two large ones`);
    ++checks;
  }
  const replies = await Promise.all(big);
  for (const r of replies) {
    assert.equal(r.status, 400, r.text.slice(0, 300));
    assert.match(r.json.error.message, /\d{6,} in the prompt/);
  }
  assert.equal(replies[0].json.error.message, replies[1].json.error.message);
  assert.ok(checks >= 1, 'the large ones were done before any check');
  // Large bodies are tokenized one at a time, streaming through the pre-tokenizer.
  const grown = h.peakRssMiB(server.proc.pid) - peak;
  assert.ok(grown < 160 + ASAN_SLACK_MIB, `peak RSS grew ${grown.toFixed(1)} MiB for two 7.5 MB prompts`);
  await expectGood();
});

test('a body of 200k chat messages is a 413 before it is parsed; one within the bound stays small', async () => {
  const peak = h.peakRssMiB(server.proc.pid);
  const many = { messages: Array.from({ length: 200000 }, () => ({ role: 'user', content: 'x' })) };
  const r = await h.post(server.base, '/tokenize', many);  // 6.8 MB: under the body limit
  assert.equal(r.status, 413, r.text.slice(0, 300));
  assert.match(r.json.error.message, /more than 262144 JSON values/);
  const refused = h.peakRssMiB(server.proc.pid) - peak;
  assert.ok(refused < 32 + ASAN_SLACK_MIB, `peak RSS grew ${refused.toFixed(1)} MiB for a refused 6.8 MB body`);
  // 50k messages (250k values) are read: the tree, the template's copy and the ids.
  const fewer = { messages: Array.from({ length: 50000 }, () => ({ role: 'user', content: 'x' })) };
  const ok = await h.post(server.base, '/tokenize', fewer);
  assert.equal(ok.status, 200, ok.text.slice(0, 300));
  assert.ok(ok.json.count >= 50000);
  const grown = h.peakRssMiB(server.proc.pid) - peak;
  assert.ok(grown < 96 + ASAN_SLACK_MIB, `peak RSS grew ${grown.toFixed(1)} MiB for 50k messages (1.7 MB)`);
  await expectGood();
});

test('the KV pool is committed at start: its memory is resident before any request', async () => {
  const m = server.log().match(/kv pool: ([\d.]+) GB committed/);
  assert.ok(m, server.log());
  const poolMiB = Number(m[1]) * 1e9 / (1 << 20);
  assert.ok(poolMiB > 500, `a pool of ${poolMiB} MiB: --memory-gb 1 gives most of it to the pool`);
  assert.ok(h.rssMiB(server.proc.pid) > poolMiB, `RSS ${h.rssMiB(server.proc.pid)} MiB, pool ${poolMiB} MiB`);
});

// The process's CPU seconds so far (utime + stime, from /proc).
function cpuSeconds(pid) {
  const fields = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;  // clock ticks: 100 per second on Linux
}

test('out of file descriptors: accepting pauses instead of spinning; open connections are served', async () => {
  // A server of its own with 64 descriptors.
  const small = await h.startServer(h.makeModel(), ['--served-model-name', 'tiny'], {},
                                    { launcher: 'prlimit --nofile=64:64' });
  try {
    // A kept-alive connection opened before the flood: its requests are still answered.
    const kept = net.connect(small.port, '127.0.0.1');
    await new Promise((r) => kept.once('connect', r));
    const ask = () => new Promise((resolve) => {
      let reply = '';
      const onData = (d) => {
        reply += d.toString('latin1');
        if (/\r\n\r\n/.test(reply) && /Content-Length: (\d+)/i.test(reply)) {
          const len = Number(reply.match(/Content-Length: (\d+)/i)[1]);
          if (reply.length >= reply.indexOf('\r\n\r\n') + 4 + len) {
            kept.off('data', onData);
            resolve(reply);
          }
        }
      };
      kept.on('data', onData);
      kept.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n');
    });
    assert.match(await ask(), /^HTTP\/1\.1 200 /);
    const idle = [];
    for (let i = 0; i < 120; ++i) {
      const s = net.connect(small.port, '127.0.0.1');
      s.on('error', () => {});
      idle.push(s);
    }
    await new Promise((r) => setTimeout(r, 1000));
    const cpu0 = cpuSeconds(small.proc.pid);
    await new Promise((r) => setTimeout(r, 2000));
    const cpu = cpuSeconds(small.proc.pid) - cpu0;
    assert.ok(cpu < 0.5, `the server burned ${cpu.toFixed(2)} CPU s in 2 s while out of descriptors`);
    const start = Date.now();
    assert.match(await ask(), /^HTTP\/1\.1 200 /);
    assert.ok(Date.now() - start < 1000, 'the open connection is answered within a second');
    assert.match(small.log(), /cannot accept connections/);
    assert.equal(small.log().match(/cannot accept connections/g).length, 1, 'logged once');
    for (const s of idle) s.destroy();
    kept.destroy();
    // Once they close, new connections are accepted again.
    let ok = false;
    for (let i = 0; i < 50 && !ok; ++i) {
      try {
        ok = (await fetch(small.base + '/health', { signal: AbortSignal.timeout(1000) })).status === 200;
      } catch (e) {
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    assert.ok(ok, 'a new connection is served after the idle ones closed');
    await expectGood({ base: small.base });
  } finally {
    assert.equal(await small.stop(), 0, small.log());
  }
});
