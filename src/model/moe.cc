#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "base/scratch.h"
#include "kernels/matmul.h"
#include "kernels/silu_mul.h"

namespace latte {
namespace {


// Indices of the k largest values (ties: lower index first), in descending order.
std::vector<int64_t> TopK(const std::vector<float>& values, int64_t k) {
  std::vector<int64_t> idx(values.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int64_t a, int64_t b) {
    return values[a] > values[b] || (values[a] == values[b] && a < b);
  });
  idx.resize(k);
  return idx;
}

}  // namespace

void MlpForward(const MlpWeights& w, const float* x, int64_t n, float* out, FfnScratch& s) {
  const int64_t width = w.gate_proj.rows;
  float* gate = Grow(s.gate, n * width);
  float* up = Grow(s.up, n * width);
  // gate and up read the same x: one batch (one fork/join for both at decode).
  const MatmulProblem gate_up[2] = {
      {x, n, w.gate_proj.cols, w.gate_proj, gate, width},
      {x, n, w.up_proj.cols, w.up_proj, up, width}};
  MatmulMany(gate_up, 2);
  SiluMul(gate, up, n * width, gate);
  Matmul(gate, n, w.down_proj, out);
}

void RouteToken(const ModelConfig& c, const float* logits, const float* score_bias, int64_t* ids,
                float* weights) {
  const int64_t E = c.n_routed_experts, k = c.num_experts_per_tok;
  std::vector<float> scores(E);
  if (c.scoring_func == "sigmoid") {
    for (int64_t e = 0; e < E; ++e) scores[e] = 1.0f / (1.0f + std::exp(-logits[e]));
  } else {
    const float max_logit = *std::max_element(logits, logits + E);
    double sum = 0;
    for (int64_t e = 0; e < E; ++e) sum += (scores[e] = std::exp(logits[e] - max_logit));
    for (float& v : scores) v = static_cast<float>(v / sum);
  }
  // choice: what experts are ranked by (biased scores under noaux_tc).
  std::vector<float> choice = scores;
  if (c.topk_method == "noaux_tc" && score_bias != nullptr) {
    for (int64_t e = 0; e < E; ++e) choice[e] += score_bias[e];
  }
  if (c.topk_method != "greedy" && c.n_group > 1) {
    const int64_t per_group = E / c.n_group;
    std::vector<float> group_score(c.n_group);
    for (int64_t g = 0; g < c.n_group; ++g) {
      std::vector<float> members(choice.begin() + g * per_group, choice.begin() + (g + 1) * per_group);
      if (c.topk_method == "noaux_tc") {
        const std::vector<int64_t> top2 = TopK(members, std::min<int64_t>(2, per_group));
        group_score[g] = 0;
        for (int64_t i : top2) group_score[g] += members[i];
      } else {
        group_score[g] = *std::max_element(members.begin(), members.end());
      }
    }
    std::vector<bool> keep(c.n_group, false);
    for (int64_t g : TopK(group_score, c.topk_group)) keep[g] = true;
    for (int64_t e = 0; e < E; ++e) {
      if (!keep[e / per_group]) choice[e] = -INFINITY;
    }
  }
  const std::vector<int64_t> chosen = TopK(choice, k);
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) {
    ids[i] = chosen[i];
    weights[i] = scores[chosen[i]];
    sum += weights[i];
  }
  // Hugging Face adds 1e-20 to the denominator; kept for bit-level agreement.
  const double norm = (c.norm_topk_prob && k > 1) ? 1.0 / (sum + 1e-20) : 1.0;
  for (int64_t i = 0; i < k; ++i) {
    weights[i] = static_cast<float>(weights[i] * norm * c.routed_scaling_factor);
  }
}

