// NVML opened with dlopen. The few types, constants and signatures used here are declared in this
// file as ABI facts, checked against NVIDIA's NVML API reference (docs.nvidia.com/deploy/nvml-api),
// so that building needs no nvml.h (CUDA toolkit) and linking no libnvidia-ml (driver).
#include "telemetry/nvml.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "engine/core/error.hpp"

namespace tb::telemetry {
namespace {

// nvmlReturn_t: a C enum, an int in the ABI.
using NvmlReturn = int;
constexpr NvmlReturn kSuccess = 0;           // NVML_SUCCESS
constexpr NvmlReturn kInsufficientSize = 7;  // NVML_ERROR_INSUFFICIENT_SIZE
// Every other status (NVML_ERROR_NOT_SUPPORTED = 3, NO_PERMISSION = 4, GPU_IS_LOST = 15, ...)
// means the same to a reading: the field is not available.

constexpr int kClockSm = 1;         // nvmlClockType_t NVML_CLOCK_SM
constexpr int kTemperatureGpu = 0;  // nvmlTemperatureSensors_t NVML_TEMPERATURE_GPU
// NVML_VALUE_NOT_AVAILABLE, (-1) in an unsigned long long: usedGpuMemory that the caller may not
// see (no permission, Windows WDDM).
constexpr unsigned long long kValueNotAvailable = ~0ULL;
constexpr unsigned kDriverVersionBufferSize = 80;  // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE

struct Utilization {  // nvmlUtilization_t
  unsigned gpu;
  unsigned memory;
};
struct Memory {  // nvmlMemory_t (v1, what nvmlDeviceGetMemoryInfo fills)
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
// nvmlProcessInfo_v1_t: what the unversioned nvmlDeviceGetComputeRunningProcesses still fills.
struct ProcessInfoV1 {
  unsigned pid;
  unsigned long long used_gpu_memory;
};
// nvmlProcessInfo_v2_t: MIG ids added; what _v2 fills.
struct ProcessInfoV2 {
  unsigned pid;
  unsigned long long used_gpu_memory;
  unsigned gpu_instance_id;
  unsigned compute_instance_id;
};
// What _v3 fills on the R535 drivers whose nvml.h (CUDA 12.2) gave nvmlProcessInfo_v3_t the
// confidential-computing memory at the end: 32 bytes an entry. Later drivers (those that export
// nvmlDeviceGetRunningProcessDetailList, where that figure moved; R580 among them) fill _v3 with
// the 24-byte ProcessInfoV2 layout again: nvidia-ml-py defines nvmlProcessInfo_v3_t as the v2
// layout, and nvitop picks the 32 bytes only where nvmlDeviceGetConfComputeMemSizeInfo is
// exported and nvmlDeviceGetRunningProcessDetailList is not. Read with the wrong size, every
// entry after the first is misread: on driver 580 every row of the H100's and the H200's checks
// with two processes on the GPU (emulated nodes, a killed rank) fell back to the device's memory,
// as a misread entry makes them; every row of one process found its own.
struct ProcessInfoV3Cc {
  unsigned pid;
  unsigned long long used_gpu_memory;
  unsigned gpu_instance_id;
  unsigned compute_instance_id;
  unsigned long long used_gpu_cc_protected_memory;
};
static_assert(sizeof(ProcessInfoV1) == 16 && sizeof(ProcessInfoV2) == 24 && sizeof(ProcessInfoV3Cc) == 32,
              "NVML process info layouts");

template <class Info>
using ProcessesFn = NvmlReturn (*)(Device, unsigned* count, Info* infos);

// nvmlFieldValue_t, for nvmlDeviceGetFieldValues: 40 bytes, the value a C union whose member
// valueType names.
struct FieldValue {
  unsigned field_id;
  unsigned scope_id;
  long long timestamp_us;
  long long latency_us;
  int value_type;     // nvmlValueType_t
  NvmlReturn status;  // this field's own status
  union {
    double d;
    unsigned ui;
    unsigned long ul;
    unsigned long long ull;
    long long sll;
    int si;
    unsigned short us;
  } value;
};
static_assert(sizeof(FieldValue) == 40, "nvmlFieldValue_t layout");
// NVML_FI_DEV_POWER_INSTANT: the board's power now, in milliwatts, on every architecture (NVML
// 12.x headers); nvmlDeviceGetPowerUsage averages over 1 s on Ampere and newer (GA100 aside).
constexpr unsigned kFieldPowerInstant = 186;

// A field's value as a number, whatever type NVML gave it in; empty for an unknown type.
std::optional<double> field_number(const FieldValue& v) {
  switch (v.value_type) {
    case 0:
      return v.value.d;  // NVML_VALUE_TYPE_DOUBLE
    case 1:
      return double(v.value.ui);  // UNSIGNED_INT
    case 2:
      return double(v.value.ul);  // UNSIGNED_LONG
    case 3:
      return double(v.value.ull);  // UNSIGNED_LONG_LONG
    case 4:
      return double(v.value.sll);  // SIGNED_LONG_LONG
    case 5:
      return double(v.value.si);  // SIGNED_INT
    case 6:
      return double(v.value.us);  // UNSIGNED_SHORT
    default:
      return std::nullopt;
  }
}

// dlsym's void* as the function pointer type it is (POSIX guarantees the conversion works).
template <class Fn>
bool resolve(void* library, const char* name, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(library, name));
  return *fn != nullptr;
}

// The bytes process `pid` holds, from one of the process-list calls; empty when the call fails,
// the pid is not listed or NVML hides its figure.
template <class Info>
std::optional<std::uint64_t> find_process(ProcessesFn<Info> list, Device device, unsigned pid) {
  std::vector<Info> infos(32);
  // A process can start between the call that reports the count and the next: a few tries, each
  // with room to spare.
  for (int attempt = 0; attempt < 4; ++attempt) {
    unsigned count = static_cast<unsigned>(infos.size());
    const NvmlReturn status = list(device, &count, infos.data());
    if (status == kInsufficientSize) {
      infos.resize(std::max<std::size_t>(count, infos.size()) * 2);
      continue;
    }
    if (status != kSuccess) return std::nullopt;
    std::optional<std::uint64_t> bytes;
    for (std::size_t i = 0; i < std::min<std::size_t>(count, infos.size()); ++i) {
      if (infos[i].pid != pid) continue;
      if (infos[i].used_gpu_memory == kValueNotAvailable) return std::nullopt;
      bytes = bytes.value_or(0) + infos[i].used_gpu_memory;  // under MIG, one entry per instance
    }
    return bytes;
  }
  return std::nullopt;
}

}  // namespace

struct Nvml::Api {
  void* library = nullptr;
  // load() requires these: without them no column can be read.
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;
  NvmlReturn (*driver_version)(char* version, unsigned length) = nullptr;
  NvmlReturn (*device_count)(unsigned* count) = nullptr;
  NvmlReturn (*handle_by_index)(unsigned index, Device* device) = nullptr;
  NvmlReturn (*handle_by_pci_bus_id)(const char* pci_bus_id, Device* device) = nullptr;
  NvmlReturn (*utilization)(Device, Utilization*) = nullptr;
  NvmlReturn (*memory)(Device, Memory*) = nullptr;
  NvmlReturn (*clock)(Device, int clock_type, unsigned* mhz) = nullptr;
  NvmlReturn (*power)(Device, unsigned* milliwatts) = nullptr;
  // Newer, renamed or deprecated functions: null where this driver lacks them.
  NvmlReturn (*temperature)(Device, int sensor, unsigned* celsius) = nullptr;
  NvmlReturn (*energy)(Device, unsigned long long* millijoules) = nullptr;
  ProcessesFn<ProcessInfoV3Cc> processes_v3_cc = nullptr;  // _v3 on the R535 drivers above
  ProcessesFn<ProcessInfoV2> processes_v3 = nullptr;       // _v3 before and after them
  ProcessesFn<ProcessInfoV2> processes_v2 = nullptr;
  ProcessesFn<ProcessInfoV1> processes_v1 = nullptr;
  NvmlReturn (*clock_reasons)(Device, unsigned long long* reasons) = nullptr;
  NvmlReturn (*field_values)(Device, int count, FieldValue* values) = nullptr;

