// Speculative decoding with the checkpoint's multi-token-prediction (MTP) layer, on
// random test models that have one (make-model --mtp-layers 1):
//   - the engine's outputs with drafts equal its outputs without: greedy and seeded
//     sampled requests give the same tokens (a drawn token is drawn from the same row
//     with the same random state whether or not a draft was proposed for it), alone
//     with the logprobs bit for bit on f32 weights, and in a batch with preemption;
//   - the MTP layer's logits agree across the three MLA modes and between one pass and
//     chunks (its latent cache of its own holds what a full pass computes);
//   - a checkpoint without the layer is refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "engine/engine.h"
#include "model/deepseek.h"
#include "model/model_weights.h"
#include "model/safetensors.h"
#include "model/tensor_specs.h"
#include "test_models.h"

namespace latte {
namespace {

using testing_models::MakeModel;

std::string MtpModel(CheckpointDType dtype) {
  MakeModelOverrides o;
  o.dtype = dtype;
  o.mtp_layers = 1;
  return MakeModel("tiny", o, /*seed=*/23);
}

// A model whose MTP layer mostly guesses right, from MtpModel(kF32): the main layers'
// outputs (o_proj, down_proj) scaled by 0.02, so a token mostly follows from the one
// before it through embed_tokens and lm_head (a bigram table the context nudges); and
// an MTP layer that computes that table for the token it is given: eh_proj passes
// enorm(embed(t_{i+1})) through (plus noise of `noise` per weight, to make some
// guesses wrong), its block adds nothing (o_proj, down_proj zero), and shared_head is
// the main model's final norm and lm_head. Then the draft for t_{i+2} is the bigram
// successor of t_{i+1}: what the main model draws, where the context does not change it.
std::string GuessingMtpModel(float noise) {
  const std::string source = MtpModel(CheckpointDType::kF32);
  const std::string dir =
      testing_models::ModelRoot() + "/mtp-guessing-" + std::to_string(noise) + "-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  for (const char* file : {"config.json", "tokenizer.json", "tokenizer_config.json"}) {
    std::filesystem::copy_file(source + "/" + file, dir + "/" + file,
                               std::filesystem::copy_options::overwrite_existing);
  }
  auto ck = Checkpoint::Open(source);
  EXPECT_TRUE(ck.ok()) << ck.status().message();
  auto config = ModelConfig::FromFile(source + "/config.json");
  EXPECT_TRUE(config.ok());
  const int64_t L = config->num_hidden_layers, d = config->hidden_size;
  const std::string mtp = LayerPrefix(L);
  std::mt19937_64 rng(17);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  SafetensorsWriter writer;
  for (const TensorInfo& t : ck->tensors()) {
    std::vector<float> v(t.NumElements());
    std::memcpy(v.data(), t.data, t.nbytes);
    const bool in_mtp = t.name.starts_with(mtp);
    const bool adds_to_residual = t.name.ends_with("o_proj.weight") || t.name.ends_with("down_proj.weight");
    if (adds_to_residual) {
      for (float& x : v) x = in_mtp ? 0.0f : 0.02f * x;
    } else if (t.name == mtp + "eh_proj.weight") {  // [d, 2d]: [I + noise | noise]
      for (int64_t r = 0; r < d; ++r) {
        for (int64_t c = 0; c < 2 * d; ++c) v[r * 2 * d + c] = (r == c ? 1.0f : 0.0f) + noise * gauss(rng);
      }
    } else if (t.name == mtp + "enorm.weight") {
      std::fill(v.begin(), v.end(), 1.0f);
    } else if (t.name == mtp + "shared_head.norm.weight" || t.name == mtp + "shared_head.head.weight" ||
               t.name == mtp + "embed_tokens.weight") {
      const std::string main = t.name == mtp + "shared_head.norm.weight"   ? "model.norm.weight"
                               : t.name == mtp + "shared_head.head.weight" ? "lm_head.weight"
                                                                           : "model.embed_tokens.weight";
      std::memcpy(v.data(), ck->Find(main)->data, t.nbytes);
    }
    std::vector<uint8_t> bytes(t.nbytes);
    std::memcpy(bytes.data(), v.data(), t.nbytes);
    writer.Add(t.name, DType::kF32, t.shape, std::move(bytes));
  }
  EXPECT_TRUE(writer.Write(dir + "/model.safetensors").ok());
  return dir;
}

using Loaded = testing_models::LoadedModel;

Loaded Load(const std::string& dir, MlaMode mode, bool mtp = true) {
  LoadOptions options;
  options.mode = mode;
  options.mtp = mtp;
  return testing_models::LoadModel(dir, options);
}

EngineOptions Options(int64_t blocks, int64_t drafts, KvCacheDtype kv = KvCacheDtype::kAuto) {
  EngineOptions e;
  e.block_size = 16;
  e.num_blocks = blocks;
  e.scheduler.max_num_seqs = 32;
  e.scheduler.max_num_batched_tokens = 96;
  e.num_speculative_tokens = drafts;
  e.kv_cache_dtype = kv;
  return e;
}

// 20 requests: prompts of 1 to ~200 tokens (a third share a 100-token prefix), outputs
// of 1 to 48 tokens; every other one sampled with a seed, the greedy ones with logprobs.
std::vector<GenerationRequest> MakeRequests(int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> shared(100);
  for (auto& t : shared) t = static_cast<int32_t>(rng() % vocab);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 20; ++i) {
    GenerationRequest r;
    const int64_t len = i == 0 ? 1 : 1 + static_cast<int64_t>(rng() % 200);
    for (int64_t j = 0; j < len; ++j) {
      r.prompt.push_back(i % 3 == 0 && j < 100 ? shared[j] : static_cast<int32_t>(rng() % vocab));
    }
    r.max_tokens = 1 + static_cast<int64_t>(rng() % 48);
    r.ignore_eos = true;
    r.sampling.temperature = 0;
    r.sampling.logprobs = 2;
    if (i % 2 == 1) {
      r.sampling.temperature = 0.9f;
      r.sampling.top_p = 0.95f;
      r.sampling.seed = 500 + i;
    }
    if (i == 4) r.n = 2;  // a follower that takes the leader's prompt blocks
    requests.push_back(std::move(r));
  }
  return requests;
}

