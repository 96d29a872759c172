// The run stage (bench/run/): the window jobs are timed on, the step budget of a repetition,
// the baselines' rates, and the harness writing every row of a run through the RowLog.
#include <benchmark/benchmark.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/output/rows.hpp"
#include "bench/predict/predict.hpp"
#include "bench/run/harness.hpp"
#include "bench/run/jobs.hpp"
#include "bench/run/run.hpp"
#include "engine/core/error.hpp"
#include "engine/core/timer.hpp"
#include "telemetry/sampler.hpp"

namespace tb::bench {
namespace {

// `steps` steps of `step_s` each from `start`, `batch` samples each.
JobSteps steady(double start, int steps, double step_s, double batch) {
  JobSteps j;
  j.first_start = start;
  j.samples_per_step = batch;
  for (int k = 1; k <= steps; ++k) j.ends.push_back(start + k * step_s);
  return j;
}

// Two jobs of unequal speed: the slow one steps 0.2 s from t = 0 to 2; the fast one 0.05 s from
// t = 0 to 2 and, with the device to itself, 0.025 s from 2 to 3. Only [0, 2] had both running:
// 10 + 40 steps of 100 samples there, 2500 samples/s. Each job's own rate summed (the rows'
// combination before the common window) says 100 x 10 / 2 + 100 x 80 / 3 = 3167: the fast job's
// time alone counted as if shared.
TEST(JobsWindow, CountsOnlyWhatEveryJobRanTogether) {
  JobSteps slow = steady(0, 10, 0.2, 100);
  JobSteps fast = steady(0, 40, 0.05, 100);
  for (int k = 1; k <= 40; ++k) fast.ends.push_back(2 + k * 0.025);
  const CommonWindow w = common_window({slow, fast});
  EXPECT_DOUBLE_EQ(w.start, 0);
  EXPECT_DOUBLE_EQ(w.end, 2);
  ASSERT_EQ(w.samples.size(), 2u);
  EXPECT_NEAR(w.samples[0], 1000, 1e-9);
  EXPECT_NEAR(w.samples[1], 4000, 1e-9);
  EXPECT_NEAR(w.samples_per_s(), 2500, 1e-9);
  const double own_rates_summed = 100.0 * 10 / 2 + 100.0 * 80 / 3;
  EXPECT_GT(own_rates_summed / w.samples_per_s(), 1.25);
}

// A job that started late: the window starts with it, and the steps of the others that straddle
// its start count for their part inside.
TEST(JobsWindow, StepsAcrossTheEdgesCountForTheirPartInside) {
  const JobSteps early = steady(0, 4, 1.0, 10);   // steps end at 1, 2, 3, 4
  const JobSteps late = steady(1.5, 5, 0.5, 10);  // from 1.5 to 4
  const CommonWindow w = common_window({early, late});
  EXPECT_DOUBLE_EQ(w.start, 1.5);
  EXPECT_DOUBLE_EQ(w.end, 4);
  EXPECT_NEAR(w.samples[0], 10 * (0.5 + 1 + 1), 1e-9);  // half of the step ending at 2, then two whole
  EXPECT_NEAR(w.samples[1], 50, 1e-9);
  EXPECT_NEAR(w.length(), 2.5, 1e-12);
}

TEST(JobsWindow, JobsThatNeverRanTogetherAreAnError) {
  const JobSteps first = steady(0, 2, 1, 10), second = steady(3, 2, 1, 10);
  EXPECT_THROW(common_window({first, second}), Error);
  // Touching is not overlapping: a window of no length has no rate.
  EXPECT_THROW(common_window({steady(0, 2, 1, 10), steady(2, 2, 1, 10)}), Error);
  JobSteps none;
  EXPECT_THROW(common_window({first, none}), Error);
}

// Two jobs of batch 10 that ran 40 samples each over the common 4 s (10 samples/s per job, 20
// together), and their rows for a test to fill.
class JobsRow : public testing::Test {
 protected:
  JobsRow() { info.batch = 10; }
  BenchInfo info;
  const CommonWindow window = common_window({steady(0, 4, 1.0, 10), steady(0, 4, 1.0, 10)});
  std::vector<Row> rows = std::vector<Row>(2);
};

// The jobs' device memory adds up where each job's is its own process's; where NVML listed no
// job's process (a container), each figure is the whole device's, and the row takes the largest,
// saying so: summed, two jobs counted the device twice.
TEST_F(JobsRow, DeviceMemoryAddsUpUnlessItIsTheDevicesOwn) {
  rows[0].gpu_mem_used_bytes = 3e9, rows[1].gpu_mem_used_bytes = 4e9;
  for (Row& r : rows) r.host_cpu_util = 1, r.samples_per_s = 10, r.loss_first = 2, r.loss_last = 1;
  const JobsResult own = combine_jobs(rows, window, info);
  EXPECT_EQ(own.figures.gpu_mem_used_bytes, 7e9);
  EXPECT_EQ(own.message.find(kDeviceWideMemoryNote), std::string::npos) << own.message;
  for (Row& r : rows) r.message = std::string("a note; ") + kDeviceWideMemoryNote;
  const JobsResult device = combine_jobs(rows, window, info);
  EXPECT_EQ(device.figures.gpu_mem_used_bytes, 4e9);
  EXPECT_NE(device.message.find(kDeviceWideMemoryNote), std::string::npos) << device.message;
  EXPECT_EQ(device.figures.samples_per_s, 20);
}

// The rest of the row of K jobs, each figure combined as it means: host CPU adds up (per job: its
// mean), the seconds per step are the jobs' mean, peaks the largest job's, energy per sample the
// device's energy over every job's samples (each job read all of it: 1 / sum of 1/e), the losses
// job 0's, the step K batches at the window's rate, and the message each job's rate inside the
// window beside its own.
TEST_F(JobsRow, EachFigureIsSummedAveragedOrTheLargestAsItMeans) {
  rows[0].host_cpu_util = 1.0, rows[1].host_cpu_util = 0.5;
  rows[0].host_cpu_s_per_step = 0.1, rows[1].host_cpu_s_per_step = 0.3;
  rows[0].mem_peak_bytes = 3e9, rows[1].mem_peak_bytes = 2e9;
  rows[0].energy_j_per_sample = 2, rows[1].energy_j_per_sample = 2;
  rows[0].loss_first = 2.5, rows[1].loss_first = 2.25;
  rows[0].samples_per_s = 11, rows[1].samples_per_s = 12;
  const JobsResult r = combine_jobs(rows, window, info);
  EXPECT_DOUBLE_EQ(r.figures.samples_per_s.value_or(NAN), 20);
  EXPECT_DOUBLE_EQ(r.figures.step_time_s.value_or(NAN), 1) << "2 jobs x batch 10 at 20 samples/s";
  EXPECT_DOUBLE_EQ(r.figures.jobs_window_s.value_or(NAN), 4);
  EXPECT_DOUBLE_EQ(r.figures.host_cpu_util.value_or(NAN), 1.5);
  EXPECT_DOUBLE_EQ(r.figures.host_cpu_util_per_job.value_or(NAN), 0.75);
  EXPECT_DOUBLE_EQ(r.figures.host_cpu_s_per_step.value_or(NAN), 0.2);
  EXPECT_DOUBLE_EQ(r.figures.mem_peak_bytes.value_or(NAN), 3e9);
  EXPECT_DOUBLE_EQ(r.figures.energy_j_per_sample.value_or(NAN), 1) << "the device's energy over both jobs' samples";
  EXPECT_DOUBLE_EQ(r.figures.loss_first.value_or(NAN), 2.5) << "job 0's";
  EXPECT_NE(r.message.find("samples/s per job in it 10, 10 (over each job's own steps 11, 12)"), std::string::npos)
      << r.message;
}

// The other figures of the row of K jobs: its replicas are the jobs, its wall step the step, the
// data wait the jobs' mean, every peak the largest job's, both losses job 0's; the message gives
// each job's host CPU as top shows it, and on a GPU says the jobs share it.
TEST_F(JobsRow, ReplicasPeaksLossesAndTheMessageAreTheJobs) {
  rows[0].host_cpu_util = 1.0, rows[1].host_cpu_util = 0.5;
  rows[0].data_s_per_step = 0.2, rows[1].data_s_per_step = 0.4;
  rows[0].peak_rss_bytes = 1e9, rows[1].peak_rss_bytes = 2e9;
  rows[0].gpu_util = 0.9, rows[1].gpu_util = 0.8;
  rows[0].gpu_temp_max_c = 60, rows[1].gpu_temp_max_c = 70;
  rows[0].loss_first = 2.5, rows[1].loss_first = 2.25;
  rows[0].loss_last = 1.5, rows[1].loss_last = 1.25;
  rows[0].samples_per_s = 11, rows[1].samples_per_s = 12;
  const JobsResult r = combine_jobs(rows, window, info);
  EXPECT_DOUBLE_EQ(r.figures.replicas.value_or(NAN), 2);
  EXPECT_DOUBLE_EQ(r.figures.wall_step_time_s.value_or(NAN), 1);
  EXPECT_DOUBLE_EQ(r.figures.data_s_per_step.value_or(NAN), 0.3);
  EXPECT_DOUBLE_EQ(r.figures.peak_rss_bytes.value_or(NAN), 2e9);
  EXPECT_DOUBLE_EQ(r.figures.gpu_util.value_or(NAN), 0.9);
  EXPECT_DOUBLE_EQ(r.figures.gpu_temp_max_c.value_or(NAN), 70);
  EXPECT_DOUBLE_EQ(r.figures.loss_first.value_or(NAN), 2.5);
  EXPECT_DOUBLE_EQ(r.figures.loss_last.value_or(NAN), 1.5) << "job 0's";
  EXPECT_EQ(r.message,
            "2 processes, timed on one window of 4 s in which every job ran: samples/s per job in it 10, 10 (over "
            "each job's own steps 11, 12); host CPU per job 100%, 50% (what top shows for each)");
  info.backend = Backend::Cuda;
  const std::string on_gpu = combine_jobs(rows, window, info).message;
  EXPECT_EQ(on_gpu.rfind("2 processes on one GPU, each with its own CUDA context, timed on one window of 4 s", 0), 0u)
      << on_gpu;
}

// A GPU row without NVML says so in its own row, once, whatever its repetitions: the reason went
// to stderr only, once per run, and the row's NVML columns were empty without a word.
TEST(Telemetry, AGpuRowWithoutNvmlSaysWhyInItsRow) {
  const std::string why = "libnvidia-ml.so.1 not found (no NVIDIA driver on this machine)";
  const RunEnv env{.nvml = nullptr, .nvml_unavailable = &why};
  std::vector<std::string> notes;
  EXPECT_FALSE(sampler_for({}, env, notes));
  EXPECT_TRUE(notes.empty()) << "a CPU row has no NVML columns to explain";
  for (int repetition = 0; repetition < 2; ++repetition) EXPECT_FALSE(sampler_for({"00000000:01:00.0"}, env, notes));
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0], "no NVML columns: " + why);
}

