// The process's place in a job of several (mpirun -np N latte ...): MPI is initialised
// once from main(), before any other thread starts, when a launcher started the process
// (Open MPI's or MPICH's environment says so); otherwise the process is a world of one.
#pragma once

#include <string>

#include "base/status.h"
#include "dist/comm.h"

namespace latte {

// Whether this binary was built with MPI (CMake's LATTE_MPI, on when MPI is found).
bool MpiBuiltIn();
// Whether an MPI launcher (mpirun, mpiexec, srun) started this process.
bool LaunchedByMpi();
// The launcher's world size from its environment (1 when not launched by one): known
// before MPI is initialised, so a command can refuse a layout without touching MPI.
int LauncherWorldSize();

// Processes of this job on this host (the launcher's local size; 1 when not launched):
// a default memory budget is the host's available memory shared among them.
int LocalRanks();

// MPI_Init_thread (MPI_THREAD_SERIALIZED: one thread at a time calls MPI, the engine
// thread while it runs) when LaunchedByMpi() and MPI is built in; nothing otherwise.
Status InitDistributed(int* argc, char*** argv);
// MPI_Finalize, once, if InitDistributed initialised MPI.
void FinalizeDistributed();
// Every process of the job: an MpiComm over MPI_COMM_WORLD once initialised, else a
// LocalComm.
Comm& WorldComm();
// The `ranks_per_replica` consecutive ranks of the world this rank's replica runs on
// (data-parallel attention with tensor parallelism inside each replica: ranks
// [i · n, (i + 1) · n) form replica i). The world itself when that is all of it. Every
// rank calls it with the same count (the first call splits the world, collectively).
Comm& ReplicaComm(int ranks_per_replica);

// "[rank 1] " in a job of several processes, "" in one.
std::string RankPrefix();

}  // namespace latte
