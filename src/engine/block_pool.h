// The KV block pool's bookkeeping: which of the pool's fixed-size blocks are in use,
// by how many sequences, and which hold a cached prefix (vLLM's automatic prefix
// caching). It stores no rows (model/kv_cache.h does) and knows no attention math.
//
// Every block is in exactly one of three states:
//   in use      ref_count > 0: in some sequence's block table (shared blocks > 1)
//   cached      ref_count = 0 and registered under a prefix hash: its rows are kept
//               and a new request with the same prefix takes it back; evicted least
//               recently freed first when a fresh block is needed
//   free        ref_count = 0, no hash: rows are garbage
//
// A full block is registered under BlockHash(parent hash, its tokens): the hash of
// everything before it and its own tokens, so a hit on block i implies hits on
// blocks 0..i-1 and equal rows (rows depend on the token and all tokens before it).
// Lookups compare the stored parent hash and tokens too, so a 64-bit hash collision
// cannot hand out wrong rows.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace latte {

// The hash of a block's content in a chain: parent is the previous block's hash
// (kNoParentHash for a sequence's first block).
inline constexpr uint64_t kNoParentHash = 0x6c61747465ULL;  // "latte"
uint64_t BlockHash(uint64_t parent, std::span<const int32_t> tokens);

class BlockPool {
 public:
  BlockPool(int64_t num_blocks, int64_t block_size, bool prefix_caching);

  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  bool prefix_caching() const { return prefix_caching_; }
  // Blocks a new allocation can take: free + cached (evictable).
  int64_t NumAvailable() const { return static_cast<int64_t>(free_.size() + lru_.size()); }
  int64_t NumInUse() const { return num_blocks_ - NumAvailable(); }
  int64_t NumCached() const { return static_cast<int64_t>(lru_.size()); }

  // A block for new rows, ref_count 1: a free one, else the least recently freed
  // cached one (its hash is dropped). nullopt when every block is in use.
  std::optional<int32_t> Allocate();
  // ref_count - 1; at 0 the block becomes cached (if registered) or free.
  void Release(int32_t block);
  // The cached or in-use block holding exactly (parent, tokens), nullopt if none.
  std::optional<int32_t> Find(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens) const;
  // ref_count + 1 of a block Find returned (takes it out of the evictable list).
  void Acquire(int32_t block);
  // Records that `block` (in use, full, rows written) holds (parent, tokens) under
  // `hash`. A no-op without prefix caching, or when another block already holds
  // that content (the first one stays the one found).
  void Register(int32_t block, uint64_t hash, uint64_t parent, std::span<const int32_t> tokens);

  int32_t ref_count(int32_t block) const { return blocks_[block].ref_count; }

 private:
  struct Block {
    int32_t ref_count = 0;
    bool registered = false;
    uint64_t hash = 0;
    uint64_t parent = 0;
    std::vector<int32_t> tokens;             // registered content, [block_size]
    std::list<int32_t>::iterator lru_entry;  // valid while cached
  };
  void Unregister(int32_t block);

  int64_t num_blocks_;
  int64_t block_size_;
  bool prefix_caching_;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_;  // a stack: the most recently freed block is reused first
  std::list<int32_t> lru_;     // cached blocks, least recently freed at the front
  std::unordered_multimap<uint64_t, int32_t> by_hash_;
};

}  // namespace latte
