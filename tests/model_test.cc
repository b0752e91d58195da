// The model end to end: the three MLA modes agree, incremental decode equals a
// full forward, batched spans equal separate runs, fp8 equals its bf16 dequantization.
#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "base/cpu_features.h"
#include "model/decompressed_prefix.h"
#include "model/deepseek.h"
#include "model/mla.h"
#include "model/model_weights.h"
#include "test_models.h"

namespace latte {
namespace {

using testing_models::MakeModel;
using testing_models::PrefillThenDecode;

// f32 weights: the modes differ only in summation order (W_Q_UK is a product of two
// matrices; attention runs over different layouts), far below 1e-5 of the logits.
constexpr double kF32Tolerance = 1e-5;
// bf16 weights: materialized products are rounded to bf16 once more, and the GEMM
// path rounds activations to bf16; errors of a few 1e-3 relative are expected.
constexpr double kBf16Tolerance = 1e-2;

// ||a - b|| / ||b|| over all values.
double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    ref += double(b[i]) * b[i];
  }
  return std::sqrt(diff / ref);
}

std::vector<int32_t> RandomTokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> t(n);
  for (auto& v : t) v = dist(rng);
  return t;
}

std::unique_ptr<ModelWeights> Load(const std::string& dir, MlaMode mode) {
  auto w = ModelWeights::Load(dir, LoadOptions{mode, false});
  EXPECT_TRUE(w.ok()) << w.status().message();
  return std::move(w).value();
}

void ExpectNonTrivial(const std::vector<float>& logits, int64_t vocab) {
  double sum_sq = 0;
  for (float v : logits) {
    ASSERT_TRUE(std::isfinite(v));
    sum_sq += double(v) * v;
  }
  const double rms = std::sqrt(sum_sq / logits.size());
  EXPECT_GT(rms, 0.05) << "logits nearly zero: the test would not see a difference";
  EXPECT_LT(rms, 1e3);
  // The argmax changes across positions: the model is not constant.
  std::set<int64_t> argmaxes;
  for (size_t row = 0; row * vocab < logits.size(); ++row) {
    argmaxes.insert(std::max_element(logits.begin() + row * vocab, logits.begin() + (row + 1) * vocab) -
                    (logits.begin() + row * vocab));
  }
  EXPECT_GT(argmaxes.size(), 1u);
}

struct ModelCase {
  std::string name;
  std::string preset;
  MakeModelOverrides overrides;
  double tolerance;
};

std::vector<ModelCase> Cases() {
  MakeModelOverrides tiny_f32;
  tiny_f32.dtype = CheckpointDType::kF32;
  MakeModelOverrides tiny_f32_plain = tiny_f32;
  tiny_f32_plain.no_q_lora = true;
  tiny_f32_plain.rope = "plain";
  MakeModelOverrides tiny_bf16;
  MakeModelOverrides tiny_bf16_plain;
  tiny_bf16_plain.no_q_lora = true;
  tiny_bf16_plain.rope = "plain";
  MakeModelOverrides r1_f32;
  r1_f32.num_hidden_layers = 2;
  r1_f32.vocab_size = 1024;
  r1_f32.dtype = CheckpointDType::kF32;
  MakeModelOverrides r1_bf16 = r1_f32;
  r1_bf16.dtype = CheckpointDType::kBf16;
  MakeModelOverrides r1_bf16_plain = r1_bf16;
  r1_bf16_plain.no_q_lora = true;
  r1_bf16_plain.rope = "plain";
  return {{"TinyF32Yarn", "tiny", tiny_f32, kF32Tolerance},
          {"TinyF32PlainNoQLora", "tiny", tiny_f32_plain, kF32Tolerance},
          {"TinyBf16Yarn", "tiny", tiny_bf16, kBf16Tolerance},
          {"TinyBf16PlainNoQLora", "tiny", tiny_bf16_plain, kBf16Tolerance},
          {"R1F32Yarn", "r1", r1_f32, kF32Tolerance},
          {"R1Bf16Yarn", "r1", r1_bf16, kBf16Tolerance},
          {"R1Bf16PlainNoQLora", "r1", r1_bf16_plain, kBf16Tolerance}};
}

