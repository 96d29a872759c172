// bench/cli: trainbench's own flags taken out of the command line, refused with the flag's name
// on a bad value, and the flags that shape a run written the same way on every rank; the machine
// context every row carries; and bench/listing, what trainbench answers without running.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench/cli/context.hpp"
#include "bench/cli/flags.hpp"
#include "bench/listing.hpp"
#include "bench/plan/configs.hpp"
#include "bench/plan/device_kinds.hpp"
#include "bench/schema/columns.hpp"
#include "engine/backends.hpp"
#include "engine/core/error.hpp"
#include "engine/core/spec.hpp"
#include "engine/parallel/predict.hpp"
#include "models/models.hpp"

namespace tb::bench {
namespace {

// parse_flags over `args` (argv[0] added): the flags and what it left for Google Benchmark.
struct Parsed {
  Flags flags;
  std::vector<std::string> left;
};

Parsed parse(std::vector<std::string> args) {
  args.insert(args.begin(), "trainbench");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  int argc = int(argv.size());
  Parsed p{parse_flags(argc, argv.data()), {}};
  for (int i = 0; i < argc; ++i) p.left.emplace_back(argv[i]);
  return p;
}

// The InputError's message for `args`, or a failure where they are accepted.
std::string refusal(const std::vector<std::string>& args) {
  try {
    parse(args);
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted: " << ::testing::PrintToString(args);
  return "";
}

TEST(Flags, TrainbenchsOwnAreTakenOutAndGoogleBenchmarksLeftInOrder) {
  const Parsed p =
      parse({"--benchmark_filter=^train/mlp/", "--devices=cpu,cpu:1", "--seed=7", "--benchmark_repetitions=3",
             "--csv=out.csv", "--benchmark_min_time=0.5", "--augment", "--benchmark_format=json"});
  EXPECT_EQ(p.left, (std::vector<std::string>{"trainbench", "--benchmark_filter=^train/mlp/",
                                              "--benchmark_repetitions=3", "--benchmark_format=json"}))
      << "--benchmark_min_time is trainbench's own (a repetition's steps): Google Benchmark never sees it";
  EXPECT_EQ(p.flags.devices, (std::vector<std::string>{"cpu", "cpu:1"}));
  EXPECT_EQ(p.flags.seed, 7u);
  EXPECT_EQ(p.flags.csv, "out.csv");
  EXPECT_TRUE(p.flags.augment);
  EXPECT_EQ(p.flags.benchmark_filter, "^train/mlp/");
  EXPECT_EQ(p.flags.benchmark_repetitions, "3");
  EXPECT_EQ(p.flags.benchmark_min_time, "0.5");
  EXPECT_EQ(p.flags.benchmark_format, "json");
}

TEST(Flags, ABadValueIsRefusedNamingItsFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"--devices="}, "--devices"},
      {{"--optimizer=rmsprop"}, "--optimizer"},
      {{"--timeline=maybe"}, "--timeline"},
      {{"--batch=0"}, "--batch"},
      {{"--csv"}, "--csv needs a value"},
      {{"--precisions=fp64"}, "--precisions"},
      {{"--benchmark_min_time=10x"}, "--benchmark_min_time"},
      {{"--benchmark_repetitions=0"}, "--benchmark_repetitions"},
      {{"--benchmark_format=xml"}, "--benchmark_format"},
      {{"--network=ib_ndr400x8"}, "give the nodes too"},
      {{"--nodes=2"}, "--network="},
      {{"--predict_from=a.csv", "--replay_from=b.csv"}, "give one of them"},
      {{"--json"}, "--list_models"},
      {{"--predict_allreduce=1GiB", "--predict_from=a.csv"}, "--predict_allreduce predicts one all-reduce"},
      {{"--predict_allreduce=1GiB", "--replay_from=a.csv"}, "--predict_allreduce predicts one all-reduce"},
      // One byte is an all-reduce too: the smallest, not none.
      {{"--predict_allreduce=1", "--predict_from=a.csv"}, "--predict_allreduce predicts one all-reduce"},
      {{"--devices=cpu:1,cpu,cpu:1"}, "--devices: cpu:1 is given twice: give it once (--benchmark_repetitions=N"},
      // The queue of the loader's threads, with none of them: it was taken and changed nothing.
      {{"--prefetch=4"}, "--prefetch=4 is the queue of the loader's threads: give --loader_workers=N with it"},
      {{"--loader_workers=0", "--prefetch=4"}, "give --loader_workers=N with it"},
      // The default depth given by name is given all the same, and changes nothing without threads.
      {{"--prefetch=2"}, "--prefetch=2 is the queue of the loader's threads: give --loader_workers=N with it"},
  };
  for (const auto& [args, words] : cases) {
    const std::string message = refusal(args);
    EXPECT_NE(message.find(words), std::string::npos) << ::testing::PrintToString(args) << ": " << message;
  }
  for (const char* listing : {"--list_models", "--list_configs", "--csv_header"})
    EXPECT_NO_THROW(parse({listing, "--json"})) << listing;
}

