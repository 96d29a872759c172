// The CUDA side of the benchmarks (bench/gpu.hpp), or its absence.
#include "bench/gpu.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "engine/cuda/plan.hpp"

#ifdef TB_HAVE_CUDA
#include "engine/cuda/device.hpp"
#include "engine/cuda/network.hpp"
#include "engine/parallel/nccl_comm.hpp"
#endif

namespace tb::bench {

GpuPlan gpu_memory_plan(const ModelSpec& spec, i64 batch, const std::string& precision, bool adam) {
  const cuda::Precision p = cuda::parse_precision(precision);
  const cuda::FixedBytes f = cuda::fixed_bytes(spec, batch, p, adam);
  constexpr std::size_t kWorkspaces = (std::size_t(256) + 32) << 20;  // cuDNN's cap, cuBLAS's
  return GpuPlan{cuda::plan_network_memory(spec, batch, p).arena_bytes,
                 f.weights + f.gradients + f.optimizer_state + f.data, kWorkspaces};
}

i64 gpu_batch_that_fits(const ModelSpec& spec, i64 preferred, const std::string& precision, bool adam,
                        std::size_t available) {
  i64 batch = 1;
  while (batch * 2 <= preferred) batch *= 2;
  while (batch > 1 && gpu_memory_plan(spec, batch, precision, adam).total() > available) batch /= 2;
  return batch;
}

#ifdef TB_HAVE_CUDA

namespace {
const cuda::DeviceInfo& device(int ordinal) {
  const auto& devices = cuda::gpu_inventory().devices;
  TB_CHECK(ordinal >= 0 && ordinal < int(devices.size()), "no CUDA device {}", ordinal);
  return devices[std::size_t(ordinal)];
}

std::size_t limit_bytes(const GpuOptions& o) {
  if (o.memory_limit <= 0) return 0;
  if (o.memory_limit <= 1) return std::size_t(o.memory_limit * double(device(o.ordinal).memory_bytes));
  return std::size_t(o.memory_limit);
}
}  // namespace

const GpuInventory& gpu_inventory() {
  static const GpuInventory inventory = [] {
    GpuInventory out;
    const cuda::GpuInventory& in = cuda::gpu_inventory();
    out.unavailable = in.unavailable;
    for (const cuda::DeviceInfo& d : in.devices)
      out.devices.push_back(GpuDevice{d.index, d.name, fmt::format("{}.{}", d.cc_major, d.cc_minor), d.sms,
                                      double(d.memory_bytes) / double(1 << 30), d.clock_mhz, d.memory_clock_mhz,
                                      d.driver, d.cuda_runtime, d.cudnn, d.cublas, d.nccl});
    return out;
  }();
  return inventory;
}

std::string gpu_precision_unsupported(int ordinal, const std::string& precision) {
  return cuda::precision_unsupported(device(ordinal), cuda::parse_precision(precision));
}

GpuPeak gpu_peak(int ordinal, const std::string& precision) {
  const cuda::PeakRate p = cuda::peak_rate(device(ordinal), cuda::parse_precision(precision));
  return GpuPeak{p.tflops * 1e3, p.source};
}

void gpu_prepare(const GpuOptions& options) {
  cuda::Allocator& a = cuda::device_allocator(options.ordinal);
  a.empty_cache();
  a.set_limit(limit_bytes(options));
  a.reset_peak();
}

std::unique_ptr<Network> make_gpu_network(const ModelSpec& spec, i64 batch, const OptimizerConfig& optimizer,
                                          std::uint64_t seed, const GpuOptions& options) {
  auto network = std::make_unique<cuda::CudaNetwork>(
      spec, cuda::NetworkConfig{.batch = batch,
                                .optimizer = optimizer,
                                .seed = seed,
                                .device = options.ordinal,
                                .precision = cuda::parse_precision(options.precision),
                                .cuda_graph = options.cuda_graph,
                                .layout = options.layout == "nhwc"   ? std::optional(cuda::Layout::NHWC)
                                          : options.layout == "nchw" ? std::optional(cuda::Layout::NCHW)
                                                                     : std::nullopt});
  // The convolution algorithm search's scratch is not the model's memory: drop it from the
  // cache and start the high-water mark at what the network holds.
  cuda::Allocator& a = cuda::device_allocator(options.ordinal);
  a.empty_cache();
  a.reset_peak();
  return network;
}

i64 gpu_make_resident(Network& network, Dataset& data, std::size_t max_bytes) {
  auto& net = dynamic_cast<cuda::CudaNetwork&>(network);
  const std::size_t batch_bytes = std::size_t(net.batch_input_bytes());
  i64 batches = data.steps_per_epoch() > 0 ? data.steps_per_epoch() : i64(max_bytes / batch_bytes);
  batches = std::max<i64>(1, std::min<i64>(batches, i64(max_bytes / batch_bytes)));
  net.make_resident(data, batches);
  return batches;
}

std::map<std::string, double> gpu_counters(const Network& network, const GpuOptions& options) {
  const auto& net = dynamic_cast<const cuda::CudaNetwork&>(network);
  const cuda::MemoryBreakdown m = net.memory();
  const cuda::MemoryStats s = cuda::device_allocator(options.ordinal).stats();
  const std::size_t used = cuda::device_memory_used(options.ordinal);
  return {{"mem_peak_bytes", double(s.peak_in_use)},
          {"mem_reserved_bytes", double(s.peak_reserved)},
          {"mem_limit_bytes", double(limit_bytes(options))},
          {"mem_weights_bytes", double(m.weights)},
          {"mem_grads_bytes", double(m.gradients)},
          {"mem_optimizer_bytes", double(m.optimizer_state)},
          {"mem_activations_bytes", double(m.activations)},
          {"mem_workspace_bytes", double(m.workspace)},
          {"mem_data_bytes", double(m.data)},
          // What the device has in use beyond what this allocator holds: the CUDA context, the
          // cuDNN/cuBLAS handles and their kernels, and anything else on the device.
          {"mem_context_bytes", used > s.reserved ? double(used - s.reserved) : 0.0},
          {"loss_scale", double(net.loss_scale())},
          {"skipped_steps", double(net.skipped_steps())}};
}

void gpu_bind_thread(int ordinal) { TB_CU(cudaSetDevice(ordinal)); }

std::vector<std::unique_ptr<parallel::Communicator>> gpu_nccl_group(const std::vector<Network*>& networks) {
  std::vector<int> devices;
  std::vector<cudaStream_t> streams;
  for (Network* n : networks) {
    const auto& ctx = dynamic_cast<cuda::CudaNetwork&>(*n).context();
    devices.push_back(ctx.device);
    streams.push_back(ctx.stream);
  }
  return parallel::make_nccl_group(devices, streams);
}

std::unique_ptr<parallel::Communicator> gpu_nccl_over_mpi(parallel::Communicator& mpi, Network& network) {
  const auto& ctx = dynamic_cast<cuda::CudaNetwork&>(network).context();
  return parallel::make_nccl_comm_mpi(mpi, ctx.device, ctx.stream);
}

#else  // no CUDA backend in this build

namespace {
[[noreturn]] void no_backend() { throw Error("this build of trainbench has no CUDA backend"); }
}  // namespace

const GpuInventory& gpu_inventory() {
  static const GpuInventory inventory{
      {}, "this build of trainbench has no CUDA backend (the CUDA toolkit, cuDNN or NCCL was not found by CMake)"};
  return inventory;
}
std::string gpu_precision_unsupported(int, const std::string&) { no_backend(); }
GpuPeak gpu_peak(int, const std::string&) { no_backend(); }
void gpu_prepare(const GpuOptions&) { no_backend(); }
std::unique_ptr<Network> make_gpu_network(const ModelSpec&, i64, const OptimizerConfig&, std::uint64_t,
                                          const GpuOptions&) {
  no_backend();
}
i64 gpu_make_resident(Network&, Dataset&, std::size_t) { no_backend(); }
std::map<std::string, double> gpu_counters(const Network&, const GpuOptions&) { no_backend(); }
void gpu_bind_thread(int) { no_backend(); }
std::vector<std::unique_ptr<parallel::Communicator>> gpu_nccl_group(const std::vector<Network*>&) { no_backend(); }
std::unique_ptr<parallel::Communicator> gpu_nccl_over_mpi(parallel::Communicator&, Network&) { no_backend(); }

#endif

}  // namespace tb::bench
