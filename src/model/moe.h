// The feed-forward of a MoE layer: router, routed experts and shared experts, docs/mla.md
// "MoE and the rest of the block". Each expert is an MLP (model/mlp.h).
#pragma once

#include <cstdint>

#include "model/config.h"
#include "model/ffn_scratch.h"
#include "model/mlp.h"
#include "model/model_weights.h"

namespace latte {

// The experts one token goes to and their weights (docs/mla.md):
//   sigmoid (V3, noaux_tc): choose by s + e_score_correction_bias inside the topk_group
//     groups with the largest sum of their top-2 biased scores; weights are the unbiased s.
//   softmax (V2): greedy top-k, or group_limited_greedy (groups ranked by their max).
//   weights normalised to sum 1 when norm_topk_prob, then × routed_scaling_factor.
// logits: [n_routed_experts]; ids, weights: [num_experts_per_tok]. Ties go to the lower id.
void RouteToken(const ModelConfig& c, const float* logits, const float* score_bias, int64_t* ids, float* weights);
// The same, with working space reused across calls (no allocation once warm).
void RouteToken(const ModelConfig& c, const float* logits, const float* score_bias, int64_t* ids, float* weights,
                RouterScratch& scratch);

// out: [n, d] = Σ_routed w_e · expert_e(x) + shared(x), each expert run once over its rows.
// The routing of n rows x: [n, d]: ids, weights: [n, num_experts_per_tok] (RouteToken
// of each row's router logits).
void RouteRows(const ModelConfig& c, const MoeWeights& w, const float* x, int64_t n, int64_t* ids, float* weights,
               FfnScratch& s);

// out: [n, d] = Σ over each row's experts (ids, weights: [n, k]) that this process
// holds of weight · expert(x), plus the shared expert when with_shared: MoeForward
// once the rows are routed (data-parallel attention routes on one rank and runs the
// experts on another).
void MoeExperts(const ModelConfig& c, const MoeWeights& w, const float* x, int64_t n, const int64_t* ids,
                const float* weights, float* out, FfnScratch& s, bool with_shared);

// with_shared false: the routed experts alone (data-parallel attention adds each rank's
// shared expert to its own rows after the exchange).
void MoeForward(const ModelConfig& c, const MoeWeights& w, const float* x, int64_t n, float* out, FfnScratch& s,
                bool with_shared = true);

}  // namespace latte
