// What a benchmark does (harness.hpp): skip what cannot run, note a loaded machine, walk the
// benchmark's run (bench/run/run.hpp), write its repetition's row or fail its row alone; after
// the last repetition, the aggregates and the predicted rows.
#include "bench/run/harness.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "bench/output/csv.hpp"
#include "bench/output/rows.hpp"
#include "bench/predict/replays.hpp"
#include "bench/run/jobs.hpp"
#include "bench/schema/columns.hpp"
#include "datasets/sources.hpp"
#include "engine/backends.hpp"
#include "engine/core/error.hpp"
#include "engine/core/timer.hpp"
#include "engine/parallel/replica.hpp"
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
    : flags_(flags),
      benchmarks_(flags.replay_from.empty() ? plan_benchmarks(flags, cores) : plan_replays(flags)),
      repetitions_(std::max(1, std::atoi(flags.benchmark_repetitions.c_str()))),
      load_check_(std::cerr),
      predictor_(flags) {
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
    // One call of a benchmark is one repetition: a train/ row's run takes its own steps
    // (StepBudget: until --benchmark_min_time, or a fixed count every rank agrees on under
    // mpirun), an epochs/ row its epochs. Google Benchmark runs with a minimum time of 0 (main), so
    // it keeps the first call of each repetition, with one iteration, and sizes nothing. Its time
    // columns are in ms for a train/ row and s for an epochs/ row, unless --benchmark_time_unit
    // names one for every row (a benchmark's own unit would override the flag).
    if (!flags_.benchmark_time_unit_given)
      registered->Unit(b.kind == Kind::Epochs ? benchmark::kSecond : benchmark::kMillisecond);
  }
}

// Another process busy on the CPU makes every figure of this row low: above what this run itself
// has used (its most threads so far, plus one). Said once per benchmark.
int threads_on_this_host(const BenchInfo& info, int local_ranks) {
  const bool jobs = info.run() == RunKind::Processes;
  const int per_process = (jobs ? info.threads : std::max(info.threads, info.replicas)) + info.loader.workers;
  return per_process * (jobs ? info.replicas : 1) * local_ranks;
}

bool LoadCheck::loaded(const BenchInfo& info, double load, int local_ranks) {
  threads_used_ = std::max(threads_used_, threads_on_this_host(info, local_ranks));
  constexpr double kSlack = 1.0;
  if (load < 0 || load <= threads_used_ + kSlack) return false;
  if (world().rank == 0 && warned_load_.insert(info.name).second)
    console_ << fmt::format(
        "trainbench: warning: load average {:.1f} at the start of {}, where this run uses at most {} thread(s): "
        "another process is using the CPU and this row's figures may be low (load_avg_1m in the CSV, 'loaded' in its "
        "verdicts)\n",
        load, info.name, threads_used_);
  return true;
}

// The threads of a row that waited for a CPU, on average over its timed steps, above which
// another process took cores from it. A load average read at the row's start misses a process
// that starts after it, and trails one by a minute: a compile on both cores of a 2-core machine,
// begun as a run started, left the MLP's cpu row with one core (host_cpu_util 0.99, 823 samples/s
// against 17,560) at a load average of 2.2, under 2 threads + 1.
constexpr double kWaitingThreads = 0.2;

bool LoadCheck::waited(const BenchInfo& info, double waiting, int local_ranks, int cores) {
  // Where the row's own threads outnumber the cores, they wait on each other.
  if (waiting <= kWaitingThreads || threads_on_this_host(info, local_ranks) > cores) return false;
  if (world().rank == 0 && warned_wait_.insert(info.name).second)
    console_ << fmt::format(
        "trainbench: warning: {}'s threads waited for a CPU {:.2f} s a second of its timed steps (the kernel's run "
        "delay): another process took cores from it, and its figures may be low ('loaded' in its verdicts)\n",
        info.name, waiting);
  return true;
}

void Harness::write(const BenchInfo& info, const Measurement& measured, std::vector<std::string> lines) {
  rows_->repetition(info, measured, std::move(lines));
  if (++calls_[info.name] < repetitions_) return;
  // The benchmark's last repetition: its aggregates, then what the predictor's policy makes of it.
  rows_->aggregates(info);
  for (PredictedRow& p : predictor_.after_benchmark(info, rows_->rows_of(info.name), rows_->machine(),
                                                    baselines_.median(info.cpu_baseline))) {
    rows_->keep(p.row);
    rows_->note(info.name, std::move(p.line));
  }
}

