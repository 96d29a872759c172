// Parsing of trainbench's flags, strict about values so that a typo fails before measuring.
#include "bench/cli/flags.hpp"

// GCC 12 takes the std::function inside libstdc++'s std::regex for maybe uninitialised where it
// inlines it (a false positive, as in bench/predict/inputs.cpp); the filter's check is the one
// regex here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <regex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/core/error.hpp"
#include "engine/parallel/predict.hpp"

namespace tb::bench {
namespace {

// A 64-bit integer in [min, max]: values that would wrap a narrower type are refused, not cut.
std::int64_t parse_int(const std::string& flag, const std::string& v, std::int64_t min, std::int64_t max) {
  std::int64_t x = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || end != v.data() + v.size() || x < min || x > max)
    throw InputError(fmt::format("--{}: '{}' is not an integer from {} to {} (example: --{}={})", flag, v, min, max,
                                 flag, std::max<std::int64_t>(min, 2)));
  return x;
}

// A finite number in (0, max].
double parse_positive(const std::string& flag, const std::string& v, double max, const char* why_max) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !std::isfinite(x) || !(x > 0))
    throw InputError(fmt::format("--{}: '{}' is not a positive number (example: --{}=0.01)", flag, v, flag));
  if (x > max) throw InputError(fmt::format("--{}: {} is above {:g}, {}", flag, v, max, why_max));
  return x;
}

// Ranges of the integer flags: far beyond any sensible run, well inside the types they feed.
constexpr std::int64_t kMaxBatch = std::int64_t(1) << 20, kMaxSteps = 1'000'000'000, kMaxThreads = 1024,
                       kMaxEpochs = 1'000'000, kMaxRepetitions = 1'000'000, kMaxGpu = 1023,
                       kMaxSeed = std::numeric_limits<std::int64_t>::max(), kMaxNodes = 100000;

// Google Benchmark's own flags are left for it, but checked here: it aborts on some values
// (repetitions below 1) and calls others an unknown flag (a min_time it cannot parse).
void check_benchmark_flag(const std::string& arg, Flags& f) {
  const auto value = [&](const char* name) -> std::optional<std::string> {
    const std::string prefix = fmt::format("--{}=", name);
    if (arg.rfind(prefix, 0) == 0) return arg.substr(prefix.size());
    return std::nullopt;
  };
  for (const char* name : {"benchmark_filter", "benchmark_repetitions", "benchmark_min_time", "benchmark_format",
                           "benchmark_out", "benchmark_out_format", "benchmark_time_unit", "benchmark_color"})
    if (arg == fmt::format("--{}", name))
      throw InputError(fmt::format("--{} needs a value: --{}=VALUE (see --help)", name, name));
  if (auto v = value("benchmark_repetitions")) {
    parse_int("benchmark_repetitions", *v, 1, kMaxRepetitions);
    f.benchmark_repetitions = *v;
  } else if (auto v = value("benchmark_min_time")) {
    f.benchmark_min_time = *v;
    char* end = nullptr;
    const double x = std::strtod(v->c_str(), &end);
    if (v->empty() || *end != '\0' || !std::isfinite(x) || x < 0)
      throw InputError(
          fmt::format("--benchmark_min_time: '{}' is not a number of seconds >= 0 (e.g. 0.5; Google "
                      "Benchmark {} takes seconds only, no '10x' iteration counts)",
                      *v, "1.7.1"));
  } else if (auto v = value("benchmark_filter")) {
    f.benchmark_filter = *v;
    try {  // Google Benchmark matches none with a filter it cannot compile, and says little
      std::regex check(*v);
    } catch (const std::regex_error& e) {
      throw InputError(fmt::format("--benchmark_filter='{}': not a regular expression ({})", *v, e.what()));
    }
  } else if (auto v = value("benchmark_format")) {
    if (*v != "console" && *v != "json" && *v != "csv")
      throw InputError(fmt::format("--benchmark_format: '{}' is not one of console, json, csv", *v));
    f.benchmark_format = *v;
  } else if (auto v = value("benchmark_color")) {
    // The words the console reads (run/reporter.cpp, display_options): any other ('off', a typo)
    // was taken for auto, colour on a terminal, without a word.
    const std::vector<std::string> words{"auto", "true", "yes", "1", "always", "false", "no", "0", "never"};
    if (std::find(words.begin(), words.end(), *v) == words.end())
      throw InputError(
          fmt::format("--benchmark_color: '{}' is not auto, true or false (or yes, 1, always; no, 0, never)", *v));
    f.benchmark_color = *v;
  } else if (auto v = value("benchmark_out")) {
    if (v->empty()) throw InputError("--benchmark_out: give a file name, e.g. --benchmark_out=results/run.json");
    f.benchmark_out = *v;
  } else if (auto v = value("benchmark_out_format")) {
    // Google Benchmark prints its usage and exits 0, having run nothing, on any other value.
    if (*v != "console" && *v != "json" && *v != "csv")
      throw InputError(fmt::format("--benchmark_out_format: '{}' is not one of console, json, csv", *v));
    f.benchmark_out_format_given = true;
  } else if (auto v = value("benchmark_time_unit")) {
    if (*v != "ns" && *v != "us" && *v != "ms" && *v != "s")
      throw InputError(fmt::format("--benchmark_time_unit: '{}' is not one of ns, us, ms, s", *v));
    f.benchmark_time_unit_given = true;
  }
}

