#include "kernels/rope.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"

namespace latte {

double YarnMscale(double factor, double mscale) { return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0; }

RopeFrequencies RopeFrequencies::Plain(int64_t dim, double theta) {
  LATTE_CHECK(dim > 0 && dim % 2 == 0, "rope: dim ", dim, " must be even and positive");
  LATTE_CHECK(theta > 0, "rope: theta ", theta);
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

void RopeFrequencies::ApplyAtPosition(float* x, int64_t ld, int64_t rows, int64_t position) const {
  LATTE_DCHECK(rows >= 0 && ld >= dim_ && (rows == 0 || x != nullptr), "rope: ", rows, " rows of stride ", ld, " (dim ",
               dim_, ")");
  // Pairs are taken kPairs at a time so their cos/sin fit in two stack arrays.
  constexpr int64_t kPairs = 32;
  float cos_a[kPairs], sin_a[kPairs];
  for (int64_t i0 = 0; i0 < dim_ / 2; i0 += kPairs) {
    const int64_t pairs = std::min(kPairs, dim_ / 2 - i0);
    for (int64_t i = 0; i < pairs; ++i) {
      const double angle = static_cast<double>(position) * inv_freq_[i0 + i];
      cos_a[i] = static_cast<float>(std::cos(angle) * magnitude_);
      sin_a[i] = static_cast<float>(std::sin(angle) * magnitude_);
    }
    for (int64_t r = 0; r < rows; ++r) {
      float* v = x + r * ld + 2 * i0;
      for (int64_t i = 0; i < pairs; ++i) {
        const float a = v[2 * i];
        const float b = v[2 * i + 1];
        v[2 * i] = a * cos_a[i] - b * sin_a[i];
        v[2 * i + 1] = a * sin_a[i] + b * cos_a[i];
      }
    }
  }
}

void RopeFrequencies::Apply(float* x, int64_t ld, int64_t rows, const int64_t* positions) const {
  LATTE_CHECK(rows >= 0 && ld >= dim_, "rope: ", rows, " rows of stride ", ld, " (dim ", dim_, ")");
  if (rows == 0) return;
  LATTE_CHECK(x != nullptr && positions != nullptr, "rope: null x or positions");
  for (int64_t r = 0; r < rows; ++r) ApplyAtPosition(x + r * ld, dim_, 1, positions[r]);
}

}  // namespace latte
