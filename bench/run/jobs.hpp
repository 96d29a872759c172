// Jobs as processes (story 000: several separate programs sharing one GPU, each with its own
// CUDA context, time-sliced by the driver, each seen in `top`): a gpu:1/jobs:K (or cpu:T/jobs:K)
// row starts K copies of this binary, each running the one-device benchmark on its own. Before
// every timed window the jobs meet and agree on when it starts and ends; each records when each
// of its steps ended, on the machine's monotonic clock, which every process shares; the row
// counts the samples all jobs completed inside the window in which every job was running.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/cli/flags.hpp"
#include "bench/plan/configs.hpp"
#include "bench/schema/row.hpp"

namespace tb::bench {

struct JobsResult {
  Row figures;          // the row's: over the common window, summed, or per job
  std::string message;  // each job's own figures and the window
};

// What a GPU row's message says where NVML did not list its process: gpu_mem_used_bytes is then
// the device's (a container's PID namespace), and jobs' figures of it are not summed.
inline constexpr const char* kDeviceWideMemoryNote =
    "gpu_mem_used_bytes is the whole device's: NVML does not list this process (a container's PID namespace?)";

// Runs `info`'s K jobs and waits for them; throws tb::Error naming a job that failed, with the end
// of its output.
JobsResult run_job_processes(const BenchInfo& info, const Flags& flags);

// ---- in a job (a process run_job_processes started) ----

// True in a job: its benchmark runs one timed window per repetition, in step with the others.
bool in_job();

// In a job: it gets SIGTERM when the process that started it ends (killed or interrupted, which
// leaves it no time to stop its jobs), and ends at once if that process is already gone. Else
// nothing. Before: a SIGTERM to trainbench left its K jobs training (on the GPU, in a GPU row)
// until they finished, or waiting up to 10 minutes at the meeting point for one that never came.
void bind_job_to_its_parent();

// The window this job times its steps in, on wall_seconds()'s clock: every job says it is ready
// (warmed up), waits for the others, and all take the same start, a little after the last one
// was ready, and the same end. Throws tb::Error when another job failed or after a long wait.
struct JobWindow {
  double start = 0, end = 0;
  int call = 0;  // the how-manieth window of this process
};
JobWindow job_window();
// When this job's steps of `window` ran: the first one's start and every step's end.
void record_job_steps(const JobWindow& window, double first_start, const std::vector<double>& ends);

// ---- the common window (pure, for tests) ----

// One job's steps: back to back from first_start, each ending at ends[k], each of `samples`.
struct JobSteps {
  double first_start = 0;
  std::vector<double> ends;
  double samples_per_step = 0;
};

// The window in which every job was running (from the latest first start to the earliest last
// end) and the samples each completed inside it: a step straddling an edge counts for the part of
// it inside, as if its samples were done evenly over the step. Throws tb::Error where the jobs did
// not overlap.
struct CommonWindow {
  double start = 0, end = 0;
  std::vector<double> samples;  // per job, inside the window
  double length() const { return end - start; }
  double total_samples() const;
  double samples_per_s() const { return total_samples() / length(); }
};
CommonWindow common_window(const std::vector<JobSteps>& jobs);

// The row of K jobs from their own rows (one each, in job order) and the window they all ran in.
JobsResult combine_jobs(const std::vector<Row>& rows, const CommonWindow& window, const BenchInfo& info);

}  // namespace tb::bench
