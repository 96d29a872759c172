// One benchmark's run as one object that walks its stages in order: prepare (the GPUs, the
// networks, the data), warm up, the timed steps, the counters of its row, and the report (the
// row's notes). The harness keeps a run across Google Benchmark's calls of its benchmark, so
// preparing and warming up happen once, and each call walks the timed steps, the counters and
// the report. Five factories (make_run below picks one) in three files: one replica
// (run_train.cpp); replicas of data parallelism, their replays and jobs as processes
// (run_parallel.cpp); and a whole run of epochs (run_epochs.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/cli/flags.hpp"
#include "bench/plan/configs.hpp"
#include "bench/schema/columns.hpp"
#include "engine/parallel/predict.hpp"
#include "engine/train/epochs.hpp"

namespace benchmark {
class State;
}

namespace tb {
class Trainer;
struct PhaseTimes;
}  // namespace tb

namespace tb::telemetry {
class Nvml;
class GpuSampler;
}  // namespace tb::telemetry

namespace tb::bench {

class Predictor;
using EpochSink = std::function<void(const BenchInfo&, const EpochRecord&)>;

// The samples/s of the rows run so far, every repetition's, by benchmark: what a later row's
// scaling efficiency, speed-up over the CPU and precision notes are over (its baseline,
// cpu_baseline and fp32 rows, plan/baselines.cpp).
class Baselines {
 public:
  void add(const std::string& benchmark, double samples_per_s);
  // The median over `benchmark`'s repetitions so far; 0 where it has none (or is "").
  double median(const std::string& benchmark) const;

 private:
  std::map<std::string, std::vector<double>> rates_;
};

// How many timed steps a repetition takes: a fixed count (under mpirun every rank the same, or
// --iterations given), else steps until --benchmark_min_time has passed (Google Benchmark's 0.5 s
// by default), at least one.
struct StepBudget {
  std::int64_t fixed = 0;  // > 0: exactly this many
  double min_time_s = 0.5;
  bool more(std::int64_t done, double elapsed_s) const {
    return fixed > 0 ? done < fixed : done < 1 || elapsed_s < min_time_s;
  }
};
StepBudget step_budget(const Flags& flags);

// Under mpirun, a one-replica epochs/ row runs on rank 0 alone (the others skip it); every other
// row that runs, runs on every rank.
bool on_rank_0_alone(const BenchInfo& info);

// What one call of a benchmark's run produced: its row's cells (counters, notes, verdicts, its
// comparison with the prediction made for it; results/SCHEMA.md: a verdict is a word a later
// reader filters on, the notes say why), and the lines the console shows after the benchmark's
// rows.
struct Outcome {
  Measurement measured;
  std::vector<std::string> lines;
};

// What a run takes from the harness that owns it, which outlives it.
struct RunEnv {
  const Flags* flags = nullptr;
  telemetry::Nvml* nvml = nullptr;                // null without NVML
  const std::string* nvml_unavailable = nullptr;  // why not, where it is null and GPU rows ran
  Baselines* baselines = nullptr;
  Predictor* predictor = nullptr;  // where one-device runs leave what predictions are made from
  const EpochSink* on_epoch = nullptr;
};

// NVML's sampler over a row's GPUs (their PCI bus ids); null for a CPU row (no buses), or without
// NVML or where it cannot sample them, with a note in `notes` saying why (once).
std::unique_ptr<telemetry::GpuSampler> sampler_for(const std::vector<std::string>& buses, const RunEnv& env,
                                                   std::vector<std::string>& notes);

// What the timed steps of one repetition measured, for the counters. Every rate a row reports
// is on the wall clock (what a training job experiences); the device clock has columns of its
// own.
struct Window {
  double steps = 0;
  double wall = 0;               // seconds, the whole window (the slowest rank's under MPI)
  double cpu = 0;                // this process's CPU seconds in the window, NVML's sampling left out
  double device_step_time = -1;  // seconds per step on the device clock (CUDA events); < 0: none
  // This process's threads' seconds runnable but waiting for a CPU in the window (the kernel's run
  // delay): a core taken by another process, or more threads than cores; < 0: unknown.
  double cpu_wait = -1;
  // Each timed step's wall clock, where the run has them (this process's): the row's windows.
  std::vector<double> step_seconds{};
  double step_time() const { return wall / steps; }
};

// The samples/s of up to kWindows consecutive parts of a repetition's timed steps, from the row's
// samples/s and its steps' times: what compare.py's noise test takes where a row has too few
// repetitions for it (docs/scripts.md). Fewer windows where there are fewer steps; none for one.
inline constexpr int kWindows = 10;
std::vector<double> window_rates(const std::vector<double>& step_seconds, double samples_per_s);

// What the engine says of the row's devices, asked once, when the run is prepared.
struct RowDevices {
  double peak_gflops = 0;          // of one device: the datasheet's on a GPU, sgemm's on the CPU
  double peak_spread = 0;          // the CPU's: (max - min) / median of sgemm's rounds
  std::vector<std::string> buses;  // the GPUs' PCI bus ids, each once, for NVML
};

class BenchmarkRun {
 public:
  BenchmarkRun(const BenchInfo& info, RunEnv env) : info_(info), env_(env) {}
  virtual ~BenchmarkRun() = default;
  BenchmarkRun(const BenchmarkRun&) = delete;
  BenchmarkRun& operator=(const BenchmarkRun&) = delete;

