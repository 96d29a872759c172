// The output stage (bench/output/) and the schema it writes (bench/schema/): the row's fields
// and columns, counters, verdicts, the row log, the CSV writer and reader, the summary table and
// the console.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench/output/csv.hpp"
#include "bench/output/rows.hpp"
#include "bench/output/summary.hpp"
#include "bench/run/harness.hpp"
#include "bench/run/reporter.hpp"
#include "bench/schema/columns.hpp"
#include "engine/core/error.hpp"
#include "telemetry/sampler.hpp"

namespace tb::bench {
namespace {

// ---- counters ----

// A counter whose name is no column would vanish from every row: it is an error where it is
// written, naming it.
TEST(Counters, OneThatIsNoColumnStopsTheRowNamingIt) {
  Row row;
  add_counters(row, {{"samples_per_s", 1234.5}, {"val_acc", -1}, {"train_acc", 0.5}});
  EXPECT_EQ(row.samples_per_s, 1234.5);
  EXPECT_FALSE(row.val_acc) << "-1: a regression task has no accuracy";
  EXPECT_EQ(row.train_acc, 0.5);
  try {
    add_counters(row, {{"samples_per_sec", 1}});
    ADD_FAILURE() << "a misspelt counter was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("counter 'samples_per_sec'"), std::string::npos);
  }
  EXPECT_THROW(add_counters(row, {{"benchmark", 1}}), Error);  // an identity column is no counter
  // An iteration row names the mask's bits (aggregate rows leave it out: RowLog's test).
  add_counters(row, {{"gpu_throttle", 0}});
  EXPECT_EQ(row.gpu_throttle, telemetry::throttle_reason_names(0));
}

// Only a negative value of a column whose negative means none is none: an accuracy of 0 is a
// figure, a negative loss is kept, and a target never reached (-1) is none.
TEST(Counters, OnlyANegativeOfAColumnWhoseNegativeMeansNoneIsNone) {
  Row row;
  add_counters(row, {{"val_acc", 0}, {"loss_first", -0.5}, {"time_to_target_s", -1}});
  EXPECT_EQ(row.val_acc, 0.0) << "an accuracy of 0 is a figure";
  EXPECT_EQ(row.loss_first, -0.5);
  EXPECT_FALSE(row.time_to_target_s) << "-1: the target was never reached";
}

// ---- the row's fields and the table of columns made from them ----

TEST(Columns, AreTheRowsFieldsInTheCsvsOrderEachCellWrittenAsItsType) {
  ASSERT_EQ(columns().size(), csv_columns().size());
  EXPECT_EQ(csv_columns().front(), "schema_version");
  EXPECT_EQ(csv_columns().back(), "window_samples_per_s");
  std::set<std::string> names(csv_columns().begin(), csv_columns().end());
  EXPECT_EQ(names.size(), csv_columns().size()) << "a column declared twice";
  Row row;
  row.benchmark = "train/x";
  row.threads = 16;
  row.samples_per_s = 1796010.4;
  row.val_acc = 0.25;
  for (const Column& c : columns()) {
    const std::string cell = c.cell(row);
    if (c.name == std::string_view("benchmark"))
      EXPECT_EQ(cell, "train/x");
    else if (c.name == std::string_view("threads"))
      EXPECT_EQ(cell, "16");
    else if (c.name == std::string_view("samples_per_s"))
      EXPECT_EQ(cell, "1.79601e+06") << "{:.6g}";
    else if (c.name == std::string_view("val_acc"))
      EXPECT_EQ(cell, "0.25");
    else
      EXPECT_EQ(cell, "") << c.name << ": a field never set is an empty cell";
  }
  // Each column reads its own text back, and refuses a cell not of its type.
  Row back;
  for (const Column& c : columns()) EXPECT_TRUE(c.set(back, c.cell(row))) << c.name;
  for (const Column& c : columns()) EXPECT_EQ(c.cell(back), c.cell(row)) << c.name;
  const auto column = [](std::string_view name) {
    const Column* c = column_named(name);
    EXPECT_NE(c, nullptr) << name;
    return c ? *c : columns().front();
  };
  EXPECT_FALSE(column("threads").set(back, "16.5"));
  EXPECT_TRUE(column("params").set(back, "1.79601e+06")) << "a count some older files wrote as a number";
  EXPECT_EQ(back.params, 1796010);
  EXPECT_FALSE(column("samples_per_s").set(back, "fast"));
  EXPECT_EQ(back.samples_per_s, 1796010.0) << "its cell's six digits; a refused cell leaves the field as it was";
  EXPECT_EQ(column("samples_per_s").value(row), 1796010.4);
  EXPECT_EQ(column("threads").value(row), 16.0);
  EXPECT_FALSE(column("benchmark").value(row)) << "a text has no value";
  // The console's columns, with their units.
  EXPECT_TRUE(column("samples_per_s").on_console);
  EXPECT_EQ(std::string(column("utilisation").console_name), "util %");
  EXPECT_EQ(column("utilisation").console_scale, 100);
  EXPECT_FALSE(column("gpu_throttle").aggregates);
  EXPECT_TRUE(column("val_acc").negative_is_none);
  EXPECT_FALSE(column("samples_per_s").negative_is_none);
  EXPECT_EQ(column_named("samples_per_sec"), nullptr);
}

// The counters the console shows, each with its header and the factor from the CSV's value.
TEST(Columns, TheConsoleShowsItsCountersWithTheirUnits) {
  std::vector<std::string> shown;
  for (const Column& c : columns())
    if (c.on_console) shown.push_back(fmt::format("{}: {} x{}", c.name, c.console_name, c.console_scale));
  EXPECT_EQ(shown, (std::vector<std::string>{"samples_per_s: samples/s x1", "model_tflops: TFLOP/s x1",
                                             "utilisation: util % x100", "host_cpu_util: CPU cores x1",
                                             "loss_last: loss x1", "val_loss: val loss x1", "val_acc: val acc % x100",
                                             "elapsed_s: elapsed s x1", "gpu_util: GPU util % x1"}));
}

// An empty cell is none, whatever the field held; a count written as a number is taken only
// where a double holds it whole (up to 9e15), so one past int64 is refused, not wrapped.
TEST(Columns, AnEmptyCellIsNoneAndACountPastADoublesWholeNumbersIsRefused) {
  Row row;
  row.params = 5, row.samples_per_s = 2;
  EXPECT_FALSE(column_named("params")->set(row, "1e20"));
  EXPECT_EQ(row.params, 5);
  EXPECT_TRUE(column_named("params")->set(row, ""));
  EXPECT_FALSE(row.params);
  EXPECT_TRUE(column_named("samples_per_s")->set(row, ""));
  EXPECT_FALSE(row.samples_per_s);
}

// A column's value is none where its cell is empty: a count never set is none, not 0, as a
// number never set is.
TEST(Columns, AnEmptyCountOrNumberHasNoValue) {
  const Row row;
  EXPECT_FALSE(column_named("threads")->value(row).has_value());
  EXPECT_FALSE(column_named("samples_per_s")->value(row).has_value());
}

// ---- verdicts ----

TEST(Verdicts, AreWordsOfTheTableJoinedOnce) {
  EXPECT_EQ(verdicts_cell({}), "");
  EXPECT_EQ(verdicts_cell({"loaded", "outside_band", "loaded"}), "loaded+outside_band");
  EXPECT_THROW(verdicts_cell({"slow"}), Error) << "a word the table lacks is a misspelling";
}

// ---- the summary: the rows' own figures, rendered ----

Row summary_row(const std::string& device, const std::string& precision, std::int64_t batch, double rate) {
  Row r;
  r.kind = "train", r.status = "ok", r.run_type = "iteration", r.model = "resnet152", r.dataset = "imagenet";
  r.device = device, r.precision = precision, r.batch = batch, r.samples_per_s = rate, r.measurement = "measured";
  return r;
}

// x cpu is the row's speedup_vs_cpu with its speedup_differs: the summary computes nothing.
TEST(Summary, ShowsTheRowsOwnSpeedupAndWhatDiffers) {
  Row cpu = summary_row("cpu", "fp32", 8, 12);
  Row fp32 = summary_row("gpu:1", "fp32", 128, 396);
  fp32.speedup_vs_cpu = 33;
  fp32.speedup_differs = "bs 128 vs 8";
  Row bf16 = summary_row("gpu:1", "bf16", 128, 2244);
  bf16.speedup_vs_cpu = 187;
  bf16.speedup_differs = "bf16 vs fp32, bs 128 vs 8";
  const std::string text = summary_table({cpu, fp32, bf16}, false);
  EXPECT_NE(text.find("33.00x (bs 128 vs 8)"), std::string::npos) << text;
  EXPECT_NE(text.find("187.00x (bf16 vs fp32, bs 128 vs 8)"), std::string::npos) << text;
  // Rows without the column (a GPU row whose cpu row did not run) have no x cpu column at all.
  const std::string none = summary_table({summary_row("gpu:1", "fp32", 128, 50)}, false);
  EXPECT_EQ(none.substr(0, none.find('\n')).find("x cpu"), std::string::npos) << none;
}

TEST(Summary, EfficiencyAndCommShareAreTheRowsOwn) {
  Row one = summary_row("gpu:1", "fp32", 128, 100);
  Row two = summary_row("gpu:2", "fp32", 128, 150);
  two.data_parallel = 2;
  two.scaling_efficiency = 0.75;
  two.comm_share = 0.2;
  const std::string text = summary_table({one, two}, false);
  EXPECT_NE(text.find("gpu:2 efficiency"), std::string::npos) << text;
  EXPECT_NE(text.find("75%"), std::string::npos) << text;
  EXPECT_NE(text.find("20%"), std::string::npos) << text;
  EXPECT_EQ(text.find("gpu:1 efficiency"), std::string::npos) << text;
}

// A line's rate is the median of its ok repetitions (plain digits from 10000 up, four significant
// figures below); a failed repetition and an epochs/ benchmark's row are no figure of the table.
TEST(Summary, ARateIsTheMedianOfTheOkTrainRepetitions) {
  std::vector<Row> rows;
  for (double rate : {1234.56, 2000.0, 90000.0}) rows.push_back(summary_row("cpu", "fp32", 8, rate));
  Row failed = summary_row("cpu", "fp32", 8, 5);
  failed.status = "failed";
  rows.push_back(failed);
  Row fast = summary_row("cpu", "fp32", 8, 12345.6);
  fast.model = "lstm", fast.dataset = "sine";
  rows.push_back(fast);
  Row epochs = summary_row("cpu", "fp32", 8, 7);
  epochs.kind = "epochs", epochs.model = "lenet5", epochs.dataset = "cifar10";
  rows.push_back(epochs);
  const std::string text = summary_table(rows, false);
  const auto line_of = [&](const std::string& workload) {
    const std::size_t at = text.find(workload);
    return at == std::string::npos ? std::string() : text.substr(at, text.find('\n', at) - at);
  };
  EXPECT_NE(line_of("resnet152/imagenet").find(" 2000 "), std::string::npos) << text;
  EXPECT_NE(line_of("lstm/sine").find(" 12346 "), std::string::npos) << text;
  EXPECT_EQ(text.find("lenet5"), std::string::npos) << text;
}

// Peak GiB: a GPU row's device memory where it has one (its resident set is the host's), else
// the resident set; in GiB.
TEST(Summary, PeakIsTheDeviceMemoryInGibWhereARowHasIt) {
  Row gpu = summary_row("gpu:1", "fp32", 128, 100);
  gpu.mem_peak_bytes = 2.0 * (1 << 30), gpu.peak_rss_bytes = 3.0 * (1 << 30);
  const std::string text = summary_table({gpu}, false);
  EXPECT_NE(text.find(" 2.00\n"), std::string::npos) << text;
  Row cpu = summary_row("cpu", "fp32", 8, 10);
  cpu.peak_rss_bytes = 1.5 * (1 << 30);
  const std::string rss = summary_table({cpu}, false);
  EXPECT_NE(rss.find(" 1.50\n"), std::string::npos) << rss;
}

// N replicas sharing one GPU are a correctness check, not scaling: their column says so, and the
// variant word that names them is no part of the workload.
TEST(Summary, ReplicasSharingOneGpuAreTheirOwnColumnOfTheSameWorkload) {
  Row shared = summary_row("gpu:2", "fp32", 128, 150);
  shared.shared_device = 1;
  shared.variant = "shared_device";
  Row graph = summary_row("gpu:1", "fp32", 128, 120);
  graph.variant = "cuda_graph/shared_device";
  const std::string text = summary_table({summary_row("gpu:1", "fp32", 128, 100), shared, graph}, false);
  EXPECT_NE(text.find("gpu:2 (one GPU) samples/s"), std::string::npos) << text;
  EXPECT_NE(text.find("resnet152/imagenet [cuda_graph]"), std::string::npos) << text;
  EXPECT_EQ(text.find("shared_device"), std::string::npos) << text;
}

// The text table aligns the workload left and figures right; the Markdown one says the same in
// its separator line.
TEST(Summary, TextAndMarkdownAlignWorkloadsLeftAndFiguresRight) {
  Row row = summary_row("cpu", "fp32", 8, 12);
  row.peak_rss_bytes = 1 << 30;
  const std::string text = summary_table({row}, false);
  EXPECT_EQ(text.rfind("workload            precision  cpu samples/s  peak GiB\n", 0), 0u) << text;
  const std::string markdown = summary_table({row}, true);
  EXPECT_NE(markdown.find("| workload | precision | cpu samples/s | peak GiB |\n| --- | --- | ---: | ---: |\n"),
            std::string::npos)
      << markdown;
}

// Each skip reason once, however many rows give it; a reason about the device as it is, any
// other with the device and precision it is about.
TEST(Summary, EachSkipReasonIsOneLineNamingItsDevice) {
  Row gpu = summary_row("gpu:1", "fp32", 128, 0);
  gpu.samples_per_s.reset();
  gpu.status = "skipped", gpu.message = "skipped: gpu:1: no CUDA device";
  Row other_model = gpu;
  other_model.model = "lstm";
  Row bf16 = gpu;
  bf16.device = "cpu", bf16.precision = "bf16", bf16.message = "skipped: this CPU lacks avx512_bf16";
  const std::string text = summary_table({gpu, other_model, bf16}, false);
  EXPECT_EQ(text, "skipped:\n  gpu:1: no CUDA device\n  cpu bf16: this CPU lacks avx512_bf16\n");
}

// The figures at their edges: a rate of 10000 is plain digits, one of 0 is shown, a NaN is none;
// a row with no memory figure leaves peak GiB empty; an aggregate row is no repetition.
TEST(Summary, RatesAtTheirEdgesAndAggregateRowsAreNoRepetition) {
  Row plain = summary_row("cpu", "fp32", 8, 10000);
  Row zero = summary_row("cpu", "fp32", 8, 0);
  zero.model = "lstm", zero.dataset = "sine";
  Row nan = summary_row("cpu", "fp32", 8, NAN);
  nan.model = "mlp", nan.dataset = "mnist";
  Row mean = summary_row("cpu", "fp32", 8, 50000);
  mean.run_type = "aggregate", mean.aggregate = "mean";
  const std::string text = summary_table({plain, zero, nan, mean}, false);
  EXPECT_EQ(text.substr(0, text.find("samples/s:")),
            "workload            precision  cpu samples/s  peak GiB\n"
            "lstm/sine                fp32              0          \n"
            "mlp/mnist                fp32                         \n"
            "resnet152/imagenet       fp32          10000          \n");
}

// Each of a line's columns is the median of its rows (speed-up and efficiency too), and peak
// GiB is the largest over every column of the line.
TEST(Summary, EveryFigureIsTheMedianOfItsRowsAndPeakTheLinesLargest) {
  std::vector<Row> rows;
  for (double x : {2.0, 3.0, 10.0}) {
    Row r = summary_row("gpu:2", "fp32", 128, 100 * x);
    r.data_parallel = 2, r.speedup_vs_cpu = x, r.scaling_efficiency = x / 10;
    r.mem_peak_bytes = 1.0 * (1 << 30);
    rows.push_back(r);
  }
  Row one = summary_row("gpu:1", "fp32", 128, 120);
  one.data_parallel = 1;  // a one-device row: no efficiency column of its own
  one.mem_peak_bytes = 3.0 * (1 << 30);
  rows.push_back(one);
  const std::string text = summary_table(rows, false);
  const std::string line =
      text.substr(text.find("resnet152"), text.find('\n', text.find("resnet152")) - text.find("resnet152"));
  EXPECT_EQ(line,
            "resnet152/imagenet       fp32              300              120        3.00x               30%      3.00")
      << text;
  EXPECT_EQ(text.find("gpu:1 efficiency"), std::string::npos) << text;
}

// One reason on two devices is a line for each; the Markdown summary has its title and a
// heading for the skipped configurations.
TEST(Summary, OneReasonOnTwoDevicesIsTwoLinesAndMarkdownHasItsHeadings) {
  Row cpu = summary_row("cpu", "bf16", 8, 0);
  cpu.status = "skipped", cpu.message = "skipped: this CPU lacks avx512_bf16";
  Row threads = cpu;
  threads.device = "cpu:2";
  EXPECT_EQ(summary_table({cpu, threads}, false),
            "skipped:\n  cpu bf16: this CPU lacks avx512_bf16\n  cpu:2 bf16: this CPU lacks avx512_bf16\n");
  EXPECT_EQ(summary_table({cpu}, true),
            "# trainbench summary\n\n\n## Skipped\n\n- cpu bf16: this CPU lacks avx512_bf16\n");
}

// A run of predicted rows alone (--predict_from) has a summary: a line per link, a pair of
// columns per N in increasing N, each rate with its band where the row has both ends.
TEST(Summary, PredictedRowsAloneAreATableByLinkAndN) {
  const auto predicted = [](const std::string& device, double rate, Number low, Number high) {
    Row r = summary_row(device, "fp32", 128, rate);
    r.measurement = "predicted", r.predicted_from = "train/x", r.link = "custom";
    r.link_busbw_gbps = 10, r.scaling_efficiency = 0.9;
    r.samples_per_s_low = low, r.samples_per_s_high = high;
    return r;
  };
  const std::string text =
      summary_table({predicted("mpi:10", 66.3, 62.1, 70.4), predicted("mpi:2", 120, 100, std::nullopt)}, false);
  EXPECT_NE(text.find("predicted N-device scaling"), std::string::npos) << text;
  EXPECT_LT(text.find("N=2 samples/s"), text.find("N=10 samples/s")) << text;
  EXPECT_NE(text.find("66.3 (62.1-70.4)"), std::string::npos) << text;
  EXPECT_EQ(text.find("120 ("), std::string::npos) << "a band with one end is no band:\n" << text;
}

// A line per source row and link, the nodes and network of a two-level prediction in its link,
// each N's efficiency in percent.
TEST(Summary, PredictedLinesAreBySourceAndLinkWithTheirNetworkAndEfficiency) {
  const auto predicted = [](const std::string& from, const std::string& device, double efficiency) {
    Row r = summary_row(device, "fp32", 128, 100);
    r.measurement = "predicted", r.predicted_from = from, r.link = "nvlink";
    r.link_busbw_gbps = 300, r.scaling_efficiency = efficiency;
    return r;
  };
  Row two_nodes = predicted("train/a", "gpu:16", 0.5);
  two_nodes.network = "ib", two_nodes.nodes = 2, two_nodes.network_busbw_gbps = 25;
  const std::string text =
      summary_table({predicted("train/a", "gpu:8", 0.875), two_nodes, predicted("train/b", "gpu:8", 0.25)}, false);
  const std::size_t from = text.find("from ");
  ASSERT_NE(from, std::string::npos) << text;
  EXPECT_EQ(
      text.substr(from, text.find("samples/s predicted") - from),
      "from                                                  link  N=8 samples/s  N=8 efficiency  N=16 samples/s  "
      "N=16 efficiency\n"
      "train/a                                  nvlink (300 GB/s)            100             88%                 "
      "                \n"
      "train/a  nvlink (300 GB/s) + 2 nodes, ib (25 GB/s per NIC)                                            100 "
      "             50%\n"
      "train/b                                  nvlink (300 GB/s)            100             25%                 "
      "                \n");
}

// A line's rate is the median of the repetitions that have one: a repetition whose rate is NaN
// (none) is left out of it, not counted as -1 (which made the median of 100, NaN and 200 read
// 100, and of 100 and NaN 49.5).
TEST(Summary, ARepetitionWithoutARateIsNoPartOfTheMedian) {
  const std::string text = summary_table(
      {summary_row("cpu", "fp32", 8, 100), summary_row("cpu", "fp32", 8, NAN), summary_row("cpu", "fp32", 8, 200)},
      false);
  EXPECT_NE(text.find("resnet152/imagenet       fp32            150"), std::string::npos) << text;
}

// A reason that names its device further in (not at its start) is about this precision on it,
// and says so as any other.
TEST(Summary, ASkipReasonNamingItsDeviceInsideIsStillPrefixedWithIt) {
  Row row = summary_row("cpu", "bf16", 8, 0);
  row.status = "skipped", row.message = "skipped: bf16 on cpu needs avx512_bf16";
  EXPECT_EQ(summary_table({row}, false), "skipped:\n  cpu bf16: bf16 on cpu needs avx512_bf16\n");
}

// An efficiency or a communication share of 0 is a figure: it is shown (0%), not left blank.
TEST(Summary, AnEfficiencyOrCommShareOfZeroIsShown) {
  Row two = summary_row("gpu:2", "fp32", 128, 150);
  two.data_parallel = 2, two.scaling_efficiency = 0, two.comm_share = 0;
  const std::string text = summary_table({two}, false);
  EXPECT_NE(text.find("gpu:2 comm share"), std::string::npos) << text;
  const std::size_t at = text.find("resnet152");
  const std::string line = text.substr(at, text.find('\n', at) - at);
  EXPECT_EQ(std::count(line.begin(), line.end(), '%'), 2) << text;
  EXPECT_NE(line.find(" 0%  "), std::string::npos) << text;
}

// The comm share of a line is the median of its rows' (as every figure), and its column is there
// only where a row has one: a data-parallel row without it has an efficiency column alone.
TEST(Summary, CommShareIsTheMedianAndItsColumnOnlyWhereARowHasOne) {
  std::vector<Row> rows;
  for (double share : {0.9, 0.3, 0.1, 0.5, 0.2}) {  // neither the first, the middle nor the last
    Row r = summary_row("gpu:2", "fp32", 128, 100);
    r.data_parallel = 2, r.comm_share = share;
    rows.push_back(r);
  }
  const std::string text = summary_table(rows, false);
  EXPECT_NE(text.find(" 30%"), std::string::npos) << text;
  for (const char* other : {" 90%", " 10%", " 20%"}) EXPECT_EQ(text.find(other), std::string::npos) << text;
  Row quiet = summary_row("gpu:2", "fp32", 128, 100);
  quiet.data_parallel = 2, quiet.scaling_efficiency = 0.5;
  const std::string header = summary_table({quiet}, false);
  EXPECT_EQ(header.substr(0, header.find('\n')).find("comm share"), std::string::npos) << header;
}

// Peak GiB: the largest over a column's repetitions, not the last; a row whose device memory is 0
// (none allocated) shows its resident set.
TEST(Summary, PeakIsTheLargestOfAColumnsRepetitionsAndAZeroDevicePeakIsNone) {
  Row big = summary_row("cpu", "fp32", 8, 10);
  big.peak_rss_bytes = 2.0 * (1 << 30);
  Row small = big;
  small.peak_rss_bytes = 1.0 * (1 << 30);
  const std::string text = summary_table({big, small}, false);
  EXPECT_NE(text.find(" 2.00\n"), std::string::npos) << text;
  Row zero = summary_row("cpu", "fp32", 8, 10);
  zero.mem_peak_bytes = 0, zero.peak_rss_bytes = 1.5 * (1 << 30);
  const std::string rss = summary_table({zero}, false);
  EXPECT_NE(rss.find(" 1.50\n"), std::string::npos) << rss;
}

// A replayed row (measured steps standing for a saved row's) names the row it replays in
// predicted_from, yet is measured: it is a figure of the measured table, not of the predictions.
TEST(Summary, AReplayedRowIsMeasuredNotPredicted) {
  Row replayed = summary_row("mpi:2", "fp32", 128, 80);
  replayed.measurement = "replayed", replayed.predicted_from = "train/resnet152/imagenet/gpu:1/fp32/bs:128";
  const std::string text = summary_table({replayed}, false);
  EXPECT_EQ(text.find("predicted N-device scaling"), std::string::npos) << text;
  EXPECT_NE(text.find("mpi:2 samples/s"), std::string::npos) << text;
}

// ---- the row log ----

BenchInfo mlp_info() {
  BenchInfo b;
  b.name = "train/mlp/mnist/cpu:1/fp32/bs:100";
  b.model = "mlp";
  b.dataset = "mnist";
  b.device = "cpu:1";
  b.precision = "fp32";
  b.batch = 100;
  b.threads = 1;
  return b;
}

// A repetition's figures: its samples/s, and its step time and train accuracy where given.
Row figures(double samples_per_s, Number step_time_s = std::nullopt, Number train_acc = std::nullopt) {
  Row r;
  r.samples_per_s = samples_per_s;
  r.step_time_s = step_time_s;
  r.train_acc = train_acc;
  return r;
}

// Google Benchmark's statistics over the ok repetitions: mean, median, the sample standard
// deviation and the coefficient of variation, in every counter column.
TEST(RowLog, AggregatesAreGoogleBenchmarksStatisticsOfTheRepetitions) {
  const MachineContext machine;
  std::ostringstream notes;
  RowLog log(machine, nullptr, notes);
  const BenchInfo info = mlp_info();
  for (double rate : {1.0, 2.0, 3.0, 4.0}) {
    Row f = figures(rate);
    f.gpu_throttle = telemetry::throttle_reason_names(4);
    log.repetition(info, Measurement{.figures = f, .steps = 5});
  }
  log.repetition(info, Measurement{.status = "failed", .message = "loss rose"});
  log.aggregates(info);
  std::map<std::string, double> got;
  int iterations = 0;
  for (const Row* r : log.rows_of(info.name)) {
    if (r->run_type == "aggregate") {
      got[r->aggregate] = r->samples_per_s.value_or(NAN);
      // A bit mask means nothing averaged: aggregate rows leave it out.
      EXPECT_EQ(r->gpu_throttle, "") << r->aggregate;
    }
    if (r->run_type == "iteration") {
      EXPECT_EQ(r->repetition, iterations++);
    }
  }
  EXPECT_EQ(iterations, 5);
  EXPECT_NEAR(got.at("mean"), 2.5, 1e-9);
  EXPECT_NEAR(got.at("median"), 2.5, 1e-9);
  EXPECT_NEAR(got.at("stddev"), std::sqrt(5.0 / 3.0), 1e-5);
  EXPECT_NEAR(got.at("cv"), std::sqrt(5.0 / 3.0) / 2.5, 1e-5);
}

// What is made of the run's rows (the summary, aggregates, predictions) is what a reader of the
// CSV would make of them: the log keeps each row's numbers as their cells read back.
TEST(RowLog, KeepsRowsAsTheCsvHoldsThem) {
  const MachineContext machine;
  std::ostringstream notes;
  RowLog log(machine, nullptr, notes);
  const Row kept = log.repetition(mlp_info(), Measurement{.figures = figures(13561.4649, 0.00737387512), .steps = 5});
  EXPECT_EQ(kept.samples_per_s, 13561.5);
  EXPECT_EQ(kept.step_time_s, 0.00737388);
  EXPECT_EQ(log.rows().back().samples_per_s, 13561.5);
}

TEST(RowLog, OneOkRepetitionHasNoAggregatesAndASkipSaysSo) {
  const MachineContext machine;
  std::ostringstream notes;
  RowLog log(machine, nullptr, notes);
  const BenchInfo info = mlp_info();
  log.repetition(info, Measurement{.figures = figures(1.0), .steps = 5});
  log.aggregates(info);
  EXPECT_EQ(log.rows_of(info.name).size(), 1u);
  const Row skipped = log.repetition(info, Measurement{.status = "skipped", .message = "gpu:1: no CUDA device"});
  EXPECT_EQ(skipped.message, "skipped: gpu:1: no CUDA device");
  EXPECT_TRUE(is_skip(skipped.message));
  EXPECT_FALSE(is_skip("loss rose; skipped: the rest")) << "the prefix only, not a word inside a failure";
}

TEST(RowLog, ARepetitionsMeasurementIsItsCellsAndItsLinesFollowItsRows) {
  const MachineContext machine;
  std::ostringstream notes;
  RowLog log(machine, nullptr, notes);
  const BenchInfo info = mlp_info();
  const Row ok = log.repetition(info,
                                Measurement{.figures = figures(2.0, std::nullopt, -1),
                                            .steps = 9,
                                            .verdicts = {"loaded", "inside_band", "loaded"},
                                            .prediction = "train/mlp/mnist/mpi:2/fp32/bs:100/predicted:measured",
                                            .windows = {1.5, 2.25}},
                                {"  measured 2 samples/s; predicted ..."});
  EXPECT_EQ(ok.status, "ok");
  EXPECT_EQ(ok.iterations, 9);
  EXPECT_EQ(ok.samples_per_s, 2.0);
  EXPECT_FALSE(ok.train_acc.has_value());  // a negative accuracy is none
  EXPECT_EQ(ok.verdicts, "loaded+inside_band");
  EXPECT_EQ(ok.prediction, "train/mlp/mnist/mpi:2/fp32/bs:100/predicted:measured");
  EXPECT_EQ(ok.window_samples_per_s, "1.5;2.25");
  EXPECT_EQ(log.notes_of(info.name), std::vector<std::string>{"  measured 2 samples/s; predicted ..."});
  // A failed repetition keeps its message and verdicts, never its counters.
  const Row failed =
      log.repetition(info, Measurement{.figures = figures(3.0), .status = "failed", .verdicts = {"replicas_differ"}});
  EXPECT_FALSE(failed.samples_per_s.has_value());
  EXPECT_EQ(failed.verdicts, "replicas_differ");
  EXPECT_EQ(failed.repetition, 1);
  // A misspelt verdict stops the row where it is written.
  EXPECT_THROW(log.repetition(info, Measurement{.verdicts = {"insde_band"}}), Error);
}

// An aggregate is over every ok repetition or none: a counter that a repetition lacks, or holds as
// NaN, has no aggregate (a mean over some of them would read as one over all).
TEST(RowLog, ACounterSomeRepetitionLacksOrHoldsAsNanHasNoAggregate) {
  const MachineContext machine;
  std::ostringstream notes;
  RowLog log(machine, nullptr, notes);
  const BenchInfo info = mlp_info();
  log.repetition(info, Measurement{.figures = figures(1.0, 0.5, 0.25), .steps = 5});
  log.repetition(info, Measurement{.figures = figures(3.0, NAN), .steps = 5});
  log.aggregates(info);
  int aggregates = 0;
  for (const Row* r : log.rows_of(info.name)) {
    if (r->run_type != "aggregate") continue;
    ++aggregates;
    EXPECT_TRUE(r->samples_per_s.has_value()) << r->aggregate;
    EXPECT_FALSE(r->train_acc.has_value()) << r->aggregate << ": one repetition has no accuracy";
    EXPECT_FALSE(r->step_time_s.has_value()) << r->aggregate << ": one repetition's step time is NaN";
  }
  EXPECT_EQ(aggregates, 4);
}

// An epoch's row: samples/s over its training steps' own time (validation is in elapsed_s, not in
// the rate), its figures, and a line of notes.
TEST(RowLog, AnEpochsRateIsItsTrainingStepsOverTheirTime) {
  const MachineContext machine;
  std::ostringstream notes;
  RowLog log(machine, nullptr, notes);
  BenchInfo info = mlp_info();
  info.kind = Kind::Epochs;
  log.epoch(info, EpochRecord{.epoch = 2,
                              .train_loss = 0.5,
                              .val_loss = 0.75,
                              .train_acc = 0.875,
                              .elapsed_s = 4,
                              .train_s = 2,
                              .steps = 10});
  const Row& row = log.rows().back();
  EXPECT_EQ(row.run_type, "epoch");
  EXPECT_EQ(row.samples_per_s, 500) << "10 steps of 100 over the 2 s of training";
  EXPECT_EQ(row.elapsed_s, 4);
  EXPECT_EQ(row.epoch, 2);
  EXPECT_EQ(row.train_loss, 0.5);
  EXPECT_EQ(row.val_loss, 0.75);
  EXPECT_EQ(row.train_acc, 0.875);
  EXPECT_FALSE(row.val_acc.has_value());
  EXPECT_EQ(notes.str(), "  " + info.name + " epoch 2: train loss 0.5000 acc 0.8750, val loss 0.7500, 4.0 s\n");
  log.epoch(info, EpochRecord{.epoch = 3, .val_loss = 0.5, .val_acc = 0.75, .elapsed_s = 6, .train_s = 3, .steps = 15});
  EXPECT_EQ(log.rows().back().val_acc, 0.75);
  EXPECT_NE(notes.str().find("epoch 3: train loss 0.0000, val loss 0.5000 acc 0.7500, 6.0 s\n"), std::string::npos)
      << notes.str();
}

// A cpu row says data_on_device only for a train/ benchmark (an epochs/ one reads its data
// through the loader whatever the flag).
TEST(RowLog, OnlyATrainCpuRowSaysItsDataWasResident) {
  const MachineContext machine;
  BenchInfo info = mlp_info();
  info.data_on_device = true;
  EXPECT_EQ(identity_row(info, machine).data_on_device, 1);
  info.kind = Kind::Epochs;
  EXPECT_FALSE(identity_row(info, machine).data_on_device.has_value());
}

// An ok repetition keeps its text counter (the throttle reasons) and the prediction inputs it
// was made of.
TEST(RowLog, AnOkRepetitionKeepsItsThrottleReasonsAndPredictionInputs) {
  const MachineContext machine;
  std::ostringstream notes;
  RowLog log(machine, nullptr, notes);
  Row f = figures(2.0);
  f.gpu_throttle = telemetry::throttle_reason_names(4);
  const Row ok =
      log.repetition(mlp_info(), Measurement{.figures = f, .steps = 5, .prediction_inputs = "train/mlp/mnist/cpu:1"});
  EXPECT_EQ(ok.gpu_throttle, telemetry::throttle_reason_names(4));
  EXPECT_EQ(ok.prediction_inputs, "train/mlp/mnist/cpu:1");
}

// An aggregate row is ok and says over how many repetitions it is; only iteration rows count
// (an epoch row of the same benchmark is none); a cv over a mean of 0 is 0, not NaN.
TEST(RowLog, AnAggregateIsOverTheIterationRowsAloneAndSaysHowMany) {
  const MachineContext machine;
  std::ostringstream notes;
  RowLog log(machine, nullptr, notes);
  const BenchInfo info = mlp_info();
  for (double rate : {1.0, 2.0, 3.0}) {
    Row f = figures(rate);
    f.skipped_steps = 0;
    log.repetition(info, Measurement{.figures = f, .steps = 5});
  }
  log.epoch(info, EpochRecord{.epoch = 1, .elapsed_s = 1, .train_s = 1, .steps = 10});
  log.aggregates(info);
  int aggregates = 0;
  for (const Row* r : log.rows_of(info.name)) {
    if (r->run_type != "aggregate") continue;
    ++aggregates;
    EXPECT_EQ(r->status, "ok") << r->aggregate;
    EXPECT_EQ(r->iterations, 3) << r->aggregate;
    if (r->aggregate == "mean") {
      EXPECT_EQ(r->samples_per_s, 2.0);
    }
    if (r->aggregate == "cv") {
      EXPECT_EQ(r->skipped_steps, 0.0);
    }
  }
  EXPECT_EQ(aggregates, 4);
}

// The median aggregate is the middle repetition, not the mean: over 1, 2 and 9 samples/s the two
// differ (2 and 4).
TEST(RowLog, TheMedianAggregateIsTheMiddleRepetitionNotTheMean) {
  const MachineContext machine;
  std::ostringstream notes;
  RowLog log(machine, nullptr, notes);
  const BenchInfo info = mlp_info();
  for (double rate : {1.0, 9.0, 2.0}) log.repetition(info, Measurement{.figures = figures(rate), .steps = 5});
  log.aggregates(info);
  std::map<std::string, double> got;
  for (const Row* r : log.rows_of(info.name))
    if (r->run_type == "aggregate") got[r->aggregate] = r->samples_per_s.value_or(NAN);
  EXPECT_EQ(got.at("median"), 2.0);
  EXPECT_EQ(got.at("mean"), 4.0);
}

// An aggregate row is the benchmark's identity with its counters' statistics: a number of its
// identity (the target accuracy) is the benchmark's in every aggregate row, never a statistic
// of it (its stddev would be 0).
TEST(RowLog, AnAggregateKeepsTheBenchmarksIdentityNumbers) {
  const MachineContext machine;
  std::ostringstream notes;
  RowLog log(machine, nullptr, notes);
  BenchInfo info = mlp_info();
  info.target_accuracy = 0.9;
  for (double rate : {1.0, 2.0}) log.repetition(info, Measurement{.figures = figures(rate), .steps = 5});
  log.aggregates(info);
  int aggregates = 0;
  for (const Row* r : log.rows_of(info.name)) {
    if (r->run_type != "aggregate") continue;
    ++aggregates;
    EXPECT_EQ(r->target_acc, 0.9) << r->aggregate;
  }
  EXPECT_EQ(aggregates, 4);
}

// An epoch's accuracy of 0 (a first epoch of a hard task) is a figure its line shows; only a
// negative one (-1: a regression task) is none.
TEST(RowLog, AnEpochsAccuracyOfZeroIsShownInItsLine) {
  const MachineContext machine;
  std::ostringstream notes;
  RowLog log(machine, nullptr, notes);
  BenchInfo info = mlp_info();
  info.kind = Kind::Epochs;
  log.epoch(info, EpochRecord{.epoch = 1,
                              .train_loss = 2.5,
                              .val_loss = 2.5,
                              .train_acc = 0,
                              .val_acc = 0,
                              .elapsed_s = 1,
                              .train_s = 1,
                              .steps = 10});
  EXPECT_EQ(notes.str(),
            "  " + info.name + " epoch 1: train loss 2.5000 acc 0.0000, val loss 2.5000 acc 0.0000, 1.0 s\n");
  EXPECT_EQ(log.rows().back().train_acc, 0.0);
}

// An identity row: the benchmark's settings and the machine's context, and where the benchmark
// replays a saved row, that row's backend and name.
TEST(RowLog, AnIdentityRowIsTheBenchmarksSettingsAndTheMachine) {
  MachineContext machine;
  machine.host = "node1", machine.cores = 2;
  BenchInfo info = mlp_info();
  info.warmup_steps = 3;
  info.device_kind = &device_kinds().front();
  ASSERT_EQ(info.device_kind->backend, Backend::Cpu);
  Row row = identity_row(info, machine);
  EXPECT_EQ(row.schema_version, kSchemaVersion);
  EXPECT_EQ(row.framework, "trainbench");
  EXPECT_EQ(row.warmup_steps, 3);
  EXPECT_EQ(row.ranks, 1);
  EXPECT_FALSE(row.nodes) << "one rank: no nodes";
  EXPECT_FALSE(row.target_acc) << "no target";
  EXPECT_FALSE(row.sgemm_gflops) << "not measured";
  EXPECT_FALSE(row.data_parallel);
  EXPECT_EQ(row.host, "node1");
  EXPECT_EQ(row.cores, 2);
  EXPECT_EQ(row.backend, "cpu");
  EXPECT_EQ(row.measurement, "measured");
  EXPECT_EQ(row.peak_source, "oneDNN sgemm 1024^3 measured at start-up (median of 5 rounds)");
  info.skip_reason = "no such CPU";
  EXPECT_EQ(identity_row(info, machine).peak_source, "") << "a skipped row measured no peak";
  info.replay = BenchInfo::Replay{.of = "train/mlp/mnist/gpu:1/fp32/bs:100", .backend = "gpu", .inputs = ""};
  row = identity_row(info, machine);
  EXPECT_EQ(row.measurement, "replayed");
  EXPECT_EQ(row.backend, "gpu");
  EXPECT_EQ(row.predicted_from, "train/mlp/mnist/gpu:1/fp32/bs:100");
  info.data_parallel = 1;  // a replay on one rank
  EXPECT_EQ(identity_row(info, machine).data_parallel, 1);
}

// ---- reading a CSV back (--predict_from, --replay_from, jobs) ----

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(ReadCsv, ReadsWhatTheWriterWroteQuotedLineBreaksIncluded) {
  const std::string path = ::testing::TempDir() + "read_csv_round_trip.csv";
  std::remove(path.c_str());
  {
    CsvWriter out(path);
    Row a, b;
    a.schema_version = b.schema_version = "6";
    a.benchmark = "a", b.benchmark = "b";
    a.message = "two\nlines, a comma and \"quotes\"";
    a.threads = 4, a.samples_per_s = 0.125;
    out.write_row(a);
    out.write_row(b);
  }
  const std::vector<Row> rows = read_csv(path, "--predict_from");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].message, "two\nlines, a comma and \"quotes\"");
  EXPECT_EQ(rows[0].threads, 4);
  EXPECT_EQ(rows[0].samples_per_s, 0.125);
  EXPECT_EQ(rows[1].benchmark, "b");
  EXPECT_FALSE(rows[1].threads);
}

