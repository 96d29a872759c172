// Runs of several replicas: data parallelism in this process (one thread per GPU or CPU replica,
// and ranks under mpirun), replicas on threads stepping independently (threads:K), and jobs as
// separate processes (jobs:K, bench/run/jobs.hpp).
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "bench/predict/inputs.hpp"
#include "bench/run/jobs.hpp"
#include "bench/run/run.hpp"
#include "datasets/sources.hpp"
#include "engine/backends.hpp"
#include "engine/core/timer.hpp"
#include "engine/parallel/replay.hpp"
#include "engine/parallel/replica_run.hpp"
#include "engine/train/trainer.hpp"

namespace tb::bench {

namespace {

// The communication of `total` replicas over a window of `w`: what backward did not hide, per
// step, and nccl-tests' bus bandwidth over it (an upper bound on the links' rate where buckets
// overlapped: results/SCHEMA.md), from the replica's counts before and after the window.
void communication_counters(Row& c, const Window& w, int total, const parallel::CommStats& cs,
                            const parallel::CommStats& c0) {
  const double comm = (cs.wait_s - c0.wait_s) / w.steps, bytes = (cs.bytes - c0.bytes) / w.steps;
  c.comm_s_per_step = comm;
  c.comm_share = comm / w.step_time();
  c.allreduce_bytes_per_step = bytes;
  if (comm > 0) c.busbw_gbps = bytes / comm * parallel::allreduce_bus_factor(total) * 1e-9;
  const double buckets = double(cs.buckets - c0.buckets);
  if (buckets > 0) c.comm_overlap = double(cs.buckets_early - c0.buckets_early) / buckets;
}

// The step is the slowest replica's (on every rank), the samples are the global batch's, and the
// communication of one replica is reported.
class ReplicasRun final : public BenchmarkRun {
 public:
  using BenchmarkRun::BenchmarkRun;

 private:
  void prepare() override {
    prepare_gpus();
    const int rank = parallel::world().rank;
    auto bind = [this](int k) {
      if (info_.gpu()) gpu_bind_thread(info_.gpu_ordinals.at(std::size_t(k)));
    };
    auto make = [this, rank](int k) {
      const int replica = rank * info_.replicas + k;  // its own order of the whole set: a seed each
      data::LoaderConfig loader = info_.loader;
      loader.seed = info_.loader.seed + 7919 * std::uint64_t(replica);
      std::unique_ptr<Network> net = make_network(info_.gpu() ? info_.gpu_ordinals.at(std::size_t(k)) : 0);
      auto splits = data::make_splits(info_.dataset, info_.data_folder, info_.spec, loader);
      return std::make_pair(std::move(net), std::move(splits.train));
    };
    run_ = std::make_unique<parallel::ReplicaRun>(info_.device_kind->wiring, info_.device_kind->across_ranks,
                                                  info_.replicas, bind, make);
  }

  void connect() override { run_->connect(); }

  void warm_up() override { run_->warm_up(info_.warmup_steps); }

  Window timed_steps(benchmark::State& st) override {
    TimedWindow window(*this);
    p0_ = first().phases();
    c0_ = run_->comm_stats();
    double device_total = 0;
    std::int64_t steps = 0;
    std::vector<double> step_seconds;
    const StepBudget budget = this->budget();  // fixed under mpirun: every rank takes as many steps
    for (auto _ : st) {                        // one iteration: the repetition's window of steps
      window.open();
      for (const double start = wall_seconds(); budget.more(steps, wall_seconds() - start); ++steps) {
        const parallel::ReplicaRun::StepSeconds s = run_->step();
        device_total += s.device;
        step_seconds.push_back(s.wall);
      }
    }
    // This process's GPUs trained its replicas' samples (under MPI, rank 0's GPU its own); ranks
    // sharing one GPU (emulated nodes) all trained on the device whose energy rank 0 read (over
    // rank 0's samples alone, energy per sample came out N times the device's).
    const bool ranks_share_the_gpu = info_.device_kind->across_ranks && info_.device_kind->shares_device;
    const double trained_here = ranks_share_the_gpu ? double(parallel::world().size) : 1.0;
    Window w = window.close(double(steps), double(steps) * double(info_.batch) * info_.replicas * trained_here);
    w.step_seconds = std::move(step_seconds);
    // The step is the slowest rank's: its wall clock over the window, and its device time.
    w.wall = run_->slowest(w.wall);
    if (info_.gpu()) w.device_step_time = run_->slowest(device_total) / w.steps;
    return w;
  }