// The threads the "loaded" verdict holds the load average against: a row's jobs, replicas and
// loaders, in every rank on this host.
TEST(Loaded, ThreadsCountEveryJobReplicaLoaderAndRankHere) {
  BenchInfo jobs;
  jobs.device_kind = &kind_named("cpu:T/jobs:K");
  jobs.threads = 1, jobs.replicas = 2;
  EXPECT_EQ(threads_on_this_host(jobs, 1), 2) << "cpu:1/jobs:2 was counted as 1 thread";
  jobs.loader.workers = 1;
  EXPECT_EQ(threads_on_this_host(jobs, 1), 4);
  BenchInfo gpus;
  gpus.device_kind = &kind_named("gpu:N over NCCL");
  gpus.threads = 1, gpus.replicas = 4;
  EXPECT_EQ(threads_on_this_host(gpus, 1), 4) << "a thread drives each GPU";
  BenchInfo cpu;
  cpu.device_kind = &kind_named("cpu:T");
  cpu.threads = 2;
  EXPECT_EQ(threads_on_this_host(cpu, 1), 2);
  EXPECT_EQ(threads_on_this_host(cpu, 3), 6) << "three ranks here";
}

// A cpu:T row of `threads` threads named `name`, as the load checks read it.
BenchInfo cpu_row(const std::string& name, int threads) {
  BenchInfo row;
  row.name = name;
  row.device_kind = &kind_named("cpu:T");
  row.threads = threads;
  return row;
}

