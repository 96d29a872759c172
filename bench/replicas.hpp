// Benchmarks with several replicas: data parallelism over the GPUs of this process (gpu:N,
// NCCL, one host thread per GPU), over the ranks of an MPI job (mpi:N for CPU replicas, gpu:N
// for one GPU per rank), and independent jobs sharing one GPU (gpu:1/jobs:K).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/parallel/communicator.hpp"
#include "engine/parallel/replica.hpp"
#include "engine/train/trainer.hpp"

namespace tb::bench {

// This process in its MPI job: rank 0 of 1 without mpirun.
struct World {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;  // ranks on this node (Open MPI's environment)
};
// Starts MPI when launched by mpirun (a build without MPI says so and exits); call first.
void start_world();
const World& world();
// A new communicator over every rank (MPI), for the benchmarks' own agreement and timing.
std::unique_ptr<parallel::Communicator> world_comm();

// How the replicas of one benchmark communicate.
enum class Parallel { None, Mpi, NcclThreads, NcclMpi, Jobs };

// One replica's training: its trainer (over a parallel::ReplicaNetwork when it communicates).
struct Replica {
  std::unique_ptr<Trainer> trainer;
  parallel::ReplicaNetwork* replica = nullptr;  // the trainer's network, or null for a job
  Network* backend = nullptr;                   // the network that does the work
};

// The replicas of one benchmark in this process, each stepped on a thread of its own (the
// calling thread where there is one), kept across Google Benchmark's invocations.
class ReplicaRun {
 public:
  // make(k) builds local replica k's backend network and its data (seeded per replica).
  using Factory = std::function<std::pair<std::unique_ptr<Network>, std::unique_ptr<Dataset>>(int k)>;
  ReplicaRun(Parallel mode, int local_replicas, const std::vector<int>& gpu_ordinals, const Factory& make);
  ~ReplicaRun();

  // One step on every replica; returns the slowest replica's step time (device time on a
  // GPU), the slowest over every rank under MPI, so that every rank returns the same.
  double step();
  void warm_up(i64 steps);
  // A collective: throws tb::CheckFailed on every rank unless the loss fell on every replica
  // and every replica's weights agree.
  void check(const std::function<void(Trainer&)>& loss_fell);
  std::vector<Replica>& replicas() { return replicas_; }
  // Summed over local replicas' steps: process CPU time is the caller's to measure.
  parallel::CommStats comm_stats() const;
  int communicating_ranks() const;

 private:
  void on_all(const std::function<void(int k)>& fn);  // runs fn(k) for every local replica, in parallel

  Parallel mode_;
  std::vector<int> ordinals_;
  std::vector<Replica> replicas_;
  std::unique_ptr<parallel::Communicator> world_;  // MPI: agreement and the slowest rank
  struct Pool;
  std::unique_ptr<Pool> pool_;
};

}  // namespace tb::bench
