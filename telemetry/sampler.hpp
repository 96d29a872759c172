// Samples GPUs through NVML on a thread (~10 Hz) while a benchmark runs, and summarises the run
// into the GPU columns of the CSV: utilisation, memory, SM clock, power, energy per sample,
// temperature and the clock-event (throttle) reasons seen.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "telemetry/nvml.hpp"

namespace tb::telemetry {

// One run's GPU columns. Fields over several devices combine as written beside them; a field
// stays empty when any device could not give it, so that no column is made up from part of the GPUs.
struct GpuSummary {
  int samples = 0;                              // sampling instants (each reads every device once)
  std::optional<double> util_median;            // %: each device's median, averaged over devices
  std::optional<std::uint64_t> mem_used_bytes;  // each device's maximum, summed over devices
  bool mem_is_process = false;                  // false when any device reported device-wide memory
  std::optional<double> sm_clock_min_mhz;       // over all samples of all devices
  std::optional<double> sm_clock_median_mhz;
  std::optional<double> power_median_w;  // each device's median, summed over devices
  bool power_instant = false;            // every power reading was the board's power at the time
  std::optional<double> energy_j;        // counter at stop minus at start, summed over devices
  std::optional<double> temp_max_c;      // over all samples of all devices
  std::uint64_t throttle_mask = 0;       // reasons seen in any sample, GpuIdle removed
  bool throttle_known = false;           // some sample reported its reasons
  double thread_cpu_s = 0;               // CPU time the sampling thread used: the caller's to leave out

  // The CSV counters, only those whose value is known: gpu_util, gpu_mem_used_bytes,
  // gpu_sm_clock_min_mhz, gpu_sm_clock_median_mhz, gpu_power_w, energy_j_per_sample
  // (energy_j / samples_trained), gpu_temp_max_c, gpu_throttle (the mask), gpu_samples.
  std::map<std::string, double> counters(double samples_trained) const;
};

// Summarises per-device series of readings taken at the same instants (series[device][sample]).
// Energy is the last reading's counter minus the first's.
GpuSummary summarise(const std::vector<std::vector<Reading>>& series);

// "sw_power_cap+hw_thermal_slowdown" for a mask of nvmlClocksEventReason* bits; "none" for 0;
// bits NVML had not defined when this was written as one hex number ("0x1000").
std::string throttle_reason_names(std::uint64_t mask);

// Samples the GPUs at `pci_bus_ids` every `period` between start() and stop(), with memory counted
// for process `pid`.
class GpuSampler {
 public:
  // Throws tb::BackendError naming a bus id NVML does not know.
  GpuSampler(Nvml& nvml, std::vector<std::string> pci_bus_ids, unsigned pid,
             std::chrono::milliseconds period = std::chrono::milliseconds(100));
  ~GpuSampler();  // stops a running thread; never throws
  GpuSampler(const GpuSampler&) = delete;
  GpuSampler& operator=(const GpuSampler&) = delete;

  // Takes the first sample (the energy counter at start) now, then one every period on a thread.
  // Throws tb::Error if already started.
  void start();
  // Stops the thread, takes the last sample (the energy counter at stop) and summarises. Without
  // a start() it returns a summary of no samples.
  GpuSummary stop();

 private:
  void sample();  // one reading of every device, appended to series_
  void run();     // the thread

  Nvml& nvml_;
  std::vector<Device> devices_;
  unsigned pid_;
  std::chrono::milliseconds period_;
  std::vector<std::vector<Reading>> series_;  // [device][sample]; the thread's alone while it runs

  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;    // under mutex_
  double thread_cpu_s_ = 0;  // written by the thread as it ends, read after join
  std::thread thread_;
};

}  // namespace tb::telemetry
