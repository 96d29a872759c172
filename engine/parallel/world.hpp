// Where a harness's replicas get their communicators: the MPI world this process belongs to, and
// the wirings of one benchmark's replicas (MPI ranks, NCCL between GPUs, a kernel between
// replicas sharing a GPU). MPI and NCCL are registered in world.cpp, the one place outside
// CMake that knows which this build has; a harness names a wiring, never a library.
#pragma once

#include <functional>
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
// Every rank's `mine`, in rank order: a collective under mpirun, {mine} without. A rank that has
// not come within kAgreeTimeout_s ends the job, naming what every rank was to do ("plan the run").
// An infinite timeout_s waits as long as it takes (ranks standing by while rank 0 measures).
inline constexpr double kAgreeTimeout_s = 600;
std::vector<std::string> all_ranks(const std::string& mine, const std::string& what,
                                   double timeout_s = kAgreeTimeout_s);
// A row's set-up, for a row every rank takes part in: local() (no collective in it) on each rank,
// then an all_ranks() of how it went, before the row's first collective, so that no rank waits in
// one for a rank whose set-up failed (MPI_Comm_dup waited for ever). Throws on every rank where any
// failed: this rank's own error, or else the first failing rank's, named. Without mpirun, local().
void set_up_together(const std::string& row, const std::function<void()>& local);
// Whether `message` is what set_up_together threw on a rank whose own set-up went well (another
// rank's failure, which rank 0 reports).
bool another_ranks_set_up_failed(const std::string& message);
// A new communicator over every rank, for a harness's own agreement and timing. Throws
// tb::Error outside mpirun.
std::unique_ptr<Communicator> world_comm();

// How the replicas of one benchmark communicate: one communicator per local replica's network
// (null where it does not communicate), over `world` (a world_comm()) where the replicas span
// MPI ranks. Each wiring is one way; the harness's table of device kinds (bench/plan/device_kinds.cpp)
// names the one each kind uses, and a harness never names a library. Throws tb::Error where
// this build lacks the library a wiring needs.
using Communicators = std::vector<std::unique_ptr<Communicator>>;
using Wiring = Communicators (*)(const std::vector<Network*>& networks, Communicator* world);
// One CPU replica per MPI rank, MPI_Allreduce.
Communicators mpi_wiring(const std::vector<Network*>& networks, Communicator* world);
// This process's GPUs, a thread each, NCCL.
Communicators nccl_threads_wiring(const std::vector<Network*>& networks, Communicator* world);
// Replicas sharing one GPU, a thread each, averaged by a kernel: a correctness check of gpu:N.
Communicators shared_device_wiring(const std::vector<Network*>& networks, Communicator* world);
// One GPU per MPI rank, NCCL bootstrapped through `world`.
Communicators nccl_ranks_wiring(const std::vector<Network*>& networks, Communicator* world);
// A communicator of one replica for `network`, so that a step through it costs what the
// data-parallel path itself adds to a step (the prediction's overhead term): NCCL on its GPU
// (the collectives' launches and the wait), and on the CPU one that has nothing to move (a
// mean over one rank is the data itself; the link's time is the model's to add).
std::unique_ptr<Communicator> one_replica_comm(Network& network);

// The link between the ranks of the MPI world, swept at start-up (a collective): MPI's of host
// buffers (256 B to 16 MiB), or with `gpu` >= 0 NCCL's of device buffers on that GPU (256 B
// to 64 MiB). Throws tb::Error where this build lacks NCCL.
struct Link;
Link measure_world_link(int gpu);

}  // namespace tb::parallel