  void counters(const Window& w) override {
    run_->check(check_loss_fell);
    const int total = run_->communicating_ranks();
    const bool one_device = info_.device_kind->shares_device;
    timed_counters(w,
                   Timed{.samples_per_step = double(info_.batch) * total,
                         .peak_gflops = devices_.peak_gflops * (one_device ? 1 : total),
                         .replicas = double(info_.replicas)},
                   first(), p0_, TrainerAt::now(first()));
    figures_.replicas = total;
    // NVML is read by each rank of its own GPU, and the row is rank 0's: its GPU columns are that
    // GPU's (the device's, where the ranks share one).
    if (info_.gpu() && info_.device_kind->across_ranks && figures_.gpu_samples)
      note(info_.device_kind->shares_device
               ? "gpu_power_w and energy_j_per_sample are the one GPU's, which every rank trained on; "
                 "gpu_mem_used_bytes is rank 0's process's"
               : "gpu_util, gpu_power_w, gpu_mem_used_bytes and energy_j_per_sample are rank 0's GPU's alone, over "
                 "rank 0's samples (not summed over the ranks' GPUs)");
    if (!info_.device_kind->wiring)
      figures_.host_cpu_util_per_job = w.cpu / w.wall / info_.replicas;  // what `top` shows for one job's process
    else
      communication_counters(figures_, w, total, run_->comm_stats(), c0_);
    note_what_it_checks(total);
    memory_counters(figures_, *run_->replicas()[0].backend);
    note_utilisation();
    comparisons(info_.data_parallel);
    if (info_.gpu() && (env_.flags->cuda_graph || env_.flags->data_on_device))
      note("--cuda_graph and --data_on_device apply to one-device rows: these replicas ran without them");
  }

  // Rows that are not what they look like say so first.
  void note_what_it_checks(int total) {
    if (std::string_view(info_.device_kind->check_word) == "shared_device")
      note_first(fmt::format("{} replicas on one GPU: checks correctness, not scaling", total));
    if (info_.emulated_nodes && info_.gpu())
      note_first(fmt::format(
          "{} ranks as emulated nodes sharing one GPU over NCCL's socket transport: checks the multi-node path, not "
          "scaling",
          total));
    if (info_.emulated_nodes && !info_.gpu())
      note_first(fmt::format(
          "{} ranks as emulated nodes of one machine ({} host names, talking over a real TCP stack): checks the "
          "multi-node path; the ranks still share this machine's caches and memory",
          total, parallel::world().nodes));
  }

  Trainer& first() { return *run_->replicas()[0].trainer; }

  std::unique_ptr<parallel::ReplicaRun> run_;
  PhaseTimes p0_;
  parallel::CommStats c0_;
};

// A saved one-device row replayed on the ranks of this MPI world (--replay_from): each rank waits
// out the row's compute step by step and all-reduces its buckets for real at their saved times,
// through the data-parallel path (engine/parallel/replay.hpp). Its row is the network's truth
// for that step at N ranks; nothing trains.
class ReplayRun final : public BenchmarkRun {
 public:
  using BenchmarkRun::BenchmarkRun;

 private:
  void prepare() override {
    const PredictionInputs in = parse_prediction_inputs(info_.replay->inputs);
    const int rank = parallel::world().rank;
    auto make = [&](int) {
      auto net = std::make_unique<parallel::ReplayNetwork>(in.one.timeline, in.one.step_times,
                                                           info_.seed + 7919 * std::uint64_t(rank),
                                                           std::max(0.0, in.one.dp_overhead.value));
      replay_ = net.get();
      return std::make_pair(std::unique_ptr<Network>(std::move(net)),
                            std::unique_ptr<Dataset>(std::make_unique<parallel::ReplayData>(info_.batch)));
    };
    run_ = std::make_unique<parallel::ReplicaRun>(info_.device_kind->wiring, true, 1, nullptr, make,
                                                  parallel::ReplayNetwork::kBucketBytes);
  }

  void connect() override {
    run_->connect();
    // While it waits out the compute, the replay gives its all-reduces their turns, as a GPU's
    // communication moves beside its kernels; their sums stay undivided (nobody reads them).
    parallel::Communicator& comm = run_->replicas()[0].replica->comm();
    comm.keep_sums();
    replay_->set_progress([&comm] { return comm.progress(); });
  }