// Every number is taken at the ends of its range and refused just past them, with the reason;
// a value with anything after the number is no number.
TEST(Flags, NumbersAreTakenAtTheEndsOfTheirRangeAndRefusedPastThem) {
  for (const char* arg : {"--batch=1", "--batch=1048576", "--warmup_steps=0", "--seed=0", "--loader_workers=0",
                          "--epochs=1", "--iterations=1", "--lr=1000000", "--target_accuracy=1", "--gpu_memory_limit=1",
                          "--gpu_memory_limit=1048576GiB", "--predict_allreduce=1", "--benchmark_min_time=0",
                          "--benchmark_repetitions=1", "--gpus_per_node=1"})
    EXPECT_NO_THROW(parse({arg})) << arg;
  // The ordinals, a node's GPUs, one node, the largest all-reduce and the fewest bytes with a unit (2),
  // at the ends of their ranges.
  for (const char* arg : {"--gpus=0", "--gpus=1023", "--gpus_per_node=1024", "--nodes=1",
                          "--predict_allreduce=1048576GiB", "--gpu_memory_limit=0.001953125KiB"})
    EXPECT_NO_THROW(parse({arg})) << arg;
  for (const char* arg : {"--nodes=2", "--nodes=100000"})  // nodes are joined by a network
    EXPECT_NO_THROW(parse({arg, "--network=10,50"})) << arg;
  for (const char* arg : {"--prefetch=1", "--prefetch=1024"})  // a queue of the loader's threads
    EXPECT_NO_THROW(parse({"--loader_workers=1", arg})) << arg;
  const std::vector<std::pair<std::string, std::string>> cases{
      {"--batch=0", "--batch: '0' is not an integer from 1 to 1048576 (example: --batch=2)"},
      {"--batch=1048577", "--batch: '1048577' is not an integer from 1 to 1048576"},
      {"--batch=5x", "--batch: '5x' is not an integer"},
      {"--lr=0", "--lr: '0' is not a positive number (example: --lr=0.01)"},
      {"--lr=0.1x", "--lr: '0.1x' is not a positive number"},
      {"--target_accuracy=1.5", "--target_accuracy: 1.5 is above 1, the highest accuracy"},
      {"--prefetch=0", "--prefetch: '0' is not an integer from 1 to 1024"},
      {"--epochs=0", "--epochs: '0' is not an integer from 1 to 1000000"},
      {"--gpus=1024", "--gpus: '1024' is not an integer from 0 to 1023 (example: --gpus=2)"},
      {"--gpus_per_node=1025", "--gpus_per_node: '1025' is not an integer from 1 to 1024"},
      {"--nodes=0", "--nodes: '0' is not an integer from 1 to 100000"},
      {"--nodes=100001", "--nodes: '100001' is not an integer from 1 to 100000"},
      {"--lr=inf", "--lr: 'inf' is not a positive number (example: --lr=0.01)"},
      {"--target_accuracy=inf", "--target_accuracy: 'inf' is not a positive number"},
      {"--benchmark_min_time=inf", "--benchmark_min_time: 'inf' is not a number of seconds"},
      {"--gpu_memory_limit=0", "--gpu_memory_limit: '0' is neither a byte count"},
      {"--gpu_memory_limit=1.5", "--gpu_memory_limit: '1.5' is neither a byte count"},
      {"--gpu_memory_limit=8GB", "--gpu_memory_limit: '8GB' is neither a byte count"},
      // Bytes with a unit are bytes however few: a tenth of a byte was a tenth of the device.
      {"--gpu_memory_limit=0.0001KiB", "--gpu_memory_limit: '0.0001KiB' is neither a byte count"},
      {"--gpu_memory_limit=0.0009765625KiB", "--gpu_memory_limit: '0.0009765625KiB' is neither a byte count"},
      {"--gpu_memory_limit=1048577GiB", "--gpu_memory_limit: '1048577GiB' is more than 1 PiB"},
      {"--predict_allreduce=0", "--predict_allreduce: '0' is not a byte count from 1 byte to 1 PiB"},
      {"--predict_allreduce=1.5", "--predict_allreduce: '1.5' is not a byte count"},
      {"--predict_allreduce=4GB", "--predict_allreduce: '4GB' is not a byte count"},
      {"--predict_allreduce=1048577GiB", "--predict_allreduce: '1048577GiB' is not a byte count"},
  };
  for (const auto& [arg, start] : cases) {
    const std::string message = refusal({arg});
    EXPECT_EQ(message.rfind(start, 0), 0u) << arg << ": " << message;
  }
}

