// The device configurations --devices names, each one kind in one table (device_kinds.cpp):
// its grammar, what it needs of the machine (the reason its rows are skipped where it cannot
// run), how many devices and ranks it uses, how its replicas communicate, the run it takes and
// its label. Adding a kind is one entry in the table and its tests (tests/test_bench.cpp); the
// harness asks a configuration's kind, it never tests names.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "bench/cli/flags.hpp"
#include "engine/backends.hpp"
#include "engine/parallel/world.hpp"

namespace tb::bench {

// How a configuration's benchmarks run (bench/run/run.hpp picks the run): one replica in this
// process; several replicas stepped together (threads, GPUs, ranks); or separate processes
// that time themselves (jobs).
enum class RunKind { OneReplica, Replicas, Processes };

// A --devices entry as written, split by the grammar every kind shares:
// <cpu|gpu|mpi>[:<count>|:all][/<jobs|threads>:<count>].
struct DeviceEntry {
  std::string text;
  std::string device{};  // cpu, gpu, mpi
  int count = 0;         // after the colon; 0: none given
  bool all = false;      // gpu:all
  std::string split{};   // jobs, threads, or empty
  int split_count = 0;
};
// Throws tb::InputError naming the entry and the grammar where it does not parse.
DeviceEntry parse_device_entry(const std::string& text);

// What a kind is told of the run: the flags, this machine and the MPI world.
struct Machine {
  const Flags& flags;
  int cores = 1;
  const parallel::World& world;
  const GpuInventory& gpus;
};

struct DeviceConfig;

struct DeviceKind {
  const char* name;     // the table's name for it: "gpu:N over NCCL"
  const char* grammar;  // how --devices writes it: "gpu:N (N >= 2)"
  const char* pattern;  // a row's device of this kind, as a regular expression (the scripts' parser)
  const char* label;    // what its rows measure, one line
  Backend backend;
  RunKind run;
  // Whether this kind is what `entry` names on `machine` (the table's first that says so is).
  bool (*matches)(const DeviceEntry& entry, const Machine& machine);
  // Threads, replicas and GPUs of `d`, and where the machine cannot run it, d.skip_reason.
  void (*configure)(const DeviceEntry& entry, const Machine& machine, DeviceConfig& d);
  parallel::Wiring wiring = nullptr;  // how its replicas communicate; null: they do not
  bool across_ranks = false;          // one replica per MPI rank: needs mpirun
  bool one_process = false;           // its replicas live in one process, or it starts its own: not under mpirun
  bool shares_device = false;         // its replicas share one device: the peak of one, never a scaling figure
  // Its rows check a path (the data-parallel path on one GPU, the multi-node path on one
  // machine); they measure neither a speed-up nor scaling. The variant word that says so, or "".
  const char* check_word = "";
};

// Every kind, in the order they are tried.
const std::vector<DeviceKind>& device_kinds();

// A --devices entry planned on a machine: its kind, what it uses, and why it cannot run there.
struct DeviceConfig {
  std::string name;
  const DeviceKind* kind = nullptr;
  int threads = 0;  // CPU threads (1 on a GPU: the thread driving it)
  int gpu_ordinal = 0;
  int replicas = 1;                 // replicas in this process, or jobs
  std::vector<int> gpu_ordinals{};  // one per local replica on GPUs
  int data_parallel = 0;            // N devices of their own sharing gradients (scaling_efficiency's N); 0: none
  std::string job_device{};         // jobs kinds: the one-device configuration each job runs (gpu:1, cpu:T)
  std::string skip_reason{};
};

// `entry` planned by its kind (throws tb::InputError where no kind takes it).
DeviceConfig plan_device(const std::string& entry, const Machine& machine);

const char* run_kind_name(RunKind run);  // "one_replica", "replicas", "processes"
// The kind named `name` in the table (tb::Error where none is).
const DeviceKind& kind_named(std::string_view name);
// The grammar of a --devices entry, in one line.
const char* device_grammar();

}  // namespace tb::bench
