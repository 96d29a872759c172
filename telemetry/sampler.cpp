// The sampling thread and the summary of its readings into a run's GPU columns; the formulas are
// the ones GpuSummary's fields state.
#include "telemetry/sampler.hpp"

#include <ctime>

#include <algorithm>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "engine/core/error.hpp"

namespace tb::telemetry {
namespace {

// nvmlClocksEventReason* bits (same values under the older nvmlClocksThrottleReason* names).
constexpr std::uint64_t kGpuIdle = 0x1;
struct ReasonName {
  std::uint64_t bit;
  const char* name;
};
constexpr ReasonName kReasonNames[] = {
    {0x1, "gpu_idle"},
    {0x2, "applications_clocks_setting"},
    {0x4, "sw_power_cap"},
    {0x8, "hw_slowdown"},
    {0x10, "sync_boost"},
    {0x20, "sw_thermal_slowdown"},
    {0x40, "hw_thermal_slowdown"},
    {0x80, "hw_power_brake_slowdown"},
    {0x100, "display_clock_setting"},
};

// The middle value; the mean of the two middle ones for an even count. `values` is not empty.
double median(std::vector<double> values) {
  const std::size_t half = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + std::ptrdiff_t(half), values.end());
  const double upper = values[half];
  if (values.size() % 2 == 1) return upper;
  const double lower = *std::max_element(values.begin(), values.begin() + std::ptrdiff_t(half));
  return (lower + upper) / 2;
}

}  // namespace

GpuSummary summarise(const std::vector<std::vector<Reading>>& series) {
  GpuSummary summary;
  if (series.empty() || series.front().empty()) return summary;
  summary.samples = static_cast<int>(series.front().size());

  // A device missing a quantity in every sample empties the combined column (see GpuSummary).
  bool util_all = true, mem_all = true, power_all = true, energy_all = true, mem_is_process = true;
  bool power_instant = true;
  double util_sum = 0, power_sum = 0, energy_sum_j = 0;
  std::uint64_t mem_sum = 0;
  std::vector<double> clocks;
  for (const std::vector<Reading>& readings : series) {
    std::vector<double> util, power;
    std::optional<std::uint64_t> mem_max;
    for (const Reading& reading : readings) {
      if (reading.util_percent) util.push_back(*reading.util_percent);
      if (reading.mem_used_bytes) {
        mem_max = std::max(mem_max.value_or(0), *reading.mem_used_bytes);
        if (!reading.mem_is_process) mem_is_process = false;
      }
      if (reading.sm_clock_mhz) clocks.push_back(*reading.sm_clock_mhz);
      if (reading.power_w) {
        power.push_back(*reading.power_w);
        power_instant = power_instant && reading.power_instant;
      }
      if (reading.temp_c) summary.temp_max_c = std::max(summary.temp_max_c.value_or(0), double(*reading.temp_c));
      if (reading.clock_reasons) {
        summary.throttle_mask |= *reading.clock_reasons;
        summary.throttle_known = true;
      }
    }
    util_all = util_all && !util.empty();
    if (!util.empty()) util_sum += median(util);
    power_all = power_all && !power.empty();
    if (!power.empty()) power_sum += median(power);
    mem_all = mem_all && mem_max.has_value();
    if (mem_max) mem_sum += *mem_max;
    // The counter only grows while the driver stays loaded; a smaller value at stop means it was
    // reloaded, and the difference would be meaningless.
    const auto first = readings.empty() ? std::nullopt : readings.front().energy_mj;
    const auto last = readings.empty() ? std::nullopt : readings.back().energy_mj;
    if (!first || !last || *last < *first)
      energy_all = false;
    else
      energy_sum_j += double(*last - *first) / 1000.0;
  }
  const double devices = double(series.size());
  if (util_all) summary.util_median = util_sum / devices;
  if (power_all) {
    summary.power_median_w = power_sum;
    summary.power_instant = power_instant;
  }
  if (energy_all) summary.energy_j = energy_sum_j;
  if (mem_all) {
    summary.mem_used_bytes = mem_sum;
    summary.mem_is_process = mem_is_process;
  }
  if (!clocks.empty()) {
    summary.sm_clock_min_mhz = *std::min_element(clocks.begin(), clocks.end());
    summary.sm_clock_median_mhz = median(std::move(clocks));
  }
  // Idle is what the clocks do between kernels, not a limit on the run's speed.
  summary.throttle_mask &= ~kGpuIdle;
  return summary;
}

