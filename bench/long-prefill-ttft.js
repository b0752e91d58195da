#!/usr/bin/env node
// A short request beside a long prefill, through `latte serve`: the short one's time to
// first token (TTFT) while a long prompt prefills, against its TTFT on an idle server,
// and what sharing the steps costs the long prompt's own TTFT. Two servers on the same
// model and flags, alternating A B A B:
//   shared:  the defaults (--long-prefill-token-threshold: half the step's token budget
//            while other prompts wait, a short prompt in a step of its own; deep chunks
//            cut by their attention pairs, the cap derived from the model);
// and, with --against whole (the default):
//   whole:   --long-prefill-token-threshold = --max-num-batched-tokens and
//            --max-prefill-attention-pairs -1: the long prompt takes every step's
//            budget, as before the threshold and the cap existed;
// or with --against nocap:
//   nocap:   the default sharing with chunks sized by tokens only
//            (--max-prefill-attention-pairs -1);
// or with --against none: the defaults alone (a long prompt too long to run twice);
// or with --against-flags "FLAGS":
//   flags:   the same server with FLAGS added (a latency setting to weigh, e.g.
//            "--max-num-batched-tokens 256 --max-prefill-attention-pairs 1000000");
// or with --against-binary PATH:
//   binary:  the same flags on another latte build (an earlier commit's, to measure a
//            change of the defaults themselves).
// Each run: 3 short requests alone (idle TTFT), then the long prompt, and from 2 s after
// it short requests one after another (each sent 0.5 s after the last one's first
// token) until the long prompt's first token. Prompts are random token ids, distinct in
// every run (no prefix cache hits); max_tokens 1 for all.
// Usage: node bench/long-prefill-ttft.js --model DIR [--long-len 16384] [--short-len 40]
//          [--rounds 2] [--against whole|nocap|none | --against-flags "FLAGS" |
//          --against-binary PATH]
//          [-- extra serve flags for both, e.g. --huge-pages --memory-gb 10]
'use strict';
const { spawn } = require('node:child_process');
const http = require('node:http');
const path = require('node:path');
const { splitmix } = require('./splitmix64');

const LATTE = process.env.LATTE_BINARY || path.resolve(__dirname, '../build/latte');

function parseArgs(argv) {
  const o = { model: null, longLen: 16384, shortLen: 40, rounds: 2, against: 'whole', againstFlags: null,
              againstBinary: null, extra: [] };
  const keys = { '--model': 'model', '--long-len': 'longLen', '--short-len': 'shortLen', '--rounds': 'rounds',
                 '--against': 'against', '--against-flags': 'againstFlags', '--against-binary': 'againstBinary' };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--') {
      o.extra = argv.slice(i + 1);
      break;
    }
    const k = keys[argv[i]];
    if (!k) throw new Error('unknown flag ' + argv[i]);
    o[k] = ['model', 'against', 'againstFlags', 'againstBinary'].includes(k) ? argv[++i] : Number(argv[++i]);
  }
  if (o.againstFlags !== null) o.against = 'flags';
  if (o.againstBinary !== null) o.against = 'binary';
  if (!o.model) throw new Error('--model DIR is required');
  if (!['whole', 'nocap', 'none', 'flags', 'binary'].includes(o.against)) {
    throw new Error('--against must be whole, nocap or none');
  }
  return o;
}

function startServer(binary, model, flags) {
  return new Promise((resolve, reject) => {
    const proc = spawn(binary, ['serve', '--model', model, '--port', '0', ...flags], { stdio: ['ignore', 'ignore', 'pipe'] });
    let log = '';
    proc.stderr.on('data', (d) => {
      log += d;
      const m = log.match(/listening on http:\/\/[^:]+:(\d+)/);
      if (m) resolve({ proc, port: Number(m[1]), log: () => log });
    });
    proc.on('exit', (code) => reject(new Error(`latte serve exited ${code}:\n${log}`)));
  });
}

