// SharedKeyAttention over a paged cache: rows reached through a shuffled block table
// give what the same rows give laid out contiguously, on every kernel path, for bf16
// and fp8 rows, block sizes 16 and 64, sequence lengths that end mid-block, and
// contexts long enough to split over threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "base/cpu_features.h"
#include "kernels/attention.h"
#include "kernels/attention_internal.h"
#include "model/kv_cache.h"
#include "test_util.h"

namespace latte {
namespace {

using testing_util::AttentionDouble;
using testing_util::ExpectAllNear;
using testing_util::RandomVector;
using testing_util::ScopedOmpThreads;
using testing_util::SharedKeyAttentionDouble;
namespace ai = attention_internal;

// Against the double reference over the rows' exact stored values: the vdpbf16ps
// path's rounding of q and the weights to bf16 (attention_bf16_test.cc measures 1.9e-3
// on out, 5.6e-3 on lse at these shapes and sets 6e-3 / 1.5e-2), the f32 paths' 2e-5.
constexpr double kBf16PathOutTol = 6e-3, kBf16PathLseTol = 1.5e-2;
constexpr double kF32PathTol = 2e-5;

struct Result {
  std::vector<float> out, lse;
};

Result RunOnPath(SharedKeyAttentionParams p, ai::SharedKeyPath path) {
  Result r{std::vector<float>(p.heads * p.value_dim, NAN), std::vector<float>(p.heads, NAN)};
  p.out = r.out.data();
  p.lse = r.lse.data();
  ai::SharedKeyAttentionOnPath(p, path);
  return r;
}

TEST(PagedAttention, ShuffledBlocksEqualContiguousRows) {
  std::mt19937 rng(21);
  const int64_t row_dim = 576, value_dim = 512, heads = 16;
  std::vector<ai::SharedKeyPath> paths = {ai::SharedKeyPath::kPortable};
  if (GetCpuFeatures().avx512f) paths.push_back(ai::SharedKeyPath::kAvx512);
  if (GetCpuFeatures().avx2) paths.push_back(ai::SharedKeyPath::kAvx2);
  if (GetCpuFeatures().avx512_bf16) paths.push_back(ai::SharedKeyPath::kAvx512Bf16);
  ScopedOmpThreads threads(2);
  for (DType dtype : {DType::kBF16, DType::kF8E4M3}) {
    for (int64_t block_size : {16, 64}) {
      for (int64_t num_rows : {1, 17, 63, 100, 1100}) {  // mid-block ends; 1100 splits over 2 threads
        SCOPED_TRACE(std::string(DTypeName(dtype)) + " block " + std::to_string(block_size) + " rows " +
                     std::to_string(num_rows));
        const int64_t blocks = (num_rows + block_size - 1) / block_size;
        // A pool with room to spare, the sequence's blocks scattered over it.
        KvCache cache(1, row_dim, 2 * blocks + 1, block_size, dtype);
        std::vector<int32_t> pool(static_cast<size_t>(cache.num_blocks()));
        std::iota(pool.begin(), pool.end(), 0);
        std::shuffle(pool.begin(), pool.end(), rng);
        const std::vector<int32_t> table(pool.begin(), pool.begin() + blocks);
        for (int64_t t = 0; t < num_rows; ++t) {
          const std::vector<float> row = RandomVector(row_dim, rng);
          cache.Write(0, table, t, row.data());
        }
        // The same rows, as stored, one after another: f32 [num_rows, row_dim].
        std::vector<float> contiguous(num_rows * row_dim);
        cache.ReadF32(0, table, 0, num_rows, contiguous.data());

        const std::vector<float> q = RandomVector(heads * row_dim, rng);
        SharedKeyAttentionParams paged;
        paged.q = q.data();
        paged.rows = cache.Rows(0, table);
        paged.num_rows = num_rows;
        paged.heads = heads;
        paged.row_dim = row_dim;
        paged.value_dim = value_dim;
        paged.scale = 0.125f;
        SharedKeyAttentionParams flat = paged;
        flat.rows = PagedRows::Contiguous(contiguous.data(), DType::kF32, row_dim, num_rows);
        const AttentionDouble want = SharedKeyAttentionDouble(flat);
        for (ai::SharedKeyPath path : paths) {
          SCOPED_TRACE("path " + std::to_string(static_cast<int>(path)));
          const Result got = RunOnPath(paged, path);
          // fp8 rows on the vdpbf16ps path are rounded to bf16 once more (e4m3 · scale).
          const bool bf16_path = path == ai::SharedKeyPath::kAvx512Bf16;
          ExpectAllNear(got.out, want.out, bf16_path ? kBf16PathOutTol : kF32PathTol, 0.0, "out", {heads, value_dim});
          ExpectAllNear(got.lse, want.lse, bf16_path ? kBf16PathLseTol : kF32PathTol, 0.0, "lse");
        }
      }
    }
  }
}

// bf16 rows in blocks of 64 (the default) run the same kernel calls on the same rows as
// one contiguous block, so the results are bit for bit the same.
TEST(PagedAttention, Bf16BlocksOf64AreBitIdenticalToContiguous) {
  std::mt19937 rng(22);
  const int64_t row_dim = 576, value_dim = 512, heads = 8, num_rows = 700;
  ScopedOmpThreads threads(2);
  KvCache paged_cache(1, row_dim, 16, 64, DType::kBF16);
  KvCache flat_cache(1, row_dim, 1, num_rows, DType::kBF16);
  const std::vector<int32_t> table = {9, 3, 14, 0, 7, 1, 12, 5, 2, 11, 6};
  const std::vector<int32_t> one_block = {0};
  for (int64_t t = 0; t < num_rows; ++t) {
    const std::vector<float> row = RandomVector(row_dim, rng);
    paged_cache.Write(0, table, t, row.data());
    flat_cache.Write(0, one_block, t, row.data());
  }
  const std::vector<float> q = RandomVector(heads * row_dim, rng);
  SharedKeyAttentionParams p;
  p.q = q.data();
  p.num_rows = num_rows;
  p.heads = heads;
  p.row_dim = row_dim;
  p.value_dim = value_dim;
  p.scale = 0.1f;
  std::vector<float> a(heads * value_dim), b(heads * value_dim);
  p.rows = paged_cache.Rows(0, table);
  p.out = a.data();
  SharedKeyAttention(p);
  p.rows = flat_cache.Rows(0, one_block);
  p.out = b.data();
  SharedKeyAttention(p);
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace latte
