// The trainbench binary: parses flags, plans and registers the benchmarks (one Harness), runs
// them under Google Benchmark and exits non-zero if any row failed.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench/cli/context.hpp"
#include "bench/cli/flags.hpp"
#include "bench/listing.hpp"
#include "bench/output/csv.hpp"
#include "bench/output/rows.hpp"
#include "bench/output/summary.hpp"
#include "bench/predict/after_run.hpp"
#include "bench/run/harness.hpp"
#include "bench/run/jobs.hpp"
#include "bench/run/reporter.hpp"
#include "bench/schema/columns.hpp"
#include "engine/backends.hpp"
#include "engine/core/error.hpp"
#include "engine/parallel/world.hpp"
#include "models/models.hpp"

namespace tb {
const char* git_commit();      // generated at build time (cmake/WriteGitCommit.cmake)
const char* build_version();   // generated at configure time (cmake/Install.cmake)
const char* build_backends();  // the same: the backends built in, and those not
}  // namespace tb

namespace {

constexpr int kUsageError = 2;

bool has_flag(int argc, char** argv, const char* name) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == name || arg == std::string(name) + "=true" || arg == std::string(name) + "=1") return true;
  }
  return false;
}

bool has_prefix(int argc, char** argv, const char* prefix) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]).rfind(prefix, 0) == 0) return true;
  return false;
}

// Ranks other than 0 of an MPI job run every benchmark (collectives need them) but report
// nothing: rank 0 prints and writes the CSV.
class SilentReporter : public benchmark::BenchmarkReporter {
 public:
  explicit SilentReporter(int rank) : rank_(rank) {}
  bool ReportContext(const Context&) override { return true; }
  // A rank's own failure is said here, once a repetition: rank 0's row may only say it waited for
  // this rank (a deadline), and a rank that failed alone said nothing. Another rank's failed
  // set-up is rank 0's to say.
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (!r.error_occurred || tb::bench::is_skip(r.error_message)) continue;
      ++failed;
      if (!tb::parallel::another_ranks_set_up_failed(r.error_message))
        std::cerr << fmt::format("trainbench rank {}: {} failed: {}\n", rank_, r.benchmark_name(), r.error_message)
                  << std::flush;
    }
  }
  int failed = 0;

 private:
  int rank_;
};

// The machine context of the CSV, in Google Benchmark's own JSON and console context too.
void add_json_context(const tb::bench::MachineContext& m, const std::vector<tb::bench::BenchInfo>& benchmarks) {
  const tb::bench::BenchInfo* first = benchmarks.empty() ? nullptr : &benchmarks.front();
  tb::bench::BenchInfo none;
  const tb::bench::Row row = tb::bench::identity_row(first ? *first : none, m);
  for (const tb::bench::Column& c : tb::bench::columns())
    if (c.kind == tb::bench::ColumnKind::Context && !c.cell(row).empty())
      benchmark::AddCustomContext(std::string("trainbench_") + c.name, c.cell(row));
  benchmark::AddCustomContext("trainbench_schema_version", tb::bench::kSchemaVersion);
}

// The summary table after the last benchmark: on stdout (stderr where stdout carries JSON or
// CSV), and as Markdown in --summary=FILE (checked before anything was measured, written whole
// now). False where the file could not be written.
bool write_summary(const std::vector<tb::bench::Row>& rows, const tb::bench::Flags& flags) {
  const std::string text = tb::bench::summary_table(rows, false);
  if (text.empty()) return true;
  std::ostream& out = flags.benchmark_format == "console" ? std::cout : std::cerr;
  out << "\nSummary\n" << text << std::flush;
  if (flags.summary.empty()) return true;
  std::ofstream file(flags.summary, std::ios::out | std::ios::trunc);
  file << tb::bench::summary_table(rows, true);
  file.close();
  if (file) return true;
  std::cerr << fmt::format(
      "trainbench: error: --summary={}: cannot write the summary there (the CSV holds every "
      "row)\n",
      flags.summary);
  return false;
}

