// The prediction stage (bench/predict/): the prediction_inputs column, predicted rows made from a
// one-device row's CSV rows, and the policy: what is predicted, and the verdict of a measured row
// against its prediction; and predict/after_run, --predict_from and --predict_allreduce.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "bench/output/csv.hpp"
#include "bench/output/rows.hpp"
#include "bench/plan/device_kinds.hpp"
#include "bench/predict/after_run.hpp"
#include "bench/predict/inputs.hpp"
#include "bench/predict/predict.hpp"
#include "bench/predict/replays.hpp"
#include "bench/schema/columns.hpp"
#include "engine/core/error.hpp"
#include "engine/core/stats.hpp"
#include "engine/parallel/world.hpp"

namespace tb::bench {
namespace {

// A one-device step of 10 ms: two buckets ready at 6 and 9 ms, 100 step times from 9 to 11.9 ms,
// an overhead of 0.1 ms (0.05 to 0.2).
parallel::OneDevice measured_step() {
  parallel::OneDevice one;
  one.timeline.bucket_bytes = {4e6, 1e6};
  one.timeline.bucket_ready_s = {0.006, 0.009};
  one.timeline.backward_end_s = 0.009;
  one.timeline.step_end_s = 0.010;
  one.timeline.steps = 100;
  for (int k = 0; k < 100; ++k) one.step_times.push_back(0.009 + 0.00003 * k);
  one.dp_overhead = {1e-4, 5e-5, 2e-4};
  one.dp_overhead_source = "measured";
  return one;
}

TEST(PredictionInputs, RoundTripTheTimelineQuantilesAndProbes) {
  const parallel::OneDevice one = measured_step();
  const std::string text = format_prediction_inputs(one, 2, 1);
  EXPECT_EQ(text.rfind("v1;buckets=4000000@0.006,1000000@0.009;", 0), 0u) << text;
  const PredictionInputs back = parse_prediction_inputs(text);
  EXPECT_EQ(back.one.timeline.bucket_bytes, one.timeline.bucket_bytes);
  EXPECT_EQ(back.one.timeline.bucket_ready_s, one.timeline.bucket_ready_s);
  EXPECT_EQ(back.one.timeline.steps, 100);
  ASSERT_EQ(back.one.step_times.size(), std::size_t(kStepQuantiles));
  EXPECT_DOUBLE_EQ(back.one.step_times.front(), 0.009);
  EXPECT_DOUBLE_EQ(back.one.step_times.back(), 0.009 + 0.00003 * 99);
  // The quantiles keep what the model takes of the steps: their median and spread.
  EXPECT_NEAR(tb::median(back.one.step_times), tb::median(one.step_times), 2e-5);
  EXPECT_NEAR(relative_spread(back.one.step_times), relative_spread(one.step_times), 0.01);
  EXPECT_DOUBLE_EQ(back.one.dp_overhead.high, 2e-4);
  EXPECT_EQ(back.sharing_ranks, 2);
  EXPECT_DOUBLE_EQ(back.one.sharing.value, 1);
}

// `good` with its first `from` replaced by `to` (`from` must be there).
std::string edited(std::string good, const std::string& from, const std::string& to) {
  const std::size_t at = good.find(from);
  EXPECT_NE(at, std::string::npos) << from << " in " << good;
  return at == std::string::npos ? good : good.replace(at, from.size(), to);
}

// Each text is refused by parse_prediction_inputs with an error that says the given words.
void expect_refused(const std::vector<std::pair<std::string, std::string>>& cases) {
  for (const auto& [text, says] : cases) {
    try {
      parse_prediction_inputs(text);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  }
}

TEST(PredictionInputs, BrokenTextIsRefusedSayingWhat) {
  for (const char* bad : {"", "v2;buckets=", "v1;buckets=1@2",
                          "v1;buckets=x@1;backward_end=0;step_end=0;"
                          "timeline_steps=1;steps=1",
                          "v1;buckets=1@0.1;backward_end=0;step_end=0;timeline_steps=1;steps=1;dp=1,2"})
    EXPECT_THROW(parse_prediction_inputs(bad), InputError) << bad;
}

// Well-formed text whose values no run writes (an edited or damaged cell) is refused, naming the
// field: before, a negative overhead predicted negative samples/s, an overhead outside its band an
// inverted band, timeline_steps=0 nothing at all, a field given twice took its last value, and
// a misspelt field was ignored. A band of four figures is not VALUE,LOW,HIGH.
TEST(PredictionInputs, ValuesNoRunWritesAreRefusedSayingWhich) {
  const std::string good = format_prediction_inputs(measured_step(), 2, 1);
  EXPECT_NO_THROW(parse_prediction_inputs(good));
  const auto with = [&](const std::string& from, const std::string& to) { return edited(good, from, to); };
  expect_refused({
      {with("dp=0.0001,5e-05,0.0002", "dp=-0.01,-0.01,-0.01"), "dp=-0.01,-0.01,-0.01 is not VALUE,LOW,HIGH"},
      {with("dp=0.0001,5e-05,0.0002", "dp=0.0001,0.001,5e-05"), "dp=0.0001,0.001,5e-05"},
      {with("sharing=1,1,1", "sharing=0,0,0"), "sharing=0,0,0"},
      {with("4000000@0.006", "-4000000@0.006"), "bucket 0 has -4000000 bytes"},
      {with("1000000@0.009", "1000000@0.003"), "bucket 1 is ready at 0.003 s"},
      {with("backward_end=0.009", "backward_end=0.008"), "are not in order"},
      {with("timeline_steps=100", "timeline_steps=0"), "timeline_steps=0"},
      {with("sharing_ranks=2", "sharing_ranks=1"), "sharing_ranks=1"},
      {with("sharing_ranks=2", "sharing_ranks=0"), "sharing_ranks=0 and sharing_hosts=1"},
      {good + ";dp=0,0,0", "dp= is given twice"},
      {with("dp=", "dq="), "dq= is no field of version 1"},
      {with("timeline_steps=100", "timeline_steps=1e30"), "timeline_steps: '1e30' is not a count"},
      {with("sharing_ranks=2", "sharing_ranks=2.5"), "sharing_ranks: '2.5' is not a count"},
      {with(";sharing_hosts=1", ""), "sharing=, sharing_ranks= and sharing_hosts= come together"},
      {with("dp=0.0001,5e-05,0.0002", "dp=0.0001,5e-05,0.0002,0.0003"),
       "dp needs VALUE,LOW,HIGH, has '0.0001,5e-05,0.0002,0.0003'"},
  });
}

// Values a run can write are taken: two buckets ready at one time (marks read back with the
// device clock's resolution), backward ending with the step, an overhead measured as low as 0;
// and those next to them that no run writes are refused, naming them: a point above its band's
// high end, or below its low end.
TEST(PredictionInputs, TheEdgesARunCanWriteAreTakenAndThoseBesideThemRefused) {
  const std::string good = format_prediction_inputs(measured_step(), 2, 1);
  const auto with = [&](const std::string& from, const std::string& to) { return edited(good, from, to); };
  for (const std::string& text :
       {with("1000000@0.009", "1000000@0.006"), with("step_end=0.01", "step_end=0.009"),
        with("dp=0.0001,5e-05,0.0002", "dp=0,0,0.0002"), with("sharing_hosts=1", "sharing_hosts=2")})
    EXPECT_NO_THROW(parse_prediction_inputs(text)) << text;
  expect_refused({
      {with("steps=0.009,", "steps=0,"), "a step time of 0 s"},
      {with("dp=0.0001,5e-05,0.0002", "dp=0.0003,5e-05,0.0002"), "dp=0.0003,5e-05,0.0002 is not VALUE,LOW,HIGH"},
      {with("dp=0.0001,5e-05,0.0002", "dp=0.0001,0.00015,0.0002"), "dp=0.0001,0.00015,0.0002 is not VALUE,LOW,HIGH"},
      {with("sharing=1,1,1", "sharing=1.5,1,1.2"), "sharing=1.5,1,1.2"},
      {with("sharing_hosts=1", "sharing_hosts=0"), "sharing_hosts=0"},
      {with("backward_end=0.009", "backward_end=0.009x"), "backward_end: '0.009x' is not a number"},
      {with(";backward_end", ",;backward_end"), "bucket '' is not BYTES@READY_S"},
      {with(";dp=", ",;dp="), "steps: '' is not a number"},
  });
}

// Sharing is written where ranks shared the machine, two or more: one rank wrote a sharing no
// reader takes. Read back, it says how many ranks shared how many hosts.
TEST(PredictionInputs, SharingIsWrittenFromTwoRanksOn) {
  for (int ranks : {0, 1}) {
    const std::string text = format_prediction_inputs(measured_step(), ranks, 1);
    EXPECT_EQ(text.find("sharing"), std::string::npos) << text;
    EXPECT_EQ(parse_prediction_inputs(text).sharing_ranks, 0);
  }
  const PredictionInputs three_on_two = parse_prediction_inputs(format_prediction_inputs(measured_step(), 3, 2));
  EXPECT_EQ(three_on_two.sharing_ranks, 3);
  EXPECT_EQ(three_on_two.sharing_hosts, 2);
  EXPECT_NE(three_on_two.one.sharing_source.find("with 3 ranks stepping together on 2 host(s)"), std::string::npos)
      << three_on_two.one.sharing_source;
}

// Text that is no column a run writes is refused saying which part: a field without '=', a
// missing field, a count below 0, another version of the column; and the edges of what a run can
// write are taken: a bucket of no bytes, the largest count. A bucket ready before the step began is
// refused.
TEST(PredictionInputs, FieldsAndCountsAreReadSayingWhatIsWrong) {
  const std::string good = format_prediction_inputs(measured_step(), 2, 1);
  const auto with = [&](const std::string& from, const std::string& to) { return edited(good, from, to); };
  for (const std::string& text :
       {with("4000000@0.006", "0@0.006"), with("timeline_steps=100", "timeline_steps=2147483647")})
    EXPECT_NO_THROW(parse_prediction_inputs(text)) << text;
  expect_refused({
      {with(";backward_end=", ";backward_end;backward_end="), "'backward_end' is not NAME=VALUE"},
      {with(";timeline_steps=100", ""), "no timeline_steps= field"},
      {with("timeline_steps=100", "timeline_steps=-1"), "timeline_steps: '-1' is not a count"},
      {with("timeline_steps=100", "timeline_steps=2147483648"), "timeline_steps: '2147483648' is not a count"},
      {with("4000000@0.006", "4000000@-0.001"), "bucket 0 is ready at -0.001 s, before the one before it"},
      {with("v1;", "v2;"), "'v2;buckets=4000000@0.006,1000000@0.009;b' is not version 1 of the column"},
  });
}

// What was not measured is not written, and reads back as not measured: no step times, no
// overhead (no source, or "not measured ..."), so that inputs read and written again are the same.
TEST(PredictionInputs, WhatWasNotMeasuredIsNotWritten) {
  parallel::OneDevice one = measured_step();
  one.step_times.clear();
  one.dp_overhead_source.clear();
  const std::string text = format_prediction_inputs(one, 0, 0);
  EXPECT_EQ(text.substr(text.size() - 7), ";steps=") << text;
  EXPECT_EQ(text.find("dp="), std::string::npos) << text;
  const PredictionInputs back = parse_prediction_inputs(text);
  EXPECT_TRUE(back.one.step_times.empty());
  EXPECT_EQ(back.one.dp_overhead_source, "not measured");
  EXPECT_EQ(format_prediction_inputs(back.one, 0, 0), text) << "written again as read";
  one.dp_overhead_source = "not measured: --dp_probe=off";
  EXPECT_EQ(format_prediction_inputs(one, 0, 0), text);
}

// Two ok repetitions of a CPU row at 1000 and 1200 samples/s, batch 100, the step's inputs.
std::vector<Row> one_device_rows(const std::string& inputs) {
  std::vector<Row> rows;
  for (double rate : {1000.0, 1200.0}) {
    Row r;
    r.benchmark = "train/mlp/mnist/cpu:1/fp32/bs:100", r.kind = "train", r.model = "mlp", r.dataset = "mnist";
    r.device = "cpu:1", r.precision = "fp32", r.batch = 100, r.threads = 1, r.backend = "cpu";
    r.run_type = "iteration", r.status = "ok", r.measurement = "measured", r.samples_per_s = rate;
    r.prediction_inputs = inputs;
    rows.push_back(r);
  }
  return rows;
}

// Those rows carrying measured_step()'s inputs, written for one process (no ranks, no hosts).
std::vector<Row> measured_rows() { return one_device_rows(format_prediction_inputs(measured_step(), 0, 0)); }

std::vector<const Row*> pointers(const std::vector<Row>& rows) {
  std::vector<const Row*> out;
  for (const Row& r : rows) out.push_back(&r);
  return out;
}

// The one-device step the predictor reads from `row`'s inputs where its rows' median rate is
// `samples_per_s` (a batch of 100), as a test predicts it again.
parallel::OneDevice one_device_of(const Row& row, double samples_per_s) {
  parallel::OneDevice one = parse_prediction_inputs(row.prediction_inputs).one;
  one.step_s = 100 / samples_per_s;
  one.batch = 100;
  return one;
}

// A link given as figures between CPU ranks, whose all-reduces do not overlap backward.
parallel::Link ranks_link(const std::string& figures) {
  parallel::Link link = parallel::parse_link(figures);
  link.overlaps_compute = false;
  return link;
}

// A predicted row from CSV rows is the model's prediction of the same step: the rows' median rate,
// the inputs' timeline and quantiles, no sharing over a link of devices of their own, and (CPU
// ranks) no overlap. Rows without inputs or at no rate give nothing to predict from.
TEST(PredictRows, AreTheModelsPredictionOfTheRowsOwnFigures) {
  const std::vector<Row> rows = measured_rows();
  PredictionPlan plan;
  plan.links = {parallel::parse_link("10,20")};
  plan.counts = {4};
  const std::vector<PredictedRow> got = predict_rows(pointers(rows), plan, MachineContext{});
  ASSERT_EQ(got.size(), 1u);
  parallel::OneDevice one = one_device_of(rows[0], 1100);
  const parallel::Link link = ranks_link("10,20");
  const parallel::Prediction q = parallel::predict(one, 4, link);
  const Row& row = got[0].row;
  EXPECT_EQ(number(*row.samples_per_s), number(q.samples_per_s));
  EXPECT_EQ(number(*row.samples_per_s_high), number(q.samples_per_s_high));
  EXPECT_EQ(row.benchmark, "train/mlp/mnist/mpi:4/fp32/bs:100/predicted:custom/from:cpu:1");
  EXPECT_EQ(row.device_kind, "mpi:N");
  EXPECT_EQ(row.data_parallel, 4);
  EXPECT_EQ(row.prediction_inputs, "") << "a prediction carries no inputs of its own";
  // Rows without inputs (older schemas, --timeline=off) predict nothing, nor rows at no rate.
  EXPECT_TRUE(predict_rows(pointers(one_device_rows("")), plan, MachineContext{}).empty());
  std::vector<Row> no_rate = rows;
  for (Row& r : no_rate) r.samples_per_s = 0;
  EXPECT_TRUE(predict_rows(pointers(no_rate), plan, MachineContext{}).empty());
}

// Every predicted row names the model that made it (prediction_model), so that a prediction asked
// later of its CSV can say where another model made the file's own.
TEST(PredictRows, NameTheModelThatMadeThem) {
  const std::vector<Row> rows = measured_rows();
  PredictionPlan plan;
  plan.links = {parallel::parse_link("10,20")};
  plan.counts = {2, 8};
  for (const PredictedRow& p : predict_rows(pointers(rows), plan, MachineContext{}))
    EXPECT_EQ(p.row.prediction_model, parallel::kPredictionModel);
  EXPECT_FALSE(rows[0].prediction_model) << "the measured row names none";
}

// Predicted rows carry the commit and time they were made at, not those of the run that measured
// their source (a prediction asked later of its CSV is made by this trainbench, now).
TEST(PredictRows, CarryTheCommitAndTimeTheyWereMadeAt) {
  std::vector<Row> rows = measured_rows();
  for (Row& r : rows) r.git_commit = "measured1", r.timestamp = "2026-11-01T00:00:00Z";
  PredictionPlan plan;
  plan.links = {parallel::parse_link("10,20")};
  plan.counts = {2};
  MachineContext now;
  now.git_commit = "predicted2";
  now.timestamp = "2026-11-30T22:00:00Z";
  const std::vector<PredictedRow> got = predict_rows(pointers(rows), plan, now);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].row.git_commit, "predicted2");
  EXPECT_EQ(got[0].row.timestamp, "2026-11-30T22:00:00Z");
}

// Inputs a run never writes (no gradient buckets) and a row without a batch are refused, naming
// the benchmark: they used to be dropped without a word, and --predict_from then blamed --devices.
TEST(PredictRows, RefuseInputsWithoutBucketsAndRowsWithoutABatch) {
  PredictionPlan plan;
  plan.links = {parallel::parse_link("10,20")};
  plan.counts = {2};
  parallel::OneDevice no_buckets = measured_step();
  no_buckets.timeline.bucket_bytes.clear();
  no_buckets.timeline.bucket_ready_s.clear();
  std::vector<Row> without_batch = measured_rows();
  for (Row& r : without_batch) r.batch.reset();
  for (const auto& [rows, says] : std::vector<std::pair<std::vector<Row>, std::string>>{
           {one_device_rows(format_prediction_inputs(no_buckets, 0, 0)), "prediction_inputs holds no gradient buckets"},
           {without_batch, "the row has no batch"}}) {
    try {
      predict_rows(pointers(rows), plan, MachineContext{});
      ADD_FAILURE() << "predicted: " << says;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("train/mlp/mnist/cpu:1/fp32/bs:100: " + says), std::string::npos)
          << e.what();
    }
  }
}

