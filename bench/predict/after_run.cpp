// trainbench --predict_from=RUN.csv (after_run.hpp): predicted rows from a finished run's CSV,
// through the same rows-to-prediction path the run itself takes (predict_rows).
#include "bench/predict/after_run.hpp"

#include <iostream>
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

// The device counts --devices asks of rows of `backend` ("gpu": gpu:N, "cpu": mpi:N); empty for
// the defaults. Other entries are refused: a prediction is of N devices sharing gradients.
std::vector<int> counts_for(const Flags& flags, const std::string& backend) {
  std::vector<int> counts;
  for (const std::string& entry : flags.devices) {
    const DeviceEntry e = parse_device_entry(entry);
    if (!((e.device == "gpu" || e.device == "mpi") && e.count >= 2 && e.split.empty()))
      throw InputError(fmt::format(
          "--devices={}: with --predict_from, give the devices to predict: gpu:N (from GPU rows) or mpi:N (from CPU "
          "rows), N >= 2, e.g. --devices=gpu:16,mpi:8",
          entry));
    if ((e.device == "gpu") == (backend == "gpu")) counts.push_back(e.count);
  }
  return counts;
}

std::vector<parallel::Link> links_for(const Flags& flags, const std::string& backend) {
  std::vector<parallel::Link> links;
  for (const std::string& name : flags.links) {
    const parallel::Link link = parallel::parse_link(name);
    if (link.name == "measured")
      throw InputError(
          "--link=measured: the measured link is the one a run's own ranks swept at start-up; after the run, give a "
          "preset (nvlink4, pcie5, ...) or BUSBW_GBPS[,LATENCY_US]");
    links.push_back(link);
  }
  if (links.empty() && backend == "gpu") links.push_back(parallel::parse_link("nvlink4"));
  if (links.empty())
    throw InputError(
        "--predict_from: a CPU row has no default link after its run (in the run it is the ranks' own, swept at "
        "start-up): give one, e.g. --link=10,20 (GB/s, us) or a preset");
  return links;
}

}  // namespace

int predict_from_csv(const Flags& flags, const MachineContext& now) {
  const std::vector<Row> rows = read_csv(flags.predict_from, "--predict_from");
  const SavedRows saved = saved_one_device_rows(rows, flags.benchmark_filter, "--predict_from", flags.predict_from);
  std::unique_ptr<CsvWriter> csv;
  if (!flags.csv.empty()) csv = std::make_unique<CsvWriter>(flags.csv);
  std::vector<Row> predicted;
  std::cout << fmt::format("trainbench: predictions from {} (no training); they assume {}\n", flags.predict_from,
                           parallel::kPredictionAssumptions);
  for (const std::string& name : saved.names) {
    const std::vector<const Row*>& of = saved.rows.at(name);
    const std::string backend = cell(*of.back(), "backend");
    PredictionPlan plan;
    plan.links = links_for(flags, backend);
    plan.counts = counts_for(flags, backend);
    plan.nodes = flags.nodes;
    // The source's cpu row, where the file has it: the predicted rows' speedup over the CPU.
    std::vector<double> cpu_rates;
    for (const Row& r : rows)
      if (cell(r, "benchmark") == cell(*of.back(), "cpu_baseline") && cell(r, "run_type") == "iteration" &&
          cell(r, "status") == "ok")
        cpu_rates.push_back(cell_number(r, "samples_per_s"));
    plan.cpu_samples_per_s = cpu_rates.empty() ? 0 : tb::median(cpu_rates);
    for (const std::string& network : flags.networks) plan.networks.push_back(parallel::parse_network(network));
    if (!flags.devices.empty() && plan.counts.empty()) continue;  // --devices names none of its kind
    std::cout << name << "\n";
    for (PredictedRow& p : predict_rows(of, plan, now)) {
      std::cout << p.line << "\n";
      if (csv) csv->write_row(p.row);
      predicted.push_back(std::move(p.row));
    }
  }
  if (predicted.empty()) {
    std::cerr << "trainbench: error: --devices names no device of the rows' kind (gpu:N from GPU rows, mpi:N from "
                 "CPU rows)\n";
    return 2;
  }
  std::cout << "\nSummary\n" << summary_table(predicted, false) << std::flush;
  if (csv) std::cout << fmt::format("trainbench: {} predicted rows in {}\n", predicted.size(), flags.csv);
  return 0;
}

}  // namespace tb::bench
