// `latte eval` end to end against the real `latte serve` on the trained default model
// (models/default). The test asks the server itself, through the official openai
// client, for each problem's greedy completion with lm-eval's gsm8k prompt and
// parameters (written out here from lm_eval/tasks/gsm8k/gsm8k.yaml), builds a task file
// whose answers it therefore knows (half of them the model's own strict-match answer,
// half the real reference), scores the completions with lm-eval's filters and metric in
// JavaScript, and compares: latte eval's completions, extracted answers, exact_match and
// stderr, and its printed table. A server that fails makes latte eval fail.
'use strict';
const { test } = require('node:test');
const assert = require('node:assert/strict');
const { execFile } = require('node:child_process');
const fs = require('node:fs');
const http = require('node:http');
const os = require('node:os');
const path = require('node:path');
const h = require('./harness');

const ROOT = path.resolve(__dirname, '../..');
const STOP = ['Question:', '</s>', '<|im_end|>'];
const SHOTS = 3, N = 12;

function readJsonl(file) {
  return fs.readFileSync(file, 'utf8').split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));
}

function latteEval(args) {
  return new Promise((resolve) => {
    execFile(h.LATTE, ['eval', ...args], { timeout: 300000 }, (error, stdout, stderr) => {
      resolve({ code: error ? error.code : 0, stdout, stderr });
    });
  });
}

// lm-eval's gsm8k, in JavaScript (Python's re semantics where they differ from JS's:
// `$` also matches before a final newline).
const prompt = (fewshot, doc) =>
  fewshot.map((s) => `Question: ${s.question}\nAnswer: ${s.answer}\n\n`).join('') + `Question: ${doc.question}\nAnswer:`;