void Harness::run_benchmark(benchmark::State& st, const BenchInfo& info) {
  if (!info.skip_reason.empty()) {
    st.SkipWithError(skip_message(info.skip_reason).c_str());
    write(info, Measurement{.status = "skipped", .message = info.skip_reason});
    return;
  }
  // Under mpirun, one-replica benchmarks are the baselines, rank 0's alone: train/ rows' other
  // ranks stand by and join their sharing probe (run_train.cpp); epochs/ rows' wait for the next
  // benchmark. Only rank 0 reports.
  if (on_rank_0_alone(info) && world().rank != 0) {
    st.SkipWithError(skip_message("one-replica baseline, run by rank 0").c_str());
    return;
  }
  // A replay's baseline is the saved row (its rates, for scaling efficiency) and its prediction is
  // made before its first repetition, from that row: its replayed rows are compared with it.
  if (info.replay && calls_[info.name] == 0) {
    for (const Row& saved : info.replay->rows) baselines_.add(info.replay->of, saved.samples_per_s.value_or(NAN));
    for (PredictedRow& p : predictor_.for_replay(info, rows_->machine())) {
      rows_->keep(p.row);
      rows_->note(info.name, std::move(p.line));
    }
  }
  // Without a word, "mnist" rows trained on synthetic data that a first epoch learns whole (a
  // folder named by --data_dir or TB_DATA_DIR says so as it is planned).
  if (world().rank == 0 && info.data_source == "synthetic" && data::has_files(info.dataset) &&
      data::data_dir(flags_.data_dir) == "data" && said_synthetic_.insert(info.dataset).second)
    std::cerr << fmt::format(
        "trainbench: note: no {}/ under ./data: its rows train on synthetic data of its shapes (data_source=synthetic; "
        "scripts/fetch_datasets.sh fetches the real files, --data_dir names another folder)\n",
        info.dataset);
  const double load = load_average_1m();
  const bool busy = load_check_.loaded(info, load, world().local_size);
  std::string how = "";  // how this rank's repetition ended: "" well, "failed", "stop" (the CSV)
  try {
    // Each row reports its own peak resident set, not an earlier row's (a ResNet-152 before it):
    // another benchmark's run goes first (a train/ row keeps its own across Google Benchmark's
    // calls of it).
    if (run_ && run_->name() != info.name) run_.reset();
    reset_peak_rss();
    if (!run_)
      run_ = make_run(info, RunEnv{.flags = &flags_,
                                   .nvml = nvml_.get(),
                                   .nvml_unavailable = &nvml_unavailable_,
                                   .baselines = &baselines_,
                                   .predictor = &predictor_,
                                   .on_epoch = &on_epoch_});
    Outcome outcome = run_->walk(st);
    if (!run_->kept_across_calls()) run_.reset();
    Measurement& m = outcome.measured;
    if (load >= 0) m.figures.load_avg_1m = load;
    // The verdict alone, as the load average's: a row's message says what it measured, the same
    // on a busy machine as on an idle one. The wait is said whatever the load average said.
    const bool waited_for_cpu = load_check_.waited(info, m.cpu_waiting, world().local_size, omp_get_num_procs());
    if (busy || waited_for_cpu) m.verdicts.insert(m.verdicts.begin(), "loaded");
    if (!m.message.empty()) st.SetLabel(m.message);
    write(info, m, std::move(outcome.lines));
  } catch (const CsvWriteError&) {
    finish_together(info, "stop");
    throw;  // the run stops (main)
  } catch (const std::exception& e) {
    how = "failed";
    // A row that failed: its session goes (the next benchmark starts clean), the run goes on.
    const bool memory = dynamic_cast<const std::bad_alloc*>(&e) != nullptr;
    const std::string message =
        memory ? "out of host memory (std::bad_alloc) while building or training this benchmark: lower --batch, "
                 "--loader_workers or --prefetch, or run it on a machine with more memory"
               : e.what();
    release_sessions();
    st.SkipWithError(message.c_str());
    Measurement failed{.steps = 0, .status = "failed", .message = message};  // no timed steps to count
    if (dynamic_cast<const parallel::ReplicasDiffer*>(&e)) failed.verdicts.emplace_back("replicas_differ");
    write(info, std::move(failed));
  }
  finish_together(info, how);
}

// Under mpirun, every rank ends each repetition of a row they all take part in together, and a
// failure on any drops the row's run on all, so that the next repetition sets up and meets in its
// collectives on every rank alike: rank 0 alone failed a one-replica row (its loss check), the
// ranks standing by kept their run, and the ranks' collectives then paired across rows
// (MPI_ERR_TRUNCATE). Without a deadline: the ranks standing by sleep here while rank 0 measures,
// for as long as its row takes. Where rank 0 stops (its CSV cannot be written), every rank stops.
void Harness::finish_together(const BenchInfo& info, const std::string& how) {
  if (world().size == 1 || on_rank_0_alone(info)) return;
  const std::vector<std::string> all = parallel::all_ranks(how, "finish a repetition of " + info.name, INFINITY);
  if (how != "stop" && std::find(all.begin(), all.end(), "stop") != all.end())
    throw CsvWriteError(fmt::format("rank 0 could not write its CSV during {}: the run stops", info.name));
  if (std::any_of(all.begin(), all.end(), [](const std::string& h) { return !h.empty(); })) release_sessions();
}

}  // namespace tb::bench