// A list or a file name with nothing in it is refused, saying what to give.
TEST(Flags, AnEmptyListOrFileNameIsRefusedWithAnExample) {
  EXPECT_EQ(refusal({"--precisions=,"}), "--precisions: give at least one, e.g. --precisions=fp32,fp16");
  EXPECT_EQ(refusal({"--gpus=,"}), "--gpus: give at least one CUDA device ordinal, e.g. --gpus=0");
  EXPECT_EQ(refusal({"--summary="}), "--summary: give a file name, e.g. --summary=results/summary.md");
  EXPECT_EQ(refusal({"--benchmark_out="}), "--benchmark_out: give a file name, e.g. --benchmark_out=results/run.json");
  // A format without the file it formats, which Google Benchmark took and ignored.
  EXPECT_EQ(refusal({"--benchmark_out_format=json"})
                .rfind("--benchmark_out_format is the format of --benchmark_out's file: give --benchmark_out=FILE", 0),
            0u);
  EXPECT_EQ(parse({"--devices=cpu,,cpu:1,"}).flags.devices, (std::vector<std::string>{"cpu", "cpu:1"}));
  // A '+' list keeps its empty items, for the predictor to refuse by name (--link: '' is neither a
  // preset ...): dropped, --link=+ was the default links without a word.
  EXPECT_EQ(parse({"--link=pcie4+"}).flags.links, (std::vector<std::string>{"pcie4", ""}));
  EXPECT_EQ(parse({"--link=+"}).flags.links, (std::vector<std::string>{"", ""}));
}

// Each flag's value is what its field holds, every word the flag takes included.
TEST(Flags, EachValueIsTheFieldItSets) {
  const Parsed p = parse({"--gpu_memory_limit=512KiB", "--timeline=off", "--optimizer=adam", "--gpu_layout=nhwc",
                          "--precisions=fp32,fastest", "--benchmark_time_unit=s", "--iterations=5",
                          "--benchmark_color=true", "--benchmark_format=csv", "--benchmark_out_format=csv",
                          "--benchmark_out=x.csv", "--warmup_steps=0", "--predict_allreduce=2KiB", "-h"});
  EXPECT_EQ(p.flags.gpu_memory_limit, 512.0 * 1024);
  EXPECT_FALSE(p.flags.timeline);
  EXPECT_EQ(p.flags.optimizer, "adam");
  EXPECT_EQ(p.flags.gpu_layout, "nhwc");
  EXPECT_EQ(p.flags.precisions, (std::vector<std::string>{"fp32", "fastest"}));
  EXPECT_TRUE(p.flags.benchmark_time_unit_given);
  EXPECT_EQ(p.flags.iterations, 5);
  EXPECT_TRUE(p.flags.iterations_given) << "every repetition then takes exactly 5 steps";
  EXPECT_EQ(p.flags.benchmark_color, "true");
  EXPECT_EQ(p.flags.benchmark_format, "csv");
  EXPECT_TRUE(p.flags.benchmark_out_format_given);
  EXPECT_EQ(p.flags.benchmark_out, "x.csv");
  EXPECT_EQ(p.flags.warmup_steps, 0);
  EXPECT_EQ(p.flags.predict_allreduce, 2048.0);
  EXPECT_TRUE(p.flags.help);
  EXPECT_FALSE(parse({}).flags.iterations_given);
  EXPECT_FALSE(parse({}).flags.benchmark_time_unit_given);
  EXPECT_TRUE(parse({"--timeline=on"}).flags.timeline);
}

// Every word a flag takes is taken, not only the ones other tests give: a word dropped from a
// check refused a run that was right.
TEST(Flags, EveryWordOfAFlagsListIsTaken) {
  for (const char* format : {"console", "json", "csv"}) {
    EXPECT_EQ(parse({fmt::format("--benchmark_format={}", format)}).flags.benchmark_format, format);
    EXPECT_TRUE(parse({fmt::format("--benchmark_out_format={}", format), "--benchmark_out=x.out"})
                    .flags.benchmark_out_format_given)
        << format;
  }
  for (const char* unit : {"ns", "us", "ms", "s"})
    EXPECT_TRUE(parse({fmt::format("--benchmark_time_unit={}", unit)}).flags.benchmark_time_unit_given) << unit;
  for (const char* layout : {"auto", "nchw", "nhwc"})
    EXPECT_EQ(parse({fmt::format("--gpu_layout={}", layout)}).flags.gpu_layout, layout);
  EXPECT_EQ(parse({"--precisions=fp32,tf32,fp16,bf16,fastest"}).flags.precisions,
            (std::vector<std::string>{"fp32", "tf32", "fp16", "bf16", "fastest"}));
  EXPECT_EQ(parse({"--optimizer=sgd"}).flags.optimizer, "sgd");
}

