// What each planned benchmark is compared with (configs.hpp, pair_baselines): the one rule for
// the baseline of scaling efficiency and for the cpu row of the speed-up over the CPU, decided
// when the run is planned and written in every row (results/SCHEMA.md, version 6).
#include <algorithm>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench/plan/configs.hpp"

namespace tb::bench {
namespace {

bool same_workload(const BenchInfo& a, const BenchInfo& b) {
  return a.kind == b.kind && a.model == b.model && a.dataset == b.dataset;
}

// The one-device row a data-parallel row's scaling is over: the same workload, precision, batch
// and variant (less where the ranks ran) on one device of its kind: gpu:1 for GPUs, cpu:T for
// MPI ranks of T threads each.
const BenchInfo* scaling_baseline(const BenchInfo& b, const std::vector<BenchInfo>& all) {
  if (b.data_parallel < 2) return nullptr;
  const std::string device = b.gpu() ? "gpu:1" : fmt::format("cpu:{}", b.threads);
  const std::string variant = variant_without(b.variant, {"emulated_nodes", "nodes"});
  for (const BenchInfo& o : all)
    if (same_workload(o, b) && o.device == device && o.precision == b.precision && o.batch == b.batch &&
        o.variant == variant && o.run() == RunKind::OneReplica)
      return &o;
  return nullptr;
}

// The cpu row (all cores) of a row's speed-up over the CPU: the same workload and variant without
// what only a GPU row can have, in the row's precision where the CPU runs it (else fp32, the
// CPU's only one) and its batch where the CPU ran it (else the cpu row's).
const BenchInfo* cpu_row(const BenchInfo& b, const std::vector<BenchInfo>& all) {
  if (b.kind != Kind::Train || b.device == "cpu" || b.checks_only()) return nullptr;
  const auto drop = [](const std::string& v) {
    return variant_without(
        v, {"data_on_device", "cuda_graph", "gpu_memory_limit", "gpu_layout", "emulated_nodes", "nodes"});
  };
  // Both sides without those: a cpu row under --data_on_device carries it too, and was never
  // taken (every row's cpu_baseline empty under the flag). The row's own variant first.
  const std::string variant = drop(b.variant);
  const BenchInfo* best = nullptr;
  int best_score = -1;
  for (const BenchInfo& o : all) {
    if (!same_workload(o, b) || o.device != "cpu" || drop(o.variant) != variant || !o.skip_reason.empty()) continue;
    if (o.precision != b.precision && o.precision != "fp32") continue;
    const int score = 4 * (o.variant == b.variant) + 2 * (o.precision == b.precision) + (o.batch == b.batch);
    if (score > best_score) best = &o, best_score = score;
  }
  return best;
}

// "bf16 vs fp32, bs 128 vs 8": what differs between a row and its cpu row.
std::string differs(const BenchInfo& b, const BenchInfo& cpu) {
  std::vector<std::string> parts;
  if (cpu.precision != b.precision) parts.push_back(fmt::format("{} vs {}", b.precision, cpu.precision));
  if (cpu.batch != b.batch) parts.push_back(fmt::format("bs {} vs {}", b.batch, cpu.batch));
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace

void pair_baselines(std::vector<BenchInfo>& benchmarks) {
  // A row's baselines run before it: the cpu rows first, then one-device rows, then the rest,
  // each group in the order planned.
  const auto depth = [](const BenchInfo& b) { return b.device == "cpu" ? 0 : b.run() == RunKind::OneReplica ? 1 : 2; };
  // Within each workload (kind, model, dataset: planned together), by depth.
  for (auto begin = benchmarks.begin(); begin != benchmarks.end();) {
    auto end = std::find_if(begin, benchmarks.end(), [&](const BenchInfo& b) { return !same_workload(b, *begin); });
    std::stable_sort(begin, end, [&](const BenchInfo& a, const BenchInfo& b) { return depth(a) < depth(b); });
    begin = end;
  }
  for (BenchInfo& b : benchmarks) {
    if (const BenchInfo* one = scaling_baseline(b, benchmarks)) b.baseline = one->name;
    if (b.gpu() && b.precision != "fp32")
      for (const BenchInfo& o : benchmarks)
        if (same_workload(o, b) && o.device == b.device && o.precision == "fp32" && o.batch == b.batch &&
            o.variant == b.variant)
          b.fp32_row = o.name;
    if (const BenchInfo* cpu = cpu_row(b, benchmarks)) {
      b.cpu_baseline = cpu->name;
      b.speedup_differs = differs(b, *cpu);
    }
  }
}

}  // namespace tb::bench
