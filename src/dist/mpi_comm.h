// Comm over an MPI communicator (MPI-3 calls only; tested with Open MPI 4.1).
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <vector>

#include "dist/comm.h"

namespace latte {

class MpiComm final : public Comm {
 public:
  // `owned`: freed with this object (a Split() result; not MPI_COMM_WORLD).
  explicit MpiComm(MPI_Comm comm, bool owned = false);
  ~MpiComm() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // Below kAllReduceExchangeBytes per rank (and always for 2 ranks) every rank all-gathers the
  // whole partials and sums them in rank order (log2 P steps); above it, each rank
  // receives one chunk of everyone's partial (all-to-all), sums it in rank order and
  // the sums are all-gathered: the bytes of a ring all-reduce, the same bits.
  void AllReduceSum(float* data, int64_t count) override;
  void AllGatherV(const float* in, std::span<const int64_t> counts, float* out) override;
  // Each rank sends rank r its part (all-to-all) and sums what it receives in rank order.
  void ReduceScatterV(const float* in, std::span<const int64_t> counts, float* out) override;
  void AllToAllCounts(std::span<const int64_t> send_counts, std::span<int64_t> recv_counts) override;
  void AllToAllV(const float* in, std::span<const int64_t> send_counts, float* out,
                 std::span<const int64_t> recv_counts) override;
  void GatherBytes(const std::vector<uint8_t>& mine, int root, std::vector<std::vector<uint8_t>>& all) override;
  void AllGatherBytes(const void* in, size_t bytes, void* out) override;
  void Broadcast(std::vector<uint8_t>& bytes, int root, bool idle_wait) override;
  // Names the rank by its place in the job, and ends the whole job.
  [[noreturn]] void Abort(const std::string& why) override;
  std::unique_ptr<Comm> Split(int color) override;
  // Every collective is started nonblocking and polled (Complete) against the limit;
  // on expiry the waiting ranks report to world rank 0 over a communicator of their
  // own, and rank 0 names the ranks that did not report.
  void set_wait_limit(double seconds) override { *wait_limit_s_ = seconds; }

 private:
  // Waits for `request`, sleeping between polls (50 µs, doubling up to 5 ms): a blocking
  // MPI wait would spin a core for as long as the job is idle.
  void WaitSleeping(MPI_Request& request);
  // Starts a nonblocking `kind` collective (start(&request)) and completes it.
  void Run(CollectiveKind kind, const std::function<void(MPI_Request*)>& start);
  // Waits for `request` of a `kind` collective, polling, within the wait limit.
  void Complete(MPI_Request& request, CollectiveKind kind);
  // The wait limit passed inside a `kind` collective: find who is missing, end the job.
  [[noreturn]] void EndStalled(CollectiveKind kind);

  MPI_Comm comm_;
  bool owned_ = false;
  // The whole job's ranks, for the stall report (a duplicate of the world's
  // communicator, shared by every Split() child); and the limit, shared too.
  std::shared_ptr<MPI_Comm> health_;
  std::shared_ptr<double> wait_limit_s_;
  int rank_ = 0;
  int world_rank_ = 0;
  int size_ = 1;
  std::vector<float> parts_;  // parts: [size, count], the partials of every rank
  std::vector<int> counts_, displs_;
};

}  // namespace latte