// A switch sets its own field and no other (--json is held with the listings above).
TEST(Flags, EachSwitchSetsItsOwnFieldAlone) {
  const std::vector<std::pair<std::string, bool Flags::*>> switches{{"--help", &Flags::help},
                                                                    {"-h", &Flags::help},
                                                                    {"--list_models", &Flags::list_models},
                                                                    {"--list_configs", &Flags::list_configs},
                                                                    {"--csv_header", &Flags::csv_header},
                                                                    {"--version", &Flags::version},
                                                                    {"--cuda_graph", &Flags::cuda_graph},
                                                                    {"--data_on_device", &Flags::data_on_device},
                                                                    {"--augment", &Flags::augment}};
  for (const auto& [given, set] : switches) {
    const Flags f = parse({given}).flags;
    for (const auto& [other, field] : switches) EXPECT_EQ(f.*field, field == set) << given << " set " << other;
  }
}

// --benchmark_color takes the words the console reads (bench/run/reporter.cpp); any other word,
// 'off' and 'blue' alike, was taken for auto, colour on a terminal, without a word.
TEST(Flags, BenchmarkColorTakesOnlyTheWordsTheConsoleReads) {
  for (const char* word : {"auto", "true", "yes", "1", "always", "false", "no", "0", "never"})
    EXPECT_EQ(parse({fmt::format("--benchmark_color={}", word)}).flags.benchmark_color, word);
  for (const char* word : {"off", "blue", ""})
    EXPECT_EQ(
        refusal({fmt::format("--benchmark_color={}", word)}),
        fmt::format("--benchmark_color: '{}' is not auto, true or false (or yes, 1, always; no, 0, never)", word));
}

// A flag given twice names both values; a list flag says how to give several.
TEST(Flags, AFlagGivenTwiceIsRefusedNamingBothValues) {
  EXPECT_EQ(refusal({"--csv=a.csv", "--seed=2", "--csv=b.csv"}),
            "--csv is given twice ('a.csv' and 'b.csv'): give it once");
  EXPECT_EQ(refusal({"--gpus=0", "--gpus=1"}),
            "--gpus is given twice ('0' and '1'): give it once, with a list: --gpus=A,B");
  // Google Benchmark's own too: it took the last, and the run measured one of the two filters.
  EXPECT_EQ(refusal({"--benchmark_filter=mlp", "--benchmark_filter=lstm"}),
            "--benchmark_filter is given twice ('mlp' and 'lstm'): give it once");
  EXPECT_EQ(refusal({"--devices=cpu", "--devices=cpu:1"}),
            "--devices is given twice ('cpu' and 'cpu:1'): give it once, with a list: --devices=A,B");
  EXPECT_EQ(refusal({"--precisions=fp32", "--precisions=bf16"}),
            "--precisions is given twice ('fp32' and 'bf16'): give it once, with a list: --precisions=A,B");
}

// The files a run writes are three, and a trainbench CSV is appended to (--csv) but never
// overwritten (--summary, --benchmark_out); files that do not exist yet are compared by path.
TEST(Flags, OutputFilesAreThreeAndATrainbenchCsvIsOnlyAppendedTo) {
  namespace fs = std::filesystem;
  std::string folder = (fs::temp_directory_path() / "tb-flags-XXXXXX").string();
  ASSERT_NE(mkdtemp(folder.data()), nullptr);
  const std::string rows = folder + "/rows.csv";
  std::ofstream(rows) << "schema_version,name\n9,train/mlp/mnist/cpu/fp32/bs:100\n";
  EXPECT_NO_THROW(parse({"--csv=" + rows}));
  for (const char* flag : {"--summary=", "--benchmark_out="})
    EXPECT_NE(refusal({flag + rows}).find("the file holds trainbench rows"), std::string::npos) << flag;
  EXPECT_EQ(refusal({"--csv=" + folder + "/new.csv", "--summary=" + folder + "/./new.csv"}),
            fmt::format("--csv={0}/new.csv and --summary={0}/./new.csv are one file: give each its own", folder));
  EXPECT_EQ(refusal({"--summary=" + folder + "/new.md", "--benchmark_out=" + folder + "/new.md"}),
            fmt::format("--summary={0}/new.md and --benchmark_out={0}/new.md are one file: give each its own", folder));
  EXPECT_EQ(refusal({"--csv=" + folder + "/new.csv", "--benchmark_out=" + folder + "/new.csv"}),
            fmt::format("--csv={0}/new.csv and --benchmark_out={0}/new.csv are one file: give each its own", folder));
  EXPECT_EQ(refusal({"--summary=" + folder}), fmt::format("--summary={}: is a folder; give a file name in it", folder));
  fs::remove_all(folder);
}

