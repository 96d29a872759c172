// GPU telemetry (telemetry/): the NVML loader and readings against fake NVML libraries scripted
// call by call (tests/fake_nvml.cpp, one per driver generation), the summary's formulas on
// hand-made series, the sampling thread, and the real libnvidia-ml.so.1 where a driver is installed.
#include <dlfcn.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "engine/core/error.hpp"
#include "telemetry/nvml.hpp"
#include "telemetry/sampler.hpp"

#if !defined(TB_FAKE_NVML) || !defined(TB_FAKE_NVML_V3) || !defined(TB_FAKE_NVML_V2) || !defined(TB_FAKE_NVML_V1)
#error "tests/CMakeLists.txt passes the fake NVML libraries' paths as TB_FAKE_NVML, TB_FAKE_NVML_V3 to _V1"
#endif

namespace tb::telemetry {
namespace {

using namespace std::chrono_literals;

constexpr unsigned kPid = 4321;  // the process whose memory is read; not this one, so nothing real leaks in

// The fake library's controls. Holding its own handle keeps the library, and so its script, loaded
// while Nvml objects open and close it.
class FakeNvml {
 public:
  explicit FakeNvml(const char* path) : handle_(dlopen(path, RTLD_NOW | RTLD_LOCAL)) {
    if (!handle_) throw Error(std::string("cannot open the fake NVML ") + path + ": " + dlerror());
    bind("fake_nvml_reset", &reset);
    bind("fake_nvml_bus_id", &bus_id);
    bind("fake_nvml_set_series", &set_series_raw);
    bind("fake_nvml_set_processes", &set_processes_raw);
    bind("fake_nvml_set_device_used", &set_device_used);
    bind("fake_nvml_set_energy", &set_energy);
    bind("fake_nvml_fail", &fail);
    bind("fake_nvml_delay", &delay_raw);
    bind("fake_nvml_calls", &calls);
    bind("fake_nvml_call_times", &call_times_raw);
    bind("fake_nvml_initialised", &initialised);
    reset(1);
  }
  ~FakeNvml() { dlclose(handle_); }
  FakeNvml(const FakeNvml&) = delete;
  FakeNvml& operator=(const FakeNvml&) = delete;

  void series(unsigned device, const char* quantity, std::vector<unsigned long long> values) {
    set_series_raw(device, quantity, values.data(), unsigned(values.size()));
  }
  void processes(unsigned device, std::vector<unsigned> pids, std::vector<unsigned long long> bytes) {
    set_processes_raw(device, pids.data(), bytes.data(), unsigned(pids.size()));
  }
  // Call number `call` of `symbol` (from 1), or every call for 0, waits `wait` before it answers.
  void delay(const char* symbol, int call, std::chrono::milliseconds wait) {
    delay_raw(symbol, call, unsigned(wait.count()));
  }
  // When each call of `symbol` began, on the clock the sampler schedules by.
  std::vector<std::chrono::steady_clock::time_point> call_times(const char* symbol) {
    std::vector<long long> ns(std::size_t(calls(symbol)));
    const int count = call_times_raw(symbol, ns.data(), int(ns.size()));
    ns.resize(std::min(ns.size(), std::size_t(count)));
    std::vector<std::chrono::steady_clock::time_point> times;
    for (long long t : ns)
      times.emplace_back(std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::nanoseconds(t)));
    return times;
  }

  void (*reset)(unsigned device_count) = nullptr;
  const char* (*bus_id)(unsigned device) = nullptr;
  void (*set_series_raw)(unsigned, const char*, const unsigned long long*, unsigned) = nullptr;
  void (*set_processes_raw)(unsigned, const unsigned*, const unsigned long long*, unsigned) = nullptr;
  void (*set_device_used)(unsigned device, unsigned long long bytes) = nullptr;
  void (*set_energy)(unsigned device, unsigned long long start_mj, unsigned long long step_mj) = nullptr;
  void (*fail)(const char* symbol, int status) = nullptr;
  void (*delay_raw)(const char* symbol, int call, unsigned ms) = nullptr;
  int (*calls)(const char* symbol) = nullptr;
  int (*call_times_raw)(const char* symbol, long long* ns, int capacity) = nullptr;
  int (*initialised)() = nullptr;

