#include "dist/comm.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace latte {

std::string_view CollectiveKindName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kAllToAll: return "all_to_all";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kGather: return "gather";
    case CollectiveKind::kCount: break;
  }
  return "?";
}

double CommStats::TotalSeconds() const {
  double s = 0;
  for (const CollectiveStats& k : by_kind) s += k.seconds;
  return s;
}

int64_t CommStats::TotalBytesSent() const {
  int64_t b = 0;
  for (const CollectiveStats& k : by_kind) b += k.bytes_sent;
  return b;
}

int64_t AllReduceBytesSent(int64_t count, int ranks, int rank) {
  const int64_t P = ranks, f = sizeof(float);
  if (P <= 1 || count == 0) return 0;
  if (P == 2 || count * f <= kAllReduceExchangeBytes) return (P - 1) * count * f;
  const int64_t mine = count * (rank + 1) / P - count * rank / P;
  return f * ((count - mine) + (P - 1) * mine);
}

void SumInRankOrder(const float* parts, int ranks, int64_t count, int64_t stride, float* out) {
#pragma omp parallel for schedule(static) if (count >= (int64_t{1} << 16))
  for (int64_t i = 0; i < count; ++i) {
    float sum = parts[i];
    for (int r = 1; r < ranks; ++r) sum += parts[r * stride + i];
    out[i] = sum;
  }
}

void LocalComm::AllGatherV(const float* in, std::span<const int64_t> counts, float* out) {
  if (in != out && !counts.empty()) std::memmove(out, in, static_cast<size_t>(counts[0]) * sizeof(float));
}

void LocalComm::ReduceScatterV(const float* in, std::span<const int64_t> counts, float* out) {
  if (in != out && !counts.empty()) std::memmove(out, in, static_cast<size_t>(counts[0]) * sizeof(float));
}

void LocalComm::AllToAllCounts(std::span<const int64_t> send_counts, std::span<int64_t> recv_counts) {
  recv_counts[0] = send_counts[0];
}

void LocalComm::AllToAllV(const float* in, std::span<const int64_t> send_counts, float* out, std::span<const int64_t>) {
  if (in != out) std::memmove(out, in, static_cast<size_t>(send_counts[0]) * sizeof(float));
}

void LocalComm::GatherBytes(const std::vector<uint8_t>& mine, int, std::vector<std::vector<uint8_t>>& all) {
  all.assign(1, mine);
}

void LocalComm::AllGatherBytes(const void* in, size_t bytes, void* out) {
  if (in != out) std::memmove(out, in, bytes);
}

void LocalComm::Abort(const std::string& why) {
  std::fprintf(stderr, "latte: %s\n", why.c_str());
  std::exit(1);
}

std::unique_ptr<Comm> LocalComm::Split(int) {
  auto child = std::make_unique<LocalComm>();
  child->CountInto(*this);
  return child;
}

}  // namespace latte
