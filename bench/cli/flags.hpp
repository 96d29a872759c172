// trainbench's own command-line flags (Google Benchmark's --benchmark_* flags pass through).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tb::bench {

struct Flags {
  std::string csv;                           // --csv=FILE
  std::optional<std::int64_t> batch;         // --batch=N, overrides every model's default
  std::vector<std::string> devices;          // --devices=cpu,cpu:1
  std::optional<std::int64_t> warmup_steps;  // --warmup_steps=N, overrides each model's default
  std::optional<std::string> optimizer;      // --optimizer=sgd|adam
  std::optional<double> lr;                  // --lr=X
  std::uint64_t seed = 1;                    // --seed=N
  std::string data_dir;                      // --data_dir=DIR (else $TB_DATA_DIR, else ./data)
  int loader_workers = 0;                    // --loader_workers=N
  int prefetch = 2;                          // --prefetch=K
  bool augment = false;                      // --augment
  std::optional<std::int64_t> epochs;        // --epochs=E, overrides each model's default
  double target_accuracy = 0;                // --target_accuracy=X in (0, 1]
  std::vector<std::string> precisions;       // --precisions=fp32,tf32,fp16,bf16 (default: per device)
  std::vector<int> gpus;                     // --gpus=0,1: CUDA ordinals gpu:N uses (default 0..N-1)
  double gpu_memory_limit = 0;               // --gpu_memory_limit: bytes (> 1) or a fraction (<= 1); 0: none
  bool cuda_graph = false;                   // --cuda_graph
  std::string gpu_layout = "auto";           // --gpu_layout=auto|nchw|nhwc
  bool data_on_device = false;               // --data_on_device
  std::int64_t iterations = 20;              // --iterations: timed steps of each repetition under mpirun
  bool iterations_given = false;             // --iterations given: every repetition takes exactly that many
  std::string benchmark_filter = ".";        // Google Benchmark's --benchmark_filter, seen in passing
  std::string benchmark_format = "console";  // Google Benchmark's --benchmark_format, seen in passing
  std::string benchmark_color = "auto";      // Google Benchmark's --benchmark_color, seen in passing
  std::string benchmark_out;                 // Google Benchmark's --benchmark_out, seen in passing
  bool benchmark_out_format_given = false;   // --benchmark_out_format, which needs --benchmark_out
  std::string benchmark_repetitions = "1";   // Google Benchmark's --benchmark_repetitions, seen in passing
  std::string benchmark_min_time;            // Google Benchmark's --benchmark_min_time, seen in passing
  bool benchmark_time_unit_given = false;    // Google Benchmark's --benchmark_time_unit: every row's unit
  std::string summary;                       // --summary=FILE: the end-of-run table as Markdown
  std::vector<std::string> links;            // --link=A+B: links predictions assume (empty: per device)
  int nodes = 1;                             // --nodes=M: predicted devices spread over M nodes
  int gpus_per_node = 8;                     // --gpus_per_node=K: what an NVLink link joins at most
  std::vector<std::string> networks;         // --network=A+B: the links between nodes (with --nodes)
  std::string predict_from;                  // --predict_from=CSV: predicted rows from a run's rows, no training
  double predict_allreduce = 0;              // --predict_allreduce=BYTES: one all-reduce predicted, no training
  std::string replay_from;                   // --replay_from=CSV: a run's one-device rows replayed across ranks
  bool timeline = true;                      // --timeline=off: no bucket timeline, no predictions
  bool help = false;
  bool list_models = false;   // --list_models
  bool list_configs = false;  // --list_configs
  bool json = false;          // --json (with --list_models or --list_configs)
  bool csv_header = false;    // --csv_header
  bool version = false;       // --version
};

// Removes trainbench's flags from argv (leaving argv[0] and everything else in order) and
// returns them; --benchmark_min_time is trainbench's too (a repetition's steps, StepBudget). Throws tb::InputError
// naming the flag and an example on a bad value.
Flags parse_flags(int& argc, char** argv);
// Every flag that shapes what a run measures, as `--name=value` lines in a fixed order (the
// defaults spelt out), so that the ranks of an MPI job can check they measure the same run.
std::string shaping_flags(const Flags& flags);
std::string usage();

}  // namespace tb::bench