// Seconds from sending a streaming completion to its first token event.
function ttft(port, prompt) {
  return new Promise((resolve, reject) => {
    const body = JSON.stringify({ prompt, max_tokens: 1, stream: true, ignore_eos: true });
    const start = process.hrtime.bigint();
    const req = http.request({ port, path: '/v1/completions', method: 'POST', headers: { 'Content-Type': 'application/json' } },
      (res) => {
        let first = null;
        let text = '';
        res.on('data', (d) => {
          text += d;
          if (first === null && text.includes('"choices"')) first = Number(process.hrtime.bigint() - start) / 1e9;
        });
        res.on('end', () => (res.statusCode === 200 && first !== null ? resolve(first)
                                                                     : reject(new Error(`${res.statusCode}: ${text}`))));
      });
    req.on('error', reject);
    req.end(body);
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

async function runOnce(o, binary, flags, seed) {
  const server = await startServer(binary, o.model, flags);
  const next = splitmix(seed);
  const vocab = 1000n;  // ids in [1, 1000]: valid for every latte model
  const prompt = (n) => Array.from({ length: n }, () => Number(next() % vocab) + 1);
  try {
    const idle = [];
    for (let i = 0; i < 3; ++i) idle.push(await ttft(server.port, prompt(o.shortLen)));
    let longDone = false;
    const long = ttft(server.port, prompt(o.longLen)).finally(() => { longDone = true; });
    await sleep(2000);
    const beside = [];
    while (!longDone) {
      beside.push(await ttft(server.port, prompt(o.shortLen)));
      await sleep(500);
    }
    return { idle: median(idle), beside, long: await long };
  } finally {
    server.proc.kill('SIGTERM');
    await new Promise((r) => server.proc.on('exit', r));
  }
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const budgetFlag = o.extra.indexOf('--max-num-batched-tokens');
  const budget = budgetFlag >= 0 ? Number(o.extra[budgetFlag + 1]) : 512;
  const configs = {
    shared: o.extra,
    whole: [...o.extra, '--long-prefill-token-threshold', String(budget), '--max-prefill-attention-pairs', '-1'],
    nocap: [...o.extra, '--max-prefill-attention-pairs', '-1'],
    flags: [...o.extra, ...(o.againstFlags ?? '').split(/\s+/).filter(Boolean)],
    binary: o.extra,
  };
  const binaries = { binary: o.againstBinary };
  const names = o.against === 'none' ? ['shared'] : ['shared', o.against];
  if (o.against === 'flags') console.log(JSON.stringify({ config: 'flags', flags: configs.flags }));
  if (o.against === 'binary') console.log(JSON.stringify({ config: 'binary', binary: o.againstBinary }));
  const results = Object.fromEntries(names.map((n) => [n, []]));
  let seed = 1;
  for (let round = 0; round < o.rounds; ++round) {
    for (const name of names) {
      const r = await runOnce(o, binaries[name] ?? LATTE, configs[name], seed++);
      results[name].push(r);
      console.log(JSON.stringify({ round, config: name, idle_ttft_s: +r.idle.toFixed(3),
        beside_ttft_s: r.beside.map((x) => +x.toFixed(2)), long_ttft_s: +r.long.toFixed(1) }));
    }
  }
  for (const name of names) {
    const rs = results[name];
    const beside = rs.flatMap((r) => r.beside);
    const idle = median(rs.map((r) => r.idle));
    console.log(JSON.stringify({
      config: name, long_len: o.longLen, short_len: o.shortLen,
      idle_ttft_s_median: +idle.toFixed(3),
      beside_ttft_s_median: beside.length ? +median(beside).toFixed(2) : null,
      beside_ttft_s_max: beside.length ? +Math.max(...beside).toFixed(2) : null,
      beside_over_idle_median: beside.length ? +(median(beside) / idle).toFixed(1) : null,
      long_ttft_s_median: +median(rs.map((r) => r.long)).toFixed(1),
    }));
  }
}

main().catch((e) => {
  console.error(e.message);
  process.exit(1);
});
