// Data parallelism across processes under MPI: the MPI runtime's lifetime (MpiSession) and a
// Communicator over it for CPU replicas (host buffers, fp32). The NCCL path uses the same
// communicator to share its unique id (make_nccl_comm_mpi in nccl_comm.hpp).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/parallel/communicator.hpp"

namespace tb::parallel {

// True when the environment says this process is a rank started by mpirun/srun (Open MPI's
// OMPI_COMM_WORLD_SIZE, PMIx's PMIX_RANK, PMI's PMI_SIZE). Reads only the environment, so it
// is safe to call before, or without, MPI.
bool launched_by_mpirun();

// Initialises MPI (MPI_THREAD_FUNNELED: only the thread that made the session calls MPI)
// unless someone already did, and finalises it on destruction if this session initialised it.
// Destroy every MPI communicator before the session.
class MpiSession {
 public:
  MpiSession();
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int rank() const;  // in MPI_COMM_WORLD
  int size() const;
  // This rank's index among the ranks of its node, and how many there are: from
  // MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), so that Open MPI, MPICH and srun agree.
  std::pair<int, int> local_rank_and_size() const;
  // Every rank's `mine`, in rank order (a collective over MPI_COMM_WORLD). A rank that has not
  // come after timeout_s ends the job (MPI_Abort), saying it waited for every rank to `what`
  // ("set up train/..."): the collective stays in flight, so nothing more can be agreed. An
  // infinite timeout_s waits as long as it takes.
  std::vector<std::string> all_gather(const std::string& mine, double timeout_s, const std::string& what) const;

 private:
  bool initialised_here_ = false;
};

// One rank per process over a duplicate of MPI_COMM_WORLD; needs a live MpiSession. Buffers
// are host memory. All-reductions are fp32 only (tb::Error otherwise); broadcast takes any
// ElemType. Every wait is bounded by timeout_s, after which tb::Error names this rank.
// Nonblocking collectives progress only inside MPI calls here, so a reduction mostly runs in
// wait() (and a little in each later start_all_reduce_mean).
std::unique_ptr<Communicator> make_mpi_comm(double timeout_s = 120);

}  // namespace tb::parallel