// An NVLink link joins one node's GPUs, 8 by default (--gpus_per_node): 64 GPUs over nvlink4 on one
// node are refused, naming the flags; spread over 8 nodes they are predicted; the default counts
// never go past the node.
TEST(PredictRows, RefuseMoreGpusThanAnNvlinkNodeJoins) {
  std::vector<Row> rows = measured_rows();
  for (Row& r : rows) r.backend = "gpu", r.device = "gpu:1";
  PredictionPlan plan;
  plan.links = {parallel::parse_link("nvlink4")};
  plan.counts = {64};
  try {
    predict_rows(pointers(rows), plan, MachineContext{});
    FAIL() << "64 GPUs on one NVLink node were predicted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "64 devices over nvlink4: an NVLink link joins at most 8 GPUs of one node (--gpus_per_node=8); spread "
              "them over nodes (e.g. --nodes=8 --network=ib_ndr400x8), or give the GPUs one node holds with "
              "--gpus_per_node");
  }
  plan.nodes = 8;
  plan.networks = {parallel::parse_network("ib_ndr400x8")};
  ASSERT_EQ(predict_rows(pointers(rows), plan, MachineContext{}).size(), 1u);
  EXPECT_NO_THROW(check_prediction_shape(parallel::parse_link("pcie5"), 64, 1, 8)) << "PCIe: no such bound";
  // The defaults (2, 4, 8) stop at a smaller node.
  plan = PredictionPlan{};
  plan.links = {parallel::parse_link("nvlink4")};
  plan.gpus_per_node = 4;
  std::vector<std::string> devices;
  for (const PredictedRow& p : predict_rows(pointers(rows), plan, MachineContext{})) devices.push_back(p.row.device);
  EXPECT_EQ(devices, (std::vector<std::string>{"gpu:2", "gpu:4"}));
}

// Devices that do not divide among --nodes are refused, naming the flag, by --predict_from (CPU
// and GPU rows) and --predict_allreduce alike (before, --predict_from dropped them without a
// word and --predict_allreduce predicted 6 GPUs on 4 nodes as 1 a node).
TEST(PredictRows, RefuseDevicesThatDoNotDivideAmongTheNodes) {
  const std::string expected =
      "6 devices on 4 nodes: data-parallel ranks fill every node alike; give a count that --nodes=4 divides (4 or 8) "
      "or another --nodes";
  for (const char* backend : {"cpu", "gpu"}) {
    SCOPED_TRACE(backend);
    std::vector<Row> rows = measured_rows();
    if (std::string(backend) == "gpu")
      for (Row& r : rows) r.backend = "gpu", r.device = "gpu:1";
    PredictionPlan plan;
    plan.links = {parallel::parse_link("10,20")};
    plan.nodes = 4;
    plan.networks = {parallel::parse_network("100gbe")};
    plan.counts = {8, 6};
    try {
      predict_rows(pointers(rows), plan, MachineContext{});
      FAIL() << "6 devices on 4 nodes were predicted or dropped";
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()), expected);
    }
    plan.counts = {8};
    EXPECT_EQ(predict_rows(pointers(rows), plan, MachineContext{}).size(), 1u);
  }
  PredictionPlan plan;
  plan.links = {parallel::parse_link("nvlink4")};
  plan.nodes = 4;
  plan.networks = {parallel::parse_network("ib_ndr400x8")};
  plan.counts = {6};
  try {
    predict_allreduce_lines(4e9, plan);
    FAIL() << "an all-reduce of 6 GPUs on 4 nodes was predicted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), expected);
  }
  plan.counts = {2};
  try {
    predict_allreduce_lines(4e9, plan);
    FAIL() << "2 GPUs on 4 nodes were predicted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--nodes=4 divides (4)"), std::string::npos) << e.what();
  }
}