// The ranks of an MPI job compare these lines: the order flags were given in does not matter,
// any value that changes what is measured does, and defaults are spelt out.
TEST(Flags, ShapingFlagsAreTheSameTextForTheSameRun) {
  const std::string a = shaping_flags(parse({"--devices=cpu:1,mpi:2", "--seed=3", "--iterations=5"}).flags);
  const std::string b = shaping_flags(parse({"--iterations=5", "--seed=3", "--devices=cpu:1,mpi:2"}).flags);
  const std::string c = shaping_flags(parse({"--devices=cpu:1,mpi:2", "--seed=4", "--iterations=5"}).flags);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a.find("--devices=cpu:1,mpi:2\n"), std::string::npos) << a;
  EXPECT_NE(a.find("--batch=default\n"), std::string::npos) << a;
  // Where the CSV goes does not change what is measured.
  EXPECT_EQ(shaping_flags(parse({"--csv=x.csv"}).flags), shaping_flags(parse({}).flags));
}

// Each flag that shapes a run is in the text on its own: two ranks that differ in any one of them
// are told so.
TEST(Flags, EachShapingFlagChangesTheText) {
  const std::string defaults = shaping_flags(parse({}).flags);
  const std::vector<std::vector<std::string>> runs{{"--devices=cpu"},
                                                   {"--precisions=fp32"},
                                                   {"--batch=3"},
                                                   {"--warmup_steps=1"},
                                                   {"--optimizer=sgd"},
                                                   {"--lr=0.5"},
                                                   {"--seed=2"},
                                                   {"--data_dir=d"},
                                                   {"--loader_workers=1"},
                                                   {"--augment"},
                                                   {"--epochs=2"},
                                                   {"--target_accuracy=0.5"},
                                                   {"--gpus=1"},
                                                   {"--gpu_memory_limit=0.5"},
                                                   {"--cuda_graph"},
                                                   {"--gpu_layout=nhwc"},
                                                   {"--data_on_device"},
                                                   {"--iterations=5"},
                                                   {"--link=pcie4"},
                                                   {"--gpus_per_node=4"},
                                                   {"--nodes=2", "--network=10,50"},
                                                   {"--replay_from=r.csv"},
                                                   {"--timeline=off"},
                                                   {"--benchmark_filter=x"},
                                                   {"--benchmark_repetitions=2"},
                                                   {"--benchmark_min_time=0.5"}};
  for (const std::vector<std::string>& run : runs)
    EXPECT_NE(shaping_flags(parse(run).flags), defaults) << ::testing::PrintToString(run);
  // --prefetch goes with the loader's threads: against theirs alone.
  EXPECT_NE(shaping_flags(parse({"--loader_workers=1", "--prefetch=3"}).flags),
            shaping_flags(parse({"--loader_workers=1"}).flags));
}

// --help names every preset of the links within a node and of the networks between nodes.
TEST(Flags, UsageNamesEveryLinkAndNetworkPreset) {
  const std::string text = usage();
  for (const auto* presets : {&parallel::link_presets(), &parallel::network_presets()})
    for (const parallel::Link& link : *presets) EXPECT_NE(text.find(link.name), std::string::npos) << link.name;
  EXPECT_EQ(text.find('@'), std::string::npos) << "a placeholder left in";
}

