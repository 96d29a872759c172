// What a benchmark does (harness.hpp): skip what cannot run, warn of a loaded machine, walk the
// benchmark's run (bench/run/run.hpp), keep its repetition for the CSV or fail its row alone; and
// the predicted rows made from the timelines the runs recorded.
#include "bench/run/harness.hpp"

#include <algorithm>
#include <cstdio>
#include <iostream>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "bench/output/columns.hpp"
#include "bench/output/csv.hpp"
#include "bench/run/jobs.hpp"
#include "engine/backends.hpp"
#include "engine/core/error.hpp"
#include "engine/core/timer.hpp"
#include "engine/parallel/timeline.hpp"
#include "telemetry/nvml.hpp"

namespace tb::bench {

using parallel::world;

namespace {

// The machine's 1-minute load average (/proc/loadavg); negative where it cannot be read.
double load_average_1m() {
  double load = -1;
  if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &load) != 1) load = -1;
    std::fclose(f);
  }
  return load;
}

}  // namespace

Harness::Harness(const Flags& flags, int cores)
    : flags_(flags), benchmarks_(plan_benchmarks(flags, cores)), predictor_(flags) {
  const bool gpu_runs = std::any_of(benchmarks_.begin(), benchmarks_.end(),
                                    [](const BenchInfo& b) { return b.gpu() && b.skip_reason.empty(); });
  if (!gpu_runs) return;
  nvml_ = telemetry::Nvml::load(&nvml_unavailable_);
  if (!nvml_ && world().rank == 0)
    std::cerr << fmt::format("trainbench: note: {}; GPU rows have no NVML columns (gpu_util, energy, clocks)\n",
                             nvml_unavailable_);
}

Harness::~Harness() { release_sessions(); }

std::string Harness::nvidia_driver() const { return nvml_ ? nvml_->driver_version() : ""; }

void Harness::release_sessions() { run_.reset(); }

const BenchInfo* Harness::find(const std::string& name) const {
  for (const BenchInfo& b : benchmarks_)
    if (b.name == name) return &b;
  return nullptr;
}

void Harness::register_benchmarks(RowLog& rows) {
  rows_ = &rows;
  on_epoch_ = [&rows](const BenchInfo& info, const EpochRecord& r) { rows.epoch(info, r); };
  for (const BenchInfo& b : benchmarks_) {
    auto* registered =
        benchmark::RegisterBenchmark(b.name.c_str(), [this, &b](benchmark::State& st) { run_benchmark(st, b); });
    if (b.kind == Kind::Epochs)
      registered->Iterations(1)->Unit(benchmark::kSecond);
    else
      registered->Unit(benchmark::kMillisecond);
    // Jobs time themselves: a jobs row once per repetition (its time the jobs' step: manual
    // time), each job one agreed window (jobs.hpp).
    const bool processes = b.run() == RunKind::Processes;
    if (b.kind == Kind::Train && (processes || in_job())) registered->Iterations(1);
    if (b.kind == Kind::Train && processes && b.skip_reason.empty()) registered->UseManualTime();
    // Every rank must run the same number of steps: no adaptive iteration count under MPI.
    if (world().size > 1 && b.kind == Kind::Train) registered->Iterations(flags_.iterations);
  }
}

// Another process busy on the CPU makes every figure of this row low: said once per benchmark,
// when the load is above what this run itself has used (its most threads so far, plus one).
void Harness::warn_if_loaded(const BenchInfo& info, double load) {
  threads_used_ = std::max(threads_used_, info.threads + info.loader.workers);
  constexpr double kSlack = 1.0;
  if (load < 0 || load <= threads_used_ + kSlack || !warned_load_.insert(info.name).second) return;
  if (world().rank == 0)
    std::cerr << fmt::format(
        "trainbench: warning: load average {:.1f} at the start of {}, where this run uses at most {} thread(s): "
        "another process is using the CPU and this row's figures may be low (load_avg_1m in the CSV)\n",
        load, info.name, threads_used_);
}

void Harness::finish_repetition(const std::string& name) {
  if (pending_.name != name || pending_.iterations < 0) return;
  if (const BenchInfo* info = find(name)) rows_->repetition(*info, pending_.repetition);
  pending_ = Pending{};
}

// A row that failed: its session goes (the next benchmark starts clean), the run goes on.
void Harness::fail_row(benchmark::State& st, const std::string& message) {
  release_sessions();
  st.SkipWithError(message.c_str());
  pending_.repetition = Repetition{{}, st.iterations(), true, message};
}

void Harness::run_benchmark(benchmark::State& st, const BenchInfo& info) {
  // Google Benchmark grows the iteration count while it sizes a benchmark's first repetition
  // and keeps it for the others: a call with as many iterations as the last one of this
  // benchmark means the last one ended a repetition, which goes to the CSV now.
  if (pending_.name == info.name && pending_.iterations == st.max_iterations) finish_repetition(info.name);
  pending_ = Pending{};
  if (!info.skip_reason.empty()) {
    st.SkipWithError(skip_message(info.skip_reason).c_str());
    return;
  }
  // Under mpirun, one-replica benchmarks are the baselines, rank 0's alone: train/ rows' other
  // ranks stand by and join their sharing probe (run_train.cpp); epochs/ rows' wait for the next
  // benchmark. Only rank 0 reports.
  if (world().size > 1 && info.run() == RunKind::OneReplica && info.kind == Kind::Epochs && world().rank != 0) {
    st.SkipWithError(skip_message("one-replica baseline, run by rank 0").c_str());
    return;
  }
  pending_.name = info.name;
  pending_.iterations = st.max_iterations;
  const double load = load_average_1m();
  warn_if_loaded(info, load);
  try {
    // Each row reports its own peak resident set, not an earlier row's (a ResNet-152 before it):
    // another benchmark's run goes first (a train/ row keeps its own across Google Benchmark's
    // calls of it).
    if (run_ && run_->name() != info.name) run_.reset();
    reset_peak_rss();
    if (!run_)
      run_ = make_run(info, RunEnv{.flags = &flags_,
                                   .nvml = nvml_.get(),
                                   .baselines = &baselines_,
                                   .predictor = &predictor_,
                                   .on_epoch = &on_epoch_});
    pending_.repetition.message = run_->walk(st);
    if (!run_->kept_across_calls()) run_.reset();
    if (load >= 0) st.counters["load_avg_1m"] = load;
    if (!pending_.repetition.message.empty()) st.SetLabel(pending_.repetition.message);
    Repetition r;
    for (const auto& [name, counter] : st.counters) r.counters[name] = counter.value;
    r.iterations = st.iterations();
    r.message = pending_.repetition.message;
    pending_.repetition = std::move(r);
  } catch (const CsvWriteError&) {
    throw;  // the run stops (main)
  } catch (const std::bad_alloc&) {
    fail_row(st,
             "out of host memory (std::bad_alloc) while building or training this benchmark: lower --batch, "
             "--loader_workers or --prefetch, or run it on a machine with more memory");
  } catch (const std::exception& e) {
    fail_row(st, e.what());
  }
}

}  // namespace tb::bench
