// Causal attention for many queries at once (prefill, and the naive mode's
// decompressed blocks), run as GEMMs: per head and chunk of queries, over blocks of
// the keys the chunk can see, S = Q·Kᵀ, a masked softmax with a running max and sum
// (flash attention's online softmax), and O += P·V.
// Same contract as CausalAttention (kernels/attention.h), which sends every
// call with at least kPrefillAttentionMinQueries queries here.
#pragma once

#include <cstdint>

#include "kernels/attention.h"

namespace latte {

inline constexpr int64_t kPrefillAttentionMinQueries = 16;

void PrefillAttention(const CausalAttentionParams& p);

}  // namespace latte