// A predicted row keeps the ranks' hosts of the run that measured its source (the run's rows all
// say where its ranks ran); one across nodes of its own names no hosts, only how many nodes.
TEST(PredictRows, KeepTheSourceRunsHostsUnlessTheyPredictNodesOfTheirOwn) {
  std::vector<Row> rows = measured_rows();
  for (Row& r : rows) {
    r.ranks = 2;
    r.nodes = 1;
    r.rank_hosts = "vm:0;vm:1";
  }
  PredictionPlan plan;
  plan.links = {parallel::parse_link("10,20")};
  plan.counts = {2};
  std::vector<PredictedRow> got = predict_rows(pointers(rows), plan, MachineContext{});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].row.rank_hosts, "vm:0;vm:1");
  EXPECT_EQ(got[0].row.nodes, 1);
  plan.nodes = 4;
  plan.networks = {parallel::parse_link("1,30")};
  plan.counts = {8};
  got = predict_rows(pointers(rows), plan, MachineContext{});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].row.nodes, 4);
  EXPECT_EQ(got[0].row.rank_hosts, "") << "nodes it never ran on have no hosts";
}

// A replay waits its compute out, its cores free: its all-reduces overlap the wait over any link,
// the ranks' measured one included, whose sweep of host buffers says a CPU step's cannot.
TEST(PredictRows, LetAReplaysAllReducesOverlapItsWaitOverTheMeasuredLinkToo) {
  const std::vector<Row> rows = measured_rows();
  parallel::Link measured = ranks_link("10,20");  // as measure_link sets it for host buffers
  measured.name = "measured";
  PredictionPlan plan;
  plan.links = {measured};
  plan.counts = {2};
  plan.replay = true;
  const std::vector<PredictedRow> got = predict_rows(pointers(rows), plan, MachineContext{});
  ASSERT_EQ(got.size(), 1u);
  parallel::OneDevice one = one_device_of(rows[0], 1100);
  one.sharing = parallel::Range::exactly(1);
  // Through MPI, as a replay's ranks all-reduce: no contention, which is a GPU's.
  parallel::Cluster overlapping{.devices = 2, .link = measured, .library = parallel::Library::Mpi};
  overlapping.link.overlaps_compute = true;
  const parallel::Prediction with = parallel::predict(one, overlapping);
  EXPECT_EQ(number(*got[0].row.samples_per_s), number(with.samples_per_s));
  // The 4 MB bucket ready at 6 ms runs beside the wait: the point is above the no-overlap one.
  parallel::Cluster apart = overlapping;
  apart.link.overlaps_compute = false;
  EXPECT_GT(with.samples_per_s, parallel::predict(one, apart).samples_per_s);
  // Without the replay, CPU ranks' all-reduces do not overlap, over any link.
  plan.replay = false;
  plan.links = {parallel::parse_link("10,20")};
  EXPECT_EQ(number(*predict_rows(pointers(rows), plan, MachineContext{})[0].row.samples_per_s),
            number(parallel::predict(one, 2, ranks_link("10,20")).samples_per_s));
}

// A replay's ranks are CPU ranks whatever the saved row ran on: a GPU row replayed is predicted as
// mpi:N ranks all-reducing through MPI, not as gpu:N over NCCL.
TEST(PredictRows, OfAReplayAreMpiRanksWhateverTheSavedRowRanOn) {
  std::vector<Row> rows = measured_rows();
  for (Row& r : rows) r.backend = "gpu", r.device = "gpu:1", r.benchmark = "train/mlp/mnist/gpu:1/fp32/bs:100";
  PredictionPlan plan;
  plan.links = {parallel::parse_link("10,20")};
  plan.counts = {2};
  plan.replay = true;
  const std::vector<PredictedRow> got = predict_rows(pointers(rows), plan, MachineContext{});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].row.benchmark, "train/mlp/mnist/mpi:2/fp32/bs:100/predicted:custom/from:gpu:1");
  EXPECT_EQ(got[0].row.device_kind, "mpi:N");
  parallel::OneDevice one = one_device_of(rows[0], 1100);
  one.sharing = parallel::Range::exactly(1);
  const parallel::Cluster ranks{.devices = 2, .link = plan.links[0], .library = parallel::Library::Mpi};
  EXPECT_EQ(number(*got[0].row.samples_per_s), number(parallel::predict(one, ranks).samples_per_s));
}

// The rows a prediction starts from are the ok measured repetitions at a rate: it takes their
// median rate (not their mean) and the last one's inputs, and passes over a predicted row, a
// failed one and one at no rate.
TEST(PredictRows, TakeTheMedianOfTheMeasuredRatesAndTheLastRowsInputs) {
  parallel::OneDevice earlier = measured_step();
  earlier.timeline.steps = 50;
  std::vector<Row> rows = one_device_rows(format_prediction_inputs(earlier, 0, 0));
  rows[0].samples_per_s = 1600;  // the rates 1600, 1200 and 1000: median 1200, mean 1267
  rows.push_back(rows[1]);
  rows.back().samples_per_s = 1000;
  rows.back().prediction_inputs = format_prediction_inputs(measured_step(), 0, 0);
  Row predicted = rows[1], failed = rows[1], no_rate = rows[1];
  predicted.measurement = "predicted", predicted.samples_per_s = 1e6, predicted.prediction_inputs = "";
  failed.status = "failed", failed.samples_per_s = 1e6;
  no_rate.samples_per_s = 0;
  rows.insert(rows.begin(), {predicted, failed, no_rate});
  PredictionPlan plan;
  plan.links = {parallel::parse_link("10,20")};
  plan.counts = {4};
  const std::vector<PredictedRow> got = predict_rows(pointers(rows), plan, MachineContext{});
  ASSERT_EQ(got.size(), 1u);
  parallel::OneDevice one = one_device_of(rows.back(), 1200);
  const parallel::Link link = ranks_link("10,20");
  EXPECT_EQ(number(*got[0].row.samples_per_s), number(parallel::predict(one, 4, link).samples_per_s));
  EXPECT_EQ(got[0].row.iterations, 100) << "the last row's timeline, of 100 steps";
}

// A predicted row's columns are the model's figures for it: its step and the terms in it, the
// all-reduced bytes, the replicas and the link; the message says the terms, the step's first, each
// with its band (low to high); the console says the efficiency with its band, which scales with
// samples/s at N devices (the band's ends over the point).
TEST(PredictRows, HoldTheModelsFiguresInTheirColumns) {
  const std::vector<Row> rows = measured_rows();
  PredictionPlan plan;
  plan.links = {parallel::parse_link("10,20")};
  plan.counts = {4};
  const std::vector<PredictedRow> got = predict_rows(pointers(rows), plan, MachineContext{});
  ASSERT_EQ(got.size(), 1u);
  parallel::OneDevice one = one_device_of(rows[0], 1100);
  const parallel::Link link = ranks_link("10,20");
  const parallel::Prediction q = parallel::predict(one, 4, link);
  const Row& row = got[0].row;
  EXPECT_EQ(row.iterations, 100) << "the timeline's steps";
  EXPECT_EQ(row.replicas, 4);
  EXPECT_EQ(row.allreduce_bytes_per_step, 5e6) << "the two buckets";
  EXPECT_DOUBLE_EQ(*row.step_time_s, q.step_s);
  EXPECT_DOUBLE_EQ(*row.comm_s_per_step, q.exposed_comm_s);
  EXPECT_DOUBLE_EQ(*row.comm_share, q.exposed_comm_s / q.step_s);
  EXPECT_DOUBLE_EQ(*row.scaling_efficiency, q.efficiency);
  EXPECT_EQ(row.dominant_term, q.dominant);
  EXPECT_EQ(row.link_busbw_gbps, 10);
  EXPECT_EQ(row.link_latency_us, 20);
  EXPECT_EQ(row.measurement, "predicted");
  EXPECT_EQ(row.predicted_from, "train/mlp/mnist/cpu:1/fp32/bs:100");
  EXPECT_NE(got[0].line.find(" over custom (10 GB/s, 20 us a step): "), std::string::npos) << got[0].line;
  EXPECT_EQ(row.message.find("as figures"), std::string::npos) << "figures given are not said again: " << row.message;
  ASSERT_GE(q.terms.size(), 2u);
  ASSERT_LT(q.terms[0].low, q.terms[0].high) << "the test needs a term with a band";
  EXPECT_NE(row.message.find(fmt::format("terms: {} {:.3g} ({:.3g} to {:.3g})", q.terms[0].name, q.terms[0].s * 1e3,
                                         q.terms[0].low * 1e3, q.terms[0].high * 1e3)),
            std::string::npos)
      << row.message;
  EXPECT_NE(row.message.find(fmt::format(", {} +{:.3g} (", q.terms[1].name, q.terms[1].s * 1e3)), std::string::npos)
      << row.message;
  const double low = 100 * q.efficiency * q.samples_per_s_low / q.samples_per_s,
               high = 100 * q.efficiency * q.samples_per_s_high / q.samples_per_s;
  ASSERT_NE(fmt::format("{:.0f}", low), fmt::format("{:.0f}", high)) << "the test needs a band";
  EXPECT_NE(got[0].line.find(fmt::format("{:.0f}% efficiency ({:.0f}% to {:.0f}%)", 100 * q.efficiency, low, high)),
            std::string::npos)
      << got[0].line;
}