using Tokens = std::vector<SampledToken>;

// Every request in one engine, stepped on this thread; each choice's tokens.
std::vector<Tokens> RunEngine(DeepSeekModel& model, const std::vector<GenerationRequest>& requests,
                              const EngineOptions& options, EngineStats* stats) {
  Engine engine(model, nullptr, options);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const GenerationRequest& r : requests) {
    auto stream = engine.Submit(r);
    EXPECT_TRUE(stream.ok()) << stream.status().message();
    streams.push_back(stream.value());
    engine.Step();  // staggered arrivals
  }
  while (engine.Step()) {
  }
  std::vector<Tokens> out;
  for (size_t i = 0; i < streams.size(); ++i) {
    std::vector<Tokens> choices(requests[i].n);
    for (const GenerationOutput& o : streams[i]->Drain()) {
      EXPECT_TRUE(o.error.empty()) << o.error;
      choices[o.index].insert(choices[o.index].end(), o.tokens.begin(), o.tokens.end());
    }
    out.insert(out.end(), choices.begin(), choices.end());
  }
  *stats = engine.Stats();
  return out;
}

std::vector<int32_t> Ids(const Tokens& t) {
  std::vector<int32_t> ids;
  for (const SampledToken& s : t) ids.push_back(s.id);
  return ids;
}

struct SpecCase {
  MlaMode mode;
  CheckpointDType dtype;
  KvCacheDtype kv;
};

class SpeculativeEngine : public ::testing::TestWithParam<SpecCase> {};

// On bf16 weights a step's rows depend on the batch a little (the GEMM sums in another
// order than the GEMV, and bf16 activations round the difference), and speculation
// batches other rows together: a greedy near tie takes another token from there on. The
// engine's own batching test allows 2 such requests of 32 (tests/engine_test.cc); so here.
constexpr int kMaxNearTieDivergences = 2;
// A sampled draw lands on another token whenever the difference moves a CDF boundary
// across it, and these random models' distributions are flat (a few hundred tokens of
// ~e^-6 each: boundaries ~0.002 apart), so on fp8 weights (logits ~0.003 apart between
// batchings on an AVX-512 CPU) most sampled requests part somewhere. Where one does, both
// runs must still have seen the same distribution: the same most likely token, with top
// log-probabilities within this of each other.
constexpr double kSampledLogprobTolerance = 0.02;

