#include "kernels/rope.h"

#include <algorithm>
#include <cmath>

namespace latte {

double YarnMscale(double factor, double mscale) {
  return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

RopeFrequencies RopeFrequencies::Plain(int64_t dim, double theta) {
  RopeFrequencies r;
  r.dim_ = dim;
  r.inv_freq_.resize(dim / 2);
  for (int64_t i = 0; i < dim / 2; ++i) {
    r.inv_freq_[i] = 1.0 / std::pow(theta, static_cast<double>(2 * i) / dim);
  }
  return r;
}

namespace {
// Dimension index whose wavelength completes `rotations` turns over `max_position`.
double CorrectionDim(double rotations, int64_t dim, double theta, int64_t max_position) {
  return dim * std::log(max_position / (rotations * 2 * M_PI)) / (2 * std::log(theta));
}
}  // namespace

RopeFrequencies RopeFrequencies::Yarn(int64_t dim, double theta, const YarnParams& yarn) {
  RopeFrequencies r = Plain(dim, theta);
  double low = std::floor(CorrectionDim(yarn.beta_fast, dim, theta, yarn.original_max_position));
  double high = std::ceil(CorrectionDim(yarn.beta_slow, dim, theta, yarn.original_max_position));
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // avoid a zero-width ramp
  for (int64_t i = 0; i < dim / 2; ++i) {
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    const double keep = 1.0 - ramp;  // 1: high-frequency dims keep their frequency
    const double extrapolated = r.inv_freq_[i];
    const double interpolated = r.inv_freq_[i] / yarn.factor;
    r.inv_freq_[i] = interpolated * (1.0 - keep) + extrapolated * keep;
  }
  r.magnitude_ = YarnMscale(yarn.factor, yarn.mscale) / YarnMscale(yarn.factor, yarn.mscale_all_dim);
  return r;
}

void RopeFrequencies::ApplyOne(float* x, int64_t position) const {
  for (int64_t i = 0; i < dim_ / 2; ++i) {
    const double angle = static_cast<double>(position) * inv_freq_[i];
    const float c = static_cast<float>(std::cos(angle) * magnitude_);
    const float s = static_cast<float>(std::sin(angle) * magnitude_);
    const float a = x[2 * i];
    const float b = x[2 * i + 1];
    x[2 * i] = a * c - b * s;
    x[2 * i + 1] = a * s + b * c;
  }
}

void RopeFrequencies::Apply(float* x, int64_t ld, int64_t rows, const int64_t* positions) const {
  for (int64_t r = 0; r < rows; ++r) ApplyOne(x + r * ld, positions[r]);
}

}  // namespace latte