// GPUs on one node all-reduce over NCCL in one process; on nodes of their own they are ranks, and
// the row's name says the nodes and the network between them, its columns the network's figures.
// The console says the all-reduces' time and, apart, what backward did not hide of it.
TEST(PredictRows, NameGpusOnNodesOfTheirOwnAsRanksOverTheirNetwork) {
  std::vector<Row> rows = measured_rows();
  for (Row& r : rows) r.backend = "gpu", r.device = "gpu:1", r.benchmark = "train/mlp/mnist/gpu:1/fp32/bs:100";
  PredictionPlan plan;
  plan.links = {parallel::parse_link("nvlink4")};
  plan.counts = {8};
  std::vector<PredictedRow> got = predict_rows(pointers(rows), plan, MachineContext{});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].row.device_kind, "gpu:N over NCCL");
  parallel::OneDevice one = one_device_of(rows[0], 1100);
  const parallel::Prediction q = parallel::predict(one, parallel::Cluster{.devices = 8, .link = plan.links[0]});
  ASSERT_GT(q.comm_s, 1.01 * q.exposed_comm_s) << "the test needs all-reduces backward hides";
  EXPECT_DOUBLE_EQ(*got[0].row.comm_share, q.exposed_comm_s / q.step_s) << "the share of the step not hidden";
  EXPECT_NE(got[0].line.find(fmt::format("its all-reduces {:.3g} ms ({}), {:.3g} ms of them not hidden by backward",
                                         q.comm_s * 1e3, q.algorithm, q.exposed_comm_s * 1e3)),
            std::string::npos)
      << got[0].line;
  EXPECT_EQ(got[0].row.benchmark, "train/mlp/mnist/gpu:8/fp32/bs:100/predicted:nvlink4/from:gpu:1");
  EXPECT_NE(got[0].row.message.find(
                fmt::format("over nvlink4 ({}; low: {})", plan.links[0].source, plan.links[0].low_source)),
            std::string::npos)
      << "the link's band's source beside its own: " << got[0].row.message;
  plan.nodes = 2;
  plan.networks = {parallel::parse_network("100gbe")};
  got = predict_rows(pointers(rows), plan, MachineContext{});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].row.device_kind, "gpu:N across ranks");
  EXPECT_EQ(got[0].line.rfind("  predicted gpu:8 on 2 nodes over nvlink4 (", 0), 0u) << got[0].line;
  EXPECT_EQ(got[0].row.benchmark,
            "train/mlp/mnist/gpu:8/fp32/bs:100/nodes:2/predicted:nvlink4/network:100gbe/from:gpu:1");
  EXPECT_EQ(got[0].row.network, "100gbe");
  EXPECT_EQ(got[0].row.network_busbw_gbps, 5);
  EXPECT_EQ(got[0].row.network_latency_us, 14) << "100gbe's, not nvlink4's 3.4";
  EXPECT_EQ(got[0].row.network_nics, 1);
  plan.networks = {parallel::parse_network("ib_ndr400x8")};
  EXPECT_EQ(predict_rows(pointers(rows), plan, MachineContext{})[0].row.network_nics, 8);
}

// A predicted row takes its source's identity and none of what the source measured or concluded:
// no counter of it, its repetition, verdicts, windows, prediction or what its device was.
TEST(PredictRows, TakeNothingTheSourceMeasuredOrConcluded) {
  std::vector<Row> rows = measured_rows();
  const std::string sentinel = "123456";
  for (Row& r : rows) {
    const double rate = *r.samples_per_s;
    for (const Column& c : columns())
      if (c.kind == ColumnKind::Counter) {
        ASSERT_TRUE(c.set(r, sentinel)) << c.name;
      }
    r.samples_per_s = rate;
    r.repetition = 1, r.verdicts = "stable", r.window_samples_per_s = "1,2", r.prediction = "inside_band";
    r.shared_device = 1, r.emulated_nodes = 1;
  }
  PredictionPlan plan;
  plan.links = {parallel::parse_link("10,20")};
  plan.counts = {2};
  const std::vector<PredictedRow> got = predict_rows(pointers(rows), plan, MachineContext{});
  ASSERT_EQ(got.size(), 1u);
  const Row& row = got[0].row;
  for (const Column& c : columns())
    if (c.kind == ColumnKind::Counter) {
      EXPECT_NE(c.cell(row), sentinel) << c.name;
    }
  EXPECT_FALSE(row.repetition);
  EXPECT_EQ(row.verdicts, "");
  EXPECT_EQ(row.window_samples_per_s, "");
  EXPECT_EQ(row.prediction, "");
  EXPECT_FALSE(row.shared_device);
  EXPECT_FALSE(row.emulated_nodes);
  EXPECT_EQ(row.model, "mlp") << "its identity is the source's";
}

// One device shares no gradients: a count of 1 predicts nothing, beside the counts that do.
TEST(PredictRows, PredictNothingForOneDevice) {
  const std::vector<Row> rows = measured_rows();
  PredictionPlan plan;
  plan.links = {parallel::parse_link("10,20")};
  plan.counts = {1, 4};
  const std::vector<PredictedRow> got = predict_rows(pointers(rows), plan, MachineContext{});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].row.device, "mpi:4");
}

// The speed-up over the CPU is the source's: where the source names no cpu row (a cpu row of its
// own), its predicted rows have none, whatever rate the plan holds.
TEST(PredictRows, HaveASpeedupWhereTheSourceNamesItsCpuRow) {
  std::vector<Row> rows = measured_rows();
  PredictionPlan plan;
  plan.links = {parallel::parse_link("10,20")};
  plan.counts = {2};
  plan.cpu_samples_per_s = 500;
  EXPECT_FALSE(predict_rows(pointers(rows), plan, MachineContext{})[0].row.speedup_vs_cpu);
  for (Row& r : rows) r.cpu_baseline = "train/mlp/mnist/cpu/fp32/bs:100";
  const Row row = predict_rows(pointers(rows), plan, MachineContext{})[0].row;
  EXPECT_DOUBLE_EQ(row.speedup_vs_cpu.value_or(NAN), *row.samples_per_s / 500);
}

// Over the run's measured link the ranks ran as they ran: sharing the machine as the sharing probe
// measured, on one level whatever --nodes says; the message gives the link as figures, to predict
// over it elsewhere. A replay over it waits its compute out: no sharing.
TEST(PredictRows, OverTheMeasuredLinkKeepTheSharingMeasuredAndOneLevel) {
  parallel::OneDevice shared = measured_step();
  shared.sharing = {1.5, 1.4, 1.6};
  const std::vector<Row> rows = one_device_rows(format_prediction_inputs(shared, 2, 1));
  parallel::Link measured = ranks_link("10,20");
  measured.name = "measured";
  PredictionPlan plan;
  plan.links = {measured};
  plan.nodes = 4;
  plan.networks = {parallel::parse_network("100gbe")};
  plan.counts = {2};
  std::vector<PredictedRow> got = predict_rows(pointers(rows), plan, MachineContext{});
  ASSERT_EQ(got.size(), 1u);
  parallel::OneDevice one = one_device_of(rows[0], 1100);
  const parallel::Cluster ranks{.devices = 2, .link = measured, .library = parallel::Library::Mpi};
  EXPECT_EQ(number(*got[0].row.samples_per_s), number(parallel::predict(one, ranks).samples_per_s));
  EXPECT_EQ(got[0].row.benchmark, "train/mlp/mnist/mpi:2/fp32/bs:100/predicted:measured/from:cpu:1");
  EXPECT_NE(got[0].row.message.find("sharing: x1.5 (1.4 to 1.6)"), std::string::npos) << got[0].row.message;
  EXPECT_NE(got[0].row.message.find("; as figures: " + parallel::link_figures(measured)), std::string::npos)
      << got[0].row.message;
  plan.replay = true;
  got = predict_rows(pointers(rows), plan, MachineContext{});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NE(got[0].row.message.find("sharing: none: replayed compute is waited out"), std::string::npos)
      << got[0].row.message;
  one.sharing = parallel::Range::exactly(1);
  parallel::Cluster replay = ranks;
  replay.link.overlaps_compute = true;
  EXPECT_EQ(number(*got[0].row.samples_per_s), number(parallel::predict(one, replay).samples_per_s));
}