TEST(ReadCsv, BrokenFilesAreRefusedNamingTheFileAndTheLine) {
  const auto refused = [](const std::string& path) {
    try {
      read_csv(path, "--predict_from");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("taken");
  };
  EXPECT_NE(refused(::testing::TempDir() + "no_such.csv").find("--predict_from="), std::string::npos);
  EXPECT_NE(refused(write_file("empty.csv", "")).find("empty file"), std::string::npos);
  EXPECT_NE(refused(write_file("other.csv", "a,b\n1,2\n")).find("not a trainbench CSV"), std::string::npos);
  const std::string glued = refused(write_file("glued.csv", "schema_version,benchmark,status\n6,a,ok,6,b,ok\n"));
  EXPECT_NE(glued.find("line 2 has 6 fields, the header has 3"), std::string::npos) << glued;
  // A line of 17 MiB (a binary file, no line break) is refused as it is read, not read whole.
  const std::string huge =
      refused(write_file("huge.csv", "schema_version,benchmark\n6," + std::string(std::size_t(17) << 20, 'a')));
  EXPECT_NE(huge.find("line 2 runs past 16 MiB: not a trainbench CSV"), std::string::npos) << huge;
  const std::string typed = refused(write_file("typed.csv", "schema_version,benchmark,threads\n6,a,4\n6,b,four\n"));
  EXPECT_NE(typed.find("line 3: threads is 'four', not a whole number"), std::string::npos) << typed;
  // A column of another schema is left out, one this schema has and the file lacks stays empty.
  const std::vector<Row> old = read_csv(write_file("old.csv", "schema_version,benchmark,retired\n2,a,x\n"), "--x");
  ASSERT_EQ(old.size(), 1u);
  EXPECT_EQ(old[0].benchmark, "a");
  EXPECT_FALSE(old[0].samples_per_s);
}

// A row cut short (a full disk, a killed run), which the next run's CsvWriter leaves on its own
// line, is left out saying so, and the rows around it are read: before, the whole file was
// refused, the rows written after the cut with it. A file that ends inside a quoted field too.
TEST(ReadCsv, ARowCutShortIsLeftOutSayingSo) {
  ::testing::internal::CaptureStderr();
  const std::vector<Row> rows =
      read_csv(write_file("cut.csv", "schema_version,benchmark,status\n6,a,ok\n6,b\n6,c,ok\n6,d,\"cut"), "--x");
  const std::string said = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].benchmark, "a");
  EXPECT_EQ(rows[1].benchmark, "c");
  EXPECT_NE(said.find("line 3 has 2 of the header's 3 fields, a row cut short"), std::string::npos) << said;
  EXPECT_NE(said.find("line 5 ends inside a quoted field"), std::string::npos) << said;
}

