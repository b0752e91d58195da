#include "bench/model_benchmark.h"
#include "engine/model_files.h"

#include "dist/runtime.h"
#include "model/tensor_parallel.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>

#include "base/dtype.h"
#include "base/splitmix64.h"
#include "bench/decode_loop.h"
#include "bench/machine_probe.h"
#include "model/deepseek.h"
#include "model/model_weights.h"

namespace latte {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<int32_t> PromptIds(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> ids(n);
  SplitMix64 rng(seed * kSplitMix64Gamma + 1);
  for (int32_t& id : ids) id = static_cast<int32_t>(rng.Next() % static_cast<uint64_t>(vocab));
  return ids;
}

Result<double> RunPrefill(DeepSeekModel& model, int64_t P, uint64_t seed) {
  const std::vector<int32_t> tokens = PromptIds(P, model.config().vocab_size, seed);
  SequenceCaches caches = model.NewCaches(1, P);
  std::vector<float> logits;
  const SequenceSpan span[] = {{caches.table(0), 0, P, SpanLogits::kLast}};
  const auto t0 = Clock::now();
  LATTE_RETURN_IF_ERROR(model.Forward(tokens, span, caches.cache(), logits));
  return static_cast<double>(P) / std::chrono::duration<double>(Clock::now() - t0).count();
}

// B sequences with `prompt` tokens each in their caches (room for `steps` more), and
// each one's first decode token (the argmax after its prompt). RunDecode restarts from
// here every run.
struct DecodeStart {
  std::unique_ptr<SequenceCaches> caches;  // one table per sequence
  std::vector<int32_t> first;              // [B]
  int64_t prompt = 0;
};

// Fills a DecodeStart by prefill in chunks of `chunk` tokens (untimed). `model` may run
// its prefill spans through the latent path (MlaSettings::decompress_prefill = false):
// for deep fills its attention is the shared-key kernel, where the decompress path
// re-decompresses the whole context for every chunk (minutes at 8k on two cores).
Result<DecodeStart> FillCaches(DeepSeekModel& model, int64_t prompt, int64_t chunk, int64_t steps, int64_t batch,
                               uint64_t seed) {
  const int64_t vocab = model.config().vocab_size;
  DecodeStart start;
  start.prompt = prompt;
  std::vector<float> logits;
  start.caches = std::make_unique<SequenceCaches>(model.NewCaches(batch, prompt + steps));
  for (int64_t b = 0; b < batch; ++b) {  // one sequence at a time
    const std::vector<int32_t> ids = PromptIds(prompt, vocab, seed * 1000 + b);
    for (int64_t k0 = 0; k0 < prompt; k0 += chunk) {
      const int64_t count = std::min(chunk, prompt - k0);
      const std::vector<int32_t> part(ids.begin() + k0, ids.begin() + k0 + count);
      const SequenceSpan span[] = {{start.caches->table(b), k0, count, SpanLogits::kLast}};
      LATTE_RETURN_IF_ERROR(model.Forward(part, span, start.caches->cache(), logits));
    }
    start.first.push_back(ArgMax(logits.data(), vocab));
  }
  return start;
}

// `steps` timed decode steps of all B sequences from `start` (each rewound to
// `start.prompt` tokens: the rows past it are rewritten by the steps).
Result<double> RunDecode(DeepSeekModel& model, DecodeStart& start, int64_t steps) {
  const int64_t vocab = model.config().vocab_size;
  std::vector<int64_t> lengths(start.first.size(), start.prompt);
  std::vector<int32_t> next = start.first;
  std::vector<float> logits;
  const auto greedy = [vocab](std::span<const float> step_logits, std::span<int32_t> tokens) {
    for (size_t b = 0; b < tokens.size(); ++b) tokens[b] = ArgMax(step_logits.data() + b * vocab, vocab);
    return true;
  };
  const auto t0 = Clock::now();
  LATTE_RETURN_IF_ERROR(DecodeSteps(model, *start.caches, lengths, next, steps, greedy, logits));
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return static_cast<double>(static_cast<int64_t>(lengths.size()) * steps) / seconds;
}

// `steps` timed verify steps of all B sequences from `start`: each feeds its last token
// and `verify - 1` random draft tokens as one decode span with logits for every row
// (a speculative step), then advances by one token, the greedy one after its first row.
// Drafts are drawn anew for every sequence and step: a draft is a token the model has
// not seen there, so its rows route to their own experts as real drafts do (one fixed
// draft list would send every sequence's draft rows to nearly the same experts and
// understate the step's bytes at batch 16).
Result<double> RunVerify(DeepSeekModel& model, DecodeStart& start, int64_t steps, int64_t verify) {
  const int64_t vocab = model.config().vocab_size, B = static_cast<int64_t>(start.first.size());
  std::vector<int64_t> lengths(B, start.prompt);
  std::vector<int32_t> next = start.first, step_tokens(B * verify);
  std::vector<SequenceSpan> spans(B);
  std::vector<float> logits;
  SplitMix64 draft_rng(99 * kSplitMix64Gamma + 1);
  const auto t0 = Clock::now();
  for (int64_t step = 0; step < steps; ++step) {
    for (int64_t b = 0; b < B; ++b) {
      if (lengths[b] + verify > start.caches->capacity()) return Status::Internal("a verify step ran past the cache");
      step_tokens[b * verify] = next[b];
      for (int64_t d = 1; d < verify; ++d) {
        step_tokens[b * verify + d] = static_cast<int32_t>(draft_rng.Next() % static_cast<uint64_t>(vocab));
      }
      spans[b] = SequenceSpan{start.caches->table(b), lengths[b], verify, SpanLogits::kAll, lengths[b]};
    }
    LATTE_RETURN_IF_ERROR(model.Forward(step_tokens, spans, start.caches->cache(), logits));
    for (int64_t b = 0; b < B; ++b) {
      next[b] = ArgMax(logits.data() + b * verify * vocab, vocab);
      ++lengths[b];
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return static_cast<double>(B * steps) / seconds;
}

void Summarize(ModelBenchResult& r) {
  const double n = static_cast<double>(r.tok_s.size());
  double sum = 0;
  for (double v : r.tok_s) sum += v;
  r.tok_s_mean = sum / n;
  double sq = 0;
  for (double v : r.tok_s) sq += (v - r.tok_s_mean) * (v - r.tok_s_mean);
  r.tok_s_sd = r.tok_s.size() > 1 ? std::sqrt(sq / (n - 1)) : 0.0;
  r.achieved_gbps = r.costs.Bytes() * r.tok_s_mean / 1e9;
  r.achieved_gflops = r.costs.flops * r.tok_s_mean / 1e9;
  r.paired_read_fraction.clear();
  for (size_t i = 0; i < r.paired_read_gbps.size(); ++i) {
    r.paired_read_fraction.push_back(r.costs.Bytes() * r.tok_s[i] / 1e9 / r.paired_read_gbps[i]);
  }
}

}  // namespace

Status CheckModelBenchOptions(const ModelBenchOptions& o, const ModelConfig& c) {
  if (o.prompts.empty() || o.gens.empty() || o.depths.empty())
    return Status::InvalidArgument("-p, -n and -d need a value");
  for (int64_t p : o.prompts) {
    if (p < 0) return Status::InvalidArgument("-p must be >= 0, got " + std::to_string(p));
    LATTE_RETURN_IF_ERROR(CheckContextLength(c, p, "the pp test -p " + std::to_string(p)));
  }
  for (int64_t d : o.depths) {
    if (d < 0) return Status::InvalidArgument("-d must be >= 0, got " + std::to_string(d));
  }
  for (int64_t n : o.gens) {
    if (n < 0) return Status::InvalidArgument("-n must be >= 0, got " + std::to_string(n));
    for (int64_t d : o.depths) {
      const int64_t prompt = d > 0 ? d : o.tg_prompt;
      const std::string start = d > 0 ? "-d " + std::to_string(d) : "the " + std::to_string(prompt) + "-token prompt";
      LATTE_RETURN_IF_ERROR(CheckContextLength(c, prompt + n, start + " plus -n " + std::to_string(n)));
    }
  }
  if (o.repetitions < 1) return Status::InvalidArgument("-r must be at least 1");
  if (o.batch < 1 || o.batch > 1024) return Status::InvalidArgument("--batch must be in [1, 1024]");
  if (o.verify_tokens < 1 || o.verify_tokens > 64) return Status::InvalidArgument("--verify-tokens must be in [1, 64]");
  if (o.tg_prompt < 1) return Status::InvalidArgument("the tg prompt needs at least one token");
  if (o.depth_chunk < 1) return Status::InvalidArgument("the depth fill needs chunks of at least one token");
  if (o.paired_read_probe && o.load.parallel.world_size() > 1) {
    return Status::InvalidArgument("--paired-probe runs in one process (each rank would probe the others' reads)");
  }
  if (o.batch % o.load.parallel.dp != 0) {
    return Status::InvalidArgument("--batch " + std::to_string(o.batch) + " must be a multiple of --dp " +
                                   std::to_string(o.load.parallel.dp) + " (each replica decodes its share)");
  }
  return Status::Ok();
}

Status RunModelBenchmark(const ModelBenchOptions& o, void (*report)(const ModelBenchResult&, const ModelConfig&, void*),
                         void* user) {
  {  // every test fits before any weight loads
    LATTE_ASSIGN_OR_RETURN(const ModelFiles files, ModelFiles::Find(o.model_dir));
    LATTE_ASSIGN_OR_RETURN(const ModelConfig config, files.Config());
    LATTE_RETURN_IF_ERROR(CheckModelBenchOptions(o, config));
  }
  // Under tensor parallelism every rank runs the same tests on its shard (the same
  // random tokens), in lockstep through the collectives; rank 0 reports.
  Comm& world = WorldComm();
  const ModelRanks ranks = RanksOf(o.load.parallel, world, ReplicaComm(o.load.parallel.tp));
  LoadOptions load = o.load;
  load.shard = ShardOf(load.parallel, world.rank());
  load.progress = load.progress && world.rank() == 0;
  LATTE_ASSIGN_OR_RETURN(std::unique_ptr<ModelWeights> weights, ModelWeights::Load(o.model_dir, load));
  const ModelConfig& c = weights->config();
  const WeightValueBytes wb = MeasureWeightValueBytes(*weights);
  DeepSeekModel model(*weights, MlaSettings{}, ranks);
  if (world.rank() != 0) report = nullptr;
  // Data-parallel attention: each replica runs its share of the batch (pp: a prompt of
  // its own), all at once; the figures are the replicas' together.
  const int64_t replicas = o.load.parallel.dp;
  const int64_t local_batch = o.batch / replicas;
  // The ranks of one replica run the same tokens; replicas draw their own.
  const uint64_t rank_seed = static_cast<uint64_t>(world.rank() / o.load.parallel.tp) * 100003;
  // The latent cache holds rows in the compute dtype (DeepSeekModel::NewCaches).
  const int64_t kvb = static_cast<int64_t>(DTypeSize(weights->compute_dtype()));
  std::optional<ReadProbe> read_probe;
  if (o.paired_read_probe) read_probe.emplace();

  for (const int64_t prompt : o.prompts) {
    if (prompt == 0) continue;
    ModelBenchResult r;
    r.test = "pp" + std::to_string(prompt);
    r.batch = 1;
    r.tokens_per_run = prompt;
    r.costs = PrefillCostsPerToken(c, prompt, wb, kvb);
    for (int64_t run = 0; run <= o.repetitions; ++run) {  // run 0: warm-up
      if (run == 1) world.ResetStats();
      LATTE_ASSIGN_OR_RETURN(double tok_s, RunPrefill(model, prompt, static_cast<uint64_t>(run) + 1 + rank_seed));
      if (run > 0) {
        r.tok_s.push_back(tok_s * static_cast<double>(replicas));
        r.timed_seconds += static_cast<double>(prompt) / tok_s;
      }
    }
    r.collectives = world.stats();
    r.timed_forwards = o.repetitions;
    Summarize(r);
    if (report) report(r, c, user);
  }
  for (const int64_t depth : o.depths) {
    for (const int64_t gen : o.gens) {
      if (gen == 0) continue;
      ModelBenchResult r;
      const int64_t prompt = depth > 0 ? depth : o.tg_prompt;
      r.test = "tg" + std::to_string(gen) + (o.verify_tokens > 1 ? "x" + std::to_string(o.verify_tokens) : "") +
               (depth > 0 ? "@d" + std::to_string(depth) : "");
      r.batch = o.batch;
      r.depth = depth;
      r.tokens_per_run = gen * o.batch;
      const double average_context = static_cast<double>(prompt) + static_cast<double>(gen - 1) / 2;
      r.costs = DecodeCostsPerToken(c, o.load.mode, o.batch * o.verify_tokens, average_context, wb, kvb);
      // A verify step's B x V rows share the weights; per sequence step, V of them.
      for (double* v : {&r.costs.weight_bytes, &r.costs.kv_bytes, &r.costs.flops}) *v *= o.verify_tokens;
      // Deep fills prefill through the latent path (naive mode has none: it decompresses).
      MlaSettings fill_settings;
      fill_settings.decompress_prefill = depth == 0 || o.load.mode == MlaMode::kNaive;
      DeepSeekModel filler(*weights, fill_settings, ranks);
      LATTE_ASSIGN_OR_RETURN(DecodeStart start, FillCaches(filler, prompt, o.depth_chunk, gen + o.verify_tokens,
                                                           local_batch, 1 + rank_seed));
      double probe_before = 0;
      for (int64_t run = 0; run <= o.repetitions; ++run) {  // run 0: warm-up
        if (run == 1) world.ResetStats();
        if (run == 1 && read_probe) probe_before = read_probe->SampleGbps();
        LATTE_ASSIGN_OR_RETURN(double tok_s, o.verify_tokens > 1 ? RunVerify(model, start, gen, o.verify_tokens)
                                                                 : RunDecode(model, start, gen));
        if (run > 0) {
          r.tok_s.push_back(tok_s * static_cast<double>(replicas));
          r.timed_seconds += static_cast<double>(local_batch * gen) / tok_s;
          if (read_probe) {
            const double probe_after = read_probe->SampleGbps();
            r.paired_read_gbps.push_back(std::max(probe_before, probe_after));
            probe_before = probe_after;
          }
        }
      }
      r.collectives = world.stats();
      r.timed_forwards = o.repetitions * gen;
      Summarize(r);
      if (report) report(r, c, user);
    }
  }
  return Status::Ok();
}

}  // namespace latte
