// The plan stage (bench/plan/): the table of device kinds, the baselines each planned row is
// compared with, the variant's table and order.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "bench/plan/configs.hpp"
#include "bench/plan/device_kinds.hpp"
#include "datasets/sources.hpp"
#include "engine/core/error.hpp"
#include "models/models.hpp"

namespace tb::bench {
namespace {

// ---- device kinds ----

// A machine of `cores` cores and `gpus` GPUs, in an MPI world of `ranks` (this one `local_rank`).
struct FakeMachine {
  Flags flags;
  parallel::World world;
  GpuInventory inventory;
  int cores = 2;
  FakeMachine(int gpus, int ranks = 1, int local_rank = 0) {
    for (int k = 0; k < gpus; ++k) inventory.devices.push_back(GpuDevice{.ordinal = k, .name = "fake"});
    if (gpus == 0) inventory.unavailable = "no CUDA device";
    world.size = world.local_size = ranks;
    world.rank = world.local_rank = local_rank;
  }
  DeviceConfig plan(const std::string& entry) const {
    return plan_device(entry, Machine{flags, cores, world, inventory});
  }
};

TEST(DeviceKinds, EachEntryIsTheKindItsGrammarNames) {
  FakeMachine two_gpus(2);
  const std::vector<std::pair<std::string, std::string>> cases{
      {"cpu", "cpu"},
      {"cpu:1", "cpu:T"},
      {"cpu:1/jobs:2", "cpu:T/jobs:K"},
      {"gpu:1", "gpu:1"},
      {"gpu:2", "gpu:N over NCCL"},
      {"gpu:all", "gpu:N over NCCL"},
      {"gpu:1/threads:3", "gpu:1/threads:K"},
      {"gpu:1/jobs:3", "gpu:1/jobs:K"},
      {"mpi:2", "mpi:N"},
  };
  for (const auto& [entry, kind] : cases) {
    const DeviceConfig d = two_gpus.plan(entry);
    ASSERT_NE(d.kind, nullptr) << entry;
    EXPECT_EQ(d.kind->name, kind) << entry;
  }
  const DeviceConfig all = two_gpus.plan("gpu:all");
  EXPECT_EQ(all.name, "gpu:2");
  EXPECT_EQ(all.gpu_ordinals, (std::vector<int>{0, 1}));
  EXPECT_EQ(all.skip_reason, "");
}

TEST(DeviceKinds, WhatTheMachineLacksIsTheSkipReason) {
  FakeMachine none(0);
  EXPECT_EQ(none.plan("cpu:3").skip_reason, "cpu:3 needs 3 cores, this machine has 2");
  EXPECT_EQ(none.plan("cpu:1/jobs:3").skip_reason,
            "cpu:1/jobs:3: 3 jobs of 1 thread(s) need 3 cores, this machine has 2: at most 2 such jobs");
  EXPECT_EQ(none.plan("gpu:1").skip_reason, "gpu:1: no CUDA device");
  EXPECT_EQ(none.plan("mpi:2").skip_reason, "mpi:2: start trainbench with mpirun -np 2 for MPI data parallelism");
  FakeMachine one_gpu(1);
  EXPECT_EQ(one_gpu.plan("gpu:2").skip_reason, "gpu:2 needs 2 GPUs, this machine has 1");
  EXPECT_NE(one_gpu.plan("gpu:all").skip_reason.find("gpu:N needs two or more"), std::string::npos);
  one_gpu.flags.gpus = {3};
  EXPECT_NE(one_gpu.plan("gpu:1").skip_reason.find("CUDA device 3 (--gpus"), std::string::npos);
}

TEST(DeviceKinds, RepeatedGpusMakeSharedDeviceReplicas) {
  FakeMachine m(1);
  m.flags.gpus = {0, 0};
  const DeviceConfig d = m.plan("gpu:2");
  EXPECT_EQ(d.kind->name, std::string("gpu:N sharing one GPU"));
  EXPECT_TRUE(d.kind->shares_device);
  EXPECT_EQ(std::string(d.kind->check_word), "shared_device");
  EXPECT_EQ(d.data_parallel, 0) << "replicas sharing one GPU are no scaling figure";
  EXPECT_EQ(d.gpu_ordinals, (std::vector<int>{0, 0}));
  EXPECT_EQ(d.skip_reason, "");
  EXPECT_NE(m.plan("gpu:3").skip_reason.find("give one entry per replica"), std::string::npos);
  m.flags.gpus = {0, 0, 1};
  EXPECT_THROW(m.plan("gpu:2"), InputError);
}

TEST(DeviceKinds, UnderMpirunGpuNIsOneGpuPerRankAndOneProcessKindsAreSkipped) {
  FakeMachine rank1(2, /*ranks=*/2, /*local_rank=*/1);
  const DeviceConfig d = rank1.plan("gpu:2");
  EXPECT_EQ(d.kind->name, std::string("gpu:N across ranks"));
  EXPECT_TRUE(d.kind->across_ranks);
  EXPECT_EQ(d.gpu_ordinals, (std::vector<int>{1}));  // this rank's GPU: its node-local index
  EXPECT_EQ(d.replicas, 1);
  EXPECT_EQ(d.data_parallel, 2) << "one GPU per rank: 2 devices sharing gradients";
  EXPECT_NE(rank1.plan("gpu:4").skip_reason.find("gpu:1 (rank 0) and gpu:2"), std::string::npos);
  EXPECT_EQ(rank1.plan("mpi:2").skip_reason, "");
  EXPECT_EQ(rank1.plan("mpi:2").threads, 1);  // two ranks on this node share its 2 cores
  EXPECT_EQ(rank1.plan("cpu:1/jobs:2").skip_reason, "cpu:1/jobs:2 runs in one process: start it without mpirun");
  EXPECT_EQ(rank1.plan("gpu:1/threads:2").skip_reason, "gpu:1/threads:2 runs in one process: start it without mpirun");
}

// scripts/emulate_nodes.sh --gpu 2: two ranks, each its own NCCL host, sharing GPU 0 (not the
// node-local rank's GPU 1, which the machine lacks).
TEST(DeviceKinds, EmulatedNodesShareTheOneGpuTheyAreGiven) {
  FakeMachine rank1(1, /*ranks=*/2, /*local_rank=*/1);
  rank1.world.emulated_nodes = true;
  const DeviceConfig d = rank1.plan("gpu:2");
  EXPECT_EQ(d.kind->name, std::string("gpu:N as emulated nodes"));
  EXPECT_TRUE(d.kind->across_ranks && d.kind->shares_device);
  EXPECT_EQ(d.gpu_ordinals, (std::vector<int>{0}));
  EXPECT_EQ(d.skip_reason, "");
  EXPECT_EQ(rank1.plan("gpu:1").gpu_ordinals, (std::vector<int>{0}));  // the probe shares it too
  EXPECT_NE(rank1.plan("gpu:3").skip_reason.find("gpu:1 (rank 0) and gpu:2"), std::string::npos);
  FakeMachine no_gpu(0, 2, 1);
  no_gpu.world.emulated_nodes = true;
  EXPECT_EQ(no_gpu.plan("gpu:2").skip_reason, "gpu:2: no CUDA device");
}

TEST(DeviceKinds, EntriesNoKindTakesAreRefusedWithTheGrammar) {
  FakeMachine m(1);
  for (const char* bad : {"tpu:1", "cpu:0", "cpu:x", "gpu:1/foo:2", "gpu:2/jobs:2", "gpu:2/threads:2", "mpi"}) {
    try {
      m.plan(bad);
      ADD_FAILURE() << bad << " was taken";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
}

TEST(DeviceKinds, EveryKindSaysWhatItIs) {
  std::set<std::string> names;
  for (const DeviceKind& k : device_kinds()) {
    EXPECT_TRUE(names.insert(k.name).second) << k.name;
    EXPECT_GT(std::string(k.label).size(), 10u) << k.name;
    EXPECT_EQ(std::string(k.pattern).front(), '^') << k.name;
    EXPECT_EQ(k.across_ranks && k.one_process, false) << k.name;
    EXPECT_EQ(k.run == RunKind::Replicas || !k.wiring, true) << k.name << ": only replicas communicate";
    EXPECT_TRUE(k.matches && k.configure) << k.name;
  }
}

// A count is digits alone, from 1: text after them is refused (it was read as far as it went:
// cpu:2x ran as cpu:2), and so is "all" anywhere but after gpu.
TEST(DeviceKinds, ACountIsDigitsAloneAndAllIsGpusOnly) {
  FakeMachine m(2);
  for (const char* bad : {"cpu:2x", "cpu:1.5", "gpu:1/jobs:2x", "mpi:2 ", "cpu:all", "mpi:all", "cpu:1/jobs:all"}) {
    try {
      m.plan(bad);
      ADD_FAILURE() << bad << " was taken";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
}

// What the machine has is enough: T threads on T cores, K jobs of T threads on K x T cores, its
// highest CUDA ordinal; one more is not.
TEST(DeviceKinds, WhatTheMachineHasExactlyIsEnough) {
  FakeMachine m(2);  // 2 cores, GPUs 0 and 1
  EXPECT_EQ(m.plan("cpu:2").skip_reason, "");
  EXPECT_EQ(m.plan("cpu:2").threads, 2);
  EXPECT_EQ(m.plan("cpu:1/jobs:2").skip_reason, "");
  EXPECT_EQ(m.plan("cpu:2/jobs:1").skip_reason, "");
  m.flags.gpus = {1};
  EXPECT_EQ(m.plan("gpu:1").skip_reason, "");
  EXPECT_EQ(m.plan("gpu:1").gpu_ordinals, (std::vector<int>{1}));
  m.flags.gpus = {2};
  EXPECT_EQ(m.plan("gpu:1").skip_reason,
            "gpu:1: CUDA device 2 (--gpus, or the rank's local index) does not exist; this machine has devices 0 to 1");
}

// gpu:N takes the first N --gpus entries in their order, gpu:all one replica per entry (not per
// device of the machine), and gpu:1 and its threads the first.
TEST(DeviceKinds, GpuNTakesTheFirstNGpusEntriesInTheirOrder) {
  FakeMachine m(4);
  m.flags.gpus = {3, 1, 2};
  const DeviceConfig all = m.plan("gpu:all");
  EXPECT_EQ(all.name, "gpu:3");
  EXPECT_EQ(all.gpu_ordinals, (std::vector<int>{3, 1, 2}));
  EXPECT_EQ(all.data_parallel, 3);
  const DeviceConfig two = m.plan("gpu:2");
  EXPECT_EQ(two.gpu_ordinals, (std::vector<int>{3, 1}));
  EXPECT_EQ(two.replicas, 2);
  EXPECT_EQ(two.data_parallel, 2);
  EXPECT_EQ(m.plan("gpu:1").gpu_ordinals, (std::vector<int>{3}));
  EXPECT_EQ(m.plan("gpu:1/threads:2").gpu_ordinals, (std::vector<int>{3, 3}));
}

// gpu:N with a --gpus list of fewer than N devices is skipped, naming the list: the rest were
// filled with 0, 1, ..., so that --gpus=1 on two GPUs planned gpu:2 as two NCCL ranks on GPU 1.
TEST(DeviceKinds, GpuNBeyondTheGpusListIsSkippedNotFilledWithRepeats) {
  FakeMachine m(4);
  m.flags.gpus = {2};
  const DeviceConfig three = m.plan("gpu:3");
  EXPECT_EQ(
      three.skip_reason,
      "gpu:3 with --gpus=2: --gpus names 1 device(s) for 3 replicas; list 3 distinct devices or leave --gpus out");
  EXPECT_EQ(m.plan("gpu:1").skip_reason, "");
  m.flags.gpus = {2, 0};
  EXPECT_EQ(m.plan("gpu:2").skip_reason, "");
  EXPECT_EQ(m.plan("gpu:2").gpu_ordinals, (std::vector<int>{2, 0}));
  EXPECT_EQ(m.plan("gpu:5").skip_reason, "gpu:5 needs 5 GPUs, this machine has 4") << "the machine's count first";
}

// A --gpus list that repeats some ordinals but not all is refused for every GPU entry, gpu:1
// included (it ran on the first entry), and for no CPU entry.
TEST(DeviceKinds, AGpusListNoGpuKindCanTakeIsRefusedForEveryGpuEntry) {
  FakeMachine m(2);
  m.flags.gpus = {0, 0, 1};
  for (const char* entry : {"gpu:1", "gpu:1/threads:2", "gpu:1/jobs:2", "gpu:all"})
    EXPECT_THROW(m.plan(entry), InputError) << entry;
  EXPECT_EQ(m.plan("cpu:1").skip_reason, "");
}

// Under mpirun -np M, mpi:N and gpu:N run where N is M: fewer are skipped, as more are.
TEST(DeviceKinds, UnderMpirunOnlyTheJobsRanksAreTheCount) {
  FakeMachine rank0(4, /*ranks=*/4, /*local_rank=*/0);
  EXPECT_EQ(rank0.plan("mpi:2").skip_reason, "mpi:2: this job has 4 ranks (mpi:4)");
  EXPECT_EQ(rank0.plan("mpi:4").skip_reason, "");
  EXPECT_EQ(rank0.plan("mpi:4").data_parallel, 4);
  EXPECT_EQ(rank0.plan("gpu:2").skip_reason,
            "gpu:2: under mpirun -np 4 the GPU configurations are gpu:1 (rank 0) and gpu:4 (one GPU per rank)");
  EXPECT_EQ(rank0.plan("gpu:4").skip_reason, "");
}

// gpu:all with jobs or threads is refused on every machine, as gpu:N with them is: where fewer than
// two GPUs were, it was taken as a skipped gpu:all row named gpu:all/jobs:2.
TEST(DeviceKinds, GpuAllWithJobsOrThreadsIsRefusedOnEveryMachine) {
  for (int gpus : {0, 1, 2}) {
    FakeMachine m(gpus);
    for (const std::string entry : {"gpu:all/jobs:2", "gpu:all/threads:2"}) {
      try {
        m.plan(entry);
        ADD_FAILURE() << entry << " was taken on a machine of " << gpus << " GPU(s)";
      } catch (const InputError& e) {
        EXPECT_EQ(std::string(e.what()).rfind("--devices: '" + entry + "': ", 0), 0u) << e.what();
      }
    }
  }
}

// What each kind plans is what its rows use: cpu all the cores, a GPU one host thread and the
// device --gpus names, a jobs row K jobs each running its one-device configuration.
TEST(DeviceKinds, EachKindPlansTheThreadsReplicasAndDevicesItsRowsUse) {
  FakeMachine m(2);  // 2 cores, GPUs 0 and 1
  EXPECT_EQ(m.plan("cpu").threads, 2);
  const DeviceConfig cpu_jobs = m.plan("cpu:1/jobs:2");
  EXPECT_EQ(cpu_jobs.threads, 1);
  EXPECT_EQ(cpu_jobs.replicas, 2);
  EXPECT_EQ(cpu_jobs.job_device, "cpu:1");
  const DeviceConfig gpu_jobs = m.plan("gpu:1/jobs:2");
  EXPECT_EQ(gpu_jobs.threads, 1);
  EXPECT_EQ(gpu_jobs.replicas, 2);
  EXPECT_EQ(gpu_jobs.job_device, "gpu:1");
  EXPECT_EQ(m.plan("gpu:2").threads, 1) << "the thread driving each GPU";
  m.flags.gpus = {1};
  const DeviceConfig one = m.plan("gpu:1");
  EXPECT_EQ(one.threads, 1);
  EXPECT_EQ(one.gpu_ordinal, 1) << "the device a jobs row's --gpus and the memory check name";
}

// Each reason names what is missing and, for jobs, the most that fit: a GPU kind on a machine
// without one says why there is none (not that it has 0 GPUs), as gpu:all does.
TEST(DeviceKinds, EachSkipReasonNamesWhatIsMissing) {
  FakeMachine none(0);  // 2 cores, no GPU
  EXPECT_EQ(none.plan("cpu:2/jobs:2").skip_reason,
            "cpu:2/jobs:2: 2 jobs of 2 thread(s) need 4 cores, this machine has 2: at most 1 such jobs");
  EXPECT_EQ(none.plan("cpu:3/jobs:1").skip_reason,
            "cpu:3/jobs:1: 1 jobs of 3 thread(s) need 3 cores, this machine has 2: one job of 3 threads does not fit");
  for (const char* entry : {"gpu:2", "gpu:1/threads:2", "gpu:1/jobs:2"})
    EXPECT_EQ(none.plan(entry).skip_reason, std::string(entry) + ": no CUDA device") << entry;
  const DeviceConfig all = none.plan("gpu:all");
  EXPECT_EQ(all.skip_reason, "gpu:all: no CUDA device");
  EXPECT_EQ(all.kind->name, std::string("gpu:N over NCCL"));
  EXPECT_EQ(all.threads, 1);
  EXPECT_EQ(none.plan("mpi:1").skip_reason,
            "mpi:1: one rank all-reduces with no one: mpi:N takes N >= 2 ranks (one process on the CPU is cpu or "
            "cpu:T)");
  FakeMachine two(2);
  two.flags.gpus = {0, 3};  // the highest ordinal is the one checked, wherever it is in the list
  EXPECT_EQ(two.plan("gpu:2").skip_reason,
            "gpu:2: CUDA device 3 (--gpus, or the rank's local index) does not exist; this machine has devices 0 to 1");
  FakeMachine shared(1);
  shared.flags.gpus = {0, 0};
  EXPECT_EQ(shared.plan("gpu:3").skip_reason,
            "gpu:3 with --gpus=0,0: give one entry per replica sharing device 0, e.g. --gpus=0,0,0");
}

// Under mpirun a rank's cores are those it is bound to, and a one-process kind the machine could
// not run anyway keeps its own reason; replicas sharing a GPU are refused (they need one process).
TEST(DeviceKinds, UnderMpirunTheReasonsSayWhatMpirunChanges) {
  FakeMachine rank0(1, /*ranks=*/2, /*local_rank=*/0);
  EXPECT_EQ(rank0.plan("cpu:3").skip_reason,
            "cpu:3 needs 3 cores, this machine has 2 (under mpirun, those its rank is bound to: --bind-to none)");
  EXPECT_EQ(rank0.plan("cpu:1/jobs:3").skip_reason,
            "cpu:1/jobs:3: 3 jobs of 1 thread(s) need 3 cores, this machine has 2: at most 2 such jobs");
  rank0.flags.gpus = {0, 0};
  try {
    rank0.plan("gpu:2");
    ADD_FAILURE() << "gpu:2 with --gpus=0,0 under mpirun was taken";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--gpus=0,0: replicas sharing one GPU run in one process", 0), 0u)
        << e.what();
  }
}

// Each refusal says what is wrong with the entry: its device, its count, what may follow the
// slash, or which kinds have jobs or threads.
TEST(DeviceKinds, EachRefusalSaysWhatIsWrongWithTheEntry) {
  FakeMachine m(1);
  const std::vector<std::pair<std::string, std::string>> cases{
      {"tpu:1", "--devices: unknown device 'tpu:1'"},
      {"cpu:99999999999", "--devices: 'cpu:99999999999': 99999999999 is more than any machine has"},
      {"gpu:1/jobs", "--devices: 'gpu:1/jobs': after the slash, jobs:K or threads:K"},
      {"gpu:2/jobs:2",
       "--devices: 'gpu:2/jobs:2': jobs are K processes on one GPU (gpu:1/jobs:K) or of T threads each on the CPU "
       "(cpu:T/jobs:K)"},
      {"cpu/jobs:2", "--devices: 'cpu/jobs:2': jobs are K processes on one GPU"},
      {"gpu:2/threads:2", "--devices: 'gpu:2/threads:2': threads share one GPU, e.g. gpu:1/threads:2"},
  };
  for (const auto& [entry, start] : cases) {
    try {
      m.plan(entry);
      ADD_FAILURE() << entry << " was taken";
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(start, 0), 0u) << e.what();
    }
  }
}

// The table's flags for each kind, which the harness asks instead of names: how it runs, on which
// backend, whether its replicas communicate, need mpirun, live in one process or share a device.
TEST(DeviceKinds, EachKindRunsCommunicatesAndSharesAsItsEntrySays) {
  std::vector<std::string> said;
  for (const DeviceKind& k : device_kinds())
    said.push_back(fmt::format(
        "{}: {} {}{}{}{}{}{}", k.name, run_kind_name(k.run), k.backend == Backend::Cpu ? "cpu" : "gpu",
        k.wiring ? " communicates" : "", k.across_ranks ? " across_ranks" : "", k.one_process ? " one_process" : "",
        k.shares_device ? " shares_device" : "", *k.check_word ? " " + std::string(k.check_word) : ""));
  EXPECT_EQ(said, (std::vector<std::string>{
                      "cpu: one_replica cpu",
                      "cpu:T: one_replica cpu",
                      "cpu:T/jobs:K: processes cpu one_process",
                      "gpu:1: one_replica gpu",
                      "gpu:N over NCCL: replicas gpu communicates one_process",
                      "gpu:N sharing one GPU: replicas gpu communicates one_process shares_device shared_device",
                      "gpu:N as emulated nodes: replicas gpu communicates across_ranks shares_device emulated_nodes",
                      "gpu:N across ranks: replicas gpu communicates across_ranks",
                      "gpu:1/threads:K: replicas gpu one_process shares_device",
                      "gpu:1/jobs:K: processes gpu one_process shares_device",
                      "mpi:N: replicas cpu communicates across_ranks",
                  }));
}

// ---- baselines (plan/baselines.cpp) ----

// A planned train/ row of ResNet-152 on ImageNet on `device` of kind `kind`.
BenchInfo planned(const std::string& device, const char* kind, const std::string& precision, i64 batch, int threads = 1,
                  int data_parallel = 0, const std::string& variant = "") {
  BenchInfo b;
  b.kind = Kind::Train;
  b.model = "resnet152";
  b.dataset = "imagenet";
  b.device = device;
  b.device_kind = &kind_named(kind);
  b.backend = b.device_kind->backend;
  b.precision = precision;
  b.batch = batch;
  b.threads = threads;
  b.data_parallel = data_parallel;
  b.variant = variant;
  b.name = fmt::format("train/resnet152/imagenet/{}/{}/bs:{}{}", device, precision, batch,
                       variant.empty() ? "" : "/" + variant);
  return b;
}

const BenchInfo& named(const std::vector<BenchInfo>& all, const std::string& device, const std::string& precision) {
  for (const BenchInfo& b : all)
    if (b.device == device && b.precision == precision) return b;
  throw Error(fmt::format("no {} {} row", device, precision));
}

// One rule says what each row is over: gpu:N over gpu:1 of its precision and batch, mpi:N over
// cpu:T of its ranks' threads (not cpu, all cores: the old rule keyed rows by backend and blended
// the two), every row but cpu itself over the cpu row for x cpu, with what differs said.
TEST(Baselines, EachRowIsComparedWithTheRowItsRuleNames) {
  std::vector<BenchInfo> all{planned("gpu:2", "gpu:N over NCCL", "bf16", 128, 1, 2),
                             planned("gpu:1", "gpu:1", "bf16", 128),
                             planned("gpu:1", "gpu:1", "fp32", 128),
                             planned("mpi:2", "mpi:N", "fp32", 8, 1, 2),
                             planned("cpu:1", "cpu:T", "fp32", 8),
                             planned("cpu", "cpu", "fp32", 8, 2)};
  pair_baselines(all);
  // Baselines run first: cpu, then the one-device rows, then the rest, each group as planned.
  std::vector<std::string> order;
  for (const BenchInfo& b : all) order.push_back(b.device + "/" + b.precision);
  EXPECT_EQ(order, (std::vector<std::string>{"cpu/fp32", "gpu:1/bf16", "gpu:1/fp32", "cpu:1/fp32", "gpu:2/bf16",
                                             "mpi:2/fp32"}));
  EXPECT_EQ(named(all, "gpu:2", "bf16").baseline, "train/resnet152/imagenet/gpu:1/bf16/bs:128");
  EXPECT_EQ(named(all, "mpi:2", "fp32").baseline, "train/resnet152/imagenet/cpu:1/fp32/bs:8");
  EXPECT_EQ(named(all, "gpu:1", "bf16").cpu_baseline, "train/resnet152/imagenet/cpu/fp32/bs:8");
  EXPECT_EQ(named(all, "gpu:1", "bf16").speedup_differs, "bf16 vs fp32, bs 128 vs 8");
  EXPECT_EQ(named(all, "gpu:1", "fp32").speedup_differs, "bs 128 vs 8");
  EXPECT_EQ(named(all, "cpu:1", "fp32").speedup_differs, "");
  EXPECT_EQ(named(all, "cpu:1", "fp32").cpu_baseline, "train/resnet152/imagenet/cpu/fp32/bs:8");
  EXPECT_EQ(named(all, "gpu:1", "bf16").fp32_row, "train/resnet152/imagenet/gpu:1/fp32/bs:128");
  EXPECT_EQ(named(all, "cpu", "fp32").cpu_baseline, "") << "the cpu row is no speed-up over itself";
  EXPECT_EQ(named(all, "gpu:1", "bf16").baseline, "") << "one device has no scaling baseline";
}

TEST(Baselines, RowsThatCheckAPathAreComparedWithNothing) {
  std::vector<BenchInfo> all{planned("cpu", "cpu", "fp32", 8, 2), planned("gpu:1", "gpu:1", "fp32", 8),
                             planned("gpu:2", "gpu:N sharing one GPU", "fp32", 8, 1, 0, "shared_device")};
  pair_baselines(all);
  const BenchInfo& shared = named(all, "gpu:2", "fp32");
  EXPECT_TRUE(shared.checks_only());
  EXPECT_EQ(shared.baseline, "");
  EXPECT_EQ(shared.cpu_baseline, "");
}

TEST(Baselines, AVariantPairsOnlyWithItsOwnVariant) {
  std::vector<BenchInfo> all{planned("cpu", "cpu", "fp32", 8, 2, 0, "optimizer:sgd"),
                             planned("cpu", "cpu", "fp32", 8, 2),
                             planned("gpu:1", "gpu:1", "fp32", 8, 1, 0, "optimizer:sgd/cuda_graph")};
  pair_baselines(all);
  // The GPU-only flag is not the CPU's to have; the optimizer is part of what is compared.
  EXPECT_EQ(named(all, "gpu:1", "fp32").cpu_baseline, "train/resnet152/imagenet/cpu/fp32/bs:8/optimizer:sgd");
}

// Under --data_on_device the cpu row carries the flag too: every row is still over it (the rule
// took the cpu row's variant whole, and every cpu_baseline was empty under the flag), and where
// both cpu rows are there, over the one of its own variant.
TEST(Baselines, RowsOnResidentDataPairWithTheCpuRowOfTheirVariant) {
  std::vector<BenchInfo> resident{planned("cpu", "cpu", "fp32", 8, 2, 0, "data_on_device"),
                                  planned("cpu:1", "cpu:T", "fp32", 8, 1, 0, "data_on_device")};
  pair_baselines(resident);
  EXPECT_EQ(named(resident, "cpu:1", "fp32").cpu_baseline, "train/resnet152/imagenet/cpu/fp32/bs:8/data_on_device");
  std::vector<BenchInfo> both{planned("cpu", "cpu", "fp32", 8, 2),
                              planned("cpu", "cpu", "fp32", 8, 2, 0, "data_on_device"),
                              planned("gpu:1", "gpu:1", "fp32", 8, 1, 0, "data_on_device")};
  pair_baselines(both);
  EXPECT_EQ(named(both, "gpu:1", "fp32").cpu_baseline, "train/resnet152/imagenet/cpu/fp32/bs:8/data_on_device");
}

// `b` as the same row of the epochs/ benchmark.
BenchInfo as_epochs(BenchInfo b) {
  b.kind = Kind::Epochs;
  b.name = "epochs/" + b.name.substr(b.name.find('/') + 1);
  return b;
}

const BenchInfo& by_name(const std::vector<BenchInfo>& all, const std::string& name) {
  for (const BenchInfo& b : all)
    if (b.name == name) return b;
  throw Error(fmt::format("no row {}", name));
}

// Baselines run first within each workload, never across: the epochs/ rows keep their place after
// the train/ rows, and no epochs/ row has a speed-up over the CPU (one replica, whole epochs).
TEST(Baselines, RowsAreOrderedAndComparedWithinTheirWorkloadOnly) {
  std::vector<BenchInfo> all{planned("gpu:1", "gpu:1", "fp32", 8), planned("cpu", "cpu", "fp32", 8, 2),
                             as_epochs(planned("gpu:1", "gpu:1", "fp32", 8)),
                             as_epochs(planned("cpu", "cpu", "fp32", 8, 2))};
  pair_baselines(all);
  std::vector<std::string> order;
  for (const BenchInfo& b : all) order.push_back(b.name);
  EXPECT_EQ(order, (std::vector<std::string>{
                       "train/resnet152/imagenet/cpu/fp32/bs:8", "train/resnet152/imagenet/gpu:1/fp32/bs:8",
                       "epochs/resnet152/imagenet/cpu/fp32/bs:8", "epochs/resnet152/imagenet/gpu:1/fp32/bs:8"}));
  EXPECT_EQ(all[1].cpu_baseline, "train/resnet152/imagenet/cpu/fp32/bs:8");
  EXPECT_EQ(all[3].cpu_baseline, "");
}

// A scaling row is over the one-device row of its own batch, without the nodes its ranks ran on;
// a precision's fp32 row is the one of its batch too.
TEST(Baselines, ScalingAndFp32RowsAreOfTheRowsOwnBatch) {
  std::vector<BenchInfo> all{
      planned("cpu", "cpu", "fp32", 8, 2),    planned("cpu:1", "cpu:T", "fp32", 4),
      planned("cpu:1", "cpu:T", "fp32", 8),   planned("mpi:2", "mpi:N", "fp32", 8, 1, 2, "nodes:2"),
      planned("gpu:1", "gpu:1", "fp32", 128), planned("gpu:1", "gpu:1", "fp32", 64),
      planned("gpu:1", "gpu:1", "bf16", 128)};
  pair_baselines(all);
  const BenchInfo& mpi = by_name(all, "train/resnet152/imagenet/mpi:2/fp32/bs:8/nodes:2");
  EXPECT_EQ(mpi.baseline, "train/resnet152/imagenet/cpu:1/fp32/bs:8");
  EXPECT_EQ(mpi.cpu_baseline, "train/resnet152/imagenet/cpu/fp32/bs:8");
  EXPECT_EQ(by_name(all, "train/resnet152/imagenet/gpu:1/bf16/bs:128").fp32_row,
            "train/resnet152/imagenet/gpu:1/fp32/bs:128");
}

// The cpu row compared with is one that runs, of the row's own variant before its own batch; a CPU
// row has no fp32 row (its other precisions are skipped, not run in another precision).
TEST(Baselines, TheCpuRowIsOneThatRunsOfTheRowsVariantFirst) {
  BenchInfo skipped = planned("cpu", "cpu", "fp32", 8, 2);
  skipped.skip_reason = "cpu: skipped";
  std::vector<BenchInfo> none{skipped, planned("gpu:1", "gpu:1", "fp32", 8)};
  pair_baselines(none);
  EXPECT_EQ(named(none, "gpu:1", "fp32").cpu_baseline, "");
  std::vector<BenchInfo> two{planned("cpu", "cpu", "fp32", 16, 2, 0, "data_on_device"),
                             planned("cpu", "cpu", "fp32", 8, 2),
                             planned("gpu:1", "gpu:1", "fp32", 8, 1, 0, "data_on_device")};
  pair_baselines(two);
  EXPECT_EQ(named(two, "gpu:1", "fp32").cpu_baseline, "train/resnet152/imagenet/cpu/fp32/bs:16/data_on_device");
  BenchInfo cpu_bf16 = planned("cpu", "cpu", "bf16", 8, 2);
  cpu_bf16.skip_reason = "the CPU backend trains in fp32 only, not bf16";
  std::vector<BenchInfo> cpu{planned("cpu", "cpu", "fp32", 8, 2), cpu_bf16};
  pair_baselines(cpu);
  EXPECT_EQ(named(cpu, "cpu", "bf16").fp32_row, "");
}

// ---- the variant's table ----

TEST(Variant, ItemsGoInTheTablesOrderEachOnce) {
  EXPECT_EQ(join_variant({"predicted:pcie5", "timeline:off", "optimizer:sgd", "nodes:2", "emulated_nodes"}),
            "optimizer:sgd/emulated_nodes/nodes:2/timeline:off/predicted:pcie5");
  EXPECT_EQ(join_variant({"from:gpu:1", "network:100gbe", "predicted:nvlink4", "nodes:4"}),
            "nodes:4/predicted:nvlink4/network:100gbe/from:gpu:1");
  EXPECT_EQ(join_variant({}), "");
  EXPECT_THROW(join_variant({"colour:blue"}), Error) << "a flag the table lacks is a misspelling";
  std::set<std::string> names;
  for (const VariantFlag& f : variant_flags()) EXPECT_TRUE(names.insert(f.name).second) << f.name;
}

// variant_of writes every flag it knows in the table's order.
TEST(Variant, EveryFlagOfARowIsInTheTable) {
  BenchInfo b = planned("gpu:1", "gpu:1", "fp32", 8);
  b.optimizer.kind = OptimizerConfig::Kind::SGD;
  b.optimizer.lr = 0.5;
  b.data_on_device = b.cuda_graph = true;
  b.gpu_memory_limit = 0.5;
  b.gpu_layout = "nhwc";
  b.loader.workers = 2;
  b.loader.prefetch = 4;
  b.loader.augment = true;
  b.timeline = false;
  OptimizerConfig adam;
  adam.kind = OptimizerConfig::Kind::Adam;
  adam.lr = 0.001;
  EXPECT_EQ(variant_of(b, adam),
            "optimizer:sgd/lr:0.5/data_on_device/cuda_graph/gpu_memory_limit:0.5/gpu_layout:nhwc/loader_workers:2/"
            "prefetch:4/augment/timeline:off");
}

// An item named twice is written once; prefetch is named only where it differs from its default
// (2) under loader workers.
TEST(Variant, AnItemTwiceIsWrittenOnceAndTheDefaultPrefetchIsNone) {
  EXPECT_EQ(join_variant({"augment", "optimizer:sgd", "augment"}), "optimizer:sgd/augment");
  EXPECT_EQ(join_variant({"nodes:2", "nodes:2"}), "nodes:2");
  BenchInfo b = planned("cpu", "cpu", "fp32", 8, 2);
  b.loader.workers = 2;
  b.loader.prefetch = 2;
  EXPECT_EQ(variant_of(b, b.optimizer), "loader_workers:2");
  b.loader.workers = 0;
  b.loader.prefetch = 4;
  EXPECT_EQ(variant_of(b, b.optimizer), "") << "prefetch means nothing without workers";
}

// ---- the plan ----

// Batch 1 under batch norm is said in every row of it (PyTorch refuses a channel of one value).
TEST(Plan, BatchOneUnderBatchNormIsNoted) {
  Flags flags;
  flags.devices = {"cpu:1"};
  flags.batch = 1;
  const std::vector<BenchInfo> all = plan_benchmarks(flags, 2);
  bool resnet = false;
  for (const BenchInfo& b : all) {
    if (b.model == "resnet152" && b.skip_reason.empty()) {
      resnet = true;
      EXPECT_NE(b.plan_note.find("batch 1 under batch norm"), std::string::npos) << b.name;
      // Values per channel: the batch times the smallest map normalised, ImageNet's 7 x 7 and
      // CIFAR-10's 1 x 1 at the last stage.
      if (b.dataset == "imagenet" || b.dataset == "cifar10") {
        EXPECT_NE(b.plan_note.find(fmt::format("as few as {} value(s) per channel", b.dataset == "imagenet" ? 49 : 1)),
                  std::string::npos)
            << b.plan_note;
      }
    }
    if (b.model == "mlp") {
      EXPECT_EQ(b.plan_note, "") << b.name;
    }
  }
  EXPECT_TRUE(resnet);
  flags.batch = 2;
  for (const BenchInfo& b : plan_benchmarks(flags, 2)) EXPECT_EQ(b.plan_note, "") << b.name;
}

// The default devices: cpu, then cpu:1 where the machine has more than one core (on one core, cpu
// is cpu:1 under another name), then gpu:1.
TEST(Plan, TheDefaultDevicesNameCpu1BesideCpuOnlyOnSeveralCores) {
  const auto first = [](int cores, std::size_t n) {
    const std::vector<DeviceConfig> devices = device_configs(Flags{}, cores);
    std::vector<std::string> names;
    for (std::size_t k = 0; k < std::min(n, devices.size()); ++k) names.push_back(devices[k].name);
    return names;
  };
  EXPECT_EQ(first(1, 2), (std::vector<std::string>{"cpu", "gpu:1"}));
  EXPECT_EQ(first(4, 3), (std::vector<std::string>{"cpu", "cpu:1", "gpu:1"}));
}

// Jobs are separate one-device runs: each keeps --data_on_device, where replicas stepped together
// (mpi:N) run without it, and their rows say so in the variant.
TEST(Plan, JobsKeepTheOneDeviceFlagsThatReplicasRunWithout) {
  Flags flags;
  flags.devices = {"cpu:1", "cpu:1/jobs:2", "mpi:2"};
  flags.data_on_device = true;
  int rows = 0;
  for (const BenchInfo& b : plan_benchmarks(flags, 2)) {
    if (b.kind != Kind::Train) continue;
    ++rows;
    const bool replicas = b.device == "mpi:2";
    EXPECT_EQ(b.data_on_device, !replicas) << b.name;
    EXPECT_EQ(b.variant.find("data_on_device") != std::string::npos, !replicas) << b.name;
  }
  EXPECT_GE(rows, 3);
}

// A CUDA graph cannot hold the all-reduces' hook: gpu:N's replicas run without --cuda_graph and
// their rows say so, where gpu:1's take it (planned the same where no GPU is, as skipped rows).
TEST(Plan, ACudaGraphIsOneDevicesAndNoReplicasRow) {
  Flags flags;
  flags.devices = {"gpu:1", "gpu:2"};
  flags.cuda_graph = true;
  int rows = 0;
  for (const BenchInfo& b : plan_benchmarks(flags, 2)) {
    if (b.kind != Kind::Train) continue;
    ++rows;
    const bool replicas = b.device == "gpu:2";
    EXPECT_EQ(b.cuda_graph, !replicas) << b.name;
    EXPECT_EQ(b.variant, replicas ? "" : "cuda_graph") << b.name;
  }
  EXPECT_GE(rows, 2);
}

// A regression's epochs run (they have a loss to report); only with --target_accuracy, which they
// cannot reach, are they skipped saying why.
TEST(Plan, ARegressionsEpochsAreSkippedOnlyForATargetAccuracy) {
  Flags flags;
  flags.devices = {"cpu:1"};
  const auto lstm_epochs = [&] {
    for (const BenchInfo& b : plan_benchmarks(flags, 2))
      if (b.kind == Kind::Epochs && b.model == "lstm") return b;
    throw Error("no epochs/lstm row");
  };
  EXPECT_EQ(lstm_epochs().skip_reason, "");
  flags.target_accuracy = 0.5;
  EXPECT_NE(lstm_epochs().skip_reason.find("is a regression, with no accuracy to reach"), std::string::npos);
}

// Two entries that come to one row's name are refused before anything runs: they were pooled as
// repetitions of one row.
TEST(Plan, TwoConfigurationsOfOneNameAreRefused) {
  Flags flags;
  flags.devices = {"cpu:1", "cpu:1"};
  try {
    plan_benchmarks(flags, 2);
    ADD_FAILURE() << "cpu:1 twice was planned";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("two of its configurations are both train/"), std::string::npos) << e.what();
  }
}

// The flags that shape a row are every planned row's own: the seed, the epochs and their target,
// the warm-up (train/ rows only: epochs/ rows train from scratch), augmentation (CIFAR-10's
// only), --optimizer with its default learning rate and --lr over any.
TEST(Plan, EveryRowTakesTheFlagsThatShapeIt) {
  Flags flags;
  flags.devices = {"cpu:1"};
  flags.seed = 9;
  flags.epochs = 3;
  flags.target_accuracy = 0.5;
  flags.warmup_steps = 4;
  flags.augment = true;
  flags.optimizer = "adam";
  const std::vector<BenchInfo> all = plan_benchmarks(flags, 2);
  ASSERT_FALSE(all.empty());
  for (const BenchInfo& b : all) {
    EXPECT_EQ(b.seed, 9u) << b.name;
    EXPECT_EQ(b.loader.seed, 9u) << b.name;
    EXPECT_EQ(b.epochs, 3) << b.name;
    EXPECT_EQ(b.target_accuracy, 0.5) << b.name;
    EXPECT_EQ(b.warmup_steps, b.kind == Kind::Train ? 4 : 0) << b.name;
    EXPECT_EQ(b.loader.augment, b.dataset == "cifar10") << b.name;
    EXPECT_EQ(b.optimizer.kind, OptimizerConfig::Kind::Adam) << b.name;
    EXPECT_EQ(b.optimizer.lr, 1e-3) << b.name << ": Adam's default learning rate";
    if (b.model == "lstm") {
      EXPECT_EQ(b.data_source, "generated") << b.name << ": a regression's data is made, never synthetic";
    }
  }
  flags.optimizer = "sgd";
  for (const BenchInfo& b : plan_benchmarks(flags, 2)) EXPECT_EQ(b.optimizer.lr, 0.01) << b.name;
  flags.lr = 0.5;
  for (const BenchInfo& b : plan_benchmarks(flags, 2)) EXPECT_EQ(b.optimizer.lr, 0.5) << b.name;
}

// A batch the flag sets keeps the workload's own learning rate for that batch (ResNet's scales
// with it): no variant; the GPU's flags are no CPU row's variant.
TEST(Plan, ACpuRowsVariantIsEmptyUnderTheBatchAndTheGpusFlags) {
  Flags flags;
  flags.devices = {"cpu", "cpu:1"};
  flags.batch = 7;
  flags.cuda_graph = true;
  flags.gpu_layout = "nhwc";
  flags.gpu_memory_limit = 0.5;
  const std::vector<BenchInfo> all = plan_benchmarks(flags, 2);
  bool resnet = false;
  for (const BenchInfo& b : all) {
    resnet = resnet || b.model == "resnet152";
    EXPECT_EQ(b.variant, "") << b.name;
    if (b.kind == Kind::Train && b.device == "cpu:1") {
      EXPECT_EQ(b.cpu_baseline, fmt::format("train/{}/{}/cpu/fp32/bs:7", b.model, b.dataset)) << b.name;
    }
  }
  EXPECT_TRUE(resnet);
}

// epochs/ rows train one replica: on jobs they are skipped saying so, and the resident dataset
// (train/ rows only) is not in their variant.
TEST(Plan, EpochsRowsAreOneReplicasWithoutTheResidentDataset) {
  Flags flags;
  flags.devices = {"cpu:1", "cpu:1/jobs:2"};
  flags.data_on_device = true;
  int epochs = 0;
  for (const BenchInfo& b : plan_benchmarks(flags, 2)) {
    if (b.kind != Kind::Epochs) continue;
    ++epochs;
    EXPECT_EQ(b.variant.find("data_on_device"), std::string::npos) << b.name;
    EXPECT_EQ(b.skip_reason, b.device == "cpu:1" ? ""
                                                 : "cpu:1/jobs:2: epochs/ rows train one replica; train/ rows measure "
                                                   "cpu:1/jobs:2")
        << b.name;
  }
  EXPECT_GE(epochs, 2);
}

// A precision is planned once however it is named (fastest is fp32 on the CPU); one the CPU cannot
// run is skipped saying so, after what the device lacks; a skipped row has no batch norm note.
TEST(Plan, PrecisionsAreOnceEachAndSkippedAfterTheDevice) {
  Flags flags;
  flags.devices = {"cpu:1", "cpu:3"};
  flags.precisions = {"fp32", "fastest", "fp16"};
  flags.batch = 1;
  for (const BenchInfo& b : plan_benchmarks(flags, 2)) {
    EXPECT_NE(b.precision, "fastest") << b.name;
    if (b.device == "cpu:3") {
      EXPECT_EQ(b.skip_reason, "cpu:3 needs 3 cores, this machine has 2") << b.name;
    } else if (b.precision == "fp16") {
      EXPECT_EQ(b.skip_reason, "the CPU backend trains in fp32 only, not fp16") << b.name;
    }
    if (!b.skip_reason.empty()) {
      EXPECT_EQ(b.plan_note, "") << b.name;
    }
  }
  // A GPU configuration that cannot run is one skipped row per workload, not one per precision.
  DeviceConfig no_gpu;
  no_gpu.name = "gpu:1";
  no_gpu.kind = &kind_named("gpu:1");
  no_gpu.skip_reason = "gpu:1: no CUDA device";
  EXPECT_EQ(device_precisions(Flags{}, no_gpu), (std::vector<std::pair<std::string, std::string>>{{"fp32", ""}}));
  // fastest asks the device what it runs; one that cannot run is asked nothing, and its one row is fp32.
  Flags fastest;
  fastest.precisions = {"fastest"};
  EXPECT_EQ(device_precisions(fastest, no_gpu), (std::vector<std::pair<std::string, std::string>>{{"fp32", ""}}));
}

// A data folder named by --data_dir or TB_DATA_DIR must be one (an empty TB_DATA_DIR names none);
// a workload of real data only is not planned where the folder lacks its dataset.
TEST(Plan, ANamedDataFolderMustBeOneAndRealDataOnlyWorkloadsNeedTheirs) {
  Flags flags;
  flags.devices = {"cpu:1"};
  const auto refusal = [&] {
    try {
      plan_benchmarks(flags, 2);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("planned");
  };
  flags.data_dir = "/no/such/folder";
  EXPECT_EQ(refusal().rfind("--data_dir=/no/such/folder: no such folder (leave it out", 0), 0u) << refusal();
  flags.data_dir = TB_SOURCE_DIR "/CMakeLists.txt";
  EXPECT_EQ(refusal(), "--data_dir=" TB_SOURCE_DIR "/CMakeLists.txt: is not a folder");
  std::string empty = (std::filesystem::temp_directory_path() / "tb-plan-XXXXXX").string();
  ASSERT_NE(mkdtemp(empty.data()), nullptr);
  flags.data_dir = empty;
  const std::vector<BenchInfo> all = plan_benchmarks(flags, 2);
  for (const models::Workload& w : models::workloads()) {
    if (!w.real_data_only) continue;
    // Fashion-MNIST is also found where Debian installed it, outside the folder.
    const bool found = !data::find_dataset(w.dataset, empty).empty();
    const bool planned =
        std::any_of(all.begin(), all.end(), [&](const BenchInfo& b) { return b.dataset == w.dataset; });
    EXPECT_EQ(planned, found) << w.model << "/" << w.dataset;
  }
  std::filesystem::remove(empty);
  flags.data_dir = "";
  const char* before = std::getenv("TB_DATA_DIR");
  const std::string kept = before ? before : "";
  setenv("TB_DATA_DIR", "", 1);
  EXPECT_NO_THROW(plan_benchmarks(flags, 2)) << "an empty TB_DATA_DIR is the default folder, which may be absent";
  if (before)
    setenv("TB_DATA_DIR", kept.c_str(), 1);
  else
    unsetenv("TB_DATA_DIR");
}

}  // namespace
}  // namespace tb::bench
