// The benchmarks' one door to the CUDA backend: the GPUs (context for every row), what a device
// can run, networks on a GPU, and the GPU columns of a row. In a build without the backend
// (no CUDA toolkit, cuDNN or NCCL found) every GPU configuration is skipped with that reason.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/dataset.hpp"
#include "engine/core/network.hpp"
#include "engine/core/spec.hpp"
#include "engine/parallel/communicator.hpp"

namespace tb::bench {

struct GpuDevice {
  int ordinal = 0;
  std::string name, cc;  // cc: "9.0"
  int sms = 0;
  double memory_gib = 0;
  int clock_mhz = 0, memory_clock_mhz = 0;
  std::string driver, cuda, cudnn, cublas, nccl;  // versions
};

struct GpuInventory {
  std::vector<GpuDevice> devices;
  std::string unavailable;  // non-empty: why no GPU configuration can run
};
const GpuInventory& gpu_inventory();

// Empty if the device runs this precision, else the reason (compute capability).
std::string gpu_precision_unsupported(int ordinal, const std::string& precision);

struct GpuPeak {
  double gflops = 0;
  std::string source;  // the datasheet, or how it was derived
};
GpuPeak gpu_peak(int ordinal, const std::string& precision);

struct GpuOptions {
  int ordinal = 0;
  std::string precision = "fp32";
  bool cuda_graph = false;
  double memory_limit = 0;  // bytes (> 1), fraction of the device (<= 1), 0: none
  std::string layout = "auto";  // auto, nchw, nhwc
};

// The device memory a network of `spec` at `batch` is planned to take (engine/cuda/plan.hpp: the
// arena of values and gradients, weights, gradients, optimizer state, the batch's buffers), plus
// the cuDNN workspace cap and cuBLAS's workspace. Needs no GPU.
struct GpuPlan {
  std::size_t arena = 0, fixed = 0, workspace = 0;
  std::size_t total() const { return arena + fixed + workspace; }
};
GpuPlan gpu_memory_plan(const ModelSpec& spec, i64 batch, const std::string& precision, bool adam);
// The largest power of two up to `preferred` whose planned memory fits `available` bytes (at
// least 1).
i64 gpu_batch_that_fits(const ModelSpec& spec, i64 preferred, const std::string& precision, bool adam,
                        std::size_t available);

// Empties the device's allocator cache, applies the cap and starts a new high-water mark.
void gpu_prepare(const GpuOptions& options);
std::unique_ptr<Network> make_gpu_network(const ModelSpec& spec, i64 batch, const OptimizerConfig& optimizer,
                                          std::uint64_t seed, const GpuOptions& options);
// Moves up to one epoch of `data` (at most `max_bytes`) onto the network's device; returns the
// number of batches kept there.
i64 gpu_make_resident(Network& network, Dataset& data, std::size_t max_bytes);
// The mem_* columns, the loss scale and skipped steps of a network made by make_gpu_network.
std::map<std::string, double> gpu_counters(const Network& network, const GpuOptions& options);

// Makes `ordinal` the calling thread's current CUDA device (each replica thread calls it once).
void gpu_bind_thread(int ordinal);
// NCCL communicators over networks made by make_gpu_network, one per network (GPU) of this
// process, each ordered on its network's stream.
std::vector<std::unique_ptr<parallel::Communicator>> gpu_nccl_group(const std::vector<Network*>& networks);
// One NCCL rank per process, bootstrapped through `mpi` (which shares NCCL's unique id).
std::unique_ptr<parallel::Communicator> gpu_nccl_over_mpi(parallel::Communicator& mpi, Network& network);

}  // namespace tb::bench
