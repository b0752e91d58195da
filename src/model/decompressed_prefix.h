// The decompressed K/V of one prompt's prefix, kept across its prefill chunks.
//
// A prefill chunk at depth S attends to every cached row [0, S), decompressed by
// kv_b_proj (k_n, v = kv_b · c_kv). Without this store each chunk decompresses all S
// rows again: a prompt of P tokens in chunks of c decompresses ~P²/2c rows instead of
// P (at 16k tokens in chunks of 512, 16× the work of one forward). With it a chunk
// decompresses only the rows not kept yet, and attends to the kept rows in place.
//
// Bounded in bytes: each layer keeps positions [0, capacity), the same capacity in every
// layer; positions past it are decompressed per chunk as before. One prompt owns the
// store at a time (the engine hands it on, Clear()ing it); the rows kept are those of
// that prompt's cache rows, which never change once written.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace latte {

class DecompressedPrefix {
 public:
  // One layer's kept rows. k: [capacity, k_width] = k_n | k_r per head, as the
  // attention kernel reads them; v: [capacity, v_width].
  struct Layer {
    float* k = nullptr;
    float* v = nullptr;
    int64_t rows = 0;  // positions [0, rows) are kept
    int64_t capacity = 0;
  };

  // capacity_bytes: for every layer together; 0 keeps nothing.
  explicit DecompressedPrefix(int64_t capacity_bytes = 0) : capacity_bytes_(capacity_bytes) {}

  // Layer `layer` of `layers`, for rows of k_width + v_width floats. Its buffers are
  // allocated at the first call (pages backed as rows are written); a call with other
  // widths than the last starts the layer over. Null when not even one row fits.
  Layer* ForLayer(int64_t layer, int64_t layers, int64_t k_width, int64_t v_width);

  // Forgets every kept row (the buffers stay, for the next prompt).
  void Clear();

  int64_t capacity_bytes() const { return capacity_bytes_; }

  // The bytes one position takes in every layer: each layer keeps H · (d_n + d_r)
  // floats of k and H · d_v of v.
  static int64_t BytesPerPosition(int64_t layers, int64_t heads, int64_t key_dim, int64_t value_dim);

 private:
  struct Stored {
    std::unique_ptr<float[]> k, v;
    int64_t k_width = 0, v_width = 0;
    Layer view;
  };
  int64_t capacity_bytes_;
  std::vector<Stored> layers_;
};

}  // namespace latte
