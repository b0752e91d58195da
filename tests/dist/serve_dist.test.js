// latte serve split over several ranks (mpirun), against one process on the same f32
// model: TP2, DP2 (data-parallel attention, experts spread over both ranks) and DP2 x TP2
// (two replicas of two tensor-parallel ranks, on 4 ranks). Concurrent greedy requests
// give the one-process tokens; under DP every replica runs some of them (its /metrics
// gauges say so) and a client that hangs up on a stream frees its blocks on whichever
// replica ran it; SIGTERM to mpirun stops every rank cleanly.
'use strict';
const { test } = require('node:test');
const assert = require('node:assert/strict');
const h = require('../server/harness');

const mpirun = (ranks) =>
  `${process.env.LATTE_MPIRUN || 'mpirun'} -np ${ranks} --oversubscribe --bind-to none --mca btl self,vader`;

function requests(n) {
  return Array.from({ length: n }, (_, i) => ({
    model: 'tiny', max_tokens: 8 + (i % 4) * 3, temperature: 0, ignore_eos: true, logprobs: 0,
    return_tokens_as_token_ids: true,
    prompt: Array.from({ length: 4 + (i * 5) % 23 }, (_, k) => 2 + ((i * 37 + k * 11) % 480)),
  }));
}

async function tokensOf(client, reqs) {
  return Promise.all(reqs.map(async (r) => (await client.completions.create(r)).choices[0].logprobs.tokens));
}

async function oneProcessTokens(model, reqs) {
  const server = await h.startServer(model, ['--served-model-name', 'tiny'], {}, { launcher: '' });
  try {
    return await tokensOf(server.client(), reqs);
  } finally {
    assert.equal(await server.stop(), 0);
  }
}

// replicas: the first rank of each data-parallel replica (the /metrics rank label).
const layouts = [
  { ranks: 2, flags: ['--tp', '2'], replicas: [] },
  { ranks: 2, flags: ['--dp', '2', '--ep', '2'], replicas: ['0', '1'] },
  { ranks: 2, flags: ['--dp', '2', '--ep', '2', '--moe-exchange', 'alltoall'], replicas: ['0', '1'] },
  { ranks: 4, flags: ['--dp', '2', '--tp', '2', '--ep', '4'], replicas: ['0', '2'] },
];
for (const { ranks, flags: layout, replicas } of layouts) {
  test(`mpirun -np ${ranks} latte serve ${layout.join(' ')} answers as one process`, async () => {
    const model = h.makeModel();
    const reqs = requests(12);
    const want = await oneProcessTokens(model, reqs);
    const server = await h.startServer(model, ['--served-model-name', 'tiny', ...layout], {},
                                       { launcher: mpirun(ranks) });
    try {
      const client = server.client();
      assert.deepEqual(await tokensOf(client, reqs), want);
      const m = await h.metrics(server.base);
      for (const rank of replicas) {
        assert.ok(m[`latte:rank_requests_assigned_total{model_name="tiny",rank="${rank}"}`] > 0,
                  `the replica of rank ${rank} ran requests: ${JSON.stringify(m)}`);
      }
      assert.ok(m['latte:collective_seconds_total'] > 0);

      // Streams that their clients abandon after a few tokens: every rank's blocks come back.
      const controllers = reqs.slice(0, 6).map(() => new AbortController());
      await Promise.all(reqs.slice(0, 6).map(async (r, i) => {
        const stream = await client.completions.create({ ...r, max_tokens: 400, stream: true },
                                                       { signal: controllers[i].signal });
        let seen = 0;
        try {
          for await (const chunk of stream) {
            if (chunk.choices.length && ++seen === 3) controllers[i].abort();
          }
        } catch (e) { /* the abort */ }
      }));
      const [freed, ms, last] = await h.waitForMetrics(server.base, (mm) =>
        mm['latte:num_requests_running'] === 0 && mm['latte:kv_cache_usage_perc'] === 0, 10000);
      assert.ok(freed, `blocks still held ${ms} ms after the hang-ups: ${JSON.stringify(last)}`);
      for (const rank of replicas) {
        assert.equal(last[`latte:rank_kv_cache_usage_perc{model_name="tiny",rank="${rank}"}`], 0);
      }
    } finally {
      assert.equal(await server.stop(), 0, server.log());
    }
    assert.match(server.log(), /latte serve: stopped/);
  });
}

// The ranks of an mpirun job, by rank (from each process's OMPI_COMM_WORLD_RANK).
function ranksOf(mpirunPid) {
  const fs = require('node:fs');
  const { execFileSync } = require('node:child_process');
  let children = [];
  try {
    children = execFileSync('pgrep', ['-P', String(mpirunPid)]).toString().trim().split('\n').map(Number);
  } catch (e) { /* none */ }
  const ranks = {};
  for (const pid of children) {
    try {
      const env = fs.readFileSync(`/proc/${pid}/environ`).toString().split('\0');
      const entry = env.find((v) => v.startsWith('OMPI_COMM_WORLD_RANK='));
      if (entry) ranks[Number(entry.split('=')[1])] = pid;
    } catch (e) { /* gone */ }
  }
  return ranks;
}

test('a rank that stops answering ends the job within --dist-timeout, naming it', async () => {
  // Two replicas of two ranks: ranks 0, 1 and 2 all end up waiting for rank 3.
  const server = await h.startServer(h.makeModel(), ['--served-model-name', 'tiny', '--dp', '2', '--tp', '2',
                                                     '--ep', '4', '--dist-timeout', '3'], {}, { launcher: mpirun(4) });
  const ranks = ranksOf(server.proc.pid);
  assert.ok(ranks[3], `rank 3 among mpirun's children: ${JSON.stringify(ranks)}`);
  const exited = new Promise((resolve) => server.proc.on('exit', (code) => resolve(code)));
  process.kill(ranks[3], 'SIGSTOP');
  const started = Date.now();
  // A request makes the ranks step, and wait inside a collective for rank 3.
  h.post(server.base, '/v1/completions', { model: 'tiny', prompt: [1, 2, 3], max_tokens: 4 }).catch(() => {});
  const code = await Promise.race([exited, new Promise((r) => setTimeout(() => r('hung'), 30000))]);
  try { process.kill(ranks[3], 'SIGKILL'); } catch (e) { /* mpirun ended it */ }
  assert.notEqual(code, 'hung', 'the job did not end within 30 s');
  assert.notEqual(code, 0);
  assert.ok(Date.now() - started < 30000);
  assert.match(server.log(), /\[rank 0\] waited 3 s \(--dist-timeout\) inside a collective \([a-z_]+\): rank 3 stopped answering \(waiting for it: rank 0, 1, 2\)/);
  assert.doesNotMatch(server.log(), /rank 0 stopped answering/);
});