// A quote opened early and never closed (a hand edit) holds every later line: the note counts the
// lines left out and names the fix, not one row cut short.
TEST(ReadCsv, AQuoteNeverClosedNamesTheLinesItLeftOut) {
  ::testing::internal::CaptureStderr();
  const std::vector<Row> rows = read_csv(
      write_file("stray_quote.csv", "schema_version,benchmark,status\n6,a,ok\n6,b,\"ok\n6,c,ok\n6,d,ok\n"), "--x");
  const std::string said = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].benchmark, "a");
  EXPECT_NE(said.find("a quoted field opened on line 3 is never closed: lines 3 to 5 (3 lines) are left out; if "
                      "rows follow that line, close or remove its stray quote"),
            std::string::npos)
      << said;
  EXPECT_EQ(said.find("a row cut short"), std::string::npos) << said;
}

// Each character that ends or splits a field puts it in quotes on its own (a line break, a
// carriage return, a comma, a quote), and csv_split takes it back as written; a carriage return
// outside quotes (a file saved on Windows) is no part of a field.
TEST(ReadCsv, FieldsWithOneSpecialCharacterEachGoBackAsWritten) {
  for (const std::string field : {"two\nlines", "a\rreturn", "a,comma", "a \"quote\""}) {
    const std::string escaped = csv_escape(field);
    EXPECT_EQ(escaped.front(), '"') << field;
    const std::vector<std::string> back = csv_split("x," + escaped + ",y");
    ASSERT_EQ(back.size(), 3u) << escaped;
    EXPECT_EQ(back[1], field);
  }
  EXPECT_EQ(csv_escape("plain"), "plain");
  EXPECT_EQ(csv_split("a,b\r"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(csv_split("a,\"b\r\""), (std::vector<std::string>{"a", "b\r"}));
}

// Runs concatenated (cat a.csv b.csv) repeat the header: it is no row.
TEST(ReadCsv, AHeaderRepeatedByConcatenatedFilesIsNoRow) {
  const std::vector<Row> rows =
      read_csv(write_file("concatenated.csv",
                          "schema_version,benchmark,status\n6,a,ok\nschema_version,benchmark,status\n6,b,ok\n"),
               "--x");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].benchmark, "a");
  EXPECT_EQ(rows[1].benchmark, "b");
}