function strictMatch(text) {
  const m = [...text.matchAll(/#### (\-?[0-9\.\,]+)/g)];
  return m.length ? m[0][1].trim() : '[invalid]';
}
function flexibleExtract(text) {
  const m = [...text.matchAll(/(-?[$0-9.,]{2,})|(-?[0-9]+)/g)];
  if (!m.length) return '[invalid]';
  const last = m[m.length - 1];
  return (last[1] || last[2]).trim();
}
const normalize = (s) => s.replace(/,/g, '').replace(/\$/g, '').replace(/.*#### /gs, '').replace(/\.(?=\n?$)/g, '').toLowerCase();
const exactMatch = (pred, target) => normalize(pred) === normalize(target);
function meanAndStderr(scores) {
  const n = scores.length, mean = scores.reduce((a, b) => a + b, 0) / n;
  const sd = Math.sqrt(scores.reduce((a, s) => a + (s - mean) ** 2, 0) / (n - 1));
  return [mean, sd / Math.sqrt(n)];
}

test('latte eval scores the default model as lm-eval would, on answers the test knows', async () => {
  // No prefix cache: each prompt is prefilled the same way every time it is sent, so
  // the greedy completions repeat exactly.
  const server = await h.startServer(path.join(ROOT, 'models/default'), ['--no-prefix-cache']);
  try {
    const fewshot = readJsonl(path.join(ROOT, 'tasks/arith/fewshot.jsonl')).slice(0, SHOTS);
    const docs = readJsonl(path.join(ROOT, 'tasks/arith/test.jsonl')).slice(0, N);
    const client = server.client();
    const model = (await client.models.list()).data[0].id;
    const completions = [];
    for (const doc of docs) {
      const r = await client.completions.create({ model, prompt: prompt(fewshot, doc), max_tokens: 256,
                                                  temperature: 0, stop: STOP, seed: 1234 });
      completions.push(r.choices[0].text);
    }
    // The task: even problems take the model's own strict-match answer as the target
    // (correct by construction when it wrote "#### N"), odd ones keep the reference.
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'latte-eval-'));
    const task = docs.map((d, i) => {
      const own = strictMatch(completions[i]);
      return i % 2 === 0 && own !== '[invalid]' ? { question: d.question, answer: `worked\n#### ${own}` } : d;
    });
    fs.writeFileSync(path.join(dir, 'test.jsonl'), task.map((d) => JSON.stringify(d)).join('\n') + '\n');
    fs.writeFileSync(path.join(dir, 'shots.jsonl'), fewshot.map((d) => JSON.stringify(d)).join('\n') + '\n');
    const strict = task.map((d, i) => (exactMatch(strictMatch(completions[i]), d.answer) ? 1 : 0));
    const flexible = task.map((d, i) => (exactMatch(flexibleExtract(completions[i]), d.answer) ? 1 : 0));
    assert.ok(strict.filter((s, i) => i % 2 === 0).reduce((a, b) => a + b, 0) >= 3, 'the model writes "#### N" often');

    const json = path.join(dir, 'out.json');
    const r = await latteEval(['--base-url', server.base, '--task', path.join(dir, 'test.jsonl'), '--fewshot',
                               path.join(dir, 'shots.jsonl'), '--num-fewshot', String(SHOTS), '--json', json]);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    const out = JSON.parse(fs.readFileSync(json, 'utf8'));
    assert.equal(out.n, N);
    assert.equal(out.model, model);
    for (const [i, s] of out.samples.entries()) {
      assert.equal(s.completion, completions[i], `problem ${i}: the same greedy completion`);
      assert.equal(s.strict_match, strictMatch(completions[i]));
      assert.equal(s.flexible_extract, flexibleExtract(completions[i]));
      assert.equal(s.strict_correct, strict[i] === 1);
      assert.equal(s.flexible_correct, flexible[i] === 1);
    }
    const [strictMean, strictErr] = meanAndStderr(strict);
    const [flexMean, flexErr] = meanAndStderr(flexible);
    assert.deepEqual(out.scores.map((s) => s.filter), ['flexible-extract', 'strict-match']);
    assert.ok(Math.abs(out.scores[0].value - flexMean) < 1e-12);
    assert.ok(Math.abs(out.scores[0].stderr - flexErr) < 1e-12);
    assert.ok(Math.abs(out.scores[1].value - strictMean) < 1e-12);
    assert.ok(Math.abs(out.scores[1].stderr - strictErr) < 1e-12);
    // lm-eval's table, the task named by its folder's file name.
    const lines = r.stdout.trim().split('\n');
    assert.match(lines[0], /^\|\s*Tasks\s*\|Version\|\s+Filter\s+\|n-shot\|\s+Metric\s+\|\s+\|Value \|\s+\|Stderr\|$/);
    assert.match(lines[1], /^\|-+\|-+:\|-+\|-+:\|-+\|-+\|-+:\|-+\|-+:\|$/);
    const cells = (line) => line.split('|').slice(1, -1).map((c) => c.trim());
    assert.deepEqual(cells(lines[2]), [path.basename(dir), '3', 'flexible-extract', String(SHOTS), 'exact_match', '↑',
                                       flexMean.toFixed(4), '±', flexErr.toFixed(4)]);
    assert.deepEqual(cells(lines[3]), ['', '', 'strict-match', String(SHOTS), 'exact_match', '↑', strictMean.toFixed(4),
                                       '±', strictErr.toFixed(4)]);

    // Several at once (batched decode on a bf16 model can flip a near tie, so the
    // completions are not compared): every problem scored, each by the filters above.
    const json4 = path.join(dir, 'out4.json');
    const r4 = await latteEval(['--base-url', server.base, '--task', path.join(dir, 'test.jsonl'), '--fewshot',
                                path.join(dir, 'shots.jsonl'), '--num-fewshot', String(SHOTS), '--concurrency', '4',
                                '--limit', '8', '--json', json4]);
    assert.equal(r4.code, 0, r4.stdout + r4.stderr);
    const out4 = JSON.parse(fs.readFileSync(json4, 'utf8'));
    assert.equal(out4.n, 8);
    for (const [i, s] of out4.samples.entries()) {
      assert.equal(s.question, task[i].question, 'in the task file\'s order');
      assert.equal(s.strict_match, strictMatch(s.completion));
      assert.equal(s.flexible_extract, flexibleExtract(s.completion));
      assert.equal(s.strict_correct, exactMatch(s.strict_match, task[i].answer));
    }
  } finally {
    assert.equal(await server.stop(), 0);
  }
});

test('a server that answers 500 fails the eval, naming the problem; a bad task file is refused', async () => {
  let calls = 0;
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      calls++;
      res.writeHead(500, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify({ error: { message: 'out of luck', type: 'server_error' } }));
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const r = await latteEval(['--base-url', `http://127.0.0.1:${server.address().port}`, '--model', 'm', '--task',
                               path.join(ROOT, 'tasks/arith/test.jsonl'), '--limit', '1']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /latte eval: error: problem 1 failed 3 times: HTTP 500: out of luck/);
    assert.equal(calls, 3, 'tried 3 times, as lm-eval max_retries=3');
  } finally {
    server.close();
  }
  const bad = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'latte-eval-')), 'bad.jsonl');
  fs.writeFileSync(bad, '{"question": "q", "answer": "#### 1"}\n{"question": "no answer"}\n');
  const r = await latteEval(['--base-url', 'http://127.0.0.1:1', '--model', 'm', '--task', bad, '--num-fewshot', '0']);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /bad\.jsonl:2: no string "answer"/);
});
