// trainbench --predict_from=RUN.csv: "how far does this scale?" asked after the run. The
// one-device train rows of RUN.csv that the --benchmark_filter takes, each with its
// prediction_inputs, are predicted for --devices (gpu:N from GPU rows, mpi:N from CPU rows;
// default 2, 4, 8, times --nodes), over --link and, with --nodes, --network: the same model and
// the same rows-to-prediction path the run itself takes, so a prediction made here equals the
// one the run made for the same link. Nothing is trained.
#pragma once

#include "bench/cli/context.hpp"
#include "bench/cli/flags.hpp"

namespace tb::bench {

// Prints each predicted row and the summary, appends them to --csv; returns the exit status.
// Throws tb::InputError on a file or flag that cannot be used (exit status 2).
int predict_from_csv(const Flags& flags, const MachineContext& now);

// trainbench --predict_allreduce=BYTES: one all-reduce of BYTES predicted for --devices=gpu:N over
// --link (--nodes, --network), as nccl-tests would measure it; prints the lines, returns the exit
// status. Nothing is trained or run.
int predict_allreduce(const Flags& flags);

}  // namespace tb::bench