// cli/context: the machine a row was measured on, read from this one.
TEST(MachineContext, NamesThisMachineItsCoresAndTheKernelsItRuns) {
  const MachineContext c = read_machine_context();
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  EXPECT_EQ(c.host, host);
  EXPECT_EQ(c.os.rfind("Linux ", 0), 0u) << c.os;
  EXPECT_GT(c.cores, 0);
  EXPECT_FALSE(c.cpu_model.empty());
  EXPECT_TRUE(c.compiler.find("generic x86-64") != std::string::npos ||
              c.compiler.find("-march=native") != std::string::npos)
      << c.compiler << ": says what the host code was built for";
  EXPECT_FALSE(c.onednn.empty());
  EXPECT_FALSE(c.onednn_isa.empty());
  const std::vector<std::string> isas = own_cpu_isas();
  EXPECT_NE(std::find(isas.begin(), isas.end(), c.cpu_isa), isas.end()) << c.cpu_isa;
  // UTC, ISO 8601 to the second, and now.
  std::tm tm{};
  const char* end = strptime(c.timestamp.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm);
  ASSERT_TRUE(end != nullptr && *end == '\0') << c.timestamp;
  EXPECT_LT(std::abs(double(timegm(&tm) - std::time(nullptr))), 120.0) << c.timestamp;
}

TEST(MachineContext, ItsDescriptionSaysEveryFieldOfIt) {
  MachineContext c;
  c.host = "hostA", c.os = "osB", c.cpu_model = "cpuC", c.compiler = "compilerD", c.onednn = "onednnE";
  c.benchmark_lib = "benchmarkF", c.git_commit = "commitG", c.onednn_isa = "isaH", c.cpu_isa = "isaI";
  c.cores = 7, c.sgemm_gflops = 123.45;
  const std::string d = describe(c);
  for (const char* word : {"hostA", "osB", "cpuC", "compilerD", "onednnE", "benchmarkF", "commitG", "isaH", "isaI",
                           "7 cores", "123.5 GFLOP/s"})
    EXPECT_NE(d.find(word), std::string::npos) << word << " not in: " << d;
}

// listing: --csv_header --json is the schema a tool writing trainbench's rows takes from it.
TEST(Listing, CsvHeaderJsonIsTheSchemaVersionAndEveryColumnInOrder) {
  std::ostringstream out;
  csv_header_json(out);
  EXPECT_EQ(out.str(), fmt::format("{{\"schema_version\": \"{}\",\n \"columns\": [\"{}\"]}}\n", kSchemaVersion,
                                   fmt::join(csv_columns(), "\", \"")));
}

TEST(Listing, ModelsJsonHasEveryWorkloadWithItsCountsAndTheBatchFlag) {
  Flags flags;
  std::ostringstream out;
  list_models_json(out, flags);
  const std::string s = out.str();
  EXPECT_EQ(s.rfind("{\"format\": 1,", 0), 0u) << s.substr(0, 40);
  ASSERT_FALSE(models::workloads().empty());
  for (const models::Workload& w : models::workloads()) {
    const std::string entry = fmt::format(R"({{"model": "{}", "dataset": "{}")", w.model, w.dataset);
    const std::size_t at = s.find(entry);
    ASSERT_NE(at, std::string::npos) << entry;
    const std::string rest = s.substr(at, s.find('\n', at) - at);
    EXPECT_NE(rest.find(fmt::format(R"("params": {},)", model_cost(w.spec).parameters)), std::string::npos) << rest;
    EXPECT_NE(rest.find(fmt::format(R"("batch": {}, "gpu_batch": {},)", w.batch, w.batch_on_gpu())), std::string::npos)
        << rest;
  }
  flags.batch = 7;
  std::ostringstream seven;
  list_models_json(seven, flags);
  std::size_t count = 0;
  for (std::size_t at = 0; (at = seven.str().find(R"("batch": 7, "gpu_batch": 7,)", at)) != std::string::npos; ++at)
    ++count;
  EXPECT_EQ(count, models::workloads().size()) << "--batch sets every workload's batch, on the CPU and the GPU";
}

// The whitespace-separated cells of `text`'s lines, each line's first cells `start`: the rows of a
// table trainbench prints.
std::vector<std::vector<std::string>> table_rows(const std::string& text, const std::vector<std::string>& start) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::vector<std::string> cells;
    for (std::string w; words >> w;) cells.push_back(w);
    if (cells.size() >= start.size() && std::equal(start.begin(), start.end(), cells.begin())) rows.push_back(cells);
  }
  return rows;
}

const models::Workload& workload(const std::string& model, const std::string& dataset) {
  for (const models::Workload& w : models::workloads())
    if (w.model == model && w.dataset == dataset) return w;
  throw Error(fmt::format("no workload {}/{}", model, dataset));
}

