// The benchmarks of --replay_from (replays.hpp): a saved one-device row's steps replayed on the
// ranks of this MPI world, an mpi:N benchmark each.
#include "bench/predict/replays.hpp"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "bench/output/csv.hpp"
#include "bench/output/rows.hpp"
#include "bench/plan/configs.hpp"
#include "bench/predict/inputs.hpp"
#include "engine/core/error.hpp"
#include "engine/core/stats.hpp"
#include "engine/parallel/world.hpp"
#include "models/models.hpp"

namespace tb::bench {

std::vector<BenchInfo> plan_replays(const Flags& flags) {
  const std::vector<Row> rows = read_csv(flags.replay_from, "--replay_from");
  const SavedRows saved = saved_one_device_rows(rows, flags.benchmark_filter, "--replay_from", flags.replay_from);
  const parallel::World& world = parallel::world();
  const DeviceKind& kind = kind_named("mpi:N");
  std::vector<BenchInfo> out;
  std::map<std::string, std::string> replayed_as;  // replay name -> the saved row it replays
  for (const std::string& name : saved.names) {
    const Row& r = *saved.rows.at(name).back();
    BenchInfo b;
    b.kind = Kind::Train;
    b.model = r.model;
    b.dataset = r.dataset;
    b.precision = r.precision;
    b.batch = r.batch.value_or(0);
    b.threads = std::max(1, int(r.threads.value_or(1)));
    b.device = fmt::format("mpi:{}", world.size);
    b.device_kind = &kind;
    b.backend = Backend::Cpu;  // the replay's: waits and MPI; the row says the source's
    b.data_parallel = world.size;
    b.emulated_nodes = world.emulated_nodes;
    b.data_source = r.data_source;
    b.optimizer.kind = r.optimizer == "adam" ? OptimizerConfig::Kind::Adam : OptimizerConfig::Kind::SGD;
    b.warmup_steps = 2;
    try {  // the workload's parameters and FLOPs, for the row (a row of a model this build lacks has none)
      b.spec = models::workload(b.model, b.dataset).spec;
      b.cost = model_cost(b.spec);
    } catch (const Error&) {
    }
    std::vector<std::string> items;
    if (!r.variant.empty()) items.push_back(r.variant);
    items.emplace_back("replayed");
    if (world.emulated_nodes) items.emplace_back("emulated_nodes");
    if (world.nodes > 1) items.push_back(fmt::format("nodes:{}", world.nodes));
    b.variant = join_variant(items);
    b.name = fmt::format("train/{}/{}/{}/{}/bs:{}/{}", b.model, b.dataset, b.device, b.precision, b.batch, b.variant);
    // Rows of one workload on two devices (cpu and cpu:1) replay as one name: the second was
    // pooled with the first as its repetition, never run.
    if (const auto [at, fresh] = replayed_as.emplace(b.name, name); !fresh)
      throw InputError(fmt::format("--replay_from={}: {} and {} both replay as {}: pick one with --benchmark_filter",
                                   flags.replay_from, at->second, name, b.name));
    b.baseline = name;
    std::vector<double> rates;
    BenchInfo::Replay replay{.of = name, .backend = r.backend, .inputs = r.prediction_inputs};
    for (const Row* saved_row : saved.rows.at(name)) {
      replay.rows.push_back(*saved_row);
      rates.push_back(saved_row->samples_per_s.value_or(NAN));
    }
    replay.samples_per_s = tb::median(rates);
    b.replay = std::move(replay);
    if (world.size < 2)
      b.skip_reason = fmt::format(
          "{}: --replay_from replays a one-device row on the ranks of an MPI job: start it with mpirun -np N (N >= 2)",
          b.device);
    b.skip_scope = b.device;
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace tb::bench
