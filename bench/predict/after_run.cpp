// trainbench --predict_from=RUN.csv (after_run.hpp): predicted rows from a finished run's CSV,
// through the same rows-to-prediction path the run itself takes (predict_rows).
#include "bench/predict/after_run.hpp"

#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench/output/csv.hpp"
#include "bench/output/rows.hpp"
#include "bench/output/summary.hpp"
#include "bench/plan/device_kinds.hpp"
#include "bench/predict/inputs.hpp"
#include "bench/predict/predict.hpp"
#include "engine/core/error.hpp"
#include "engine/core/stats.hpp"
#include "engine/parallel/predict.hpp"

namespace tb::bench {
namespace {

// A prediction flag, and the --devices entries it takes: N >= 2 devices sharing gradients, of the
// kinds it predicts.
struct PredictionFlag {
  const char* name;
  bool takes_mpi;  // mpi:N beside gpu:N
  const char* give;
};
constexpr PredictionFlag kFromRun{
    "--predict_from", true, "gpu:N (from GPU rows) or mpi:N (from CPU rows), N >= 2, e.g. --devices=gpu:16,mpi:8"};
constexpr PredictionFlag kAllreduce{
    "--predict_allreduce", false,
    "gpu:N, N >= 2, e.g. --devices=gpu:8 (an mpi:N all-reduce runs over a link you measure: trainbench under "
    "mpirun --link=measured)"};

// The device counts --devices asks of rows of `backend` ("gpu": gpu:N, "cpu": mpi:N); empty for
// the defaults. Other entries are refused, naming the entry and what the flag takes: one device,
// or one split into threads or jobs, shares no gradients with another.
std::vector<int> counts_for(const Flags& flags, const std::string& backend, const PredictionFlag& flag) {
  std::vector<int> counts;
  for (const std::string& entry : flags.devices) {
    const DeviceEntry e = parse_device_entry(entry);
    if (!((e.device == "gpu" || (flag.takes_mpi && e.device == "mpi")) && e.count >= 2 && e.split.empty()))
      throw InputError(
          fmt::format("--devices={}: with {}, give the devices to predict: {}", entry, flag.name, flag.give));
    if ((e.device == "gpu") == (backend == "gpu")) counts.push_back(e.count);
  }
  return counts;
}

std::vector<parallel::Link> links_for(const Flags& flags, const std::string& backend, const PredictionFlag& flag) {
  std::vector<parallel::Link> links;
  for (const std::string& name : flags.links) {
    const parallel::Link link = parallel::parse_link(name);
    if (link.name == "measured")
      throw InputError(
          fmt::format("--link=measured: the measured link is the one a run's own ranks swept at start-up, and {} "
                      "runs no ranks: give a preset (nvlink4, pcie5, ...) or BUSBW_GBPS[,LATENCY_US]",
                      flag.name));
    links.push_back(link);
  }
  if (links.empty() && backend == "gpu") links.push_back(parallel::parse_link("nvlink4"));
  if (links.empty())
    throw InputError(
        "--predict_from: a CPU row has no default link after its run (in the run it is the ranks' own, swept at "
        "start-up): give one, e.g. --link=10,20 (GB/s, us) or a preset");
  return links;
}

// "    the file's own: 1,234 samples/s by model 1 (this one +4.2%)": a re-predicted row beside the
// file's row of the same name, saying which model made that.
std::string beside_committed(const Row& theirs, const Row& ours) {
  const Count& model = theirs.prediction_model;
  // Both as the CSV holds them (ours as kept): the same prediction written twice reads +0.0%.
  const double was = theirs.samples_per_s.value_or(NAN), now = ours.samples_per_s.value_or(NAN);
  return fmt::format("    the file's own: {:.0f} samples/s, {}{}", was,
                     model == parallel::kPredictionModel ? "by this model"
                     : !model                            ? "by a model before version 2 (it did not say)"
                                                         : fmt::format("by model {}", *model),
                     was > 0 ? fmt::format(" (this prediction {:+.1f}%)", 100 * (now / was - 1)) : "");
}

}  // namespace

int predict_from_csv(const Flags& flags, const MachineContext& now) {
  const std::vector<Row> rows = read_csv(flags.predict_from, "--predict_from");
  const SavedRows saved = saved_one_device_rows(rows, flags.benchmark_filter, "--predict_from", flags.predict_from);
  // Every predicted row is kept as the log a run's rows go through keeps them, and goes to the CSV
  // at the end: a --devices or --link refused on the way leaves no file behind (it left one with
  // a header and no rows).
  RowLog log(now, nullptr, std::cout);
  std::cout << fmt::format("trainbench: predictions from {} (no training) by prediction model {}; they assume {}\n",
                           flags.predict_from, parallel::kPredictionModel, parallel::kPredictionAssumptions);
  // The file's own predicted rows, by name: each one re-predicted here is set beside them, saying
  // where another model made them.
  std::vector<std::string> cpu_without_link;
  std::map<std::string, const Row*> committed;
  for (const Row& r : rows)
    if (r.measurement == "predicted" && r.run_type == "iteration") committed[r.benchmark] = &r;
  for (const std::string& name : saved.names) {
    const std::vector<const Row*>& of = saved.rows.at(name);
    const std::string& backend = of.back()->backend;
    PredictionPlan plan;
    plan.counts = counts_for(flags, backend, kFromRun);
    if (!flags.devices.empty() && plan.counts.empty()) continue;  // --devices names none of its kind
    if (backend != "gpu" && flags.links.empty()) {
      // A CPU row has no default link after its run: left out where GPU rows are predicted.
      cpu_without_link.push_back(name);
      continue;
    }
    plan.links = links_for(flags, backend, kFromRun);
    plan.nodes = flags.nodes;
    plan.gpus_per_node = flags.gpus_per_node;
    // The source's cpu row, where the file has it: the predicted rows' speedup over the CPU.
    std::vector<double> cpu_rates;
    for (const Row& r : rows)
      if (r.benchmark == of.back()->cpu_baseline && is_ok_iteration(r) && r.samples_per_s)
        cpu_rates.push_back(*r.samples_per_s);
    plan.cpu_samples_per_s = cpu_rates.empty() ? 0 : tb::median(cpu_rates);
    for (const std::string& network : flags.networks) plan.networks.push_back(parallel::parse_network(network));
    std::cout << name << "\n";
    for (PredictedRow& p : predict_rows(of, plan, now)) {
      std::cout << p.line << "\n";
      log.keep(p.row);
      if (const auto it = committed.find(p.row.benchmark); it != committed.end())
        std::cout << beside_committed(*it->second, log.rows().back()) << "\n";
    }
  }
  const std::vector<Row>& predicted = log.rows();
  if (predicted.empty() && !cpu_without_link.empty()) links_for(flags, "cpu", kFromRun);  // throws: which link to give
  if (!cpu_without_link.empty())
    std::cout << fmt::format(
        "not predicted: {} cpu row(s) (a CPU row has no default link after its run: give one, "
        "e.g. --link=10,20, and --devices=mpi:N)\n",
        cpu_without_link.size());
  if (predicted.empty()) {
    std::cerr << "trainbench: error: --devices names no device of the rows' kind (gpu:N from GPU rows, mpi:N from "
                 "CPU rows)\n";
    return 2;
  }
  std::cout << "\nSummary\n" << summary_table(predicted, false) << std::flush;
  if (!flags.csv.empty()) {
    CsvWriter csv(flags.csv);
    for (const Row& row : predicted) csv.write_row(row);
    std::cout << csv.rows_written_line("predicted");
  }
  if (!flags.summary.empty()) {  // as a run writes its own (it was ignored here)
    std::ofstream summary(flags.summary, std::ios::out | std::ios::trunc);
    summary << summary_table(predicted, true);
    summary.close();
    if (!summary) {
      std::cerr << fmt::format("trainbench: error: --summary={}: cannot write the summary there\n", flags.summary);
      return 1;
    }
  }
  return 0;
}

// "4 GiB (4,294,967,296 bytes)", "1,000,000 bytes".
std::string byte_text(double bytes) {
  std::string digits = fmt::format("{:.0f}", bytes);
  for (int i = int(digits.size()) - 3; i > 0; i -= 3) digits.insert(std::size_t(i), 1, ',');
  for (const auto& [unit, size] : {std::pair{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}})
    if (bytes >= size && std::fmod(bytes, size) == 0)
      return fmt::format("{:.0f} {} ({} bytes)", bytes / size, unit, digits);
  return digits + " bytes";
}

int predict_allreduce(const Flags& flags) {
  PredictionPlan plan;
  plan.links = links_for(flags, "gpu", kAllreduce);
  plan.counts = counts_for(flags, "gpu", kAllreduce);
  plan.nodes = flags.nodes;
  plan.gpus_per_node = flags.gpus_per_node;
  for (const std::string& network : flags.networks) plan.networks.push_back(parallel::parse_network(network));
  const std::vector<std::string> lines = predict_allreduce_lines(flags.predict_allreduce, plan);
  std::cout << fmt::format(
      "trainbench: one all-reduce of {} predicted by prediction model {} (no training): its time (band), "
      "NCCL's algorithm/protocol, busbw = bytes / time x 2(N-1)/N as nccl-tests reports it\n",
      byte_text(flags.predict_allreduce), parallel::kPredictionModel);
  for (const std::string& line : lines) std::cout << line << "\n";
  std::cout << std::flush;
  return 0;
}

}  // namespace tb::bench