std::map<std::string, double> GpuSummary::counters(double samples_trained) const {
  std::map<std::string, double> out;
  out["gpu_samples"] = samples;
  if (util_median) out["gpu_util"] = *util_median;
  if (mem_used_bytes) out["gpu_mem_used_bytes"] = double(*mem_used_bytes);
  if (sm_clock_min_mhz) out["gpu_sm_clock_min_mhz"] = *sm_clock_min_mhz;
  if (sm_clock_median_mhz) out["gpu_sm_clock_median_mhz"] = *sm_clock_median_mhz;
  if (power_median_w) out["gpu_power_w"] = *power_median_w;
  if (energy_j && samples_trained > 0) out["energy_j_per_sample"] = *energy_j / samples_trained;
  if (temp_max_c) out["gpu_temp_max_c"] = *temp_max_c;
  if (throttle_known) out["gpu_throttle"] = double(throttle_mask);
  return out;
}

std::string throttle_reason_names(std::uint64_t mask) {
  if (mask == 0) return "none";
  std::string names;
  std::uint64_t unknown = mask;
  const auto append = [&names](std::string_view name) {
    if (!names.empty()) names += '+';
    names += name;
  };
  for (const ReasonName& reason : kReasonNames) {
    if (!(mask & reason.bit)) continue;
    append(reason.name);
    unknown &= ~reason.bit;
  }
  if (unknown) append(fmt::format("{:#x}", unknown));
  return names;
}

GpuSampler::GpuSampler(Nvml& nvml, std::vector<std::string> pci_bus_ids, unsigned pid, std::chrono::milliseconds period)
    : nvml_(nvml), pid_(pid), period_(period) {
  TB_CHECK(period_.count() > 0, "GpuSampler: the sampling period is {} ms; give a positive one", period_.count());
  for (const std::string& id : pci_bus_ids) devices_.push_back(nvml_.device_by_pci_bus_id(id));
}

GpuSampler::~GpuSampler() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void GpuSampler::sample() {
  for (std::size_t device = 0; device < devices_.size(); ++device) {
    Reading reading;
    try {
      reading = nvml_.read(devices_[device], pid_);
    } catch (...) {
      // A sample that cannot be taken is a sample with empty fields, never the end of the run.
    }
    series_[device].push_back(std::move(reading));
  }
}

namespace {
double this_thread_cpu_seconds() {
  timespec t{};
  return clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) == 0 ? double(t.tv_sec) + double(t.tv_nsec) * 1e-9 : 0.0;
}
}  // namespace

void GpuSampler::run() {
  // The thread's own CPU, which the caller's process CPU time includes and leaves out again.
  struct Account {
    double& into;
    ~Account() { into = this_thread_cpu_seconds(); }
  } account{thread_cpu_s_};
  // A fixed schedule, so that slow NVML calls do not stretch the period; after a stall it starts
  // again from now rather than catching up in a burst.
  auto next = std::chrono::steady_clock::now() + period_;
  std::unique_lock lock(mutex_);
  while (!wake_.wait_until(lock, next, [this] { return stopping_; })) {
    lock.unlock();
    try {
      sample();
    } catch (...) {
      // Out of memory for a reading: the summary keeps the samples taken so far.
      return;
    }
    lock.lock();
    next += period_;
    const auto now = std::chrono::steady_clock::now();
    if (next < now) next = now + period_;
  }
}

void GpuSampler::start() {
  TB_CHECK(!thread_.joinable(), "GpuSampler::start: already sampling; call stop() before starting again");
  series_.assign(devices_.size(), {});
  stopping_ = false;  // no thread yet: nothing else reads it
  thread_cpu_s_ = 0;
  sample();
  thread_ = std::thread(&GpuSampler::run, this);
}

GpuSummary GpuSampler::stop() {
  if (!thread_.joinable()) return GpuSummary{};
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  sample();
  GpuSummary summary = summarise(series_);
  summary.thread_cpu_s = thread_cpu_s_;
  return summary;
}

}  // namespace tb::telemetry
