// The paged latent KV cache: rows written through a block table come back exactly as
// rounded to the cache's dtype (f32 as is, bf16 to nearest even, fp8 e4m3 with a
// per-row scale within e4m3's precision), wherever the table puts them.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model/kv_cache.h"

namespace latte {
namespace {

std::vector<float> RandomRow(std::mt19937& rng, int64_t n, float sd) {
  std::normal_distribution<float> normal(0.0f, sd);
  std::vector<float> row(n);
  for (float& v : row) v = normal(rng);
  return row;
}

TEST(KvCache, RowsGoWhereTheBlockTableSaysAndRoundOnce) {
  const int64_t layers = 3, row_dim = 576, blocks = 5, block_size = 4;
  KvCache f32(layers, row_dim, blocks, block_size, DType::kF32);
  KvCache b16(layers, row_dim, blocks, block_size, DType::kBF16);
  EXPECT_EQ(f32.Bytes(), static_cast<size_t>(layers * blocks * block_size * row_dim) * 4);
  EXPECT_EQ(b16.Bytes() * 2, f32.Bytes());
  EXPECT_EQ(KvCache::BlockBytes(layers, row_dim, block_size, DType::kBF16), layers * block_size * row_dim * 2);

  std::mt19937 rng(5);
  const std::vector<int32_t> table = {3, 0, 4};  // positions 0-3 in block 3, 4-7 in block 0, 8-11 in block 4
  std::vector<std::vector<float>> rows;
  for (int64_t pos = 0; pos < 10; ++pos) {
    rows.push_back(RandomRow(rng, row_dim, 3.0f));
    f32.Write(2, table, pos, rows.back().data());
    b16.Write(2, table, pos, rows.back().data());
  }
  std::vector<float> back_f32(10 * row_dim), back_b16(10 * row_dim);
  f32.ReadF32(2, table, 0, 10, back_f32.data());
  b16.ReadF32(2, table, 0, 10, back_b16.data());
  const PagedRows view = b16.Rows(2, table);
  for (int64_t pos = 0; pos < 10; ++pos) {
    // Position 5 is slot 1 of block 0: the view's row pointer says so.
    const bf16* raw = static_cast<const bf16*>(view.Row(pos));
    EXPECT_EQ(view.RowIndex(pos), static_cast<size_t>(table[pos / 4] * 4 + pos % 4));
    for (int64_t j = 0; j < row_dim; ++j) {
      ASSERT_EQ(back_f32[pos * row_dim + j], rows[pos][j]) << pos << "," << j;
      ASSERT_EQ(back_b16[pos * row_dim + j], Bf16ToF32(F32ToBf16(rows[pos][j]))) << pos << "," << j;
      ASSERT_EQ(raw[j], F32ToBf16(rows[pos][j])) << pos << "," << j;
    }
  }
  // Layer 1 is untouched (zero), layer 2's rows do not leak into it.
  std::vector<float> other(row_dim);
  f32.ReadF32(1, table, 5, 1, other.data());
  for (float v : other) ASSERT_EQ(v, 0.0f);
}

// fp8 rows: e4m3 with one scale per row (amax / 448), so every value keeps e4m3's 3
// mantissa bits relative to itself (<= 2^-4 relative error) down to amax · 2^-9 / 448,
// below which the subnormals' absolute step applies. About half the bytes of bf16.
TEST(KvCache, Fp8RowsKeepE4m3PrecisionWithAPerRowScale) {
  const int64_t row_dim = 576;
  KvCache fp8(2, row_dim, 3, 16, DType::kF8E4M3);
  EXPECT_EQ(KvCache::BlockBytes(2, row_dim, 16, DType::kF8E4M3), 2 * 16 * (row_dim + 4));
  std::mt19937 rng(9);
  const std::vector<int32_t> table = {2, 1};
  for (int64_t pos = 0; pos < 20; ++pos) {
    // Rows of very different magnitudes: the per-row scale adapts to each.
    const float sd = std::pow(10.0f, static_cast<float>(pos % 5) - 2.0f);
    const std::vector<float> row = RandomRow(rng, row_dim, sd);
    fp8.Write(1, table, pos, row.data());
    std::vector<float> back(row_dim);
    fp8.ReadF32(1, table, pos, 1, back.data());
    float amax = 0;
    for (float v : row) amax = std::max(amax, std::fabs(v));
    const PagedRows view = fp8.Rows(1, table);
    EXPECT_FLOAT_EQ(view.Scale(pos), amax / 448.0f);
    for (int64_t j = 0; j < row_dim; ++j) {
      const double allowed = std::max(std::fabs(row[j]) * 0.0625, amax / 448.0 * std::ldexp(1.0, -9));
      ASSERT_LE(std::fabs(back[j] - row[j]), allowed) << "pos " << pos << " value " << j;
      ASSERT_EQ(view.At(pos, j), back[j]);
    }
  }
}

TEST(KvCache, ParsesAndResolvesDtypes) {
  EXPECT_EQ(ParseKvCacheDtype("fp8"), std::optional<KvCacheDtype>(KvCacheDtype::kFp8));
  EXPECT_EQ(ParseKvCacheDtype("bf16"), std::optional<KvCacheDtype>(KvCacheDtype::kBf16));
  EXPECT_EQ(ParseKvCacheDtype("auto"), std::optional<KvCacheDtype>(KvCacheDtype::kAuto));
  EXPECT_FALSE(ParseKvCacheDtype("int4").has_value());
  EXPECT_EQ(ResolveKvCacheDtype(KvCacheDtype::kAuto, DType::kF32), DType::kF32);
  EXPECT_EQ(ResolveKvCacheDtype(KvCacheDtype::kAuto, DType::kBF16), DType::kBF16);
  EXPECT_EQ(ResolveKvCacheDtype(KvCacheDtype::kFp8, DType::kF32), DType::kF8E4M3);
}

TEST(SequenceCaches, EachSequenceGetsItsOwnBlocks) {
  SequenceCaches caches(1, 8, 3, 10, 4, DType::kF32);  // 3 sequences of 10 tokens: 3 blocks each
  EXPECT_EQ(caches.cache().num_blocks(), 9);
  for (int64_t s = 0; s < 3; ++s) {
    ASSERT_EQ(caches.table(s).size(), 3u);
    for (int64_t b = 0; b < 3; ++b) EXPECT_EQ(caches.table(s)[b], s * 3 + b);
  }
}

// Write and ReadF32 know f32, bf16 and fp8 rows only: any other dtype stops at
// construction, naming itself.
TEST(KvCacheDeathTest, UnsupportedDTypeAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(KvCache(2, 576, 4, 16, DType::kF16), "KvCache: rows of F16 are not supported");
}

}  // namespace
}  // namespace latte
