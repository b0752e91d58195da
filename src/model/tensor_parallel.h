// One rank's share of the weights under tensor parallelism over `size` ranks
// (docs/scaleout.md): attention by heads (q_b_proj's and kv_b_proj's rows of the local
// heads, o_proj's columns of them), the dense MLP and the shared experts by width
// (gate/up rows, down columns), routed experts by width or whole (E / size of them per
// rank), lm_head by vocabulary rows. q_a_proj, kv_a_proj_with_mqa, the norms, the
// router and embed_tokens are replicated. Every rank's partial outputs of o_proj and of
// the FFN are summed across ranks; the latent cache is replicated.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "base/status.h"
#include "dist/layout.h"
#include "model/config.h"

namespace latte {

// Attention, the dense MLP, the shared experts and lm_head split `size` ways (tensor
// parallelism); routed experts split `expert_size` ways: the same ranks under TP, every
// rank of the job under data-parallel attention (where `size` is 1: each rank holds the
// whole attention and runs its own requests).
struct TensorShard {
  int rank = 0;
  int size = 1;
  int expert_rank = 0;
  int expert_size = 1;
  bool whole_experts = false;  // routed experts split whole (--ep = the expert ranks), not by width
  bool sharded() const { return size > 1 || expert_size > 1; }
};

// The shard of world rank `rank` under `layout`: whole experts when --ep is the number of
// ranks the experts are split over (--tp, or --dp under data-parallel attention).
TensorShard ShardOf(const ParallelLayout& layout, int rank);

// The ranks lm_head's vocabulary rows are split over (the tensor-parallel ranks, else
// every data-parallel rank), and this rank's place among them.
int VocabRanks(const TensorShard& shard);
int VocabRank(const TensorShard& shard);

// [first, first + count) of some dimension.
struct IndexRange {
  int64_t first = 0;
  int64_t count = 0;
  int64_t end() const { return first + count; }
};

// This rank's part of each split dimension of a model.
struct ShardRanges {
  IndexRange heads;         // of num_attention_heads
  IndexRange dense_width;   // of intermediate_size
  IndexRange expert_width;  // of moe_intermediate_size (all of it with whole experts)
  IndexRange shared_width;  // of n_shared_experts · moe_intermediate_size
  IndexRange experts;       // of n_routed_experts (all of them when split by width)
  IndexRange vocab;         // of vocab_size (lm_head rows)
};

// Whether the model splits `shard.size` ways as `shard` asks: heads, dense width, expert
// width (or expert count) and shared width divide evenly, and where weights are held in
// fp8 (`fp8_blocks`: the checkpoint's grid, or 128x128 under --quantize fp8) every
// shard's rows and columns start and end on block boundaries. One sentence naming what
// does not divide; field "tp" (or "ep" for the expert count).
Status CheckTensorShard(const ModelConfig& c, const TensorShard& shard, std::optional<Fp8Quantization> fp8_blocks);

// This rank's ranges (CheckTensorShard passed). vocab: split in `vocab_align`-row pieces
// (an fp8 lm_head's block rows), the last rank taking what remains.
ShardRanges RangesOf(const ModelConfig& c, const TensorShard& shard, int64_t vocab_align = 1);

// Every rank's vocab range, in rank order (the logits all-gather's counts).
std::vector<IndexRange> VocabRanges(const ModelConfig& c, int ranks, int64_t vocab_align = 1);

}  // namespace latte