// --csv onto a file of another header is refused before anything is written; onto one cut inside
// a quoted field, the quote is closed and the next row starts on a line of its own.
TEST(CsvWriterOpens, AnotherHeaderIsRefusedAndAnOpenQuoteIsClosed) {
  const std::string other = write_file("writer_other.csv", "schema_version,benchmark\n6,a\n");
  try {
    CsvWriter out(other);
    ADD_FAILURE() << "a file of another schema was taken";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("another trainbench schema"), std::string::npos) << e.what();
  }
  std::ifstream kept(other);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), "schema_version,benchmark\n6,a\n");

  const std::string path = ::testing::TempDir() + "writer_cut.csv";
  std::remove(path.c_str());
  {
    CsvWriter first(path);
    Row a;
    a.schema_version = "7", a.benchmark = "a";
    first.write_row(a);
  }
  std::ofstream(path, std::ios::app) << "7,b,\"cut inside a message";
  ::testing::internal::CaptureStderr();
  {
    CsvWriter again(path);
    Row c;
    c.schema_version = "7", c.benchmark = "c";
    again.write_row(c);
  }
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("its last field's quote closed"), std::string::npos) << said;
  ::testing::internal::CaptureStderr();
  const std::vector<Row> rows = read_csv(path, "--x");
  (void)::testing::internal::GetCapturedStderr();
  ASSERT_EQ(rows.size(), 2u) << "the cut row left out, the rows around it whole";
  EXPECT_EQ(rows[0].benchmark, "a");
  EXPECT_EQ(rows[1].benchmark, "c");
}

