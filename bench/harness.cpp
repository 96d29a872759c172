// The benchmark bodies (harness.hpp): a training session per train/ benchmark, kept across
// Google Benchmark's invocations of it; replicas for data parallelism; whole runs of epochs for
// the epochs/ benchmarks; each with its checks and counters, and NVML's view of its GPUs.
#include "bench/harness.hpp"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <set>

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench/columns.hpp"
#include "bench/context.hpp"
#include "bench/csv.hpp"
#include "bench/jobs.hpp"
#include "datasets/sources.hpp"
#include "engine/backends.hpp"
#include "engine/core/error.hpp"
#include "engine/core/timer.hpp"
#include "engine/parallel/replica_run.hpp"
#include "engine/parallel/timeline.hpp"
#include "engine/train/trainer.hpp"
#include "telemetry/nvml.hpp"
#include "telemetry/sampler.hpp"

namespace tb::bench {

using parallel::Mode;
using parallel::world;

struct Harness::Session {
  std::string name;
  std::unique_ptr<Trainer> trainer;
  data::Splits splits;  // what the trainer's data left behind: the validation split
};

struct Harness::ParallelSession {
  std::string name;
  std::unique_ptr<parallel::ReplicaRun> run;
};

namespace {

// With --data_on_device the trainer pulls these: batch k is the network's resident batch k
// (ResidentData), with no host data at all.
class ResidentBatches final : public Dataset {
 public:
  ResidentBatches(std::string name, i64 batch, i64 batches) : name_(std::move(name)), batches_(batches) {
    batch_.batch = batch;
  }
  const Batch& next() override {
    batch_.index = step_++;
    return batch_;
  }
  void feed(Network& net, const Batch& batch) const override { net.resident_data()->use_resident(batch.index); }
  std::string name() const override { return name_; }
  std::string source() const override { return "device"; }
  i64 steps_per_epoch() const override { return batches_; }

 private:
  std::string name_;
  i64 batches_;
  i64 step_ = 0;
  Batch batch_;
};

constexpr std::size_t kResidentMaxBytes = std::size_t(2) << 30;

// Keeps up to one epoch of `data` (at most kResidentMaxBytes) on the network's device and
// returns the dataset that names those batches.
std::unique_ptr<Dataset> make_resident(Network& network, Dataset& data, i64 batch) {
  ResidentData* resident = network.resident_data();
  TB_CHECK(resident, "--data_on_device: this backend cannot keep a dataset on its device");
  const std::size_t per_batch = resident->batch_bytes();
  const i64 fit = std::max<i64>(1, i64(kResidentMaxBytes / per_batch));
  const i64 batches = std::min(data.steps_per_epoch() > 0 ? data.steps_per_epoch() : fit, fit);
  resident->make_resident(data, batches);
  return std::make_unique<ResidentBatches>(data.name(), batch, batches);
}

NetworkOptions network_options(const BenchInfo& info, int device) {
  return NetworkOptions{.batch = info.batch,
                        .optimizer = info.optimizer,
                        .seed = info.seed,
                        .device = device,
                        .precision = info.precision,
                        .cuda_graph = info.cuda_graph,
                        .layout = info.gpu_layout};
}

std::string rate_key(const BenchInfo& b, const std::string& precision) {
  return fmt::format("{}/{}/{}/{}/{}/{}", b.model, b.dataset, b.gpu() ? "gpu" : "cpu", precision, b.batch, b.variant);
}

// The median of a one-device row's repetitions so far: the baseline of scaling efficiency.
double median_rate(std::vector<double> rates) {
  std::sort(rates.begin(), rates.end());
  const std::size_t n = rates.size();
  return n % 2 ? rates[n / 2] : (rates[n / 2 - 1] + rates[n / 2]) / 2;
}

// The machine's 1-minute load average (/proc/loadavg); negative where it cannot be read.
double load_average_1m() {
  double load = -1;
  if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &load) != 1) load = -1;
    std::fclose(f);
  }
  return load;
}