// --list_models' table: each workload's batch, parameters, GFLOPs and the fp32 gradients a
// data-parallel step all-reduces in buckets of 25 MiB (the MLP's 1796010 parameters: 6.9 MiB, one
// bucket; ResNet-152's 229.6 MiB: 9 buckets of at least 25 MiB each); --batch sets the batch and
// with it the GFLOPs of a step.
TEST(Listing, ModelsTableGivesEachWorkloadsCountsAndGradientBuckets) {
  Flags flags;
  std::ostringstream out;
  list_models(out, flags);
  EXPECT_EQ(
      table_rows(out.str(), {"mlp", "mnist", "100"}),
      (std::vector<std::vector<std::string>>{{"mlp", "mnist", "100", "1796010", "0.003588", "0.9196", "6.9", "1"}}));
  EXPECT_EQ(table_rows(out.str(), {"resnet152", "imagenet", "8"}),
            (std::vector<std::vector<std::string>>{
                {"resnet152", "imagenet", "8", "60192808", "23.0273", "550.766", "229.6", "9"}}));
  EXPECT_NE(out.str().find("all-reduced per data-parallel step, in buckets of 25 MiB"), std::string::npos);
  flags.batch = 7;
  std::ostringstream seven;
  list_models(seven, flags);
  EXPECT_EQ(
      table_rows(seven.str(), {"mlp", "mnist", "7"}),
      (std::vector<std::vector<std::string>>{{"mlp", "mnist", "7", "1796010", "0.003588", "0.064372", "6.9", "1"}}));
}

// The memory plans after the table: each workload's plan in GiB, on the CPU at its batch and on a
// GPU at its GPU batch (the cuDNN and cuBLAS workspaces in "fixed"); --batch sets both.
TEST(Listing, MemoryPlanIsEachWorkloadsPlanInGibAtItsBatch) {
  constexpr double GiB = double(1 << 30);
  const models::Workload& resnet = workload("resnet152", "imagenet");
  const bool adam = resnet.optimizer.kind == OptimizerConfig::Kind::Adam;
  ASSERT_NE(resnet.batch, resnet.batch_on_gpu()) << "a workload whose two batches differ";
  const auto cells = [&](const MemoryPlanBytes& p, double fixed) {
    return std::vector<std::string>{fmt::format("{:.3f}", double(p.arena) / GiB), fmt::format("{:.3f}", fixed / GiB),
                                    fmt::format("{:.3f}", double(p.total()) / GiB)};
  };
  for (const std::optional<i64> batch : {std::optional<i64>(), std::optional<i64>(7)}) {
    Flags flags;
    flags.batch = batch;
    std::ostringstream out;
    list_models(out, flags);
    const i64 cpu_batch = batch.value_or(resnet.batch), gpu_batch = batch.value_or(resnet.batch_on_gpu());
    const MemoryPlanBytes cpu = memory_plan(Backend::Cpu, resnet.spec, cpu_batch, "fp32", adam);
    const MemoryPlanBytes gpu = memory_plan(Backend::Cuda, resnet.spec, gpu_batch, "fp32", adam);
    std::vector<std::string> cpu_row{"resnet152", "imagenet", "cpu", "fp32", std::to_string(cpu_batch)};
    std::vector<std::string> gpu_row{"resnet152", "imagenet", "gpu", "fp32", std::to_string(gpu_batch)};
    for (const std::string& c : cells(cpu, double(cpu.fixed))) cpu_row.push_back(c);
    for (const std::string& c : cells(gpu, double(gpu.fixed + gpu.workspace))) gpu_row.push_back(c);
    EXPECT_EQ(table_rows(out.str(), {"resnet152", "imagenet", "cpu"}),
              (std::vector<std::vector<std::string>>{cpu_row}));
    EXPECT_EQ(table_rows(out.str(), {"resnet152", "imagenet", "gpu", "fp32"}),
              (std::vector<std::vector<std::string>>{gpu_row}));
  }
}