  std::string error(NvmlReturn status) const {
    const char* text = error_string(status);
    return fmt::format("{} (NVML status {})", text ? text : "unknown error", status);
  }
};

std::unique_ptr<Nvml> Nvml::load(std::string* why, const std::string& library) {
  const auto fail = [why](std::string reason) {
    if (why) *why = std::move(reason);
    return std::unique_ptr<Nvml>();
  };
  dlerror();
  // RTLD_LOCAL: NVML's symbols stay out of the global namespace, so a second copy cannot clash.
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* error = dlerror();
    const std::string detail = error ? error : "";
    if (detail.empty() || detail.find("No such file") != std::string::npos)
      return fail(
          fmt::format("{} not found (no NVIDIA driver on this machine): GPU rows have no NVML columns", library));
    return fail(fmt::format("{} could not be loaded ({}): GPU rows have no NVML columns", library, detail));
  }

  auto api = std::make_unique<Api>();
  api->library = handle;
  const char* missing = nullptr;
  const auto require = [&](const char* name, auto* fn) {
    if (!resolve(handle, name, fn) && !missing) missing = name;
  };
  require("nvmlInit_v2", &api->init);
  require("nvmlShutdown", &api->shutdown);
  require("nvmlErrorString", &api->error_string);
  require("nvmlSystemGetDriverVersion", &api->driver_version);
  require("nvmlDeviceGetCount_v2", &api->device_count);
  require("nvmlDeviceGetHandleByIndex_v2", &api->handle_by_index);
  require("nvmlDeviceGetHandleByPciBusId_v2", &api->handle_by_pci_bus_id);
  require("nvmlDeviceGetUtilizationRates", &api->utilization);
  require("nvmlDeviceGetMemoryInfo", &api->memory);
  require("nvmlDeviceGetClockInfo", &api->clock);
  require("nvmlDeviceGetPowerUsage", &api->power);
  if (missing) {
    dlclose(handle);
    return fail(fmt::format("{} has no {} (a driver older than this build reads?): GPU rows have no NVML columns",
                            library, missing));
  }
  // nvmlDeviceGetTemperature is deprecated in favour of nvmlDeviceGetTemperatureV: optional so
  // that a driver which drops it still gives the other columns.
  resolve(handle, "nvmlDeviceGetTemperature", &api->temperature);
  resolve(handle, "nvmlDeviceGetTotalEnergyConsumption", &api->energy);  // Volta and later drivers
  const bool cc_layout =
      dlsym(handle, "nvmlDeviceGetConfComputeMemSizeInfo") && !dlsym(handle, "nvmlDeviceGetRunningProcessDetailList");
  if (cc_layout)
    resolve(handle, "nvmlDeviceGetComputeRunningProcesses_v3", &api->processes_v3_cc);
  else
    resolve(handle, "nvmlDeviceGetComputeRunningProcesses_v3", &api->processes_v3);
  resolve(handle, "nvmlDeviceGetComputeRunningProcesses_v2", &api->processes_v2);
  resolve(handle, "nvmlDeviceGetComputeRunningProcesses", &api->processes_v1);
  // Renamed from ...ThrottleReasons after R525 (the NVML reference's R525 and R550 editions); the
  // bits kept their values.
  if (!resolve(handle, "nvmlDeviceGetCurrentClocksEventReasons", &api->clock_reasons))
    resolve(handle, "nvmlDeviceGetCurrentClocksThrottleReasons", &api->clock_reasons);
  resolve(handle, "nvmlDeviceGetFieldValues", &api->field_values);  // R450 and later