// A flag given twice took its last value without a word (--csv=a.csv --csv=b.csv wrote b.csv
// only); every --name=VALUE is taken once.
void check_given_once(const std::string& arg, std::map<std::string, std::string>& given) {
  if (arg.rfind("--", 0) != 0) return;
  const std::size_t eq = arg.find('=');
  if (eq == std::string::npos) return;
  const std::string name = arg.substr(0, eq), value = arg.substr(eq + 1);
  if (const auto [at, fresh] = given.emplace(name, value); !fresh)
    throw InputError(fmt::format("{} is given twice ('{}' and '{}'): give it once{}", name, at->second, value,
                                 name == "--devices" || name == "--precisions" || name == "--gpus"
                                     ? fmt::format(", with a list: {}=A,B", name)
                                     : ""));
}

// The files a run writes (--csv, --summary, --benchmark_out) are three files, and none of the
// others is a trainbench CSV: each is overwritten whole, and a CSV given there lost every row.
void check_output_files(const Flags& f) {
  namespace fs = std::filesystem;
  const std::vector<std::pair<const char*, std::string>> outputs = {
      {"--csv", f.csv}, {"--summary", f.summary}, {"--benchmark_out", f.benchmark_out}};
  const auto same = [](const std::string& a, const std::string& b) {
    std::error_code ec, ec_a, ec_b;
    if (fs::equivalent(a, b, ec)) return true;
    const fs::path full_a = fs::weakly_canonical(a, ec_a), full_b = fs::weakly_canonical(b, ec_b);
    return !ec_a && !ec_b && full_a == full_b;
  };
  for (std::size_t i = 0; i < outputs.size(); ++i)
    for (std::size_t j = i + 1; j < outputs.size(); ++j)
      if (!outputs[i].second.empty() && !outputs[j].second.empty() && same(outputs[i].second, outputs[j].second))
        throw InputError(fmt::format("{}={} and {}={} are one file: give each its own", outputs[i].first,
                                     outputs[i].second, outputs[j].first, outputs[j].second));
  for (const auto& [flag, path] : outputs) {
    if (path.empty() || std::string(flag) == "--csv") continue;
    // Its first bytes, of a regular file only (a device such as /dev/full reads without end).
    std::error_code regular_ec;
    std::string first(15, '\0');
    std::ifstream in;
    if (fs::is_regular_file(path, regular_ec)) in.open(path, std::ios::binary);
    if (in && in.read(first.data(), std::streamsize(first.size())) && first == "schema_version,")
      throw InputError(
          fmt::format("{}={}: the file holds trainbench rows (a CSV), which this run would overwrite: "
                      "give another file name",
                      flag, path));
    std::error_code ec;
    if (fs::is_directory(path, ec))
      throw InputError(fmt::format("{}={}: is a folder; give a file name in it", flag, path));
  }
}

