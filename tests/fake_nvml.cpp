// A scriptable stand-in for libnvidia-ml.so.1, for tests/test_telemetry.cpp: it exports the NVML
// functions telemetry/nvml.cpp resolves, plus fake_nvml_* controls the test reaches with dlsym.
// FAKE_NVML_API picks the driver generation it imitates: 4 = current (R580: _v3 fills 24-byte
// entries, nvmlDeviceGetRunningProcessDetailList exported), 3 = the R535 drivers whose _v3 fills
// 32-byte entries (with the confidential-computing memory), 2 = no *_v3 process list and the older
// ClocksThrottleReasons name, 1 = unversioned process list only, no energy counter and no
// clock-event reasons.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#ifndef FAKE_NVML_API
#define FAKE_NVML_API 4
#endif

namespace {

// NVML's ABI, as telemetry/nvml.cpp declares it.
constexpr int kSuccess = 0;
constexpr int kUninitialized = 1;
constexpr int kInvalidArgument = 2;
constexpr int kNotSupported = 3;
constexpr int kNotFound = 6;
constexpr int kInsufficientSize = 7;
constexpr int kClockSm = 1;
constexpr int kTemperatureGpu = 0;

struct Utilization {
  unsigned gpu, memory;
};
struct Memory {
  unsigned long long total, free, used;
};
struct ProcessInfoV1 {
  unsigned pid;
  unsigned long long used_gpu_memory;
};
struct ProcessInfoV2 {
  unsigned pid;
  unsigned long long used_gpu_memory;
  unsigned gpu_instance_id, compute_instance_id;
};
// What the R535 drivers of generation 3 write from _v3: 32 bytes an entry. Generation 4 writes
// ProcessInfoV2's 24.
struct ProcessInfoV3Cc {
  unsigned pid;
  unsigned long long used_gpu_memory;
  unsigned gpu_instance_id, compute_instance_id;
  unsigned long long used_gpu_cc_protected_memory;
};
#if FAKE_NVML_API >= 4
using ProcessInfoV3 = ProcessInfoV2;
#else
using ProcessInfoV3 = ProcessInfoV3Cc;
#endif

// Values a function returns call after call; the last one repeats once the script runs out.
struct Series {
  std::vector<unsigned long long> values;
  std::size_t next = 0;
  unsigned long long take() {
    const unsigned long long value = values[std::min(next, values.size() - 1)];
    ++next;
    return value;
  }
};

struct Device {
  std::string bus_id;
  std::map<std::string, Series> series;  // util, sm_clock, power_mw, temp, reasons
  std::vector<std::pair<unsigned, unsigned long long>> processes;
  unsigned long long device_used = 0;
  unsigned long long energy_mj = 0, energy_step_mj = 0;
};

// A wait before a call answers: a driver stalled on a GPU reset, say.
struct Delay {
  int call;  // which call of the symbol waits, counted from 1; 0 = every call
  std::chrono::milliseconds wait;
};

struct State {
  std::mutex mutex;
  std::vector<Device> devices;
  std::map<std::string, int> failures;  // symbol -> status every call returns
  std::map<std::string, Delay> delays;  // symbol -> the call that waits, and how long
  std::map<std::string, int> calls;     // symbol -> number of calls
  std::map<std::string, std::vector<std::chrono::steady_clock::time_point>> call_times;  // symbol -> when each began
  int initialised = 0;  // nvmlInit_v2 minus nvmlShutdown
};

State& state() {
  static State s;
  return s;
}

void reset_locked(State& s, unsigned device_count) {
  s.devices.assign(device_count, Device{});
  for (unsigned i = 0; i < device_count; ++i) {
    Device& d = s.devices[i];
    d.bus_id = "00000000:0" + std::to_string(i + 1) + ":00.0";
    d.series["util"].values = {50};
    d.series["sm_clock"].values = {1500};
    d.series["power_mw"].values = {250000};
    d.series["temp"].values = {60};
    d.series["reasons"].values = {0};
    d.device_used = 1ULL << 30;
    d.energy_mj = 1000000;
  }
  s.failures.clear();
  s.delays.clear();
  s.calls.clear();
  s.call_times.clear();
  s.initialised = 0;
}

// Counts the call and notes when it began, waits if it is scripted to, then the status it
// returns: a scripted failure, UNINITIALIZED before nvmlInit_v2, INVALID_ARGUMENT for a handle
// this library did not give, or success. The lock stays held while it waits, so the controls
// answer only after the stalled call does.
int enter(State& s, const char* symbol, void* handle, Device** device) {
  const int call = ++s.calls[symbol];
  s.call_times[symbol].push_back(std::chrono::steady_clock::now());
  if (auto delay = s.delays.find(symbol); delay != s.delays.end()) {
    if (delay->second.call == 0 || delay->second.call == call) std::this_thread::sleep_for(delay->second.wait);
  }
  if (auto failure = s.failures.find(symbol); failure != s.failures.end()) return failure->second;
  if (s.initialised <= 0 && std::strcmp(symbol, "nvmlInit_v2") != 0) return kUninitialized;
  if (device) {
    *device = nullptr;
    for (Device& d : s.devices)
      if (static_cast<void*>(&d) == handle) *device = &d;
    if (!*device) return kInvalidArgument;
  }
  return kSuccess;
}

template <class Info>
int list_processes(const char* symbol, void* handle, unsigned* count, Info* infos) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  Device* d = nullptr;
  if (const int status = enter(s, symbol, handle, &d); status != kSuccess) return status;
  if (!count) return kInvalidArgument;
  const auto needed = static_cast<unsigned>(d->processes.size());
  if (*count < needed) {
    *count = needed;
    return kInsufficientSize;
  }
  for (unsigned i = 0; i < needed; ++i) {
    infos[i] = Info{};
    infos[i].pid = d->processes[i].first;
    infos[i].used_gpu_memory = d->processes[i].second;
  }
  *count = needed;
  return kSuccess;
}