// The run fails unless training lowered the loss of the first training batch: its loss at the
// first step (before any update) against a training-mode forward on it now (no update). The
// same samples before and after, so a falling loss is not an artefact of easier batches.
void check_loss_fell(Trainer& trainer) {
  const float before = trainer.losses().front(), after = trainer.first_batch_loss();
  if (after < before) return;
  // A loss well above where it started diverged; one about where it started sits on a plateau.
  constexpr float kRose = 1.05f;
  if (!(after <= before * kRose))
    throw CheckFailed(
        fmt::format("loss rose: {:.5g} on the first batch before training, {:.5g} after {} steps "
                    "(training diverged: lower the learning rate with --lr)",
                    before, after, trainer.losses().size()));
  throw CheckFailed(
      fmt::format("loss did not fall: {:.5g} on the first batch before training, {:.5g} after {} "
                  "steps (a model still on its initial plateau needs more steps: raise "
                  "--warmup_steps)",
                  before, after, trainer.losses().size()));
}

// The timed steps of one benchmark, however many replicas ran them.
struct Timed {
  double steps = 0, step_time = 0, wall = 0, cpu = 0;
  double samples_per_step = 0;  // the global batch
  double peak_gflops = 0;       // of every device the step used
  double replicas = 1;          // for host CPU per replica (per job)
};

// Counters of the timed steps: throughput, utilisation, host CPU, losses, phases.
void timed_counters(benchmark::State& st, const Timed& t, const BenchInfo& info, const Trainer& trainer,
                    const PhaseTimes& p0) {
  const double samples_per_s = t.samples_per_step / t.step_time;
  const double tflops = info.cost.train_flops_per_sample() * samples_per_s * 1e-12;
  const PhaseTimes& p = trainer.phases();
  auto& c = st.counters;
  c["samples_per_s"] = samples_per_s;
  c["step_time_s"] = t.step_time;
  c["wall_step_time_s"] = t.wall / t.steps;
  c["model_tflops"] = tflops;
  c["peak_gflops"] = t.peak_gflops;
  c["utilisation"] = tflops * 1e3 / t.peak_gflops;
  if (!info.gpu()) c["peak_spread"] = cpu_peak_spread(info.threads);
  c["host_cpu_s_per_step"] = t.cpu / t.steps / t.replicas;
  c["host_cpu_util"] = t.cpu / t.wall;
  c["peak_rss_bytes"] = double(peak_rss_bytes());
  c["loss_first"] = trainer.losses().front();
  c["loss_last"] = trainer.losses().back();
  c["data_s_per_step"] = (p.data - p0.data) / t.steps;
  c["data_wait_s_per_step"] = (p.data_wait - p0.data_wait) / t.steps;
  if (p.split) {  // a step replayed as one CUDA graph has no phases
    c["forward_s_per_step"] = (p.forward - p0.forward) / t.steps;
    c["backward_s_per_step"] = (p.backward - p0.backward) / t.steps;
    c["update_s_per_step"] = (p.update - p0.update) / t.steps;
  }
}

double device_peak_gflops(const BenchInfo& info) {
  return info.gpu() ? gpu_peak(info.gpu_ordinal, info.precision).gflops : cpu_peak_gflops(info.threads);
}

// The mem_* columns, the loss scale and skipped steps, where the network reports them.
void memory_counters(benchmark::State& st, const Network& network) {
  if (const MemoryReport* report = network.memory_report())
    for (const auto& [name, value] : report->memory_counters()) st.counters[name] = value;
}

// NVML's columns of the timed steps, and what a reader must know about them. Returns the CPU
// seconds the sampling thread used, for the caller to leave out of the row's host CPU.
double telemetry_counters(benchmark::State& st, const telemetry::GpuSummary& summary, double samples,
                          std::vector<std::string>& notes) {
  for (const auto& [name, value] : summary.counters(samples)) st.counters[name] = value;
  if (summary.mem_used_bytes && !summary.mem_is_process)
    notes.push_back(
        "gpu_mem_used_bytes is the whole device's: NVML does not list this process (a container's "
        "PID namespace?)");
  if (summary.throttle_known && summary.throttle_mask != 0)
    notes.push_back(fmt::format("GPU clocks held back during the timed steps: {}",
                                telemetry::throttle_reason_names(summary.throttle_mask)));
  return summary.thread_cpu_s;
}

