// Software prefetch of a block of weight rows into L2, a few cache lines per call, spread
// over the compute that precedes its use (a burst of hundreds would overrun the core's
// outstanding-miss queue, which drops software prefetches). The GEMMs over weights a
// prefill meets once (an expert's) prefetch the next block while they compute on the
// current one: without it the first pass over each block waits on memory line by line,
// since the hardware prefetchers follow several rows a power of two apart poorly.
#pragma once

#include <xmmintrin.h>

#include <cstdint>

namespace latte::matmul_internal {

class RowPrefetch {
 public:
  RowPrefetch() = default;  // prefetches nothing
  // `rows` rows of `row_bytes` bytes, `stride` bytes apart from `first`, spread over
  // `calls` calls of Next.
  RowPrefetch(const void* first, int64_t stride, int64_t rows, int64_t row_bytes, int64_t calls)
      : row_(static_cast<const char*>(first)), stride_(stride), rows_left_(rows), row_bytes_(row_bytes) {
    const int64_t lines = rows * ((row_bytes + kLine - 1) / kLine);
    lines_per_call_ = calls > 0 ? (lines + calls - 1) / calls : lines;
  }

  // The next lines_per_call lines, row by row.
  void Next() {
    for (int64_t l = 0; l < lines_per_call_ && rows_left_ > 0; ++l) {
      _mm_prefetch(row_ + offset_, _MM_HINT_T1);
      offset_ += kLine;
      if (offset_ >= row_bytes_) {
        offset_ = 0;
        row_ += stride_;
        --rows_left_;
      }
    }
  }

 private:
  static constexpr int64_t kLine = 64;
  const char* row_ = nullptr;
  int64_t stride_ = 0, rows_left_ = 0, row_bytes_ = 0, offset_ = 0, lines_per_call_ = 0;
};

}  // namespace latte::matmul_internal
