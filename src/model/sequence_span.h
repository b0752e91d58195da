// What one forward pass runs: spans of tokens, one per sequence, each appended after
// the rows its sequence already has in the KV cache (model/kv_cache.h).
#pragma once

#include <cstdint>
#include <span>

namespace latte {

// Which of a span's rows get logits.
enum class SpanLogits {
  kNone,  // a prefill chunk that does not reach the end of the prompt
  kLast,  // the row a token is sampled from
  kAll,   // every row (prompt logprobs, --logits-out)
};

// Positions [start, start + count) of one sequence. Rows [0, start) are in the cache;
// the forward pass writes rows [start, start + count). block_table holds the
// sequence's blocks and covers at least start + count positions.
//
// decode_from: positions >= it run as decode steps (absorbed / materialized latent
// attention), those before it as prefill (K/V decompressed, compute-bound). The engine
// passes the prompt's length, so a token takes the same path (and gets the same
// numerics) whether it runs alone, in a batch, in a chunk of any size or in a
// recomputation after preemption. kDecodeBySpanLength: a one-token span decodes, a
// longer one prefills.
inline constexpr int64_t kDecodeBySpanLength = -1;

// latent_keys_from: the prefill rows attend to the cached rows at positions >= it in
// latent form, as a decode row does (q_lat,h = W_UK,hᵀ · q_n,h over the latent rows,
// then W_UV,h), and to those before it decompressed. The engine passes the positions
// whose decompressed K/V it keeps across a prompt's chunks (model/decompressed_prefix.h):
// past them a chunk would otherwise decompress its whole prefix again, so a short chunk
// deep in a long prompt costs attention over its own keys rather than the prefix's
// decompression. The same value for every chunk gives each token the same numerics in
// any chunking. kAllKeysDecompressed: every key of a prefill row is decompressed (the
// naive mode always does that).
inline constexpr int64_t kAllKeysDecompressed = INT64_MAX;

class DecompressedPrefix;

struct SequenceSpan {
  std::span<const int32_t> block_table;
  int64_t start = 0;
  int64_t count = 0;
  SpanLogits logits = SpanLogits::kLast;
  int64_t decode_from = kDecodeBySpanLength;
  int64_t latent_keys_from = kAllKeysDecompressed;
  // The decompressed K/V of this sequence's rows kept from its earlier chunks, and
  // where this chunk's are kept for the next (model/decompressed_prefix.h); null:
  // every cached row is decompressed again.
  DecompressedPrefix* decompressed = nullptr;
};

}  // namespace latte
