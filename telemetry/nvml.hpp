// GPU readings from NVML, the library behind nvidia-smi, opened at run time with dlopen so that
// the suite builds without the CUDA toolkit and runs without the NVIDIA driver (GPU rows then
// simply have no NVML columns). One Nvml owns the library: nvmlInit_v2 on load, nvmlShutdown after.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace tb::telemetry {

// One sample of one GPU, as nvidia-smi would show it. A field NVML could not give (unsupported
// on this GPU, no permission, absent from this driver) stays empty: never zero, never a guess.
struct Reading {
  std::optional<unsigned> util_percent;         // time a kernel ran over NVML's last window
  std::optional<std::uint64_t> mem_used_bytes;  // the process's memory, or the device's (below)
  // True when mem_used_bytes is the memory of the sampled pid; false when the pid is not in
  // NVML's process list (another PID namespace: a container) and it is the device-wide used memory.
  bool mem_is_process = false;
  std::optional<unsigned> sm_clock_mhz;
  std::optional<double> power_w;
  // True when power_w is the board's power at the reading (NVML_FI_DEV_POWER_INSTANT); false
  // when the driver lacks that field and power_w is nvmlDeviceGetPowerUsage's, which Ampere and
  // newer GPUs average over the last second.
  bool power_instant = false;
  std::optional<std::uint64_t> energy_mj;  // the board's counter since the driver loaded
  std::optional<unsigned> temp_c;
  std::optional<std::uint64_t> clock_reasons;  // nvmlClocksEventReason* bits (throttle_reason_names)
};

// NVML's opaque device handle (nvmlDevice_t); valid while its Nvml lives.
struct NvmlDevice;
using Device = NvmlDevice*;

class Nvml {
 public:
  // Opens `library`, resolves the symbols every reading needs and calls nvmlInit_v2. Returns null
  // and puts a one-line reason naming the library in *why when any of that fails. Symbols of newer
  // drivers (energy counter, process list v3/v2, clock-event reasons) may be absent: those
  // readings are then empty.
  static std::unique_ptr<Nvml> load(std::string* why, const std::string& library = "libnvidia-ml.so.1");
  ~Nvml();  // nvmlShutdown, dlclose
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  // The driver's version, e.g. "580.159.04"; empty if NVML cannot say.
  std::string driver_version() const;
  // GPUs NVML sees: all of the machine's, whatever CUDA_VISIBLE_DEVICES says.
  unsigned device_count() const;
  // The GPU at `pci_bus_id` as cudaDeviceGetPCIBusId writes it ("0000:65:00.0"): the one way to
  // match a CUDA device to an NVML one, since their orders differ. Throws tb::BackendError naming
  // the bus id if NVML does not know it.
  Device device_by_pci_bus_id(const std::string& pci_bus_id) const;
  // The GPU at NVML's index (PCI order). Throws tb::BackendError if there is none.
  Device device_by_index(unsigned index) const;

  // One sample of `device`, with memory counted for process `pid`. Never throws for a failed
  // NVML call: that field stays empty.
  Reading read(Device device, unsigned pid) const;

 private:
  struct Api;
  explicit Nvml(std::unique_ptr<Api> api);
  std::optional<std::uint64_t> process_memory(Device device, unsigned pid) const;
  std::optional<double> instant_power_mw(Device device) const;  // empty where the driver lacks the field

  std::unique_ptr<Api> api_;
};

}  // namespace tb::telemetry