bool Sampled(const std::vector<GenerationRequest>& requests, size_t choice) {
  for (const GenerationRequest& r : requests) {
    const size_t n = static_cast<size_t>(r.n);
    if (choice < n) return r.sampling.temperature > 0;
    choice -= n;
  }
  return false;
}

// The first token where a and b differ: same top token and top log-probabilities there.
void ExpectSameDistributionWhereTheyPart(const Tokens& a, const Tokens& b, const std::string& where) {
  size_t k = 0;
  while (k < a.size() && k < b.size() && a[k].id == b[k].id) ++k;
  if (k == a.size() || k == b.size()) return;
  ASSERT_GT(a[k].num_top, 0) << where;
  EXPECT_EQ(a[k].top[0].id, b[k].top[0].id) << where << ", token " << k;
  for (int t = 0; t < a[k].num_top; ++t) {
    EXPECT_NEAR(a[k].top[t].logprob, b[k].top[t].logprob, kSampledLogprobTolerance) << where << ", token " << k;
  }
}

TEST_P(SpeculativeEngine, OutputsEqualPlainDecoding) {
  Loaded m = Load(MtpModel(GetParam().dtype), GetParam().mode);
  const bool exact = GetParam().dtype == CheckpointDType::kF32;
  const int64_t vocab = m.model->config().vocab_size;
  const std::vector<GenerationRequest> requests = MakeRequests(vocab, 3);
  EngineStats plain_stats;
  const std::vector<Tokens> plain = RunEngine(*m.model, requests, Options(1024, 0, GetParam().kv), &plain_stats);
  EXPECT_EQ(plain_stats.spec_draft_tokens, 0);
  // K = 1, 2 and 4 with an ample pool; K = 3 in a pool that preempts (the largest
  // request, ~250 tokens with its drafts, fits alone in 20 blocks of 16).
  for (const auto& [drafts, blocks] : {std::pair<int64_t, int64_t>{1, 1024}, {2, 1024}, {4, 1024}, {3, 20}}) {
    EngineStats stats;
    const std::vector<Tokens> got = RunEngine(*m.model, requests, Options(blocks, drafts, GetParam().kv), &stats);
    ASSERT_EQ(got.size(), plain.size());
    int differ = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (exact) {
        EXPECT_EQ(Ids(got[i]), Ids(plain[i])) << "choice " << i << ", " << drafts << " drafts, " << blocks << " blocks";
      } else {
        EXPECT_EQ(got[i].size(), plain[i].size());
        if (Sampled(requests, i)) {
          ExpectSameDistributionWhereTheyPart(
              got[i], plain[i], "choice " + std::to_string(i) + ", " + std::to_string(drafts) + " drafts");
        } else {
          differ += Ids(got[i]) != Ids(plain[i]);
        }
      }
    }
    EXPECT_LE(differ, kMaxNearTieDivergences) << drafts << " drafts, " << blocks << " blocks";
    EXPECT_GT(stats.spec_draft_tokens, 0);
    EXPECT_LE(stats.spec_accepted_tokens, stats.spec_draft_tokens);
    int64_t by_position = 0;
    for (int64_t a : stats.spec_accepted_per_position) by_position += a;
    EXPECT_EQ(by_position, stats.spec_accepted_tokens);
    ASSERT_EQ(static_cast<int64_t>(stats.spec_accepted_per_position.size()), drafts);
    // A draft at position j is accepted only after the one before it.
    for (int64_t j = 1; j < drafts; ++j) {
      EXPECT_LE(stats.spec_accepted_per_position[j], stats.spec_accepted_per_position[j - 1]);
    }
    EXPECT_EQ(stats.kv_blocks_used, 0);
    if (blocks == 20) {
      EXPECT_GT(stats.preemptions, 0) << "the small pool should have preempted";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, SpeculativeEngine,
                         ::testing::Values(SpecCase{MlaMode::kAbsorbed, CheckpointDType::kF32, KvCacheDtype::kAuto},
                                           SpecCase{MlaMode::kMaterialized, CheckpointDType::kF32, KvCacheDtype::kAuto},
                                           SpecCase{MlaMode::kNaive, CheckpointDType::kF32, KvCacheDtype::kAuto},
                                           SpecCase{MlaMode::kAbsorbed, CheckpointDType::kBf16, KvCacheDtype::kFp8},
                                           SpecCase{MlaMode::kMaterialized, CheckpointDType::kFp8,
                                                    KvCacheDtype::kAuto}),
                         [](const auto& info) {
                           const CheckpointDType d = info.param.dtype;
                           return std::string(MlaModeName(info.param.mode)) +
                                  (d == CheckpointDType::kF32   ? "F32"
                                   : d == CheckpointDType::kFp8 ? "Fp8"
                                                                : "Bf16") +
                                  (info.param.kv == KvCacheDtype::kFp8 ? "Fp8Kv" : "");
                         });

// One request alone: the verify step's rows are the rows plain decoding computes, so on
// f32 weights every token's logprob (and its alternatives') is the same float.
TEST(Speculative, AloneTheLogprobsAreBitForBitTheSame) {
  Loaded m = Load(MtpModel(CheckpointDType::kF32), MlaMode::kAbsorbed);
  GenerationRequest r = MakeRequests(m.model->config().vocab_size, 9)[2];
  r.max_tokens = 40;
  EngineStats stats;
  const Tokens plain = RunEngine(*m.model, {r}, Options(64, 0), &stats)[0];
  for (int64_t drafts : {1, 3}) {
    const Tokens got = RunEngine(*m.model, {r}, Options(64, drafts), &stats)[0];
    ASSERT_EQ(got.size(), plain.size());
    for (size_t j = 0; j < got.size(); ++j) {
      EXPECT_EQ(got[j].id, plain[j].id) << j;
      EXPECT_EQ(got[j].logprob, plain[j].logprob) << j;
      for (int k = 0; k < got[j].num_top; ++k) EXPECT_EQ(got[j].top[k].logprob, plain[j].top[k].logprob) << j;
    }
    EXPECT_GT(stats.spec_drafts, 0);
  }
}

// Blocks of 4 tokens: drafting past the first draft often needs a new block for the MTP
// layer's rows ahead of the sequence, which moves its block table (under ASan a stale
// view of it is an error); every prompt length from 1 to 9 with 3 drafts.
TEST(Speculative, DraftsThatGrowTheBlockTable) {
  Loaded m = Load(MtpModel(CheckpointDType::kF32), MlaMode::kAbsorbed);
  std::vector<GenerationRequest> requests;
  for (int32_t len = 1; len <= 9; ++len) {
    GenerationRequest r;
    for (int32_t j = 0; j < len; ++j) r.prompt.push_back(7 * j + len);
    r.max_tokens = 12;
    r.ignore_eos = true;
    r.sampling.temperature = 0;
    requests.push_back(r);
  }
  EngineStats stats;
  EngineOptions plain = Options(256, 0), drafting = Options(256, 3);
  plain.block_size = drafting.block_size = 4;
  const std::vector<Tokens> want = RunEngine(*m.model, requests, plain, &stats);
  const std::vector<Tokens> got = RunEngine(*m.model, requests, drafting, &stats);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(Ids(got[i]), Ids(want[i])) << "prompt of " << i + 1;
  EXPECT_GT(stats.spec_draft_tokens, 0);
}

// The MTP layer over a sequence: in one pass, and as a prompt chunk then one row at a
// time, in each MLA mode: the same logits (naive mode decompresses every row; absorbed
// and materialized read the latent rows the earlier passes wrote).
TEST(Speculative, DraftLayerModesAndChunksAgree) {
  const std::string dir = MtpModel(CheckpointDType::kF32);
  std::mt19937_64 rng(5);
  std::vector<float> reference;
  for (MlaMode mode : {MlaMode::kNaive, MlaMode::kAbsorbed, MlaMode::kMaterialized}) {
    Loaded m = Load(dir, mode);
    const int64_t V = m.model->config().vocab_size, d = m.model->config().hidden_size, N = 40, P = 25;
    std::mt19937_64 token_rng(11);
    std::vector<int32_t> tokens(N + 1);
    for (auto& t : tokens) t = static_cast<int32_t>(token_rng() % V);
    // The main model's final hidden rows of tokens[0, N).
    SequenceCaches caches = m.model->NewCaches(1, N + 8);
    std::vector<float> logits, hidden, drafts, draft_hidden;
    const std::vector<int32_t> inputs(tokens.begin(), tokens.begin() + N), next(tokens.begin() + 1, tokens.end());
    const SequenceSpan all[] = {{caches.table(0), 0, N, SpanLogits::kNone}};
    ASSERT_TRUE(m.model->Forward(inputs, all, caches.cache(), logits, &hidden).ok());
    ASSERT_EQ(static_cast<int64_t>(hidden.size()), N * d);
    // One pass of the MTP layer over every row.
    const SequenceSpan mtp_all[] = {{caches.table(0), 0, N, SpanLogits::kAll}};
    ASSERT_TRUE(m.model->DraftForward(next, hidden, mtp_all, caches.cache(), drafts, draft_hidden).ok());
    ASSERT_EQ(static_cast<int64_t>(drafts.size()), N * V);
    // A chunk of P rows, then one row at a time (decode path), in a fresh cache.
    SequenceCaches chunked = m.model->NewCaches(1, N + 8);
    ASSERT_TRUE(m.model->Forward(inputs, all, chunked.cache(), logits).ok());
    std::vector<float> pieces, piece;
    const SequenceSpan first[] = {{chunked.table(0), 0, P, SpanLogits::kAll, P}};
    ASSERT_TRUE(m.model
                    ->DraftForward(std::span(next).first(P), std::span(hidden).first(P * d), first, chunked.cache(),
                                   piece, draft_hidden)
                    .ok());
    pieces = piece;
    for (int64_t i = P; i < N; ++i) {
      const SequenceSpan row[] = {{chunked.table(0), i, 1, SpanLogits::kLast, P}};
      ASSERT_TRUE(m.model
                      ->DraftForward(std::span(next).subspan(i, 1), std::span(hidden).subspan(i * d, d), row,
                                     chunked.cache(), piece, draft_hidden)
                      .ok());
      pieces.insert(pieces.end(), piece.begin(), piece.end());
    }
    double diff = 0, norm = 0;
    for (size_t i = 0; i < drafts.size(); ++i) {
      diff += (double(pieces[i]) - drafts[i]) * (double(pieces[i]) - drafts[i]);
      norm += double(drafts[i]) * drafts[i];
    }
    EXPECT_LE(std::sqrt(diff / norm), 1e-5) << MlaModeName(mode) << ": chunks against one pass";
    if (reference.empty()) {
      reference = drafts;
      continue;
    }
    diff = norm = 0;
    for (size_t i = 0; i < drafts.size(); ++i) {
      diff += (double(drafts[i]) - reference[i]) * (double(drafts[i]) - reference[i]);
      norm += double(reference[i]) * reference[i];
    }
    EXPECT_LE(std::sqrt(diff / norm), 1e-5) << MlaModeName(mode) << " against naive";
  }
  // Not a constant: the logits vary over rows.
  EXPECT_NE(reference[0], reference[reference.size() / 2]);
}

// Drafts that are mostly right: several tokens per step, rejected rows written over.
// The outputs (greedy and seeded sampled, in a batch with preemption, and alone with
// their logprobs bit for bit) are still those of plain decoding.
TEST(Speculative, AcceptedDraftsGiveTheSameOutputs) {
  for (float noise : {0.0f, 0.03f}) {
    const std::string dir = GuessingMtpModel(noise);
    Loaded m = Load(dir, MlaMode::kAbsorbed);
    // Its MTP embedding and head are copies of the main model's: held once.
    EXPECT_EQ(m.weights->mtp()->head.data, m.weights->lm_head().data);
    EXPECT_EQ(m.weights->mtp()->embed_tokens.data, m.weights->embed_tokens().data);
    const std::vector<GenerationRequest> requests = MakeRequests(m.model->config().vocab_size, 4);
    EngineStats stats;
    const std::vector<Tokens> plain = RunEngine(*m.model, requests, Options(1024, 0), &stats);
    for (const auto& [drafts, blocks] : {std::pair<int64_t, int64_t>{3, 1024}, {2, 20}}) {
      const std::vector<Tokens> got = RunEngine(*m.model, requests, Options(blocks, drafts), &stats);
      ASSERT_EQ(got.size(), plain.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(Ids(got[i]), Ids(plain[i])) << "noise " << noise << ", choice " << i << ", " << drafts << " drafts";
      }
      EXPECT_LT(stats.spec_accepted_tokens, stats.spec_draft_tokens) << "some drafts should be rejected";
      EXPECT_EQ(stats.kv_blocks_used, 0);
    }
    // The greedy requests alone: most drafts right without noise, fewer with it. (A
    // sampled draw from these flat random distributions rarely equals the draft.)
    std::vector<GenerationRequest> greedy;
    for (const GenerationRequest& r : requests) {
      if (r.sampling.greedy()) greedy.push_back(r);
    }
    RunEngine(*m.model, greedy, Options(1024, 3), &stats);
    const double accepted = double(stats.spec_accepted_tokens) / double(stats.spec_draft_tokens);
    if (noise == 0) {
      EXPECT_GT(accepted, 0.8) << stats.spec_accepted_tokens << " of " << stats.spec_draft_tokens;
    } else {
      EXPECT_GT(accepted, 0.1) << stats.spec_accepted_tokens << " of " << stats.spec_draft_tokens;
      EXPECT_LT(accepted, 0.8) << stats.spec_accepted_tokens << " of " << stats.spec_draft_tokens;
    }
    // One request alone: every row bit for bit.
    GenerationRequest r = requests[2];
    r.max_tokens = 48;
    const Tokens alone = RunEngine(*m.model, {r}, Options(64, 0), &stats)[0];
    const Tokens drafted = RunEngine(*m.model, {r}, Options(64, 3), &stats)[0];
    ASSERT_EQ(drafted.size(), alone.size());
    for (size_t j = 0; j < alone.size(); ++j) {
      EXPECT_EQ(drafted[j].id, alone[j].id) << j;
      EXPECT_EQ(drafted[j].logprob, alone[j].logprob) << j;
    }
    EXPECT_GT(stats.spec_accepted_tokens, 0);
    std::filesystem::remove_all(dir);
  }
}

TEST(Speculative, ModelWithoutMtpLayerIsRefused) {
  MakeModelOverrides o;
  o.dtype = CheckpointDType::kF32;
  const std::string dir = MakeModel("tiny", o, /*seed=*/23);
  LoadOptions options;
  options.progress = false;
  options.mtp = true;
  auto w = ModelWeights::Load(dir, options);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("no multi-token-prediction layer"), std::string::npos) << w.status().message();
  EXPECT_NE(w.status().message().find("num_nextn_predict_layers"), std::string::npos) << w.status().message();
}

TEST(Speculative, WithoutTheFlagTheMtpLayerIsSkipped) {
  // Random weights: its own embedding and head, held apart from the main model's.
  Loaded with = Load(MtpModel(CheckpointDType::kF32), MlaMode::kAbsorbed);
  EXPECT_NE(with.weights->mtp()->head.data, with.weights->lm_head().data);
  EXPECT_GT(with.weights->memory().mtp, 0u);
  Loaded m = Load(MtpModel(CheckpointDType::kF32), MlaMode::kAbsorbed, /*mtp=*/false);
  EXPECT_FALSE(m.weights->mtp());
  EXPECT_EQ(m.model->CacheLayers(), m.model->config().num_hidden_layers);
  std::vector<float> logits, hidden;
  SequenceCaches caches = m.model->NewCaches(1, 8);
  const SequenceSpan span[] = {{caches.table(0), 0, 2, SpanLogits::kLast}};
  const std::vector<int32_t> tokens = {3, 4};
  EXPECT_FALSE(m.model
                   ->DraftForward(tokens, std::vector<float>(2 * m.model->config().hidden_size, 1.0f), span,
                                  caches.cache(), logits, hidden)
                   .ok());
}

}  // namespace
}  // namespace latte
