// The replicas of one data-parallel benchmark in this process: each on a thread of its own (the
// calling thread where there is one), wired by a wiring of world.hpp, stepped together,
// and checked together: over the GPUs of this process (NCCL), over the ranks of an MPI job, or
// as independent jobs sharing one GPU.
#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "engine/parallel/communicator.hpp"
#include "engine/parallel/replica.hpp"
#include "engine/parallel/world.hpp"
#include "engine/train/trainer.hpp"

namespace tb::parallel {

// One replica's training: its trainer (over a ReplicaNetwork when it communicates).
struct Replica {
  std::unique_ptr<Trainer> trainer;
  ReplicaNetwork* replica = nullptr;  // the trainer's network, or null for a job
  Network* backend = nullptr;         // the network that does the work
};

class ReplicaRun {
 public:
  // make(k) builds local replica k's network and its data (seeded per replica), on replica k's
  // thread after bind(k) ran there once (a GPU replica makes its device current).
  using Factory = std::function<std::pair<std::unique_ptr<Network>, std::unique_ptr<Dataset>>(int k)>;
  using Bind = std::function<void(int k)>;
  // `wiring` connects the replicas (null: they run independently, as jobs); `across_ranks`: they
  // span the MPI world's ranks (the slowest rank sets the step); `bucket_bytes`: the size of the
  // gradient buckets all-reduced as backward goes (a replay's: 1, each segment its own).
  // Builds the replicas' networks and data, which is this process's alone (no collective):
  // connect() wires them.
  ReplicaRun(Wiring wiring, bool across_ranks, int local_replicas, const Bind& bind, const Factory& make,
             std::size_t bucket_bytes = kDefaultBucketBytes);
  // The collectives that start the run, once, before anything else: the MPI world's
  // communicator, the wiring, and rank 0's weights broadcast. Under mpirun, call it only once
  // every rank's construction went well (set_up_together): a rank that never comes would leave
  // the others in MPI_Comm_dup, which has no deadline.
  void connect();
  ~ReplicaRun();
  ReplicaRun(const ReplicaRun&) = delete;
  ReplicaRun& operator=(const ReplicaRun&) = delete;

  // One step on every replica of this process: the wall clock of the step (host gaps
  // included: the replicas step together) and the slowest local replica's device time
  // (negative without a device clock). No collective: a caller takes the slowest rank's figures
  // once, over a window of steps (slowest()), so that the timing adds no round trip to a step.
  struct StepSeconds {
    double wall = 0;
    double device = -1;
  };
  StepSeconds step();
  // The largest `local` over every rank (a collective under MPI; `local` itself elsewhere).
  double slowest(double local) const;
  void warm_up(i64 steps);
  // A collective: throws tb::CheckFailed on every rank unless `loss_fell` passed on every
  // replica and every replica's weights agree.
  void check(const std::function<void(Trainer&)>& loss_fell);
  std::vector<Replica>& replicas() { return replicas_; }
  // Summed over local replicas' steps: process CPU time is the caller's to measure.
  CommStats comm_stats() const;
  // Replicas over every rank that share the gradients (this process's alone for jobs).
  int communicating_ranks() const;

 private:
  void on_all(const std::function<void(int k)>& fn);  // runs fn(k) for every local replica, in parallel
  // on_all over the replicas' trainers; a replica whose part throws tells the others of this
  // process first (ReplicaNetwork::fail), so that they stop at their next wait instead of at the
  // deadline.
  void training(const std::function<void(int k, Trainer&)>& fn);

  Wiring wiring_;
  std::size_t bucket_bytes_;
  bool across_ranks_;
  std::vector<Replica> replicas_;
  // Built, waiting for connect(): each replica's network and data.
  std::vector<std::unique_ptr<Network>> nets_;
  std::vector<std::unique_ptr<Dataset>> data_;
  std::unique_ptr<Communicator> world_;  // MPI: agreement and the slowest rank
  struct Pool;
  std::unique_ptr<Pool> pool_;
};

}  // namespace tb::parallel
