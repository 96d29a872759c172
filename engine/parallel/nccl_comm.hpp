// Data parallelism across GPUs under NCCL: several GPUs of one process (one communicator per
// GPU, each driven by its own thread), or one GPU per process bootstrapped through another
// communicator (MPI). Buffers are device memory.
#pragma once

#include <memory>
#include <vector>

#include <cuda_runtime.h>

#include "engine/parallel/communicator.hpp"

namespace tb::parallel {

// How these communicators behave. Each has its own non-blocking communication stream on its
// device; a reduction waits for the work already on the compute stream `streams[i]`, and
// wait() blocks the host until every reduction since the last wait() finished (at most
// timeout_s, checking NCCL's asynchronous errors meanwhile), then orders later work on the
// compute stream after them; wait_on_device() orders the compute stream after them without
// blocking, and finish_device_step() blocks the host once, until the compute stream is done, with
// the same deadline and checks. A timeout or an NCCL error aborts the communicator and throws
// tb::Error naming the rank; the communicator cannot be used after that.
//
// Every call on one communicator must come from one thread, and the communicators of a group
// from different threads (NCCL issues a collective on a rank only when all its ranks do).

// One communicator per GPU of this process: rank i runs on devices[i], after streams[i]. A rank
// that fails (abort()) stops the others' waits at their next poll, not at the deadline.
std::vector<std::unique_ptr<Communicator>> make_nccl_group(const std::vector<int>& devices,
                                                           const std::vector<cudaStream_t>& streams,
                                                           double timeout_s = 120);

// One rank per process, on `device` after `stream`, with the rank and size of `bootstrap`
// (usually make_mpi_comm()): rank 0 makes NCCL's unique id and broadcasts it over `bootstrap`.
// Every process must pass a different GPU (NCCL refuses two ranks on one device).
std::unique_ptr<Communicator> make_nccl_comm_mpi(Communicator& bootstrap, int device, cudaStream_t stream,
                                                 double timeout_s = 120);

// The link NCCL gives the ranks of `bootstrap`, each on its `device`: all-reduces of a device
// buffer from 4 KiB to `max_bytes`, swept and fitted as measure_link (predict.hpp) does. A
// collective.
struct Link;
Link measure_nccl_link(Communicator& bootstrap, int device, std::size_t max_bytes);

}  // namespace tb::parallel
