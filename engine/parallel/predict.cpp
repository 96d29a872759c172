// The link presets and the all-reduce queue of a predicted N-device step (predict.hpp).
#include "engine/parallel/predict.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "engine/core/stats.hpp"
#include "engine/core/timer.hpp"
#include "engine/parallel/communicator.hpp"

namespace tb::parallel {

double StepTimeline::gradient_bytes() const { return std::accumulate(bucket_bytes.begin(), bucket_bytes.end(), 0.0); }

// Bus bandwidths are what NCCL's ring all-reduce reaches (nccl-tests' busbw), not the line rate;
// latencies are the small-message time of one all-reduce, an order of magnitude (stated as an
// assumption in docs/prediction.md). Sources:
// - nvlink4: H100 SXM on an 8-GPU HGX board. NVLink 4 line rate 450 GB/s per direction (NVIDIA
//   H100 datasheet: 900 GB/s bidirectional); "with the protocol overhead (~20%) NCCL can get an
//   effective NVLink bandwidth of 370GB/s" as ring busbw (NCCL's maintainer, NVIDIA/nccl-tests
//   issue 212). NVLink SHARP reaches more (~480 GB/s); the ring figure is the one this model's
//   formula describes.
// - nvlink3: A100 SXM on an 8-GPU board: 300 GB/s per direction (A100 datasheet: 600 GB/s);
//   nccl-tests all_reduce busbw of about 200-208 GB/s reported on 8x A100 boards
//   (NVIDIA/nccl-tests issues 149 and 178).
// - pcie4, pcie5: x16 between GPUs: 16 and 32 GT/s per lane, about 31.5 and 63 GB/s per
//   direction (PCI-SIG PCIe 4.0 and 5.0); 75% of that as busbw (protocol and the switch).
// - ib_ndr400: one 400 Gb/s InfiniBand NDR port per GPU across nodes, 50 GB/s (NVIDIA
//   ConnectX-7 / Quantum-2 NDR); 90% as busbw, the ring's inter-node step being the bottleneck.
// - pcie4, pcie5 (low): eight GPUs whose ring crosses a PCIe switch or a CPU socket reach far
//   less than the link: about 20 GB/s busbw across sockets on an 8x A100 board
//   (NVIDIA/nccl-tests issue 178), 28 GB/s with 8x RTX 5090 on PCIe 5.0 behind switches on two
//   sockets, 35 with 4 (NVIDIA/nccl issue 1639, where NCCL's maintainer notes that on PCIe
//   systems the CPUs' and memory's bandwidth sets it).
const std::vector<Link>& link_presets() {
  static const std::vector<Link> presets{
      {.name = "nvlink4",
       .busbw_gbps = 370,
       .latency_us = 15,
       .source = "NVLink 4 (H100 SXM, 8-GPU board): ring busbw ~370 GB/s, NVIDIA/nccl-tests#212"},
      {.name = "nvlink3",
       .busbw_gbps = 200,
       .latency_us = 15,
       .source = "NVLink 3 (A100 SXM, 8-GPU board): busbw ~200 GB/s, NVIDIA/nccl-tests#149, #178"},
      {.name = "pcie4",
       .busbw_gbps = 24,
       .latency_us = 25,
       .source = "PCIe 4.0 x16: 31.5 GB/s per direction (PCI-SIG), 75% as busbw",
       .busbw_low_gbps = 20,
       .low_source = "~20 GB/s with 8 GPUs across CPU sockets, NVIDIA/nccl-tests#178"},
      {.name = "pcie5",
       .busbw_gbps = 48,
       .latency_us = 25,
       .source = "PCIe 5.0 x16: 63 GB/s per direction (PCI-SIG), 75% as busbw",
       .busbw_low_gbps = 28,
       .low_source = "28 GB/s with 8 GPUs behind PCIe switches on two sockets, NVIDIA/nccl#1639"},
      {.name = "ib_ndr400",
       .busbw_gbps = 45,
       .latency_us = 30,
       .source = "InfiniBand NDR 400 Gb/s per GPU (NVIDIA ConnectX-7): 50 GB/s, 90% as busbw"},
  };
  return presets;
}

Link parse_link(const std::string& text) {
  for (const Link& l : link_presets())
    if (text == l.name) return l;
  if (text == "measured") return Link{.name = "measured", .source = "measured at start-up"};
  const auto comma = text.find(',');
  char* end = nullptr;
  const std::string bw = text.substr(0, comma);
  const double busbw = std::strtod(bw.c_str(), &end);
  double latency = 0;
  bool ok = !bw.empty() && *end == '\0' && std::isfinite(busbw) && busbw > 0;
  if (ok && comma != std::string::npos) {
    const std::string lat = text.substr(comma + 1);
    latency = std::strtod(lat.c_str(), &end);
    ok = !lat.empty() && *end == '\0' && std::isfinite(latency) && latency >= 0;
  }
  if (!ok) {
    std::string names;
    for (const Link& l : link_presets()) names += l.name + ", ";
    throw InputError(fmt::format(
        "--link: '{}' is neither a preset ({}measured) nor BUSBW_GBPS[,LATENCY_US] (e.g. --link=100,20)", text, names));
  }
  return Link{.name = "custom", .busbw_gbps = busbw, .latency_us = latency, .source = fmt::format("--link={}", text)};
}

double ring_all_reduce_s(double bytes, int n, const Link& link) {
  if (n <= 1 || bytes <= 0) return 0;
  return link.latency_us * 1e-6 + allreduce_bus_factor(n) * bytes / (link.busbw_gbps * 1e9);
}

namespace {

// The swept time of `bytes` among the sweep's ranks, on `times` (one per swept size): between two
// sizes, on the line through them; beyond the largest, at the link's bus bandwidth from there;
// below the smallest, on the line from the fitted latency at no bytes to the smallest size's time.
double swept_s(double bytes, const Link& link, const std::vector<double>& times) {
  const auto& sw = link.sweep;
  const int n = link.sweep_ranks;
  if (bytes <= sw.front().first) {
    const double none = std::min(link.latency_us * 1e-6 * std::max(1, n - 1), times.front());
    return none + (times.front() - none) * bytes / sw.front().first;
  }
  for (std::size_t k = 1; k < sw.size(); ++k)
    if (bytes <= sw[k].first) {
      const double b0 = sw[k - 1].first, b1 = sw[k].first;
      return times[k - 1] + (times[k] - times[k - 1]) * (bytes - b0) / (b1 - b0);
    }
  return times.back() + allreduce_bus_factor(n) * (bytes - sw.back().first) / (link.busbw_gbps * 1e9);
}

}  // namespace

double all_reduce_s(double bytes, int n, const Link& link, double busbw_gbps, bool slowest) {
  if (n <= 1 || bytes <= 0) return 0;
  const double busbw = (busbw_gbps > 0 ? busbw_gbps : link.busbw_gbps) * 1e9;
  if (!link.sweep.empty() && n == link.sweep_ranks) {
    if (slowest && link.sweep_slowest.size() == link.sweep.size()) return swept_s(bytes, link, link.sweep_slowest);
    std::vector<double> medians;
    for (const auto& [b, t] : link.sweep) medians.push_back(t);
    return swept_s(bytes, link, medians) * link.busbw_gbps * 1e9 / busbw;
  }
  const double latency = link.latency_us * 1e-6;
  const double ring = latency * (n - 1) + allreduce_bus_factor(n) * bytes / busbw;
  const double tree = latency * std::ceil(std::log2(double(n))) + 2.0 * bytes / busbw;
  return std::min(ring, tree);
}

double expected_max(std::vector<double> samples, int n) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  // P(max of n draws <= k-th smallest) = (k/m)^n: each sample weighted by its chance of being the max.
  const double m = double(samples.size());
  double e = 0;
  for (std::size_t k = 0; k < samples.size(); ++k)
    e += samples[k] * (std::pow(double(k + 1) / m, n) - std::pow(double(k) / m, n));
  return e;
}

