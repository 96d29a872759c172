// The link presets and the all-reduce queue of a predicted N-device step (predict.hpp).
#include "engine/parallel/predict.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include <fmt/format.h>

#include "engine/core/error.hpp"
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
const std::vector<Link>& link_presets() {
  static const std::vector<Link> presets{
      {"nvlink4", 370, 15, "NVLink 4 (H100 SXM, 8-GPU board): ring busbw ~370 GB/s, NVIDIA/nccl-tests#212"},
      {"nvlink3", 200, 15, "NVLink 3 (A100 SXM, 8-GPU board): busbw ~200 GB/s, NVIDIA/nccl-tests#149, #178"},
      {"pcie4", 24, 25, "PCIe 4.0 x16: 31.5 GB/s per direction (PCI-SIG), 75% as busbw"},
      {"pcie5", 48, 25, "PCIe 5.0 x16: 63 GB/s per direction (PCI-SIG), 75% as busbw"},
      {"ib_ndr400", 45, 30, "InfiniBand NDR 400 Gb/s per GPU (NVIDIA ConnectX-7): 50 GB/s, 90% as busbw"},
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
  return link.latency_us * 1e-6 + 2.0 * (n - 1) / n * bytes / (link.busbw_gbps * 1e9);
}

Prediction predict(const StepTimeline& t, double step_s, double batch, int devices, const Link& link) {
  TB_CHECK(devices >= 1 && step_s > 0 && batch > 0, "predict: {} devices, step {} s, batch {}", devices, step_s, batch);
  TB_CHECK(t.bucket_ready_s.size() == t.bucket_bytes.size(), "predict: {} ready times for {} buckets",
           t.bucket_ready_s.size(), t.bucket_bytes.size());
  Prediction p;
  p.devices = devices;
  // One communication stream: each bucket's all-reduce starts once it is ready and the one
  // before it is done.
  double done = 0;
  for (std::size_t k = 0; k < t.bucket_bytes.size(); ++k) {
    const double took = ring_all_reduce_s(t.bucket_bytes[k], devices, link);
    // On cores shared with compute, nothing starts before backward has let go of them.
    const double ready = link.overlaps_compute ? t.bucket_ready_s[k] : t.backward_end_s;
    done = std::max(done, ready) + took;
    p.comm_s += took;
  }
  // The update waits for the last all-reduce; what backward did not hide lengthens the step.
  p.exposed_comm_s = devices > 1 ? std::max(0.0, done - t.backward_end_s) : 0.0;
  p.step_s = step_s + p.exposed_comm_s;
  p.samples_per_s = devices * batch / p.step_s;
  p.efficiency = step_s / p.step_s;
  return p;
}

Link measure_link(Communicator& comm) {
  const int n = comm.size();
  std::vector<double> x, y;  // ring bytes, seconds
  for (std::size_t bytes = std::size_t(64) << 10; bytes <= (std::size_t(16) << 20); bytes *= 4) {
    std::vector<float> buffer(bytes / sizeof(float), 1.0f);
    std::vector<double> times;
    for (int rep = 0; rep < 7; ++rep) {
      comm.barrier();
      const double t0 = wall_seconds();
      comm.start_all_reduce_mean(buffer.data(), i64(buffer.size()), ElemType::F32);
      comm.wait();
      times.push_back(wall_seconds() - t0);
    }
    std::sort(times.begin() + 2, times.end());  // the first two warm up
    x.push_back(2.0 * (n - 1) / n * double(bytes));
    y.push_back(comm.max(times[2 + (times.size() - 2) / 2]));
  }
  // Least squares: y = a + b x.
  const double mx = std::accumulate(x.begin(), x.end(), 0.0) / double(x.size());
  const double my = std::accumulate(y.begin(), y.end(), 0.0) / double(y.size());
  double sxy = 0, sxx = 0;
  for (std::size_t k = 0; k < x.size(); ++k) sxy += (x[k] - mx) * (y[k] - my), sxx += (x[k] - mx) * (x[k] - mx);
  const double slope = std::max(sxy / sxx, 1e-15), intercept = std::max(0.0, my - slope * mx);
  return Link{
      .name = "measured",
      .busbw_gbps = 1.0 / slope * 1e-9,
      .latency_us = intercept * 1e6,
      .source = fmt::format("{} all-reduce of {} ranks, 64 KiB to 16 MiB, measured at start-up", comm.kind(), n),
      .overlaps_compute = false};
}

}  // namespace tb::parallel