// Another process used the CPU where the load average at a row's start is above the most threads
// this run has kept busy so far, plus one: a 1-thread row after a 2-thread one is held against 2.
// An unreadable load average says nothing; each benchmark's warning is said once.
TEST(Loaded, ALoadAverageAboveTheMostThreadsSoFarPlusOneIsAnotherProcess) {
  std::ostringstream console;
  LoadCheck check(console);
  const BenchInfo one = cpu_row("train/mlp/mnist/cpu:1/fp32/bs:100", 1);
  const BenchInfo two = cpu_row("train/mlp/mnist/cpu:2/fp32/bs:100", 2);
  EXPECT_FALSE(check.loaded(one, 2.0, 1)) << "1 thread + 1";
  EXPECT_TRUE(check.loaded(one, 2.5, 1));
  EXPECT_FALSE(check.loaded(two, 3.0, 1)) << "2 threads + 1";
  EXPECT_TRUE(check.loaded(two, 3.5, 1));
  EXPECT_FALSE(check.loaded(one, 3.0, 1)) << "held against the 2 threads of the row before";
  EXPECT_FALSE(check.loaded(one, -1, 1)) << "/proc/loadavg unreadable";
  EXPECT_TRUE(check.loaded(two, 3.5, 1));
  std::vector<std::string> said;
  std::istringstream lines(console.str());
  for (std::string line; std::getline(lines, line);) said.push_back(line);
  ASSERT_EQ(said.size(), 2u) << console.str();
  EXPECT_EQ(said[0].rfind("trainbench: warning: load average 2.5 at the start of " + one.name +
                              ", where this run uses at most 1 thread(s): another process is using the CPU",
                          0),
            0u)
      << said[0];
  EXPECT_EQ(said[1].rfind("trainbench: warning: load average 3.5 at the start of " + two.name +
                              ", where this run uses at most 2 thread(s)",
                          0),
            0u)
      << said[1];
}

