// Where a harness's replicas get their communicators: the MPI world this process belongs to, and
// the wiring of one benchmark's replicas (MPI ranks, NCCL between GPUs, nothing for independent
// jobs). MPI and NCCL are registered in world.cpp, the one place outside CMake that knows which
// this build has; a harness names a mode, never a library.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/core/network.hpp"
#include "engine/parallel/communicator.hpp"

namespace tb::parallel {

// This process in its MPI job: rank 0 of 1 without mpirun.
struct World {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;  // ranks on this node (MPI_Comm_split_type: any MPI, srun)
  // Per rank, in rank order: its host's name and its rank on that host ("node1:0").
  std::vector<std::string> rank_hosts;
  int nodes = 1;  // distinct host names among the ranks
  // The ranks are emulated nodes of one machine (scripts/emulate_nodes.sh sets
  // TB_EMULATED_NODES): network namespaces, or NCCL_HOSTIDs of ranks sharing one GPU.
  bool emulated_nodes = false;
};
// Starts MPI when launched by mpirun (a build without MPI says so and exits with status 2);
// call first. MPI is finalised at exit.
void start_world();
const World& world();
// Every rank's `mine`, in rank order: a collective under mpirun, {mine} without.
std::vector<std::string> all_ranks(const std::string& mine);
// A new communicator over every rank, for a harness's own agreement and timing. Throws
// tb::Error outside mpirun.
std::unique_ptr<Communicator> world_comm();

// How the replicas of one benchmark communicate: not at all, MPI ranks (a CPU replica each),
// NCCL between this process's GPUs (a thread each), NCCL across MPI ranks (a GPU each),
// independent jobs as threads of this process sharing one GPU (Jobs: gpu:1/threads:K), or as
// separate processes (Processes: gpu:1/jobs:K, run by the harness, not by replicas here), or
// data-parallel replicas sharing one GPU (a thread each, averaged by a kernel: a correctness
// check of gpu:N on one device, not scaling).
enum class Mode { None, Mpi, NcclThreads, NcclMpi, Jobs, SharedDevice, Processes };
// True where the replicas' steps span MPI ranks (the slowest rank sets the step).
bool spans_ranks(Mode mode);

// The communicators of this process's replicas of one benchmark: one per network, null where it
// does not communicate. NCCL orders each reduction on its network's stream (its CommEndpoint);
// across ranks NCCL bootstraps through `world` (a world_comm()). Throws tb::Error where this
// build lacks the library the mode needs.
std::vector<std::unique_ptr<Communicator>> make_communicators(Mode mode, const std::vector<Network*>& networks,
                                                              Communicator* world);

}  // namespace tb::parallel