std::vector<int> distinct(std::vector<int> ordinals) {
  std::sort(ordinals.begin(), ordinals.end());
  ordinals.erase(std::unique(ordinals.begin(), ordinals.end()), ordinals.end());
  return ordinals;
}

std::string joined(const std::vector<std::string>& notes) { return fmt::format("{}", fmt::join(notes, "; ")); }

// A CPU row above its sgemm peak says why that cannot be taken at face value.
void note_utilisation(benchmark::State& st, const BenchInfo& info, std::vector<std::string>& notes) {
  const double u = st.counters["utilisation"];
  if (u <= 1) return;
  notes.push_back(fmt::format(
      "utilisation {:.2f} exceeds 1: the model's kernels ran faster than the sgemm peak measured at start-up ({:.1f} "
      "GFLOP/s, spread {:.0f}%), so that peak was measured low (a busy machine?) or the FLOP count is high",
      u, info.gpu() ? 0.0 : cpu_peak_gflops(info.threads), info.gpu() ? 0.0 : 100 * cpu_peak_spread(info.threads)));
}

}  // namespace

Harness::Harness(const Flags& flags, int cores) : flags_(flags), benchmarks_(plan_benchmarks(flags, cores)) {
  for (const std::string& link : flags_.links) parallel::parse_link(link);  // a bad --link fails before measuring
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

void Harness::release_sessions() {
  session_.reset();
  parallel_.reset();
}

const BenchInfo* Harness::find(const std::string& name) const {
  for (const BenchInfo& b : benchmarks_)
    if (b.name == name) return &b;
  return nullptr;
}

void Harness::register_benchmarks(EpochSink on_epoch, RepetitionSink on_repetition) {
  on_epoch_ = std::move(on_epoch);
  on_repetition_ = std::move(on_repetition);
  for (const BenchInfo& b : benchmarks_) {
    auto* registered =
        benchmark::RegisterBenchmark(b.name.c_str(), [this, &b](benchmark::State& st) { run_benchmark(st, b); });
    if (b.kind == Kind::Epochs)
      registered->Iterations(1)->Unit(benchmark::kSecond);
    else
      registered->Unit(benchmark::kMillisecond);
    if (b.parallel == Mode::Processes && b.kind == Kind::Train) registered->Iterations(1);  // the jobs time themselves
    const bool parallel = b.parallel != Mode::None;
    if ((b.gpu() || parallel) && b.kind == Kind::Train && b.skip_reason.empty()) registered->UseManualTime();
    // Every rank must run the same number of steps: no adaptive iteration count under MPI.
    if (world().size > 1 && b.kind == Kind::Train) registered->Iterations(flags_.iterations);
  }
}

void Harness::prepare_gpus(const BenchInfo& info) {
  if (!info.gpu()) return;
  for (int ordinal : distinct(info.gpu_ordinals)) gpu_prepare(ordinal, info.gpu_memory_limit);
}

std::unique_ptr<telemetry::GpuSampler> Harness::sampler_for(const BenchInfo& info, std::vector<std::string>& notes) {
  if (!info.gpu() || !nvml_) return nullptr;
  std::vector<std::string> buses;
  for (int ordinal : distinct(info.gpu_ordinals))
    buses.push_back(gpu_inventory().devices.at(std::size_t(ordinal)).pci_bus_id);
  try {
    return std::make_unique<telemetry::GpuSampler>(*nvml_, buses, unsigned(::getpid()));
  } catch (const Error& e) {
    notes.push_back(fmt::format("no NVML columns: {}", e.what()));
    return nullptr;
  }
}

std::unique_ptr<Harness::Session> Harness::make_session(const BenchInfo& info) {
  prepare_gpus(info);
  std::unique_ptr<Network> network = make_network(info.backend, info.spec, network_options(info, info.gpu_ordinal));
  auto session = std::make_unique<Session>();
  session->name = info.name;
  session->splits = data::make_splits(info.dataset, info.data_folder, info.spec, info.loader);
  std::unique_ptr<Dataset> train = std::move(session->splits.train);
  if (info.data_on_device && info.gpu() && info.kind == Kind::Train)
    train = make_resident(*network, *train, info.batch);
  session->trainer = std::make_unique<Trainer>(std::move(network), std::move(train));
  return session;
}

Harness::Session& Harness::train_session(const BenchInfo& info) {
  if (session_ && session_->name == info.name) return *session_;
  session_.reset();  // free the previous model before building the next
  auto session = make_session(info);
  for (std::int64_t i = 0; i < info.warmup_steps; ++i) session->trainer->step();
  session_ = std::move(session);
  return *session_;
}

// A precision meant to be faster than fp32 that was not, in this invocation, says so and why in
// its row: tensor cores shorten matrix work, and where a step is short kernels bound by launches
// and memory, the casts of mixed precision and the loss-scale check (or TF32's other kernel
// choices) cost about what they save.
std::string Harness::note_slower_than_fp32(const BenchInfo& info, double rate, double step_time_s) const {
  if (!info.gpu() || info.precision == "fp32") return "";
  const auto found = single_rates_.find(rate_key(info, "fp32"));
  if (found == single_rates_.end()) return "";
  const double fp32 = median_rate(found->second);
  if (rate >= fp32) return "";
  const double step_ms = step_time_s * 1e3;
  constexpr double kShortStepMs = 5;  // a step of small kernels: launches and memory set its pace
  if (step_ms < kShortStepMs)
    return fmt::format(
        "{:.2f}x fp32's samples/s in this run: a step of {:.3g} ms of small kernels is bound by "
        "launches and memory, not matrix work, so {} gains nothing from tensor cores{}",
        rate / fp32, step_ms, info.precision,
        info.precision == "tf32" ? "" : " and pays for its casts and loss-scale checks");
  return fmt::format(
      "{:.2f}x fp32's samples/s in this run; TB_CUDA_LAYER_TIMES=<file> writes where each layer's "
      "time goes",
      rate / fp32);
}

// One replica. On a GPU the step time is the device's (CUDA events from the batch upload to the
// end of the update), which Google Benchmark also reports (manual time); wall_step_time_s adds
// the host's share between steps.
void Harness::run_train(benchmark::State& st, const BenchInfo& info) {
  omp_set_num_threads(info.threads);
  parallel_.reset();
  Trainer& trainer = *train_session(info).trainer;
  job_rendezvous();  // a job of gpu:1/jobs:K times its steps when the others do
  std::vector<std::string> notes;
  const std::unique_ptr<telemetry::GpuSampler> sampler = sampler_for(info, notes);
  // When each gradient bucket becomes ready, for predicted N-device rows (a CUDA graph replays
  // backward without the hook that marks them).
  std::unique_ptr<parallel::TimelineRecorder> timeline;
  if (info.timeline && !info.cuda_graph) timeline = std::make_unique<parallel::TimelineRecorder>(trainer.network());
  const PhaseTimes p0 = trainer.phases();
  if (sampler) sampler->start();  // its first reading before the timed window, its thread's CPU left out
  const double wall0 = wall_seconds(), cpu0 = process_cpu_seconds();
  for (auto _ : st) {
    if (timeline) timeline->before_step();
    trainer.step();
    if (timeline) timeline->after_step();
    if (info.gpu()) st.SetIterationTime(trainer.last_device_seconds());
  }
  const double wall = wall_seconds() - wall0;
  double cpu = process_cpu_seconds() - cpu0;
  const double steps = double(st.iterations());
  if (sampler) cpu -= telemetry_counters(st, sampler->stop(), steps * double(info.batch), notes);
  if (timeline) timelines_[info.name] = timeline->timeline();
  timeline.reset();
  check_loss_fell(trainer);
  const PhaseTimes& p = trainer.phases();
  const double step_time = info.gpu() ? (p.device - p0.device) / steps : wall / steps;
  timed_counters(st,
                 Timed{.steps = steps,
                       .step_time = step_time,
                       .wall = wall,
                       .cpu = cpu,
                       .samples_per_step = double(info.batch),
                       .peak_gflops = device_peak_gflops(info)},
                 info, trainer, p0);
  memory_counters(st, trainer.network());
  note_utilisation(st, info, notes);
  const double rate = st.counters["samples_per_s"];
  single_rates_[rate_key(info, info.precision)].push_back(rate);
  if (std::string note = note_slower_than_fp32(info, rate, step_time); !note.empty()) notes.insert(notes.begin(), note);
  pending_.repetition.message = joined(notes);
}

Harness::ParallelSession& Harness::parallel_session(const BenchInfo& info) {
  if (parallel_ && parallel_->name == info.name) return *parallel_;
  parallel_.reset();
  session_.reset();
  prepare_gpus(info);
  const int rank = world().rank;
  auto bind = [&info](int k) {
    if (info.gpu()) gpu_bind_thread(info.gpu_ordinals.at(std::size_t(k)));
  };
  auto make = [&](int k) {
    const int replica = rank * info.replicas + k;  // a different shard of the data each
    data::LoaderConfig loader = info.loader;
    loader.seed = info.loader.seed + 7919 * std::uint64_t(replica);
    const int device = info.gpu() ? info.gpu_ordinals.at(std::size_t(k)) : 0;
    std::unique_ptr<Network> net = make_network(info.backend, info.spec, network_options(info, device));
    auto splits = data::make_splits(info.dataset, info.data_folder, info.spec, loader);
    return std::make_pair(std::move(net), std::move(splits.train));
  };
  auto session = std::make_unique<ParallelSession>();
  session->name = info.name;
  session->run = std::make_unique<parallel::ReplicaRun>(info.parallel, info.replicas, bind, make);
  session->run->warm_up(info.warmup_steps);
  parallel_ = std::move(session);
  return *parallel_;
}

// Several replicas: the step is the slowest replica's (on every rank), the samples are the
// global batch's, and the communication of one replica is reported.
void Harness::run_parallel(benchmark::State& st, const BenchInfo& info) {
  omp_set_num_threads(info.threads);
  parallel::ReplicaRun& run = *parallel_session(info).run;
  Trainer& first = *run.replicas()[0].trainer;
  std::vector<std::string> notes;
  const std::unique_ptr<telemetry::GpuSampler> sampler = sampler_for(info, notes);
  const PhaseTimes p0 = first.phases();
  const parallel::CommStats c0 = run.comm_stats();
  if (sampler) sampler->start();
  const double wall0 = wall_seconds(), cpu0 = process_cpu_seconds();
  double step_total = 0;
  for (auto _ : st) {
    const double s = run.step();
    step_total += s;
    st.SetIterationTime(s);
  }
  const double wall = wall_seconds() - wall0;
  double cpu = process_cpu_seconds() - cpu0;
  const double steps = double(st.iterations());
  // This process's GPUs trained its replicas' samples (under MPI, rank 0's GPU its own).
  if (sampler) cpu -= telemetry_counters(st, sampler->stop(), steps * double(info.batch) * info.replicas, notes);
  run.check(check_loss_fell);
  const int total = run.communicating_ranks();
  const double step_time = step_total / steps;
  const bool one_gpu = info.parallel == Mode::Jobs || info.parallel == Mode::SharedDevice;
  const int devices = one_gpu ? 1 : total;
  timed_counters(st,
                 Timed{.steps = steps,
                       .step_time = step_time,
                       .wall = wall,
                       .cpu = cpu,
                       .samples_per_step = double(info.batch) * total,
                       .peak_gflops = device_peak_gflops(info) * devices,
                       .replicas = double(info.replicas)},
                 info, first, p0);
  auto& c = st.counters;
  const double samples_per_s = c["samples_per_s"];
  c["replicas"] = total;
  if (info.parallel == Mode::Jobs) {
    c["host_cpu_util_per_job"] = cpu / wall / info.replicas;  // what `top` shows for one job's process
  } else {
    const parallel::CommStats cs = run.comm_stats();
    const double comm = (cs.wait_s - c0.wait_s) / steps, bytes = (cs.bytes - c0.bytes) / steps;
    c["comm_s_per_step"] = comm;
    c["comm_share"] = comm / step_time;
    c["allreduce_bytes_per_step"] = bytes;
    // nccl-tests' bus bandwidth: what each link carried, from the communication not hidden by
    // backward (a lower bound on the links' rate when buckets overlapped).
    if (comm > 0) c["busbw_gbps"] = bytes / comm * 2.0 * (total - 1) / total * 1e-9;
    const double buckets = double(cs.buckets - c0.buckets);
    if (buckets > 0) c["comm_overlap"] = double(cs.buckets_early - c0.buckets_early) / buckets;
    // Replicas sharing one GPU check the data-parallel path, they do not scale.
    if (info.shared_device)
      notes.insert(notes.begin(), fmt::format("{} replicas on one GPU: checks correctness, not scaling", total));
    else if (auto it = single_rates_.find(rate_key(info, info.precision)); it != single_rates_.end())
      c["scaling_efficiency"] = samples_per_s / (total * median_rate(it->second));
  }
  memory_counters(st, *run.replicas()[0].backend);
  note_utilisation(st, info, notes);
  if (info.gpu() && (flags_.cuda_graph || flags_.data_on_device))
    notes.push_back("--cuda_graph and --data_on_device apply to one-device rows: these replicas ran without them");
  pending_.repetition.message = joined(notes);
}

// K separate processes, each the one-device benchmark on its own (bench/jobs.hpp).
void Harness::run_processes(benchmark::State& st, const BenchInfo& info) {
  release_sessions();  // the jobs need the device's memory, not this process
  for (auto _ : st) {
    const JobsResult jobs = run_job_processes(info, flags_);
    st.SetIterationTime(jobs.step_s);
    for (const auto& [name, value] : jobs.counters) st.counters[name] = value;
    const double samples_per_s = jobs.counters.at("samples_per_s");
    const double tflops = info.cost.train_flops_per_sample() * samples_per_s * 1e-12;
    st.counters["model_tflops"] = tflops;
    st.counters["peak_gflops"] = device_peak_gflops(info) * (info.gpu() ? 1 : info.replicas);
    st.counters["utilisation"] = tflops * 1e3 / st.counters["peak_gflops"];
    pending_.repetition.message = jobs.message;
  }
}

void Harness::run_epochs(benchmark::State& st, const BenchInfo& info) {
  omp_set_num_threads(info.threads);
  session_.reset();
  for (auto _ : st) {  // one iteration: the whole run of epochs
    auto session = make_session(info);
    Trainer& trainer = *session->trainer;
    std::vector<std::string> notes;
    const std::unique_ptr<telemetry::GpuSampler> sampler = sampler_for(info, notes);
    if (sampler) sampler->start();
    const double wall0 = wall_seconds(), cpu0 = process_cpu_seconds();
    const EpochResult result =
        train_epochs(trainer, *session->splits.validation, session->splits.validation_steps,
                     EpochOptions{.epochs = info.epochs, .target_accuracy = info.target_accuracy},
                     [&](const EpochRecord& r) { on_epoch_(info, r); });
    const double wall = wall_seconds() - wall0;
    double cpu = process_cpu_seconds() - cpu0;
    const EpochRecord& last = result.records.back();
    // The energy of training and of the validation passes, over the samples of both.
    const double validated = double(last.epoch * session->splits.validation_steps * info.batch);
    if (sampler) cpu -= telemetry_counters(st, sampler->stop(), double(last.steps * info.batch) + validated, notes);
    check_loss_fell(trainer);
    const double steps = double(last.steps), train_cpu = cpu * last.train_s / wall;
    timed_counters(st,
                   Timed{.steps = steps,
                         .step_time = last.train_s / steps,
                         .wall = last.train_s,
                         .cpu = train_cpu,
                         .samples_per_step = double(info.batch),
                         .peak_gflops = device_peak_gflops(info)},
                   info, trainer, PhaseTimes{});
    memory_counters(st, trainer.network());
    auto& c = st.counters;
    c["epoch"] = double(last.epoch);
    c["train_loss"] = last.train_loss;
    c["val_loss"] = last.val_loss;
    c["train_acc"] = last.train_acc;
    c["val_acc"] = last.val_acc;
    c["elapsed_s"] = last.elapsed_s;
    c["time_to_target_s"] = result.time_to_target_s;
    if (info.target_accuracy > 0 && result.time_to_target_s < 0)
      throw CheckFailed(fmt::format("validation accuracy {:.4f} after {} epochs never reached the target {:.4f}",
                                    last.val_acc, last.epoch, info.target_accuracy));
    pending_.repetition.message = joined(notes);
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

void Harness::measure_world_link() {
  if (world().size < 2) return;
  const std::unique_ptr<parallel::Communicator> comm = parallel::world_comm();
  world_link_ = parallel::measure_link(*comm);
}

std::vector<PredictedRow> Harness::predictions(const BenchInfo& info, double samples_per_s) const {
  const auto found = timelines_.find(info.name);
  if (found == timelines_.end() || found->second.empty() || samples_per_s <= 0) return {};
  std::vector<parallel::Link> links;
  for (const std::string& name : flags_.links) {
    const parallel::Link link = parallel::parse_link(name);
    if (link.name != "measured")
      links.push_back(link);
    else if (world_link_)
      links.push_back(*world_link_);
  }
  if (flags_.links.empty() && info.gpu()) links.push_back(parallel::parse_link("nvlink4"));
  if (flags_.links.empty() && !info.gpu() && world_link_) links.push_back(*world_link_);
  std::vector<PredictedRow> out;
  for (const parallel::Link& link : links) {
    // A measured link is this run's: its N. A preset: 2, 4 and 8, and this machine's GPUs beyond.
    std::vector<int> counts{world().size};
    if (link.name != "measured") {
      counts = {2, 4, 8};
      const int gpus = int(gpu_inventory().devices.size());
      if (info.gpu() && gpus > 8) counts.push_back(gpus);
    }
    for (int n : counts)
      out.push_back(PredictedRow{
          fmt::format("{}:{}", info.gpu() ? "gpu" : "mpi", n), link,
          parallel::predict(found->second, double(info.batch) / samples_per_s, double(info.batch), n, link),
          found->second});
  }
  return out;
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
  if (pending_.name == info.name && pending_.iterations == st.max_iterations && on_repetition_)
    on_repetition_(info, pending_.repetition);
  pending_ = Pending{};
  if (!info.skip_reason.empty()) {
    st.SkipWithError(skip_message(info.skip_reason).c_str());
    return;
  }
  // Under mpirun, one-replica benchmarks are the baselines: rank 0 runs them alone (the other
  // ranks wait for the next data-parallel benchmark) and only rank 0 reports anyway.
  if (world().size > 1 && info.parallel == Mode::None && world().rank != 0) {
    st.SkipWithError(skip_message("one-replica baseline, run by rank 0").c_str());
    return;
  }
  pending_.name = info.name;
  pending_.iterations = st.max_iterations;
  const double load = load_average_1m();
  warn_if_loaded(info, load);
  try {
    // Each row reports its own peak resident set, not an earlier row's (a ResNet-152 before it):
    // another benchmark's session goes first (a train/ row keeps its own across Google
    // Benchmark's invocations of it).
    if (session_ && session_->name != info.name) session_.reset();
    if (parallel_ && parallel_->name != info.name) parallel_.reset();
    reset_peak_rss();
    if (info.kind == Kind::Epochs)
      run_epochs(st, info);
    else if (info.parallel == Mode::Processes)
      run_processes(st, info);
    else if (info.parallel != Mode::None)
      run_parallel(st, info);
    else
      run_train(st, info);
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