// A row's threads that waited for a CPU over 0.2 s a second of its timed steps lost cores to
// another process (said once per benchmark), unless they outnumber the cores and wait on each other.
TEST(Loaded, ThreadsThatWaitedForACpuLostItToAnotherProcessUnlessTheyOutnumberTheCores) {
  std::ostringstream console;
  LoadCheck check(console);
  const BenchInfo row = cpu_row("train/mlp/mnist/cpu:2/fp32/bs:100", 2);
  EXPECT_FALSE(check.waited(row, 0.2, 1, 2));
  EXPECT_FALSE(check.waited(row, -1, 1, 2)) << "the wait unknown";
  EXPECT_TRUE(check.waited(row, 0.25, 1, 2)) << "as many threads as cores";
  EXPECT_TRUE(check.waited(row, 0.5, 1, 2));
  EXPECT_FALSE(check.waited(row, 0.9, 1, 1)) << "2 threads on 1 core";
  EXPECT_FALSE(check.waited(row, 0.9, 2, 3)) << "2 ranks of 2 threads on 3 cores";
  EXPECT_EQ(console.str(), "trainbench: warning: " + row.name +
                               "'s threads waited for a CPU 0.25 s a second of its timed steps (the kernel's run "
                               "delay): another process took cores from it, and its figures may be low ('loaded' in "
                               "its verdicts)\n");
}

