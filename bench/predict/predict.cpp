// Predicted N-device rows (predict.hpp): the policy, the links and device counts, the rows made
// from a one-device row's CSV rows, and the measured row's verdict.
#include "bench/predict/predict.hpp"

#include <algorithm>
#include <cmath>
#include <iostream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench/output/rows.hpp"
#include "bench/predict/inputs.hpp"
#include "bench/schema/columns.hpp"
#include "engine/backends.hpp"
#include "engine/core/error.hpp"
#include "engine/core/stats.hpp"
#include "engine/parallel/world.hpp"

namespace tb::bench {

namespace {

// A prediction and the measured row it is for share everything but where the ranks ran and what
// the prediction assumed.
std::string comparable_variant(const std::string& variant) {
  return variant_without(variant, {"emulated_nodes", "predicted", "network", "from", "replayed"});
}

// A prediction and the measured row it is for share this key.
std::string prediction_key(const std::string& model, const std::string& dataset, const std::string& precision,
                           const std::string& batch, const std::string& variant, const std::string& device) {
  return fmt::format("{}/{}/{}/{}/{}/{}", model, dataset, precision, batch, comparable_variant(variant), device);
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
  return fmt::format("{} ({:.3g} GB/s{}{}, {:.3g} us a step)", link.name, link.busbw_gbps,
                     link.nics > 1 ? fmt::format(" per NIC x {}", link.nics) : "",
                     link.low_busbw() < link.busbw_gbps ? fmt::format(", low {:.3g}", link.low_busbw()) : "",
                     link.latency_us);
}

// The columns a predicted row takes from its source row: its identity and machine context (the
// ranks and hosts of the run that measured it among them), none of what the source measured or
// concluded.
Row source_identity(const Row& source) {
  Row row = source;
  for (const Column& c : columns())
    if (c.kind == ColumnKind::Counter) {
      if (c.type == CellType::Number) row.*c.number = std::nullopt;
      if (c.type == CellType::Text) (row.*c.text).clear();
    }
  row.message.clear();
  row.repetition.reset();
  row.aggregate.clear();
  row.verdicts.clear();
  row.prediction.clear();
  row.prediction_inputs.clear();
  row.window_samples_per_s.clear();
  row.shared_device.reset();
  row.emulated_nodes.reset();
  return row;
}

bool joins_one_node(const parallel::Link& link) { return link.hw == parallel::Hw::NVLink; }

// 2, 4 and 8 devices (per node, over nodes), and this machine's GPUs beyond 8 (where the link
// joins that many); over the run's measured link, the run's ranks.
std::vector<int> default_counts(const parallel::Link& link, bool gpu, int nodes, int gpus_per_node) {
  if (link.name == "measured") return {parallel::world().size};
  std::vector<int> per_node{1, 2, 4, 8};
  std::vector<int> counts;
  for (int k : per_node)
    if (nodes * k > 1 && (!joins_one_node(link) || k <= gpus_per_node)) counts.push_back(nodes * k);
  const int gpus = int(gpu_inventory().devices.size());
  if (gpu && nodes == 1 && gpus > 8 && (!joins_one_node(link) || gpus <= gpus_per_node)) counts.push_back(gpus);
  return counts;
}

// The predicted row of `one` (from `source`, a one-device row) on `c`, named as on `named_nodes`
// nodes, with its console line.
PredictedRow predicted_row(const Row& source, const parallel::OneDevice& one, const parallel::Cluster& c,
                           int named_nodes, bool gpu, double cpu_samples_per_s, const MachineContext& now) {
  const parallel::Prediction q = parallel::predict(one, c);
  const parallel::Link& link = c.link;
  const bool two_levels = c.nodes > 1;
  const std::string& name = source.benchmark;
  const std::string device = fmt::format("{}:{}", gpu ? "gpu" : "mpi", c.devices);
  std::vector<std::string> items;
  if (!source.variant.empty()) items.push_back(source.variant);
  items.push_back("predicted:" + link.name);
  if (named_nodes > 1) items.push_back(fmt::format("nodes:{}", named_nodes));
  if (two_levels) items.push_back("network:" + c.network.name);
  items.push_back("from:" + source.device);
  Row row = source_identity(source);
  row.variant = join_variant(items);
  row.benchmark = fmt::format("{}/{}/{}/{}/{}/bs:{}/{}", source.kind, source.model, source.dataset, device,
                              source.precision, source.batch ? std::to_string(*source.batch) : "", row.variant);
  row.device = device;
  row.device_kind = !gpu ? "mpi:N" : two_levels ? "gpu:N across ranks" : "gpu:N over NCCL";
  row.data_parallel = c.devices;
  row.baseline = name;
  row.measurement = "predicted";
  row.link = link.name;
  row.predicted_from = name;
  row.run_type = "iteration";
  row.status = "ok";
  row.iterations = one.timeline.steps;
  row.dominant_term = q.dominant;
  row.prediction_model = parallel::kPredictionModel;
  row.algorithm = q.algorithm;
  row.git_commit = now.git_commit;
  row.timestamp = now.timestamp;
  row.samples_per_s = q.samples_per_s;
  row.samples_per_s_low = q.samples_per_s_low;
  row.samples_per_s_high = q.samples_per_s_high;
  row.step_time_s = q.step_s;
  row.scaling_efficiency = q.efficiency;
  row.comm_s_per_step = q.exposed_comm_s;
  row.comm_share = q.exposed_comm_s / q.step_s;
  row.allreduce_bytes_per_step = one.timeline.gradient_bytes();
  row.replicas = double(c.devices);
  row.link_busbw_gbps = link.busbw_gbps;
  row.link_latency_us = link.latency_us;
  // A measured link says its figures as --link and --network take them, to predict over it elsewhere.
  std::string where = fmt::format("over {} ({}{}{})", link.name, link.source,
                                  link.low_source.empty() ? "" : "; low: " + link.low_source,
                                  link.name == "measured" ? "; as figures: " + parallel::link_figures(link) : "");
  if (two_levels) {  // nodes it never ran on: no hosts to name
    row.nodes = c.nodes;
    row.rank_hosts.clear();
    row.network = c.network.name;
    row.network_busbw_gbps = c.network.busbw_gbps;
    row.network_latency_us = c.network.latency_us;
    row.network_nics = c.network.nics;
    where = fmt::format("{} within each of {} nodes of {}, {} between them ({}{})", where, c.nodes, c.per_node(),
                        c.network.name, c.network.source,
                        c.network.low_source.empty() ? "" : "; low: " + c.network.low_source);
  }
  // Its speed-up over the source's cpu row, where the plan knows that row's rate.
  if (cpu_samples_per_s > 0 && !row.cpu_baseline.empty()) row.speedup_vs_cpu = q.samples_per_s / cpu_samples_per_s;
  row.message = fmt::format(
      "predicted from {}'s timeline {}; all-reduce: {}; terms: {}; data-parallel overhead: {}; sharing: {}; assumes {}",
      name, where, q.algorithm, terms_text(q), one.dp_overhead_source, one.sharing_source,
      parallel::kPredictionAssumptions);
  const std::string on = two_levels ? fmt::format(" on {} nodes", c.nodes) : "";
  const std::string between = two_levels ? fmt::format(" and {}", link_text(c.network)) : "";
  return PredictedRow{
      std::move(row),
      fmt::format("  predicted {}{} over {}{}: {:.0f} samples/s (band {:.0f} to {:.0f}, dominated by {}), {:.0f}% "
                  "efficiency ({:.0f}% to {:.0f}%), a step of {:.3g} ms: its all-reduces {:.3g} ms ({}), {:.3g} ms of "
                  "them not hidden by backward",
                  device, on, link_text(link), between, q.samples_per_s, q.samples_per_s_low, q.samples_per_s_high,
                  q.dominant, 100 * q.efficiency, 100 * q.efficiency * q.samples_per_s_low / q.samples_per_s,
                  100 * q.efficiency * q.samples_per_s_high / q.samples_per_s, q.step_s * 1e3, q.comm_s * 1e3,
                  q.algorithm, q.exposed_comm_s * 1e3)};
}

}  // namespace

void check_nodes_divide(int devices, int nodes) {
  if (nodes <= 1 || devices % nodes == 0) return;
  const int below = devices / nodes * nodes, above = below + nodes;
  throw InputError(
      fmt::format("{} devices on {} nodes: data-parallel ranks fill every node alike; give a count that "
                  "--nodes={} divides ({}) or another --nodes",
                  devices, nodes, nodes, below > 0 ? fmt::format("{} or {}", below, above) : fmt::format("{}", above)));
}

void check_prediction_shape(const parallel::Link& link, int devices, int nodes, int gpus_per_node) {
  check_nodes_divide(devices, nodes);
  if (!joins_one_node(link) || devices / std::max(1, nodes) <= gpus_per_node) return;
  const int needed = (devices + gpus_per_node - 1) / gpus_per_node;
  throw InputError(fmt::format(
      "{} devices over {}{}: an NVLink link joins at most {} GPUs of one node (--gpus_per_node={}); spread them "
      "over nodes (e.g. --nodes={} --network=ib_ndr400x8), or give the GPUs one node holds with --gpus_per_node",
      devices, link.name, nodes > 1 ? fmt::format(" on {} nodes", nodes) : "", gpus_per_node, gpus_per_node, needed));
}

std::vector<std::string> predict_allreduce_lines(double bytes, const PredictionPlan& plan) {
  std::vector<std::string> lines;
  const int nodes = std::max(1, plan.nodes);
  const std::vector<parallel::Link> none{parallel::Link{}};
  for (const parallel::Link& link : plan.links) {
    for (const parallel::Link& network : nodes > 1 ? plan.networks : none) {
      for (int n : plan.counts.empty() ? default_counts(link, true, nodes, plan.gpus_per_node) : plan.counts) {
        check_prediction_shape(link, n, nodes, plan.gpus_per_node);
        const parallel::Cluster c{.devices = n, .nodes = nodes, .link = link, .network = network};
        const parallel::AllReduce point = parallel::all_reduce(bytes, c);
        const double slow = parallel::all_reduce(bytes, c, parallel::End::Slow).s;
        const double fast = parallel::all_reduce(bytes, c, parallel::End::Fast).s;
        const auto busbw = [&](double s) { return parallel::allreduce_bus_factor(n) * bytes / s / 1e9; };
        lines.push_back(fmt::format(
            "  gpu:{}{} over {}{}: {:.4g} ms ({:.4g} to {:.4g}), {}; busbw {:.4g} GB/s ({:.4g} to {:.4g}), algbw "
            "{:.4g} GB/s",
            n, nodes > 1 ? fmt::format(" on {} nodes", nodes) : "", link.name, nodes > 1 ? " and " + network.name : "",
            point.s * 1e3, fast * 1e3, slow * 1e3, point.algorithm, busbw(point.s), busbw(slow), busbw(fast),
            bytes / point.s / 1e9));
      }
    }
  }
  return lines;
}

std::vector<PredictedRow> predict_rows(const std::vector<const Row*>& rows, const PredictionPlan& plan,
                                       const MachineContext& now) {
  std::vector<double> rates;
  const Row* source = nullptr;
  for (const Row* r : rows) {
    if (!is_ok_iteration(*r) || r->measurement != "measured") continue;
    // A run's kept rows hold their rates as the CSV does (RowLog::keep), so a prediction asked
    // of the file after the run (--predict_from) is the very row the run predicted.
    if (r->samples_per_s && *r->samples_per_s > 0) rates.push_back(*r->samples_per_s);
    if (!r->prediction_inputs.empty()) source = r;
  }
  if (!source || rates.empty()) return {};
  const double samples_per_s = tb::median(rates);
  const PredictionInputs inputs = parse_prediction_inputs(source->prediction_inputs);
  // A run writes neither (its timeline watched a network with gradients, its rows a batch): an
  // edited row would otherwise be dropped without a word.
  if (inputs.one.timeline.empty())
    throw InputError(fmt::format("{}: prediction_inputs holds no gradient buckets (buckets=): nothing to all-reduce",
                                 source->benchmark));
  if (!source->batch) throw InputError(fmt::format("{}: the row has no batch", source->benchmark));
  // A replay's ranks are CPU ranks whatever the saved row ran on.
  const bool gpu = source->backend == "gpu" && !plan.replay;
  const double batch = double(*source->batch);
  std::vector<PredictedRow> out;
  const int nodes = std::max(1, plan.nodes);
  const std::vector<parallel::Link> one_level{parallel::Link{}};  // no network: a link of no figures, never used
  for (const parallel::Link& link : plan.links) {
    parallel::OneDevice one = inputs.one;
    one.step_s = batch / samples_per_s;
    one.batch = batch;
    // Devices over a preset link are machines or GPUs of their own; over this run's measured link,
    // the ranks share what they shared when it was measured (the sharing probe's slow-down).
    if (link.name != "measured" || plan.replay) {
      one.sharing = parallel::Range::exactly(1);
      one.sharing_source = plan.replay ? "none: replayed compute is waited out" : "none: devices of their own";
    }
    parallel::Cluster cluster;
    cluster.link = link;
    // CPU ranks all-reduce on the cores backward needs: nothing hides, whatever the link. A
    // replay's compute is waited out, the cores left free: its buckets' all-reduces run beside
    // the wait, as on GPUs (its ResNet-152 measured 1.05 to 1.40 times the no-overlap point),
    // over the ranks' measured link too (a sweep of host buffers says it cannot overlap).
    if (!gpu) cluster.link.overlaps_compute = plan.replay;
    // CPU ranks and replays all-reduce through MPI, GPUs through NCCL.
    cluster.library = gpu ? parallel::Library::Nccl : parallel::Library::Mpi;
    // The measured link is the run's own ranks as they ran: one level, whatever --nodes says.
    const bool measured = link.name == "measured";
    cluster.nodes = measured ? 1 : nodes;
    for (const parallel::Link& network : cluster.nodes > 1 ? plan.networks : one_level)
      for (int n : plan.counts.empty() ? default_counts(link, gpu, cluster.nodes, plan.gpus_per_node) : plan.counts) {
        if (n < 2) continue;
        if (gpu)
          check_prediction_shape(link, n, cluster.nodes, plan.gpus_per_node);
        else
          check_nodes_divide(n, cluster.nodes);
        cluster.devices = n;
        cluster.network = network;
        // Over the measured link the ranks ran where they ran: on the world's nodes.
        const int named_nodes = measured ? parallel::world().nodes : cluster.nodes;
        out.push_back(predicted_row(*source, one, cluster, named_nodes, gpu, plan.cpu_samples_per_s, now));
      }
  }
  return out;
}

Predictor::Predictor(const Flags& flags) : flags_(flags) {
  // A bad --link or --network fails before anything is measured, as does a measured link where
  // there are no ranks to measure it among: no row would be predicted over it.
  for (const std::string& link : flags.links)
    if (parallel::parse_link(link).name == "measured" && parallel::world().size < 2)
      throw InputError(
          "--link=measured: the measured link is the one a run's own ranks sweep at start-up, and this run has one "
          "rank: run it under mpirun -np N (N >= 2), or give a preset (nvlink4, pcie5, ...) or "
          "BUSBW_GBPS[,LATENCY_US]");
  for (const std::string& network : flags.networks) parallel::parse_network(network);
}

void Predictor::measure_world_link(const std::vector<BenchInfo>& benchmarks) {
  const parallel::World& world = parallel::world();
  if (world.size < 2) return;
  const auto say = [&](const parallel::Link& link) {
    if (world.rank == 0)
      std::cerr << fmt::format(
          "trainbench: measured link: {}: {} steps of {:.3g} us + 2(N-1)/N x bytes / {:.3g} GB/s{}\n", link.source,
          link.tree_below ? "2 log2 N" : "2(N-1)", link.latency_us, link.busbw_gbps,
          link.sweep_slowest.empty()
              ? ""
              : fmt::format("; 256 B: {:.3g} us ({:.3g} to {:.3g}), the mean of {} issued {:.3g} ms apart",
                            link.sweep.front().second * 1e6, link.sweep_fastest.front() * 1e6,
                            link.sweep_slowest.front() * 1e6, link.sweep_in_step, parallel::kSweepStepGapS * 1e3));
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

PredictionPlan Predictor::plan_for(const BenchInfo& info) const {
  PredictionPlan plan;
  for (const std::string& name : flags_.links) {
    const parallel::Link link = parallel::parse_link(name);
    if (link.name != "measured")
      plan.links.push_back(link);
    else if (info.gpu() && nccl_link_)
      plan.links.push_back(*nccl_link_);
    else if (!info.gpu() && world_link_)
      plan.links.push_back(*world_link_);
  }
  if (flags_.links.empty() && info.gpu()) plan.links.push_back(parallel::parse_link("nvlink4"));
  if (flags_.links.empty() && !info.gpu() && world_link_) plan.links.push_back(*world_link_);
  plan.nodes = flags_.nodes;
  plan.gpus_per_node = flags_.gpus_per_node;
  for (const std::string& network : flags_.networks) plan.networks.push_back(parallel::parse_network(network));
  return plan;
}

std::vector<PredictedRow> Predictor::after_benchmark(const BenchInfo& info, const std::vector<const Row*>& rows,
                                                     const MachineContext& machine, double cpu_samples_per_s) {
  if (info.kind != Kind::Train || info.run() != RunKind::OneReplica || !info.timeline || info.cuda_graph ||
      parallel::world().rank != 0)
    return {};
  PredictionPlan plan = plan_for(info);
  plan.cpu_samples_per_s = cpu_samples_per_s;
  std::vector<PredictedRow> predicted = predict_rows(rows, plan, machine);
  remember(info, predicted);
  return predicted;
}

std::vector<PredictedRow> Predictor::for_replay(const BenchInfo& replay, const MachineContext& machine) {
  if (!replay.replay || parallel::world().rank != 0) return {};
  PredictionPlan plan = plan_for(replay);  // a replay is a CPU benchmark: the ranks' link by default
  plan.counts = {parallel::world().size};
  plan.replay = true;
  std::vector<Row> rows = replay.replay->rows;
  std::vector<const Row*> pointers;
  for (const Row& r : rows) pointers.push_back(&r);
  std::vector<PredictedRow> predicted = predict_rows(pointers, plan, machine);
  BenchInfo from = replay;
  from.name = replay.replay->of;
  remember(from, predicted);
  return predicted;
}

void Predictor::remember(const BenchInfo& from, const std::vector<PredictedRow>& predicted) {
  for (const PredictedRow& p : predicted) {
    const Row& r = p.row;
    made_[prediction_key(r.model, r.dataset, r.precision, r.batch ? std::to_string(*r.batch) : "", r.variant, r.device)]
        .push_back(Made{r.benchmark, from.name, from.threads, r.link,
                        fmt::format("{} ({:.3g} GB/s, {:.3g} us a step)", r.link, r.link_busbw_gbps.value_or(NAN),
                                    r.link_latency_us.value_or(NAN)),
                        r.samples_per_s.value_or(NAN), r.samples_per_s_low.value_or(NAN),
                        r.samples_per_s_high.value_or(NAN)});
  }
}

std::optional<Predictor::Comparison> Predictor::compare(const BenchInfo& measured, double samples_per_s) const {
  // Data-parallel rows, and GPU ranks as emulated nodes (a check of the multi-node path, still
  // the run a prediction over the ranks' measured link is for).
  const bool ranks = measured.device_kind && measured.device_kind->across_ranks && measured.device_kind->wiring;
  if ((measured.data_parallel < 2 && !ranks) || samples_per_s <= 0) return std::nullopt;
  const auto it = made_.find(prediction_key(measured.model, measured.dataset, measured.precision,
                                            std::to_string(measured.batch), measured.variant, measured.device));
  if (it == made_.end()) return std::nullopt;
  const Made* chosen = nullptr;
  for (const Made& made : it->second) {
    if (made.threads != measured.threads) continue;  // mpi:2 of one thread per rank from cpu:1, not cpu
    if (!chosen || (made.link == "measured" && chosen->link != "measured")) chosen = &made;
  }
  if (!chosen) return std::nullopt;
  const bool inside = samples_per_s >= chosen->low && samples_per_s <= chosen->high;
  return Comparison{
      chosen->benchmark, inside ? "inside_band" : "outside_band",
      fmt::format(
          "  {}: measured {:.0f} samples/s; predicted {:.0f} (band {:.0f} to {:.0f}) from {} over {}: measured / "
          "predicted = {:.2f}, {} the band",
          measured.name, samples_per_s, chosen->point, chosen->low, chosen->high, chosen->from, chosen->link_text,
          samples_per_s / chosen->point, inside ? "inside" : "outside")};
}

}  // namespace tb::bench