// One scripted value of `series` for a device call.
int scripted(const char* symbol, void* handle, const char* series, unsigned long long* value) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  Device* d = nullptr;
  if (const int status = enter(s, symbol, handle, &d); status != kSuccess) return status;
  if (!value) return kInvalidArgument;
  *value = d->series[series].take();
  return kSuccess;
}

}  // namespace

extern "C" {

// ---- Controls for the test ----

// `device_count` GPUs with default readings, no scripted failures, call counts at zero.
void fake_nvml_reset(unsigned device_count) {
  std::lock_guard lock(state().mutex);
  reset_locked(state(), device_count);
}

// The PCI bus id of fake GPU `device`, as NVML's busId field writes it.
const char* fake_nvml_bus_id(unsigned device) { return state().devices.at(device).bus_id.c_str(); }

// What successive calls return for `quantity`: "util" (%), "sm_clock" (MHz), "power_mw",
// "temp" (C), "reasons" (clock-event bits).
void fake_nvml_set_series(unsigned device, const char* quantity, const unsigned long long* values, unsigned count) {
  std::lock_guard lock(state().mutex);
  Series& series = state().devices.at(device).series[quantity];
  series.values.assign(values, values + count);
  series.next = 0;
}

// The compute processes the process-list calls report.
void fake_nvml_set_processes(unsigned device, const unsigned* pids, const unsigned long long* bytes, unsigned count) {
  std::lock_guard lock(state().mutex);
  auto& processes = state().devices.at(device).processes;
  processes.clear();
  for (unsigned i = 0; i < count; ++i) processes.emplace_back(pids[i], bytes[i]);
}

// nvmlDeviceGetMemoryInfo's used bytes.
void fake_nvml_set_device_used(unsigned device, unsigned long long bytes) {
  std::lock_guard lock(state().mutex);
  state().devices.at(device).device_used = bytes;
}

// The energy counter starts at `start_mj` and grows by `step_mj` after each read.
void fake_nvml_set_energy(unsigned device, unsigned long long start_mj, unsigned long long step_mj) {
  std::lock_guard lock(state().mutex);
  state().devices.at(device).energy_mj = start_mj;
  state().devices.at(device).energy_step_mj = step_mj;
}

// Every later call of `symbol` returns `status` (0 stops the failure).
void fake_nvml_fail(const char* symbol, int status) {
  std::lock_guard lock(state().mutex);
  if (status == kSuccess)
    state().failures.erase(symbol);
  else
    state().failures[symbol] = status;
}

// Call number `call` of `symbol` (counted from 1 since the last reset, as fake_nvml_calls counts),
// or every call when `call` is 0, waits `ms` before it answers. 0 ms stops the delay.
void fake_nvml_delay(const char* symbol, int call, unsigned ms) {
  std::lock_guard lock(state().mutex);
  if (ms == 0)
    state().delays.erase(symbol);
  else
    state().delays[symbol] = Delay{call, std::chrono::milliseconds(ms)};
}

// How many times `symbol` was called since the last reset.
int fake_nvml_calls(const char* symbol) {
  std::lock_guard lock(state().mutex);
  const auto it = state().calls.find(symbol);
  return it == state().calls.end() ? 0 : it->second;
}

// When each call of `symbol` since the last reset began (before any delay), as
// std::chrono::steady_clock's nanoseconds since its epoch: the first `capacity` into `ns`. Returns
// the number of calls.
int fake_nvml_call_times(const char* symbol, long long* ns, int capacity) {
  std::lock_guard lock(state().mutex);
  const auto it = state().call_times.find(symbol);
  if (it == state().call_times.end()) return 0;
  const std::vector<std::chrono::steady_clock::time_point>& times = it->second;
  for (std::size_t i = 0; i < std::min(times.size(), std::size_t(std::max(capacity, 0))); ++i)
    ns[i] = std::chrono::duration_cast<std::chrono::nanoseconds>(times[i].time_since_epoch()).count();
  return static_cast<int>(times.size());
}

// nvmlInit_v2 calls not yet matched by nvmlShutdown.
int fake_nvml_initialised() {
  std::lock_guard lock(state().mutex);
  return state().initialised;
}

// ---- NVML ----

int nvmlInit_v2() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const int status = enter(s, "nvmlInit_v2", nullptr, nullptr); status != kSuccess) return status;
  ++s.initialised;
  return kSuccess;
}

