#include "model/mlp.h"

#include "base/scratch.h"
#include "kernels/matmul.h"
#include "kernels/silu_mul.h"

namespace latte {

void MlpForward(const MlpWeights& w, const float* x, int64_t n, float* out, FfnScratch& s) {
  const int64_t width = w.gate_proj.rows;
  float* gate = Grow(s.gate, n * width);  // gate: [n, width]
  float* up = Grow(s.up, n * width);      // up: [n, width]
  // gate and up read the same x: one batch (one fork/join for both at decode).
  const MatmulProblem gate_up[2] = {{x, n, w.gate_proj.cols, w.gate_proj, gate, width},
                                    {x, n, w.up_proj.cols, w.up_proj, up, width}};
  MatmulMany(gate_up, 2);
  SiluMul(gate, up, n * width, gate);
  Matmul(gate, n, w.down_proj, out);
}

}  // namespace latte
