// The scheduler against its contract on random workloads, with a stand-in for the
// model: the token budget and max_num_seqs hold every step, a chunk starts where the
// sequence's cached rows end and is backed by blocks no other sequence uses, decodes
// come before prefill chunks, every sequence finishes with the tokens it would get
// alone, and a small pool preempts instead of failing. Prefill bursts: a decoding
// sequence waits for at most max_prefill_burst_tokens prompt tokens between two of its
// tokens, and sits out only steps that prompts fill.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>

#include "engine/scheduler.h"

namespace latte {
namespace {

// The "model": the next token depends only on the tokens so far, as a real model's
// greedy choice does, so recomputation after preemption must give the same output.
int32_t NextToken(const std::vector<int32_t>& tokens) {
  uint64_t h = 1469598103934665603ULL;
  for (int32_t t : tokens) h = (h ^ static_cast<uint32_t>(t)) * 1099511628211ULL;
  return static_cast<int32_t>(h % 7);
}

struct Workload {
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::vector<int64_t> max_tokens;
  std::vector<int64_t> arrival_step;
};

Workload MakeWorkload(std::mt19937& rng, int n, int64_t max_prompt, int64_t max_out) {
  Workload w;
  const std::vector<int32_t> common = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4};
  for (int i = 0; i < n; ++i) {
    auto s = std::make_unique<Sequence>();
    s->id = i;
    const int64_t len = 1 + static_cast<int64_t>(rng() % max_prompt);
    for (int64_t j = 0; j < len; ++j) {
      s->tokens.push_back(i % 2 == 0 && j < static_cast<int64_t>(common.size()) ? common[j]
                                                                                : static_cast<int32_t>(rng() % 7));
    }
    s->prompt_len = len;
    w.seqs.push_back(std::move(s));
    w.max_tokens.push_back(1 + static_cast<int64_t>(rng() % max_out));
    w.arrival_step.push_back(static_cast<int64_t>(rng() % 20));
  }
  return w;
}

// What each sequence generates alone.
std::vector<int32_t> AloneOutput(std::vector<int32_t> tokens, int64_t max_tokens) {
  const size_t prompt = tokens.size();
  for (int64_t i = 0; i < max_tokens; ++i) tokens.push_back(NextToken(tokens));
  return {tokens.begin() + static_cast<std::ptrdiff_t>(prompt), tokens.end()};
}

struct RunStats {
  int64_t steps = 0;
  int64_t preemptions = 0;
  int64_t prefix_hits = 0;
};

RunStats RunWorkload(Workload& w, int64_t num_blocks, int64_t block_size, const SchedulerConfig& config,
                     bool prefix_caching) {
  BlockPool pool(num_blocks, block_size, prefix_caching);
  KvCacheManager kv(pool);
  Scheduler scheduler(config, kv);
  std::vector<std::vector<int32_t>> expected;
  for (size_t i = 0; i < w.seqs.size(); ++i) expected.push_back(AloneOutput(w.seqs[i]->tokens, w.max_tokens[i]));
  size_t finished = 0;
  RunStats stats;
  // Prompt tokens run since each sequence's last token, while it was decoding.
  std::vector<int64_t> stalled(w.seqs.size(), 0);
  // Every decoding sequence fits a step's budget, so only a burst keeps one out.
  const bool decodes_fit = config.max_num_seqs <= config.max_num_batched_tokens;
  for (int64_t step = 0; finished < w.seqs.size(); ++step) {
    if (step >= 100000) {
      ADD_FAILURE() << "no progress after 100000 steps";
      break;
    }
    for (size_t i = 0; i < w.seqs.size(); ++i) {
      if (w.arrival_step[i] == step) scheduler.Add(w.seqs[i].get());
    }
    std::vector<Sequence*> decoding;
    for (const auto& s : w.seqs) {
      if (s->state == SequenceState::kRunning && s->prompt_computed()) decoding.push_back(s.get());
    }
    const std::vector<ScheduledChunk>& chunks = scheduler.Schedule();
    int64_t prompt_tokens = 0;
    for (const ScheduledChunk& c : chunks) {
      if (c.start < c.seq->prompt_len) prompt_tokens += c.count;
    }
    for (Sequence* s : decoding) {
      const size_t i = static_cast<size_t>(s->id);
      if (s->state != SequenceState::kRunning) {  // preempted
        stalled[i] = 0;
        continue;
      }
      const bool takes_token =
          std::any_of(chunks.begin(), chunks.end(), [&](const ScheduledChunk& c) { return c.seq == s && c.samples; });
      stalled[i] += prompt_tokens;
      if (!decodes_fit) continue;
      if (takes_token) {
        EXPECT_LE(stalled[i], config.max_prefill_burst_tokens) << "step " << step << ": a decode waited too long";
        stalled[i] = 0;
      } else {
        EXPECT_EQ(prompt_tokens, config.max_num_batched_tokens)
            << "step " << step << ": a decode sat out a step that prompts did not fill";
      }
    }
    int64_t tokens = 0;
    bool seen_prefill = false;
    for (const ScheduledChunk& c : chunks) {
      Sequence& s = *c.seq;
      tokens += c.count;
      EXPECT_EQ(s.state, SequenceState::kRunning);
      EXPECT_EQ(c.start, s.num_computed);
      EXPECT_GT(c.count, 0);
      EXPECT_LE(c.start + c.count, s.num_tokens());
      EXPECT_EQ(c.samples, c.start + c.count == s.num_tokens());
      const bool is_decode = c.start >= s.prompt_len && c.count == 1;
      if (is_decode && s.preemptions == 0) {
        EXPECT_FALSE(seen_prefill) << "a decode after a prefill chunk";
      }
      seen_prefill |= !is_decode;
      const int64_t bs = block_size;
      EXPECT_GE(static_cast<int64_t>(s.blocks.table.size()) * bs, c.start + c.count);
      if (static_cast<int64_t>(s.blocks.table.size()) * bs < c.start + c.count) continue;
      for (int64_t b = c.start / bs; b <= (c.start + c.count - 1) / bs; ++b) {
        EXPECT_EQ(pool.ref_count(s.blocks.table[b]), 1) << "rows written into a shared block";
      }
    }
    EXPECT_LE(tokens, config.max_num_batched_tokens);
    EXPECT_LE(scheduler.num_running(), config.max_num_seqs);
    if (chunks.empty() && !scheduler.idle()) {
      // Nothing runnable can only mean every waiting sequence is blocked: not allowed.
      ADD_FAILURE() << "step " << step << " scheduled nothing with work waiting";
      break;
    }
    std::vector<ScheduledChunk> done(chunks.begin(), chunks.end());
    scheduler.Completed();
    for (const ScheduledChunk& c : done) {
      if (!c.samples) continue;
      Sequence& s = *c.seq;
      s.tokens.push_back(NextToken(s.tokens));
      const size_t i = static_cast<size_t>(s.id);
      if (s.generated() == w.max_tokens[i]) {
        EXPECT_EQ(std::vector<int32_t>(s.tokens.begin() + s.prompt_len, s.tokens.end()), expected[i]);
        scheduler.Remove(&s);
        ++finished;
      }
    }
    stats.steps = step + 1;
  }
  EXPECT_TRUE(scheduler.idle());
  EXPECT_EQ(pool.NumAvailable(), num_blocks) << "blocks leaked";
  stats.preemptions = scheduler.num_preemptions();
  stats.prefix_hits = kv.counters().hits;
  return stats;
}

TEST(Scheduler, AmplePoolRunsEverythingWithoutPreemption) {
  for (int64_t burst : {64, 100, 256}) {
    std::mt19937 rng(1);
    Workload w = MakeWorkload(rng, 32, 300, 40);
    const RunStats s = RunWorkload(w, 1000, 16, {8, 64, burst}, true);
    EXPECT_EQ(s.preemptions, 0) << "burst " << burst;
    EXPECT_GT(s.prefix_hits, 0) << "burst " << burst;
  }
}

TEST(Scheduler, BurstsBelowTheStepCapPromptTokensWhileDecoding) {
  std::mt19937 rng(4);
  Workload w = MakeWorkload(rng, 24, 200, 30);
  RunWorkload(w, 1000, 16, {8, 64, 20}, true);
}

TEST(Scheduler, SmallPoolPreemptsAndStillFinishesEverything) {
  for (bool prefix : {false, true}) {
    std::mt19937 rng(2);
    Workload w = MakeWorkload(rng, 32, 60, 60);
    // Every sequence fits alone (prompt + output <= 120 tokens = 8 blocks of 16), but
    // not many at once.
    const RunStats s = RunWorkload(w, 12, 16, {16, 96, 384}, prefix);
    EXPECT_GT(s.preemptions, 0) << "prefix caching " << prefix;
  }
}

TEST(Scheduler, BudgetOfOneTokenStillProgresses) {
  std::mt19937 rng(3);
  Workload w = MakeWorkload(rng, 6, 10, 5);
  RunWorkload(w, 50, 4, {4, 1}, true);
}

// The steps in which `decoder` takes a token while `prompt` prefills, from a start where
// the decoder's 4-token prompt and the long prompt arrive together.
std::vector<int> DecodeStepsDuringPrefill(int64_t burst) {
  BlockPool pool(64, 8, false);
  KvCacheManager kv(pool);
  Scheduler scheduler({4, 8, burst}, kv);
  Sequence decoder, prompt;
  decoder.tokens = {1, 2, 3, 4};
  decoder.prompt_len = 4;
  prompt.id = 1;
  prompt.tokens.assign(100, 5);
  prompt.prompt_len = 100;
  scheduler.Add(&decoder);
  scheduler.Add(&prompt);
  std::vector<int> steps;
  for (int step = 0; !prompt.prompt_computed(); ++step) {
    const std::vector<ScheduledChunk> chunks = scheduler.Schedule();
    EXPECT_FALSE(chunks.empty());
    if (chunks.empty()) break;
    scheduler.Completed();
    for (const ScheduledChunk& c : chunks) {
      if (c.seq == &decoder && c.samples) {
        decoder.tokens.push_back(7);
        steps.push_back(step);
      }
    }
  }
  scheduler.Remove(&decoder);
  scheduler.Remove(&prompt);
  EXPECT_EQ(pool.NumAvailable(), 64);
  return steps;
}

TEST(Scheduler, DecodesTakeATokenOncePerBurst) {
  // Steps of 8 tokens: the first runs the decoder's prompt and 4 of the long one's; with
  // a 32-token burst, the decoder then sits out three steps of 8 prompt tokens and takes
  // its token in the fourth (with 7 prompt tokens), and so on. In step 13 the 3 prompt
  // tokens left do not fill a step, so the decoder does not wait for them.
  EXPECT_EQ(DecodeStepsDuringPrefill(32), (std::vector<int>{0, 4, 8, 12, 13}));
  // A burst of one step's tokens: vLLM's schedule, a decode in every step.
  const std::vector<int> every_step = DecodeStepsDuringPrefill(8);
  ASSERT_FALSE(every_step.empty());
  for (size_t i = 0; i < every_step.size(); ++i) EXPECT_EQ(every_step[i], static_cast<int>(i));
  EXPECT_EQ(every_step.size(), 15u) << "4 prompt tokens, 13 steps of 7, then the last 5";
}

// A 40-token request that arrives while a 1000-token prompt prefills, in steps of 64:
// the step that comes after it runs it alongside the long prompt's capped chunk.
int StepsUntilShortPromptSamples(int64_t threshold, int64_t* long_chunk_then) {
  BlockPool pool(256, 16, false);
  KvCacheManager kv(pool);
  Scheduler scheduler({8, 64, 2048, threshold}, kv);
  Sequence long_prompt, short_prompt;
  long_prompt.tokens.assign(1000, 5);
  long_prompt.prompt_len = 1000;
  short_prompt.id = 1;
  short_prompt.tokens.assign(40, 6);
  short_prompt.prompt_len = 40;
  scheduler.Add(&long_prompt);
  int steps = 0;
  for (; steps < 100 && short_prompt.num_computed < 40; ++steps) {
    if (steps == 3) scheduler.Add(&short_prompt);
    const std::vector<ScheduledChunk> chunks = scheduler.Schedule();
    int64_t budget = 0;
    for (const ScheduledChunk& c : chunks) {
      budget += c.count;
      if (c.seq == &long_prompt && steps == 3) *long_chunk_then = c.count;
    }
    EXPECT_LE(budget, 64);
    scheduler.Completed();
  }
  EXPECT_TRUE(long_prompt.num_computed > 0);
  scheduler.Remove(&long_prompt);
  scheduler.Remove(&short_prompt);
  EXPECT_EQ(pool.NumAvailable(), 256);
  return steps;
}

TEST(Scheduler, LongPromptSharesTheStepWithAWaitingOne) {
  int64_t capped = 0;
  // Added before step 3's schedule: with half a step for the long prompt, the short one
  // runs in step 3 itself (32 of its tokens), and finishes in step 4.
  EXPECT_EQ(StepsUntilShortPromptSamples(32, &capped), 5);
  EXPECT_EQ(capped, 32);
  // The default is half the step as well.
  EXPECT_EQ(StepsUntilShortPromptSamples(0, &capped), 5);
  // A threshold of the whole step: the long prompt keeps every step's tokens, and the
  // short one waits for its 1000 tokens (16 steps of 64).
  EXPECT_GE(StepsUntilShortPromptSamples(64, &capped), 16);
  EXPECT_EQ(capped, 64);
}

// A 1000-token prompt alone under `config` (steps of 64): each chunk's (start, count).
std::vector<std::pair<int64_t, int64_t>> LongPromptChunks(const SchedulerConfig& config) {
  BlockPool pool(256, 16, false);
  KvCacheManager kv(pool);
  EXPECT_TRUE(config.Validate().ok());
  Scheduler scheduler(config, kv);
  Sequence prompt;
  prompt.tokens.assign(1000, 5);
  prompt.prompt_len = 1000;
  scheduler.Add(&prompt);
  std::vector<std::pair<int64_t, int64_t>> chunks;
  while (prompt.num_computed < 1000 && chunks.size() < 2000) {
    for (const ScheduledChunk& c : scheduler.Schedule()) chunks.emplace_back(c.start, c.count);
    scheduler.Completed();
  }
  scheduler.Remove(&prompt);
  return chunks;
}

// The same, its decompressed prefix kept to `kept` positions, pair-capped chunks no
// thinner than `floor`.
std::vector<std::pair<int64_t, int64_t>> LongPromptChunks(int64_t kept, int64_t pairs, int64_t floor = 1) {
  SchedulerConfig config{8, 64, 2048, 0};
  config.max_prefill_attention_pairs = pairs;
  config.kept_prefix_positions = kept;
  config.min_pair_capped_tokens = floor;
  return LongPromptChunks(config);
}

// The largest chunk from `start` of LongPromptChunks' prompt under `pairs`, by a plain
// loop: at least one token, at most a step (64) and what is left of the 1000.
int64_t LargestChunkUnder(int64_t start, int64_t pairs) {
  int64_t largest = 1;
  while (largest < 64 && largest < 1000 - start && (largest + 1) * (start + largest + 1) <= pairs) ++largest;
  return largest;
}

TEST(Scheduler, DeepPromptChunksStayUnderTheirAttentionPairs) {
  // 8 × 64² pairs: each chunk the largest under them (a plain loop finds it), a full
  // step while 64 × (L + 64) fits.
  const int64_t pairs = 8 * 64 * 64;
  const auto chunks = LongPromptChunks(/*kept=*/1000, pairs);
  int64_t expect_start = 0;
  for (const auto& [start, count] : chunks) {
    EXPECT_EQ(start, expect_start);
    EXPECT_EQ(count, LargestChunkUnder(start, pairs)) << "at " << start;
    expect_start += count;
  }
  EXPECT_EQ(expect_start, 1000);
  EXPECT_EQ(chunks.front().second, 64);
  EXPECT_LT(chunks.back().second, 40);
  // Nothing kept: re-decompressing the prefix is paid per chunk, so chunks stay whole.
  for (const auto& [start, count] : LongPromptChunks(/*kept=*/0, 0))
    EXPECT_EQ(count, std::min<int64_t>(64, 1000 - start));
  // A budget under one token's pairs still moves a token a step.
  const auto crawl = LongPromptChunks(1000, 1);
  EXPECT_EQ(crawl.size(), 1000u);
}

TEST(Scheduler, PairCappedChunksKeepTheirFloor) {
  // Under 4 × 64² pairs the chunks thin below 20 tokens from ~800 deep on; a floor of 20
  // keeps them there (the last one takes what is left), the chunks before unchanged.
  const int64_t pairs = 4 * 64 * 64;
  const auto thin = LongPromptChunks(/*kept=*/1000, pairs);
  const auto floored = LongPromptChunks(/*kept=*/1000, pairs, /*floor=*/20);
  ASSERT_LT(thin.back().second, 20);
  int64_t expect_start = 0;
  for (const auto& [start, count] : floored) {
    EXPECT_EQ(start, expect_start);
    EXPECT_EQ(count, std::min<int64_t>(1000 - start, std::max<int64_t>(20, LargestChunkUnder(start, pairs))))
        << "at " << start;
    expect_start += count;
  }
  EXPECT_EQ(expect_start, 1000);
  EXPECT_LT(floored.size(), thin.size());
}

TEST(Scheduler, ChunksPastTheKeptPrefixCountTheirLatentPairs) {
  // Kept to 400 positions, a pair with its key past them costing 3.4: each chunk the
  // largest whose weighted pairs fit (a plain loop sums them key by key), so past 400 the
  // chunks thin faster than within.
  const int64_t pairs = 8 * 64 * 64, kept = 400;
  const double latent_cost = 3.4;
  SchedulerConfig config{8, 64, 2048, 0};
  config.max_prefill_attention_pairs = pairs;
  config.kept_prefix_positions = kept;
  config.latent_key_pair_cost = latent_cost;
  const auto weighted = [&](int64_t start, int64_t c) {
    double cost = 0;
    for (int64_t key = 0; key < start + c; ++key) cost += c * (key < kept ? 1.0 : latent_cost);
    return cost;
  };
  int64_t expect_start = 0, past_kept = 0;
  for (const auto& [start, count] : LongPromptChunks(config)) {
    EXPECT_EQ(start, expect_start);
    int64_t largest = 1;
    while (largest < 64 && largest < 1000 - start && weighted(start, largest + 1) <= pairs) ++largest;
    EXPECT_EQ(count, largest) << "at " << start;
    if (start >= kept && start + count < 1000) {  // not the prompt's last tokens
      EXPECT_LT(count, LargestChunkUnder(start, pairs)) << "at " << start;
      ++past_kept;
    }
    expect_start += count;
  }
  EXPECT_EQ(expect_start, 1000);
  EXPECT_GT(past_kept, 10);
  // With no latent form, a chunk past the kept positions decompresses its prefix again:
  // whole chunks there.
  config.latent_key_pair_cost = 0;
  for (const auto& [start, count] : LongPromptChunks(config)) {
    if (start + 64 > kept) {
      EXPECT_EQ(count, std::min<int64_t>(64, 1000 - start)) << "at " << start;
    }
  }
}

TEST(Scheduler, AWaitingPromptCutsADeepChunkToTheContendedPairs) {
  BlockPool pool(256, 16, false);
  KvCacheManager kv(pool);
  SchedulerConfig config{8, 64, 2048, 32};
  config.max_prefill_attention_pairs = 8 * 64 * 64;
  config.kept_prefix_positions = 1000;
  Scheduler scheduler(config, kv);
  Sequence long_prompt, short_prompt;
  long_prompt.tokens.assign(1000, 5);
  long_prompt.prompt_len = 1000;
  short_prompt.id = 1;
  short_prompt.tokens.assign(40, 6);
  short_prompt.prompt_len = 40;
  scheduler.Add(&long_prompt);
  while (long_prompt.num_computed < 800) {
    scheduler.Schedule();
    scheduler.Completed();
  }
  scheduler.Add(&short_prompt);
  const int64_t depth = long_prompt.num_computed;
  int64_t long_chunk = 0, short_chunk = 0;
  for (const ScheduledChunk& c : scheduler.Schedule()) (c.seq == &long_prompt ? long_chunk : short_chunk) = c.count;
  scheduler.Completed();
  // 32 × 64 pairs: the largest c with c × (depth + c) under it; the short one takes the rest.
  int64_t largest = 1;
  while ((largest + 1) * (depth + largest + 1) <= 32 * 64) ++largest;
  EXPECT_EQ(long_chunk, largest);
  EXPECT_EQ(short_chunk, 40);
  scheduler.Remove(&long_prompt);
  scheduler.Remove(&short_prompt);
  EXPECT_EQ(pool.NumAvailable(), 256);
}

// A 1000-token prompt prefilling in steps of 64 (threshold 32), and from step 3 on a
// `short_len`-token prompt arriving before every step in `arrivals`: which steps ran a
// chunk of the long prompt, and each short prompt's first step and the step it sampled in.
struct SitOutRun {
  std::vector<int> long_steps;
  std::vector<std::pair<int, int>> short_steps;  // (first scheduled, sampled)
  int steps = 0;
};

SitOutRun RunShortPromptsBesideALongOne(int64_t short_len, const std::vector<int>& arrivals, int64_t threshold = 0) {
  BlockPool pool(512, 16, false);
  KvCacheManager kv(pool);
  Scheduler scheduler({64, 64, 2048, threshold}, kv);
  Sequence long_prompt;
  long_prompt.tokens.assign(1000, 5);
  long_prompt.prompt_len = 1000;
  scheduler.Add(&long_prompt);
  std::vector<std::unique_ptr<Sequence>> shorts;
  SitOutRun run;
  for (int step = 0; step < 400 && !long_prompt.prompt_computed(); ++step) {
    if (std::find(arrivals.begin(), arrivals.end(), step) != arrivals.end()) {
      auto s = std::make_unique<Sequence>();
      s->id = static_cast<int64_t>(shorts.size()) + 1;
      s->tokens.assign(static_cast<size_t>(short_len), static_cast<int32_t>(6 + shorts.size() % 7));
      s->prompt_len = short_len;
      scheduler.Add(s.get());
      shorts.push_back(std::move(s));
      run.short_steps.emplace_back(-1, -1);
    }
    int64_t budget = 0;
    for (const ScheduledChunk& c : scheduler.Schedule()) {
      budget += c.count;
      if (c.seq == &long_prompt) {
        run.long_steps.push_back(step);
        continue;
      }
      auto& [first, sampled] = run.short_steps[static_cast<size_t>(c.seq->id - 1)];
      if (first < 0) first = step;
      if (c.samples) sampled = step;
    }
    EXPECT_LE(budget, 64);
    scheduler.Completed();
    // A short request asks for one token: it finishes when it samples.
    for (auto& s : shorts) {
      if (s->state == SequenceState::kRunning && s->prompt_computed()) scheduler.Remove(s.get());
    }
    run.steps = step + 1;
  }
  EXPECT_TRUE(long_prompt.prompt_computed());
  scheduler.Remove(&long_prompt);
  for (auto& s : shorts) scheduler.Remove(s.get());
  EXPECT_EQ(pool.NumAvailable(), 512);
  return run;
}

TEST(Scheduler, AShortPromptRunsInAStepTheLongOneSitsOut) {
  // 20 tokens, under the threshold (32): it runs whole in the step after it arrives, and
  // the long prompt, mid-prefill, takes no chunk of that step.
  const SitOutRun run = RunShortPromptsBesideALongOne(20, {3});
  ASSERT_EQ(run.short_steps.size(), 1u);
  EXPECT_EQ(run.short_steps[0], std::make_pair(3, 3));
  for (int step = 0; step < run.steps; ++step) {
    const bool long_ran = std::find(run.long_steps.begin(), run.long_steps.end(), step) != run.long_steps.end();
    EXPECT_EQ(long_ran, step != 3) << "step " << step;
  }
  // 40 tokens, over the threshold: it shares step 3 with the long prompt's capped chunk
  // and samples in step 4; the long prompt sits out nothing.
  const SitOutRun shared = RunShortPromptsBesideALongOne(40, {3});
  EXPECT_EQ(shared.short_steps[0], std::make_pair(3, 4));
  EXPECT_EQ(shared.long_steps.size(), static_cast<size_t>(shared.steps));
  // A threshold of the whole step turns sharing off, and sitting out with it: the short
  // prompt waits for the long one's whole prefill (16 steps of 64): it gets the last
  // step's leftover tokens.
  const SitOutRun whole = RunShortPromptsBesideALongOne(20, {3}, /*threshold=*/64);
  EXPECT_EQ(whole.steps, 16);
  EXPECT_EQ(whole.short_steps[0].first, 15);
  EXPECT_EQ(whole.long_steps.size(), static_cast<size_t>(whole.steps));
}

TEST(Scheduler, ALongPromptNeverSitsOutTwoStepsInARow) {
  // A short prompt before every step from 3 to 60: the long one sits out every other
  // step at most, so it still finishes, running in at least half the steps.
  std::vector<int> every_step;
  for (int step = 3; step <= 60; ++step) every_step.push_back(step);
  const SitOutRun run = RunShortPromptsBesideALongOne(20, every_step);
  ASSERT_FALSE(run.long_steps.empty());
  for (size_t i = 1; i < run.long_steps.size(); ++i) {
    EXPECT_LE(run.long_steps[i] - run.long_steps[i - 1], 2) << "after step " << run.long_steps[i - 1];
  }
  EXPECT_GE(2 * static_cast<int>(run.long_steps.size()), run.steps - 1);
  EXPECT_LT(run.long_steps.size(), static_cast<size_t>(run.steps)) << "it sat some steps out";
  // Every short prompt that arrived before the long prompt's end ran in a step or two.
  for (size_t i = 0; i < run.short_steps.size(); ++i) {
    const auto [first, sampled] = run.short_steps[i];
    const int arrived = every_step[i];
    if (arrived >= run.steps) break;
    EXPECT_GE(first, arrived);
    EXPECT_LE(sampled - arrived, 1) << "short prompt " << i;
  }
}

TEST(Scheduler, TheEnginesPairCapAppliesUnlessSetOrTurnedOff) {
  // The engine's derived cap binds when the flag is 0 (its default), the flag's own
  // value when set, and -1 leaves chunks sized by tokens.
  auto chunks_with = [](int64_t flag, int64_t derived) {
    SchedulerConfig config{8, 64, 2048, 0};
    config.max_prefill_attention_pairs = flag;
    config.auto_prefill_attention_pairs = derived;
    config.kept_prefix_positions = 1000;
    return LongPromptChunks(config);
  };
  EXPECT_EQ(chunks_with(0, 8 * 64 * 64), LongPromptChunks(1000, 8 * 64 * 64));
  EXPECT_EQ(chunks_with(4 * 64 * 64, 8 * 64 * 64), LongPromptChunks(1000, 4 * 64 * 64));
  EXPECT_EQ(chunks_with(-1, 8 * 64 * 64), LongPromptChunks(0, 0));
  EXPECT_EQ(chunks_with(0, 0), LongPromptChunks(0, 0));
  SchedulerConfig bad;
  bad.max_prefill_attention_pairs = -2;
  EXPECT_FALSE(bad.Validate().ok());
}

TEST(Scheduler, FollowersWaitForTheirLeadersPrompt) {
  BlockPool pool(64, 4, true);
  KvCacheManager kv(pool);
  Scheduler scheduler({8, 8}, kv);
  Sequence leader, follower;
  leader.tokens = follower.tokens = std::vector<int32_t>(18, 5);
  leader.tokens[3] = follower.tokens[3] = 2;
  leader.prompt_len = follower.prompt_len = 18;
  follower.id = 1;
  follower.leader = &leader;
  scheduler.Add(&leader);
  scheduler.Add(&follower);
  // 18 prompt tokens at 8 per step: the leader needs three steps, the follower waits.
  for (int step = 0; step < 3; ++step) {
    const auto& chunks = scheduler.Schedule();
    ASSERT_EQ(chunks.size(), 1u);
    EXPECT_EQ(chunks[0].seq, &leader);
    scheduler.Completed();
  }
  leader.tokens.push_back(1);
  const auto& chunks = scheduler.Schedule();
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[1].seq, &follower);
  EXPECT_EQ(chunks[1].start, 16) << "the follower takes the leader's 4 full blocks";
  scheduler.Completed();
  scheduler.Remove(&leader);
  scheduler.Remove(&follower);
  EXPECT_EQ(pool.NumAvailable(), 64);
}

}  // namespace
}  // namespace latte

