// Shared by the end-to-end suites: makes the random test models with the real binary,
// starts the real `latte serve` on a free loopback port, and talks to it through the
// official `openai` client (pinned in tests/npm) or raw fetch where a test needs the
// bytes (bad input, server-sent events as sent).
'use strict';
const { spawn, execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const os = require('node:os');
const OpenAI = require('openai');

const LATTE = process.env.LATTE_BINARY || path.resolve(__dirname, '../../build/latte');
const MODEL_CACHE = process.env.LATTE_SERVER_TEST_MODELS || path.join(os.tmpdir(), 'latte-server-test-models');

// A random model directory made once (make-model is deterministic per seed), written
// aside and renamed into place so suites running in parallel never see half of one.
function makeModel({ dtype = 'f32', seed = 1 } = {}) {
  const dir = path.join(MODEL_CACHE, `tiny-${dtype}-s${seed}`);
  if (fs.existsSync(path.join(dir, 'config.json'))) return dir;
  fs.mkdirSync(MODEL_CACHE, { recursive: true });
  const part = `${dir}.part-${process.pid}`;
  execFileSync(LATTE, ['make-model', '--preset', 'tiny', '--dtype', dtype, '--seed', String(seed), '--out', part],
               { stdio: ['ignore', 'ignore', 'inherit'] });
  try {
    fs.renameSync(part, dir);
  } catch (e) {
    fs.rmSync(part, { recursive: true, force: true });  // another suite got there first
  }
  return dir;
}

// Starts `latte serve` with `args` on port 0 and resolves once it logs its port.
async function startServer(model, args = [], env = {}, { launcher: launcherOverride } = {}) {
  // One compute thread: the suites test behaviour, and an OpenMP team on a shared,
  // busy machine spends its time waiting for its slowest thread.
  // LATTE_SERVE_LAUNCHER (e.g. "mpirun -np 2 --oversubscribe"): the same suites against
  // a server split over several processes; LATTE_SERVE_ARGS adds its flags ("--tp 2").
  const launcher = (launcherOverride ?? process.env.LATTE_SERVE_LAUNCHER ?? '').split(' ').filter(Boolean);
  const extra = launcherOverride !== undefined ? [] : (process.env.LATTE_SERVE_ARGS || '').split(' ').filter(Boolean);
  const serveArgs = ['serve', '--model', model, '--port', '0', '--memory-gb', '1', '--threads', '1', ...extra, ...args];
  const command = launcher.length ? launcher[0] : LATTE;
  const commandArgs = launcher.length ? [...launcher.slice(1), LATTE, ...serveArgs] : serveArgs;
  const proc = spawn(command, commandArgs, { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('latte serve did not start:\n' + log)), 60000);
    proc.stderr.on('data', (d) => {
      log += d.toString();
      const m = log.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    proc.on('exit', (code) => reject(new Error(`latte serve exited with ${code}:\n${log}`)));
  });
  const base = `http://127.0.0.1:${port}`;
  const server = {
    proc,
    port,
    base,
    log: () => log,
    client: (options = {}) => new OpenAI({ baseURL: `${base}/v1`, apiKey: options.apiKey || 'none', maxRetries: 0, timeout: 120000, ...options }),
    // SIGTERM and wait: resolves to the exit code.
    stop: () => new Promise((resolve) => {
      if (proc.exitCode !== null) return resolve(proc.exitCode);
      proc.removeAllListeners('exit');
      // Open MPI's mpirun exits 1 whenever a signal ended its job, however cleanly the
      // ranks stopped: under a launcher, rank 0's "stopped" with no rank aborting is a
      // clean stop.
      const clean = (code) => code === 0 ||
        (launcher.length > 0 && /latte serve: stopped/.test(log) && !/MPI_ABORT|ending every rank/.test(log));
      // 'exit' can come before the last of stderr (rank 0's "stopped" line) has been
      // read: judge the stop once stderr has closed, or 5 s after the exit at most.
      proc.on('exit', (code) => {
        const judge = () => resolve(clean(code) ? 0 : code);
        if (proc.stderr.readableEnded || proc.stderr.destroyed) return judge();
        const timer = setTimeout(judge, 5000);
        proc.stderr.once('close', () => { clearTimeout(timer); judge(); });
      });
      proc.kill('SIGTERM');
    }),
  };
  return server;
}

// POST a JSON body (or raw bytes/string with a given Content-Type) and return status, headers, parsed body.
async function post(base, p, body, { contentType = 'application/json', headers = {} } = {}) {
  const payload = typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body);
  const res = await fetch(base + p, { method: 'POST', headers: { 'Content-Type': contentType, ...headers }, body: payload });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch (e) { /* not JSON */ }
  return { status: res.status, headers: res.headers, text, json };
}

