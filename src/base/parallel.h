// How work is split over the OpenMP team: when a loop is worth a parallel region, and
// which contiguous range of rows each thread takes.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace latte {

// Below this much work (elements touched, or multiply-adds) one thread does the loop:
// waking the team and joining it (~1-2 us) costs more than it saves. 64K bf16 weights
// are 128 KiB, ~10 us of one core's bandwidth; 64K values converted or drawn are 20-100 us.
inline constexpr int64_t kMinParallelWork = int64_t{1} << 16;

inline bool WorthParallel(int64_t work) { return work >= kMinParallelWork; }

// Rounding activations to bf16 ahead of a GEMM takes the team only from this many
// values (m = 512 prefill rows, not a batched decode step's few): the conversion is a
// small part of the GEMM after it, and on a loaded 2-vCPU VM every extra fork/join
// risks waiting for a descheduled thread (from 64K values, a batch-16 R1 attention
// step measured ~8% slower).
inline constexpr int64_t kMinParallelConversion = int64_t{1} << 18;

// A half-open range of rows.
struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

// Thread `thread` of `threads`'s share of rows [0, rows): one contiguous range made of
// whole groups of `group` rows (the last group may be short), the groups dealt out as
// evenly as they divide. Contiguous so each core streams its own part of a matrix.
inline RowRange SplitRows(int64_t rows, int64_t group, int64_t thread, int64_t threads) {
  const int64_t groups = (rows + group - 1) / group;
  return {std::min(rows, groups * thread / threads * group), std::min(rows, groups * (thread + 1) / threads * group)};
}

// The calling thread's share (SplitRows) inside an OpenMP parallel region.
inline RowRange ThisThreadRows(int64_t rows, int64_t group = 1) {
  return SplitRows(rows, group, omp_get_thread_num(), omp_get_num_threads());
}

// fn(RowRange) over rows [0, rows): once with all of them when !parallel, else in a
// new parallel region, once per thread with its ThisThreadRows(rows, group) share.
template <typename Fn> void SplitRowsOverThreads(bool parallel, int64_t rows, int64_t group, Fn&& fn) {
  if (!parallel) {
    fn(RowRange{0, rows});
    return;
  }
#pragma omp parallel
  fn(ThisThreadRows(rows, group));
}

}  // namespace latte
