// The feed-forward half of a block: dense MLP, and MoE (router + routed experts +
// shared experts), docs/mla.md "MoE and the rest of the block".
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/model_weights.h"

namespace latte {

// RouteToken's working space, reused across tokens so routing does not allocate.
struct RouterScratch {
  std::vector<float> scores, choice, group_score;
  std::vector<int64_t> order;
  std::vector<char> keep_group;
};

// One MLP of a MoE step: the shared experts (expert -1) or a routed expert over
// the m rows routed to it.
struct MoePart {
  const MlpWeights* mlp = nullptr;
  int64_t expert = -1;
  int64_t m = 0, width = 0;
  const float* x = nullptr;  // [m, d]
  int64_t hidden = 0;        // offset into gate/up
  float* y = nullptr;        // [m, d]
};

// Buffers that grow to the largest step seen and are reused: a steady decode step
// through MlpForward / MoeForward allocates nothing.
struct FfnScratch {
  std::vector<float> gate, up, hidden, rows_in, rows_out, logits, route_weights;
  std::vector<int64_t> route_ids;
  std::vector<std::vector<int64_t>> expert_rows;  // [n_routed_experts] rows routed to each
  std::vector<std::vector<float>> expert_weights;
  RouterScratch router;
  std::vector<MoePart> parts;
  std::vector<MatmulProblem> problems;
};

// out: [n, d] = down(silu(gate · x) ⊙ (up · x)) for x: [n, d].
void MlpForward(const MlpWeights& w, const float* x, int64_t n, float* out, FfnScratch& s);

// The experts one token goes to and their weights (docs/mla.md):
//   sigmoid (V3, noaux_tc): choose by s + e_score_correction_bias inside the topk_group
//     groups with the largest sum of their top-2 biased scores; weights are the unbiased s.
//   softmax (V2): greedy top-k, or group_limited_greedy (groups ranked by their max).
//   weights normalised to sum 1 when norm_topk_prob, then × routed_scaling_factor.
// logits: [n_routed_experts]; ids, weights: [num_experts_per_tok]. Ties go to the lower id.
void RouteToken(const ModelConfig& c, const float* logits, const float* score_bias, int64_t* ids,
                float* weights);
// The same, with working space reused across calls (no allocation once warm).
void RouteToken(const ModelConfig& c, const float* logits, const float* score_bias, int64_t* ids,
                float* weights, RouterScratch& scratch);

// out: [n, d] = Σ_routed w_e · expert_e(x) + shared(x), each expert run once over its rows.
void MoeForward(const ModelConfig& c, const MoeWeights& w, const float* x, int64_t n, float* out,
                FfnScratch& s);

}  // namespace latte
