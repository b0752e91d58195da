// Working space of the feed-forward half of a block (model/mlp.h, model/moe.h): buffers
// that grow to the largest step seen and are reused, so a steady decode step through
// MlpForward / MoeForward allocates nothing. n: the step's rows (tokens), d: hidden_size,
// E: n_routed_experts, k: num_experts_per_tok, m_e: the rows routed to expert e.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/matmul.h"
#include "model/model_weights.h"

namespace latte {

// RouteToken's working space, reused across tokens.
struct RouterScratch {
  std::vector<float> scores;       // scores: [E] (softmax or sigmoid of the logits)
  std::vector<float> choice;       // choice: [E] (what experts are ranked by)
  std::vector<float> group_score;  // group_score: [n_group]
  std::vector<int64_t> order;      // order: [max(E, n_group)] (indices, best first)
  std::vector<char> keep_group;    // keep_group: [n_group] (1: among the topk_group best)
};

// One MLP of a MoE step: the shared experts (expert -1) over all n rows, or a routed
// expert over the m rows routed to it.
struct MoePart {
  const MlpWeights* mlp = nullptr;
  int64_t expert = -1;
  int64_t m = 0, width = 0;
  const float* x = nullptr;  // x: [m, d]
  int64_t hidden = 0;        // offset of this part's [m, width] block in gate / up
  float* y = nullptr;        // y: [m, d]
};

// One per model, passed to every layer's MlpForward or MoeForward in turn.
struct FfnScratch {
  // gate, up: [Σ m · width] over the MLPs run, each part's [m, width] block at its
  // MoePart::hidden ([n, width] for a dense MLP). gate then holds silu(gate) ⊙ up.
  std::vector<float> gate, up;
  std::vector<float> rows_in;                      // rows_in: [Σ_e m_e, d] (each expert's rows, experts by id)
  std::vector<float> rows_out;                     // rows_out: [Σ_e m_e, d] (each expert's output rows)
  std::vector<float> logits;                       // logits: [n, E] (router logits)
  std::vector<int64_t> route_ids;                  // route_ids: [n, k]
  std::vector<float> route_weights;                // route_weights: [n, k]
  std::vector<std::vector<int64_t>> expert_rows;   // expert_rows: [E][m_e] (token rows)
  std::vector<std::vector<float>> expert_weights;  // expert_weights: [E][m_e]
  RouterScratch router;
  std::vector<MoePart> parts;  // parts: [shared + experts with rows]
  // problems: [2 · parts] (the gate and up products of every part), then [parts] (the downs)
  std::vector<MatmulProblem> problems;
};

}  // namespace latte