// A blank line (an editor's, a hand-joined file's) is no row and nothing to say.
TEST(ReadCsv, ABlankLineIsSkippedSilently) {
  ::testing::internal::CaptureStderr();
  const std::vector<Row> rows =
      read_csv(write_file("blank.csv", "schema_version,benchmark,status\n6,a,ok\n\n6,b,ok\n"), "--x");
  const std::string said = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].benchmark, "b");
  EXPECT_EQ(said, "");
}

// A file saved on Windows (CRLF) reads as written, a line break inside a quoted message included;
// and a row over several lines is named by the line it starts on.
TEST(ReadCsv, CrlfLinesAndRowsOverSeveralLinesReadAsWritten) {
  const std::vector<Row> rows =
      read_csv(write_file("crlf.csv", "schema_version,benchmark,message\r\n6,a,\"two\r\nlines\"\r\n6,b,x\r\n"), "--x");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].message, "two\nlines");
  EXPECT_EQ(rows[1].message, "x");
  try {
    read_csv(write_file("multiline_typed.csv", "schema_version,message,threads\n6,\"two\nlines\",four\n"), "--x");
    ADD_FAILURE() << "a count of 'four' was taken";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("line 2: threads is 'four'"), std::string::npos) << e.what();
  }
}

// A quoted field's doubled quotes may fall on any of its lines: a line with an odd count of them
// opens or closes the field, one with an even count leaves it as it was.
TEST(ReadCsv, DoubledQuotesOnEveryLineOfAFieldReadAsWritten) {
  const std::vector<Row> rows = read_csv(
      write_file("doubled_quotes.csv",
                 "schema_version,benchmark,message\n6,a,\"say \"\"hi\n\"\"twice\"\"\nthen \"\"bye\"\"\"\n6,b,x\n"),
      "--x");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].message, "say \"hi\n\"twice\"\nthen \"bye\"");
  EXPECT_EQ(rows[1].benchmark, "b");
}