// The edits that turn `a` into `b` (Levenshtein).
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The `count` benchmark names closest to a filter that matched none, its anchors left out: by the
// edits from the filter to the name's start as long as the filter (a filter that stops short of
// the variant is 0 away), then to the whole name.
std::vector<std::string> nearest_names(std::string filter, const std::vector<tb::bench::BenchInfo>& benchmarks,
                                       std::size_t count) {
  if (!filter.empty() && filter.front() == '^') filter.erase(0, 1);
  if (!filter.empty() && filter.back() == '$') filter.pop_back();
  std::vector<std::tuple<std::size_t, std::size_t, std::string>> by_distance;
  for (const tb::bench::BenchInfo& b : benchmarks)
    by_distance.emplace_back(edit_distance(filter, b.name.substr(0, filter.size())), edit_distance(filter, b.name),
                             b.name);
  std::sort(by_distance.begin(), by_distance.end());
  std::vector<std::string> out;
  for (const auto& [start, whole, name] : by_distance)
    if (out.size() < count) out.push_back(name);
  return out;
}

// The flags --help names closest to an unknown one, the closest first: the two nearest of those
// whose names hold it (--filter: --benchmark_filter), else the one nearest within an edit for each
// three letters (--devics: --devices).
std::vector<std::string> nearest_flags(const std::string& given) {
  const std::string name = given.substr(0, given.find('='));
  const std::size_t start = name.find_first_not_of('-');
  const std::string bare = start == std::string::npos ? "" : name.substr(start);
  // Every "--name" in --help's text (no std::regex here: GCC 12 warns inside libstdc++'s).
  std::set<std::string> known;
  const std::string text = tb::bench::usage();
  const auto letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; };
  for (std::size_t at = text.find("--"); at != std::string::npos; at = text.find("--", at + 2)) {
    std::size_t end = at + 2;
    while (end < text.size() && letter(text[end])) ++end;
    if (end - at > 3 && text[at + 2] >= 'a' && text[at + 2] <= 'z') known.insert(text.substr(at, end - at));
  }
  std::vector<std::pair<std::size_t, std::string>> holding, near;
  for (const std::string& k : known) {
    const std::size_t d = edit_distance(name, k);
    if (bare.size() >= 3 && k.find(bare) != std::string::npos) holding.emplace_back(d, k);
    if (d <= std::max<std::size_t>(1, bare.size() / 3)) near.emplace_back(d, k);
  }
  std::sort(holding.begin(), holding.end());
  std::sort(near.begin(), near.end());
  std::vector<std::string> out;
  for (std::size_t i = 0; i < std::min<std::size_t>(2, holding.size()); ++i) out.push_back(holding[i].second);
  if (out.empty() && !near.empty()) out.push_back(near.front().second);
  return out;
}

// --summary=FILE is checked (opened to append, created where it is not there) before anything is
// measured: a run of hours that cannot leave its table behind is refused now, with exit status 2.
// What the file holds stays until the summary replaces it at the end.
void check_summary_file(const std::string& path) {
  if (path.empty()) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path file(path);
  if (fs::is_directory(file, ec))
    throw tb::InputError(fmt::format("--summary={}: is a folder; give a file name (e.g. {}/summary.md)", path, path));
  const fs::path folder = file.has_parent_path() ? file.parent_path() : fs::path(".");
  if (!fs::is_directory(folder, ec))
    throw tb::InputError(fmt::format("--summary={}: the folder {} does not exist; create it or give another file", path,
                                     folder.string()));
  errno = 0;
  std::ofstream out(path, std::ios::out | std::ios::app);
  if (!out)
    throw tb::InputError(fmt::format("--summary={}: the file cannot be created there ({}); give a file you may write",
                                     path, errno ? std::strerror(errno) : "refused"));
}

