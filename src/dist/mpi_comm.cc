#include "dist/mpi_comm.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

namespace latte {
namespace {

using Clock = std::chrono::steady_clock;

class Timed {
 public:
  Timed(CollectiveStats& stats, int64_t bytes_sent) : stats_(stats), start_(Clock::now()) {
    ++stats_.calls;
    stats_.bytes_sent += bytes_sent;
  }
  ~Timed() { stats_.seconds += std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  CollectiveStats& stats_;
  Clock::time_point start_;
};

// `counts` as MPI's ints, and where each rank's part starts (rank order); the total.
int64_t ToMpiCounts(std::span<const int64_t> counts, std::vector<int>& ints, std::vector<int>& displs) {
  ints.resize(counts.size());
  displs.resize(counts.size());
  int64_t offset = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    ints[r] = static_cast<int>(counts[r]);
    displs[r] = static_cast<int>(offset);
    offset += counts[r];
  }
  return offset;
}

}  // namespace

MpiComm::MpiComm(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
}

MpiComm::~MpiComm() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owned_ && !finalized) MPI_Comm_free(&comm_);
}

std::unique_ptr<Comm> MpiComm::Split(int color) {
  MPI_Comm part = MPI_COMM_NULL;
  MPI_Comm_split(comm_, color, rank_, &part);
  auto child = std::make_unique<MpiComm>(part, /*owned=*/true);
  child->CountInto(*this);
  return child;
}

void MpiComm::AllReduceSum(float* data, int64_t count) {
  if (size_ == 1 || count == 0) return;
  const int64_t P = size_;
  Timed t(counters()[CollectiveKind::kAllReduce], AllReduceBytesSent(count, size_, rank_));
  if (P == 2 || count * static_cast<int64_t>(sizeof(float)) <= kAllReduceExchangeBytes) {
    parts_.resize(static_cast<size_t>(P * count));
    MPI_Allgather(data, static_cast<int>(count), MPI_FLOAT, parts_.data(), static_cast<int>(count), MPI_FLOAT, comm_);
    SumInRankOrder(parts_.data(), size_, count, count, data);
    return;
  }
  // Chunk r of the vector is summed by rank r: [displs[r], displs[r] + counts[r]).
  std::vector<int64_t> chunks(P);
  for (int64_t r = 0; r < P; ++r) chunks[r] = count * (r + 1) / P - count * r / P;
  ToMpiCounts(chunks, counts_, displs_);
  const int64_t mine = counts_[rank_];
  parts_.resize(static_cast<size_t>(P * mine));
  // Every rank sends chunk r to rank r and receives its own chunk of every rank's partial.
  std::vector<int> recv_counts, recv_displs;
  ToMpiCounts(std::vector<int64_t>(P, mine), recv_counts, recv_displs);
  MPI_Alltoallv(data, counts_.data(), displs_.data(), MPI_FLOAT, parts_.data(), recv_counts.data(), recv_displs.data(),
                MPI_FLOAT, comm_);
  SumInRankOrder(parts_.data(), size_, mine, mine, data + displs_[rank_]);
  MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, data, counts_.data(), displs_.data(), MPI_FLOAT, comm_);
}

void MpiComm::AllGatherV(const float* in, std::span<const int64_t> counts, float* out) {
  ToMpiCounts(counts, counts_, displs_);
  Timed t(counters()[CollectiveKind::kAllGather], (size_ - 1) * counts[rank_] * static_cast<int64_t>(sizeof(float)));
  if (in == out + displs_[rank_]) {
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, out, counts_.data(), displs_.data(), MPI_FLOAT, comm_);
  } else {
    MPI_Allgatherv(in, counts_[rank_], MPI_FLOAT, out, counts_.data(), displs_.data(), MPI_FLOAT, comm_);
  }
}

void MpiComm::ReduceScatterV(const float* in, std::span<const int64_t> counts, float* out) {
  const int64_t mine = counts[rank_];
  std::vector<int> send_counts, send_displs, recv_counts, recv_displs;
  const int64_t sent = ToMpiCounts(counts, send_counts, send_displs) - mine;
  ToMpiCounts(std::vector<int64_t>(size_, mine), recv_counts, recv_displs);  // rank r's part of my rows
  Timed t(counters()[CollectiveKind::kReduceScatter], sent * static_cast<int64_t>(sizeof(float)));
  parts_.resize(static_cast<size_t>(std::max<int64_t>(1, size_ * mine)));
  MPI_Alltoallv(in, send_counts.data(), send_displs.data(), MPI_FLOAT, parts_.data(), recv_counts.data(),
                recv_displs.data(), MPI_FLOAT, comm_);
  SumInRankOrder(parts_.data(), size_, mine, mine, out);
}

