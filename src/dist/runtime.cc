#include "dist/runtime.h"

#include <cstdlib>
#include <initializer_list>
#include <map>
#include <memory>

#ifdef LATTE_HAVE_MPI
#include <mpi.h>

#include "dist/mpi_comm.h"
#endif

namespace latte {
namespace {

const char* const kWorldSizeVariables[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"};

std::unique_ptr<Comm>& World() {
  static std::unique_ptr<Comm> world = std::make_unique<LocalComm>();
  return world;
}

bool g_initialised = false;

// ReplicaComm's communicators by ranks per replica, split from World().
std::map<int, std::unique_ptr<Comm>>& Replicas() {
  static std::map<int, std::unique_ptr<Comm>> replicas;
  return replicas;
}

// The first of the launchers' variables that holds a count of at least 1, else 1.
int FirstCountIn(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (const char* v = std::getenv(name)) {
      const int n = std::atoi(v);
      if (n >= 1) return n;
    }
  }
  return 1;
}

}  // namespace

bool MpiBuiltIn() {
#ifdef LATTE_HAVE_MPI
  return true;
#else
  return false;
#endif
}

bool LaunchedByMpi() {
  for (const char* name : kWorldSizeVariables) {
    if (std::getenv(name) != nullptr) return true;
  }
  return std::getenv("PMIX_RANK") != nullptr || std::getenv("PMI_RANK") != nullptr;
}

int LauncherWorldSize() { return FirstCountIn({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}); }

int LocalRanks() { return FirstCountIn({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "PMIX_LOCAL_SIZE"}); }

Status InitDistributed(int* argc, char*** argv) {
  if (g_initialised || !LaunchedByMpi()) return Status::Ok();
#ifdef LATTE_HAVE_MPI
  int provided = 0;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
    return Status::Unavailable("MPI_Init_thread failed");
  }
  g_initialised = true;
  if (provided < MPI_THREAD_SERIALIZED) {
    return Status::Unavailable(
        "this MPI library does not support MPI_THREAD_SERIALIZED (the engine thread calls MPI, not the main "
        "thread)");
  }
  World() = std::make_unique<MpiComm>(MPI_COMM_WORLD);
  return Status::Ok();
#else
  (void)argc;
  (void)argv;
  return Status::Ok();  // a world of one; a layout over several ranks is refused by the command
#endif
}

void FinalizeDistributed() {
#ifdef LATTE_HAVE_MPI
  if (!g_initialised) return;
  g_initialised = false;
  Replicas().clear();  // before the world whose counters they share, and before MPI ends
  World() = std::make_unique<LocalComm>();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
#endif
}

Comm& WorldComm() { return *World(); }

Comm& ReplicaComm(int ranks_per_replica) {
  Comm& world = WorldComm();
  if (ranks_per_replica >= world.size()) return world;
  std::unique_ptr<Comm>& replica = Replicas()[ranks_per_replica];
  if (!replica) replica = world.Split(world.rank() / ranks_per_replica);
  return *replica;
}

std::string RankPrefix() {
  const Comm& world = WorldComm();
  if (world.size() <= 1) return "";
  return "[rank " + std::to_string(world.rank()) + "] ";
}

}  // namespace latte
