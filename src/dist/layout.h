// How the processes of a job split a model (docs/scaleout.md): tensor parallelism over
// `tp` ranks, `dp` data-parallel attention replicas, experts over `ep` ranks.
#pragma once

#include <string>

#include "base/status.h"

namespace latte {

struct ParallelLayout {
  int tp = 1;  // ranks that split every layer's heads and widths (one batch, in lockstep)
  int dp = 1;  // replicas with requests of their own
  int ep = 1;  // 1: routed experts split by width over every rank; tp × dp: split whole
  int world_size() const { return tp * dp; }
};

// "tp2", "tp2 ep2", "one process".
std::string LayoutName(const ParallelLayout& layout);

// The layout on its own and against the job that runs it, before anything loads: each
// size at least 1; tp × dp the launcher's world size; more than one process needs MPI
// built in and a launcher. `field` of an error: "tp", "dp" or "ep".
Status CheckLayout(const ParallelLayout& layout, int world_size, bool mpi_built_in);

}  // namespace latte
