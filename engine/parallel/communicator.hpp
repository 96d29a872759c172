// One communicator interface for data-parallel training, with three implementations: replicas
// in threads of one process (thread_comm.cpp), ranks under MPI (mpi_comm.cpp, CPU replicas,
// host buffers) and GPUs under NCCL (nccl_comm.cpp, device buffers, bootstrapped in-process or
// through MPI). Every rank issues the same calls in the same order.
//
// Waits are bounded: a rank that stops (an error, a crash) makes the others fail with a clear
// message after `timeout_s` instead of hanging; a rank that fails calls abort() so that the
// others learn of it at once where the backend allows.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/core/error.hpp"
#include "engine/core/network.hpp"

namespace tb::parallel {

using i64 = std::int64_t;
using tb::ElemType;
std::size_t elem_bytes(ElemType t);

// nccl-tests' bus bandwidth factor of an all-reduce among n ranks (getBw: 2(n-1)/n): the share
// of the bytes each rank's link carries in a ring, so that busbw = bytes / time x this factor
// reads the same for any n. 0 for one rank, which moves nothing.
inline double allreduce_bus_factor(int n) { return n > 1 ? 2.0 * (n - 1) / n : 0.0; }

// The MPI communicator's rule (mpi_comm.cpp), which the model follows (predict.cpp): an all-reduce
// of this many bytes or more runs Open MPI's ring, a smaller one its binomial tree.
inline constexpr double kMpiRingFromBytes = 64 * 1024;

// What a rank throws where it stopped because another rank of its group failed (that rank's
// abort(), or its wait past the deadline): the other rank's own error is the cause.
class PeerFailed : public Error {
 public:
  using Error::Error;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string kind() const = 0;  // "threads", "mpi", "nccl"
  // The all-reduce algorithms it runs, where it chooses them ("" where the library does).
  virtual std::string algorithms() const { return ""; }

  // Starts replacing `count` elements at `data` by their mean over all ranks. Returns at once
  // where the backend can overlap (the caller must not touch `data` until wait()); wait()
  // finishes every reduction started since the last wait(). For NCCL, data is device memory
  // and the reduction is ordered after everything enqueued on the stream given at construction.
  virtual void start_all_reduce_mean(void* data, i64 count, ElemType type) = 0;
  virtual void wait() = 0;
  // wait() in two halves, so that a training step's host need not wait in its middle.
  // wait_on_device(): what the caller enqueues next on its stream (the update) is ordered after
  // every reduction started since the last wait. Where reductions run on a device stream (NCCL,
  // replicas sharing a GPU) the stream waits for them on the device and this returns at once;
  // elsewhere the host waits here, as in wait(). finish_device_step(): once the caller has
  // enqueued the rest of its step, waits (within the deadline, watching the library's errors,
  // polling without sleeping) until the device has done all of it, and returns the seconds its
  // stream waited for the reductions (the communication backward did not hide, device clock);
  // -1 at once where wait_on_device() waited on the host.
  virtual void wait_on_device() { wait(); }
  virtual double finish_device_step() { return -1; }
  // Gives the reductions started a turn without waiting for them, where the backend moves them
  // only inside its own calls (MPI); true while some are still in flight. Elsewhere (threads,
  // NCCL on its stream) they move by themselves: false.
  virtual bool progress() { return false; }
  // From now on wait() leaves the sums as they are, where the caller needs no mean: a replay's
  // buffers hold no gradients, and a GPU's mean is a scaling on the device, not a pass over host
  // memory (17 ms a step for ResNet-152's 58 M floats on the 2-core VM). Where the mean costs
  // nothing on the host (threads, NCCL), it is kept.
  virtual void keep_sums() {}
  // Whether wait()'s mean is a pass of its own over host memory (MPI divides the sums after the
  // reduction); a caller that can fold the 1/N into its own pass calls keep_sums().
  virtual bool mean_costs_a_pass() const { return false; }
  // Every rank's `count` elements at `data` become the root's.
  virtual void broadcast(void* data, i64 count, ElemType type, int root) = 0;
  virtual void barrier() = 0;
  // The largest (and the smallest) of one value over ranks: the slowest rank's step time, and
  // checks that every rank agrees (for instance on a weight checksum).
  virtual double max(double value) = 0;
  virtual double min(double value) { return -max(-value); }
  // Tells the other ranks that this one failed (they stop waiting with `reason`).
  virtual void abort(const std::string& reason) = 0;
};

// The state replicas in threads share; create one per group and one ThreadComm per replica.
class ThreadGroup;
std::shared_ptr<ThreadGroup> make_thread_group(int size, double timeout_s = 120);
// Host buffers; reductions run on a worker thread of each rank, overlapping with its caller.
std::unique_ptr<Communicator> make_thread_comm(std::shared_ptr<ThreadGroup> group, int rank);

}  // namespace tb::parallel
