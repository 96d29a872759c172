// The trainbench binary's own logic, without running a benchmark: the device kinds, the window
// jobs are timed on.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "bench/output/columns.hpp"
#include "bench/output/summary.hpp"
#include "bench/plan/device_kinds.hpp"
#include "bench/run/jobs.hpp"
#include "engine/core/error.hpp"

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
  JobSteps none;
  EXPECT_THROW(common_window({first, none}), Error);
}

// ---- counters ----

// A counter whose name is no column would vanish from every row: it is an error where it is
// written, naming it.
TEST(Counters, OneThatIsNoColumnStopsTheRowNamingIt) {
  EXPECT_EQ(counter_cells({{"samples_per_s", 1234.5}}, false).at("samples_per_s"), "1234.5");
  try {
    counter_cells({{"samples_per_sec", 1}}, false);
    ADD_FAILURE() << "a misspelt counter was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("counter 'samples_per_sec'"), std::string::npos);
  }
  EXPECT_THROW(counter_cells({{"benchmark", 1}}, false), Error);  // an identity column is no counter
  // A bit mask means nothing averaged: aggregate rows leave it out.
  EXPECT_EQ(counter_cells({{"gpu_throttle", 4}}, true).count("gpu_throttle"), 0u);
}

// ---- the summary ----

Row summary_row(const std::string& device, const std::string& precision, const std::string& batch, double rate) {
  return Row{{"kind", "train"},          {"status", "ok"},        {"run_type", "iteration"},
             {"model", "resnet152"},     {"dataset", "imagenet"}, {"device", device},
             {"precision", precision},   {"batch", batch},        {"samples_per_s", fmt::format("{}", rate)},
             {"measurement", "measured"}};
}

// x cpu pairs a GPU row with the cpu row of its precision where there is one, else fp32, and says
// what differs (the report draws the same pairs: tests/scripts/test_speedup_pairs.py).
TEST(Summary, XCpuSaysWhatDiffersBetweenThePair) {
  const std::vector<Row> rows{summary_row("cpu", "fp32", "8", 12), summary_row("gpu:1", "fp32", "128", 396),
                              summary_row("gpu:1", "bf16", "128", 2244)};
  const std::string text = summary_table(rows, false);
  EXPECT_NE(text.find("33.00x (bs 128 vs 8)"), std::string::npos) << text;
  EXPECT_NE(text.find("187.00x (bf16 vs fp32, bs 128 vs 8)"), std::string::npos) << text;
  // A pair of the same precision and batch says nothing more.
  const std::string same =
      summary_table({summary_row("cpu", "fp32", "128", 10), summary_row("gpu:1", "fp32", "128", 50)}, false);
  EXPECT_NE(same.find("5.00x "), std::string::npos) << same;
  EXPECT_EQ(same.find(" vs "), std::string::npos) << same;
}

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
  EXPECT_TRUE(d.shared_device && d.kind->shares_device);
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

}  // namespace
}  // namespace tb::bench