int nvmlShutdown() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const int status = enter(s, "nvmlShutdown", nullptr, nullptr); status != kSuccess) return status;
  --s.initialised;
  return kSuccess;
}

const char* nvmlErrorString(int status) {
  switch (status) {
    case 0:
      return "Success";
    case 1:
      return "Uninitialized";
    case 2:
      return "Invalid Argument";
    case 3:
      return "Not Supported";
    case 6:
      return "Not Found";
    case 9:
      return "Driver Not Loaded";
    case 15:
      return "GPU is lost";
    default:
      return "Unknown Error";
  }
}

int nvmlSystemGetDriverVersion(char* version, unsigned length) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const int status = enter(s, "nvmlSystemGetDriverVersion", nullptr, nullptr); status != kSuccess) return status;
  const char text[] = "580.159.04";
  if (!version || length < sizeof text) return kInsufficientSize;
  std::memcpy(version, text, sizeof text);
  return kSuccess;
}

int nvmlDeviceGetCount_v2(unsigned* count) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const int status = enter(s, "nvmlDeviceGetCount_v2", nullptr, nullptr); status != kSuccess) return status;
  *count = static_cast<unsigned>(s.devices.size());
  return kSuccess;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** device) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const int status = enter(s, "nvmlDeviceGetHandleByIndex_v2", nullptr, nullptr); status != kSuccess) return status;
  if (index >= s.devices.size()) return kInvalidArgument;
  *device = &s.devices[index];
  return kSuccess;
}

// Like NVML, it takes the short "0000:65:00.0" that CUDA writes as well as its own
// "00000000:65:00.0", and ignores the case of hex digits.
int nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, void** device) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const int status = enter(s, "nvmlDeviceGetHandleByPciBusId_v2", nullptr, nullptr); status != kSuccess)
    return status;
  const auto canonical = [](std::string id) {
    std::transform(id.begin(), id.end(), id.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    const std::size_t colon = id.find(':');
    if (colon != std::string::npos && colon < 8) id.insert(0, 8 - colon, '0');
    return id;
  };
  for (Device& d : s.devices)
    if (canonical(d.bus_id) == canonical(bus_id)) {
      *device = &d;
      return kSuccess;
    }
  return kNotFound;
}

int nvmlDeviceGetUtilizationRates(void* handle, Utilization* utilization) {
  unsigned long long gpu = 0;
  if (const int status = scripted("nvmlDeviceGetUtilizationRates", handle, "util", &gpu); status != kSuccess)
    return status;
  utilization->gpu = static_cast<unsigned>(gpu);
  utilization->memory = 0;
  return kSuccess;
}

int nvmlDeviceGetMemoryInfo(void* handle, Memory* memory) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  Device* d = nullptr;
  if (const int status = enter(s, "nvmlDeviceGetMemoryInfo", handle, &d); status != kSuccess) return status;
  memory->total = 80ULL << 30;
  memory->used = d->device_used;
  memory->free = memory->total - memory->used;
  return kSuccess;
}

int nvmlDeviceGetClockInfo(void* handle, int type, unsigned* mhz) {
  if (type != kClockSm) return kInvalidArgument;  // the only clock telemetry asks for
  unsigned long long value = 0;
  if (const int status = scripted("nvmlDeviceGetClockInfo", handle, "sm_clock", &value); status != kSuccess)
    return status;
  *mhz = static_cast<unsigned>(value);
  return kSuccess;
}