namespace latte {
namespace {

TEST(Scheduler, PreemptsTheMostRecentlyAdmittedSequence) {
  // Three 4-token prompts in 4-token blocks take 3 of 4 blocks; the first decode step
  // needs a new block for each: a takes the last free one, and for b the last
  // admitted sequence, c, gives its block back.
  BlockPool pool(4, 4, false);
  KvCacheManager kv(pool);
  Scheduler scheduler({8, 64}, kv);
  Sequence a, b, c;
  for (Sequence* s : {&a, &b, &c}) {
    s->tokens = {1, 2, 3, 4};
    s->prompt_len = 4;
    scheduler.Add(s);
  }
  ASSERT_EQ(scheduler.Schedule().size(), 3u);
  scheduler.Completed();
  for (Sequence* s : {&a, &b, &c}) s->tokens.push_back(9);
  const std::vector<ScheduledChunk>& chunks = scheduler.Schedule();
  EXPECT_EQ(scheduler.num_preemptions(), 1);
  EXPECT_EQ(c.state, SequenceState::kWaiting);
  EXPECT_EQ(c.num_computed, 0);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].seq, &a);
  EXPECT_EQ(chunks[1].seq, &b);
}

// Drafts (speculative decoding): a decoding sequence's chunk takes its last token and
// its drafts; a step with too few tokens, or a pool with too few blocks, drops drafts
// before it preempts anyone; preemption drops them all; and rows of drafts are not
// registered in the prefix cache until the engine keeps them.
TEST(Scheduler, DraftsRideWithTheLastTokenAndGoFirstWhenShort) {
  BlockPool pool(3, 4, /*prefix_caching=*/true);  // 12 positions
  KvCacheManager kv(pool);
  Scheduler scheduler({8, 64}, kv);
  Sequence a;
  a.tokens = {1, 2, 3, 4, 5, 6, 7};
  a.prompt_len = 7;
  scheduler.Add(&a);
  ASSERT_EQ(scheduler.Schedule().size(), 1u);
  scheduler.Completed();                         // 7 rows: blocks 0, 1 (one full block registered)
  a.tokens.insert(a.tokens.end(), {8, 20, 21});  // the sampled token, then 2 drafts
  a.drafts = 2;
  const std::vector<ScheduledChunk>& chunks = scheduler.Schedule();
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0].start, 7);
  EXPECT_EQ(chunks[0].count, 3);
  EXPECT_TRUE(chunks[0].samples);
  scheduler.Completed();
  EXPECT_EQ(a.num_computed, 10);
  EXPECT_EQ(a.blocks.hashes.size(), 2u) << "positions 0-7 are kept tokens: two full blocks";
  // The engine kept one draft: tokens 8, 20 and a new one at 21; rows stand to 9.
  a.DropDrafts(2);
  a.tokens.insert(a.tokens.end(), {20, 30});
  a.num_computed = 9;
  // 4 drafts need positions up to 13, past the pool's 12: they are dropped, no preemption.
  a.tokens.insert(a.tokens.end(), {40, 41, 42, 43});
  a.drafts = 4;
  const std::vector<ScheduledChunk>& next = scheduler.Schedule();
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].count, 1);
  EXPECT_EQ(a.drafts, 0);
  EXPECT_EQ(a.num_tokens(), 10);
  EXPECT_EQ(scheduler.num_preemptions(), 0);
}

TEST(Scheduler, AStepShortOfTokensCutsDraftsAndPreemptionDropsThem) {
  BlockPool pool(16, 4, false);
  KvCacheManager kv(pool);
  Scheduler scheduler({8, 3}, kv);  // 3 tokens per step
  Sequence a;
  a.tokens = {1, 2, 3};
  a.prompt_len = 3;
  scheduler.Add(&a);
  scheduler.Schedule();
  scheduler.Completed();
  a.tokens.insert(a.tokens.end(), {4, 50, 51, 52});  // 3 drafts: 4 tokens, the step holds 3
  a.drafts = 3;
  const std::vector<ScheduledChunk>& chunks = scheduler.Schedule();
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0].count, 3);
  EXPECT_TRUE(chunks[0].samples);
  EXPECT_EQ(a.drafts, 2);
  EXPECT_EQ(a.tokens, (std::vector<int32_t>{1, 2, 3, 4, 50, 51}));
  scheduler.Remove(&a);
  EXPECT_EQ(a.drafts, 0);
  EXPECT_EQ(a.tokens, (std::vector<int32_t>{1, 2, 3, 4}));
}

}  // namespace
}  // namespace latte