std::vector<std::string> split(const std::string& v) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= v.size()) {
    std::size_t comma = v.find(',', start);
    if (comma == std::string::npos) comma = v.size();
    if (comma > start) out.push_back(v.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

// BYTES with an optional KiB/MiB/GiB suffix, or a fraction of the device's memory in (0, 1].
double parse_memory(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  const std::string suffix = end ? std::string(end) : std::string();
  double unit = 1;
  if (suffix == "KiB")
    unit = 1024.0;
  else if (suffix == "MiB")
    unit = 1024.0 * 1024;
  else if (suffix == "GiB")
    unit = 1024.0 * 1024 * 1024;
  else if (!suffix.empty())
    x = -1;
  x *= unit;
  // A value with a unit is bytes: one that came to a byte or less was taken for a fraction of the
  // device's memory (0.0001KiB for a tenth of it).
  if (unit != 1 && x <= 1) x = -1;
  if (v.empty() || !std::isfinite(x) || !(x > 0) || (unit == 1 && x > 1 && x != std::floor(x)))
    throw InputError(
        fmt::format("--{}: '{}' is neither a byte count (e.g. 8GiB, 512MiB, 1000000000) nor a "
                    "fraction of the device's memory in (0, 1] (e.g. 0.5)",
                    flag, v));
  constexpr double kMaxBytes = double(std::uint64_t(1) << 50);  // 1 PiB: more than any GPU holds
  if (x > kMaxBytes)
    throw InputError(fmt::format("--{}: '{}' is more than 1 PiB, more memory than any GPU has", flag, v));
  return x;
}

// BYTES: a whole number of bytes with an optional KiB, MiB or GiB (1000000, 256MiB, 4GiB).
double parse_byte_count(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  const std::string suffix = end ? std::string(end) : std::string();
  const double unit = suffix == "KiB"   ? 1024.0
                      : suffix == "MiB" ? 1024.0 * 1024
                      : suffix == "GiB" ? 1024.0 * 1024 * 1024
                      : suffix.empty()  ? 1
                                        : 0;
  const double bytes = x * unit;
  if (v.empty() || !std::isfinite(bytes) || bytes < 1 || bytes != std::floor(bytes) || bytes > double(1ULL << 50))
    throw InputError(
        fmt::format("--{}: '{}' is not a byte count from 1 byte to 1 PiB (e.g. 4GiB, 256MiB, 1000000)", flag, v));
  return bytes;
}

}  // namespace

namespace {

// What the benchmarks are called and the flags that choose and shape them.
const char* usage_benchmarks() {
  return R"(trainbench: deep-learning training benchmarks (Google Benchmark harness)

Benchmarks are named train/<model>/<dataset>/<device>/<precision>/bs:<batch> (steady-state
training steps) and epochs/<model>/<dataset>/<device>/<precision>/bs:<batch> (whole epochs with
a validation pass after each: loss, accuracy and elapsed time per epoch).
Select them with Google Benchmark's flags, e.g.
  trainbench --benchmark_filter='train/mlp/' --benchmark_repetitions=3
  trainbench --benchmark_list_tests

trainbench flags:
  --csv=FILE            append one row per run to FILE (created with a header; a file with
                        another header is refused); see results/SCHEMA.md
  --summary=FILE        also write the table printed at the end of the run (samples/s per
                        device configuration, speedup over cpu, scaling efficiency, memory,
                        comm share) to FILE as Markdown
  --batch=N             batch size for every model (default: each model's own)
  --devices=LIST        device configurations to register, comma-separated: cpu (all cores),
                        cpu:N (N threads), gpu:N (N GPUs), gpu:all (every GPU, when two or
                        more), gpu:1/jobs:K (K processes sharing one GPU), gpu:1/threads:K
                        (K threads of this process sharing it), cpu:T/jobs:K, mpi:N (see below).
                        Default: cpu, cpu:1, gpu:1 and gpu:2 ... gpu:N for N GPUs (a GPU
                        configuration is reported as skipped, with the reason, where it
                        cannot run); under mpirun -np N: cpu:T and gpu:1 (baselines run
                        by rank 0 alone), mpi:N and gpu:N
  --precisions=LIST     fp32, tf32, fp16 (mixed, dynamic loss scaling), bf16 (mixed), and
                        fastest (bf16 from compute capability 8.0, fp16 from 7.0; fp32 on the
                        CPU). Default: fp32 on the CPU, all four on GPUs. A precision a
                        device cannot run is a skipped row with the reason
  --gpus=LIST           CUDA device ordinals the gpu configurations use (default 0, 1, ...;
                        CUDA_VISIBLE_DEVICES applies first). One ordinal repeated (--gpus=0,0)
                        runs gpu:N as N replicas sharing that GPU, all-reduced by a kernel: a
                        check of the data-parallel path on one GPU, not a measure of scaling
  --link=L[+L...]       the links predicted N-device rows assume: a preset,
@LINKS@,
                        measured (the ranks of a run under mpirun, swept at start-up) or
                        BUSBW_GBPS[,LATENCY_US]. Default: nvlink4 for GPU rows, measured for CPU
                        rows under mpirun (none otherwise). See docs/prediction.md
  --nodes=M             predicted devices spread over M nodes (N = M x devices per node), joined
                        by --network=NAME[xNICS]|BUSBW_GBPS[,LATENCY_US][xNICS], a preset
@NETWORKS@
                        (ib_ndr400x8: 8 NICs per node, a DGX H100); --link is then the link
                        within a node
  --gpus_per_node=K     the most GPUs an NVLink link joins in one node (default 8, an HGX or
                        DGX board): more over nvlink4 or nvlink3 need --nodes
  --predict_from=CSV    no training: predicted rows from the one-device rows of an earlier run's
                        CSV (their prediction_inputs column), for --devices=gpu:N,mpi:N (default
                        2, 4, 8 devices), --link, --nodes and --network; with --csv=OUT
  --predict_allreduce=BYTES
                        no training: one all-reduce of BYTES (4GiB, 256MiB, 1000000) predicted
                        for --devices=gpu:N (default 2, 4, 8), --link, --nodes and --network:
                        its time, algorithm and bus bandwidth (nccl-tests' busbw) with its band
  --replay_from=CSV     under mpirun -np N: each one-device row of CSV (filtered) replayed on
                        N ranks: its measured compute waited out step by step, its gradient
                        buckets all-reduced for real at their measured times (mpi:N rows,
                        measurement=replayed)
  --timeline=on|off     record when each gradient bucket becomes ready in one-device rows, for
                        predictions (default on; off measures the step without its marks)
  --gpu_memory_limit=X  cap on the device memory trainbench may use: bytes (8GiB, 512MiB,
                        1000000000) or a fraction of the device's memory (0.5). A benchmark
                        that needs more fails its row with an out-of-memory message
  --cuda_graph          capture each GPU training step once as a CUDA graph and replay it
  --gpu_layout=L        image layout on the GPU: auto (channels-last NHWC where tensor cores
                        compute and the convolutions suit them, else NCHW), nchw or nhwc
  --data_on_device      keep the training data on the device, prepared once (up to one
                        epoch, at most 2 GiB): on a GPU batches are device-to-device copies,
                        no host upload per step; on the CPU each step copies a resident batch
                        into the network's input, without the loader's work
)";
}

// The flags of data parallelism and training, and Google Benchmark's.
const char* usage_training() {
  return R"(
Data parallelism (train/ benchmarks): gpu:N (N GPUs of this machine, NCCL, one thread
each), gpu:1/jobs:K (K separate copies of trainbench sharing one GPU, each timed on its own
and started together; gpu:1/threads:K runs them as threads of one process), and under
mpirun -np N: mpi:N (one
CPU replica per rank, MPI all-reduce) and gpu:N (one GPU per rank, NCCL). The global batch
is N x --batch.
  --iterations=N        timed steps of every repetition (default: under mpirun 20, where all
                        ranks must agree; elsewhere as many as --benchmark_min_time takes)
  --warmup_steps=N      training steps before timing starts (default 2; 200 for lenet5, whose
                        sigmoids learn nothing for about the first 100 steps)
  --optimizer=sgd|adam  override each model's optimizer (sgd = SGD with momentum 0.9)
  --lr=X                override each model's learning rate
  --seed=N              seed of the weights, the data order and the synthetic data (default 1)
  --data_dir=DIR        folder with one sub-folder per dataset (mnist, fashion-mnist, cifar10);
                        default $TB_DATA_DIR, else ./data. Absent datasets use synthetic data
  --loader_workers=N    threads preparing batches ahead (default 0: on the training thread)
  --prefetch=K          batches the workers prepare ahead (default 2; needs --loader_workers)
  --augment             CIFAR-10 training augmentation: random crop (padding 4), horizontal flip
  --epochs=E            epochs of the epochs/ benchmarks (default: per model, see docs/datasets.md)
  --target_accuracy=X   stop an epochs/ benchmark once validation accuracy reaches X
  --list_models         print each workload's parameters, FLOPs and memory plans, and exit
  --list_configs        print the device configurations --devices takes (their grammar, how
                        each runs, what its rows measure), and exit
  --json                with --list_models: the workloads as one JSON object (shapes, batches,
                        optimizers, parameters, FLOPs), for other tools to read; with
                        --list_configs: the device kinds, with a pattern for a row's device;
                        with --csv_header: the schema version and the columns
  --csv_header          print the CSV header (schema of --csv), and exit
  --version             print the version, the git commit and the backends built in, and exit
  --help                this text

Google Benchmark's flags work as usual: --benchmark_filter=REGEX, --benchmark_list_tests,
--benchmark_repetitions=N, --benchmark_min_time=SECONDS, --benchmark_out=FILE with
--benchmark_out_format=json|console|csv, --benchmark_format=console|json|csv (the format on
stdout; json and csv carry the machine context), --benchmark_color=auto|true|false (colour
only where stdout is a terminal, unless true).
Any other flag is an error.
)";
}

}  // namespace

std::string usage() {
  // The presets are the model's own tables (engine/parallel/predict.cpp), named as they are, in
  // lines of the flags' column.
  const auto names = [](const std::vector<parallel::Link>& presets) {
    std::string out, line;
    for (const parallel::Link& l : presets) {
      if (!line.empty() && line.size() + l.name.size() + 2 > 72)
        out += std::string(24, ' ') + line + "\n", line.clear();
      line += (line.empty() ? "" : ", ") + l.name;
    }
    return out + std::string(24, ' ') + line;
  };
  std::string text = std::string(usage_benchmarks()) + usage_training();
  for (const auto& [mark, value] : {std::pair{std::string("@LINKS@"), names(parallel::link_presets())},
                                    std::pair{std::string("@NETWORKS@"), names(parallel::network_presets())}})
    text.replace(text.find(mark), mark.size(), value);
  return text;
}

namespace {

// A list joined by '+' (checked by the predictor: parse_link, parse_network).
std::vector<std::string> plus_list(const std::string& v) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= v.size()) {
    const std::size_t plus = std::min(v.find('+', start), v.size());
    out.push_back(v.substr(start, plus - start));
    start = plus + 1;
  }
  return out;
}