void MoeForward(const ModelConfig& c, const MoeWeights& w, const float* x, int64_t n, float* out,
                FfnScratch& s) {
  const int64_t d = c.hidden_size, E = c.n_routed_experts, k = c.num_experts_per_tok;
  float* logits = Grow(s.logits, n * E);  // logits: [n, E]
  Matmul(x, n, WeightView{DType::kF32, E, d, d, w.router.data()}, logits);
  int64_t* ids = Grow(s.route_ids, n * k);
  float* weights = Grow(s.route_weights, n * k);
  s.expert_rows.resize(E);
  s.expert_weights.resize(E);
  for (int64_t e = 0; e < E; ++e) {
    s.expert_rows[e].clear();
    s.expert_weights[e].clear();
  }
  for (int64_t t = 0; t < n; ++t) {
    RouteToken(c, logits + t * E, w.score_bias.empty() ? nullptr : w.score_bias.data(), ids + t * k,
               weights + t * k);
    for (int64_t i = 0; i < k; ++i) {
      s.expert_rows[ids[t * k + i]].push_back(t);
      s.expert_weights[ids[t * k + i]].push_back(weights[t * k + i]);
    }
  }

  // The shared experts and every routed expert with rows run as two batches:
  // all gate/up products, then (after one SiLU-mul over all of them) all down
  // products, so a decode step pays two fork/joins for the whole MoE instead of
  // three per expert. Each expert still runs once over its rows (weights read once)
  // and the sum below keeps the old order: shared, then experts by id.
  struct Part {
    const MlpWeights* mlp;
    int64_t expert;  // -1: shared
    int64_t m, width;
    const float* x;  // [m, d]
    int64_t hidden;  // offset into gate/up
    float* y;        // [m, d]
  };
  std::vector<Part> parts;
  int64_t in_rows = 0, hidden_total = 0;
  if (w.shared) {
    parts.push_back({&*w.shared, -1, n, w.shared->gate_proj.rows, x, 0, out});
    hidden_total += n * w.shared->gate_proj.rows;
  }
  for (int64_t e = 0; e < E; ++e) {
    const int64_t m = static_cast<int64_t>(s.expert_rows[e].size());
    if (m == 0) continue;
    parts.push_back({&w.experts[e], e, m, w.experts[e].gate_proj.rows, nullptr, hidden_total,
                     nullptr});
    hidden_total += m * w.experts[e].gate_proj.rows;
    in_rows += m;
  }
  float* xin = Grow(s.rows_in, in_rows * d);
  float* yout = Grow(s.rows_out, in_rows * d);
  float* gate = Grow(s.gate, hidden_total);
  float* up = Grow(s.up, hidden_total);
  int64_t row = 0;
  for (Part& p : parts) {
    if (p.expert < 0) continue;
    const std::vector<int64_t>& rows = s.expert_rows[p.expert];
    float* xe = xin + row * d;
    for (int64_t i = 0; i < p.m; ++i) std::memcpy(xe + i * d, x + rows[i] * d, d * sizeof(float));
    p.x = xe;
    p.y = yout + row * d;
    row += p.m;
  }
  std::vector<MatmulProblem> problems;
  problems.reserve(2 * parts.size());
  for (const Part& p : parts) {
    problems.push_back({p.x, p.m, d, p.mlp->gate_proj, gate + p.hidden, p.width});
    problems.push_back({p.x, p.m, d, p.mlp->up_proj, up + p.hidden, p.width});
  }
  MatmulMany(problems.data(), static_cast<int64_t>(problems.size()));
  SiluMul(gate, up, hidden_total, gate);
  problems.clear();
  for (const Part& p : parts) {
    problems.push_back({gate + p.hidden, p.m, p.width, p.mlp->down_proj, p.y, d});
  }
  MatmulMany(problems.data(), static_cast<int64_t>(problems.size()));

  if (!w.shared) std::fill(out, out + n * d, 0.0f);
  for (const Part& p : parts) {
    if (p.expert < 0) continue;
    const std::vector<int64_t>& rows = s.expert_rows[p.expert];
    for (int64_t i = 0; i < p.m; ++i) {
      const float weight = s.expert_weights[p.expert][i];
      float* dst = out + rows[i] * d;
      for (int64_t j = 0; j < d; ++j) dst[j] += weight * p.y[i * d + j];
    }
  }
}

}  // namespace latte
