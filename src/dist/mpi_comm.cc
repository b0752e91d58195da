#include "dist/mpi_comm.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <thread>

namespace latte {
namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point SecondsFromNow(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

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

MpiComm::MpiComm(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned), wait_limit_s_(std::make_shared<double>(0)) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  health_ = std::shared_ptr<MPI_Comm>(new MPI_Comm(MPI_COMM_NULL), [](MPI_Comm* c) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && *c != MPI_COMM_NULL) MPI_Comm_free(c);
    delete c;
  });
  if (!owned_) MPI_Comm_dup(MPI_COMM_WORLD, health_.get());  // a world: its children share it
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
  child->health_ = health_;
  child->wait_limit_s_ = wait_limit_s_;
  return child;
}

void MpiComm::Run(CollectiveKind kind, const std::function<void(MPI_Request*)>& start) {
  MPI_Request request;
  start(&request);
  Complete(request, kind);
}

void MpiComm::Complete(MPI_Request& request, CollectiveKind kind) {
  const double limit = *wait_limit_s_;
  if (!(limit > 0)) {
    MPI_Wait(&request, MPI_STATUS_IGNORE);
    return;
  }
  // Polled as MPI_Wait would spin, with the clock read between polls.
  const Clock::time_point deadline = SecondsFromNow(limit);
  int done = 0;
  while (true) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return;
    if (Clock::now() > deadline) EndStalled(kind);
  }
}

namespace {

constexpr int kStallTag = 0x5a11;

// Polls `request` until it completes or `until`; whether it completed.
bool TestUntil(MPI_Request& request, Clock::time_point until) {
  int done = 0;
  while (Clock::now() < until) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

}  // namespace

void MpiComm::EndStalled(CollectiveKind kind) {
  const double limit = *wait_limit_s_;
  const std::string what = std::string(CollectiveKindName(kind));
  // The ranks that wait reach this point within about one step of each other: give them
  // a tenth of the limit (2 to 30 s) to report.
  const double grace = std::clamp(limit / 10, 2.0, 30.0);
  MPI_Comm health = *health_;
  int world = 1;
  MPI_Comm_size(health, &world);
  if (world_rank_ != 0) {
    int kind_id = static_cast<int>(kind);
    MPI_Request sent;
    MPI_Isend(&kind_id, 1, MPI_INT, 0, kStallTag, health, &sent);
    // Rank 0 ends the job once it has heard from the waiting ranks (within `grace`); if
    // it has not after three times that, it is the one that stopped (or waits elsewhere).
    const Clock::time_point until = SecondsFromNow(3 * grace);
    TestUntil(sent, until);
    std::this_thread::sleep_until(until);
    std::fprintf(stderr,
                 "latte: [rank %d] waited %.0f s (--dist-timeout) inside a collective (%s), and rank 0 did not end "
                 "the job: rank 0 stopped answering; ending the job\n",
                 world_rank_, limit + 3 * grace, what.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
    std::abort();
  }
  std::vector<char> waiting(world, 0);
  waiting[0] = 1;
  const Clock::time_point until = SecondsFromNow(grace);
  while (Clock::now() < until) {
    int arrived = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, kStallTag, health, &arrived, &status);
    if (!arrived) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    int kind_id = 0;
    MPI_Recv(&kind_id, 1, MPI_INT, status.MPI_SOURCE, kStallTag, health, MPI_STATUS_IGNORE);
    waiting[status.MPI_SOURCE] = 1;
  }
  std::string missing, waited;
  for (int r = 0; r < world; ++r) {
    std::string& list = waiting[r] ? waited : missing;
    list += (list.empty() ? "" : ", ") + std::to_string(r);
  }
  if (missing.empty()) {
    std::fprintf(stderr,
                 "latte: [rank 0] waited %.0f s (--dist-timeout) inside a collective (%s), and so does every rank: "
                 "they wait in collectives that do not match; ending the job\n",
                 limit, what.c_str());
  } else {
    std::fprintf(stderr,
                 "latte: [rank 0] waited %.0f s (--dist-timeout) inside a collective (%s): rank %s stopped "
                 "answering (waiting for it: rank %s); ending the job\n",
                 limit, what.c_str(), missing.c_str(), waited.c_str());
  }
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::abort();
}

void MpiComm::AllReduceSum(float* data, int64_t count) {
  if (size_ == 1 || count == 0) return;
  const int64_t P = size_;
  Timed t(counters()[CollectiveKind::kAllReduce], AllReduceBytesSent(count, size_, rank_));
  if (P == 2 || count * static_cast<int64_t>(sizeof(float)) <= kAllReduceExchangeBytes) {
    parts_.resize(static_cast<size_t>(P * count));
    Run(CollectiveKind::kAllReduce, [&](MPI_Request* request) {
      MPI_Iallgather(data, static_cast<int>(count), MPI_FLOAT, parts_.data(), static_cast<int>(count), MPI_FLOAT, comm_,
                     request);
    });
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
  Run(CollectiveKind::kAllReduce, [&](MPI_Request* request) {
    MPI_Ialltoallv(data, counts_.data(), displs_.data(), MPI_FLOAT, parts_.data(), recv_counts.data(),
                   recv_displs.data(), MPI_FLOAT, comm_, request);
  });
  SumInRankOrder(parts_.data(), size_, mine, mine, data + displs_[rank_]);
  Run(CollectiveKind::kAllReduce, [&](MPI_Request* request) {
    MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, data, counts_.data(), displs_.data(), MPI_FLOAT, comm_, request);
  });
}

void MpiComm::AllGatherV(const float* in, std::span<const int64_t> counts, float* out) {
  ToMpiCounts(counts, counts_, displs_);
  Timed t(counters()[CollectiveKind::kAllGather], (size_ - 1) * counts[rank_] * static_cast<int64_t>(sizeof(float)));
  if (in == out + displs_[rank_]) {
    Run(CollectiveKind::kAllGather, [&](MPI_Request* request) {
      MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, out, counts_.data(), displs_.data(), MPI_FLOAT, comm_, request);
    });
  } else {
    Run(CollectiveKind::kAllGather, [&](MPI_Request* request) {
      MPI_Iallgatherv(in, counts_[rank_], MPI_FLOAT, out, counts_.data(), displs_.data(), MPI_FLOAT, comm_, request);
    });
  }
}