int nvmlDeviceGetPowerUsage(void* handle, unsigned* milliwatts) {
  unsigned long long value = 0;
  if (const int status = scripted("nvmlDeviceGetPowerUsage", handle, "power_mw", &value); status != kSuccess)
    return status;
  *milliwatts = static_cast<unsigned>(value);
  return kSuccess;
}

int nvmlDeviceGetTemperature(void* handle, int sensor, unsigned* celsius) {
  if (sensor != kTemperatureGpu) return kInvalidArgument;
  unsigned long long value = 0;
  if (const int status = scripted("nvmlDeviceGetTemperature", handle, "temp", &value); status != kSuccess)
    return status;
  *celsius = static_cast<unsigned>(value);
  return kSuccess;
}

int nvmlDeviceGetComputeRunningProcesses(void* handle, unsigned* count, ProcessInfoV1* infos) {
  return list_processes("nvmlDeviceGetComputeRunningProcesses", handle, count, infos);
}

#if FAKE_NVML_API >= 2
int nvmlDeviceGetComputeRunningProcesses_v2(void* handle, unsigned* count, ProcessInfoV2* infos) {
  return list_processes("nvmlDeviceGetComputeRunningProcesses_v2", handle, count, infos);
}

int nvmlDeviceGetCurrentClocksThrottleReasons(void* handle, unsigned long long* reasons) {
  return scripted("nvmlDeviceGetCurrentClocksThrottleReasons", handle, "reasons", reasons);
}

int nvmlDeviceGetTotalEnergyConsumption(void* handle, unsigned long long* millijoules) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  Device* d = nullptr;
  if (const int status = enter(s, "nvmlDeviceGetTotalEnergyConsumption", handle, &d); status != kSuccess) return status;
  *millijoules = d->energy_mj;
  d->energy_mj += d->energy_step_mj;
  return kSuccess;
}
#endif

#if FAKE_NVML_API >= 3
// nvmlFieldValue_t, 40 bytes.
struct FieldValue {
  unsigned field_id, scope_id;
  long long timestamp_us, latency_us;
  int value_type, status;
  unsigned long long value;  // the union, written as UNSIGNED_INT or UNSIGNED_LONG_LONG below
};
static_assert(sizeof(FieldValue) == 40, "nvmlFieldValue_t layout");

// NVML_FI_DEV_POWER_INSTANT (186) from the "power_instant_mw" series, given as an unsigned int
// (NVML_VALUE_TYPE_UNSIGNED_INT, as drivers report power) or in the nvmlValueType_t that a
// "power_instant_type" series names (0 double, 3 unsigned long long, 4 signed long long; any other
// number is given as it is, with an unsigned int); without that series the field reports
// NOT_SUPPORTED, as a driver of an older GPU may. Any other field: NOT_SUPPORTED.
int nvmlDeviceGetFieldValues(void* handle, int count, FieldValue* values) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  Device* d = nullptr;
  if (const int status = enter(s, "nvmlDeviceGetFieldValues", handle, &d); status != kSuccess) return status;
  for (int i = 0; i < count; ++i) {
    FieldValue& v = values[i];
    const auto series = d->series.find("power_instant_mw");
    if (v.field_id != 186 || series == d->series.end()) {
      v.status = kNotSupported;
      continue;
    }
    v.status = kSuccess;
    const auto type = d->series.find("power_instant_type");
    v.value_type = type == d->series.end() ? 1 : int(type->second.take());
    v.value = 0;
    const unsigned long long taken = series->second.take();
    if (v.value_type == 0) {
      const double mw = double(taken);
      std::memcpy(&v.value, &mw, sizeof mw);  // dVal
    } else if (v.value_type == 3 || v.value_type == 4) {
      v.value = taken;  // ullVal, sllVal: all eight bytes
    } else {
      const auto mw = static_cast<unsigned>(taken);
      std::memcpy(&v.value, &mw, sizeof mw);  // uiVal, the union's first four bytes
    }
  }
  return kSuccess;
}

int nvmlDeviceGetComputeRunningProcesses_v3(void* handle, unsigned* count, ProcessInfoV3* infos) {
  return list_processes("nvmlDeviceGetComputeRunningProcesses_v3", handle, count, infos);
}

int nvmlDeviceGetCurrentClocksEventReasons(void* handle, unsigned long long* reasons) {
  return scripted("nvmlDeviceGetCurrentClocksEventReasons", handle, "reasons", reasons);
}

// Exported, never called: which of them a driver has says how it fills _v3.
int nvmlDeviceGetConfComputeMemSizeInfo(void*, void*) { return kNotSupported; }
#endif

#if FAKE_NVML_API >= 4
int nvmlDeviceGetRunningProcessDetailList(void*, void*) { return kNotSupported; }
#endif

}  // extern "C"
