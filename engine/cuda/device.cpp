// GPU inventory, precision support by compute capability, and the table of peak rates.
#include "engine/cuda/device.hpp"

#include <nccl.h>

#include <array>
#include <string_view>

namespace tb::cuda {

namespace {

std::string version(int v, int major_div, int minor_div) {
  return fmt::format("{}.{}", v / major_div, (v % major_div) / minor_div);
}

DeviceInfo describe_device(int index) {
  DeviceInfo d;
  d.index = index;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return d;
  d.name = prop.name;
  d.cc_major = prop.major;
  d.cc_minor = prop.minor;
  d.sms = prop.multiProcessorCount;
  d.memory_bytes = prop.totalGlobalMem;
  int khz = 0;
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, index) == cudaSuccess) d.clock_mhz = khz / 1000;
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, index) == cudaSuccess) d.memory_clock_mhz = khz / 1000;
  char bus_id[32] = {};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id - 1, index) == cudaSuccess) d.pci_bus_id = bus_id;
  int v = 0;
  if (cudaDriverGetVersion(&v) == cudaSuccess) d.cuda_driver = version(v, 1000, 10);
  if (cudaRuntimeGetVersion(&v) == cudaSuccess) d.cuda_runtime = version(v, 1000, 10);
  const std::size_t cudnn = cudnnGetVersion();  // major*10000 + minor*100 + patch in cuDNN 9
  d.cudnn = fmt::format("{}.{}.{}", cudnn / 10000, (cudnn % 10000) / 100, cudnn % 100);
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS)
    d.cublas = fmt::format("{}.{}.{}", major, minor, patch);
  if (ncclGetVersion(&v) == ncclSuccess) d.nccl = fmt::format("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100);
  return d;
}

GpuInventory query() {
  GpuInventory inv;
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    inv.unavailable = status == cudaErrorInsufficientDriver
                          ? "no usable NVIDIA driver (cudaErrorInsufficientDriver: no driver, or one older than "
                            "this build's CUDA runtime)"
                      : status == cudaErrorNoDevice ? "no CUDA device (cudaErrorNoDevice)"
                                                    : fmt::format("CUDA cannot list devices: {} ({})",
                                                                  cudaGetErrorName(status), cudaGetErrorString(status));
    (void)cudaGetLastError();
    return inv;
  }
  if (count == 0) {
    inv.unavailable = "no CUDA device visible (check CUDA_VISIBLE_DEVICES)";
    return inv;
  }
  for (int i = 0; i < count; ++i) inv.devices.push_back(describe_device(i));
  return inv;
}

// Dense (no structured sparsity) peak TFLOP/s from NVIDIA's datasheets; tensor-core figures
// are with fp32 accumulation. 0: the chip has no such mode. Matched in order by substring of
// the device name as a whole word ("L4" is not "L40"), the more specific names first.
struct PeakEntry {
  const char* name;
  double fp32, tf32, fp16, bf16;
  const char* source;
};
constexpr std::array<PeakEntry, 15> kPeaks{{
    {"H800 PCIe", 51, 378, 756, 756, "NVIDIA H800 PCIe datasheet (sparse figures halved)"},
    {"H200 NVL", 60, 417.5, 835.5, 835.5, "NVIDIA H200 Tensor Core GPU datasheet (NVL; sparse figures halved)"},
    {"H100 PCIe", 51.2, 378, 756, 756, "NVIDIA H100 Tensor Core GPU datasheet (PCIe; sparse figures halved)"},
    {"H100 NVL", 60, 417.5, 835.5, 835.5, "NVIDIA H100 Tensor Core GPU datasheet (NVL; sparse figures halved)"},
    {"H100", 67, 494.7, 989.4, 989.4, "NVIDIA H100 Tensor Core GPU datasheet (SXM; sparse figures halved)"},
    {"H200", 67, 494.7, 989.4, 989.4, "NVIDIA H200 Tensor Core GPU datasheet (SXM; sparse figures halved)"},
    {"H800", 67, 494.7, 989.4, 989.4, "NVIDIA H800 datasheet (SXM; sparse figures halved)"},
    {"A100", 19.5, 156, 312, 312, "NVIDIA A100 Tensor Core GPU datasheet"},
    {"A10", 31.2, 62.5, 125, 125, "NVIDIA A10 Tensor Core GPU datasheet"},
    {"L40S", 91.6, 183, 362, 362, "NVIDIA L40S datasheet (sparse figures halved)"},
    {"L4", 30.3, 60, 121, 121, "NVIDIA L4 Tensor Core GPU datasheet (sparse figures halved)"},
    {"RTX 4090", 82.6, 82.6, 165.2, 165.2, "NVIDIA Ada Lovelace architecture whitepaper (GeForce RTX 4090)"},
    {"V100", 15.7, 0, 125, 0, "NVIDIA Tesla V100 datasheet (SXM2)"},
    {"T4", 8.1, 0, 65, 0, "NVIDIA T4 Tensor Core GPU datasheet"},
    {"A30", 10.3, 82, 165, 165, "NVIDIA A30 Tensor Core GPU datasheet"},
}};

