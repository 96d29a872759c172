// Jobs as processes (jobs.hpp): spawning, the window every job agrees on, and combining what the
// jobs did inside it.
#include "bench/run/jobs.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench/output/csv.hpp"
#include "bench/output/rows.hpp"
#include "engine/core/error.hpp"
#include "engine/core/timer.hpp"

extern char** environ;

namespace tb::bench {
namespace {

namespace fs = std::filesystem;

constexpr const char* kRendezvous = "TB_JOB_RENDEZVOUS";  // the folder the jobs meet in
constexpr const char* kCount = "TB_JOB_COUNT";
constexpr const char* kIndex = "TB_JOB_INDEX";
constexpr const char* kParent = "TB_JOB_PARENT";  // the process id of the trainbench that started it
// The jobs' folders: kJobsFolder<pid of the trainbench that made it>-XXXXXX.
constexpr const char* kJobsFolder = "/tmp/trainbench-jobs-";
constexpr double kWindowSeconds = 2;  // the timed window every job runs in
// From the last job ready to the window's start: time for every job to see the others ready.
constexpr double kStartMargin = 0.05;

// The one-device benchmark each job runs: the row's own, on the kind's one device (job_device).
std::vector<std::string> job_arguments(const BenchInfo& info, const Flags& flags, const fs::path& csv) {
  std::vector<std::string> a{fs::read_symlink("/proc/self/exe").string(),
                             "--devices=" + info.job_device,
                             "--precisions=" + info.precision,
                             fmt::format("--benchmark_filter=^train/{}/{}/{}/{}/bs:{}(/.*)?$", info.model, info.dataset,
                                         info.job_device, info.precision, info.batch),
                             "--csv=" + csv.string(),
                             "--timeline=off",
                             fmt::format("--batch={}", info.batch),
                             fmt::format("--warmup_steps={}", info.warmup_steps),
                             fmt::format("--seed={}", flags.seed),
                             fmt::format("--loader_workers={}", flags.loader_workers),
                             fmt::format("--gpu_layout={}", flags.gpu_layout)};
  if (flags.loader_workers > 0) a.push_back(fmt::format("--prefetch={}", flags.prefetch));
  if (flags.optimizer) a.push_back("--optimizer=" + *flags.optimizer);
  if (flags.lr) a.push_back(fmt::format("--lr={}", *flags.lr));
  if (flags.augment) a.emplace_back("--augment");
  if (!flags.data_dir.empty()) a.push_back("--data_dir=" + flags.data_dir);
  if (info.gpu()) a.push_back(fmt::format("--gpus={}", info.gpu_ordinal));
  if (flags.gpu_memory_limit > 1) a.push_back(fmt::format("--gpu_memory_limit={:.0f}", flags.gpu_memory_limit));
  if (flags.gpu_memory_limit > 0 && flags.gpu_memory_limit <= 1)
    a.push_back(fmt::format("--gpu_memory_limit={}", flags.gpu_memory_limit));
  if (flags.cuda_graph) a.emplace_back("--cuda_graph");
  if (flags.data_on_device) a.emplace_back("--data_on_device");
  return a;
}

std::string tail_of(const fs::path& log) {
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  const std::string all = text.str();
  return all.size() > 600 ? "..." + all.substr(all.size() - 600) : all;
}

// The ok iteration row of a job's CSV.
Row job_row(const fs::path& csv) {
  std::optional<Row> found;
  for (const Row& row : read_csv(csv.string(), "a job's --csv")) {
    if (is_ok_iteration(row)) found = row;
    if (row.status == "failed") throw Error(fmt::format("failed: {}", row.message));
  }
  if (!found) throw Error(fmt::format("{} holds no measured row", csv.string()));
  return *found;
}

double number_of(const Number& v) { return v.value_or(NAN); }

pid_t spawn(const std::vector<std::string>& args, const std::vector<std::string>& extra_env, const fs::path& log) {
  std::vector<char*> argv;
  for (const std::string& s : args) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_text(extra_env);
  for (char** e = environ; *e; ++e) env_text.emplace_back(*e);
  std::vector<char*> envp;
  for (const std::string& s : env_text) envp.push_back(const_cast<char*>(s.c_str()));
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = -1;
  const int status = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (status != 0)
    throw Error(fmt::format("jobs: could not start {} ({}): {}", args[0], log.string(), std::strerror(status)));
  return pid;
}

// When the steps of job `index`'s window ran (record_job_steps's file).
JobSteps job_steps(const fs::path& dir, int index, double samples_per_step) {
  const fs::path file = dir / fmt::format("steps.0.{}", index);
  std::ifstream in(file);
  JobSteps steps;
  steps.samples_per_step = samples_per_step;
  if (!(in >> steps.first_start)) throw Error(fmt::format("{} holds no step times", file.string()));
  for (double end = 0; in >> end;) steps.ends.push_back(end);
  if (steps.ends.empty()) throw Error(fmt::format("{} holds no step times", file.string()));
  return steps;
}

// Writes `text` to `path` whole or not at all (another process may be reading the folder).
void write_atomically(const fs::path& path, const std::string& text) {
  const fs::path partial = path.string() + ".partial";
  {
    std::ofstream out(partial);
    out << text;
    if (!out.flush()) throw Error(fmt::format("jobs: cannot write {}", partial.string()));
  }
  fs::rename(partial, path);
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

// The jobs' folders left by a trainbench that is gone: killed, it had no time to remove its own.
void remove_folders_of_ended_runs() {
  const fs::path prefix = kJobsFolder;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(prefix.parent_path(), ec)) {
    const std::string name = entry.path().filename().string();
    const std::string start = prefix.filename().string();
    if (name.rfind(start, 0) != 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + start.size(), &end, 10);
    if (pid <= 0 || *end != '-' || pid == ::getpid()) continue;
    if (::kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to tell
    fs::remove_all(entry.path(), ec);
  }
}

// SIGCHLD at its default while it lives, as it was after. Jobs are reaped one at a time as each
// ends, so that one that fails can stop the others; with SIGCHLD ignored, a disposition inherited
// from whoever started trainbench, the kernel reaps them itself and waitpid() returns only once
// all have ended, with no status: a killed job went unnoticed and the others waited for it at
// their meeting point for 10 minutes.
class DefaultSigchld {
 public:
  DefaultSigchld() {
    struct sigaction action {};
    action.sa_handler = SIG_DFL;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGCHLD, &action, &previous_);
  }
  ~DefaultSigchld() { ::sigaction(SIGCHLD, &previous_, nullptr); }
  DefaultSigchld(const DefaultSigchld&) = delete;
  DefaultSigchld& operator=(const DefaultSigchld&) = delete;

 private:
  struct sigaction previous_ {};
};

}  // namespace

double CommonWindow::total_samples() const { return std::accumulate(samples.begin(), samples.end(), 0.0); }

CommonWindow common_window(const std::vector<JobSteps>& jobs) {
  TB_CHECK(!jobs.empty(), "jobs: no job to combine");
  CommonWindow w;
  w.start = -INFINITY;
  w.end = INFINITY;
  for (const JobSteps& j : jobs) {
    TB_CHECK(!j.ends.empty(), "jobs: a job recorded no step");
    w.start = std::max(w.start, j.first_start);
    w.end = std::min(w.end, j.ends.back());
  }
  if (!(w.end > w.start))
    throw Error(fmt::format(
        "jobs: the jobs' timed steps did not overlap (the last to start began {:.3f} s after the first to finish "
        "ended): no window in which all ran",
        w.start - w.end));
  for (const JobSteps& j : jobs) {
    double samples = 0, step_start = j.first_start;
    for (double step_end : j.ends) {
      const double inside = std::min(step_end, w.end) - std::max(step_start, w.start);
      if (inside > 0 && step_end > step_start) samples += j.samples_per_step * inside / (step_end - step_start);
      step_start = step_end;
    }
    w.samples.push_back(samples);
  }
  return w;
}

// The combined row: samples/s is what every job completed inside the window in which all were
// running, over its length; host CPU and device memory add up over the jobs (the memory is the
// largest job's where one's is the device's: summed, K jobs would count the device K times);
// energy per sample is the device's energy (each job read all of it over about the same window)
// over every job's samples; the rest are the jobs' mean or largest.
JobsResult combine_jobs(const std::vector<Row>& rows, const CommonWindow& window, const BenchInfo& info) {
  JobsResult r;
  Row& c = r.figures;
  std::vector<std::string> rates, own, cpus;
  double inverse_energy = 0;
  const bool device_wide = std::any_of(rows.begin(), rows.end(), [](const Row& row) {
    return row.message.find(kDeviceWideMemoryNote) != std::string::npos;
  });
  for (std::size_t j = 0; j < rows.size(); ++j) {
    const auto& row = rows[j];
    c.host_cpu_util = c.host_cpu_util.value_or(0) + number_of(row.host_cpu_util);
    if (double m = number_of(row.gpu_mem_used_bytes); !std::isnan(m))
      c.gpu_mem_used_bytes =
          device_wide ? std::max(c.gpu_mem_used_bytes.value_or(0), m) : c.gpu_mem_used_bytes.value_or(0) + m;
    if (double e = number_of(row.energy_j_per_sample); e > 0) inverse_energy += 1 / e;
    for (Number Row::*mean : {&Row::host_cpu_s_per_step, &Row::data_s_per_step})
      c.*mean = (c.*mean).value_or(0) + number_of(row.*mean) / double(rows.size());
    for (Number Row::*field : {&Row::mem_peak_bytes, &Row::peak_rss_bytes, &Row::gpu_util, &Row::gpu_temp_max_c})
      if (const Number v = row.*field; v && !std::isnan(*v)) c.*field = std::max((c.*field).value_or(0), *v);
    rates.push_back(fmt::format("{:.0f}", window.samples[j] / window.length()));
    own.push_back(fmt::format("{:.0f}", number_of(row.samples_per_s)));
    cpus.push_back(fmt::format("{:.0f}%", 100 * number_of(row.host_cpu_util)));
  }
  const double k = double(rows.size());
  c.samples_per_s = window.samples_per_s();
  // The step of K replicas of `batch` at that rate (results/SCHEMA.md: batch x replicas / step).
  c.step_time_s = c.wall_step_time_s = double(info.batch) * k / window.samples_per_s();
  c.jobs_window_s = window.length();
  if (inverse_energy > 0) c.energy_j_per_sample = 1 / inverse_energy;
  c.host_cpu_util_per_job = c.host_cpu_util.value_or(0) / k;
  c.replicas = k;
  c.loss_first = number_of(rows[0].loss_first);
  c.loss_last = number_of(rows[0].loss_last);
  r.message = fmt::format(
      "{} processes{}, timed on one window of {:.3g} s in which every job ran: samples/s per job in it {} (over "
      "each job's own steps {}); host CPU per job {} (what top shows for each)",
      rows.size(), info.gpu() ? " on one GPU, each with its own CUDA context" : "", window.length(),
      fmt::join(rates, ", "), fmt::join(own, ", "), fmt::join(cpus, ", "));
  if (device_wide) r.message += std::string("; ") + kDeviceWideMemoryNote;
  return r;
}

JobsResult run_job_processes(const BenchInfo& info, const Flags& flags) {
  remove_folders_of_ended_runs();
  std::string pattern = fmt::format("{}{}-XXXXXX", kJobsFolder, ::getpid());
  TB_CHECK(::mkdtemp(pattern.data()), "jobs: cannot make a folder under /tmp: {}", std::strerror(errno));
  const fs::path dir = pattern;
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{dir};
  const DefaultSigchld reaped_here;
  const int k = info.replicas;
  std::vector<pid_t> pids;
  try {
    for (int j = 0; j < k; ++j)
      pids.push_back(spawn(job_arguments(info, flags, dir / fmt::format("job{}.csv", j)),
                           {fmt::format("{}={}", kRendezvous, dir.string()), fmt::format("{}={}", kCount, k),
                            fmt::format("{}={}", kIndex, j), fmt::format("{}={}", kParent, ::getpid())},
                           dir / fmt::format("job{}.log", j)));
  } catch (...) {
    for (pid_t pid : pids) ::kill(pid, SIGTERM), waitpid(pid, nullptr, 0);  // the ones started
    throw;
  }
  // In the order they end: a job that fails tells the others, which may be waiting for it at
  // the rendezvous, to stop (an abort file) instead of waiting out its deadline.
  std::vector<int> statuses(pids.size());
  for (std::size_t left = pids.size(); left > 0; --left) {
    int status = 0;
    const pid_t done = waitpid(-1, &status, 0);
    const auto it = std::find(pids.begin(), pids.end(), done);
    if (it == pids.end()) {
      ++left;  // not one of ours (a loader, say): keep waiting for ours
      if (done < 0 && errno == ECHILD) break;
      continue;
    }
    statuses[std::size_t(it - pids.begin())] = status;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) std::ofstream(dir / "abort").put('\n');
  }
  std::vector<Row> rows;
  std::vector<JobSteps> steps;
  // A job that failed on its own comes first (in job order), then those it stopped.
  std::vector<std::string> failures;
  std::size_t own_failures = 0;
  for (int j = 0; j < k; ++j) {
    try {
      if (!WIFEXITED(statuses[std::size_t(j)]) || WEXITSTATUS(statuses[std::size_t(j)]) != 0)
        throw Error(fmt::format("exit status {}", WIFEXITED(statuses[std::size_t(j)])
                                                      ? WEXITSTATUS(statuses[std::size_t(j)])
                                                      : 128 + WTERMSIG(statuses[std::size_t(j)])));
      rows.push_back(job_row(dir / fmt::format("job{}.csv", j)));
      steps.push_back(job_steps(dir, j, double(info.batch)));
    } catch (const Error& e) {
      const std::string log = tail_of(dir / fmt::format("job{}.log", j));
      const std::string why = fmt::format("job {} of {}: {}; its output ends: {}", j, k, e.what(), log);
      const bool stopped = log.find("another job failed") != std::string::npos;
      failures.insert(stopped ? failures.end() : failures.begin() + std::ptrdiff_t(own_failures++), why);
    }
  }
  if (!failures.empty()) throw Error(failures.front());
  return combine_jobs(rows, common_window(steps), info);
}