void parse_precisions(Flags& f, const std::string& v) {
  f.precisions = split(v);
  if (f.precisions.empty()) throw InputError("--precisions: give at least one, e.g. --precisions=fp32,fp16");
  for (const std::string& p : f.precisions)
    if (p != "fp32" && p != "tf32" && p != "fp16" && p != "bf16" && p != "fastest")
      throw InputError(fmt::format("--precisions: unknown precision '{}'; use fp32, tf32, fp16, bf16 or fastest", p));
}

// A file-name flag refuses an empty value, with an example of one.
std::function<void(Flags&, const std::string&)> file_flag(std::string Flags::*field, const char* name,
                                                          const char* example) {
  return [=](Flags& f, const std::string& v) {
    if (v.empty()) throw InputError(fmt::format("--{}: give {}", name, example));
    f.*field = v;
  };
}

using Setter = std::function<void(Flags&, const std::string&)>;

// The flags that take a value (--name=VALUE), each with what it checks and sets.
const std::vector<std::pair<const char*, Setter>>& valued_flags() {
  static const std::vector<std::pair<const char*, Setter>> all{
      {"link", [](Flags& f, const std::string& v) { f.links = plus_list(v); }},
      {"network", [](Flags& f, const std::string& v) { f.networks = plus_list(v); }},
      {"nodes", [](Flags& f, const std::string& v) { f.nodes = int(parse_int("nodes", v, 1, kMaxNodes)); }},
      {"gpus_per_node",
       [](Flags& f, const std::string& v) { f.gpus_per_node = int(parse_int("gpus_per_node", v, 1, 1024)); }},
      {"predict_allreduce",
       [](Flags& f, const std::string& v) { f.predict_allreduce = parse_byte_count("predict_allreduce", v); }},
      {"predict_from",
       file_flag(&Flags::predict_from, "predict_from", "a trainbench CSV, e.g. --predict_from=run.csv")},
      {"replay_from", file_flag(&Flags::replay_from, "replay_from", "a trainbench CSV, e.g. --replay_from=run.csv")},
      {"timeline",
       [](Flags& f, const std::string& v) {
         if (v != "on" && v != "off") throw InputError(fmt::format("--timeline: '{}' is not on or off", v));
         f.timeline = v == "on";
       }},
      {"summary", file_flag(&Flags::summary, "summary", "a file name, e.g. --summary=results/summary.md")},
      {"csv", file_flag(&Flags::csv, "csv", "a file name, e.g. --csv=results/run.csv")},
      {"batch", [](Flags& f, const std::string& v) { f.batch = parse_int("batch", v, 1, kMaxBatch); }},
      {"devices",
       [](Flags& f, const std::string& v) {
         f.devices = split(v);
         if (f.devices.empty()) throw InputError("--devices: give at least one, e.g. --devices=cpu,cpu:1");
         // Twice, a device was two benchmarks of one name, pooled as two repetitions of one row.
         for (std::size_t k = 0; k < f.devices.size(); ++k)
           if (std::find(f.devices.begin(), f.devices.begin() + std::ptrdiff_t(k), f.devices[k]) !=
               f.devices.begin() + std::ptrdiff_t(k))
             throw InputError(
                 fmt::format("--devices: {} is given twice: give it once (--benchmark_repetitions=N "
                             "repeats a row)",
                             f.devices[k]));
       }},
      {"warmup_steps",
       [](Flags& f, const std::string& v) { f.warmup_steps = parse_int("warmup_steps", v, 0, kMaxSteps); }},
      {"optimizer",
       [](Flags& f, const std::string& v) {
         if (v != "sgd" && v != "adam") throw InputError(fmt::format("--optimizer: '{}' is not one of sgd, adam", v));
         f.optimizer = v;
       }},
      {"lr",
       [](Flags& f, const std::string& v) {
         f.lr = parse_positive("lr", v, 1e6, "the largest learning rate trainbench takes (any step would diverge)");
       }},
      {"seed", [](Flags& f, const std::string& v) { f.seed = std::uint64_t(parse_int("seed", v, 0, kMaxSeed)); }},
      {"data_dir", file_flag(&Flags::data_dir, "data_dir", "a folder, e.g. --data_dir=data")},
      {"loader_workers",
       [](Flags& f, const std::string& v) { f.loader_workers = int(parse_int("loader_workers", v, 0, kMaxThreads)); }},
      {"prefetch", [](Flags& f, const std::string& v) { f.prefetch = int(parse_int("prefetch", v, 1, kMaxThreads)); }},
      {"precisions", parse_precisions},
      {"gpus",
       [](Flags& f, const std::string& v) {
         for (const std::string& g : split(v)) f.gpus.push_back(int(parse_int("gpus", g, 0, kMaxGpu)));
         if (f.gpus.empty()) throw InputError("--gpus: give at least one CUDA device ordinal, e.g. --gpus=0");
       }},
      {"gpu_memory_limit",
       [](Flags& f, const std::string& v) { f.gpu_memory_limit = parse_memory("gpu_memory_limit", v); }},
      {"iterations",
       [](Flags& f, const std::string& v) {
         f.iterations = parse_int("iterations", v, 1, kMaxSteps);
         f.iterations_given = true;
       }},
      {"gpu_layout",
       [](Flags& f, const std::string& v) {
         if (v != "auto" && v != "nchw" && v != "nhwc")
           throw InputError(fmt::format("--gpu_layout: unknown layout '{}'; use auto, nchw or nhwc", v));
         f.gpu_layout = v;
       }},
      {"epochs", [](Flags& f, const std::string& v) { f.epochs = parse_int("epochs", v, 1, kMaxEpochs); }},
      {"target_accuracy",
       [](Flags& f, const std::string& v) {
         f.target_accuracy =
             parse_positive("target_accuracy", v, 1, "the highest accuracy (a fraction in (0, 1], e.g. 0.85)");
       }},
  };
  return all;
}