// Appending to a whole file adds rows and nothing else (no note, no blank line); a header saved
// with CRLF is trainbench's; a foreign first line over 64 KiB is refused saying it is one.
TEST(CsvWriterOpens, AWholeFileGetsItsRowsAppendedAndNothingElse) {
  const std::string path = ::testing::TempDir() + "writer_append.csv";
  std::remove(path.c_str());
  Row a;
  a.schema_version = "7", a.benchmark = "a";
  { CsvWriter(path).write_row(a); }
  std::ifstream first(path);
  const std::string one_row(std::istreambuf_iterator<char>(first), {});
  ::testing::internal::CaptureStderr();
  { CsvWriter(path).write_row(a); }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  std::ifstream second(path);
  const std::string two_rows(std::istreambuf_iterator<char>(second), {});
  EXPECT_EQ(two_rows, one_row + one_row.substr(one_row.find('\n') + 1));

  const std::string header = fmt::format("{}", fmt::join(csv_columns(), ","));
  EXPECT_NO_THROW(CsvWriter(write_file("writer_crlf.csv", header + "\r\n7,a\r\n"))) << "a header saved on Windows";
  try {
    CsvWriter(write_file("writer_long.csv", std::string(70 * 1024, 'x')));
    ADD_FAILURE() << "a file of 70 KiB with no line break was taken";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("a first line over 64 KiB"), std::string::npos) << e.what();
  }
}

// The last line of a run says how many rows it wrote (one row, rows), and whether the file held
// rows before (a header alone is no rows); a file in a folder that does not exist yet is made
// there.
TEST(CsvWriterOpens, ItsLastLineCountsTheRowsAndSaysWhetherTheFileHeldSome) {
  const std::string dir = ::testing::TempDir() + "writer_new_dir";
  const std::string path = dir + "/run.csv";
  std::remove(path.c_str());
  std::remove(dir.c_str());
  Row a;
  a.schema_version = "7", a.benchmark = "a";
  {
    CsvWriter empty(path);
    EXPECT_EQ(empty.rows_written_line(), "trainbench: 0 rows written to " + path + "\n");
  }
  {
    CsvWriter header_only(path);
    header_only.write_row(a);
    EXPECT_EQ(header_only.rows_written_line("predicted"), "trainbench: 1 predicted row written to " + path + "\n");
  }
  CsvWriter again(path);
  again.write_row(a);
  again.write_row(a);
  EXPECT_EQ(again.rows_written_line(), "trainbench: 2 rows written to " + path +
                                           ", after the rows it already held (--csv appends; give a new file for "
                                           "this run alone)\n");
}

// What --csv cannot append to is refused saying what it is: a directory; a one-line file of
// another tool's header, named as not trainbench's (not as over 64 KiB).
TEST(CsvWriterOpens, ADirectoryAndAForeignHeaderAreRefusedSayingWhatTheyAre) {
  const auto refused = [](const std::string& path) {
    try {
      CsvWriter out(path);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("taken");
  };
  const std::string dir = refused(::testing::TempDir());
  EXPECT_NE(dir.find("is a directory, not a file"), std::string::npos) << dir;
  const std::string foreign = refused(write_file("writer_foreign.csv", "a,b,c"));
  EXPECT_NE(foreign.find("the file exists with a header that is not trainbench's (3 columns); trainbench schema"),
            std::string::npos)
      << foreign;
  const std::string one = refused(write_file("writer_one_column.csv", "benchmark\n"));
  EXPECT_NE(one.find("a header that is not trainbench's (1 column); trainbench schema"), std::string::npos) << one;
  // An empty first line is named as such, not as a header of one column.
  const std::string empty = refused(write_file("writer_empty_line.csv", "\nschema_version,benchmark\n"));
  EXPECT_NE(empty.find("the file exists with an empty first line; trainbench schema"), std::string::npos) << empty;
}

// A row that cannot be written (here past the file size limit, as a full disk would) stops the
// run naming the file, the row and the last row that is on disk.
TEST(CsvWriterOpens, ARowThatCannotBeWrittenNamesTheLastRowOnDisk) {
  const std::string path = ::testing::TempDir() + "writer_limit.csv";
  std::remove(path.c_str());
  CsvWriter out(path);
  Row a;
  a.schema_version = "7", a.benchmark = "a";
  out.write_row(a);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit at_size = old;
  at_size.rlim_cur = rlim_t(st.st_size);
  const auto previous = std::signal(SIGXFSZ, SIG_IGN);  // the write fails with EFBIG instead
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &at_size), 0);
  Row b = a;
  b.benchmark = "b";
  std::string said = "taken";
  try {
    out.write_row(b);
  } catch (const CsvWriteError& e) {
    said = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, previous);
  EXPECT_EQ(said, "--csv=" + path +
                      ": writing the row of b failed (File too large); the last row on disk is the one of a. The run "
                      "stops here.");
  EXPECT_EQ(out.rows_written_line(), "trainbench: 1 row written to " + path + "\n");
}

