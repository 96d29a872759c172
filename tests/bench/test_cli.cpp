// bench/cli: trainbench's own flags taken out of the command line, refused with the flag's name
// on a bad value, and the flags that shape a run written the same way on every rank; the machine
// context every row carries; and bench/listing, what trainbench answers without running.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench/cli/context.hpp"
#include "bench/cli/flags.hpp"
#include "bench/listing.hpp"
#include "bench/plan/device_kinds.hpp"
#include "bench/schema/columns.hpp"
#include "engine/backends.hpp"
#include "engine/core/error.hpp"
#include "engine/core/spec.hpp"
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
  };
  for (const auto& [args, words] : cases) {
    const std::string message = refusal(args);
    EXPECT_NE(message.find(words), std::string::npos) << ::testing::PrintToString(args) << ": " << message;
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
