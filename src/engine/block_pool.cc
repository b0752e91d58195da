#include "engine/block_pool.h"

#include <algorithm>
#include <cassert>

namespace latte {
namespace {

// splitmix64's finaliser: a full-avalanche mix of 64 bits.
inline uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t BlockHash(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = Mix(parent ^ 0x626c6f636bULL);  // "block"
  for (int32_t t : tokens) h = Mix(h ^ static_cast<uint32_t>(t));
  return Mix(h ^ tokens.size());
}

BlockPool::BlockPool(int64_t num_blocks, int64_t block_size, bool prefix_caching)
    : num_blocks_(num_blocks),
      block_size_(block_size),
      prefix_caching_(prefix_caching),
      blocks_(static_cast<size_t>(num_blocks)) {
  free_.reserve(static_cast<size_t>(num_blocks));
  // Block 0 on top of the stack: a fresh pool hands out blocks in order.
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

std::optional<int32_t> BlockPool::Allocate() {
  int32_t block;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    block = lru_.front();
    lru_.pop_front();
    Unregister(block);
  } else {
    return std::nullopt;
  }
  blocks_[block].ref_count = 1;
  return block;
}

void BlockPool::Release(int32_t block) {
  Block& b = blocks_[block];
  assert(b.ref_count > 0);
  if (--b.ref_count > 0) return;
  if (b.registered) {
    lru_.push_back(block);
    b.lru_entry = std::prev(lru_.end());
  } else {
    free_.push_back(block);
  }
}

std::optional<int32_t> BlockPool::Find(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens) const {
  if (!prefix_caching_) return std::nullopt;
  auto [first, last] = by_hash_.equal_range(hash);
  for (auto it = first; it != last; ++it) {
    const Block& b = blocks_[it->second];
    if (b.parent == parent && std::equal(tokens.begin(), tokens.end(), b.tokens.begin(), b.tokens.end())) {
      return it->second;
    }
  }
  return std::nullopt;
}

void BlockPool::Acquire(int32_t block) {
  Block& b = blocks_[block];
  if (b.ref_count++ == 0) lru_.erase(b.lru_entry);  // a found block with no users is cached
}

void BlockPool::Register(int32_t block, uint64_t hash, uint64_t parent, std::span<const int32_t> tokens) {
  if (!prefix_caching_ || blocks_[block].registered) return;
  if (Find(hash, parent, tokens)) return;
  Block& b = blocks_[block];
  b.registered = true;
  b.hash = hash;
  b.parent = parent;
  b.tokens.assign(tokens.begin(), tokens.end());
  by_hash_.emplace(hash, block);
}

void BlockPool::Unregister(int32_t block) {
  Block& b = blocks_[block];
  auto [first, last] = by_hash_.equal_range(b.hash);
  for (auto it = first; it != last; ++it) {
    if (it->second == block) {
      by_hash_.erase(it);
      break;
    }
  }
  b.registered = false;
  b.tokens.clear();
}

}  // namespace latte