void MpiComm::AllToAllCounts(std::span<const int64_t> send_counts, std::span<int64_t> recv_counts) {
  Timed t(counters()[CollectiveKind::kAllToAll], (size_ - 1) * static_cast<int64_t>(sizeof(int64_t)));
  MPI_Alltoall(send_counts.data(), 1, MPI_INT64_T, recv_counts.data(), 1, MPI_INT64_T, comm_);
}

void MpiComm::AllToAllV(const float* in, std::span<const int64_t> send_counts, float* out,
                        std::span<const int64_t> recv_counts) {
  std::vector<int> sc, sd, rc, rd;
  const int64_t sent = ToMpiCounts(send_counts, sc, sd) - send_counts[rank_];
  ToMpiCounts(recv_counts, rc, rd);
  Timed t(counters()[CollectiveKind::kAllToAll], sent * static_cast<int64_t>(sizeof(float)));
  MPI_Alltoallv(in, sc.data(), sd.data(), MPI_FLOAT, out, rc.data(), rd.data(), MPI_FLOAT, comm_);
}

void MpiComm::GatherBytes(const std::vector<uint8_t>& mine, int root, std::vector<std::vector<uint8_t>>& all) {
  const int length = static_cast<int>(mine.size());
  std::vector<int> lengths(size_), displs(size_);
  Timed t(counters()[CollectiveKind::kGather], rank_ == root ? 0 : length + static_cast<int64_t>(sizeof(int)));
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, root, comm_);
  std::vector<uint8_t> joined;
  if (rank_ == root) {
    int64_t total = 0;
    for (int r = 0; r < size_; ++r) {
      displs[r] = static_cast<int>(total);
      total += lengths[r];
    }
    joined.resize(static_cast<size_t>(std::max<int64_t>(1, total)));
  }
  MPI_Gatherv(mine.data(), length, MPI_BYTE, joined.data(), lengths.data(), displs.data(), MPI_BYTE, root, comm_);
  if (rank_ != root) return;
  all.assign(size_, {});
  for (int r = 0; r < size_; ++r) all[r].assign(joined.begin() + displs[r], joined.begin() + displs[r] + lengths[r]);
}

void MpiComm::AllGatherBytes(const void* in, size_t bytes, void* out) {
  Timed t(counters()[CollectiveKind::kAllGather], (size_ - 1) * static_cast<int64_t>(bytes));
  MPI_Allgather(in, static_cast<int>(bytes), MPI_BYTE, out, static_cast<int>(bytes), MPI_BYTE, comm_);
}

void MpiComm::WaitSleeping(MPI_Request& request) {
  auto pause = std::chrono::microseconds(50);
  int done = 0;
  MPI_Test(&request, &done, MPI_STATUS_IGNORE);
  while (!done) {
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(5));
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
  }
}

void MpiComm::Broadcast(std::vector<uint8_t>& bytes, int root, bool idle_wait) {
  uint64_t length = rank_ == root ? bytes.size() : 0;
  Timed t(counters()[CollectiveKind::kBroadcast],
          rank_ == root ? static_cast<int64_t>((size_ - 1) * (sizeof(length) + bytes.size())) : 0);
  // The length always goes by MPI_Ibcast (a nonblocking collective matches only
  // nonblocking ones): receivers that may wait long poll it asleep.
  MPI_Request request;
  MPI_Ibcast(&length, 1, MPI_UINT64_T, root, comm_, &request);
  if (idle_wait && rank_ != root) {
    WaitSleeping(request);
  } else {
    MPI_Wait(&request, MPI_STATUS_IGNORE);
  }
  if (rank_ != root) bytes.resize(length);
  if (length > 0) MPI_Bcast(bytes.data(), static_cast<int>(length), MPI_BYTE, root, comm_);
}

void MpiComm::Abort(const std::string& why) {
  std::fprintf(stderr, "latte: [rank %d] %s\n", world_rank_, why.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);  // the whole job, not only this communicator's ranks
  std::abort();  // MPI_Abort does not return
}

}  // namespace latte