// check_prediction_shape's refusal says the nodes asked for, and the least that would do.
TEST(PredictRows, SayTheNodesAnNvlinkShapeNeeds) {
  const parallel::Link nvlink4 = parallel::parse_link("nvlink4");
  for (const auto& [devices, nodes, says] : std::vector<std::tuple<int, int, std::string>>{
           {12, 1, "12 devices over nvlink4: an NVLink link joins at most 8 GPUs"},
           {12, 1, "(e.g. --nodes=2 --network=ib_ndr400x8)"},
           {64, 4, "64 devices over nvlink4 on 4 nodes: an NVLink link joins at most 8 GPUs"}}) {
    try {
      check_prediction_shape(nvlink4, devices, nodes, 8);
      ADD_FAILURE() << devices << " on " << nodes << " nodes taken";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  }
  EXPECT_NO_THROW(check_prediction_shape(nvlink4, 64, 8, 8));
}

// The policy: one-device train rows with a timeline are predicted; a measured row is compared with
// the prediction made from a row of its per-rank threads, the measured link's first.
TEST(Predictor, ComparesAMeasuredRowWithItsPredictionAndSaysInsideOrOutside) {
  Flags flags;
  flags.links = {"10,20", "1,50"};
  Predictor predictor(flags);
  BenchInfo one;
  one.name = "train/mlp/mnist/cpu:1/fp32/bs:100";
  one.kind = Kind::Train;
  one.model = "mlp";
  one.dataset = "mnist";
  one.device = "cpu:1";
  one.precision = "fp32";
  one.batch = 100;
  one.threads = 1;
  one.device_kind = &kind_named("cpu:T");
  const std::vector<Row> rows = measured_rows();
  const std::vector<PredictedRow> made = predictor.after_benchmark(one, pointers(rows), MachineContext{});
  ASSERT_EQ(made.size(), 6u);  // 2, 4, 8 over each link
  BenchInfo mpi = one;
  mpi.name = "train/mlp/mnist/mpi:2/fp32/bs:100";
  mpi.device = "mpi:2";
  mpi.device_kind = &kind_named("mpi:N");
  mpi.data_parallel = 2;
  const double low = *made[0].row.samples_per_s_low, high = *made[0].row.samples_per_s_high;
  const auto inside = predictor.compare(mpi, (low + high) / 2);
  ASSERT_TRUE(inside);
  EXPECT_EQ(inside->verdict, "inside_band");
  EXPECT_EQ(inside->prediction, made[0].row.benchmark) << "the first link, none being measured";
  EXPECT_NE(inside->line.find("inside the band"), std::string::npos) << inside->line;
  EXPECT_EQ(predictor.compare(mpi, high * 2)->verdict, "outside_band");
  mpi.threads = 2;  // ranks of two threads: from no cpu:1 row
  EXPECT_FALSE(predictor.compare(mpi, high));
  // Data-parallel, jobs and epochs rows are not predicted.
  BenchInfo epochs = one;
  epochs.kind = Kind::Epochs;
  EXPECT_TRUE(predictor.after_benchmark(epochs, pointers(rows), MachineContext{}).empty());
  EXPECT_TRUE(predictor.after_benchmark(mpi, pointers(rows), MachineContext{}).empty());
}

// The one-device cpu:1 row of the Predictor tests, and a GPU one.
BenchInfo one_device_info(bool gpu) {
  BenchInfo one;
  one.kind = Kind::Train;
  one.model = "mlp";
  one.dataset = "mnist";
  one.device = gpu ? "gpu:1" : "cpu:1";
  one.name = fmt::format("train/mlp/mnist/{}/fp32/bs:100", one.device);
  one.precision = "fp32";
  one.batch = 100;
  one.threads = 1;
  one.backend = gpu ? Backend::Cuda : Backend::Cpu;
  one.device_kind = &kind_named(gpu ? "gpu:1" : "cpu:T");
  return one;
}

std::vector<Row> gpu_rows() {
  std::vector<Row> rows = measured_rows();
  for (Row& r : rows) r.backend = "gpu", r.device = "gpu:1", r.benchmark = "train/mlp/mnist/gpu:1/fp32/bs:100";
  return rows;
}

std::vector<std::string> devices_of(const std::vector<PredictedRow>& predicted) {
  std::vector<std::string> out;
  for (const PredictedRow& p : predicted) out.push_back(p.row.benchmark);
  return out;
}

// A GPU row is predicted over nvlink4 without --link; --nodes, --network and --gpus_per_node
// shape what the run predicts as they shape --predict_from's.
TEST(Predictor, PredictsOverTheFlagsNodesAndNvlink4ByDefault) {
  const std::vector<Row> rows = gpu_rows();
  EXPECT_EQ(devices_of(Predictor(Flags{}).after_benchmark(one_device_info(true), pointers(rows), MachineContext{})),
            (std::vector<std::string>{"train/mlp/mnist/gpu:2/fp32/bs:100/predicted:nvlink4/from:gpu:1",
                                      "train/mlp/mnist/gpu:4/fp32/bs:100/predicted:nvlink4/from:gpu:1",
                                      "train/mlp/mnist/gpu:8/fp32/bs:100/predicted:nvlink4/from:gpu:1"}));
  Flags flags;
  flags.nodes = 2;
  flags.networks = {"100gbe"};
  flags.gpus_per_node = 2;
  EXPECT_EQ(devices_of(Predictor(flags).after_benchmark(one_device_info(true), pointers(rows), MachineContext{})),
            (std::vector<std::string>{
                "train/mlp/mnist/gpu:2/fp32/bs:100/nodes:2/predicted:nvlink4/network:100gbe/from:gpu:1",
                "train/mlp/mnist/gpu:4/fp32/bs:100/nodes:2/predicted:nvlink4/network:100gbe/from:gpu:1"}))
      << "1 and 2 GPUs a node: no more than --gpus_per_node";
}

// Rows without a timeline (--timeline=off) and CUDA-graph rows hold no bucket timeline of their
// own: they are not predicted.
TEST(Predictor, PredictsNoRowWithoutATimelineNorACudaGraphsRow) {
  Flags flags;
  flags.links = {"10,20"};
  Predictor predictor(flags);
  const std::vector<Row> rows = measured_rows();
  BenchInfo one = one_device_info(false);
  EXPECT_EQ(predictor.after_benchmark(one, pointers(rows), MachineContext{}).size(), 3u);
  BenchInfo without_timeline = one, graphed = one;
  without_timeline.timeline = false;
  graphed.cuda_graph = true;
  EXPECT_TRUE(predictor.after_benchmark(without_timeline, pointers(rows), MachineContext{}).empty());
  EXPECT_TRUE(predictor.after_benchmark(graphed, pointers(rows), MachineContext{}).empty());
}

// The run's predicted rows carry the speed-up over the rate of the source's cpu row it is given.
TEST(Predictor, GivesThePredictedRowsTheSpeedupOverTheCpuRow) {
  Flags flags;
  flags.links = {"10,20"};
  std::vector<Row> rows = measured_rows();
  for (Row& r : rows) r.cpu_baseline = "train/mlp/mnist/cpu/fp32/bs:100";
  const std::vector<PredictedRow> made =
      Predictor(flags).after_benchmark(one_device_info(false), pointers(rows), MachineContext{}, 500);
  ASSERT_FALSE(made.empty());
  EXPECT_DOUBLE_EQ(made[0].row.speedup_vs_cpu.value_or(NAN), *made[0].row.samples_per_s / 500);
}

// The band's ends are inside it; a rate of 0 (a row that measured none) is compared with nothing;
// the line says the band (low to high) and measured / predicted.
TEST(Predictor, TakesTheBandsEndsAsInsideAndComparesNoRateOfZero) {
  Flags flags;
  flags.links = {"10,20"};
  Predictor predictor(flags);
  const std::vector<Row> rows = measured_rows();
  const std::vector<PredictedRow> made =
      predictor.after_benchmark(one_device_info(false), pointers(rows), MachineContext{});
  ASSERT_FALSE(made.empty());
  BenchInfo mpi = one_device_info(false);
  mpi.name = "train/mlp/mnist/mpi:2/fp32/bs:100";
  mpi.device = "mpi:2";
  mpi.device_kind = &kind_named("mpi:N");
  mpi.data_parallel = 2;
  const double low = *made[0].row.samples_per_s_low, point = *made[0].row.samples_per_s,
               high = *made[0].row.samples_per_s_high;
  ASSERT_LT(low, high);
  EXPECT_EQ(predictor.compare(mpi, low)->verdict, "inside_band");
  EXPECT_EQ(predictor.compare(mpi, high)->verdict, "inside_band");
  const std::string line = predictor.compare(mpi, low)->line;
  EXPECT_NE(line.find(fmt::format("measured / predicted = {:.2f},", low / point)), std::string::npos) << line;
  ASSERT_NE(fmt::format("{:.0f}", low), fmt::format("{:.0f}", high)) << "the test needs a band";
  EXPECT_NE(line.find(fmt::format("predicted {:.0f} (band {:.0f} to {:.0f}) from ", point, low, high)),
            std::string::npos)
      << line;
  EXPECT_FALSE(predictor.compare(mpi, 0));
}

// A measured row is compared with its prediction whatever says how its ranks ran: a replay, GPU
// ranks as emulated nodes (no data_parallel: a check of the multi-node path), against a
// prediction over a network between nodes.
TEST(Predictor, ComparesReplaysAndEmulatedNodesWithTheirPredictions) {
  Flags flags;
  flags.links = {"10,20"};
  Predictor cpu(flags);
  const std::vector<Row> rows = measured_rows();
  ASSERT_FALSE(cpu.after_benchmark(one_device_info(false), pointers(rows), MachineContext{}).empty());
  BenchInfo replay = one_device_info(false);
  replay.name = "train/mlp/mnist/mpi:2/fp32/bs:100/replayed";
  replay.device = "mpi:2";
  replay.variant = "replayed";
  replay.device_kind = &kind_named("mpi:N");
  replay.data_parallel = 2;
  const auto replayed = cpu.compare(replay, 1000);
  ASSERT_TRUE(replayed);
  EXPECT_EQ(replayed->prediction, "train/mlp/mnist/mpi:2/fp32/bs:100/predicted:custom/from:cpu:1");

  flags.nodes = 2;
  flags.networks = {"100gbe"};
  Predictor gpu(flags);
  const std::vector<Row> gpus = gpu_rows();
  ASSERT_FALSE(gpu.after_benchmark(one_device_info(true), pointers(gpus), MachineContext{}).empty());
  BenchInfo emulated = one_device_info(true);
  emulated.name = "train/mlp/mnist/gpu:2/fp32/bs:100/emulated_nodes/nodes:2";
  emulated.device = "gpu:2";
  emulated.variant = "emulated_nodes/nodes:2";
  emulated.device_kind = &kind_named("gpu:N as emulated nodes");
  emulated.data_parallel = 0;  // it shares one GPU
  const auto compared = gpu.compare(emulated, 1000);
  ASSERT_TRUE(compared);
  EXPECT_EQ(compared->prediction,
            "train/mlp/mnist/gpu:2/fp32/bs:100/nodes:2/predicted:custom/network:100gbe/from:gpu:1");
}

// A replay is predicted for this world's ranks and no other count: in a world of one rank (no
// mpirun), for none.
TEST(Predictor, PredictsAReplayForTheWorldsRanksAlone) {
  Flags flags;
  flags.links = {"10,20"};
  Predictor predictor(flags);
  BenchInfo replay = one_device_info(false);
  replay.replay = BenchInfo::Replay{.of = replay.name, .backend = "cpu", .inputs = ""};
  replay.replay->rows = measured_rows();
  EXPECT_TRUE(predictor.for_replay(replay, MachineContext{}).empty());
  BenchInfo not_a_replay = one_device_info(false);
  EXPECT_TRUE(predictor.for_replay(not_a_replay, MachineContext{}).empty());
}

// A bad --link or --network is refused as the predictor is made, before anything is measured: a
// network is used only with --nodes, and a misspelt one would otherwise fail after the run.
TEST(Predictor, RefusesABadLinkOrNetworkWhenMade) {
  Flags flags;
  flags.links = {"nvlink9"};
  EXPECT_THROW(Predictor{flags}, InputError) << "--link=nvlink9";
  flags.links = {"10,20"};
  flags.networks = {"100gbf"};
  EXPECT_THROW(Predictor{flags}, InputError) << "--network=100gbf";
  flags.networks = {"100gbe"};
  EXPECT_NO_THROW(Predictor{flags});
}

// The measured link is swept among a run's ranks at start-up: a run of one rank (no mpirun, as
// here) has none to predict over, and --link=measured is refused as the predictor is made,
// saying how to run it and what to give instead, alone or beside a preset.
TEST(Predictor, RefusesTheMeasuredLinkWithoutRanksToMeasureItAmong) {
  ASSERT_EQ(parallel::world().size, 1);
  Flags flags;
  for (const std::vector<std::string>& links :
       {std::vector<std::string>{"measured"}, std::vector<std::string>{"nvlink4", "measured"}}) {
    flags.links = links;
    try {
      Predictor{flags};
      ADD_FAILURE() << links.size() << " links ending in measured taken by a run of one rank";
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("--link=measured: "), std::string::npos) << what;
      EXPECT_NE(what.find("this run has one rank: run it under mpirun -np N (N >= 2)"), std::string::npos) << what;
      EXPECT_NE(what.find("give a preset (nvlink4, pcie5, ...) or BUSBW_GBPS[,LATENCY_US]"), std::string::npos) << what;
    }
  }
  flags.links = {"nvlink4"};
  EXPECT_NO_THROW(Predictor{flags});
}