// The server-sent events of a streaming POST, parsed: every `data:` payload in order.
async function postEvents(base, p, body, headers = {}) {
  const res = await fetch(base + p, { method: 'POST', headers: { 'Content-Type': 'application/json', ...headers }, body: JSON.stringify(body) });
  const text = await res.text();
  const events = text.split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => e.slice(6));
  return { status: res.status, headers: res.headers, events, text };
}

// /metrics as { name{labels}: value } plus by-name sums.
async function metrics(base) {
  const text = await (await fetch(base + '/metrics')).text();
  const values = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = line.match(/^([a-z_:]+)(\{[^}]*\})? (\S+)$/);
    if (!m) continue;
    values[m[1]] = (values[m[1]] || 0) + Number(m[3]);
    values[m[1] + (m[2] || '')] = Number(m[3]);
  }
  return values;
}

// Polls until pred(metrics) holds or `ms` pass; resolves to [ok, elapsed ms, last metrics].
async function waitForMetrics(base, pred, ms) {
  const start = Date.now();
  let m;
  while (true) {
    m = await metrics(base);
    if (pred(m)) return [true, Date.now() - start, m];
    if (Date.now() - start > ms) return [false, Date.now() - start, m];
    await new Promise((r) => setTimeout(r, 20));
  }
}

// A float32 .npy (as `latte generate --logits-out` writes it) as { shape, data }.
function readNpy(file) {
  const buf = fs.readFileSync(file);
  const headerLen = buf.readUInt16LE(8);
  const header = buf.slice(10, 10 + headerLen).toString('latin1');
  if (!header.includes("'descr': '<f4'")) throw new Error('not float32: ' + header);
  const shape = header.match(/'shape': \(([^)]*)\)/)[1].split(',').filter((s) => s.trim()).map(Number);
  const start = 10 + headerLen;
  const data = new Float32Array(buf.buffer.slice(buf.byteOffset + start, buf.byteOffset + buf.length));
  return { shape, data };
}

// log_softmax(row)[id] in double precision.
function logSoftmaxAt(row, id) {
  let max = -Infinity;
  for (const v of row) max = Math.max(max, v);
  let sum = 0;
  for (const v of row) sum += Math.exp(v - max);
  return row[id] - max - Math.log(sum);
}

// Resident memory of a process in MiB.
function rssMiB(pid) {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(status.match(/VmRSS:\s+(\d+) kB/)[1]) / 1024;
}

// True for an AddressSanitizer build (SANITIZE=1): it keeps freed memory in its 256 MiB
// quarantine and pads every allocation, so memory bounds get a fixed allowance more.
const sanitized = /libasan/.test(require('node:child_process').execFileSync('ldd', [LATTE]).toString());

// The most resident memory the process has held so far (VmHWM), in MiB.
function peakRssMiB(pid) {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(status.match(/VmHWM:\s+(\d+) kB/)[1]) / 1024;
}

function ids(tokens) {
  return tokens.map((t) => {
    const m = /^token_id:(\d+)$/.exec(t);
    if (!m) throw new Error('not a token_id token: ' + t);
    return Number(m[1]);
  });
}

module.exports = { LATTE, makeModel, startServer, post, postEvents, metrics, waitForMetrics, readNpy, logSoftmaxAt, rssMiB, peakRssMiB, sanitized, ids };
