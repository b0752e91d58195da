// Rotary position embedding on interleaved pairs (x[2i], x[2i+1]) — the layout
// DeepSeek's reference code uses — with plain or YaRN frequencies.
#pragma once

#include <cstdint>
#include <vector>

namespace latte {

struct YarnParams {
  double factor = 1.0;
  int64_t original_max_position = 4096;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 1.0;
  double mscale_all_dim = 0.0;
};

class RopeFrequencies {
 public:
  // θ_i = theta^(-2i/dim), i < dim/2.
  static RopeFrequencies Plain(int64_t dim, double theta);
  // YaRN (Peng et al. 2023, "YaRN: Efficient Context Window Extension of Large
  // Language Models", §3): frequencies below the beta_slow..beta_fast ramp are
  // divided by `factor`, those above are kept, linear blend between; cos/sin are
  // scaled by yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)
  // as in DeepSeek-V2's Hugging Face implementation.
  static RopeFrequencies Yarn(int64_t dim, double theta, const YarnParams& yarn);

  int64_t dim() const { return dim_; }
  const std::vector<double>& inv_freq() const { return inv_freq_; }
  double magnitude() const { return magnitude_; }

  // Rotates `rows` vectors of length dim (row stride ld >= dim), row r at position
  // positions[r].
  void Apply(float* x, int64_t ld, int64_t rows, const int64_t* positions) const;
  // Rotates `rows` vectors of length dim (row stride ld >= dim) that share one position
  // (the heads of one token): cos/sin are computed once for all of them.
  void ApplyAtPosition(float* x, int64_t ld, int64_t rows, int64_t position) const;
  // Rotates one vector at `position`.
  void ApplyOne(float* x, int64_t position) const { ApplyAtPosition(x, dim_, 1, position); }

 private:
  int64_t dim_ = 0;
  std::vector<double> inv_freq_;  // [dim/2]
  double magnitude_ = 1.0;        // cos/sin multiplier (YaRN attention factor ratio)
};

// 0.1·mscale·ln(factor) + 1 for factor > 1, else 1: YaRN's attention temperature
// (yarn_get_mscale in DeepSeek-V2's Hugging Face code). The rope magnitude above is
// YarnMscale(factor, mscale) / YarnMscale(factor, mscale_all_dim), and attention's softmax
// scale takes YarnMscale(factor, mscale_all_dim)^2.
double YarnMscale(double factor, double mscale);

}  // namespace latte
