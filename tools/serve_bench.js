#!/usr/bin/env node
// What `latte serve` adds over the engine (issue 10 point 13), measured:
//  1. throughput: the requests `latte bench engine` makes (the same random prompt ids,
//     drawn with its splitmix64 stream, the same per-request seeds, temperature 1, EOS
//     ignored), sent as streaming /v1/completions by C concurrent clients, output tok/s
//     against `latte bench engine --max-concurrency C` on the same model and flags;
//  2. TTFT at idle: one streaming request at a time (max_tokens 1), the time from
//     sending it to its first token event, against the engine's own time to that token
//     for the same request (engine_ttft in the server's log line: from Engine::Submit
//     to the token's output). The difference is what HTTP, parsing, tokenizing, queueing
//     and the wake-up add.
// Usage: node tools/serve_bench.js --model DIR [--num-prompts 64] [--input-len 128]
//          [--output-len 128] [--concurrency 16] [--ttft-requests 50] [--seed 0]
//          [-- extra engine flags for both, e.g. --threads 2]
'use strict';
const { spawn, execFileSync } = require('node:child_process');
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

// src/tools/engine_benchmark.cc's MakeRequest: prompt ids and seed of request `index`.
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

// One streaming request: resolves to { id, ttft (ms), tokens } once [DONE] arrives.
async function streamOne(base, body) {
  const t0 = performance.now();
  const res = await fetch(base + '/v1/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
                                                     body: JSON.stringify(body) });
  if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '', ttft = null, tokens = 0, done = false, id = null;
  while (!done) {
    const { value, done: end } = await reader.read();
    if (end) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      if (!event.startsWith('data: ')) continue;
      if (event === 'data: [DONE]') { done = true; break; }
      const chunk = JSON.parse(event.slice(6));
      if (ttft === null) ttft = performance.now() - t0;  // the first event carries the first token's text
      id = chunk.id;
      if (chunk.usage) tokens = chunk.usage.completion_tokens;
    }
  }
  return { id, ttft, tokens };
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

    // 2. TTFT at idle, one request at a time, paired with the engine's own time.
    const runs = [];
    for (let i = 0; i < o.ttftRequests; i++) runs.push(await streamOne(server.base, benchRequest(o, vocab, i, 1)));
    await new Promise((r) => setTimeout(r, 200));  // the last log lines
    const engineMs = {};
    for (const m of server.log().matchAll(/latte serve: (\S+) .* engine_ttft=([\d.]+)s/g)) engineMs[m[1]] = 1000 * Number(m[2]);
    const ttfts = runs.map((r) => r.ttft).sort((a, b) => a - b);
    const overheads = runs.map((r) => r.ttft - engineMs[r.id]).sort((a, b) => a - b);
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
      http_seconds: +seconds.toFixed(3), http_engine_steps: after.steps - before.steps,
      http_step_seconds: +(after.step - before.step).toFixed(3), http_forward_seconds: +(after.forward - before.forward).toFixed(3),
      engine_seconds: +engine.seconds.toFixed(3), engine_steps: engine.steps,
      engine_step_seconds: +engine.step_seconds.toFixed(3), engine_forward_seconds: +engine.model_seconds.toFixed(3),
      http_ttft_ms_mean: +mean(ttfts).toFixed(3), http_ttft_ms_median: +ttfts[ttfts.length >> 1].toFixed(3),
      engine_ttft_ms_mean: +mean(runs.map((r) => engineMs[r.id])).toFixed(3),
      ttft_overhead_ms_mean: +mean(overheads).toFixed(3), ttft_overhead_ms_median: +overheads[overheads.length >> 1].toFixed(3),
    };
    console.log(JSON.stringify(result));
  } finally {
    if (server.proc.exitCode === null) server.proc.kill('SIGTERM');
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