  const std::string& name() const { return info_.name; }
  // One call of Google Benchmark, one repetition: prepare and warm up (the first call only), the
  // timed steps, the counters and the report. Throws to fail the row.
  Outcome walk(benchmark::State& st);
  // False for a run that starts afresh every call (a run of epochs trains from scratch).
  virtual bool kept_across_calls() const { return true; }

 protected:
  // Builds what the row trains (networks, data), with no collective: under mpirun every rank's
  // went well before connect() (parallel::set_up_together).
  virtual void prepare() {}
  // The row's first collectives, under mpirun: communicators, the weights broadcast.
  virtual void connect() {}
  virtual void warm_up() {}
  virtual Window timed_steps(benchmark::State& st) = 0;
  virtual void counters(const Window& window) = 0;

  // Shared by the kinds of run:
  struct Timed {                  // the figures timed_counters derives a row's counters from
    double samples_per_step = 0;  // the global batch
    double peak_gflops = 0;       // of every device the step used
    double replicas = 1;          // for host CPU per replica
  };
  void prepare_gpus() const;
  // A network of the row's model on `device` (a CUDA ordinal; ignored on the CPU).
  std::unique_ptr<Network> make_network(int device) const;
  // Where a trainer stood when its timed window closed: the prediction probes' steps, taken after
  // it on a row's first repetition, are not the row's phases or its last loss.
  struct TrainerAt {
    PhaseTimes phases;
    float loss = 0;
    static TrainerAt now(const Trainer& trainer);
  };
  // The row's counters from window `w`, with the phases between `p0` and `end`.
  void timed_counters(const Window& w, const Timed& t, const Trainer& trainer, const PhaseTimes& p0,
                      const TrainerAt& end);
  void note_utilisation();
  void note_lanes();  // a CPU row whose batch ran in lanes says so
  // The OpenMP threads of the row's steps: the device's, except that a `cpu` row (all cores, the
  // machine's choice) whose step is too small to share runs on fewer, and says so.
  int step_threads();
  // The lanes this row's CPU network runs on with `threads` OpenMP threads (cpu_network_lanes),
  // worked out once per count: the choice plans a slice of the batch, oneDNN primitives and all.
  int lanes_at(int threads);
  void note(std::string text) { notes_.push_back(std::move(text)); }
  void note_first(std::string text) { notes_.insert(notes_.begin(), std::move(text)); }
  void verdict(const char* word) { verdicts_.emplace_back(word); }
  // Scaling efficiency over the row's baseline and the speed-up over its cpu row, where they ran,
  // with their verdicts (not_scaling), from the row's samples/s.
  void comparisons(int devices);
  // Timed steps: the step budget of this run (fixed or timed, StepBudget).
  StepBudget budget() const { return step_budget(*env_.flags); }

  const BenchInfo& info_;
  RunEnv env_;
  RowDevices devices_;
  // This call's figures, in the counter fields of a row (the rest stay empty): what counters()
  // measured, which the row takes and Google Benchmark's own reporters are given by name.
  Row figures_;

 private:
  bool prepared_ = false;
  std::map<int, int> lanes_;           // lanes_at's, by thread count
  std::vector<std::string> notes_;     // this call's: the report
  std::vector<std::string> verdicts_;  // this call's
  friend class TimedWindow;

 protected:
  std::string prediction_inputs_;  // this call's, where a one-device train run recorded them
};

// The run of `info`'s benchmark: its kind chosen by the benchmark's kind and parallel mode.
std::unique_ptr<BenchmarkRun> make_run(const BenchInfo& info, RunEnv env);

// The five kinds: run_train.cpp, run_parallel.cpp (replicas, jobs, replays), run_epochs.cpp.
std::unique_ptr<BenchmarkRun> make_train_run(const BenchInfo& info, RunEnv env);
std::unique_ptr<BenchmarkRun> make_replicas_run(const BenchInfo& info, RunEnv env);
std::unique_ptr<BenchmarkRun> make_jobs_run(const BenchInfo& info, RunEnv env);
std::unique_ptr<BenchmarkRun> make_replay_run(const BenchInfo& info, RunEnv env);
std::unique_ptr<BenchmarkRun> make_epochs_run(const BenchInfo& info, RunEnv env);

// The row fails unless training lowered the loss of the first training batch (tb::CheckFailed).
void check_loss_fell(Trainer& trainer);
// The mem_* columns, the loss scale and skipped steps, where the network reports them.
void memory_counters(Row& figures, const Network& network);

// The timed window of one repetition: the wall clock, this process's CPU time and, on a GPU row
// with NVML, the sampler over the row's GPUs, whose first reading comes before the window opens
// and whose thread's CPU time is left out of the process's.
class TimedWindow {
 public:
  explicit TimedWindow(BenchmarkRun& run);
  ~TimedWindow();
  TimedWindow(const TimedWindow&) = delete;
  TimedWindow& operator=(const TimedWindow&) = delete;
  void open();
  // Closes the window over `steps` steps; NVML's columns, for `samples` trained in it, go to the
  // run's figures.
  Window close(double steps, double samples);

 private:
  BenchmarkRun& run_;
  std::unique_ptr<telemetry::GpuSampler> sampler_;
  double wall0_ = 0, cpu0_ = 0, cpu_wait0_ = -1;
};

}  // namespace tb::bench
