#include "dist/layout.h"

#include <algorithm>

namespace latte {

std::optional<MoeExchange> ParseMoeExchange(std::string_view name) {
  if (name == "allgather") return MoeExchange::kAllGather;
  if (name == "alltoall") return MoeExchange::kAllToAll;
  return std::nullopt;
}

std::string_view MoeExchangeName(MoeExchange exchange) {
  return exchange == MoeExchange::kAllToAll ? "alltoall" : "allgather";
}

std::string LayoutName(const ParallelLayout& layout) {
  if (layout.world_size() == 1) return "one process";
  std::string name;
  if (layout.dp > 1) name += "dp" + std::to_string(layout.dp);
  if (layout.tp > 1) name += (name.empty() ? "tp" : " tp") + std::to_string(layout.tp);
  if (layout.ep > 1) name += " ep" + std::to_string(layout.ep);
  return name;
}

Status CheckLayout(const ParallelLayout& layout, int world_size, bool mpi_built_in) {
  for (const auto& [value, field] : {std::pair{layout.tp, "tp"}, {layout.dp, "dp"}, {layout.ep, "ep"}}) {
    if (value < 1) {
      return Status::InvalidArgument("--" + std::string(field) + " must be at least 1, not " + std::to_string(value),
                                     field);
    }
  }
  const int experts = layout.world_size();  // the routed experts spread over every rank
  if (layout.ep > 1 && layout.ep != experts) {
    return Status::InvalidArgument("--ep " + std::to_string(layout.ep) +
                                       " must be 1 (routed experts split by width) or the number of ranks, " +
                                       std::to_string(experts) + " (each rank holds whole experts)",
                                   "ep");
  }
  if (layout.moe_exchange == MoeExchange::kAllToAll && (layout.dp == 1 || layout.ep != experts)) {
    // What would run: these replicas (or two), whole experts on every rank.
    const ParallelLayout hint{layout.dp > 1 ? layout.tp : 1, std::max(layout.dp, 2)};
    const std::string tp = hint.tp > 1 ? " --tp " + std::to_string(hint.tp) : "";
    return Status::InvalidArgument("--moe-exchange alltoall needs data-parallel attention with whole experts (--dp " +
                                       std::to_string(hint.dp) + tp + " --ep " + std::to_string(hint.world_size()) +
                                       ")",
                                   "moe_exchange");
  }
  const int wanted = layout.world_size();
  if (wanted > 1 && !mpi_built_in) {
    return Status::FailedPrecondition(
        std::string(layout.dp > 1 ? "--dp " + std::to_string(layout.dp) : "--tp " + std::to_string(layout.tp)) +
            " needs MPI, and this latte was built without it (install libopenmpi-dev "
            "and rebuild: CMake turns LATTE_MPI on when it finds MPI)",
        "tp");
  }
  if (wanted != world_size) {
    if (world_size == 1) {
      return Status::InvalidArgument("--tp " + std::to_string(layout.tp) + " × --dp " + std::to_string(layout.dp) +
                                         " needs " + std::to_string(wanted) + " processes: run it under mpirun -np " +
                                         std::to_string(wanted),
                                     "tp");
    }
    return Status::InvalidArgument("--tp " + std::to_string(layout.tp) + " × --dp " + std::to_string(layout.dp) +
                                       " = " + std::to_string(wanted) + " ranks, but the job has " +
                                       std::to_string(world_size) + " processes (mpirun -np " +
                                       std::to_string(world_size) + ")",
                                   "tp");
  }
  return Status::Ok();
}

}  // namespace latte
