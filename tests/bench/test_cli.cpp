// bench/cli: trainbench's own flags taken out of the command line, refused with the flag's name
// on a bad value, and the flags that shape a run written the same way on every rank.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bench/cli/flags.hpp"
#include "engine/core/error.hpp"

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

}  // namespace
}  // namespace tb::bench
