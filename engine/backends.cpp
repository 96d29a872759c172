// Where the backends a build has are registered (backends.hpp): the CPU backend always, the CUDA
// backend where CMake found the toolkit, cuDNN and NCCL (TB_HAVE_CUDA).
#include "engine/backends.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "engine/cpu/isa.hpp"
#include "engine/cpu/network.hpp"
#include "engine/cpu/peak.hpp"
#include "engine/cuda/plan.hpp"

#ifdef TB_HAVE_CUDA
#include "engine/cuda/device.hpp"
#include "engine/cuda/network.hpp"
#endif
#ifdef TB_HAVE_MPI
#include "engine/parallel/mpi_comm.hpp"
#endif

namespace tb {

namespace {
[[noreturn, maybe_unused]] void no_cuda() {
  throw Error("this build of trainbench has no CUDA backend (the CUDA toolkit, cuDNN or NCCL was not found by CMake)");
}
}  // namespace

MemoryPlanBytes memory_plan(Backend backend, const ModelSpec& spec, i64 batch, const std::string& precision,
                            bool adam) {
  if (backend == Backend::Cpu) {
    const double state = adam ? 4 : 3;  // weights, gradients, and one or two moments
    // One arena per lane (cpu/network.hpp), each planned for its slice of the batch.
    const int lanes = cpu_network_lanes(spec, batch, omp_get_max_threads());
    return MemoryPlanBytes{cpu::plan_network_memory(spec, batch / lanes).arena_bytes * std::size_t(lanes),
                           std::size_t(double(model_cost(spec).parameters) * 4 * state) +
                               std::size_t(product(infer_shapes(spec, batch)[0])) * 4,
                           0};
  }
  const cuda::Precision p = cuda::parse_precision(precision);
  const cuda::FixedBytes f = cuda::fixed_bytes(spec, batch, p, adam);
  return MemoryPlanBytes{cuda::plan_network_memory(spec, batch, p).arena_bytes,
                         f.weights + f.gradients + f.optimizer_state + f.data,
                         cuda::kDefaultWorkspaceCap + cuda::kCublasWorkspaceBytes};
}

i64 gpu_batch_that_fits(const ModelSpec& spec, i64 preferred, const std::string& precision, bool adam,
                        std::size_t available) {
  i64 batch = 1;
  while (batch * 2 <= preferred) batch *= 2;
  while (batch > 1 && memory_plan(Backend::Cuda, spec, batch, precision, adam).total() > available) batch /= 2;
  return batch;
}

#ifdef TB_HAVE_CUDA

namespace {
const cuda::DeviceInfo& device(int ordinal) {
  const auto& devices = cuda::gpu_inventory().devices;
  TB_CHECK(ordinal >= 0 && ordinal < int(devices.size()), "no CUDA device {}", ordinal);
  return devices[std::size_t(ordinal)];
}

}  // namespace

const GpuInventory& gpu_inventory() {
  static const GpuInventory inventory = [] {
    GpuInventory out;
    const cuda::GpuInventory& in = cuda::gpu_inventory();
    out.unavailable = in.unavailable;
    for (const cuda::DeviceInfo& d : in.devices)
      out.devices.push_back(GpuDevice{.ordinal = d.index,
                                      .name = d.name,
                                      .cc = fmt::format("{}.{}", d.cc_major, d.cc_minor),
                                      .pci_bus_id = d.pci_bus_id,
                                      .sms = d.sms,
                                      .memory_gib = double(d.memory_bytes) / double(1 << 30),
                                      .clock_mhz = d.clock_mhz,
                                      .memory_clock_mhz = d.memory_clock_mhz,
                                      .cuda_driver = d.cuda_driver,
                                      .cuda = d.cuda_runtime,
                                      .cudnn = d.cudnn,
                                      .cublas = d.cublas,
                                      .nccl = d.nccl});
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

void gpu_prepare(int ordinal, double limit) {
  const double device_bytes = double(device(ordinal).memory_bytes);
  cuda::Allocator& a = cuda::device_allocator(ordinal);
  a.empty_cache();
  a.set_limit(limit <= 0 ? 0 : limit <= 1 ? std::size_t(limit * device_bytes) : std::size_t(limit));
  a.reset_peak();
}

void gpu_empty_cache(int ordinal) { cuda::device_allocator(ordinal).empty_cache(); }

void gpu_bind_thread(int ordinal) { TB_CU(cudaSetDevice(ordinal)); }

std::size_t gpu_free_bytes(int ordinal) { return device(ordinal).memory_bytes - cuda::device_memory_used(ordinal); }

namespace {
std::unique_ptr<Network> make_cuda_network(const ModelSpec& model, const NetworkOptions& o) {
  auto network = std::make_unique<cuda::CudaNetwork>(model, o);
  // The convolution plans' timing scratch is not the model's memory: drop it from the cache and
  // start the high-water mark at what the network holds.
  cuda::Allocator& a = cuda::device_allocator(o.device);
  a.empty_cache();
  a.reset_peak();
  return network;
}

}  // namespace

#else  // no CUDA backend in this build

const GpuInventory& gpu_inventory() {
  static const GpuInventory inventory{
      {}, "this build of trainbench has no CUDA backend (the CUDA toolkit, cuDNN or NCCL was not found by CMake)"};
  return inventory;
}
std::string gpu_precision_unsupported(int, const std::string&) { no_cuda(); }
GpuPeak gpu_peak(int, const std::string&) { no_cuda(); }
void gpu_prepare(int, double) { no_cuda(); }
void gpu_empty_cache(int) { no_cuda(); }
void gpu_bind_thread(int) { no_cuda(); }
std::size_t gpu_free_bytes(int) { no_cuda(); }

#endif

double cpu_peak_gflops(int threads) { return cpu::measure_sgemm(threads).gflops; }
double cpu_peak_spread(int threads) { return cpu::measure_sgemm(threads).spread; }
std::string cpu_library_version() { return cpu::onednn_version(); }
std::string cpu_library_isa() { return cpu::onednn_isa(); }
std::string own_cpu_isa() { return cpu::isa_name(cpu::active_isa()); }
std::vector<std::string> own_cpu_isas() {
  std::vector<std::string> out;
  for (cpu::Isa isa : cpu::runnable_isas()) out.push_back(cpu::isa_name(isa));
  return out;
}

namespace {
// TB_CPU_LANES as NetworkOptions::lanes: 0 where it is not set.
int lanes_asked() {
  const char* text = std::getenv("TB_CPU_LANES");
  if (!text || !*text) return 0;
  char* end = nullptr;
  const long lanes = std::strtol(text, &end, 10);
  if (*end != '\0' || lanes < 1 || lanes > 1024)
    throw InputError(
        fmt::format("TB_CPU_LANES='{}': give a whole number of lanes from 1 to 1024 (1: the whole batch "
                    "through one network), or unset it to let trainbench choose",
                    text));
  return int(lanes);
}
}  // namespace

int cpu_network_lanes(const ModelSpec& model, i64 batch, int threads) {
  return cpu::cpu_lanes(model, batch, threads, lanes_asked());
}

std::unique_ptr<Network> make_network(Backend backend, const ModelSpec& model, const NetworkOptions& o) {
  if (backend == Backend::Cpu) {
    NetworkOptions options = o;
    if (options.lanes == 0) options.lanes = lanes_asked();
    return std::make_unique<cpu::CpuNetwork>(model, options);
  }
#ifdef TB_HAVE_CUDA
  return make_cuda_network(model, o);
#else
  no_cuda();
#endif
}

}  // namespace tb
