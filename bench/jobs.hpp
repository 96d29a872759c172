// Jobs as processes (story 000: several separate programs sharing one GPU, each with its own
// CUDA context, time-sliced by the driver, each seen in `top`): a gpu:1/jobs:K (or cpu:T/jobs:K)
// row starts K copies of this binary, each running the one-device benchmark on its own, lets them
// start their timed steps together, and combines what each measured of itself.
#pragma once

#include <map>
#include <string>

#include "bench/configs.hpp"
#include "bench/flags.hpp"

namespace tb::bench {

struct JobsResult {
  std::map<std::string, double> counters;  // the row's: summed, or per job as the column says
  std::string message;                     // each job's own figures
  double step_s = 0;                       // the jobs' mean step, for Google Benchmark's manual time
};

// Runs `info`'s K jobs and waits for them; throws tb::Error naming a job that failed, with the end
// of its output.
JobsResult run_job_processes(const BenchInfo& info, const Flags& flags);

// In a process run_job_processes started: says this job is ready to time and waits for the
// others (once per process; a no-op elsewhere). Throws tb::Error after a long wait.
void job_rendezvous();

}  // namespace tb::bench