namespace {

struct Queue {
  double exposed = 0, total = 0;
};

// The all-reduces of `t`'s buckets on one stream among n devices, its times stretched by
// `slower` (compute slowed by sharing), at `busbw_gbps` (`slowest`: a swept link's slowest
// repetitions).
Queue queue(const StepTimeline& t, int n, const Link& link, double slower, double busbw_gbps, bool slowest = false) {
  Queue q;
  double done = 0;
  for (std::size_t k = 0; k < t.bucket_bytes.size(); ++k) {
    const double took = all_reduce_s(t.bucket_bytes[k], n, link, busbw_gbps, slowest);
    // On cores shared with compute, nothing starts before backward has let go of them.
    const double ready = (link.overlaps_compute ? t.bucket_ready_s[k] : t.backward_end_s) * slower;
    done = std::max(done, ready) + took;
    q.total += took;
  }
  // The update waits for the last all-reduce; what backward did not hide lengthens the step.
  q.exposed = n > 1 ? std::max(0.0, done - t.backward_end_s * slower) : 0.0;
  return q;
}

}  // namespace

namespace {
// The fastest of the measured step times, scaled to the step the prediction is made from (the
// times are one window's; the step is the median over repetitions); 0 without times.
double fastest_step(const std::vector<double>& times, double step) {
  if (times.empty()) return 0;
  const double m = tb::median(times);
  return m > 0 ? *std::min_element(times.begin(), times.end()) / m * step : 0;
}
}  // namespace