// A cell not a number in a number column is refused as not a number (a count's as not a whole one).
TEST(ReadCsv, ACellNotANumberIsRefusedAsNotANumber) {
  try {
    read_csv(write_file("typed_number.csv", "schema_version,benchmark,samples_per_s\n6,a,fast\n"), "--x");
    ADD_FAILURE() << "a rate of 'fast' was taken";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("line 2: samples_per_s is 'fast', not a number (a row edited"),
              std::string::npos)
        << e.what();
  }
}

// A record over several lines (a quoted field of line breaks) is held to the 16 MiB of one line
// as a whole: each of its lines (1 MiB) is short, but together they run past, and the file is refused
// as it is read.
TEST(ReadCsv, ARecordOverManyLinesIsRefusedPastSixteenMiBAsOne) {
  std::string lines;
  for (int i = 0; i < 17; ++i) lines += std::string((std::size_t(1) << 20) - 1, 'a') + "\n";
  try {
    read_csv(write_file("huge_quoted.csv", "schema_version,message\n6,\"" + lines + "\"\n"), "--x");
    ADD_FAILURE() << "a record of 17 MiB over many lines was taken";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("runs past 16 MiB: not a trainbench CSV"), std::string::npos) << e.what();
  }
}

// A file holding trainbench's header alone, its line break lost, holds no rows: the run's last
// line does not say it added to some.
TEST(CsvWriterOpens, AHeaderWithoutItsLineBreakHoldsNoRows) {
  const std::string header = fmt::format("{}", fmt::join(csv_columns(), ","));
  const std::string path = write_file("writer_header_no_break.csv", header);
  ::testing::internal::CaptureStderr();
  CsvWriter out(path);
  (void)::testing::internal::GetCapturedStderr();
  EXPECT_EQ(out.rows_written_line(), "trainbench: 0 rows written to " + path + "\n");
}

// 16 MiB is the most a line may hold: a line of exactly that is read, one byte more is refused.
TEST(ReadCsv, ALineOfSixteenMiBIsReadAndOneByteMoreIsRefused) {
  const std::string cell((std::size_t(16) << 20) - 2, 'a');  // "6," and the cell: the line's 16 MiB
  const std::vector<Row> rows =
      read_csv(write_file("line_at_cap.csv", "schema_version,message\n6," + cell + "\n"), "--x");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].message.size(), cell.size());
  EXPECT_THROW(read_csv(write_file("line_past_cap.csv", "schema_version,message\n6," + cell + "a\n"), "--x"),
               InputError);
}

// A row with one field more than the header (a trailing comma, a cell split by hand) is refused
// as two rows glued would be: which column each cell belongs to is no longer known.
TEST(ReadCsv, ARowWithOneFieldMoreThanTheHeaderIsRefused) {
  try {
    read_csv(write_file("one_more.csv", "schema_version,benchmark,status\n6,a,ok\n6,b,ok,\n"), "--x");
    ADD_FAILURE() << "a row of 4 fields under a header of 3 was taken";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("line 3 has 4 fields, the header has 3"), std::string::npos) << e.what();
  }
}

// ---- the console: the rows, rendered ----

// A console of its own: the harness of these devices and filter, a row log and the reporter over
// them, writing into `out` and `err`; report(NAME) is Google Benchmark's call for a benchmark.
struct Console {
  Console(std::vector<std::string> devices, std::string filter, DisplayOptions display = {})
      : flags(flags_of(std::move(devices), std::move(filter))),
        harness(flags, 2),
        log(machine, nullptr, notes),
        reporter(harness, log, std::move(display)) {
    reporter.SetOutputStream(&out);
    reporter.SetErrorStream(&err);
  }
  static Flags flags_of(std::vector<std::string> devices, std::string filter) {
    Flags f;
    f.devices = std::move(devices);
    f.benchmark_filter = std::move(filter);
    return f;
  }
  void report(const std::string& name) {
    benchmark::BenchmarkReporter::Run run;
    run.run_name.function_name = name;
    reporter.ReportRuns({run});
  }
  const Flags flags;
  const Harness harness;
  const MachineContext machine;
  std::ostringstream notes;
  RowLog log;
  Reporter reporter;
  std::ostringstream out, err;
};

// The reporter shows what the harness wrote, nothing it computes: a benchmark's rows when Google
// Benchmark reports it (the same figures as the CSV), its notes after them, a skipped
// configuration once.
TEST(Reporter, RendersTheRowsTheHarnessWroteAndNothingElse) {
  Console console({"cpu:1", "gpu:1"}, "mlp/mnist");
  const Harness& harness = console.harness;
  RowLog& log = console.log;
  const Reporter& reporter = console.reporter;
  const std::ostringstream& out = console.out;
  const std::string name = "train/mlp/mnist/cpu:1/fp32/bs:100";
  const BenchInfo* info = harness.find(name);
  ASSERT_NE(info, nullptr);
  log.repetition(*info, Measurement{.figures = figures(1234.5, 0.081), .steps = 7, .message = "a note"});
  log.note(name, "  predicted mpi:2 over custom: ...");
  console.report(name);
  console.report(name);  // its aggregates' call: shown once already
  const std::string text = out.str();
  EXPECT_NE(text.find(name + " "), std::string::npos) << text;
  EXPECT_NE(text.find("81 ms"), std::string::npos) << text;  // the row's step, in the row's unit
  EXPECT_NE(text.find(" 7 "), std::string::npos) << text;    // its steps, not Google Benchmark's 1
  EXPECT_NE(text.find("1234"), std::string::npos) << text;
  EXPECT_NE(text.find("a note"), std::string::npos) << text;
  EXPECT_NE(text.find("  predicted mpi:2 over custom"), std::string::npos) << text;
  EXPECT_EQ(text.find(name), text.rfind(name)) << "rendered twice:\n" << text;
  // A skipped configuration: one line for its scope, whatever its benchmarks.
  const std::string gpu = "train/mlp/mnist/gpu:1/fp32/bs:100";
  const BenchInfo* gpu_info = harness.find(gpu);
  ASSERT_NE(gpu_info, nullptr);
  log.repetition(*gpu_info, Measurement{.status = "skipped", .message = "gpu:1: no CUDA device"});
  console.report(gpu);
  EXPECT_NE(out.str().find("skipped gpu:1"), std::string::npos) << out.str();
  EXPECT_EQ(reporter.skipped(), 1);
}

// The console's rows read as the CSV's: an aggregate is named by its statistic (the cv in percent
// of the step), a number from 1000 up is plain digits, an epochs/ row's time is its run's seconds,
// a failed row is counted with its message, and benchmarks with the same columns share a header.
TEST(Reporter, EachRowIsShownAsItsKindReads) {
  Console console({"cpu:1"}, "mlp/");
  const Harness& harness = console.harness;
  RowLog& log = console.log;
  const std::string mnist = "train/mlp/mnist/cpu:1/fp32/bs:100", fashion = "train/mlp/fashion-mnist/cpu:1/fp32/bs:100",
                    epochs = "epochs/mlp/mnist/cpu:1/fp32/bs:100";
  for (const std::string& name : {mnist, fashion, epochs}) ASSERT_NE(harness.find(name), nullptr) << name;
  for (double step : {0.08, 0.12})
    log.repetition(*harness.find(mnist), Measurement{.figures = figures(12345.6, step), .steps = 7});
  log.aggregates(*harness.find(mnist));
  log.repetition(*harness.find(fashion), Measurement{.figures = figures(100, 0.1), .steps = 7});
  log.repetition(*harness.find(fashion), Measurement{.status = "failed", .message = "loss rose"});
  Row run_of_epochs = figures(50);
  run_of_epochs.elapsed_s = 12.5;
  log.repetition(*harness.find(epochs), Measurement{.figures = run_of_epochs, .steps = 30});
  for (const std::string& name : {mnist, fashion, epochs}) console.report(name);
  const std::string text = console.out.str();
  const auto line_of = [&](const std::string& start) {
    const std::size_t at = text.find(start + " ");
    return at == std::string::npos ? std::string() : text.substr(at, text.find('\n', at) - at);
  };
  EXPECT_NE(line_of(mnist).find(" 12346"), std::string::npos) << text;
  EXPECT_NE(line_of(mnist + "_mean").find("100 ms"), std::string::npos) << text;
  EXPECT_NE(line_of(mnist + "_cv").find("28.28 %"), std::string::npos) << "stddev 0.0283 s over a mean of 0.1 s\n"
                                                                       << text;
  EXPECT_EQ(line_of(mnist + "_cv").size(), line_of(mnist + "_mean").size()) << "the cv's columns aligned:\n" << text;
  EXPECT_NE(line_of(epochs).find("12.5 s "), std::string::npos) << text;
  EXPECT_NE(text.find(" FAILED: loss rose\n"), std::string::npos) << text;
  EXPECT_EQ(console.reporter.failed(), 1);
  // Two headers: the train/ rows' (mnist's and fashion-mnist's, the same columns), the epochs/ row's.
  std::size_t headers = 0;
  for (std::size_t at = text.find("\nBenchmark "); at != std::string::npos; at = text.find("\nBenchmark ", at + 1))
    ++headers;
  EXPECT_EQ(headers, 2u) << text;
}