// Under mpirun every rank must measure the same run: a rank started with other flags (mpirun -np 1
// trainbench --batch=50 : -np 1 trainbench --batch=100) would make one row of two runs. Every
// rank compares every rank's shaping flags; each that differs is named, and every rank stops.
std::string ranks_disagree(const tb::bench::Flags& flags) {
  const std::vector<std::string> texts =
      tb::parallel::all_ranks(tb::bench::shaping_flags(flags), "start with the same flags");
  const auto lines = [](const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  };
  const std::vector<std::string> first = lines(texts.at(0));
  std::vector<std::string> differ;
  for (std::size_t r = 1; r < texts.size(); ++r) {
    const std::vector<std::string> other = lines(texts[r]);
    for (std::size_t k = 0; k < std::min(first.size(), other.size()); ++k)
      if (first[k] != other[k]) differ.push_back(fmt::format("rank 0 has {}, rank {} has {}", first[k], r, other[k]));
  }
  if (differ.empty()) return "";
  return fmt::format(
      "the ranks of this MPI job were started with different flags ({}): one row would be made of different runs. "
      "Start every rank with the same flags",
      fmt::join(differ, "; "));
}

// --help, --version, --csv_header, --list_configs and --list_models answer without running anything.
std::optional<int> answer_without_running(const tb::bench::Flags& flags) {
  using namespace tb::bench;
  if (flags.help) {
    std::cout << usage();
    return 0;
  }
  if (flags.version) {
    std::cout << fmt::format("trainbench {}\ncommit {}\nbackends: {}\n", tb::build_version(), tb::git_commit(),
                             tb::build_backends());
    return 0;
  }
  if (flags.csv_header && flags.json) {
    csv_header_json(std::cout);
    return 0;
  }
  if (flags.csv_header) {
    std::cout << fmt::format("{}\n", fmt::join(csv_columns(), ","));
    return 0;
  }
  if (flags.list_configs) {
    if (flags.json)
      list_configs_json(std::cout);
    else
      list_configs(std::cout);
    return 0;
  }
  if (!flags.list_models) return std::nullopt;
  if (flags.json)
    list_models_json(std::cout, flags);
  else
    list_models(std::cout, flags);
  return 0;
}

// What a run is made of before its first benchmark, made in this order: the harness (the plan
// of the benchmarks), the CSV, the log every row goes through, the benchmarks registered with
// the harness writing to it, and the CPU's sgemm peak for every thread count a row uses.
struct Setup {
  tb::bench::MachineContext machine;
  std::unique_ptr<tb::bench::Harness> harness{};
  std::unique_ptr<tb::bench::CsvWriter> csv{};
  std::unique_ptr<tb::bench::RowLog> rows{};
};

// Throws tb::Error on flags that cannot apply or a CSV that cannot be written.
void set_up(Setup& run, const tb::bench::Flags& flags, bool listing, int rank) {
  using namespace tb::bench;
  run.harness = std::make_unique<Harness>(flags, run.machine.cores);
  if (!listing && rank == 0) check_summary_file(flags.summary);
  if (!flags.csv.empty() && !listing && rank == 0) run.csv = std::make_unique<CsvWriter>(flags.csv);
  // The epochs' lines go beside the console table, or to stderr where stdout carries JSON or CSV.
  run.rows =
      std::make_unique<RowLog>(run.machine, run.csv.get(), flags.benchmark_format == "console" ? std::cout : std::cerr);
  run.harness->register_benchmarks(*run.rows);
  if (listing) return;
  std::set<int> thread_counts;
  for (const BenchInfo& b : run.harness->benchmarks())
    if (b.skip_reason.empty()) thread_counts.insert(b.threads);
  run.machine.sgemm_gflops = tb::cpu_peak_gflops(run.machine.cores);
  for (int t : thread_counts) tb::cpu_peak_gflops(t);
}