class ModelModes : public ::testing::TestWithParam<ModelCase> {};

TEST_P(ModelModes, ThreeModesAgreeAndIncrementalEqualsFull) {
  const ModelCase& mc = GetParam();
  if (mc.preset == "r1" && testing_models::SkipLargeModels()) GTEST_SKIP() << "LATTE_SMALL_TESTS=1";
  const std::string dir = MakeModel(mc.preset, mc.overrides);
  auto naive_w = Load(dir, MlaMode::kNaive);
  auto absorbed_w = Load(dir, MlaMode::kAbsorbed);
  auto materialized_w = Load(dir, MlaMode::kMaterialized);
  DeepSeekModel naive(*naive_w), absorbed(*absorbed_w), materialized(*materialized_w);
  // Multi-token spans through the latent path too, and the decompress path in blocks
  // of 4 tokens merged by log-sum-exp.
  const MlaSettings latent_prefill{.decompress_prefill = false};
  const MlaSettings small_blocks{.decompress_block = 4};
  DeepSeekModel absorbed_latent_prefill(*absorbed_w, latent_prefill);
  DeepSeekModel materialized_latent_prefill(*materialized_w, latent_prefill);
  DeepSeekModel naive_small_blocks(*naive_w, small_blocks);
  const int64_t vocab = naive_w->config().vocab_size;

  for (int64_t P : {1, 6, 19}) {
    SCOPED_TRACE("prompt length " + std::to_string(P));
    const std::vector<int32_t> tokens = RandomTokens(P + 5, vocab, 100 + P);
    const std::vector<float> reference = PrefillThenDecode(naive, tokens, P);
    ExpectNonTrivial(reference, vocab);
    EXPECT_LE(RelativeError(PrefillThenDecode(absorbed, tokens, P), reference), mc.tolerance);
    EXPECT_LE(RelativeError(PrefillThenDecode(materialized, tokens, P), reference), mc.tolerance);
    EXPECT_LE(RelativeError(PrefillThenDecode(absorbed_latent_prefill, tokens, P), reference), mc.tolerance);
    EXPECT_LE(RelativeError(PrefillThenDecode(materialized_latent_prefill, tokens, P), reference), mc.tolerance);
    EXPECT_LE(RelativeError(PrefillThenDecode(naive_small_blocks, tokens, P), reference), mc.tolerance);
    // One forward over the whole sequence gives the same logits as prefill + decode.
    const int64_t n = static_cast<int64_t>(tokens.size());
    for (DeepSeekModel* m : {&naive, &absorbed, &materialized}) {
      const std::vector<float> full = PrefillThenDecode(*m, tokens, n);
      EXPECT_LE(RelativeError(PrefillThenDecode(*m, tokens, P), full), mc.tolerance)
          << MlaModeName(m->weights().mode());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ModelModes, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

// Several sequences in one forward (a batched decode step plus a prefill) give the
// logits each gets alone.
TEST(ModelBatch, SpansInOneForwardEqualSeparateRuns) {
  MakeModelOverrides o;
  o.dtype = CheckpointDType::kF32;
  const std::string dir = MakeModel("tiny", o);
  for (MlaMode mode : {MlaMode::kAbsorbed, MlaMode::kMaterialized, MlaMode::kNaive}) {
    SCOPED_TRACE(std::string(MlaModeName(mode)));
    auto w = Load(dir, mode);
    DeepSeekModel model(*w);
    const int64_t vocab = w->config().vocab_size;
    const std::vector<int64_t> lengths = {4, 9, 1};
    std::vector<std::vector<int32_t>> seqs;
    std::vector<float> expected, logits;
    for (size_t i = 0; i < lengths.size(); ++i) {
      seqs.push_back(RandomTokens(lengths[i] + 1, vocab, 7 + i));
      // Alone: prefill all but the last token, then decode the last.
      SequenceCaches alone = model.NewCaches(1, 32, KvCacheDtype::kAuto, 4);
      std::vector<int32_t> prompt(seqs[i].begin(), seqs[i].end() - 1);
      const SequenceSpan prefill[] = {{alone.table(0), 0, lengths[i]}};
      ASSERT_TRUE(model.Forward(prompt, prefill, alone.cache(), logits).ok());
      const SequenceSpan decode[] = {{alone.table(0), lengths[i], 1}};
      ASSERT_TRUE(model.Forward(std::vector<int32_t>{seqs[i].back()}, decode, alone.cache(), logits).ok());
      expected.insert(expected.end(), logits.begin(), logits.end());
    }
    // Together, in one pool of 4-token blocks: prefill sequences 0 and 1 in one forward,
    // then one step decoding both while sequence 2 is a 2-token prefill riding along.
    SequenceCaches caches = model.NewCaches(3, 32, KvCacheDtype::kAuto, 4);
    std::vector<int32_t> tokens(seqs[0].begin(), seqs[0].end() - 1);
    tokens.insert(tokens.end(), seqs[1].begin(), seqs[1].end() - 1);
    const SequenceSpan prefills[] = {{caches.table(0), 0, 4}, {caches.table(1), 0, 9}};
    ASSERT_TRUE(model.Forward(tokens, prefills, caches.cache(), logits).ok());
    tokens = {seqs[0].back(), seqs[1].back(), seqs[2][0], seqs[2][1]};
    const SequenceSpan step[] = {{caches.table(0), 4, 1}, {caches.table(1), 9, 1}, {caches.table(2), 0, 2}};
    ASSERT_TRUE(model.Forward(tokens, step, caches.cache(), logits).ok());
    EXPECT_LE(RelativeError(logits, expected), kF32Tolerance);
  }
}

// The last layer's MoE runs on the rows that need logits alone. In one forward: a prompt
// wanting its last row's logits, one wanting none, one wanting every row's; then a second
// chunk of the logit-less prompt (its cache must hold what a full forward writes). Each
// against the same tokens run with every row's logits (the last MoE over every row),
// within the f32 tolerance; and with final_hidden asked for (the MoE over every row for
// it) the logits are the same bits.
TEST(ModelBatch, LastMoeOnTheLogitRowsAlone) {
  MakeModelOverrides o;
  o.dtype = CheckpointDType::kF32;
  auto w = Load(MakeModel("tiny", o), MlaMode::kAbsorbed);
  ASSERT_TRUE(w->config().IsMoeLayer(w->config().num_hidden_layers - 1));
  DeepSeekModel model(*w);
  const int64_t vocab = w->config().vocab_size;
  const std::vector<int64_t> lengths = {6, 5, 4};
  const SpanLogits wants[] = {SpanLogits::kLast, SpanLogits::kNone, SpanLogits::kAll};
  std::vector<std::vector<int32_t>> seqs;
  std::vector<int32_t> tokens;
  for (size_t i = 0; i < lengths.size(); ++i) {
    seqs.push_back(RandomTokens(lengths[i] + 3, vocab, 31 + i));
    tokens.insert(tokens.end(), seqs[i].begin(), seqs[i].begin() + lengths[i]);
  }
  // Every row's logits, each prompt alone: the expected rows.
  std::vector<float> expected, all;
  std::vector<float> second_chunk;  // prompt 1's next 3 tokens, after its first chunk
  for (size_t i = 0; i < lengths.size(); ++i) {
    SequenceCaches alone = model.NewCaches(1, 32, KvCacheDtype::kAuto, 4);
    const std::vector<int32_t> prompt(seqs[i].begin(), seqs[i].begin() + lengths[i]);
    const SequenceSpan span[] = {{alone.table(0), 0, lengths[i], SpanLogits::kAll}};
    ASSERT_TRUE(model.Forward(prompt, span, alone.cache(), all).ok());
    if (wants[i] == SpanLogits::kLast) expected.insert(expected.end(), all.end() - vocab, all.end());
    if (wants[i] == SpanLogits::kAll) expected.insert(expected.end(), all.begin(), all.end());
    if (i == 1) {
      const std::vector<int32_t> next(seqs[i].begin() + lengths[i], seqs[i].end());
      const SequenceSpan more[] = {{alone.table(0), lengths[i], 3, SpanLogits::kAll}};
      ASSERT_TRUE(model.Forward(next, more, alone.cache(), second_chunk).ok());
    }
  }
  std::vector<float> without_final_hidden;
  for (const bool with_final_hidden : {false, true}) {
    SCOPED_TRACE(with_final_hidden ? "with final_hidden" : "without");
    SequenceCaches caches = model.NewCaches(3, 32, KvCacheDtype::kAuto, 4);
    std::vector<SequenceSpan> spans;
    for (size_t i = 0; i < lengths.size(); ++i) spans.push_back({caches.table(i), 0, lengths[i], wants[i]});
    std::vector<float> logits, final_hidden;
    ASSERT_TRUE(model.Forward(tokens, spans, caches.cache(), logits, with_final_hidden ? &final_hidden : nullptr).ok());
    EXPECT_LE(RelativeError(logits, expected), kF32Tolerance);
    if (with_final_hidden) {
      EXPECT_EQ(final_hidden.size(), tokens.size() * static_cast<size_t>(w->config().hidden_size));
      EXPECT_EQ(logits, without_final_hidden) << "differs from the forward without final_hidden";
    } else {
      without_final_hidden = logits;
    }
    const std::vector<int32_t> next(seqs[1].begin() + lengths[1], seqs[1].end());
    const SequenceSpan more[] = {{caches.table(1), lengths[1], 3, SpanLogits::kAll}};
    ASSERT_TRUE(model.Forward(next, more, caches.cache(), logits).ok());
    EXPECT_LE(RelativeError(logits, second_chunk), kF32Tolerance);
  }
}

// A prompt prefilled in chunks: keeping its decompressed K/V across the chunks (whole,
// or only its first positions) gives the logits of decompressing every cached row in
// every chunk, and one forward's within the f32 tolerance.
TEST(ModelChunkedPrefillDeathTest, KeptDecompressedPrefixGivesTheSameLogits) {
  MakeModelOverrides o;
  o.dtype = CheckpointDType::kF32;
  const std::string dir = MakeModel("tiny", o);
  auto w = Load(dir, MlaMode::kAbsorbed);
  DeepSeekModel model(*w, MlaSettings{.decompress_block = 8});
  const ModelConfig& c = w->config();
  const int64_t P = 61, chunk = 7;
  const std::vector<int32_t> tokens = RandomTokens(P, c.vocab_size, 5);
  const int64_t per_position =
      DecompressedPrefix::BytesPerPosition(c.num_hidden_layers, c.num_attention_heads, c.QkHeadDim(), c.v_head_dim);
  const auto chunked = [&](DecompressedPrefix* kept) {
    SequenceCaches caches = model.NewCaches(1, P, KvCacheDtype::kAuto, 4);
    std::vector<float> all, logits;
    for (int64_t start = 0; start < P; start += chunk) {
      const int64_t count = std::min(chunk, P - start);
      SequenceSpan span{caches.table(0), start, count, SpanLogits::kAll};
      span.decompressed = kept;
      EXPECT_TRUE(
          model.Forward(std::span(tokens).subspan(start, count), std::span(&span, 1), caches.cache(), logits).ok());
      all.insert(all.end(), logits.begin(), logits.end());
    }
    return all;
  };
  const std::vector<float> again = chunked(nullptr);
  ExpectNonTrivial(again, c.vocab_size);
  DecompressedPrefix whole(P * per_position), first_20(20 * per_position);
  EXPECT_LE(RelativeError(chunked(&whole), again), 1e-6);
  EXPECT_LE(RelativeError(chunked(&first_20), again), 1e-6);
  EXPECT_EQ(
      whole
          .ForLayer(0, c.num_hidden_layers, c.num_attention_heads * c.QkHeadDim(), c.num_attention_heads * c.v_head_dim)
          ->rows,
      P);
  EXPECT_EQ(
      first_20
          .ForLayer(0, c.num_hidden_layers, c.num_attention_heads * c.QkHeadDim(), c.num_attention_heads * c.v_head_dim)
          ->rows,
      16);  // whole decompress blocks of 8 within the 20 positions
  EXPECT_LE(RelativeError(again, PrefillThenDecode(model, tokens, P)), kF32Tolerance);
  // Kept rows of another prompt (or of positions this span recomputes) are refused.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(chunked(&whole), "decompressed rows kept for a span that starts at 0");
}

// Prefill rows that attend to the keys past a position in latent form: the logits of
// decompressing every key (within the f32 tolerance: another path, another order), the
// same in any chunking and with or without a kept prefix, in both modes that have the
// latent form; the naive mode decompresses them all whatever the span says.
TEST(ModelChunkedPrefillDeathTest, LatentKeysPastAPositionGiveTheDecompressedLogits) {
  MakeModelOverrides o;
  o.dtype = CheckpointDType::kF32;
  const std::string dir = MakeModel("tiny", o);
  const int64_t P = 61, block_size = 4;
  for (MlaMode mode : {MlaMode::kAbsorbed, MlaMode::kMaterialized, MlaMode::kNaive}) {
    SCOPED_TRACE(std::string(MlaModeName(mode)));
    auto w = Load(dir, mode);
    DeepSeekModel model(*w, MlaSettings{.decompress_block = 8});
    const ModelConfig& c = w->config();
    const std::vector<int32_t> tokens = RandomTokens(P, c.vocab_size, 9);
    const int64_t per_position =
        DecompressedPrefix::BytesPerPosition(c.num_hidden_layers, c.num_attention_heads, c.QkHeadDim(), c.v_head_dim);
    // Every row's logits, the prompt run in chunks of `chunk`.
    const auto chunked = [&](int64_t chunk, int64_t latent_keys_from, DecompressedPrefix* kept) {
      SequenceCaches caches = model.NewCaches(1, P, KvCacheDtype::kAuto, block_size);
      std::vector<float> all, logits;
      for (int64_t start = 0; start < P; start += chunk) {
        const int64_t count = std::min(chunk, P - start);
        SequenceSpan span{caches.table(0), start, count, SpanLogits::kAll};
        span.latent_keys_from = latent_keys_from;
        span.decompressed = kept;
        EXPECT_TRUE(
            model.Forward(std::span(tokens).subspan(start, count), std::span(&span, 1), caches.cache(), logits).ok());
        all.insert(all.end(), logits.begin(), logits.end());
      }
      return all;
    };
    const std::vector<float> decompressed = chunked(P, kAllKeysDecompressed, nullptr);
    ExpectNonTrivial(decompressed, c.vocab_size);
    for (int64_t from : {0, 20, 36}) {
      SCOPED_TRACE("latent keys from " + std::to_string(from));
      const std::vector<float> in_sevens = chunked(7, from, nullptr);
      if (mode == MlaMode::kNaive) {
        EXPECT_EQ(in_sevens, chunked(7, kAllKeysDecompressed, nullptr));
        continue;
      }
      EXPECT_LE(RelativeError(in_sevens, decompressed), kF32Tolerance);
      EXPECT_LE(RelativeError(chunked(P, from, nullptr), in_sevens), 1e-6);
      EXPECT_LE(RelativeError(chunked(16, from, nullptr), in_sevens), 1e-6);
      DecompressedPrefix kept(from * per_position);
      EXPECT_LE(RelativeError(chunked(7, from, &kept), in_sevens), 1e-6);
    }
  }
  // The latent keys are read from the cache a block at a time.
  auto w = Load(dir, MlaMode::kAbsorbed);
  DeepSeekModel model(*w);
  SequenceCaches caches = model.NewCaches(1, P, KvCacheDtype::kAuto, block_size);
  const std::vector<int32_t> tokens = RandomTokens(P, w->config().vocab_size, 9);
  SequenceSpan span{caches.table(0), 0, P};
  span.latent_keys_from = 21;
  std::vector<float> logits;
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH((void)model.Forward(tokens, std::span(&span, 1), caches.cache(), logits),
               "latent keys from 21, inside a block of 4");
}

TEST(ModelErrors, ForwardRejectsBadTokensAndSpans) {
  const std::string dir = MakeModel("tiny", MakeModelOverrides{});
  auto w = Load(dir, MlaMode::kAbsorbed);
  DeepSeekModel model(*w);
  SequenceCaches caches = model.NewCaches(1, 4, KvCacheDtype::kAuto, 4);
  std::vector<float> logits;
  const auto forward = [&](std::vector<int32_t> tokens, std::span<const int32_t> table, int64_t start) {
    const SequenceSpan span[] = {{table, start, static_cast<int64_t>(tokens.size()), SpanLogits::kAll}};
    return model.Forward(tokens, span, caches.cache(), logits);
  };
  Status st = forward({1, 100000}, caches.table(0), 0);
  EXPECT_NE(st.message().find("outside the vocabulary"), std::string::npos) << st.message();
  st = forward({1, 2, 3, 4, 5}, caches.table(0), 0);
  EXPECT_NE(st.message().find("has only 1 blocks of 4"), std::string::npos) << st.message();
  const std::vector<int32_t> foreign = {7};
  st = forward({1}, foreign, 0);
  EXPECT_NE(st.message().find("block 7 is outside the cache's 1 blocks"), std::string::npos) << st.message();
  const SequenceSpan two[] = {{caches.table(0), 0, 2}};
  st = model.Forward(std::vector<int32_t>{1}, two, caches.cache(), logits);
  EXPECT_NE(st.message().find("token count does not match"), std::string::npos) << st.message();
}

// MlaLayer::Forward checks what it is handed (LATTE_CHECK): a cache whose rows are not
// d_l wide, a span past its block table or a layer out of range aborts instead of
// writing out of bounds.
TEST(MlaLayerDeathTest, BadSpansAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string dir = MakeModel("tiny", MakeModelOverrides{});
  auto w = Load(dir, MlaMode::kAbsorbed);
  const ModelConfig& c = w->config();
  const MlaLayer mla(c, MlaMode::kAbsorbed);
  const MlaWeights& attn = w->layers()[0].attn;
  MlaScratch scratch;
  std::vector<float> x(c.hidden_size, 0.5f), out(c.hidden_size);
  const std::vector<int32_t> table = {0};
  KvCache narrow(c.num_hidden_layers, c.LatentDim() - 1, 1, 4, DType::kF32);
  const SequenceSpan first[] = {{table, 0, 1}};
  EXPECT_DEATH(mla.Forward(attn, 0, x.data(), first, narrow, out.data(), scratch),
               std::to_string(c.LatentDim() - 1) + "-value rows");
  KvCache cache(c.num_hidden_layers, c.LatentDim(), 1, 4, DType::kF32);
  const SequenceSpan past[] = {{table, 4, 1}};
  EXPECT_DEATH(mla.Forward(attn, 0, x.data(), past, cache, out.data(), scratch),
               "MlaLayer: span ends at 5, past its 1 blocks of 4");
  EXPECT_DEATH(mla.Forward(attn, c.num_hidden_layers, x.data(), first, cache, out.data(), scratch),
               "MlaLayer: layer " + std::to_string(c.num_hidden_layers));
}

}  // namespace
}  // namespace latte

namespace latte {
namespace {

// The portable kernels (no AVX-512, no oneDNN bf16 GEMM) give the same model.
TEST(ModelPortable, PortableKernelsMatchDispatchedKernels) {
  const std::string dir = testing_models::MakeModel("tiny", MakeModelOverrides{});
  auto w = ModelWeights::Load(dir, LoadOptions{MlaMode::kAbsorbed, false});
  ASSERT_TRUE(w.ok());
  const std::vector<int32_t> tokens = RandomTokens(24, w.value()->config().vocab_size, 77);
  DeepSeekModel fast(*w.value());
  const std::vector<float> expected = PrefillThenDecode(fast, tokens, 12);
  SetPortableKernelsForTesting(true);
  DeepSeekModel portable(*w.value());
  const std::vector<float> got = PrefillThenDecode(portable, tokens, 12);
  SetPortableKernelsForTesting(false);
  EXPECT_LE(RelativeError(got, expected), kBf16Tolerance);
}

}  // namespace
}  // namespace latte

namespace latte {
namespace {

// NewCaches holds rows in the model's compute dtype: bf16 for bf16 checkpoints, f32
// for f32 ones (kv_cache_test.cc tests the cache itself).
TEST(ModelCaches, RowDtypeFollowsTheWeights) {
  MakeModelOverrides f32_model;
  f32_model.dtype = CheckpointDType::kF32;
  for (const auto& [overrides, dtype] :
       {std::pair{MakeModelOverrides{}, DType::kBF16}, std::pair{f32_model, DType::kF32}}) {
    auto w = Load(MakeModel("tiny", overrides), MlaMode::kAbsorbed);
    DeepSeekModel model(*w);
    SequenceCaches caches = model.NewCaches(2, 10, KvCacheDtype::kAuto, 4);
    EXPECT_EQ(caches.cache().dtype(), dtype);
    const ModelConfig& c = w->config();
    // 2 sequences of 3 blocks of 4 tokens.
    EXPECT_EQ(caches.cache().Bytes(), static_cast<size_t>(c.num_hidden_layers * c.LatentDim() * 24) * DTypeSize(dtype));
    EXPECT_EQ(caches.table(1).size(), 3u);
  }
}

// Contexts long enough for SharedKeyAttention to split over two threads (>= 512 rows)
// and to span many 64-row blocks with a partial last one, on the bf16 cache: the decode
// steps of the modes still agree, and incremental decode still equals one full forward.
// Only the decode rows are compared (the 700 prefill rows run the same decompress path
// in every mode, and would dilute the error). Measured: absorbed 3.5e-4, materialized
// 5.8e-4 relative to naive; incremental vs full 2.4e-3 (the full forward's GEMMs round
// activations to bf16 where the decode steps' GEMVs do not).
TEST(ModelLongContext, Bf16CacheDecodeModesAgreeOverSplitContexts) {
  const std::string dir = MakeModel("tiny", MakeModelOverrides{});
  auto naive_w = Load(dir, MlaMode::kNaive);
  auto absorbed_w = Load(dir, MlaMode::kAbsorbed);
  auto materialized_w = Load(dir, MlaMode::kMaterialized);
  DeepSeekModel naive(*naive_w), absorbed(*absorbed_w), materialized(*materialized_w);
  const int64_t vocab = naive_w->config().vocab_size, P = 700, steps = 4;
  const std::vector<int32_t> tokens = RandomTokens(P + steps, vocab, 31);
  // The logits of the last `steps` positions.
  const auto decode_rows = [&](const std::vector<float>& all) {
    return std::vector<float>(all.end() - steps * vocab, all.end());
  };
  const std::vector<float> reference = decode_rows(PrefillThenDecode(naive, tokens, P));
  ExpectNonTrivial(reference, vocab);
  const double absorbed_error = RelativeError(decode_rows(PrefillThenDecode(absorbed, tokens, P)), reference);
  const double materialized_error = RelativeError(decode_rows(PrefillThenDecode(materialized, tokens, P)), reference);
  const int64_t n = static_cast<int64_t>(tokens.size());
  const double incremental_error = RelativeError(decode_rows(PrefillThenDecode(absorbed, tokens, P)),
                                                 decode_rows(PrefillThenDecode(absorbed, tokens, n)));
  EXPECT_LE(absorbed_error, kBf16Tolerance);
  EXPECT_LE(materialized_error, kBf16Tolerance);
  EXPECT_LE(incremental_error, kBf16Tolerance);
  std::printf(
      "decode rows after %lld tokens, relative error: absorbed %.2e, materialized %.2e, "
      "incremental vs full %.2e\n",
      static_cast<long long>(P), absorbed_error, materialized_error, incremental_error);
}

}  // namespace
}  // namespace latte
