// How the processes of a job split a model (docs/scaleout.md): tensor parallelism over
// `tp` ranks, `dp` data-parallel attention replicas, experts over `ep` ranks.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace latte {

// How data-parallel attention's MoE layers exchange rows: every rank all-gathers every
// rank's rows and reduce-scatters the expert sums back (any split of the experts), or
// sends each row only to the ranks holding one of its experts and gets their sums back
// (all-to-all; needs whole experts, --ep = --dp).
enum class MoeExchange { kAllGather, kAllToAll };
std::optional<MoeExchange> ParseMoeExchange(std::string_view name);  // "allgather" | "alltoall"
std::string_view MoeExchangeName(MoeExchange exchange);

struct ParallelLayout {
  int tp = 1;  // ranks that split every layer's heads and widths (one batch, in lockstep)
  int dp = 1;  // replicas with requests of their own
  int ep = 1;  // 1: routed experts split by width over every rank; tp × dp: split whole
  MoeExchange moe_exchange = MoeExchange::kAllGather;
  int world_size() const { return tp * dp; }
};

// "tp2", "tp2 ep2", "one process".
std::string LayoutName(const ParallelLayout& layout);

// The layout on its own and against the job that runs it, before anything loads: each
// size at least 1; tp × dp the launcher's world size; more than one process needs MPI
// built in and a launcher. `field` of an error: "tp", "dp" or "ep".
Status CheckLayout(const ParallelLayout& layout, int world_size, bool mpi_built_in);

}  // namespace latte
