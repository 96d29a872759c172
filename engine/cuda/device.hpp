// The GPUs of this machine as trainbench sees them: what each is, which precisions it runs, its
// peak rate per precision (for the utilisation column), and why none can be used when so.
// Nothing here throws: a machine without a driver or a device is a normal case.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "engine/cuda/context.hpp"

namespace tb::cuda {

struct DeviceInfo {
  int index = 0;  // CUDA device ordinal (after CUDA_VISIBLE_DEVICES)
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sms = 0;
  std::size_t memory_bytes = 0;
  int clock_mhz = 0, memory_clock_mhz = 0;                     // maximum clocks
  std::string pci_bus_id;                                      // "0000:65:00.0" (cudaDeviceGetPCIBusId)
  std::string cuda_driver, cuda_runtime, cudnn, cublas, nccl;  // versions, "13.0" style
};

struct GpuInventory {
  std::vector<DeviceInfo> devices;
  std::string unavailable;  // non-empty: why no GPU can be used (no driver, no device, ...)
};
// Queried once per process.
const GpuInventory& gpu_inventory();

// Empty if the device can train in this precision, else why not (by compute capability).
std::string precision_unsupported(const DeviceInfo& device, Precision precision);

// Dense peak of the device for a precision, from the table in device.cpp (vendor datasheets,
// cited there and in results/SCHEMA.md), or derived from SMs x clock where the GPU is not in
// the table; `source` says which.
struct PeakRate {
  double tflops = 0;
  std::string source;
};
PeakRate peak_rate(const DeviceInfo& device, Precision precision);

// Device memory in use by anyone on the device (cudaMemGetInfo: total - free).
std::size_t device_memory_used(int device);

}  // namespace tb::cuda