// Under mpirun every rank must have set up, and planned the same rows, or every rank stops here:
// a rank whose set-up failed (rank 0's --csv, a file only one node lacks) returned while the others
// went on into a collective that waited for it for ever, and a row one rank skipped (fewer cores
// or GPUs on its node) and another ran hung in the row's first collective. Empty where all agree
// (and outside mpirun); else what differs, rank by rank. A collective: every rank calls it.
std::string ranks_set_up_apart(const std::string& error, const tb::bench::Harness* harness) {
  std::string mine = "!" + error;
  if (error.empty()) {
    mine.clear();
    for (const tb::bench::BenchInfo& b : harness->benchmarks())
      mine += b.name + (b.skip_reason.empty() ? "" : " (skipped: " + b.skip_reason + ")") + "\n";
  }
  const std::vector<std::string> all = tb::parallel::all_ranks(mine, "plan the run");
  std::vector<std::string> apart;
  for (std::size_t r = 0; r < all.size(); ++r)
    if (!all[r].empty() && all[r][0] == '!') apart.push_back(fmt::format("rank {}: {}", r, all[r].substr(1)));
  if (!apart.empty()) return fmt::format("{}", fmt::join(apart, "; "));
  const auto runs = [](const std::string& plan) {  // each planned row's name, and whether it runs
    std::vector<std::pair<std::string, std::string>> out;
    std::istringstream in(plan);
    for (std::string line; std::getline(in, line);) {
      const std::size_t skip = line.find(" (skipped: ");
      // "skipped: REASON", without the parenthesis that closed it
      out.emplace_back(line.substr(0, skip),
                       skip == std::string::npos ? "" : line.substr(skip + 2, line.size() - skip - 3));
    }
    return out;
  };
  const auto first = runs(all.at(0));
  for (std::size_t r = 1; r < all.size(); ++r) {
    const auto other = runs(all[r]);
    for (std::size_t k = 0; k < std::max(first.size(), other.size()); ++k) {
      const std::string name0 = k < first.size() ? first[k].first : "nothing",
                        name = k < other.size() ? other[k].first : "nothing";
      if (name0 != name)
        return fmt::format("rank 0 plans {} where rank {} plans {}: the ranks must plan the same rows", name0, r, name);
      if (first[k].second.empty() != other[k].second.empty())
        return fmt::format(
            "{}: rank {} {} and rank {} {}: every rank takes part in every row, so each needs what the row needs (the "
            "same cores or GPUs on every node; under Open MPI --bind-to none gives each rank the node's cores)",
            name0, first[k].second.empty() ? 0 : r, "runs it", first[k].second.empty() ? r : 0,
            (first[k].second.empty() ? other[k].second : first[k].second));
    }
  }
  return "";
}