// What std::cout printed while it lived.
class CapturedCout {
 public:
  CapturedCout() : old_(std::cout.rdbuf(text_.rdbuf())) {}
  ~CapturedCout() { std::cout.rdbuf(old_); }
  std::string text() const { return text_.str(); }

 private:
  std::ostringstream text_;
  std::streambuf* old_;
};

// The H100 reference run (results/h100/): 5 workloads' cpu rows, gpu:1 and gpu:all rows in 2
// precisions, and the
// predicted rows that run made.
const std::string kReference = std::string(TB_SOURCE_DIR) + "/results/h100/default-20261127T060200Z.csv";

TEST(PredictFromCsv, WritesTheGpuRowsPredictionsAndSaysWhatItLeftOut) {
  Flags flags;
  flags.predict_from = kReference;
  flags.devices = {"gpu:8"};
  flags.csv = ::testing::TempDir() + "predict_from_test.csv";
  flags.summary = ::testing::TempDir() + "predict_from_test.md";
  std::remove(flags.csv.c_str());
  std::string text;
  int status = -1;
  {
    CapturedCout out;
    status = predict_from_csv(flags, MachineContext{});
    text = out.text();
  }
  EXPECT_EQ(status, 0) << text;
  const std::vector<Row> rows = read_csv(flags.csv, "the test's --csv");
  ASSERT_EQ(rows.size(), 10u) << "one gpu:8 row per gpu:1 row: 5 workloads in 2 precisions";
  for (const Row& r : rows) {
    EXPECT_EQ(r.measurement, "predicted");
    EXPECT_EQ(r.device, "gpu:8");
    EXPECT_EQ(r.prediction_model, parallel::kPredictionModel);
    EXPECT_NE(r.benchmark.find("/predicted:nvlink4/"), std::string::npos) << r.benchmark;
    const double low = r.samples_per_s_low.value_or(NAN), mid = r.samples_per_s.value_or(NAN),
                 high = r.samples_per_s_high.value_or(NAN);
    EXPECT_TRUE(low <= mid && mid <= high) << low << " " << mid << " " << high;
    EXPECT_GT(r.speedup_vs_cpu.value_or(0), 1) << "the file's cpu row is its baseline";
  }
  // The file made gpu:8 predictions of its own (model 1): each is set beside its re-prediction.
  EXPECT_NE(text.find("the file's own: "), std::string::npos) << text;
  EXPECT_NE(text.find(fmt::format("trainbench: 10 predicted rows written to {}\n", flags.csv)), std::string::npos)
      << text;
  EXPECT_EQ(text.find("not predicted"), std::string::npos) << "--devices asked for GPUs only: " << text;
  std::remove(flags.csv.c_str());
  // --summary takes the summary as a run's does (it was ignored).
  std::ifstream summary(flags.summary);
  const std::string markdown((std::istreambuf_iterator<char>(summary)), std::istreambuf_iterator<char>());
  EXPECT_NE(markdown.find("N=8 samples/s"), std::string::npos) << markdown;
  EXPECT_NE(markdown.find("|"), std::string::npos) << "Markdown: " << markdown;
  std::remove(flags.summary.c_str());
  flags.summary.clear();
  // The default devices (2, 4 and 8 of each kind): a CPU row has no link after its run, and is
  // left out saying so.
  flags.devices.clear();
  flags.csv.clear();
  {
    CapturedCout out;
    EXPECT_EQ(predict_from_csv(flags, MachineContext{}), 0);
    text = out.text();
  }
  EXPECT_NE(text.find("not predicted: 5 cpu row(s)"), std::string::npos) << text;
  EXPECT_NE(text.find("predicted gpu:2 over nvlink4"), std::string::npos) << text;
}

TEST(PredictFromCsv, RefusesADeviceItCannotPredictAndAFileThatIsNotThere) {
  Flags flags;
  flags.predict_from = kReference;
  flags.devices = {"cpu:4"};
  flags.csv = ::testing::TempDir() + "refused_predictions.csv";
  std::remove(flags.csv.c_str());
  CapturedCout out;
  try {
    predict_from_csv(flags, MachineContext{});
    ADD_FAILURE() << "--devices=cpu:4 accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--devices=cpu:4"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::ifstream(flags.csv)) << "a refused run left its --csv (a header, no rows)";
  flags.csv.clear();
  flags.devices = {"gpu:8"};
  flags.predict_from = ::testing::TempDir() + "no_such_run.csv";
  try {
    predict_from_csv(flags, MachineContext{});
    ADD_FAILURE() << "a missing file accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_run.csv"), std::string::npos) << e.what();
  }
}