// The flags that take no value.
const std::vector<std::pair<const char*, bool Flags::*>>& switch_flags() {
  static const std::vector<std::pair<const char*, bool Flags::*>> all{
      {"--help", &Flags::help},
      {"-h", &Flags::help},
      {"--list_models", &Flags::list_models},
      {"--list_configs", &Flags::list_configs},
      {"--json", &Flags::json},
      {"--csv_header", &Flags::csv_header},
      {"--version", &Flags::version},
      {"--cuda_graph", &Flags::cuda_graph},
      {"--data_on_device", &Flags::data_on_device},
      {"--augment", &Flags::augment},
  };
  return all;
}

// Sets what `arg` says, if it is one of trainbench's own flags; false for any other.
bool parse_own_flag(const std::string& arg, Flags& f) {
  for (const auto& [name, field] : switch_flags())
    if (arg == name) {
      f.*field = true;
      return true;
    }
  for (const auto& [name, set] : valued_flags()) {
    const std::string prefix = fmt::format("--{}=", name);
    if (arg.rfind(prefix, 0) == 0) {
      set(f, arg.substr(prefix.size()));
      return true;
    }
    if (arg == fmt::format("--{}", name))
      throw InputError(fmt::format("--{} needs a value: --{}=VALUE (see --help)", name, name));
  }
  return false;
}

}  // namespace