Prediction predict(const OneDevice& one, int devices, const Link& link) {
  const StepTimeline& t = one.timeline;
  TB_CHECK(devices >= 1 && one.step_s > 0 && one.batch > 0, "predict: {} devices, step {} s, batch {}", devices,
           one.step_s, one.batch);
  TB_CHECK(t.bucket_ready_s.size() == t.bucket_bytes.size(), "predict: {} ready times for {} buckets",
           t.bucket_ready_s.size(), t.bucket_bytes.size());
  // The step's relative spread: the same step measured again (the multi-device run is another
  // window, minutes later) moves by about its interquartile range; half of it, which bounds one
  // window's median, left the measured mpi:2 of the MLP 0.4% below the band in a debug build.
  const double step = one.step_s, spread = relative_spread(one.step_times);
  const Range sharing = devices > 1 ? one.sharing : Range::exactly(1);
  const Range dp = devices > 1 ? one.dp_overhead : Range{};
  // A synchronous step waits for the slowest of N: the expected largest of N step times, over
  // their mean, stretches the measured step.
  double stragglers = 0;
  if (devices > 1 && !one.step_times.empty()) {
    const double mean =
        std::accumulate(one.step_times.begin(), one.step_times.end(), 0.0) / double(one.step_times.size());
    stragglers = step * (expected_max(one.step_times, devices) / mean - 1);
  }
  const Queue point = queue(t, devices, link, sharing.value, link.busbw_gbps);
  Queue slow = queue(t, devices, link, sharing.high, link.low_busbw(), true);
  // Between CPU ranks the point counts the all-reduce as not overlapped; MPI's progress can still
  // move some of it during backward, so the fast end lets it overlap as on a GPU. What overlaps
  // runs on the cores backward needs, and the two together can take longer than one after the
  // other (polling, caches): not measured, so the slow end counts the part that could overlap
  // twice.
  Link overlapping = link;
  overlapping.overlaps_compute = true;
  const Queue fast = queue(t, devices, overlapping, sharing.low, link.high_busbw());
  if (!link.overlaps_compute)
    slow.exposed += slow.exposed - queue(t, devices, overlapping, sharing.high, link.low_busbw(), true).exposed;
  Prediction p;
  p.devices = devices;
  p.terms = {
      // A step measured again is no faster than the fastest step seen (a very noisy row's spread
      // can exceed the step itself).
      {"compute", step, std::max(step * (1 - spread), fastest_step(one.step_times, step)), step * (1 + spread)},
      {"sharing", step * (sharing.value - 1), step * (sharing.low - 1), step * (sharing.high - 1)},
      {"stragglers", stragglers, 0, stragglers},
      {"data-parallel overhead", dp.value, dp.low, dp.high},
      {"communication", point.exposed, fast.exposed, slow.exposed},
  };
  for (const Term& term : p.terms) p.step_s += term.s;
  double fastest = 0, slowest = 0;
  for (const Term& term : p.terms) fastest += term.low, slowest += term.high;
  p.exposed_comm_s = point.exposed;
  p.comm_s = point.total;
  p.samples_per_s = devices * one.batch / p.step_s;
  p.samples_per_s_low = devices * one.batch / slowest;
  p.samples_per_s_high = devices * one.batch / fastest;
  p.efficiency = step / p.step_s;
  double widest = -1;
  for (const Term& term : p.terms)
    if (devices > 1 && term.high - term.low > widest) widest = term.high - term.low, p.dominant = term.name;
  return p;
}