// --list_models --json: every field of a workload as the registry has it (the MLP's whole entry),
// the task, sequence length and whether it needs its real files, and its gradients' bytes: 4 per
// parameter.
TEST(Listing, ModelsJsonGivesEveryFieldOfAWorkload) {
  Flags flags;
  std::ostringstream out;
  list_models_json(out, flags);
  const std::string s = out.str();
  EXPECT_NE(s.find(R"(  {"model": "mlp", "dataset": "mnist", "task": "classification", "classes": 10, )"
                   R"("input_shape": [784], "seq_len": 0, "batch": 100, "gpu_batch": 100, "warmup_steps": 2, )"
                   R"("epochs": 5, "real_data_only": false, "optimizer": {"kind": "adam", "lr": 0.001, )"
                   R"("momentum": 0.9, "weight_decay": 0, "beta1": 0.9, "beta2": 0.999, "eps": 1e-08, )"
                   R"("lr_reference_batch": 0}, "params": 1796010, "forward_flops_per_sample": 3588000, )"
                   R"("train_flops_per_sample": 9196000, "gradient_bytes": 7184040, "gradient_buckets": 1})"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find(R"({"model": "lstm", "dataset": "sine", "task": "regression", "classes": 0, "input_shape": [1], )"
                   R"("seq_len": 35,)"),
            std::string::npos);
  const std::size_t fashion = s.find(R"("dataset": "fashion-mnist")");
  ASSERT_NE(fashion, std::string::npos);
  EXPECT_NE(s.substr(fashion, s.find('\n', fashion) - fashion).find(R"("real_data_only": true)"), std::string::npos);
  for (const models::Workload& w : models::workloads()) {
    const std::size_t at = s.find(fmt::format(R"({{"model": "{}", "dataset": "{}")", w.model, w.dataset));
    ASSERT_NE(at, std::string::npos) << w.model;
    EXPECT_NE(s.substr(at, s.find('\n', at) - at)
                  .find(fmt::format(R"("gradient_bytes": {},)", 4 * model_cost(w.spec).parameters)),
              std::string::npos)
        << w.model << "/" << w.dataset;
  }
}

// --list_configs: each kind's run in the "runs as" column, under its header, whatever the width
// of the names and grammars before it.
TEST(Listing, ConfigsTableGivesEachKindsRunUnderItsHeader) {
  std::ostringstream table;
  list_configs(table);
  std::vector<std::string> lines;
  std::istringstream text(table.str());
  for (std::string line; std::getline(text, line);) lines.push_back(line);
  ASSERT_GE(lines.size(), 3 + device_kinds().size());
  const std::size_t column = lines[2].find("runs as");
  ASSERT_NE(column, std::string::npos) << lines[2];
  for (std::size_t k = 0; k < device_kinds().size(); ++k) {
    const DeviceKind& kind = device_kinds()[k];
    const std::string& line = lines[3 + k];
    EXPECT_EQ(line.rfind(kind.name, 0), 0u) << line;
    EXPECT_EQ(line.substr(column, line.find(' ', column) - column), run_kind_name(kind.run)) << line;
  }
}

// --list_configs --json: a kind's every flag (the emulated nodes' kind has them all but one
// process), each variant flag's meaning and the ISA of trainbench's own kernels.
TEST(Listing, ConfigsJsonGivesEachKindsFlagsTheVariantsMeaningsAndTheIsa) {
  std::ostringstream json;
  list_configs_json(json);
  const std::string s = json.str();
  EXPECT_NE(s.find(R"({"name": "gpu:N as emulated nodes", "grammar": "gpu:N under scripts/emulate_nodes.sh --gpu N", )"
                   R"("pattern": "^gpu:(?P<devices>[0-9]+)$", "label": "N ranks as emulated nodes sharing one GPU )"
                   R"(over NCCL's socket transport: checks the multi-node path, not scaling", "backend": "gpu", )"
                   R"("run": "replicas", "communicates": true, "across_ranks": true, "one_process": false, )"
                   R"("shares_device": true, "check_word": "emulated_nodes"})"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find(R"({"name": "cpu:T/jobs:K", "grammar": "cpu:T/jobs:K", )"
                   R"("pattern": "^cpu:(?P<threads>[0-9]+)/jobs:(?P<jobs>[0-9]+)$", "label": "K separate )"
                   R"(processes of T threads each, timed on one window", "backend": "cpu", "run": "processes", )"
                   R"("communicates": false, "across_ranks": false, "one_process": true, "shares_device": false, )"
                   R"("check_word": ""})"),
            std::string::npos)
      << s;
  for (const VariantFlag& v : variant_flags())
    EXPECT_NE(s.find(fmt::format(R"({{"name": "{}", "meaning": "{}"}})", v.name, v.meaning)), std::string::npos)
        << v.name;
  EXPECT_NE(s.find(fmt::format("\"cpu_isa\": \"{}\",", own_cpu_isa())), std::string::npos) << s;
}

TEST(Listing, ConfigsNameEveryKindWithItsPatternInBothForms) {
  std::ostringstream table, json;
  list_configs(table);
  list_configs_json(json);
  for (const DeviceKind& k : device_kinds()) {
    EXPECT_NE(table.str().find(k.name), std::string::npos) << k.name;
    EXPECT_NE(
        json.str().find(fmt::format(R"("name": "{}", "grammar": "{}", "pattern": "{}")", k.name, k.grammar, k.pattern)),
        std::string::npos)
        << k.name;
  }
  for (const Verdict& v : verdicts())
    EXPECT_NE(json.str().find(fmt::format(R"("word": "{}")", v.word)), std::string::npos);
}

}  // namespace
}  // namespace tb::bench