Flags parse_flags(int& argc, char** argv) {
  Flags f;
  int out = 1;
  std::map<std::string, std::string> given;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    check_given_once(arg, given);
    if (parse_own_flag(arg, f)) continue;
    check_benchmark_flag(arg, f);
    // A repetition's steps are trainbench's (StepBudget): Google Benchmark is told to take each
    // call as it comes (main gives it --benchmark_min_time=0).
    if (arg.rfind("--benchmark_min_time=", 0) == 0) continue;
    argv[out++] = argv[i];
  }
  argc = out;
  if (!f.networks.empty() && f.nodes < 2)
    throw InputError(
        "--network is the link between nodes: give the nodes too, e.g. --nodes=2 --network=ib_ndr400x8 (see "
        "docs/prediction.md)");
  if (f.nodes > 1 && f.networks.empty())
    throw InputError(
        fmt::format("--nodes={}: give the link between the nodes with --network=NAME or BUSBW_GBPS[,LATENCY_US][xNICS] "
                    "(e.g. --network=ib_ndr400x8 or --network=10,50)",
                    f.nodes));
  if (!f.predict_from.empty() && !f.replay_from.empty())
    throw InputError("--predict_from and --replay_from are two runs: give one of them");
  if (f.predict_allreduce > 0 && (!f.predict_from.empty() || !f.replay_from.empty()))
    throw InputError(
        "--predict_allreduce predicts one all-reduce, no run's rows: give it without --predict_from or "
        "--replay_from");
  if (f.json && !f.list_models && !f.list_configs && !f.csv_header)
    throw InputError(
        "--json goes with --list_models, --list_configs or --csv_header (trainbench --list_models --json); results "
        "go to --csv=FILE");
  // Google Benchmark writes that format to --benchmark_out's file only; without one, the flag
  // was taken and nothing changed.
  if (f.benchmark_out_format_given && f.benchmark_out.empty())
    throw InputError(
        "--benchmark_out_format is the format of --benchmark_out's file: give --benchmark_out=FILE with it (the "
        "console's format is --benchmark_format)");
  // The queue belongs to the loader's threads: with none (the default), each batch is made on the
  // training thread as it is needed, and the flag was taken and changed nothing.
  if (given.count("--prefetch") && f.loader_workers == 0)
    throw InputError(fmt::format(
        "--prefetch={} is the queue of the loader's threads: give --loader_workers=N with it (without them, the "
        "default, each batch is made on the training thread when it is needed)",
        f.prefetch));
  check_output_files(f);
  return f;
}

