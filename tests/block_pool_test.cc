// BlockPool and KvCacheManager: the three block states stay consistent under random
// use, prefix matches return the blocks that hold exactly those tokens, and eviction
// takes the least recently freed cached block.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "engine/block_pool.h"
#include "engine/kv_cache_manager.h"

namespace latte {
namespace {

std::vector<int32_t> RandomTokens(std::mt19937& rng, int64_t n, int32_t vocab = 50) {
  std::uniform_int_distribution<int32_t> d(0, vocab - 1);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = d(rng);
  return t;
}

TEST(BlockPool, AllocatesEveryBlockOnceThenRunsOut) {
  BlockPool pool(5, 16, /*prefix_caching=*/true);
  std::set<int32_t> got;
  for (int i = 0; i < 5; ++i) {
    auto b = pool.Allocate();
    ASSERT_TRUE(b.has_value());
    EXPECT_TRUE(got.insert(*b).second) << "block " << *b << " handed out twice";
  }
  EXPECT_FALSE(pool.Allocate().has_value());
  EXPECT_EQ(pool.NumAvailable(), 0);
  pool.Release(3);
  EXPECT_EQ(pool.NumAvailable(), 1);
  EXPECT_EQ(pool.Allocate(), std::optional<int32_t>(3));
}

TEST(BlockPool, CachedBlocksAreFoundUntilEvictedLeastRecentlyFreedFirst) {
  BlockPool pool(3, 4, true);
  const std::vector<int32_t> a = {1, 2, 3, 4}, b = {5, 6, 7, 8};
  const int32_t ba = *pool.Allocate(), bb = *pool.Allocate();
  const uint64_t ha = BlockHash(kNoParentHash, a), hb = BlockHash(ha, b);
  pool.Register(ba, ha, kNoParentHash, a);
  pool.Register(bb, hb, ha, b);
  EXPECT_EQ(pool.Find(ha, kNoParentHash, a), std::optional<int32_t>(ba));
  // Same tokens under another parent is another block's content.
  EXPECT_FALSE(pool.Find(BlockHash(123, b), 123, b).has_value());
  EXPECT_FALSE(pool.Find(hb, kNoParentHash, b).has_value());
  pool.Release(bb);  // freed first: evicted first
  pool.Release(ba);
  EXPECT_EQ(pool.NumCached(), 2);
  EXPECT_EQ(pool.NumAvailable(), 3);
  // The free block goes out before any cached one.
  const int32_t fresh = *pool.Allocate();
  EXPECT_NE(fresh, ba);
  EXPECT_NE(fresh, bb);
  EXPECT_EQ(pool.Allocate(), std::optional<int32_t>(bb));  // evicts b's content
  EXPECT_FALSE(pool.Find(hb, ha, b).has_value());
  EXPECT_EQ(pool.Find(ha, kNoParentHash, a), std::optional<int32_t>(ba));
  pool.Acquire(ba);  // back in use: not evictable
  EXPECT_EQ(pool.NumCached(), 0);
  EXPECT_FALSE(pool.Allocate().has_value());
}

TEST(BlockPool, WithoutPrefixCachingNothingIsFound) {
  BlockPool pool(2, 4, false);
  const std::vector<int32_t> a = {1, 2, 3, 4};
  const int32_t b = *pool.Allocate();
  pool.Register(b, BlockHash(kNoParentHash, a), kNoParentHash, a);
  EXPECT_FALSE(pool.Find(BlockHash(kNoParentHash, a), kNoParentHash, a).has_value());
  pool.Release(b);
  EXPECT_EQ(pool.NumCached(), 0);
}

// Sequences come and go at random; a reference model of what each block holds (the
// token prefix its rows were computed from) checks every prefix match.
TEST(KvCacheManager, RandomSequencesMatchOnlyIdenticalPrefixes) {
  constexpr int64_t kBlocks = 40, kSize = 4;
  BlockPool pool(kBlocks, kSize, true);
  KvCacheManager kv(pool);
  std::mt19937 rng(7);
  // What each block's rows were computed from: the whole token prefix up to its end.
  std::map<int32_t, std::vector<int32_t>> content;
  struct Live {
    std::vector<int32_t> tokens;
    SequenceBlocks blocks;
  };
  std::vector<Live> live;
  const std::vector<int32_t> shared = RandomTokens(rng, 3 * kSize + 1, 3);
  int64_t total_hits = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    if (live.size() < 6 && rng() % 2) {
      Live s;
      // Half share a common start, so matches happen; a small vocabulary makes
      // equal blocks under different parents likely too.
      const int64_t n = 1 + rng() % (6 * kSize);
      s.tokens = RandomTokens(rng, n, 3);
      if (rng() % 2) std::copy_n(shared.begin(), std::min<int64_t>(n, shared.size()), s.tokens.begin());
      const int64_t hit = kv.MatchPrefix(s.tokens, s.blocks);
      ASSERT_EQ(hit % kSize, 0);
      ASSERT_LT(hit, n) << "the last token must be left to compute";
      total_hits += hit;
      for (int64_t i = 0; i < hit / kSize; ++i) {
        const std::vector<int32_t> want(s.tokens.begin(), s.tokens.begin() + (i + 1) * kSize);
        ASSERT_EQ(content.at(s.blocks.table[i]), want) << "block " << i << " of a match holds other tokens";
      }
      if (!kv.Grow(s.blocks, n)) {
        kv.Free(s.blocks);
        continue;
      }
      // "Compute" the rows: blocks past the hit now hold this sequence's prefixes.
      for (int64_t i = hit / kSize; i < static_cast<int64_t>(s.blocks.table.size()); ++i) {
        const int64_t end = std::min<int64_t>(n, (i + 1) * kSize);
        content[s.blocks.table[i]] = std::vector<int32_t>(s.tokens.begin(), s.tokens.begin() + end);
      }
      kv.RegisterFullBlocks(s.tokens, n, s.blocks);
      live.push_back(std::move(s));
    } else if (!live.empty()) {
      const size_t i = rng() % live.size();
      kv.Free(live[i].blocks);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    }
    // Conservation: in-use blocks are exactly those in live tables, counted by ref.
    std::map<int32_t, int> refs;
    for (const Live& s : live) {
      for (int32_t b : s.blocks.table) ++refs[b];
    }
    for (int32_t b = 0; b < kBlocks; ++b) {
      ASSERT_EQ(pool.ref_count(b), refs.count(b) ? refs[b] : 0) << "block " << b;
    }
    ASSERT_EQ(pool.NumInUse(), static_cast<int64_t>(refs.size()));
  }
  EXPECT_GT(total_hits, 0) << "the workload never reused a prefix";
  for (Live& s : live) kv.Free(s.blocks);
  EXPECT_EQ(pool.NumAvailable(), kBlocks);
}

TEST(KvCacheManager, FullPromptHitLeavesTheLastBlockToCompute) {
  BlockPool pool(8, 4, true);
  KvCacheManager kv(pool);
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8};  // two full blocks
  SequenceBlocks first;
  ASSERT_EQ(kv.MatchPrefix(prompt, first), 0);
  ASSERT_TRUE(kv.Grow(first, 8));
  kv.RegisterFullBlocks(prompt, 8, first);
  SequenceBlocks second;
  EXPECT_EQ(kv.MatchPrefix(prompt, second), 4);  // block 2 holds the last token: recomputed
  EXPECT_EQ(second.table[0], first.table[0]);
  EXPECT_EQ(pool.ref_count(first.table[0]), 2);
  kv.Free(second);
  kv.Free(first);
  EXPECT_EQ(pool.NumAvailable(), 8);
  EXPECT_EQ(pool.NumCached(), 2);
}

}  // namespace
}  // namespace latte
