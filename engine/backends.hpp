// The one door from a harness to the engines: a network made for a backend, and the GPUs of
// this machine. The backends a build has are registered in engine/backends.cpp, the one place
// outside CMake that knows them. A harness (bench/) includes this header, engine/core,
// engine/train (the trainer and its epochs) and engine/parallel (communicators, replicas, their
// runs and replays, the probe, the timeline and the prediction model), never engine/cpu or
// engine/cuda.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/network.hpp"
#include "engine/core/spec.hpp"

namespace tb {

enum class Backend { Cpu, Cuda };

// A network of `model` planned for `options.batch` on `backend`. Throws tb::Error where this
// build lacks the backend. A GPU network's planning scratch (the convolution plans' timing
// buffers) is returned to the device and its high-water mark starts at what the network holds.
std::unique_ptr<Network> make_network(Backend backend, const ModelSpec& model, const NetworkOptions& options);

// ---- the CPU ----

// The fp32 GEMM rate of this machine with `threads` OpenMP threads, measured with the CPU
// backend's library (oneDNN's sgemm on 1024^3 products: the median of five rounds of about 0.2 s,
// outlying rounds measured again; cpu/peak.hpp); cached per thread count.
double cpu_peak_gflops(int threads);
// (max - min) / median of the rounds behind cpu_peak_gflops(threads).
double cpu_peak_spread(int threads);
// The version of the CPU backend's library, oneDNN ("2.6.3"), and the instruction set its kernels
// run here ("avx512_core"; ONEDNN_MAX_CPU_ISA caps it).
std::string cpu_library_version();
std::string cpu_library_isa();
// The instruction set of trainbench's own CPU kernels ("avx512", "avx2", "sse2": the machine's
// best, TB_MAX_CPU_ISA caps it; engine/cpu/isa.hpp). Throws tb::InputError for a bad
// TB_MAX_CPU_ISA.
std::string own_cpu_isa();
// Every instruction set of trainbench's own CPU kernels this machine runs, ascending.
std::vector<std::string> own_cpu_isas();
// The lanes a CPU network of `model` at `batch` runs on with `threads` OpenMP threads
// (engine/cpu/network.hpp: slices of the batch, each through the network on a thread of its own):
// as TB_CPU_LANES asks where it is set (1: none, for A/B runs of one build), else the network's
// choice. Throws tb::InputError for a bad TB_CPU_LANES.
int cpu_network_lanes(const ModelSpec& model, i64 batch, int threads);

// ---- GPUs (CUDA devices, after CUDA_VISIBLE_DEVICES) ----

struct GpuDevice {
  int ordinal = 0;
  std::string name{}, cc{};  // cc: "9.0"
  std::string pci_bus_id{};  // "0000:65:00.0", as NVML finds the device
  int sms = 0;
  double memory_gib = 0;
  int clock_mhz = 0, memory_clock_mhz = 0;
  std::string cuda_driver{}, cuda{}, cudnn{}, cublas{}, nccl{};  // versions (cuda_driver: the driver API's, "13.0")
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

// Device memory no one holds on the device now (cudaMemGetInfo's free bytes).
std::size_t gpu_free_bytes(int ordinal);
// Empties the device's allocator cache, caps it at `limit` (bytes above 1, a fraction of the
// device's memory up to 1, 0: no cap) and starts a new high-water mark.
void gpu_prepare(int ordinal, double limit);
// Gives the allocator's cached blocks on `ordinal` back to the device, and nothing else: no CUDA
// call where it holds none (a process that never used the GPU stays without a context).
void gpu_empty_cache(int ordinal);
// Makes `ordinal` the calling thread's current device (each replica thread calls it once).
void gpu_bind_thread(int ordinal);

// The memory a network of `spec` at `batch` is planned to take on `backend`, before it is built:
// the arena of values and gradients (engine/core/planner.hpp: exactly what the network
// allocates), the fixed part (weights, gradients, optimizer state, the batch's buffers) and on a
// GPU the cuDNN workspace cap and cuBLAS's workspace. Needs no GPU.
struct MemoryPlanBytes {
  std::size_t arena = 0, fixed = 0, workspace = 0;
  std::size_t total() const { return arena + fixed + workspace; }
};
MemoryPlanBytes memory_plan(Backend backend, const ModelSpec& spec, i64 batch, const std::string& precision, bool adam);
// The largest power of two up to `preferred` whose planned GPU memory fits `available` bytes (at
// least 1).
i64 gpu_batch_that_fits(const ModelSpec& spec, i64 preferred, const std::string& precision, bool adam,
                        std::size_t available);

}  // namespace tb