// What the wait check reads: two threads spinning on one core, each runnable all along, take
// turns, so that about half of their time each is spent waiting for it (the kernel's run delay).
TEST(Loaded, ThreadsSharingOneCoreWaitForIt) {
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
  int core = 0;
  while (core < CPU_SETSIZE && !CPU_ISSET(core, &allowed)) ++core;
  ASSERT_LT(core, CPU_SETSIZE);
  const double before = process_cpu_wait_seconds();
  if (before < 0) GTEST_SKIP() << "this kernel has no /proc/self/task/*/schedstat (CONFIG_SCHED_INFO)";
  constexpr double kSpin = 0.4;
  // The threads stay until the wait is read: a thread that ended takes its schedstat with it.
  std::atomic<int> spun{0};
  std::atomic<bool> may_end{false};
  const auto spin_on_core = [&, core] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(core, &one);
    (void)pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    for (const double end = wall_seconds() + kSpin; wall_seconds() < end;) {
    }
    ++spun;
    while (!may_end) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  std::thread a(spin_on_core), b(spin_on_core);
  while (spun < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const double waited = process_cpu_wait_seconds() - before;
  may_end = true;
  a.join();
  b.join();
  // Each thread's 0.4 s of the wall clock ran about half of it: the waits sum to about 0.4 s.
  EXPECT_GT(waited, 0.25 * kSpin);
}

// ---- the clocks and the peak memory (engine/core/timer.cpp) ----

// What the clocks read, each held between two readings of a clock it must agree with, so that
// nothing is assumed about how long anything takes: wall_seconds is CLOCK_MONOTONIC in seconds (as
// libstdc++'s steady_clock), process_cpu_seconds the CPU time of every thread (as glibc's
// std::clock, in whole microseconds), here including another thread's 20 ms; the peak resident
// set is in bytes (64 MiB touched are at least 64 Mi of them); and the run delay summed over the
// threads is at most what the wall clock leaves after their CPU time (one thread spinning, so
// that the two cannot be confused: its CPU time alone would pass that bound wherever it ran more
// than half of the wall clock).
TEST(Clocks, SecondsOfTheMonotonicAndProcessClocksBytesOfThePeakAndTheRunDelay) {
  const auto steady_seconds = [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
  const double steady_before = steady_seconds();
  const double wall = wall_seconds();
  const double steady_after = steady_seconds();
  EXPECT_LE(steady_before - 1e-6, wall);  // 1 us: the two round their nanoseconds differently
  EXPECT_LE(wall, steady_after + 1e-6);

  std::thread([] {
    timespec spent{};
    do clock_gettime(CLOCK_THREAD_CPUTIME_ID, &spent);
    while (spent.tv_sec == 0 && spent.tv_nsec < 20'000'000);
  }).join();
  timespec own{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &own);
  const double clock_before = double(std::clock()) / CLOCKS_PER_SEC;
  const double cpu = process_cpu_seconds();
  const double clock_after = double(std::clock()) / CLOCKS_PER_SEC;
  EXPECT_LE(clock_before - 2e-6, cpu);
  EXPECT_LE(cpu, clock_after + 2e-6);
  EXPECT_GE(cpu, double(own.tv_sec) + double(own.tv_nsec) * 1e-9 + 0.02) << "the other thread's CPU time";

  constexpr std::size_t kTouched = std::size_t(64) << 20;
  void* touched = mmap(nullptr, kTouched, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(touched, MAP_FAILED);
  std::memset(touched, 1, kTouched);
  const std::int64_t peak = peak_rss_bytes();
  ASSERT_EQ(munmap(touched, kTouched), 0);
  EXPECT_GE(peak, std::int64_t(kTouched));
  EXPECT_LT(peak, std::int64_t(1) << 40);

  const auto threads = [] {
    int n = 0;
    for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) n += task.is_directory();
    return n;
  };
  // The clocks first: a wait that ends between them and the first reading of the delays is
  // counted in that reading.
  const int threads_before = threads();
  const double wall_before = wall_seconds(), cpu_before = process_cpu_seconds();
  const double waited_before = process_cpu_wait_seconds();
  if (waited_before < 0) GTEST_SKIP() << "this kernel has no /proc/self/task/*/schedstat (CONFIG_SCHED_INFO)";
  while (process_cpu_seconds() - cpu_before < 0.05) {
  }
  const double waited = process_cpu_wait_seconds() - waited_before;
  const double elapsed = wall_seconds() - wall_before, spent = process_cpu_seconds() - cpu_before;
  EXPECT_GE(waited, 0.0);
  EXPECT_LE(waited, std::max(threads_before, threads()) * elapsed - spent + 1e-3);
}

// ---- a repetition's steps ----

TEST(StepBudget, FixedCountsOrTheMinimumTime) {
  const StepBudget fixed{.fixed = 3};
  EXPECT_TRUE(fixed.more(2, 100.0));
  EXPECT_FALSE(fixed.more(3, 0.0));
  const StepBudget timed{.min_time_s = 0.5};
  EXPECT_TRUE(timed.more(0, 10.0)) << "at least one step";
  EXPECT_TRUE(timed.more(5, 0.4));
  EXPECT_FALSE(timed.more(5, 0.5));
  Flags flags;
  EXPECT_EQ(step_budget(flags).fixed, 0) << "outside mpirun, --iterations not given: timed";
  flags.iterations = 7;
  flags.iterations_given = true;
  flags.benchmark_min_time = "0.25";
  EXPECT_EQ(step_budget(flags).fixed, 7);
  EXPECT_DOUBLE_EQ(step_budget(flags).min_time_s, 0.25);
}

TEST(Baselines, TheMedianOfABenchmarksRepetitionsByName) {
  Baselines b;
  EXPECT_EQ(b.median("train/mlp/mnist/cpu/fp32/bs:100"), 0);
  EXPECT_EQ(b.median(""), 0);
  for (double r : {3.0, 1.0, 2.0}) b.add("train/mlp/mnist/cpu/fp32/bs:100", r);
  b.add("train/mlp/mnist/cpu:1/fp32/bs:100", 10);
  EXPECT_EQ(b.median("train/mlp/mnist/cpu/fp32/bs:100"), 2) << "cpu and cpu:1 never blend";
}

// ---- the harness: one writer of rows ----

class NoDisplay : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>& runs) override { reported += runs.size(); }
  std::size_t reported = 0;
};

// Flags of a short run on one thread: one warm-up step, then `steps` timed, unwatched by the
// timeline.
Flags short_cpu1_run(std::int64_t steps) {
  Flags flags;
  flags.devices = {"cpu:1"};
  flags.iterations = steps;
  flags.iterations_given = true;
  flags.warmup_steps = 1;
  flags.timeline = false;
  return flags;
}

