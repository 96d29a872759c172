// Replicas sharing one GPU (--gpus=0,0): gpu:N's N replicas, each with its own thread, stream,
// network and sample order, exactly as on N devices, except that the all-reduce is a kernel over
// the replicas' device buffers of this process, since NCCL refuses two ranks on one device.
// It checks the data-parallel path's correctness (buckets, overlap, ordering, averaging) on a
// machine with one GPU; it says nothing about scaling.
#pragma once

#include <memory>
#include <vector>

#include <cuda_runtime.h>

#include "engine/parallel/communicator.hpp"

namespace tb::parallel {

// One communicator per replica: rank i's reductions are ordered after the work on streams[i]
// (a CUDA event per bucket); once every rank has started a bucket, one kernel on a stream of
// the group averages the N buffers in place, and each rank's wait() blocks until its buckets
// are averaged, then orders its stream after them (wait_on_device() blocks only until every
// replica has enqueued them, and the step's end is polled once). Host values (max, min, barrier) go through
// the in-process thread group. Calls of one communicator come from one thread; the
// communicators of a group from different threads.
std::vector<std::unique_ptr<Communicator>> make_shared_device_group(int device,
                                                                    const std::vector<cudaStream_t>& streams,
                                                                    double timeout_s = 120);

}  // namespace tb::parallel