Prediction predict(const StepTimeline& t, double step_s, double batch, int devices, const Link& link) {
  return predict(OneDevice{.timeline = t, .step_s = step_s, .batch = batch}, devices, link);
}

Link measure_link(Communicator& comm, std::size_t max_bytes, void* device_buffer) {
  const int n = comm.size();
  std::vector<float> host;
  std::vector<double> x, y;  // ring bytes, seconds
  Link link{.name = "measured", .overlaps_compute = device_buffer != nullptr, .sweep_ranks = n};
  for (std::size_t bytes = std::size_t(4) << 10; bytes <= max_bytes; bytes *= 4) {
    void* data = device_buffer;
    if (!data) {
      host.assign(bytes / sizeof(float), 1.0f);
      data = host.data();
    }
    std::vector<double> times;
    for (int rep = 0; rep < 7; ++rep) {
      comm.barrier();
      const double t0 = wall_seconds();
      comm.start_all_reduce_mean(data, i64(bytes / sizeof(float)), ElemType::F32);
      comm.wait();
      times.push_back(wall_seconds() - t0);
    }
    std::sort(times.begin() + 2, times.end());  // the first two warm up
    const double median = comm.max(times[2 + (times.size() - 2) / 2]);
    link.sweep.emplace_back(double(bytes), median);
    link.sweep_slowest.push_back(comm.max(times.back()));
    x.push_back(allreduce_bus_factor(n) * double(bytes));
    y.push_back(median);
  }
  // Least squares: y = a + b x.
  const double mx = std::accumulate(x.begin(), x.end(), 0.0) / double(x.size());
  const double my = std::accumulate(y.begin(), y.end(), 0.0) / double(y.size());
  double sxy = 0, sxx = 0;
  for (std::size_t k = 0; k < x.size(); ++k) sxy += (x[k] - mx) * (y[k] - my), sxx += (x[k] - mx) * (x[k] - mx);
  const double slope = std::max(sxy / sxx, 1e-15), intercept = std::max(0.0, my - slope * mx);
  link.busbw_gbps = 1.0 / slope * 1e-9;
  // An all-reduce between two is a ring of one step each way: the fitted latency is N-1 of them.
  link.latency_us = intercept * 1e6 / std::max(1, n - 1);
  // The band: the sizes of 1 MiB and more, each one's bus bandwidth beside the fit's, either way.
  double low = link.busbw_gbps, high = link.busbw_gbps;
  for (std::size_t k = 0; k < x.size(); ++k)
    if (link.sweep[k].first >= double(1 << 20) && y[k] > intercept) {
      low = std::min(low, x[k] / (y[k] - intercept) * 1e-9);
      high = std::max(high, x[k] / (y[k] - intercept) * 1e-9);
    }
  link.busbw_low_gbps = low;
  link.busbw_high_gbps = high;
  link.low_source = "the slowest and fastest size of the sweep (1 MiB and up) against the fit";
  link.source =
      fmt::format("{} all-reduce of {} ranks, 4 KiB to {} MiB, measured at start-up", comm.kind(), n, max_bytes >> 20);
  return link;
}

}  // namespace tb::parallel