// A harness with its benchmarks registered and the row log it writes, as main sets them up.
struct Registered {
  explicit Registered(const Flags& flags) : harness(flags, 2) { harness.register_benchmarks(log); }
  MachineContext machine;
  std::ostringstream notes;
  RowLog log{machine, nullptr, notes};
  Harness harness;
};

// Google Benchmark told, as main tells it, that every call is one repetition, `repetitions` of them.
void initialize_repetitions(int repetitions) {
  std::string program = "test_bench_run", min_time = "--benchmark_min_time=0",
              count = fmt::format("--benchmark_repetitions={}", repetitions);
  int argc = 3;
  char* argv[] = {program.data(), min_time.data(), count.data(), nullptr};
  benchmark::Initialize(&argc, argv);
}

// A real run of the MLP on one thread, two repetitions of 3 steps, predicted over a custom link:
// every repetition is a row the moment it ends, then the aggregates, then the predicted rows,
// made from the rows by the same function --predict_from uses.
TEST(Harness, WritesEveryRowOfABenchmarkThenItsAggregatesAndPredictions) {
  Flags flags;
  flags.devices = {"cpu:1"};
  flags.links = {"10,20"};
  flags.benchmark_repetitions = "2";
  flags.iterations = 3;
  flags.iterations_given = true;
  flags.warmup_steps = 1;
  MachineContext machine;
  machine.git_commit = "test";
  std::ostringstream notes;
  RowLog log(machine, nullptr, notes);
  Harness harness(flags, 2);
  harness.register_benchmarks(log);
  initialize_repetitions(2);
  NoDisplay display;
  const std::string name = "train/mlp/mnist/cpu:1/fp32/bs:100";
  benchmark::RunSpecifiedBenchmarks(&display, "^" + name + "$");
  benchmark::ClearRegisteredBenchmarks();
  harness.release_sessions();
  std::vector<const Row*> iterations, aggregates;
  for (const Row* r : log.rows_of(name)) (r->run_type == "iteration" ? iterations : aggregates).push_back(r);
  ASSERT_EQ(iterations.size(), 2u);
  for (const Row* r : iterations) {
    EXPECT_EQ(r->status, "ok") << r->message;
    EXPECT_EQ(r->iterations, 3);
    EXPECT_EQ(r->prediction_inputs.rfind("v1;buckets=", 0), 0u) << r->prediction_inputs;
    EXPECT_EQ(r->device_kind, "cpu:T");
  }
  // The run is kept across the benchmark's calls, prepared once: the second repetition trains on
  // from where the first left the network, not from the same start.
  EXPECT_NE(iterations[0]->loss_last, iterations[1]->loss_last);
  // A first window of 3 steps is enough to probe the data-parallel path's overhead, measured
  // against the row's own steps: milliseconds on the MLP's steps of milliseconds, not a second.
  for (const Row* r : iterations) {
    const std::size_t dp = r->prediction_inputs.find(";dp=");
    ASSERT_NE(dp, std::string::npos) << r->prediction_inputs;
    const double overhead = std::stod(r->prediction_inputs.substr(dp + 4));
    EXPECT_TRUE(overhead >= 0 && overhead < 0.5) << r->prediction_inputs;
  }
  // Each timed step's own time, for predictions (21 quantiles: of 3 steps, the 1st, 11th and 21st
  // are the steps): inside the window, together no longer than it.
  for (const Row* r : iterations) {
    const std::size_t from = r->prediction_inputs.find(";steps=") + 7;
    const std::string text = r->prediction_inputs.substr(from, r->prediction_inputs.find(';', from) - from);
    std::vector<double> quantiles;
    std::istringstream numbers(text);
    for (std::string q; std::getline(numbers, q, ',');) quantiles.push_back(std::stod(q));
    ASSERT_EQ(quantiles.size(), 21u) << r->prediction_inputs;
    EXPECT_LE(quantiles[0] + quantiles[10] + quantiles[20], 3 * r->step_time_s.value_or(NAN) * (1 + 1e-6))
        << r->prediction_inputs;
  }
  // The data-parallel overhead is probed once per benchmark, on its first window, and kept for the
  // next: VALUE,LOW,HIGH, the noise of the steps on either side of it.
  std::vector<std::string> dp_cells;
  for (const Row* r : iterations) {
    const std::size_t from = r->prediction_inputs.find(";dp=") + 4;
    dp_cells.push_back(r->prediction_inputs.substr(from, r->prediction_inputs.find(';', from) - from));
    std::vector<double> dp;
    std::istringstream numbers(dp_cells.back());
    for (std::string v; std::getline(numbers, v, ',');) dp.push_back(std::stod(v));
    ASSERT_EQ(dp.size(), 3u) << r->prediction_inputs;
    EXPECT_TRUE(dp[1] <= dp[0] && dp[0] <= dp[2]) << r->prediction_inputs;
  }
  EXPECT_EQ(dp_cells[0], dp_cells[1]) << "probed again for the second repetition";
  // The samples/s of each step of a repetition (its windows, one step each here): the row's rate
  // scaled by each step's share, their reciprocals averaging the row's.
  for (const Row* r : iterations) {
    std::vector<double> rates;
    std::istringstream cells(r->window_samples_per_s);
    for (std::string w; std::getline(cells, w, ';');) rates.push_back(std::stod(w));
    ASSERT_EQ(rates.size(), 3u) << r->window_samples_per_s;
    double mean_inverse = 0;
    for (double w : rates) mean_inverse += 1 / w / 3;
    EXPECT_NEAR(mean_inverse * r->samples_per_s.value_or(NAN), 1, 1e-4) << r->window_samples_per_s;
  }
  // A repetition's phases are its own steps': forward, backward and update inside its step, none
  // of the warm-up's, the probes' or an earlier repetition's.
  for (const Row* r : iterations)
    EXPECT_LE(
        r->forward_s_per_step.value_or(NAN) + r->backward_s_per_step.value_or(NAN) + r->update_s_per_step.value_or(NAN),
        r->step_time_s.value_or(NAN) * (1 + 1e-5))
        << "repetition " << r->repetition.value_or(-1);
  EXPECT_EQ(aggregates.size(), 4u);
  // The predicted rows: mpi:2, 4 and 8 over the link, the same as predict_rows makes of the rows.
  std::vector<const Row*> predicted;
  for (const Row& r : log.rows())
    if (r.measurement == "predicted") predicted.push_back(&r);
  PredictionPlan plan;
  plan.links = {parallel::parse_link("10,20")};
  const std::vector<PredictedRow> again = predict_rows(log.rows_of(name), plan, machine);
  ASSERT_EQ(predicted.size(), 3u);
  ASSERT_EQ(again.size(), 3u);
  for (std::size_t k = 0; k < predicted.size(); ++k) {
    EXPECT_EQ(predicted[k]->predicted_from, name);
    EXPECT_EQ(predicted[k]->baseline, name);
    // The log keeps rows as the CSV holds them.
    const Row fresh = as_written(again[k].row);
    EXPECT_EQ(predicted[k]->benchmark, fresh.benchmark);
    EXPECT_EQ(predicted[k]->samples_per_s, fresh.samples_per_s);
    EXPECT_EQ(predicted[k]->samples_per_s_low, fresh.samples_per_s_low);
  }
  EXPECT_EQ(predicted[0]->benchmark, "train/mlp/mnist/mpi:2/fp32/bs:100/predicted:custom/from:cpu:1");
  const std::vector<std::string>& lines = log.notes_of(name);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].rfind("  predicted mpi:2 over custom", 0), 0u) << lines[0];
}

