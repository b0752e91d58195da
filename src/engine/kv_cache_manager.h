// Block tables of sequences over one BlockPool: prefix matching at admission,
// growing a table as tokens arrive, registering full blocks for reuse, freeing.
//
// A sequence's rows for positions [0, n) sit in blocks table[0 .. ceil(n / block_size)),
// position p in block table[p / block_size] at slot p % block_size.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/block_pool.h"

namespace latte {

struct SequenceBlocks {
  std::vector<int32_t> table;    // block ids, position order
  std::vector<uint64_t> hashes;  // hashes of table[0 .. hashes.size()): full blocks, in chain order
};

struct PrefixCacheCounters {
  int64_t queries = 0;  // prompt tokens looked up at admission
  int64_t hits = 0;     // of those, tokens whose rows came from the cache
};

class KvCacheManager {
 public:
  explicit KvCacheManager(BlockPool& pool) : pool_(pool) {}

  // Takes the longest run of cached full blocks that starts tokens, leaving at least
  // the last token to compute (its logits are needed), and returns the tokens covered:
  // a multiple of the block size. seq must be empty.
  int64_t MatchPrefix(std::span<const int32_t> tokens, SequenceBlocks& seq);
  // Counts one admitted sequence's lookup: `queried` prompt tokens, `hit` of them cached.
  void CountPrefixLookup(int64_t queried, int64_t hit) {
    counters_.queries += queried;
    counters_.hits += hit;
  }
  // Blocks needed beyond seq's table to hold `tokens` positions.
  int64_t BlocksNeeded(const SequenceBlocks& seq, int64_t tokens) const;
  // Extends seq's table to hold `tokens` positions; false (and nothing taken) when
  // the pool has too few available blocks.
  bool Grow(SequenceBlocks& seq, int64_t tokens);
  // Registers the blocks that tokens[0, computed) fill completely (their rows are written).
  void RegisterFullBlocks(std::span<const int32_t> tokens, int64_t computed, SequenceBlocks& seq);
  // Returns every block of seq to the pool (last block first, so a prefix chain's tail
  // is evicted before its head) and empties seq.
  void Free(SequenceBlocks& seq);

  const BlockPool& pool() const { return pool_; }
  const PrefixCacheCounters& counters() const { return counters_; }

 private:
  BlockPool& pool_;
  PrefixCacheCounters counters_;
};

}  // namespace latte