// FP32 lanes per SM by architecture, for GPUs not in the table.
int fp32_lanes_per_sm(int major, int minor) {
  if (major == 8 && minor == 0) return 64;
  if (major >= 8) return 128;
  return 64;
}

}  // namespace

const GpuInventory& gpu_inventory() {
  static const GpuInventory inventory = query();
  return inventory;
}

std::string precision_unsupported(const DeviceInfo& d, Precision p) {
  const int cc = d.cc_major * 10 + d.cc_minor;
  const std::string where = fmt::format("{} (compute capability {}.{})", d.name, d.cc_major, d.cc_minor);
  switch (p) {
    case Precision::FP32:
      return {};
    case Precision::TF32:
      return cc >= 80 ? std::string{}
                      : fmt::format("{} has no TF32 tensor cores (needs compute capability 8.0)", where);
    case Precision::FP16:
      return cc >= 70 ? std::string{}
                      : fmt::format("{} has no FP16 tensor cores (needs compute capability 7.0)", where);
    case Precision::BF16:
      return cc >= 80 ? std::string{} : fmt::format("{} has no BF16 support (needs compute capability 8.0)", where);
  }
  return "unknown precision";
}

PeakRate peak_rate(const DeviceInfo& d, Precision p) {
  for (const PeakEntry& e : kPeaks) {
    const std::size_t at = d.name.find(e.name);
    if (at == std::string::npos) continue;
    const std::size_t end = at + std::string_view(e.name).size();
    if (end < d.name.size() && d.name[end] != ' ' && d.name[end] != '-') continue;
    if (at > 0 && d.name[at - 1] != ' ' && d.name[at - 1] != '-') continue;  // "GH200" is not "H200"
    const double t = p == Precision::FP32   ? e.fp32
                     : p == Precision::TF32 ? e.tf32
                     : p == Precision::FP16 ? e.fp16
                                            : e.bf16;
    if (t > 0) return {t, e.source};
  }
  // Not in the table: the fp32 FMA rate from the SM count and the maximum clock. Tensor-core
  // precisions are then measured against the fp32 rate, and the source says so.
  const double fp32 = 2.0 * d.sms * fp32_lanes_per_sm(d.cc_major, d.cc_minor) * d.clock_mhz * 1e-6;
  return {fp32, fmt::format("derived: {} SMs x {} fp32 lanes x 2 x {} MHz (GPU not in the table{})", d.sms,
                            fp32_lanes_per_sm(d.cc_major, d.cc_minor), d.clock_mhz,
                            p == Precision::FP32 ? "" : "; fp32 rate used for this precision")};
}

std::size_t device_memory_used(int device) {
  int current = 0;
  if (cudaGetDevice(&current) != cudaSuccess) return 0;
  if (current != device && cudaSetDevice(device) != cudaSuccess) return 0;
  std::size_t free_bytes = 0, total = 0;
  const bool ok = cudaMemGetInfo(&free_bytes, &total) == cudaSuccess;
  if (current != device) cudaSetDevice(current);
  return ok ? total - free_bytes : 0;
}

}  // namespace tb::cuda