// A configuration the machine cannot run is one line, its scope said once, whatever the number of
// its benchmarks; the assumptions of predictions are said once before the first benchmark's.
TEST(Reporter, ASkippedDeviceAndThePredictionsAssumptionsAreSaidOnce) {
  Console console({"gpu:1"}, "train/mlp/");
  for (const std::string name : {"train/mlp/mnist/gpu:1/fp32/bs:100", "train/mlp/fashion-mnist/gpu:1/fp32/bs:100"}) {
    const BenchInfo* info = console.harness.find(name);
    ASSERT_NE(info, nullptr) << name;
    console.log.repetition(*info, Measurement{.status = "skipped", .message = "gpu:1: no CUDA device"});
    console.log.note(name, "  predicted mpi:2 over custom: ...");
    console.report(name);
  }
  const std::string text = console.out.str();
  const std::string said = "skipped gpu:1: no CUDA device\n";
  EXPECT_NE(text.find(said), std::string::npos) << text;
  EXPECT_EQ(text.find(said), text.rfind(said)) << text;
  EXPECT_EQ(console.reporter.skipped(), 2) << "benchmarks are counted, their configuration said once";
  EXPECT_NE(text.find("predictions assume"), std::string::npos) << text;
  EXPECT_EQ(text.find("predictions assume"), text.rfind("predictions assume")) << text;
}

// Colour is for the console alone, forced by any of Google Benchmark's words for yes.
TEST(Reporter, ColourIsForcedOnlyOnTheConsole) {
  Flags flags;
  for (const char* yes : {"true", "yes", "1", "always"}) {
    flags.benchmark_color = yes;
    EXPECT_TRUE(display_options(flags).colour) << yes;
  }
  flags.benchmark_color = "never";
  EXPECT_FALSE(display_options(flags).colour);
  flags.benchmark_color = "always";
  flags.benchmark_format = "json";
  EXPECT_FALSE(display_options(flags).colour) << "escape bytes in JSON";
}

// A cell under 1000 keeps four significant figures; a counter the console shows scaled (util %)
// is its CSV value times its scale; a NaN is a blank cell, never "nan"; the row's notes follow.
TEST(Reporter, CellsKeepFourFiguresTheirConsoleScaleAndNaNIsBlank) {
  Console console({"cpu:1"}, "mlp/mnist");
  const std::string name = "train/mlp/mnist/cpu:1/fp32/bs:100";
  Row row = figures(123.456, 0.08);
  row.utilisation = 0.125;
  row.host_cpu_util = NAN;
  row.loss_last = 0.25;
  console.log.repetition(*console.harness.find(name), Measurement{.figures = row, .steps = 7, .message = "a note"});
  console.report(name);
  const std::string text = console.out.str();
  const std::string line =
      text.substr(text.find(name + " "), text.find('\n', text.find(name + " ")) - text.find(name + " "));
  EXPECT_NE(line.find(" 123.5 "), std::string::npos) << text;
  EXPECT_NE(line.find(" 12.5 "), std::string::npos) << "util % is utilisation x 100:\n" << text;
  EXPECT_EQ(line.find("nan"), std::string::npos) << text;
  EXPECT_NE(text.find("CPU cores"), std::string::npos) << "the CPU cores column is shown, its NaN blank:\n" << text;
  EXPECT_TRUE(line.ends_with(" 0.25  a note")) << "its notes after its cells, set apart:\n" << text;
}

// An epochs/ benchmark of several repetitions: its rows' Time is the run's seconds, its cv row's
// the cv of the step (as every cv row's), not of the run's seconds; its epoch rows were said as
// they came and are not in the table.
TEST(Reporter, AnEpochsCvRowIsTheStepsAndItsEpochRowsAreNotInTheTable) {
  Console console({"cpu:1"}, "mlp/mnist");
  const std::string name = "epochs/mlp/mnist/cpu:1/fp32/bs:100";
  const BenchInfo* info = console.harness.find(name);
  ASSERT_NE(info, nullptr);
  console.log.epoch(
      *info, EpochRecord{.epoch = 1, .train_loss = 0.5, .val_loss = 0.6, .elapsed_s = 5, .train_s = 4, .steps = 50});
  for (const auto& [step, elapsed] : {std::pair{0.08, 10.0}, std::pair{0.12, 20.0}}) {
    Row run_of_epochs = figures(50, step);
    run_of_epochs.elapsed_s = elapsed;
    console.log.repetition(*info, Measurement{.figures = run_of_epochs, .steps = 1});
  }
  console.log.aggregates(*info);
  console.report(name);
  const std::string text = console.out.str();
  const std::size_t cv = text.find(name + "_cv ");
  ASSERT_NE(cv, std::string::npos) << text;
  EXPECT_NE(text.substr(cv, text.find('\n', cv) - cv).find("28.28 %"), std::string::npos)
      << "stddev 0.0283 s over a mean step of 0.1 s (the run's seconds': 47.14 %)\n"
      << text;
  EXPECT_NE(text.find(name + "  "), std::string::npos) << text;
  std::size_t lines = 0;
  for (std::size_t at = text.find(name + " "); at != std::string::npos; at = text.find(name + " ", at + 1)) ++lines;
  EXPECT_EQ(lines, 2u) << "its two repetitions, not its epoch row:\n" << text;
}

// Coloured, an ok row's name is green and a failed row red; a benchmark whose first repetition
// failed and whose second did not is counted failed.
TEST(Reporter, ColourSaysOkInGreenAndFailedInRedAndAnyFailedRepetitionCounts) {
  Console console({"cpu:1"}, "mlp/mnist", DisplayOptions{.colour = true});
  const std::string name = "train/mlp/mnist/cpu:1/fp32/bs:100";
  const BenchInfo* info = console.harness.find(name);
  ASSERT_NE(info, nullptr);
  console.log.repetition(*info, Measurement{.status = "failed", .message = "loss rose"});
  console.log.repetition(*info, Measurement{.figures = figures(100, 0.1), .steps = 7});
  console.report(name);
  const std::string text = console.out.str();
  const auto line_of = [&](const std::string& colour) {
    const std::size_t at = text.find(colour + name + " ");
    return at == std::string::npos ? std::string() : text.substr(at, text.find('\n', at) - at);
  };
  EXPECT_TRUE(line_of("\033[31m").ends_with(" FAILED: loss rose\033[0m")) << text;
  const std::string ok = line_of("\033[32m");
  EXPECT_LT(ok.find("\033[0m "), ok.find(" 100 ms")) << "the name alone coloured:\n" << text;
  EXPECT_EQ(console.reporter.failed(), 1);
}

// A reason that starts with its configuration and a space ("cpu:4096 needs 4096 cores") is said
// with the configuration once, as one that starts with it and a colon.
TEST(Reporter, ASkipsReasonDoesNotRepeatItsConfiguration) {
  Console console({"cpu:4096"}, "mlp/mnist");
  const std::string name = "train/mlp/mnist/cpu:4096/fp32/bs:100";
  const BenchInfo* info = console.harness.find(name);
  ASSERT_NE(info, nullptr);
  ASSERT_EQ(info->skip_scope, "cpu:4096");
  console.log.repetition(*info,
                         Measurement{.status = "skipped", .message = "cpu:4096 needs 4096 cores (this machine has 2)"});
  console.report(name);
  EXPECT_NE(console.out.str().find("skipped cpu:4096: needs 4096 cores (this machine has 2)\n"), std::string::npos)
      << console.out.str();
}

// A terminal on stdout is coloured unless colour is refused, by any of Google Benchmark's words
// for no or by NO_COLOR.
TEST(Reporter, ATerminalIsColouredUnlessRefused) {
  const int terminal = ::posix_openpt(O_RDWR | O_NOCTTY);
  ASSERT_GE(terminal, 0);
  ASSERT_EQ(::grantpt(terminal), 0);
  ASSERT_EQ(::unlockpt(terminal), 0);
  const int follower = ::open(::ptsname(terminal), O_RDWR | O_NOCTTY);
  ASSERT_GE(follower, 0);
  const char* term = std::getenv("TERM");
  const std::string old_term = term ? term : "";
  const char* no_colour = std::getenv("NO_COLOR");
  const std::string old_no_colour = no_colour ? no_colour : "";
  std::fflush(stdout);
  const int saved = ::dup(STDOUT_FILENO);
  ::dup2(follower, STDOUT_FILENO);
  ::setenv("TERM", "xterm", 1);
  ::unsetenv("NO_COLOR");
  Flags flags;
  std::map<std::string, bool> coloured;
  for (const char* word : {"auto", "false", "no", "0", "never"}) {
    flags.benchmark_color = word;
    coloured[word] = display_options(flags).colour;
  }
  flags.benchmark_color = "auto";
  ::setenv("NO_COLOR", "1", 1);
  const bool with_no_colour = display_options(flags).colour;
  ::dup2(saved, STDOUT_FILENO);
  ::close(saved);
  ::close(follower);
  ::close(terminal);
  if (term)
    ::setenv("TERM", old_term.c_str(), 1);
  else
    ::unsetenv("TERM");
  if (no_colour)
    ::setenv("NO_COLOR", old_no_colour.c_str(), 1);
  else
    ::unsetenv("NO_COLOR");
  EXPECT_TRUE(coloured["auto"]);
  for (const char* no : {"false", "no", "0", "never"}) EXPECT_FALSE(coloured[no]) << no;
  EXPECT_FALSE(with_no_colour);
}

}  // namespace
}  // namespace tb::bench