  const NvmlReturn status = api->init();
  if (status != kSuccess) {
    const std::string error = api->error(status);
    dlclose(handle);
    return fail(
        fmt::format("{}: nvmlInit_v2 failed: {} (is the NVIDIA driver loaded? nvidia-smi tells): GPU rows "
                    "have no NVML columns",
                    library, error));
  }
  return std::unique_ptr<Nvml>(new Nvml(std::move(api)));
}

Nvml::Nvml(std::unique_ptr<Api> api) : api_(std::move(api)) {}

Nvml::~Nvml() {
  // Nothing to do about a failed shutdown in a destructor; the library is closed either way.
  api_->shutdown();
  dlclose(api_->library);
}

std::string Nvml::driver_version() const {
  char version[kDriverVersionBufferSize] = {};
  if (api_->driver_version(version, kDriverVersionBufferSize) != kSuccess) return {};
  version[kDriverVersionBufferSize - 1] = '\0';
  return version;
}

unsigned Nvml::device_count() const {
  unsigned count = 0;
  // A failure here means no device can be read either: report none.
  if (api_->device_count(&count) != kSuccess) return 0;
  return count;
}

Device Nvml::device_by_pci_bus_id(const std::string& pci_bus_id) const {
  Device device = nullptr;
  const NvmlReturn status = api_->handle_by_pci_bus_id(pci_bus_id.c_str(), &device);
  if (status != kSuccess)
    throw BackendError(
        fmt::format("NVML does not know the GPU at PCI bus id {}: {} [nvmlDeviceGetHandleByPciBusId_v2] "
                    "(pass the id cudaDeviceGetPCIBusId gives, one that nvidia-smi lists)",
                    pci_bus_id, api_->error(status)));
  return device;
}