// The end of a run on rank 0: the summary, then what was skipped or failed; the exit status.
int finish(const Setup& run, const tb::bench::Reporter& reporter, const tb::bench::Flags& flags, std::size_t ran,
           bool listing) {
  using namespace tb::bench;
  const bool summary_written = ran == 0 || listing || write_summary(run.rows->rows(), flags);
  if (ran == 0) {
    std::cerr << fmt::format(
        "trainbench: error: no benchmark matches --benchmark_filter='{}'. Names are "
        "<train|epochs>/<model>/<dataset>/<device>/<precision>/bs:<n>[/<variant>], models {}; the variant ends "
        "the name where a flag that changes what is measured differs from its default (/optimizer:sgd/lr:0.01, "
        "/data_on_device/cuda_graph, /timeline:off), so a filter ending in bs:<n>$ misses it. Nearest names with "
        "these flags: {}. List them all with --benchmark_list_tests and the same flags\n",
        flags.benchmark_filter, fmt::join(tb::models::model_names(), ", "),
        fmt::join(nearest_names(flags.benchmark_filter, run.harness->benchmarks(), 3), ", "));
    return kUsageError;
  }
  const auto in_csv = [&](const char* what) { return run.csv ? fmt::format("{} {}", what, flags.csv) : std::string(); };
  if (run.csv) std::cerr << run.csv->rows_written_line();
  if (reporter.skipped() > 0)
    std::cerr << fmt::format(
        "trainbench: {} benchmark(s) skipped: this machine cannot run their configurations (the "
        "'skipped' lines above say why{})\n",
        reporter.skipped(), in_csv("; so does the message column of"));
  if (reporter.failed() > 0) {
    std::cerr << fmt::format("trainbench: {} benchmark(s) failed; see the messages above{}\n", reporter.failed(),
                             in_csv(" and the status column of"));
    return 1;
  }
  return summary_written ? 0 : 1;  // a run asked for a file it did not leave did not succeed
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tb::bench;
  tb::parallel::start_world();  // MPI, when started by mpirun
  defer_signals_during_writes();
  bind_job_to_its_parent();
  Flags flags;
  try {
    flags = parse_flags(argc, argv);
    tb::own_cpu_isa();  // a bad TB_MAX_CPU_ISA stops the run before anything is measured
  } catch (const tb::InputError& e) {
    std::cerr << "trainbench: error: " << e.what() << "\n";
    return kUsageError;
  }
  if (const std::optional<int> answered = answer_without_running(flags)) return *answered;
  if (const std::string disagree = ranks_disagree(flags); !disagree.empty()) {
    if (tb::parallel::world().rank == 0) std::cerr << "trainbench: error: " << disagree << "\n";
    return kUsageError;
  }
  const bool json_out = has_prefix(argc, argv, "--benchmark_out=");  // before Initialize takes it away
  // Likewise: after Initialize a listing was taken for a run (its --csv created, its --summary
  // emptied, the CPU's peaks and, under mpirun, the ranks' link measured).
  const bool listing = has_flag(argc, argv, "--benchmark_list_tests");
  // Every call of a benchmark is one repetition of trainbench's own steps (bench/run/run.hpp
  // StepBudget): Google Benchmark takes each as it comes, sizing nothing, and names the benchmark
  // as trainbench does (no /iterations:N).
  std::vector<char*> gb_argv(argv, argv + argc);
  char no_min_time[] = "--benchmark_min_time=0";
  gb_argv.push_back(no_min_time);
  argc = int(gb_argv.size());
  argv = gb_argv.data();
  benchmark::Initialize(&argc, argv);
  if (argc > 1) {
    const std::vector<std::string> near = nearest_flags(argv[1]);
    std::cerr << fmt::format("trainbench: error: unknown flag '{}' ({}see trainbench --help)\n", argv[1],
                             near.empty() ? "" : fmt::format("did you mean {}? ", fmt::join(near, " or ")));
    return kUsageError;
  }
  if (flags.predict_allreduce > 0) {
    try {
      return predict_allreduce(flags);
    } catch (const tb::Error& e) {
      std::cerr << "trainbench: error: " << e.what() << "\n";
      return kUsageError;
    }
  }
  if (!flags.predict_from.empty()) {
    try {
      return predict_from_csv(flags, read_machine_context());
    } catch (const tb::Error& e) {
      std::cerr << "trainbench: error: " << e.what() << "\n";
      return kUsageError;
    }
  }
  const int rank = tb::parallel::world().rank;
  Setup run{.machine = read_machine_context()};
  std::string error;
  try {
    set_up(run, flags, listing, rank);
  } catch (const tb::Error& e) {
    error = e.what();
  }
  if (tb::parallel::world().size > 1 && !listing) {
    const std::string apart = ranks_set_up_apart(error, run.harness.get());
    if (!apart.empty()) {
      if (rank == 0) std::cerr << "trainbench: error: " << apart << "\n";
      return kUsageError;
    }
  } else if (!error.empty()) {
    std::cerr << "trainbench: error: " << error << "\n";
    return kUsageError;
  }
  Harness& harness = *run.harness;
  if (!listing) harness.predictor().measure_world_link(harness.benchmarks());  // under mpirun, on every rank
  run.machine.nvidia_driver = harness.nvidia_driver();
  // Google Benchmark prints its custom context on the console too: added only where JSON is written.
  if (flags.benchmark_format != "console" || json_out) add_json_context(run.machine, harness.benchmarks());
  Reporter reporter(harness, *run.rows, display_options(flags));
  if (rank != 0) {
    SilentReporter silent(rank);
    try {
      benchmark::RunSpecifiedBenchmarks(&silent);
    } catch (const CsvWriteError& e) {  // rank 0 stopped: so does this rank
      std::cerr << fmt::format("trainbench rank {}: {}\n", rank, e.what());
      harness.release_sessions();
      return 1;
    }
    benchmark::Shutdown();
    harness.release_sessions();
    return silent.failed > 0 ? 1 : 0;
  }
  std::size_t ran = 0;
  try {
    ran = benchmark::RunSpecifiedBenchmarks(&reporter);
  } catch (const CsvWriteError& e) {
    // Rows that cannot be written are hours lost: stop, and say what is on disk.
    std::cout << std::flush;
    std::cerr << "trainbench: error: " << e.what() << "\n";
    harness.release_sessions();
    return 1;
  }
  benchmark::Shutdown();
  harness.release_sessions();
  return finish(run, reporter, flags, ran, listing);
}
