// Bounded load: 200 streaming clients on loopback for LOAD_SECONDS (default 20), each
// sending request after request. Every request either completes (its events end with a
// finish_reason and [DONE]) or gets a 503 with Retry-After (the queue limit); the
// server's memory stays bounded, and afterwards nothing is running, no KV block is held
// and no thread was left behind.
'use strict';
const { test } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const h = require('./harness');

const CLIENTS = 200;
const SECONDS = Number(process.env.LOAD_SECONDS || 20);

// The RSS growth allowed. An AddressSanitizer build (SANITIZE=1) keeps freed memory in
// its 256 MiB quarantine and caches more, so it gets a larger, still fixed, bound.
const RSS_GROWTH_MIB = h.sanitized ? 1024 : 256;

const threads = (pid) => Number(fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(/Threads:\s+(\d+)/)[1]);

async function oneRequest(base, i, n, counts) {
  const body = { prompt: `client ${i} request ${n}: tell me something`, max_tokens: 4 + ((i + n) % 24), temperature: 0.8,
                 ignore_eos: (i % 2) === 0, stream: true };
  const r = await h.postEvents(base, '/v1/completions', body);
  if (r.status === 503) {
    assert.ok(Number(r.headers.get('retry-after')) >= 1, 'a 503 says when to retry');
    assert.equal(JSON.parse(r.text).error.type, 'service_unavailable');
    counts.unavailable++;
    await new Promise((res) => setTimeout(res, 50 + Math.random() * 100));
    return;
  }
  assert.equal(r.status, 200, r.text.slice(0, 500));
  assert.equal(r.events[r.events.length - 1], '[DONE]', `request ${i}/${n} did not end with [DONE]`);
  const last = JSON.parse(r.events[r.events.length - 2]);
  assert.ok(['stop', 'length'].includes(last.choices[0].finish_reason), JSON.stringify(last));
  counts.completed++;
}

test(`${CLIENTS} streaming clients for ${SECONDS} s: complete or 503, bounded memory, nothing left running`, async () => {
  const server = await h.startServer(h.makeModel(), ['--num-kv-blocks', '256', '--max-num-seqs', '64', '--max-queue', '64',
                                                     '--queue-timeout', '30']);
  try {
    // Warm up, then take the baseline.
    await h.postEvents(server.base, '/v1/completions', { prompt: 'warm up', max_tokens: 8, stream: true });
    const baseRss = h.rssMiB(server.proc.pid), baseThreads = threads(server.proc.pid);
    let peakRss = baseRss;
    const sampler = setInterval(() => { peakRss = Math.max(peakRss, h.rssMiB(server.proc.pid)); }, 250);
    const counts = { completed: 0, unavailable: 0 };
    const deadline = Date.now() + SECONDS * 1000;
    await Promise.all(Array.from({ length: CLIENTS }, async (_, i) => {
      for (let n = 0; Date.now() < deadline; n++) await oneRequest(server.base, i, n, counts);
    }));
    clearInterval(sampler);
    console.log(`# ${counts.completed} completed, ${counts.unavailable} got 503; RSS ${baseRss.toFixed(1)} -> peak ${peakRss.toFixed(1)} MiB`);
    assert.ok(counts.completed >= CLIENTS, `only ${counts.completed} requests completed`);
    assert.ok(peakRss < baseRss + RSS_GROWTH_MIB, `RSS grew from ${baseRss} to ${peakRss} MiB`);
    const [ok, , m] = await h.waitForMetrics(server.base, (x) => x['latte:num_requests_running'] === 0 &&
                                             x['latte:num_requests_waiting'] === 0 && x['latte:kv_cache_usage_perc'] === 0, 2000);
    assert.ok(ok, JSON.stringify(m));
    assert.equal(threads(server.proc.pid), baseThreads, 'no thread left behind');
  } finally {
    assert.equal(await server.stop(), 0);
  }
});
