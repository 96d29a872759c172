// Predicted N-device rows (predict.hpp): choosing links and device counts, the model, the rows.
#include "bench/predict/predict.hpp"

#include <algorithm>
#include <cstring>
#include <iostream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench/output/rows.hpp"
#include "engine/backends.hpp"
#include "engine/parallel/world.hpp"

namespace tb::bench {

namespace {

// A prediction and the measured row it is for share this key: the workload, precision, batch,
// the variant but for emulated_nodes (where the ranks ran, not what they ran) and the device.
std::string prediction_key(const BenchInfo& info, const std::string& device) {
  std::string variant = info.variant;
  for (const char* where : {"/emulated_nodes", "emulated_nodes"})
    if (const auto at = variant.find(where); at != std::string::npos) variant.erase(at, std::strlen(where));
  return fmt::format("{}/{}/{}/{}/{}/{}", info.model, info.dataset, info.precision, info.batch, variant, device);
}

// "compute 13.1, sharing +2.4, ...": each term in ms, the step's first, the others as added.
std::string terms_text(const parallel::Prediction& p) {
  std::vector<std::string> parts;
  for (const parallel::Term& t : p.terms)
    parts.push_back(fmt::format("{} {}{:.3g} ({:.3g} to {:.3g})", t.name, parts.empty() ? "" : "+", t.s * 1e3,
                                t.low * 1e3, t.high * 1e3));
  return fmt::format("{} ms", fmt::join(parts, ", "));
}

std::string link_text(const parallel::Link& link) {
  return fmt::format("{} ({:.3g} GB/s{}, {:.3g} us)", link.name, link.busbw_gbps,
                     link.low_busbw() < link.busbw_gbps ? fmt::format(", low {:.3g}", link.low_busbw()) : "",
                     link.latency_us);
}

}  // namespace

Predictor::Predictor(const Flags& flags) : links_(flags.links) {
  for (const std::string& link : links_) parallel::parse_link(link);  // a bad --link fails before measuring
}

void Predictor::measure_world_link(const std::vector<BenchInfo>& benchmarks) {
  const parallel::World& world = parallel::world();
  if (world.size < 2) return;
  const auto say = [&](const parallel::Link& link) {
    if (world.rank == 0)
      std::cerr << fmt::format("trainbench: measured link: {}: latency {:.3g} us + 2(N-1)/N x bytes / {:.3g} GB/s\n",
                               link.source, link.latency_us * std::max(1, world.size - 1), link.busbw_gbps);
  };
  world_link_ = parallel::measure_world_link(-1);
  say(*world_link_);
  for (const BenchInfo& b : benchmarks)
    if (b.gpu() && b.device_kind->across_ranks && b.skip_reason.empty()) {
      nccl_link_ = parallel::measure_world_link(b.gpu_ordinal);  // every rank's own GPU
      say(*nccl_link_);
      break;
    }
}

void Predictor::record(const std::string& benchmark, parallel::OneDevice measured) {
  measured_[benchmark] = std::move(measured);
}

std::vector<parallel::Link> Predictor::links_for(const BenchInfo& info) const {
  std::vector<parallel::Link> links;
  for (const std::string& name : links_) {
    const parallel::Link link = parallel::parse_link(name);
    if (link.name != "measured")
      links.push_back(link);
    else if (info.gpu() && nccl_link_)
      links.push_back(*nccl_link_);
    else if (!info.gpu() && world_link_)
      links.push_back(*world_link_);
  }
  if (links_.empty() && info.gpu()) links.push_back(parallel::parse_link("nvlink4"));
  if (links_.empty() && !info.gpu() && world_link_) links.push_back(*world_link_);
  // CPU ranks all-reduce on the cores backward computes on: nothing hides, whatever the link.
  for (parallel::Link& link : links)
    if (!info.gpu()) link.overlaps_compute = false;
  return links;
}

std::vector<int> Predictor::device_counts(const BenchInfo& info, const parallel::Link& link) const {
  // A measured link is this run's: its N. A preset: 2, 4 and 8, and this machine's GPUs beyond.
  if (link.name == "measured") return {parallel::world().size};
  std::vector<int> counts{2, 4, 8};
  const int gpus = int(gpu_inventory().devices.size());
  if (info.gpu() && gpus > 8) counts.push_back(gpus);
  return counts;
}

std::vector<PredictedRow> Predictor::predict(const BenchInfo& info, double samples_per_s,
                                             const MachineContext& machine) {
  const auto found = measured_.find(info.name);
  if (found == measured_.end() || found->second.timeline.empty() || samples_per_s <= 0) return {};
  std::vector<PredictedRow> out;
  for (const parallel::Link& link : links_for(info)) {
    parallel::OneDevice one = found->second;
    one.step_s = double(info.batch) / samples_per_s;
    one.batch = double(info.batch);
    // Devices over a preset link are machines or GPUs of their own; over this run's measured link,
    // the ranks share what they shared when it was measured (the sharing probe's slow-down).
    if (link.name != "measured") {
      one.sharing = parallel::Range::exactly(1);
      one.sharing_source = "none: devices of their own";
    }
    for (int n : device_counts(info, link)) {
      const parallel::Prediction q = parallel::predict(one, n, link);
      const std::string device = fmt::format("{}:{}", info.gpu() ? "gpu" : "mpi", n);
      made_[prediction_key(info, device)].push_back(Made{info.name, info.threads, link, q});
      const std::string variant = info.variant.empty() ? "" : info.variant + "/";
      Row row = identity_row(info, machine);
      row["benchmark"] = fmt::format("{}/{}/{}/{}/{}/bs:{}/{}predicted:{}", kind_name(info.kind), info.model,
                                     info.dataset, device, info.precision, info.batch, variant, link.name);
      row["device"] = device;
      row["variant"] = variant + "predicted:" + link.name;
      row["measurement"] = "predicted";
      row["link"] = link.name;
      row["predicted_from"] = info.name;
      row["run_type"] = "iteration";
      row["status"] = "ok";
      row["iterations"] = std::to_string(one.timeline.steps);
      row["dominant_term"] = q.dominant;
      row["message"] = fmt::format(
          "predicted from {}'s timeline over {} ({}{}); terms: {}; data-parallel overhead: {}; sharing: {}; assumes {}",
          info.name, link.name, link.source, link.low_source.empty() ? "" : "; low: " + link.low_source, terms_text(q),
          one.dp_overhead_source.empty() ? "not measured" : one.dp_overhead_source,
          one.sharing_source.empty() ? "none measured" : one.sharing_source, parallel::kPredictionAssumptions);
      add_counters(row,
                   {{"samples_per_s", q.samples_per_s},
                    {"samples_per_s_low", q.samples_per_s_low},
                    {"samples_per_s_high", q.samples_per_s_high},
                    {"step_time_s", q.step_s},
                    {"scaling_efficiency", q.efficiency},
                    {"comm_s_per_step", q.exposed_comm_s},
                    {"comm_share", q.exposed_comm_s / q.step_s},
                    {"allreduce_bytes_per_step", one.timeline.gradient_bytes()},
                    {"replicas", double(n)},
                    {"link_busbw_gbps", link.busbw_gbps},
                    {"link_latency_us", link.latency_us}},
                   false);
      out.push_back(PredictedRow{
          std::move(row),
          fmt::format("  predicted {} over {}: {:.0f} samples/s (band {:.0f} to {:.0f}, dominated by {}), {:.0f}% "
                      "efficiency, exposed communication {:.3g} ms of {:.3g} ms per step",
                      device, link_text(link), q.samples_per_s, q.samples_per_s_low, q.samples_per_s_high, q.dominant,
                      100 * q.efficiency, q.exposed_comm_s * 1e3, q.comm_s * 1e3)});
    }
  }
  return out;
}

std::vector<std::string> Predictor::compare(const BenchInfo& measured, double samples_per_s) const {
  std::vector<std::string> lines;
  const auto it = made_.find(prediction_key(measured, measured.device));
  if (it == made_.end() || samples_per_s <= 0) return lines;
  for (const Made& made : it->second) {
    if (made.threads != measured.threads) continue;  // mpi:2 of one thread per rank from cpu:1, not cpu
    const parallel::Prediction& q = made.prediction;
    const bool inside = samples_per_s >= q.samples_per_s_low && samples_per_s <= q.samples_per_s_high;
    lines.push_back(fmt::format(
        "  {}: measured {:.0f} samples/s; predicted {:.0f} (band {:.0f} to {:.0f}) from {} over {}: measured / "
        "predicted = {:.2f}, {} the band",
        measured.name, samples_per_s, q.samples_per_s, q.samples_per_s_low, q.samples_per_s_high, made.from,
        link_text(made.link), samples_per_s / q.samples_per_s, inside ? "inside" : "outside"));
  }
  return lines;
}

}  // namespace tb::bench
