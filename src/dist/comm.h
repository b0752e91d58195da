// The collectives a model split over several processes needs, behind one interface:
// LocalComm (one process, every call a copy or nothing) and MpiComm (dist/mpi_comm.h,
// Open MPI or MPICH). A GPU collective library would be a third implementation.
//
// Sums are exact to the bit across ranks and runs: every rank receives every other
// rank's partial and adds them itself in rank order, so every rank holding a replicated
// value holds the same bits (a router near-tie then goes the same way everywhere) and
// the result does not depend on the order the MPI library would pick.
//
// Only one thread calls a Comm (the engine thread, or the command's own thread).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace latte {

enum class CollectiveKind { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kBroadcast, kGather, kCount };
std::string_view CollectiveKindName(CollectiveKind kind);  // "all_reduce", ...

// What one rank's collectives cost: calls, the bytes this rank sent, the seconds spent
// inside them (waiting for the slowest rank included).
struct CollectiveStats {
  int64_t calls = 0;
  int64_t bytes_sent = 0;
  double seconds = 0;
};

struct CommStats {
  std::array<CollectiveStats, static_cast<size_t>(CollectiveKind::kCount)> by_kind{};
  CollectiveStats& operator[](CollectiveKind k) { return by_kind[static_cast<size_t>(k)]; }
  const CollectiveStats& operator[](CollectiveKind k) const { return by_kind[static_cast<size_t>(k)]; }
  double TotalSeconds() const;
  int64_t TotalBytesSent() const;
};

class Comm {
 public:
  Comm() = default;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // data: [count] on every rank; afterwards, on every rank, Σ over ranks r = 0, 1, ...
  // of rank r's data, added in that order.
  virtual void AllReduceSum(float* data, int64_t count) = 0;
  // in: [counts[rank()]]; out: [Σ counts], rank r's values at offset Σ_{q<r} counts[q].
  virtual void AllGatherV(const float* in, std::span<const int64_t> counts, float* out) = 0;
  // in: [Σ counts] on every rank, rank r's part at offset Σ_{q<r} counts[q]; out:
  // [counts[rank()]] = Σ over ranks q = 0, 1, ... of rank q's part for this rank, added
  // in that order (the partial sums of rows that belong to different ranks).
  virtual void ReduceScatterV(const float* in, std::span<const int64_t> counts, float* out) = 0;
  // send_counts[r]: what this rank sends rank r; recv_counts (out): what each rank sends
  // this one.
  virtual void AllToAllCounts(std::span<const int64_t> send_counts, std::span<int64_t> recv_counts) = 0;
  // in: [Σ send_counts] in rank order, rank r's part to rank r; out: [Σ recv_counts],
  // what rank q sent at offset Σ_{p<q} recv_counts[p].
  virtual void AllToAllV(const float* in, std::span<const int64_t> send_counts, float* out,
                         std::span<const int64_t> recv_counts) = 0;
  // Every rank's `mine` (any length) to `root`, in rank order (others get nothing).
  virtual void GatherBytes(const std::vector<uint8_t>& mine, int root, std::vector<std::vector<uint8_t>>& all) = 0;
  // `bytes` of every rank, in rank order: out [size() · bytes].
  virtual void AllGatherBytes(const void* in, size_t bytes, void* out) = 0;
  // root's `bytes` to every rank (resized on the others). `idle_wait` (given alike on
  // every rank): the others may be waiting a long time (an idle server), so they sleep
  // between polls instead of spinning a core.
  virtual void Broadcast(std::vector<uint8_t>& bytes, int root, bool idle_wait = false) = 0;
  // Ends every process of the job with `why` on stderr (a rank that cannot go on).
  [[noreturn]] virtual void Abort(const std::string& why) = 0;
  // The ranks that give the same `color` (every rank calls it, as a collective), as a
  // communicator of their own, ranked in this one's order. Its collectives count in this
  // communicator's stats(), so the job's one Comm reports them all.
  virtual std::unique_ptr<Comm> Split(int color) = 0;
  // A collective of this communicator (and of its Split() children) that waits longer
  // than `seconds` for the other ranks ends the job, naming the ranks that never
  // reached one (a rank that died or hangs). 0: wait as long as it takes. Broadcasts
  // with idle_wait are exempt (an idle server waits for its next request).
  virtual void set_wait_limit(double seconds) { (void)seconds; }

  const CommStats& stats() const { return *stats_; }
  void ResetStats() { *stats_ = {}; }

 protected:
  // A Split() child shares its parent's counters.
  void CountInto(Comm& parent) { stats_ = parent.stats_; }
  CommStats& counters() { return *stats_; }

 private:
  CommStats own_stats_;
  CommStats* stats_ = &own_stats_;
};

// One process: a sum over one rank is the data itself.
class LocalComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void AllReduceSum(float*, int64_t) override {}
  void AllGatherV(const float* in, std::span<const int64_t> counts, float* out) override;
  void ReduceScatterV(const float* in, std::span<const int64_t> counts, float* out) override;
  void AllToAllCounts(std::span<const int64_t> send_counts, std::span<int64_t> recv_counts) override;
  void AllToAllV(const float* in, std::span<const int64_t> send_counts, float* out,
                 std::span<const int64_t> recv_counts) override;
  void GatherBytes(const std::vector<uint8_t>& mine, int root, std::vector<std::vector<uint8_t>>& all) override;
  void AllGatherBytes(const void* in, size_t bytes, void* out) override;
  void Broadcast(std::vector<uint8_t>&, int, bool) override {}
  [[noreturn]] void Abort(const std::string& why) override;
  std::unique_ptr<Comm> Split(int color) override;
};

// The bytes one rank sends for an all-reduce of `count` floats over `ranks` ranks, as
// MpiComm does it: below kAllReduceExchangeBytes (and always for 2 ranks) it sends its
// whole partial to every other rank, (ranks − 1) · count floats; above, one chunk to
// each rank and its summed chunk back, about 2 · (ranks − 1) / ranks · count.
inline constexpr int64_t kAllReduceExchangeBytes = 64 << 10;
int64_t AllReduceBytesSent(int64_t count, int ranks, int rank = 0);

// The rank order sum both implementations and the tests share:
// out[i] = parts[0][i] + parts[1][i] + ... (left to right), parts: [ranks, count].
void SumInRankOrder(const float* parts, int ranks, int64_t count, int64_t stride, float* out);

}  // namespace latte