bool in_job() { return std::getenv(kRendezvous) != nullptr; }

void bind_job_to_its_parent() {
  if (!in_job()) return;
  // The signal comes when the thread that started the job ends: run_job_processes runs on the
  // benchmark's thread, which lives as long as its jobs.
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  const char* parent = std::getenv(kParent);
  if (parent && ::getppid() != pid_t(std::atol(parent))) std::raise(SIGTERM);  // gone before the line above
}

JobWindow job_window() {
  static int calls = 0;
  const char* folder = std::getenv(kRendezvous);
  TB_CHECK(folder, "job_window outside a job");
  const fs::path dir = folder;
  const int count = env_int(kCount, 1), index = env_int(kIndex, 0), call = calls++;
  write_atomically(dir / fmt::format("ready.{}.{}", call, index), fmt::format("{:.9f}\n", wall_seconds()));
  const std::string prefix = fmt::format("ready.{}.", call);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(10);
  for (;;) {
    std::vector<fs::path> ready;
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind(prefix, 0) == 0 && name.find(".partial") == std::string::npos) ready.push_back(entry.path());
    }
    if (int(ready.size()) >= count) {
      double last = 0;
      for (const fs::path& p : ready) {
        double t = 0;
        std::ifstream(p) >> t;
        last = std::max(last, t);
      }
      return JobWindow{.start = last + kStartMargin, .end = last + kStartMargin + kWindowSeconds, .call = call};
    }
    if (fs::exists(dir / "abort"))
      throw Error(fmt::format("job {}: another job failed before its timed steps (its row says why)", index));
    if (std::chrono::steady_clock::now() > deadline)
      throw Error(fmt::format("job {}: {} of {} jobs ready after 10 minutes; the others never got to their timed steps",
                              index, ready.size(), count));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void record_job_steps(const JobWindow& window, double first_start, const std::vector<double>& ends) {
  std::string text = fmt::format("{:.9f}\n", first_start);
  for (double end : ends) text += fmt::format("{:.9f}\n", end);
  write_atomically(fs::path(std::getenv(kRendezvous)) / fmt::format("steps.{}.{}", window.call, env_int(kIndex, 0)),
                   text);
}

}  // namespace tb::bench
