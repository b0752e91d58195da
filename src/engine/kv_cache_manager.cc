#include "engine/kv_cache_manager.h"

#include <algorithm>
#include <cassert>

namespace latte {

int64_t KvCacheManager::MatchPrefix(std::span<const int32_t> tokens, SequenceBlocks& seq) {
  assert(seq.table.empty());
  const int64_t size = pool_.block_size();
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (!pool_.prefix_caching()) return 0;
  // Full blocks strictly before the last token: that token is always computed.
  const int64_t candidates = (n - 1) / size;
  uint64_t parent = kNoParentHash;
  for (int64_t i = 0; i < candidates; ++i) {
    const std::span<const int32_t> block_tokens = tokens.subspan(i * size, size);
    const uint64_t hash = BlockHash(parent, block_tokens);
    const std::optional<int32_t> block = pool_.Find(hash, parent, block_tokens);
    if (!block) break;
    pool_.Acquire(*block);
    seq.table.push_back(*block);
    seq.hashes.push_back(hash);
    parent = hash;
  }
  return static_cast<int64_t>(seq.table.size()) * size;
}

int64_t KvCacheManager::BlocksNeeded(const SequenceBlocks& seq, int64_t tokens) const {
  const int64_t blocks = (tokens + pool_.block_size() - 1) / pool_.block_size();
  return std::max<int64_t>(0, blocks - static_cast<int64_t>(seq.table.size()));
}

bool KvCacheManager::Grow(SequenceBlocks& seq, int64_t tokens) {
  const int64_t needed = BlocksNeeded(seq, tokens);
  if (needed > pool_.NumAvailable()) return false;
  for (int64_t i = 0; i < needed; ++i) seq.table.push_back(*pool_.Allocate());
  return true;
}

void KvCacheManager::RegisterFullBlocks(std::span<const int32_t> tokens, int64_t computed, SequenceBlocks& seq) {
  if (!pool_.prefix_caching()) return;
  const int64_t size = pool_.block_size();
  const int64_t full = computed / size;
  for (int64_t i = static_cast<int64_t>(seq.hashes.size()); i < full; ++i) {
    const uint64_t parent = i == 0 ? kNoParentHash : seq.hashes[i - 1];
    const std::span<const int32_t> block_tokens = tokens.subspan(i * size, size);
    const uint64_t hash = BlockHash(parent, block_tokens);
    pool_.Register(seq.table[i], hash, parent, block_tokens);
    seq.hashes.push_back(hash);
  }
}

void KvCacheManager::Free(SequenceBlocks& seq) {
  for (auto it = seq.table.rbegin(); it != seq.table.rend(); ++it) pool_.Release(*it);
  seq.table.clear();
  seq.hashes.clear();
}

}  // namespace latte