Device Nvml::device_by_index(unsigned index) const {
  Device device = nullptr;
  const NvmlReturn status = api_->handle_by_index(index, &device);
  if (status != kSuccess)
    throw BackendError(fmt::format("NVML has no GPU at index {} ({} GPUs seen): {} [nvmlDeviceGetHandleByIndex_v2]",
                                   index, device_count(), api_->error(status)));
  return device;
}

std::optional<std::uint64_t> Nvml::process_memory(Device device, unsigned pid) const {
  // The newest call this driver has: older ones may not list processes in MIG instances.
  if (api_->processes_v3_cc) return find_process(api_->processes_v3_cc, device, pid);
  if (api_->processes_v3) return find_process(api_->processes_v3, device, pid);
  if (api_->processes_v2) return find_process(api_->processes_v2, device, pid);
  if (api_->processes_v1) return find_process(api_->processes_v1, device, pid);
  return std::nullopt;
}

std::optional<double> Nvml::instant_power_mw(Device device) const {
  if (!api_->field_values) return std::nullopt;
  FieldValue value{};
  value.field_id = kFieldPowerInstant;
  if (api_->field_values(device, 1, &value) != kSuccess || value.status != kSuccess) return std::nullopt;
  return field_number(value);
}

Reading Nvml::read(Device device, unsigned pid) const {
  Reading reading;
  Utilization utilization{};
  if (api_->utilization(device, &utilization) == kSuccess) reading.util_percent = utilization.gpu;

  if (const auto bytes = process_memory(device, pid)) {
    reading.mem_used_bytes = *bytes;
    reading.mem_is_process = true;
  } else {
    // The pid is not listed when this process runs in another PID namespace (a container):
    // the device's used memory is then the closest figure nvidia-smi shows.
    Memory memory{};
    if (api_->memory(device, &memory) == kSuccess) reading.mem_used_bytes = memory.used;
  }

  unsigned mhz = 0;
  if (api_->clock(device, kClockSm, &mhz) == kSuccess) reading.sm_clock_mhz = mhz;
  if (const auto milliwatts = instant_power_mw(device)) {
    reading.power_w = *milliwatts / 1000.0;
    reading.power_instant = true;
  } else if (unsigned averaged = 0; api_->power(device, &averaged) == kSuccess) {
    reading.power_w = averaged / 1000.0;
  }
  unsigned long long millijoules = 0;
  if (api_->energy && api_->energy(device, &millijoules) == kSuccess) reading.energy_mj = millijoules;
  unsigned celsius = 0;
  if (api_->temperature && api_->temperature(device, kTemperatureGpu, &celsius) == kSuccess) reading.temp_c = celsius;
  unsigned long long reasons = 0;
  if (api_->clock_reasons && api_->clock_reasons(device, &reasons) == kSuccess) reading.clock_reasons = reasons;
  return reading;
}

}  // namespace tb::telemetry