// A saved row that no run writes (its inputs broken, a batch of 0) is refused as the file is read,
// naming the flag, the file and the row: --replay_from's rank 0 used to abort on it mid-run with
// an uncaught exception, and --predict_from said neither file nor row (or failed an assertion).
TEST(SavedRows, RowsNoRunWritesAreRefusedNamingTheFileAndTheRow) {
  const std::string good = format_prediction_inputs(measured_step(), 0, 0);
  std::vector<Row> broken = one_device_rows(good);
  broken[1].prediction_inputs.replace(broken[1].prediction_inputs.find("4000000@"), 7, "nan");
  std::vector<Row> no_batch = one_device_rows(good);
  no_batch[0].batch = 0;
  for (const auto& [rows, says] : std::vector<std::pair<std::vector<Row>, std::string>>{
           {broken, "buckets: 'nan' is not a number"}, {no_batch, "batch 0 at 1000 samples/s"}}) {
    try {
      saved_one_device_rows(rows, ".", "--replay_from", "run.csv");
      ADD_FAILURE() << "taken: " << says;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("--replay_from=run.csv: the row of train/mlp/mnist/cpu:1/fp32/bs:100: "),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(saved_one_device_rows(one_device_rows(good), ".", "--replay_from", "run.csv").names.size(), 1u);
}

// A saved run's rows a prediction starts from are its ok train/ iterations that the filter takes:
// an epochs row, a failed one and an aggregate of the same benchmark are passed over, as is a
// workload the filter does not take.
TEST(SavedRows, AreTheOkTrainIterationsTheFilterTakes) {
  const std::string good = format_prediction_inputs(measured_step(), 0, 0);
  std::vector<Row> rows = one_device_rows(good);
  Row epochs = rows[0], failed = rows[0], aggregate = rows[0], other = rows[0];
  epochs.kind = "epochs";
  failed.status = "failed";
  aggregate.run_type = "aggregate", aggregate.aggregate = "mean";
  other.benchmark = "train/lstm/ptb/cpu:1/fp32/bs:100", other.model = "lstm";
  rows.insert(rows.end(), {epochs, failed, aggregate, other});
  SavedRows saved = saved_one_device_rows(rows, ".", "--predict_from", "run.csv");
  EXPECT_EQ(saved.names,
            (std::vector<std::string>{"train/mlp/mnist/cpu:1/fp32/bs:100", "train/lstm/ptb/cpu:1/fp32/bs:100"}));
  EXPECT_EQ(saved.rows.at("train/mlp/mnist/cpu:1/fp32/bs:100").size(), 2u) << "its two ok repetitions";
  saved = saved_one_device_rows(rows, "mlp", "--predict_from", "run.csv");
  EXPECT_EQ(saved.names, (std::vector<std::string>{"train/mlp/mnist/cpu:1/fp32/bs:100"}));
}

// A filter that is no regular expression, a file whose rows all lack the inputs, and an ok row at
// an infinite rate are refused, saying which.
TEST(SavedRows, RefuseABadFilterRowsWithoutInputsAndAnInfiniteRate) {
  const std::string good = format_prediction_inputs(measured_step(), 0, 0);
  std::vector<Row> infinite = one_device_rows(good);
  infinite[0].samples_per_s = INFINITY;
  for (const auto& [rows, filter, says] : std::vector<std::tuple<std::vector<Row>, std::string, std::string>>{
           {one_device_rows(good), "(", "--benchmark_filter=(: not a regular expression"},
           {one_device_rows(""), ".", "holds prediction_inputs (2 such rows without them)"},
           {infinite, ".", "the row of train/mlp/mnist/cpu:1/fp32/bs:100: batch 100 at inf samples/s"}}) {
    try {
      saved_one_device_rows(rows, filter, "--predict_from", "run.csv");
      ADD_FAILURE() << "taken: " << says;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  }
}

// `rows` in a new CSV file of the test's (its header, then the rows): a saved run.
std::string saved_run(const std::string& name, const std::vector<Row>& rows) {
  const std::string path = ::testing::TempDir() + name;
  std::remove(path.c_str());
  CsvWriter csv(path);
  for (const Row& r : rows) csv.write_row(r);
  return path;
}

// What --predict_from printed and wrote for `flags` (its --csv the test's file `csv`, one per test:
// ctest runs tests side by side): its exit status, its console and its rows.
struct PredictedFromCsv {
  int status = -1;
  std::string text;
  std::vector<Row> rows;
};
PredictedFromCsv predicted_from(Flags flags, const std::string& csv) {
  PredictedFromCsv out;
  flags.csv = ::testing::TempDir() + csv;
  std::remove(flags.csv.c_str());
  {
    CapturedCout captured;
    out.status = predict_from_csv(flags, MachineContext{});
    out.text = captured.text();
  }
  out.rows = read_csv(flags.csv, "the test's --csv");
  std::remove(flags.csv.c_str());
  return out;
}

// A run of CPU rows alone has no link after it: --predict_from without --link asks for one
// (the run's own link was its ranks', swept at start-up), rather than saying --devices named none.
TEST(PredictFromCsv, ACpuRunWithoutALinkIsAskedForOne) {
  Flags flags;
  flags.predict_from = saved_run("cpu_run.csv", measured_rows());
  CapturedCout out;
  try {
    predict_from_csv(flags, MachineContext{});
    ADD_FAILURE() << "predicted without a link";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("a CPU row has no default link after its run"), std::string::npos) << e.what();
  }
  std::remove(flags.predict_from.c_str());
}

// --devices naming no device of the rows' kind (gpu:N of a run of CPU rows) predicts nothing: an
// error (exit status 2), with no --csv written, not a run that succeeded with no rows.
TEST(PredictFromCsv, DevicesOfNoRowsKindAreAnError) {
  Flags flags;
  flags.predict_from = saved_run("cpu_run_for_gpus.csv", measured_rows());
  flags.links = {"10,20"};
  flags.devices = {"gpu:8"};
  flags.csv = ::testing::TempDir() + "predicted_no_gpus.csv";
  std::remove(flags.csv.c_str());
  {
    CapturedCout out;
    EXPECT_EQ(predict_from_csv(flags, MachineContext{}), 2) << out.text();
  }
  EXPECT_FALSE(std::ifstream(flags.csv)) << "a run that predicted nothing wrote " << flags.csv;
  std::remove(flags.predict_from.c_str());
}

// A predicted row's speed-up is over the median of its cpu row's ok repetitions, not over that
// row's aggregates (a standard deviation, a coefficient of variation), its failed runs, nor an ok
// repetition without a rate (an edited file's: it put a NaN among the rates the median sorts).
TEST(PredictFromCsv, TheSpeedupIsOverTheCpuRowsOkRepetitionsAlone) {
  std::vector<Row> rows = measured_rows();
  for (Row& r : rows) r.cpu_baseline = "train/mlp/mnist/cpu/fp32/bs:100";
  // The cpu row: three ok repetitions (median 500, mean 600), two of its aggregates and a failed
  // repetition.
  const auto cpu_row = [&](double rate, const std::string& run_type, const std::string& status) {
    Row r = rows[0];
    r.benchmark = r.cpu_baseline, r.device = "cpu", r.threads = 2, r.cpu_baseline = "", r.prediction_inputs = "";
    r.samples_per_s = rate, r.run_type = run_type, r.status = status;
    return r;
  };
  for (double rate : {400.0, 500.0, 900.0}) rows.push_back(cpu_row(rate, "iteration", "ok"));
  rows.push_back(cpu_row(0, "iteration", "ok"));
  rows.back().samples_per_s.reset();
  for (const char* statistic : {"stddev", "cv"}) {
    rows.push_back(cpu_row(0.5, "aggregate", "ok"));
    rows.back().aggregate = statistic;
  }
  rows.push_back(cpu_row(1, "iteration", "failed"));
  Flags flags;
  flags.predict_from = saved_run("cpu_run_with_its_cpu_row.csv", rows);
  flags.links = {"10,20"};
  flags.devices = {"mpi:4"};
  const PredictedFromCsv got = predicted_from(flags, "speedup_over_ok_repetitions.csv");
  ASSERT_EQ(got.status, 0) << got.text;
  ASSERT_EQ(got.rows.size(), 1u);
  const Row& r = got.rows[0];
  const double over_500 = r.samples_per_s.value_or(NAN) / 500;
  EXPECT_NEAR(r.speedup_vs_cpu.value_or(NAN), over_500, 1e-4 * over_500);
  std::remove(flags.predict_from.c_str());
}

// A file's own predicted row is set beside its re-prediction with the change from it: the file's
// at half the rate is +100%; and with the model that made it where that is not this one.
TEST(PredictFromCsv, TheFilesOwnPredictionIsSetBesideItsRepredictionWithTheChange) {
  Flags flags;
  flags.predict_from = saved_run("cpu_run_predicted.csv", measured_rows());
  flags.links = {"10,20"};
  flags.devices = {"mpi:4"};
  const PredictedFromCsv first = predicted_from(flags, "repredicted_first.csv");
  ASSERT_EQ(first.rows.size(), 1u) << first.text;
  EXPECT_EQ(first.text.find("the file's own"), std::string::npos) << first.text;
  Row own = first.rows[0];
  own.samples_per_s = *own.samples_per_s / 2;
  { CsvWriter(flags.predict_from).write_row(own); }
  const PredictedFromCsv again = predicted_from(flags, "repredicted_again.csv");
  EXPECT_NE(again.text.find(fmt::format("    the file's own: {:.0f} samples/s, by this model (this prediction +100.0%)",
                                        *own.samples_per_s)),
            std::string::npos)
      << again.text;
  // Made by another model, it says which; by one before version 2 (which wrote none), that.
  for (const auto& [model, says] : std::vector<std::pair<Count, std::string>>{
           {parallel::kPredictionModel - 1, fmt::format("by model {} (", parallel::kPredictionModel - 1)},
           {std::nullopt, "by a model before version 2 (it did not say) ("}}) {
    own.prediction_model = model;
    { CsvWriter(flags.predict_from).write_row(own); }
    const PredictedFromCsv other = predicted_from(flags, "repredicted_other_model.csv");
    EXPECT_NE(other.text.find(fmt::format("    the file's own: {:.0f} samples/s, {}", *own.samples_per_s, says)),
              std::string::npos)
        << other.text;
  }
  std::remove(flags.predict_from.c_str());
}

// A prediction starts from one-device rows: a data-parallel row (its rate is N devices') is passed
// over, and an ok row at no rate is refused, naming it.
TEST(SavedRows, DataParallelRowsArePassedOverAndAnOkRowAtNoRateIsRefused) {
  const std::string good = format_prediction_inputs(measured_step(), 0, 0);
  std::vector<Row> rows = one_device_rows(good);
  for (Row r : one_device_rows(good)) {
    r.benchmark = "train/mlp/mnist/mpi:2/fp32/bs:100", r.device = "mpi:2", r.data_parallel = 2;
    rows.push_back(r);
  }
  const SavedRows saved = saved_one_device_rows(rows, ".", "--predict_from", "run.csv");
  EXPECT_EQ(saved.names, (std::vector<std::string>{"train/mlp/mnist/cpu:1/fp32/bs:100"}));
  rows[1].samples_per_s = 0;
  try {
    saved_one_device_rows(rows, ".", "--predict_from", "run.csv");
    ADD_FAILURE() << "a row at 0 samples/s was taken";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("train/mlp/mnist/cpu:1/fp32/bs:100: batch 100 at 0 samples/s"),
              std::string::npos)
        << e.what();
  }
}

TEST(PredictAllreduce, SaysTheSizeAndAPredictionPerDeviceCount) {
  Flags flags;
  flags.predict_allreduce = double(1 << 30);
  flags.devices = {"gpu:4", "gpu:8"};
  std::string text;
  {
    CapturedCout out;
    EXPECT_EQ(predict_allreduce(flags), 0);
    text = out.text();
  }
  EXPECT_NE(text.find("1 GiB (1,073,741,824 bytes)"), std::string::npos) << text;
  EXPECT_NE(text.find("gpu:4"), std::string::npos) << text;
  EXPECT_NE(text.find("gpu:8"), std::string::npos) << text;
  flags.devices = {"mpi:4"};
  EXPECT_THROW(predict_allreduce(flags), InputError) << "an mpi:N all-reduce runs over a measured link";
}

// An all-reduce predicted alone is NCCL's among GPUs: every --devices entry but gpu:N with N >= 2 is
// refused, naming it and offering gpu:N alone. One GPU, or one split into threads or jobs, shares
// no gradients with another; mpi:N was offered to a cpu:2 and then refused, and beside a gpu:N it
// was left out without a word.
TEST(PredictAllreduce, RefusesEveryEntryButGpusOfTheirOwn) {
  Flags flags;
  flags.predict_allreduce = 1e6;
  for (const std::vector<std::string>& devices : {std::vector<std::string>{"gpu:1"},
                                                  {"gpu:2/threads:2"},
                                                  {"gpu:1/jobs:2"},
                                                  {"cpu:2"},
                                                  {"mpi:1"},
                                                  {"mpi:4"},
                                                  {"gpu:8", "mpi:4"}}) {
    flags.devices = devices;
    CapturedCout out;
    try {
      predict_allreduce(flags);
      ADD_FAILURE() << fmt::format("{} predicted: {}", fmt::join(devices, ","), out.text());
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(fmt::format("--devices={}: with --predict_allreduce, give the devices to predict: gpu:N, "
                                      "N >= 2, e.g. --devices=gpu:8 (",
                                      devices.back())),
                std::string::npos)
          << what;
      EXPECT_EQ(what.find("mpi:N (from CPU rows)"), std::string::npos) << what;
    }
    EXPECT_EQ(out.text(), "") << "nothing predicted before the refusal";
  }
}

// Nor does it run ranks to sweep a link: --link=measured is refused, naming the flag.
TEST(PredictAllreduce, RefusesTheMeasuredLinkNamingItself) {
  Flags flags;
  flags.predict_allreduce = 1e6;
  flags.links = {"measured"};
  try {
    predict_allreduce(flags);
    ADD_FAILURE() << "predicted over --link=measured";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--link=measured: the measured link is the one a run's own ranks swept at "
                                         "start-up, and --predict_allreduce runs no ranks: give a preset"),
              std::string::npos)
        << e.what();
  }
}

// A size is said in the largest binary unit that divides it, else in bytes, digits grouped.
TEST(PredictAllreduce, SaysTheSizeInTheLargestUnitThatDividesIt) {
  Flags flags;
  flags.devices = {"gpu:2"};
  for (const auto& [bytes, says] : std::vector<std::pair<double, std::string>>{
           {1.5 * double(1 << 30), "of 1536 MiB (1,610,612,736 bytes) predicted"},
           {100000, "of 100,000 bytes predicted"},
           {4096, "of 4 KiB (4,096 bytes) predicted"}}) {
    flags.predict_allreduce = bytes;
    CapturedCout out;
    EXPECT_EQ(predict_allreduce(flags), 0);
    EXPECT_NE(out.text().find(says), std::string::npos) << out.text();
  }
}

// After the run there is no measured link: --link=measured is refused saying what to give.
TEST(PredictFromCsv, RefusesTheMeasuredLink) {
  Flags flags;
  flags.predict_from = saved_run("measured_link_run.csv", measured_rows());
  flags.links = {"measured"};
  CapturedCout out;
  try {
    predict_from_csv(flags, MachineContext{});
    ADD_FAILURE() << "predicted over --link=measured after the run";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--link=measured: the measured link is the one a run's own ranks swept at "
                                         "start-up, and --predict_from runs no ranks"),
              std::string::npos)
        << e.what();
  }
  std::remove(flags.predict_from.c_str());
}