 private:
  template <class Fn>
  void bind(const char* name, Fn* fn) {
    *fn = reinterpret_cast<Fn>(dlsym(handle_, name));
    if (!*fn) throw Error(std::string("the fake NVML has no ") + name);
  }
  void* handle_;
};

std::unique_ptr<Nvml> load_or_fail(const char* path) {
  std::string why;
  auto nvml = Nvml::load(&why, path);
  EXPECT_NE(nvml, nullptr) << why;
  return nvml;
}

// ---- Loading ----

TEST(NvmlLoad, MissingLibraryReturnsNullAndNamesIt) {
  std::string why;
  EXPECT_EQ(Nvml::load(&why, "/nonexistent/libnvidia-ml.so.1"), nullptr);
  EXPECT_NE(why.find("/nonexistent/libnvidia-ml.so.1 not found"), std::string::npos) << why;
  EXPECT_NE(why.find("no NVML columns"), std::string::npos) << why;
}

TEST(NvmlLoad, LibraryWithoutNvmlNamesTheMissingSymbol) {
  std::string why;
  EXPECT_EQ(Nvml::load(&why, "libm.so.6"), nullptr);
  EXPECT_NE(why.find("libm.so.6 has no nvmlInit_v2"), std::string::npos) << why;
}

TEST(NvmlLoad, InitFailureIsReportedWithNvmlsReason) {
  FakeNvml fake(TB_FAKE_NVML);
  fake.fail("nvmlInit_v2", 9);  // NVML_ERROR_DRIVER_NOT_LOADED
  std::string why;
  EXPECT_EQ(Nvml::load(&why, TB_FAKE_NVML), nullptr);
  EXPECT_NE(why.find("nvmlInit_v2 failed: Driver Not Loaded (NVML status 9)"), std::string::npos) << why;
}

// A file that is there but is no library is not "not found": the loader's own reason is said.
TEST(NvmlLoad, AFileThatIsNoLibraryIsRefusedWithTheLoadersReason) {
  const std::string path = ::testing::TempDir() + "not_a_library.so";
  std::ofstream(path) << "not an ELF file\n";
  std::string why;
  EXPECT_EQ(Nvml::load(&why, path), nullptr);
  EXPECT_NE(why.find(path + " could not be loaded (" + path + ": "), std::string::npos) << why;
  EXPECT_EQ(why.find("not found"), std::string::npos) << why;
  EXPECT_NE(why.find("no NVML columns"), std::string::npos) << why;
  std::remove(path.c_str());
}

TEST(NvmlLoad, InitialisesReadsDriverAndShutsDown) {
  FakeNvml fake(TB_FAKE_NVML);
  fake.reset(2);
  {
    auto nvml = load_or_fail(TB_FAKE_NVML);
    ASSERT_TRUE(nvml);
    EXPECT_EQ(fake.initialised(), 1);
    EXPECT_EQ(nvml->driver_version(), "580.159.04");
    EXPECT_EQ(nvml->device_count(), 2u);
  }
  EXPECT_EQ(fake.initialised(), 0) << "the destructor did not call nvmlShutdown";
}

TEST(NvmlLoad, FailedDriverVersionIsEmpty) {
  FakeNvml fake(TB_FAKE_NVML);
  fake.fail("nvmlSystemGetDriverVersion", 3);
  auto nvml = load_or_fail(TB_FAKE_NVML);
  ASSERT_TRUE(nvml);
  EXPECT_EQ(nvml->driver_version(), "");
}

TEST(NvmlDevice, UnknownBusIdThrowsNamingIt) {
  FakeNvml fake(TB_FAKE_NVML);
  auto nvml = load_or_fail(TB_FAKE_NVML);
  ASSERT_TRUE(nvml);
  try {
    nvml->device_by_pci_bus_id("0000:99:00.0");
    FAIL() << "no error for a bus id NVML does not know";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("0000:99:00.0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(nvml->device_by_index(5), Error);
}

// ---- One reading ----

TEST(NvmlRead, ReadsEveryQuantityInItsUnit) {
  FakeNvml fake(TB_FAKE_NVML);
  fake.series(0, "util", {73});
  fake.series(0, "sm_clock", {1980});
  fake.series(0, "power_mw", {312500});
  fake.series(0, "temp", {71});
  fake.series(0, "reasons", {0x5});
  fake.set_energy(0, 123456789, 0);
  fake.processes(0, {1234, kPid, 999}, {1 << 20, 3ULL << 30, 7});
  auto nvml = load_or_fail(TB_FAKE_NVML);
  ASSERT_TRUE(nvml);
  const Reading r = nvml->read(nvml->device_by_pci_bus_id("0000:01:00.0"), kPid);
  EXPECT_EQ(r.util_percent, 73u);
  EXPECT_EQ(r.sm_clock_mhz, 1980u);
  ASSERT_TRUE(r.power_w);
  EXPECT_DOUBLE_EQ(*r.power_w, 312.5);  // milliwatts from NVML
  // This fake GPU has no instantaneous power field: the averaged call stands in, and says so.
  EXPECT_FALSE(r.power_instant);
  EXPECT_EQ(fake.calls("nvmlDeviceGetFieldValues"), 1);
  EXPECT_EQ(r.temp_c, 71u);
  EXPECT_EQ(r.clock_reasons, 0x5u);
  EXPECT_EQ(r.energy_mj, 123456789u);
  EXPECT_EQ(r.mem_used_bytes, 3ULL << 30);
  EXPECT_TRUE(r.mem_is_process);
  // The newest names where the driver has them.
  EXPECT_EQ(fake.calls("nvmlDeviceGetComputeRunningProcesses_v3"), 1);
  EXPECT_EQ(fake.calls("nvmlDeviceGetComputeRunningProcesses_v2"), 0);
  EXPECT_EQ(fake.calls("nvmlDeviceGetCurrentClocksEventReasons"), 1);
  EXPECT_EQ(fake.calls("nvmlDeviceGetCurrentClocksThrottleReasons"), 0);
}

// nvmlDeviceGetPowerUsage averages over a second on Ampere and newer; the instantaneous field is
// read first wherever the driver has it, and the average is not asked for then.
TEST(NvmlRead, InstantaneousPowerWhereTheDriverHasIt) {
  FakeNvml fake(TB_FAKE_NVML);
  fake.series(0, "power_instant_mw", {180250, 410000});
  fake.series(0, "power_mw", {312500});
  auto nvml = load_or_fail(TB_FAKE_NVML);
  ASSERT_TRUE(nvml);
  const Device device = nvml->device_by_index(0);
  const Reading first = nvml->read(device, kPid), second = nvml->read(device, kPid);
  ASSERT_TRUE(first.power_w && second.power_w);
  EXPECT_DOUBLE_EQ(*first.power_w, 180.25);
  EXPECT_DOUBLE_EQ(*second.power_w, 410);
  EXPECT_TRUE(first.power_instant && second.power_instant);
  EXPECT_EQ(fake.calls("nvmlDeviceGetPowerUsage"), 0);
}

// The field's value is read in the type NVML names for it: a double, all eight bytes of an unsigned
// or signed long long (a figure beyond 32 bits tells them from an unsigned int's four).
TEST(NvmlRead, InstantaneousPowerInTheTypeTheFieldNames) {
  for (const auto& [type, milliwatts, watts] :
       {std::tuple{0ULL, 180250ULL, 180.25}, {3ULL, 5000000000ULL, 5e6}, {4ULL, 5000000000ULL, 5e6}}) {
    FakeNvml fake(TB_FAKE_NVML);
    fake.series(0, "power_instant_type", {type});
    fake.series(0, "power_instant_mw", {milliwatts});
    auto nvml = load_or_fail(TB_FAKE_NVML);
    ASSERT_TRUE(nvml);
    const Reading r = nvml->read(nvml->device_by_index(0), kPid);
    ASSERT_TRUE(r.power_w) << "type " << type;
    EXPECT_DOUBLE_EQ(*r.power_w, watts) << "type " << type;
    EXPECT_TRUE(r.power_instant) << "type " << type;
  }
}

// A power field that cannot be read falls back to the average: the call fails (a driver without
// the field, or an error), or gives its value in a type this build does not know.
TEST(NvmlRead, FailingPowerFieldFallsBackToTheAverage) {
  for (const bool unknown_type : {false, true}) {
    FakeNvml fake(TB_FAKE_NVML);
    fake.series(0, "power_instant_mw", {180000});
    fake.series(0, "power_mw", {312500});
    if (unknown_type)
      fake.series(0, "power_instant_type", {7});  // past NVML_VALUE_TYPE_UNSIGNED_SHORT
    else
      fake.fail("nvmlDeviceGetFieldValues", 3);  // NVML_ERROR_NOT_SUPPORTED
    auto nvml = load_or_fail(TB_FAKE_NVML);
    ASSERT_TRUE(nvml);
    const Reading r = nvml->read(nvml->device_by_index(0), kPid);
    ASSERT_TRUE(r.power_w) << unknown_type;
    EXPECT_DOUBLE_EQ(*r.power_w, 312.5) << unknown_type;
    EXPECT_FALSE(r.power_instant) << unknown_type;
  }
}

TEST(NvmlRead, PidAbsentFallsBackToDeviceMemory) {
  FakeNvml fake(TB_FAKE_NVML);
  fake.processes(0, {1234, 999}, {1 << 20, 7});  // a container: NVML lists host pids
  fake.set_device_used(0, 10ULL << 30);
  auto nvml = load_or_fail(TB_FAKE_NVML);
  ASSERT_TRUE(nvml);
  const Reading r = nvml->read(nvml->device_by_index(0), kPid);
  EXPECT_EQ(r.mem_used_bytes, 10ULL << 30);
  EXPECT_FALSE(r.mem_is_process);
}

TEST(NvmlRead, UnsupportedProcessListFallsBackToDeviceMemory) {
  FakeNvml fake(TB_FAKE_NVML);
  fake.processes(0, {kPid}, {5});
  fake.fail("nvmlDeviceGetComputeRunningProcesses_v3", 3);  // NVML_ERROR_NOT_SUPPORTED
  fake.set_device_used(0, 9ULL << 30);
  auto nvml = load_or_fail(TB_FAKE_NVML);
  ASSERT_TRUE(nvml);
  const Reading r = nvml->read(nvml->device_by_index(0), kPid);
  EXPECT_EQ(r.mem_used_bytes, 9ULL << 30);
  EXPECT_FALSE(r.mem_is_process);
}

TEST(NvmlRead, GrowsTheProcessBufferUntilThePidFits) {
  FakeNvml fake(TB_FAKE_NVML);
  std::vector<unsigned> pids;
  std::vector<unsigned long long> bytes;
  for (unsigned i = 0; i < 200; ++i) {
    pids.push_back(10000 + i);
    bytes.push_back(i);
  }
  pids.back() = kPid;
  bytes.back() = 777;
  fake.processes(0, pids, bytes);
  auto nvml = load_or_fail(TB_FAKE_NVML);
  ASSERT_TRUE(nvml);
  const Reading r = nvml->read(nvml->device_by_index(0), kPid);
  EXPECT_EQ(r.mem_used_bytes, 777u);
  EXPECT_TRUE(r.mem_is_process);
  EXPECT_GE(fake.calls("nvmlDeviceGetComputeRunningProcesses_v3"), 2) << "200 processes fit the first buffer?";
}

// Under MIG a process is listed once per GPU instance it uses: its memory is the sum of its entries.
TEST(NvmlRead, SumsAProcessesEntriesAcrossMigInstances) {
  FakeNvml fake(TB_FAKE_NVML);
  fake.processes(0, {kPid, 1234, kPid}, {1ULL << 30, 5, 2ULL << 30});
  fake.set_device_used(0, 9ULL << 30);
  auto nvml = load_or_fail(TB_FAKE_NVML);
  ASSERT_TRUE(nvml);
  const Reading r = nvml->read(nvml->device_by_index(0), kPid);
  EXPECT_EQ(r.mem_used_bytes, 3ULL << 30);
  EXPECT_TRUE(r.mem_is_process);
}

TEST(NvmlRead, HiddenProcessMemoryFallsBackToDeviceMemory) {
  FakeNvml fake(TB_FAKE_NVML);
  fake.processes(0, {kPid}, {~0ULL});  // NVML_VALUE_NOT_AVAILABLE
  fake.set_device_used(0, 4ULL << 30);
  auto nvml = load_or_fail(TB_FAKE_NVML);
  ASSERT_TRUE(nvml);
  const Reading r = nvml->read(nvml->device_by_index(0), kPid);
  EXPECT_EQ(r.mem_used_bytes, 4ULL << 30);
  EXPECT_FALSE(r.mem_is_process);
}

TEST(NvmlRead, NotSupportedLeavesFieldsEmptyNotZero) {
  FakeNvml fake(TB_FAKE_NVML);
  for (const char* symbol :
       {"nvmlDeviceGetUtilizationRates", "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetClockInfo", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTotalEnergyConsumption",
        "nvmlDeviceGetTemperature", "nvmlDeviceGetCurrentClocksEventReasons"})
    fake.fail(symbol, 3);
  auto nvml = load_or_fail(TB_FAKE_NVML);
  ASSERT_TRUE(nvml);
  const Reading r = nvml->read(nvml->device_by_index(0), kPid);
  EXPECT_FALSE(r.util_percent);
  EXPECT_FALSE(r.mem_used_bytes);
  EXPECT_FALSE(r.sm_clock_mhz);
  EXPECT_FALSE(r.power_w);
  EXPECT_FALSE(r.energy_mj);
  EXPECT_FALSE(r.temp_c);
  EXPECT_FALSE(r.clock_reasons);
  const auto counters = summarise({{r, r}}).counters(100);
  EXPECT_EQ(counters.size(), 1u) << "only gpu_samples is known";
  EXPECT_EQ(counters.count("gpu_samples"), 1u);
}

// This process's memory found third in a list of four, read with `library`'s entry layout through
// its _v3 call: a wrong entry size misreads every entry after the first.
void expect_found_behind_others(const char* library) {
  FakeNvml fake(library);
  fake.processes(0, {1, 2, kPid, 3}, {10, 20, 7ULL << 30, 30});
  fake.set_device_used(0, 9ULL << 30);
  auto nvml = load_or_fail(library);
  ASSERT_TRUE(nvml);
  const Reading r = nvml->read(nvml->device_by_index(0), kPid);
  EXPECT_EQ(r.mem_used_bytes, 7ULL << 30) << "9 GiB: the device's, the process not found";
  EXPECT_TRUE(r.mem_is_process);
  EXPECT_EQ(fake.calls("nvmlDeviceGetComputeRunningProcesses_v3"), 1);
}

// Today's drivers (R580): _v3 fills 24-byte entries. Read 32 bytes apart, as before, a process
// behind another was not found (every row of the H100's and H200's checks with two processes on
// the GPU) and its row took the device's memory, blaming a container.
TEST(NvmlRead, TodaysV3ProcessListHasTheV2Layout) { expect_found_behind_others(TB_FAKE_NVML); }

// The R535 drivers that exported nvmlDeviceGetConfComputeMemSizeInfo but not yet
// nvmlDeviceGetRunningProcessDetailList: _v3 fills 32-byte entries.
TEST(NvmlLegacy, R535V3ProcessListWithConfidentialMemory) { expect_found_behind_others(TB_FAKE_NVML_V3); }

// An older driver: no _v3 process list, the clock reasons under their old name.
TEST(NvmlLegacy, V2ProcessListAndThrottleReasonsName) {
  FakeNvml fake(TB_FAKE_NVML_V2);
  fake.processes(0, {1, 2, kPid, 3}, {10, 20, 5ULL << 30, 30});
  fake.series(0, "reasons", {0x40});
  auto nvml = load_or_fail(TB_FAKE_NVML_V2);
  ASSERT_TRUE(nvml);
  const Reading r = nvml->read(nvml->device_by_index(0), kPid);
  EXPECT_EQ(r.mem_used_bytes, 5ULL << 30);
  EXPECT_TRUE(r.mem_is_process);
  EXPECT_EQ(r.clock_reasons, 0x40u);
  EXPECT_FALSE(r.power_instant) << "this driver has no nvmlDeviceGetFieldValues";
  EXPECT_TRUE(r.power_w);
  EXPECT_EQ(fake.calls("nvmlDeviceGetComputeRunningProcesses_v2"), 1);
  EXPECT_EQ(fake.calls("nvmlDeviceGetComputeRunningProcesses"), 0);
}

// The oldest: the unversioned process list with its shorter entries, no energy counter. A wrong
// entry size would misread every entry after the first.
TEST(NvmlLegacy, V1ProcessListLayoutAndNoEnergy) {
  FakeNvml fake(TB_FAKE_NVML_V1);
  fake.processes(0, {1, 2, kPid, 3}, {10, 20, 6ULL << 30, 30});
  auto nvml = load_or_fail(TB_FAKE_NVML_V1);
  ASSERT_TRUE(nvml);
  const Reading r = nvml->read(nvml->device_by_index(0), kPid);
  EXPECT_EQ(r.mem_used_bytes, 6ULL << 30);
  EXPECT_TRUE(r.mem_is_process);
  EXPECT_EQ(fake.calls("nvmlDeviceGetComputeRunningProcesses"), 1);
  EXPECT_FALSE(r.energy_mj);
  EXPECT_FALSE(r.clock_reasons);
  EXPECT_TRUE(r.util_percent);
}

// ---- The summary ----

// One device's readings from columns of values (empty optionals where a vector is short).
std::vector<Reading> series_of(std::vector<unsigned> util, std::vector<unsigned> clock, std::vector<double> power,
                               std::vector<unsigned> temp, std::vector<std::uint64_t> mem) {
  std::size_t n = std::max({util.size(), clock.size(), power.size(), temp.size(), mem.size()});
  std::vector<Reading> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (i < util.size()) out[i].util_percent = util[i];
    if (i < clock.size()) out[i].sm_clock_mhz = clock[i];
    if (i < power.size()) out[i].power_w = power[i];
    if (i < temp.size()) out[i].temp_c = temp[i];
    if (i < mem.size()) {
      out[i].mem_used_bytes = mem[i];
      out[i].mem_is_process = true;
    }
  }
  return out;
}

TEST(Summary, MediansMinimumAndMaximaOfOneDevice) {
  const GpuSummary s = summarise({series_of({10, 90, 50, 70}, {1800, 1000, 1500, 1200}, {300, 100, 200, 250},
                                            {60, 75, 70, 65}, {100, 400, 300, 200})});
  EXPECT_EQ(s.samples, 4);
  EXPECT_DOUBLE_EQ(*s.util_median, 60);  // (50 + 70) / 2
  EXPECT_DOUBLE_EQ(*s.sm_clock_min_mhz, 1000);
  EXPECT_DOUBLE_EQ(*s.sm_clock_median_mhz, 1350);
  EXPECT_DOUBLE_EQ(*s.power_median_w, 225);
  EXPECT_DOUBLE_EQ(*s.temp_max_c, 75);
  EXPECT_EQ(s.mem_used_bytes, 400u);
  EXPECT_TRUE(s.mem_is_process);
  const auto c = s.counters(10);
  EXPECT_DOUBLE_EQ(c.at("gpu_util"), 60);
  EXPECT_DOUBLE_EQ(c.at("gpu_sm_clock_min_mhz"), 1000);
  EXPECT_DOUBLE_EQ(c.at("gpu_sm_clock_median_mhz"), 1350);
  EXPECT_DOUBLE_EQ(c.at("gpu_power_w"), 225);
  EXPECT_DOUBLE_EQ(c.at("gpu_temp_max_c"), 75);
  EXPECT_DOUBLE_EQ(c.at("gpu_mem_used_bytes"), 400);
  EXPECT_DOUBLE_EQ(c.at("gpu_samples"), 4);
  EXPECT_EQ(c.count("energy_j_per_sample"), 0u) << "no energy readings";
  EXPECT_EQ(c.count("gpu_throttle"), 0u) << "no clock reasons read";
}

// The summary's power is instantaneous only where every reading of every device was.
TEST(Summary, PowerIsInstantaneousOnlyWhereEveryReadingWas) {
  std::vector<Reading> a = series_of({}, {}, {100, 200}, {}, {}), b = series_of({}, {}, {300, 300}, {}, {});
  for (Reading& r : a) r.power_instant = true;
  for (Reading& r : b) r.power_instant = true;
  EXPECT_TRUE(summarise({a, b}).power_instant);
  b[1].power_instant = false;
  const GpuSummary mixed = summarise({a, b});
  EXPECT_FALSE(mixed.power_instant);
  EXPECT_DOUBLE_EQ(*mixed.power_median_w, 150 + 300);
}

// A sample whose power could not be read (a failed call) says nothing about how power is read: the
// other samples' instantaneous readings keep the column instantaneous.
TEST(Summary, SamplesWithoutPowerLeaveItInstantaneous) {
  std::vector<Reading> r = series_of({}, {}, {100, 200, 300}, {}, {});
  for (Reading& reading : r) reading.power_instant = true;
  r[1].power_w.reset();
  r[1].power_instant = false;
  const GpuSummary s = summarise({r});
  EXPECT_TRUE(s.power_instant);
  EXPECT_DOUBLE_EQ(*s.power_median_w, 200);
}

TEST(Summary, OddCountMedianIsTheMiddleValue) {
  const GpuSummary s = summarise({series_of({10, 90, 50, 70, 30}, {}, {}, {}, {})});
  EXPECT_DOUBLE_EQ(*s.util_median, 50);
  EXPECT_FALSE(s.sm_clock_min_mhz);
  EXPECT_FALSE(s.power_median_w);
}

TEST(Summary, EnergyPerSampleIsCounterDeltaOverSamplesTrained) {
  std::vector<Reading> r(3);
  r[0].energy_mj = 1000000;
  r[1].energy_mj = 1200000;
  r[2].energy_mj = 1600000;
  const GpuSummary s = summarise({r});
  ASSERT_TRUE(s.energy_j);
  EXPECT_DOUBLE_EQ(*s.energy_j, 600);
  EXPECT_DOUBLE_EQ(s.counters(300).at("energy_j_per_sample"), 2.0);
  EXPECT_EQ(s.counters(0).count("energy_j_per_sample"), 0u) << "no samples trained: no per-sample energy";
}

TEST(Summary, EnergyNeedsTheCounterAtStartAndStopOnEveryDevice) {
  std::vector<Reading> full(2), no_stop(2);
  full[0].energy_mj = 0;
  full[1].energy_mj = 5000;
  no_stop[0].energy_mj = 0;
  EXPECT_FALSE(summarise({full, no_stop}).energy_j);
  EXPECT_DOUBLE_EQ(*summarise({full, full}).energy_j, 10);
  std::vector<Reading> reloaded(2);  // the driver reloaded: the counter started again
  reloaded[0].energy_mj = 9000;
  reloaded[1].energy_mj = 100;
  EXPECT_FALSE(summarise({reloaded}).energy_j);
}

TEST(Summary, ThrottleIsTheUnionOfReasonsWithoutIdle) {
  std::vector<Reading> r(3);
  r[0].clock_reasons = 0x1;
  r[1].clock_reasons = 0x4;
  r[2].clock_reasons = 0x1 | 0x40;
  const GpuSummary s = summarise({r});
  EXPECT_TRUE(s.throttle_known);
  EXPECT_EQ(s.throttle_mask, 0x44u);
  EXPECT_DOUBLE_EQ(s.counters(1).at("gpu_throttle"), 0x44);
  EXPECT_EQ(throttle_reason_names(s.throttle_mask), "sw_power_cap+hw_thermal_slowdown");

  std::vector<Reading> idle(2);
  idle[0].clock_reasons = 0x1;
  idle[1].clock_reasons = 0x1;
  const GpuSummary i = summarise({idle});
  EXPECT_TRUE(i.throttle_known);
  EXPECT_EQ(i.throttle_mask, 0u);
  EXPECT_DOUBLE_EQ(i.counters(1).at("gpu_throttle"), 0);
}

TEST(Summary, ThrottleReasonNames) {
  EXPECT_EQ(throttle_reason_names(0), "none");
  EXPECT_EQ(throttle_reason_names(0x1), "gpu_idle");
  EXPECT_EQ(throttle_reason_names(0x2 | 0x8 | 0x10), "applications_clocks_setting+hw_slowdown+sync_boost");
  EXPECT_EQ(throttle_reason_names(0x20 | 0x80 | 0x100),
            "sw_thermal_slowdown+hw_power_brake_slowdown+display_clock_setting");
  EXPECT_EQ(throttle_reason_names(0x4 | 0x1000 | 0x4000), "sw_power_cap+0x5000");
}

TEST(Summary, TwoDevicesCombineAsDocumented) {
  auto a = series_of({40, 40, 40}, {1400, 1500, 1600}, {200, 210, 220}, {60, 61, 62}, {100, 300, 200});
  auto b = series_of({80, 90, 70}, {1100, 1900, 1700}, {300, 300, 300}, {70, 80, 75}, {1000, 1000, 1000});
  b[1].mem_is_process = false;  // this device's pid was not listed once
  const GpuSummary s = summarise({a, b});
  EXPECT_EQ(s.samples, 3);
  EXPECT_DOUBLE_EQ(*s.util_median, 60);       // mean of 40 and 80
  EXPECT_EQ(s.mem_used_bytes, 300u + 1000u);  // sum of each device's maximum
  EXPECT_FALSE(s.mem_is_process);
  EXPECT_DOUBLE_EQ(*s.power_median_w, 210 + 300);  // sum of medians
  EXPECT_DOUBLE_EQ(*s.sm_clock_min_mhz, 1100);     // over both devices
  EXPECT_DOUBLE_EQ(*s.sm_clock_median_mhz, 1550);  // of 1100 1400 1500 1600 1700 1900
  EXPECT_DOUBLE_EQ(*s.temp_max_c, 80);
}

// Whichever device lacks it, first or last: a sum or mean over the devices that had it would pass
// for the whole machine's.
TEST(Summary, ADeviceWithoutAColumnEmptiesTheCombinedColumn) {
  auto a = series_of({40, 40}, {1400, 1500}, {200, 200}, {}, {100, 100});
  auto b = series_of({}, {1100, 1100}, {}, {}, {});
  for (const bool lacking_first : {false, true}) {
    const GpuSummary s = lacking_first ? summarise({b, a}) : summarise({a, b});
    EXPECT_FALSE(s.util_median) << lacking_first;
    EXPECT_FALSE(s.power_median_w) << lacking_first;
    EXPECT_FALSE(s.mem_used_bytes) << lacking_first;
    EXPECT_FALSE(s.mem_is_process) << lacking_first;
    EXPECT_DOUBLE_EQ(*s.sm_clock_min_mhz, 1100) << lacking_first;
  }
}

// ---- The sampler ----

TEST(GpuSampler, SamplesAtAboutTenHertzAndMeasuresEnergy) {
  FakeNvml fake(TB_FAKE_NVML);
  fake.series(0, "util", {95});
  fake.set_energy(0, 5000000, 100);  // 0.1 J between reads
  fake.processes(0, {kPid}, {2ULL << 30});
  auto nvml = load_or_fail(TB_FAKE_NVML);
  ASSERT_TRUE(nvml);
  GpuSampler sampler(*nvml, {"0000:01:00.0"}, kPid);
  const auto started = std::chrono::steady_clock::now();
  sampler.start();
  // The thread samples (start's sample is the first read), however late a busy machine runs it;
  // the deadline only keeps a broken sampler from hanging the test.
  while (fake.calls("nvmlDeviceGetUtilizationRates") < 2 && std::chrono::steady_clock::now() - started < 30s)
    std::this_thread::sleep_for(10ms);
  std::this_thread::sleep_for(500ms);
  const GpuSummary s = sampler.stop();
  const double elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  // start's sample, the thread's (one per 100 ms at most: a slow machine takes fewer, never
  // more), stop's sample.
  EXPECT_GE(s.samples, 3);
  EXPECT_LE(s.samples, 3 + int(elapsed_s / 0.1)) << elapsed_s << " s";
  EXPECT_EQ(s.samples, fake.calls("nvmlDeviceGetUtilizationRates")) << "a sample is one read of the device";
  EXPECT_EQ(s.samples, fake.calls("nvmlDeviceGetTotalEnergyConsumption"));
  ASSERT_TRUE(s.energy_j);
  EXPECT_NEAR(*s.energy_j, 0.1 * (s.samples - 1), 1e-9);
  EXPECT_DOUBLE_EQ(*s.util_median, 95);
  EXPECT_EQ(s.mem_used_bytes, 2ULL << 30);
  EXPECT_TRUE(s.mem_is_process);
}

// A run shorter than the period still has its samples at start and at stop, and so its energy.
TEST(GpuSampler, RunShorterThanThePeriodHasItsStartAndStopSamples) {
  FakeNvml fake(TB_FAKE_NVML);
  fake.set_energy(0, 5000000, 250);  // 0.25 J between reads
  auto nvml = load_or_fail(TB_FAKE_NVML);
  ASSERT_TRUE(nvml);
  GpuSampler sampler(*nvml, {"0000:01:00.0"}, kPid, std::chrono::hours(1));
  sampler.start();
  const GpuSummary s = sampler.stop();
  EXPECT_EQ(s.samples, 2);
  EXPECT_EQ(fake.calls("nvmlDeviceGetTotalEnergyConsumption"), 2);
  ASSERT_TRUE(s.energy_j);
  EXPECT_DOUBLE_EQ(*s.energy_j, 0.25);
}

// The sampling thread's CPU time, which the caller leaves out of the run's: more than nothing, less
// than the wall time the thread lived.
TEST(GpuSampler, ReportsItsThreadsCpuTime) {
  FakeNvml fake(TB_FAKE_NVML);
  auto nvml = load_or_fail(TB_FAKE_NVML);
  ASSERT_TRUE(nvml);
  GpuSampler sampler(*nvml, {"0000:01:00.0"}, kPid, 5ms);
  const auto started = std::chrono::steady_clock::now();
  sampler.start();
  std::this_thread::sleep_for(100ms);
  const GpuSummary s = sampler.stop();
  const double elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_GT(s.thread_cpu_s, 0.0);
  EXPECT_LT(s.thread_cpu_s, elapsed_s);
}

// Waits until `symbol` has been called `count` times, however late a busy machine runs the
// sampler; the deadline only keeps a broken sampler from hanging the test.
void wait_for_calls(FakeNvml& fake, const char* symbol, int count) {
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (fake.calls(symbol) < count && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
}

double milliseconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// Samples every 50 ms with the thread's second read stalled for `stall`, and checks that the
// schedule starts again a period after the stalled read returns: no catch-up sample for the
// instants the stall missed, then one sample a period. Each sample begins with
// nvmlDeviceGetUtilizationRates, so the fake's call times are the samples' start times.
void expect_schedule_restarts_after_stall(std::chrono::milliseconds stall) {
  constexpr auto kPeriod = 50ms;
  constexpr int kStalledRead = 3;  // start's read, the thread's first, then this one
  constexpr int kReadsAfter = 4;   // the thread's samples awaited after the stall
  FakeNvml fake(TB_FAKE_NVML);
  fake.set_energy(0, 5000000, 100);  // 0.1 J between reads
  fake.delay("nvmlDeviceGetUtilizationRates", kStalledRead, stall);
  auto nvml = load_or_fail(TB_FAKE_NVML);
  ASSERT_TRUE(nvml);
  GpuSampler sampler(*nvml, {"0000:01:00.0"}, kPid, kPeriod);
  sampler.start();
  wait_for_calls(fake, "nvmlDeviceGetUtilizationRates", kStalledRead + kReadsAfter);
  const GpuSummary s = sampler.stop();

  const auto starts = fake.call_times("nvmlDeviceGetUtilizationRates");
  ASSERT_GE(starts.size(), std::size_t(kStalledRead + kReadsAfter + 1)) << "the thread's samples and stop's";
  const auto stalled = starts[kStalledRead - 1];
  // The n-th sample after the stall is due n periods after the stalled read returned, and a
  // loaded machine only makes it later; the last start is stop's, which keeps no schedule.
  for (std::size_t i = kStalledRead; i + 1 < starts.size(); ++i) {
    const auto periods_after = int(i) - kStalledRead + 1;
    EXPECT_GE(starts[i] - stalled, stall + periods_after * kPeriod)
        << "read " << i + 1 << " began " << milliseconds(starts[i] - stalled) << " ms after the " << stall.count()
        << " ms stalled one: a catch-up sample, not one on the schedule restarted after the stall";
  }
  // The stalled read is a sample like the others, and the energy counter spans them all.
  EXPECT_EQ(s.samples, int(starts.size()));
  ASSERT_TRUE(s.energy_j);
  EXPECT_NEAR(*s.energy_j, 0.1 * (s.samples - 1), 1e-9);
}

// A read that stalls for ten periods (a driver busy with a GPU reset) is one late sample. A
// schedule that kept its old instants would take every one it missed at once when the read
// returned: a burst of readings of the same moment.
TEST(GpuSampler, AStalledReadRestartsTheScheduleWithoutABurst) { expect_schedule_restarts_after_stall(500ms); }

// A read only a little longer than the period is a stall too: the next sample comes a period
// after it, not at once to make up the instant it overran.
TEST(GpuSampler, AReadLongerThanThePeriodIsNotFollowedAtOnce) { expect_schedule_restarts_after_stall(75ms); }

// Reads that take a good part of the period do not stretch it: samples begin a period apart,
// not a period after the previous read ended.
TEST(GpuSampler, SlowReadsDoNotStretchThePeriod) {
  constexpr auto kPeriod = 100ms;
  constexpr auto kRead = 30ms;
  constexpr int kThreadSamples = 6;
  FakeNvml fake(TB_FAKE_NVML);
  fake.delay("nvmlDeviceGetUtilizationRates", 0, kRead);
  auto nvml = load_or_fail(TB_FAKE_NVML);
  ASSERT_TRUE(nvml);
  GpuSampler sampler(*nvml, {"0000:01:00.0"}, kPid, kPeriod);
  sampler.start();
  wait_for_calls(fake, "nvmlDeviceGetUtilizationRates", 1 + kThreadSamples);
  sampler.stop();

  const auto starts = fake.call_times("nvmlDeviceGetUtilizationRates");
  ASSERT_GE(starts.size(), std::size_t(kThreadSamples + 2)) << "start's sample, the thread's and stop's";
  // Between the thread's samples (start's and stop's keep no schedule). Timed from the end of each
  // read, every interval would be at least kPeriod + kRead; on the fixed schedule one is a period
  // unless the machine woke the thread late, and one woken on time in five is all this asks.
  auto shortest = std::chrono::steady_clock::duration::max();
  for (std::size_t i = 2; i + 1 < starts.size(); ++i) shortest = std::min(shortest, starts[i] - starts[i - 1]);
  EXPECT_LT(shortest, kPeriod + kRead) << "the shortest interval between samples was " << milliseconds(shortest)
                                       << " ms: the schedule drifts by each read's time";
}

TEST(GpuSampler, TwoDevicesOneWithoutThePid) {
  FakeNvml fake(TB_FAKE_NVML);
  fake.reset(2);
  fake.series(0, "util", {20});
  fake.series(1, "util", {60});
  fake.series(0, "power_mw", {100000});
  fake.series(1, "power_mw", {150000});
  fake.processes(0, {kPid}, {3ULL << 30});
  fake.set_device_used(1, 7ULL << 30);
  auto nvml = load_or_fail(TB_FAKE_NVML);
  ASSERT_TRUE(nvml);
  GpuSampler sampler(*nvml, {fake.bus_id(0), "0000:02:00.0"}, kPid, 20ms);
  sampler.start();
  std::this_thread::sleep_for(100ms);
  const GpuSummary s = sampler.stop();
  EXPECT_GE(s.samples, 2);
  EXPECT_DOUBLE_EQ(*s.util_median, 40);
  EXPECT_DOUBLE_EQ(*s.power_median_w, 250);
  EXPECT_EQ(s.mem_used_bytes, (3ULL << 30) + (7ULL << 30));
  EXPECT_FALSE(s.mem_is_process);
  // The fake's counter did not move: 0 J, known (dereferenced empty, the optional passed as 0).
  ASSERT_TRUE(s.energy_j);
  EXPECT_DOUBLE_EQ(*s.energy_j, 0);
}

TEST(GpuSampler, StopWithoutStartHasNoSamples) {
  FakeNvml fake(TB_FAKE_NVML);
  auto nvml = load_or_fail(TB_FAKE_NVML);
  ASSERT_TRUE(nvml);
  GpuSampler sampler(*nvml, {"0000:01:00.0"}, kPid);
  const GpuSummary s = sampler.stop();
  EXPECT_EQ(s.samples, 0);
  EXPECT_FALSE(s.util_median);
  EXPECT_EQ(fake.calls("nvmlDeviceGetUtilizationRates"), 0);
  EXPECT_EQ(s.counters(100).size(), 1u);
}

TEST(GpuSampler, StartTwiceThrowsAndRestartsAfterStop) {
  FakeNvml fake(TB_FAKE_NVML);
  auto nvml = load_or_fail(TB_FAKE_NVML);
  ASSERT_TRUE(nvml);
  GpuSampler sampler(*nvml, {"0000:01:00.0"}, kPid, 10ms);
  sampler.start();
  EXPECT_THROW(sampler.start(), Error);
  std::this_thread::sleep_for(30ms);
  EXPECT_GE(sampler.stop().samples, 2);
  const int reads_before = fake.calls("nvmlDeviceGetUtilizationRates");
  sampler.start();
  const GpuSummary second = sampler.stop();
  EXPECT_EQ(second.samples, fake.calls("nvmlDeviceGetUtilizationRates") - reads_before)
      << "the second run kept the first run's samples";
}

TEST(GpuSampler, DestructorStopsARunningThread) {
  FakeNvml fake(TB_FAKE_NVML);
  auto nvml = load_or_fail(TB_FAKE_NVML);
  ASSERT_TRUE(nvml);
  {
    GpuSampler sampler(*nvml, {"0000:01:00.0"}, kPid, 10ms);
    sampler.start();
    std::this_thread::sleep_for(60ms);
  }
  const int calls = fake.calls("nvmlDeviceGetUtilizationRates");
  EXPECT_GE(calls, 2);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(fake.calls("nvmlDeviceGetUtilizationRates"), calls) << "sampling went on after the destructor";
}

// A period of zero would sample in a busy loop.
TEST(GpuSampler, ZeroPeriodIsRefused) {
  FakeNvml fake(TB_FAKE_NVML);
  auto nvml = load_or_fail(TB_FAKE_NVML);
  ASSERT_TRUE(nvml);
  try {
    GpuSampler sampler(*nvml, {"0000:01:00.0"}, kPid, 0ms);
    FAIL() << "a sampling period of 0 ms was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the sampling period is 0 ms"), std::string::npos) << e.what();
  }
}

TEST(GpuSampler, UnknownBusIdThrowsAtConstruction) {
  FakeNvml fake(TB_FAKE_NVML);
  auto nvml = load_or_fail(TB_FAKE_NVML);
  ASSERT_TRUE(nvml);
  EXPECT_THROW(GpuSampler(*nvml, {"0000:01:00.0", "0000:42:00.0"}, kPid), Error);
}

TEST(GpuSampler, LostGpuLeavesItsFieldsEmptyAndTheRunGoesOn) {
  FakeNvml fake(TB_FAKE_NVML);
  fake.fail("nvmlDeviceGetUtilizationRates", 15);  // NVML_ERROR_GPU_IS_LOST
  fake.series(0, "sm_clock", {1700});
  auto nvml = load_or_fail(TB_FAKE_NVML);
  ASSERT_TRUE(nvml);
  GpuSampler sampler(*nvml, {"0000:01:00.0"}, kPid, 10ms);
  sampler.start();
  std::this_thread::sleep_for(50ms);
  const GpuSummary s = sampler.stop();
  EXPECT_GE(s.samples, 2);
  EXPECT_FALSE(s.util_median);
  EXPECT_EQ(s.counters(1).count("gpu_util"), 0u);
  EXPECT_DOUBLE_EQ(*s.sm_clock_median_mhz, 1700);
}

// ---- The real NVML ----

TEST(RealNvml, ReadsTheGpu) {
  std::string why;
  auto nvml = Nvml::load(&why);
  if (!nvml) {
    GTEST_SKIP() << "no NVIDIA driver: " << why;
  }
  if (nvml->device_count() == 0) {
    GTEST_SKIP() << "NVML loaded (driver " << nvml->driver_version() << ") but sees no GPU";
  }
  EXPECT_FALSE(nvml->driver_version().empty());
  const Device device = nvml->device_by_index(0);
  std::vector<Reading> readings;
  for (int i = 0; i < 4; ++i) {
    if (i > 0) std::this_thread::sleep_for(100ms);
    readings.push_back(nvml->read(device, unsigned(getpid())));
  }
  for (const Reading& r : readings) {
    ASSERT_TRUE(r.util_percent);
    EXPECT_LE(*r.util_percent, 100u);
    ASSERT_TRUE(r.mem_used_bytes);
    EXPECT_GT(*r.mem_used_bytes, 0u);
    ASSERT_TRUE(r.sm_clock_mhz);
    EXPECT_GT(*r.sm_clock_mhz, 0u);
    ASSERT_TRUE(r.power_w);
    EXPECT_GT(*r.power_w, 1.0) << "a powered GPU draws more than a watt";
  }
  if (readings.front().energy_mj && readings.back().energy_mj) {
    EXPECT_LE(*readings.front().energy_mj, *readings.back().energy_mj);
  }
  const GpuSummary s = summarise({readings});
  std::cout << "GPU 0, driver " << nvml->driver_version() << ": util " << *s.util_median << "%, SM "
            << *s.sm_clock_median_mhz << " MHz, " << *s.power_median_w << " W, throttle "
            << throttle_reason_names(s.throttle_mask) << "\n";
}

}  // namespace
}  // namespace tb::telemetry
