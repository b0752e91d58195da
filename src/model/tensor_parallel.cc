#include "model/tensor_parallel.h"

#include <algorithm>
#include <string>
#include <vector>

namespace latte {
namespace {

IndexRange EvenPart(int64_t total, int rank, int size) {
  const int64_t part = total / size;
  return {rank * part, part};
}

std::string Ranks(const TensorShard& s) {
  return s.size > 1 ? "--tp " + std::to_string(s.size) : std::to_string(s.expert_size) + " expert ranks";
}

}  // namespace

int VocabRanks(const TensorShard& shard) { return shard.size > 1 ? shard.size : shard.expert_size; }
int VocabRank(const TensorShard& shard) { return shard.size > 1 ? shard.rank : shard.expert_rank; }

TensorShard ShardOf(const ParallelLayout& layout, int rank) {
  TensorShard s;
  s.rank = rank % layout.tp;
  s.size = layout.tp;
  s.expert_rank = rank;
  s.expert_size = layout.world_size();
  s.whole_experts = s.expert_size > 1 && layout.ep == s.expert_size;
  return s;
}

Status CheckTensorShard(const ModelConfig& c, const TensorShard& shard, std::optional<Fp8Quantization> fp8_blocks) {
  if (!shard.sharded()) return Status::Ok();
  if (shard.expert_size > 1 && c.n_routed_experts == 0) {
    return Status::InvalidArgument("the model has no routed experts to spread over " +
                                       std::to_string(shard.expert_size) +
                                       " ranks (data-parallel attention needs them)",
                                   "dp");
  }
  const int64_t P = shard.size;
  const auto indivisible = [&](int64_t n, const std::string& what) {
    return Status::InvalidArgument(Ranks(shard) + " does not divide the model's " + std::to_string(n) + " " + what,
                                   "tp");
  };
  if (c.num_attention_heads % P != 0) return indivisible(c.num_attention_heads, "attention heads");
  const bool dense = c.n_routed_experts == 0 || c.first_k_dense_replace > 0 || c.moe_layer_freq > 1;
  if (dense && c.intermediate_size % P != 0) return indivisible(c.intermediate_size, "columns of the dense MLP");
  const int64_t EP = shard.expert_size;
  if (c.n_routed_experts > 0) {
    if (shard.whole_experts && c.n_routed_experts % EP != 0) {
      return Status::InvalidArgument("--ep " + std::to_string(EP) + " does not divide the model's " +
                                         std::to_string(c.n_routed_experts) + " routed experts",
                                     "ep");
    }
    if (!shard.whole_experts && c.moe_intermediate_size % EP != 0) {
      return Status::InvalidArgument(
          std::to_string(EP) + " expert ranks do not divide the model's " + std::to_string(c.moe_intermediate_size) +
              " columns of each routed expert (split them whole with --ep " + std::to_string(EP) + ")",
          "ep");
    }
    const int64_t shared = c.n_shared_experts * c.moe_intermediate_size;
    if (shared % P != 0) return indivisible(shared, "columns of the shared experts");
  }
  if (!fp8_blocks) return Status::Ok();
  // Rows and columns of fp8 weights are cut on block boundaries, so each shard holds
  // whole blocks with their own scales.
  const Fp8Quantization& q = *fp8_blocks;
  const int64_t heads = c.num_attention_heads / P;
  struct Cut {
    int64_t size;
    int64_t block;
    const char* what;
  };
  std::vector<Cut> cuts;
  if (P > 1) {
    cuts = {
        {heads * c.QkHeadDim(), q.block_rows, "rows of q_b_proj (its heads' query rows)"},
        {heads * (c.qk_nope_head_dim + c.v_head_dim), q.block_rows, "rows of kv_b_proj"},
        {heads * c.v_head_dim, q.block_cols, "columns of o_proj"},
    };
    if (dense) cuts.push_back({c.intermediate_size / P, q.block_rows, "columns of the dense MLP"});
    if (c.n_routed_experts > 0) {
      cuts.push_back({c.n_shared_experts * c.moe_intermediate_size / P, q.block_rows, "columns of the shared experts"});
    }
  }
  if (c.n_routed_experts > 0 && EP > 1 && !shard.whole_experts) {
    cuts.push_back({c.moe_intermediate_size / EP, q.block_rows, "columns of each expert"});
  }
  for (const Cut& cut : cuts) {
    if (cut.size % cut.block != 0) {
      return Status::InvalidArgument(Ranks(shard) + " gives each rank " + std::to_string(cut.size) + " " + cut.what +
                                         ", not a multiple of the fp8 weights' " + std::to_string(cut.block) +
                                         "-wide blocks",
                                     "tp");
    }
  }
  return Status::Ok();
}

std::vector<IndexRange> VocabRanges(const ModelConfig& c, int ranks, int64_t vocab_align) {
  const int64_t V = c.vocab_size;
  const int64_t pieces = (V + vocab_align - 1) / vocab_align;
  const int64_t per_rank = (pieces + ranks - 1) / ranks * vocab_align;
  std::vector<IndexRange> out;
  for (int r = 0; r < ranks; ++r) {
    const int64_t first = std::min(V, r * per_rank);
    out.push_back({first, std::min(V, first + per_rank) - first});
  }
  return out;
}

ShardRanges RangesOf(const ModelConfig& c, const TensorShard& shard, int64_t vocab_align) {
  const int r = shard.rank, P = shard.size;
  ShardRanges s;
  s.heads = EvenPart(c.num_attention_heads, r, P);
  s.dense_width = EvenPart(c.intermediate_size, r, P);
  s.shared_width = EvenPart(c.n_shared_experts * c.moe_intermediate_size, r, P);
  if (shard.whole_experts) {
    s.experts = EvenPart(c.n_routed_experts, shard.expert_rank, shard.expert_size);
    s.expert_width = {0, c.moe_intermediate_size};
  } else {
    s.experts = {0, c.n_routed_experts};
    s.expert_width = EvenPart(c.moe_intermediate_size, shard.expert_rank, shard.expert_size);
  }
  // lm_head rows: over the tensor-parallel ranks, or under data-parallel attention over
  // every rank (each computes its slice of every rank's logits).
  s.vocab = VocabRanges(c, VocabRanks(shard), vocab_align)[VocabRank(shard)];
  return s;
}

}  // namespace latte