// --nodes, --network and --gpus_per_node shape --predict_from's rows: 1 and 2 GPUs a node on 2
// nodes, over each network given, the row saying its nodes and network.
TEST(PredictFromCsv, SpreadsTheDevicesOverTheFlagsNodes) {
  std::vector<Row> rows = measured_rows();
  for (Row& r : rows) r.backend = "gpu", r.device = "gpu:1", r.benchmark = "train/mlp/mnist/gpu:1/fp32/bs:100";
  Flags flags;
  flags.predict_from = saved_run("gpu_run_on_nodes.csv", rows);
  flags.nodes = 2;
  flags.networks = {"100gbe", "25gbe"};
  flags.gpus_per_node = 2;
  const PredictedFromCsv got = predicted_from(flags, "predicted_on_nodes.csv");
  ASSERT_EQ(got.status, 0) << got.text;
  std::vector<std::string> names;
  for (const Row& r : got.rows) names.push_back(r.benchmark);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "train/mlp/mnist/gpu:2/fp32/bs:100/nodes:2/predicted:nvlink4/network:100gbe/from:gpu:1",
                       "train/mlp/mnist/gpu:4/fp32/bs:100/nodes:2/predicted:nvlink4/network:100gbe/from:gpu:1",
                       "train/mlp/mnist/gpu:2/fp32/bs:100/nodes:2/predicted:nvlink4/network:25gbe/from:gpu:1",
                       "train/mlp/mnist/gpu:4/fp32/bs:100/nodes:2/predicted:nvlink4/network:25gbe/from:gpu:1"}));
  std::remove(flags.predict_from.c_str());
}

// A file's own predicted row is set beside its re-prediction, not that row's aggregates that
// follow it in the file (a standard deviation).
TEST(PredictFromCsv, SetsTheFilesOwnIterationRowBesideItsReprediction) {
  Flags flags;
  flags.predict_from = saved_run("cpu_run_with_aggregates.csv", measured_rows());
  flags.links = {"10,20"};
  flags.devices = {"mpi:4"};
  const PredictedFromCsv first = predicted_from(flags, "repredicted_with_aggregates.csv");
  ASSERT_EQ(first.rows.size(), 1u) << first.text;
  Row own = first.rows[0], stddev = first.rows[0];
  stddev.run_type = "aggregate", stddev.aggregate = "stddev", stddev.samples_per_s = 3;
  {
    CsvWriter csv(flags.predict_from);
    csv.write_row(own);
    csv.write_row(stddev);
  }
  const PredictedFromCsv again = predicted_from(flags, "repredicted_with_aggregates_again.csv");
  EXPECT_NE(again.text.find(fmt::format("    the file's own: {:.0f} samples/s, by this model (this prediction +0.0%)",
                                        *own.samples_per_s)),
            std::string::npos)
      << again.text;
  std::remove(flags.predict_from.c_str());
}

// The same prediction read back from the file reads +0.0% where the CSV rounded the file's figure
// up: the two are compared as the CSV holds them (the fresh one unrounded read -0.0%).
TEST(PredictFromCsv, TheSamePredictionReadBackReadsNoChangeWhereTheCsvRoundedItUp) {
  PredictionPlan plan;
  plan.links = {parallel::parse_link("10,20")};
  plan.counts = {4};
  std::vector<Row> rows;
  bool rounded_up = false;
  for (double rate = 1000; rate < 1100 && !rounded_up; ++rate) {
    rows = measured_rows();
    for (Row& r : rows) r.samples_per_s = rate;
    const double fresh = *predict_rows(pointers(rows), plan, MachineContext{})[0].row.samples_per_s;
    rounded_up = as_written(fresh) > fresh;
  }
  ASSERT_TRUE(rounded_up) << "the test needs a prediction the CSV rounds up";
  Flags flags;
  flags.predict_from = saved_run("cpu_run_rounded_up.csv", rows);
  flags.links = {"10,20"};
  flags.devices = {"mpi:4"};
  const PredictedFromCsv first = predicted_from(flags, "rounded_up_first.csv");
  ASSERT_EQ(first.rows.size(), 1u) << first.text;
  { CsvWriter(flags.predict_from).write_row(first.rows[0]); }
  const PredictedFromCsv again = predicted_from(flags, "rounded_up_again.csv");
  EXPECT_NE(again.text.find("by this model (this prediction +0.0%)"), std::string::npos) << again.text;
  std::remove(flags.predict_from.c_str());
}

// --predict_allreduce spreads the GPUs over --nodes, between them --network.
TEST(PredictAllreduce, SpreadsTheGpusOverTheFlagsNodes) {
  Flags flags;
  flags.predict_allreduce = 1e6;
  flags.devices = {"gpu:16"};
  flags.nodes = 2;
  flags.networks = {"100gbe"};
  CapturedCout out;
  EXPECT_EQ(predict_allreduce(flags), 0);
  EXPECT_NE(out.text().find("  gpu:16 on 2 nodes over nvlink4 and 100gbe: "), std::string::npos) << out.text();
}

// The default counts are 2, 4 and 8 GPUs, a line each; a line's figures are the model's, as
// nccl-tests says them: the time with its band (fast to slow), busbw = algbw x 2(N-1)/N with its
// band (slow to fast), algbw = bytes / time.
TEST(PredictAllreduce, SaysTheModelsTimeAndBusbwWithTheirBands) {
  PredictionPlan plan;
  plan.links = {parallel::parse_link("nvlink4"), parallel::parse_link("100:80-110,20")};
  const double bytes = double(1 << 30);
  const std::vector<std::string> lines = predict_allreduce_lines(bytes, plan);
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_EQ(lines[0].rfind("  gpu:2 over nvlink4: ", 0), 0u) << lines[0];
  EXPECT_EQ(lines[2].rfind("  gpu:8 over nvlink4: ", 0), 0u) << lines[2];
  // A link whose band has both ends (nvlink4's fast end is its point).
  const parallel::Cluster eight{.devices = 8, .link = parallel::parse_link("100:80-110,20")};
  const parallel::AllReduce point = parallel::all_reduce(bytes, eight);
  const double slow = parallel::all_reduce(bytes, eight, parallel::End::Slow).s,
               fast = parallel::all_reduce(bytes, eight, parallel::End::Fast).s;
  ASSERT_TRUE(fast < point.s && point.s < slow) << "the test needs a band";
  const auto busbw = [&](double s) { return 2.0 * 7 / 8 * bytes / s / 1e9; };
  EXPECT_EQ(lines[5], fmt::format("  gpu:8 over custom: {:.4g} ms ({:.4g} to {:.4g}), {}; busbw {:.4g} GB/s ({:.4g} "
                                  "to {:.4g}), algbw {:.4g} GB/s",
                                  point.s * 1e3, fast * 1e3, slow * 1e3, point.algorithm, busbw(point.s), busbw(slow),
                                  busbw(fast), bytes / point.s / 1e9));
}

// --replay_from plans an mpi:N benchmark of this world's ranks per saved one-device row, at the
// median of its repetitions' rates, with the row's optimizer and at least one thread, its
// prediction_inputs and the world's ranks as its data-parallel count; in a world of one rank it is
// skipped, saying how to start it.
TEST(PlanReplays, ReplayEachSavedRowOnTheWorldsRanks) {
  std::vector<Row> rows = measured_rows();
  rows.push_back(rows[1]);
  rows.back().samples_per_s = 1700;  // 1000, 1200 and 1700: median 1200, mean 1300
  for (Row& r : rows) r.threads = 0, r.optimizer = "adam";
  Flags flags;
  flags.replay_from = saved_run("replayed_run.csv", rows);
  const std::vector<BenchInfo> planned = plan_replays(flags);
  ASSERT_EQ(planned.size(), 1u);
  const BenchInfo& b = planned[0];
  EXPECT_EQ(b.name, "train/mlp/mnist/mpi:1/fp32/bs:100/replayed");
  EXPECT_EQ(b.device, "mpi:1");
  EXPECT_EQ(b.threads, 1) << "a row of no threads replays on one";
  EXPECT_EQ(b.optimizer.kind, OptimizerConfig::Kind::Adam);
  EXPECT_EQ(b.baseline, "train/mlp/mnist/cpu:1/fp32/bs:100");
  EXPECT_EQ(b.data_parallel, 1) << "the world's ranks, as its device says";
  ASSERT_TRUE(b.replay);
  EXPECT_EQ(b.replay->rows.size(), 3u);
  EXPECT_EQ(b.replay->inputs, rows.back().prediction_inputs) << "the steps it replays";
  EXPECT_DOUBLE_EQ(b.replay->samples_per_s, 1200);
  EXPECT_NE(b.skip_reason.find("start it with mpirun -np N (N >= 2)"), std::string::npos) << b.skip_reason;
  EXPECT_EQ(b.skip_scope, "mpi:1");
  std::remove(flags.replay_from.c_str());
}

// Rows of one workload on two devices (cpu and cpu:1) would replay as one benchmark: refused,
// naming both.
TEST(PlanReplays, RefuseTwoRowsThatReplayAsOne) {
  std::vector<Row> rows = measured_rows();
  for (Row r : measured_rows()) {
    r.benchmark = "train/mlp/mnist/cpu/fp32/bs:100", r.device = "cpu";
    rows.push_back(r);
  }
  Flags flags;
  flags.replay_from = saved_run("replayed_twice.csv", rows);
  try {
    plan_replays(flags);
    ADD_FAILURE() << "two rows replayed as one";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("train/mlp/mnist/cpu:1/fp32/bs:100 and train/mlp/mnist/cpu/fp32/bs:100 both "
                                         "replay as train/mlp/mnist/mpi:1/fp32/bs:100/replayed"),
              std::string::npos)
        << e.what();
  }
  std::remove(flags.replay_from.c_str());
}

// A --summary that cannot be written fails the run (exit status 1), saying where.
TEST(PredictFromCsv, FailsWhereTheSummaryCannotBeWritten) {
  Flags flags;
  flags.predict_from = saved_run("cpu_run_for_summary.csv", measured_rows());
  flags.links = {"10,20"};
  flags.devices = {"mpi:4"};
  flags.summary = ::testing::TempDir() + "no_such_folder/summary.md";
  const PredictedFromCsv got = predicted_from(flags, "summary_not_written.csv");
  EXPECT_EQ(got.status, 1) << got.text;
  std::remove(flags.predict_from.c_str());
}

}  // namespace
}  // namespace tb::bench