void MpiComm::ReduceScatterV(const float* in, std::span<const int64_t> counts, float* out) {
  const int64_t mine = counts[rank_];
  std::vector<int> send_counts, send_displs, recv_counts, recv_displs;
  const int64_t sent = ToMpiCounts(counts, send_counts, send_displs) - mine;
  ToMpiCounts(std::vector<int64_t>(size_, mine), recv_counts, recv_displs);  // rank r's part of my rows
  Timed t(counters()[CollectiveKind::kReduceScatter], sent * static_cast<int64_t>(sizeof(float)));
  parts_.resize(static_cast<size_t>(std::max<int64_t>(1, size_ * mine)));
  Run(CollectiveKind::kReduceScatter, [&](MPI_Request* request) {
    MPI_Ialltoallv(in, send_counts.data(), send_displs.data(), MPI_FLOAT, parts_.data(), recv_counts.data(),
                   recv_displs.data(), MPI_FLOAT, comm_, request);
  });
  SumInRankOrder(parts_.data(), size_, mine, mine, out);
}

void MpiComm::AllToAllCounts(std::span<const int64_t> send_counts, std::span<int64_t> recv_counts) {
  Timed t(counters()[CollectiveKind::kAllToAll], (size_ - 1) * static_cast<int64_t>(sizeof(int64_t)));
  Run(CollectiveKind::kAllToAll, [&](MPI_Request* request) {
    MPI_Ialltoall(send_counts.data(), 1, MPI_INT64_T, recv_counts.data(), 1, MPI_INT64_T, comm_, request);
  });
}

void MpiComm::AllToAllV(const float* in, std::span<const int64_t> send_counts, float* out,
                        std::span<const int64_t> recv_counts) {
  std::vector<int> sc, sd, rc, rd;
  const int64_t sent = ToMpiCounts(send_counts, sc, sd) - send_counts[rank_];
  ToMpiCounts(recv_counts, rc, rd);
  Timed t(counters()[CollectiveKind::kAllToAll], sent * static_cast<int64_t>(sizeof(float)));
  Run(CollectiveKind::kAllToAll, [&](MPI_Request* request) {
    MPI_Ialltoallv(in, sc.data(), sd.data(), MPI_FLOAT, out, rc.data(), rd.data(), MPI_FLOAT, comm_, request);
  });
}

void MpiComm::GatherBytes(const std::vector<uint8_t>& mine, int root, std::vector<std::vector<uint8_t>>& all) {
  const int length = static_cast<int>(mine.size());
  std::vector<int> lengths(size_), displs(size_);
  Timed t(counters()[CollectiveKind::kGather], rank_ == root ? 0 : length + static_cast<int64_t>(sizeof(int)));
  Run(CollectiveKind::kGather, [&](MPI_Request* request) {
    MPI_Igather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, root, comm_, request);
  });
  std::vector<uint8_t> joined;
  if (rank_ == root) {
    int64_t total = 0;
    for (int r = 0; r < size_; ++r) {
      displs[r] = static_cast<int>(total);
      total += lengths[r];
    }
    joined.resize(static_cast<size_t>(std::max<int64_t>(1, total)));
  }
  Run(CollectiveKind::kGather, [&](MPI_Request* request) {
    MPI_Igatherv(mine.data(), length, MPI_BYTE, joined.data(), lengths.data(), displs.data(), MPI_BYTE, root, comm_,
                 request);
  });
  if (rank_ != root) return;
  all.assign(size_, {});
  for (int r = 0; r < size_; ++r) all[r].assign(joined.begin() + displs[r], joined.begin() + displs[r] + lengths[r]);
}

void MpiComm::AllGatherBytes(const void* in, size_t bytes, void* out) {
  Timed t(counters()[CollectiveKind::kAllGather], (size_ - 1) * static_cast<int64_t>(bytes));
  Run(CollectiveKind::kAllGather, [&](MPI_Request* request) {
    MPI_Iallgather(in, static_cast<int>(bytes), MPI_BYTE, out, static_cast<int>(bytes), MPI_BYTE, comm_, request);
  });
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
    Complete(request, CollectiveKind::kBroadcast);
  }
  if (rank_ != root) bytes.resize(length);
  if (length > 0)
    Run(CollectiveKind::kBroadcast, [&](MPI_Request* request) {
      MPI_Ibcast(bytes.data(), static_cast<int>(length), MPI_BYTE, root, comm_, request);
    });
}

void MpiComm::Abort(const std::string& why) {
  std::fprintf(stderr, "latte: [rank %d] %s\n", world_rank_, why.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);  // the whole job, not only this communicator's ranks
  std::abort();                  // MPI_Abort does not return
}

}  // namespace latte