// Each benchmark is measured by a run of its own, from a peak resident set of its own: the MLP's
// run was kept for the LSTM's row (its first loss the MLP's), and a peak reached before the rows
// (memory since returned) was each row's peak_rss_bytes.
TEST(Harness, EachBenchmarkIsMeasuredByItsOwnRunFromItsOwnPeakMemory) {
  if (!reset_peak_rss()) GTEST_SKIP() << "/proc/self/clear_refs cannot be written here";
  constexpr std::size_t kEarlier = std::size_t(512) << 20;
  void* earlier = mmap(nullptr, kEarlier, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(earlier, MAP_FAILED);
  std::memset(earlier, 1, kEarlier);
  ASSERT_EQ(munmap(earlier, kEarlier), 0);
  const double earlier_peak = double(peak_rss_bytes());
  Registered run(short_cpu1_run(2));
  NoDisplay display;
  benchmark::RunSpecifiedBenchmarks(&display, "^train/(mlp/mnist|lstm/sine)/cpu:1/");
  benchmark::ClearRegisteredBenchmarks();
  run.harness.release_sessions();
  std::map<std::string, const Row*> rows;
  for (const Row& r : run.log.rows())
    if (r.run_type == "iteration") rows[r.model] = &r;
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& [model, row] : rows) {
    EXPECT_EQ(row->status, "ok") << model << ": " << row->message;
    EXPECT_LT(row->peak_rss_bytes.value_or(NAN), earlier_peak) << model;
  }
  EXPECT_NE(rows["lstm"]->loss_first, rows["mlp"]->loss_first);
}