std::string shaping_flags(const Flags& f) {
  const auto join = [](const auto& values) { return fmt::format("{}", fmt::join(values, ",")); };
  const auto opt = [](const auto& value) { return value ? fmt::format("{}", *value) : std::string("default"); };
  const std::vector<std::pair<const char*, std::string>> shaping{
      {"devices", join(f.devices)},
      {"precisions", join(f.precisions)},
      {"batch", opt(f.batch)},
      {"warmup_steps", opt(f.warmup_steps)},
      {"optimizer", opt(f.optimizer)},
      {"lr", opt(f.lr)},
      {"seed", std::to_string(f.seed)},
      {"data_dir", f.data_dir},
      {"loader_workers", std::to_string(f.loader_workers)},
      {"prefetch", std::to_string(f.prefetch)},
      {"augment", std::to_string(int(f.augment))},
      {"epochs", opt(f.epochs)},
      {"target_accuracy", fmt::format("{}", f.target_accuracy)},
      {"gpus", join(f.gpus)},
      {"gpu_memory_limit", fmt::format("{}", f.gpu_memory_limit)},
      {"cuda_graph", std::to_string(int(f.cuda_graph))},
      {"gpu_layout", f.gpu_layout},
      {"data_on_device", std::to_string(int(f.data_on_device))},
      {"iterations", std::to_string(f.iterations)},
      {"link", fmt::format("{}", fmt::join(f.links, "+"))},
      {"nodes", std::to_string(f.nodes)},
      {"gpus_per_node", std::to_string(f.gpus_per_node)},
      {"network", fmt::format("{}", fmt::join(f.networks, "+"))},
      {"replay_from", f.replay_from},
      {"timeline", f.timeline ? "on" : "off"},
      {"benchmark_filter", f.benchmark_filter},
      {"benchmark_repetitions", f.benchmark_repetitions},
      {"benchmark_min_time", f.benchmark_min_time},
  };
  std::string text;
  for (const auto& [name, value] : shaping) text += fmt::format("--{}={}\n", name, value);
  return text;
}

}  // namespace tb::bench
