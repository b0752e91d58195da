#include "model/decompressed_prefix.h"

#include "base/check.h"

namespace latte {

int64_t DecompressedPrefix::BytesPerPosition(int64_t layers, int64_t heads, int64_t key_dim, int64_t value_dim) {
  return layers * heads * (key_dim + value_dim) * static_cast<int64_t>(sizeof(float));
}

DecompressedPrefix::Layer* DecompressedPrefix::ForLayer(int64_t layer, int64_t layers, int64_t k_width,
                                                        int64_t v_width) {
  LATTE_CHECK(layer >= 0 && layer < layers && k_width > 0 && v_width > 0, "DecompressedPrefix: layer ", layer, " of ",
              layers, ", widths ", k_width, " and ", v_width);
  const int64_t capacity = capacity_bytes_ / BytesPerPosition(layers, /*heads=*/1, k_width, v_width);
  if (capacity < 1) return nullptr;
  if (static_cast<int64_t>(layers_.size()) != layers) layers_.resize(layers);
  Stored& s = layers_[layer];
  if (s.k_width != k_width || s.v_width != v_width || s.view.capacity != capacity) {
    // new float[] leaves the values uninitialized: the pages are backed when rows are written.
    s.k.reset(new float[capacity * k_width]);
    s.v.reset(new float[capacity * v_width]);
    s.k_width = k_width;
    s.v_width = v_width;
    s.view = Layer{s.k.get(), s.v.get(), 0, capacity};
  }
  return &s.view;
}

void DecompressedPrefix::Clear() {
  for (Stored& s : layers_) s.view.rows = 0;
}

}  // namespace latte