class UnitsSeen : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) units[r.run_name.function_name] = r.time_unit;
  }
  std::map<std::string, benchmark::TimeUnit> units;
};

// Google Benchmark's own reports (--benchmark_out) give a train/ row's time, a step's, in
// milliseconds and an epochs/ row's, the whole run's, in seconds; a configuration the machine
// cannot run is still each benchmark's row, skipped, saying why.
TEST(Harness, ReportsTrainRowsInMillisecondsAndEpochsRowsInSecondsSkippedOrNot) {
  Flags flags;
  flags.devices = {"cpu:4096"};
  Registered run(flags);
  UnitsSeen display;
  benchmark::RunSpecifiedBenchmarks(&display, "^(train|epochs)/lstm/sine/cpu:4096/");
  benchmark::ClearRegisteredBenchmarks();
  for (const std::string kind : {"train", "epochs"}) {
    const std::string name = kind + "/lstm/sine/cpu:4096/fp32/bs:20";
    ASSERT_EQ(display.units.count(name), 1u) << name;
    EXPECT_EQ(display.units[name], kind == "train" ? benchmark::kMillisecond : benchmark::kSecond) << name;
    const std::vector<const Row*> rows = run.log.rows_of(name);
    ASSERT_FALSE(rows.empty()) << name;
    EXPECT_EQ(rows[0]->status, "skipped");
    EXPECT_NE(rows[0]->message.find("cpu:4096 needs 4096 cores"), std::string::npos) << rows[0]->message;
  }
}

// A repetition that failed drops its run: the next is prepared and warmed up afresh, and fails
// alike (a run kept from the failed one carried on from its steps: "after 3 steps", then "after 5").
TEST(Harness, ARepetitionThatFailedDropsItsRunAndTheNextStartsAfresh) {
  Flags flags = short_cpu1_run(2);
  flags.lr = 1e-30;  // too small to move the loss: every repetition fails its check
  flags.benchmark_repetitions = "2";
  Registered run(flags);
  initialize_repetitions(2);
  NoDisplay display;
  std::string name;  // with its variant: lr, warm-up
  for (const BenchInfo& b : run.harness.benchmarks())
    if (b.name.rfind("train/mlp/mnist/cpu:1/", 0) == 0) name = b.name;
  ASSERT_FALSE(name.empty());
  benchmark::RunSpecifiedBenchmarks(&display, "^" + name + "$");
  benchmark::ClearRegisteredBenchmarks();
  std::vector<const Row*> failed;
  for (const Row* r : run.log.rows_of(name))
    if (r->run_type == "iteration") failed.push_back(r);
  ASSERT_EQ(failed.size(), 2u);
  for (const Row* r : failed) {
    EXPECT_EQ(r->status, "failed");
    EXPECT_EQ(r->message.rfind("loss did not fall", 0), 0u) << r->message;
    EXPECT_NE(r->message.find("after 3 steps"), std::string::npos) << "1 warm-up step and 2 timed: " << r->message;
  }
  EXPECT_EQ(failed[0]->message, failed[1]->message);
}

// An epochs/ row is its run's last epoch: its epoch count, its validation loss and its run's
// seconds (validation included), beside a step of its training alone.
TEST(Harness, AnEpochsRowIsItsRunsLastEpoch) {
  Flags flags;
  flags.devices = {"cpu:1"};
  flags.epochs = 2;
  Registered run(flags);
  initialize_repetitions(1);
  NoDisplay display;
  benchmark::RunSpecifiedBenchmarks(&display, "^epochs/lstm/sine/cpu:1/");
  benchmark::ClearRegisteredBenchmarks();
  run.harness.release_sessions();
  std::vector<const Row*> epochs, final;
  for (const Row& r : run.log.rows()) (r.run_type == "epoch" ? epochs : final).push_back(&r);
  ASSERT_EQ(epochs.size(), 2u);
  ASSERT_EQ(final.size(), 1u);
  const Row& row = *final[0];
  EXPECT_EQ(row.status, "ok") << row.message;
  EXPECT_EQ(row.epoch, 2);
  EXPECT_EQ(row.val_loss, epochs[1]->val_loss);
  EXPECT_EQ(row.elapsed_s, epochs[1]->elapsed_s);
  EXPECT_LT(row.step_time_s.value_or(NAN) * double(epochs[1]->iterations.value_or(0)), row.elapsed_s.value_or(NAN));
}

}  // namespace
}  // namespace tb::bench