  void warm_up() override { run_->warm_up(info_.warmup_steps); }

  Window timed_steps(benchmark::State& st) override {
    TimedWindow window(*this);
    c0_ = run_->comm_stats();
    std::int64_t steps = 0;
    const StepBudget budget = this->budget();  // fixed under mpirun: every rank takes as many
    for (auto _ : st) {
      window.open();
      for (const double start = wall_seconds(); budget.more(steps, wall_seconds() - start); ++steps) run_->step();
    }
    Window w = window.close(double(steps), double(steps) * double(info_.batch));
    w.wall = run_->slowest(w.wall);
    return w;
  }

  void counters(const Window& w) override {
    run_->check([](Trainer&) {});  // no loss to fall; the replicas' buffers must still agree
    const int total = run_->communicating_ranks();
    Row& c = figures_;
    c.samples_per_s = double(info_.batch) * total / w.step_time();
    c.step_time_s = c.wall_step_time_s = w.step_time();
    c.host_cpu_s_per_step = w.cpu / w.steps;
    c.host_cpu_util = w.cpu / w.wall;
    c.replicas = total;
    communication_counters(figures_, w, total, run_->comm_stats(), c0_);
    comparisons(total);  // over the saved row (the harness holds its rates as a baseline's)
    note_first(fmt::format(
        "{}'s steps replayed on {} ranks ({} host(s)): its compute waited out (each step drawn from its saved step "
        "times), its {} gradient bucket(s) all-reduced for real at their saved times; efficiency over its {:.0f} "
        "samples/s",
        info_.replay->of, total, parallel::world().nodes,
        run_->comm_stats().buckets / std::max<i64>(1, run_->comm_stats().steps), info_.replay->samples_per_s));
  }

  std::unique_ptr<parallel::ReplicaRun> run_;
  parallel::ReplayNetwork* replay_ = nullptr;  // the one replica's, owned by run_
  parallel::CommStats c0_;
};

// K separate processes, each the one-device benchmark on its own, which time themselves.
class JobsRun final : public BenchmarkRun {
 public:
  using BenchmarkRun::BenchmarkRun;

 private:
  // The jobs have the GPU to themselves, but for this process's context: the blocks its earlier
  // rows' networks left in its allocator's cache (GiBs after ResNet-152) go back to the device.
  void prepare() override {
    if (info_.gpu())
      for (int ordinal : info_.gpu_ordinals) gpu_empty_cache(ordinal);
  }

  Window timed_steps(benchmark::State& st) override {
    for (auto _ : st) jobs_ = run_job_processes(info_, *env_.flags);
    // The steps every job completed inside the window in which all ran, together (the row's
    // iterations held Google Benchmark's count of calls, 1).
    const double window_samples = jobs_.figures.samples_per_s.value_or(0) * jobs_.figures.jobs_window_s.value_or(0);
    return Window{.steps = std::round(window_samples / double(info_.batch)),
                  .wall = jobs_.figures.step_time_s.value_or(0) * double(st.iterations())};
  }

  void counters(const Window&) override {
    figures_ = jobs_.figures;
    const double tflops = info_.cost.train_flops_per_sample() * figures_.samples_per_s.value_or(0) * 1e-12;
    const double peak_gflops = devices_.peak_gflops * (info_.gpu() ? 1 : info_.replicas);
    figures_.model_tflops = tflops;
    figures_.peak_gflops = peak_gflops;
    figures_.utilisation = tflops * 1e3 / peak_gflops;
    comparisons(1);
    if (!jobs_.message.empty()) note(jobs_.message);
  }

  JobsResult jobs_;
};

}  // namespace

std::unique_ptr<BenchmarkRun> make_replicas_run(const BenchInfo& info, RunEnv env) {
  return std::make_unique<ReplicasRun>(info, env);
}

std::unique_ptr<BenchmarkRun> make_replay_run(const BenchInfo& info, RunEnv env) {
  return std::make_unique<ReplayRun>(info, env);
}

std::unique_ptr<BenchmarkRun> make_jobs_run(const BenchInfo& info, RunEnv env) {
  return std::make_unique<JobsRun>(info, env);
}

}  // namespace tb::bench
