// The prediction_inputs column (inputs.hpp): written by one-device train runs, read by every
// prediction and replay.
#include "bench/predict/inputs.hpp"

// GCC 12 takes the std::function inside libstdc++'s std::regex for maybe uninitialised where it
// inlines it (a false positive); the filter below is the one regex here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <regex>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench/output/rows.hpp"
#include "engine/core/error.hpp"
#include "engine/core/stats.hpp"

namespace tb::bench {
namespace {

std::vector<std::string> split(const std::string& text, char by) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find(by, start);
    if (end == std::string::npos) end = text.size();
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::string numbers(const std::vector<double>& values) {
  std::vector<std::string> parts;
  for (double v : values) parts.push_back(fmt::format("{:.9g}", v));
  return fmt::format("{}", fmt::join(parts, ","));
}

std::string range(const parallel::Range& r) { return numbers({r.value, r.low, r.high}); }

double number(const std::string& text, const std::string& field) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v))
    throw InputError(fmt::format("prediction_inputs: {}: '{}' is not a number", field, text));
  return v;
}

// A count: a whole number from 0 to 2^31 - 1 (casting a larger double is undefined).
long whole_number(const std::string& text, const std::string& field) {
  const double v = number(text, field);
  if (v < 0 || v > 2147483647.0 || v != std::floor(v))
    throw InputError(fmt::format("prediction_inputs: {}: '{}' is not a count (a whole number from 0)", field, text));
  return long(v);
}

std::vector<double> number_list(const std::string& text, const std::string& field) {
  std::vector<double> out;
  for (const std::string& part : split(text, ',')) out.push_back(number(part, field));
  return out;
}

parallel::Range range_of(const std::string& text, const std::string& field) {
  const std::vector<double> v = number_list(text, field);
  if (v.size() != 3) throw InputError(fmt::format("prediction_inputs: {} needs VALUE,LOW,HIGH, has '{}'", field, text));
  return {v[0], v[1], v[2]};
}

// What a run writes holds these; anything else (an edited or damaged cell) would predict
// nonsense (negative samples/s, an inverted band) instead of being refused. `sharing_given`: the
// cell has the sharing fields (a run writes them from 2 ranks on).
void check_values(const PredictionInputs& in, bool sharing_given) {
  const parallel::OneDevice& one = in.one;
  const parallel::StepTimeline& t = one.timeline;
  const auto refuse = [](const std::string& what) {
    throw InputError(fmt::format("prediction_inputs: {} (a cell a run wrote holds none such: was it edited?)", what));
  };
  double ready = 0;
  for (std::size_t k = 0; k < t.bucket_bytes.size(); ++k) {
    if (!(t.bucket_bytes[k] >= 0)) refuse(fmt::format("bucket {} has {} bytes", k, t.bucket_bytes[k]));
    if (!(t.bucket_ready_s[k] >= ready))
      refuse(fmt::format("bucket {} is ready at {} s, before the one before it ({} s) or before 0", k,
                         t.bucket_ready_s[k], ready));
    ready = t.bucket_ready_s[k];
  }
  if (!(t.backward_end_s >= ready && t.step_end_s >= t.backward_end_s))
    refuse(fmt::format("the last bucket ready at {} s, backward's end at {} s and the step's at {} s are not in order",
                       ready, t.backward_end_s, t.step_end_s));
  if (t.steps < 1) refuse(fmt::format("timeline_steps={}: a timeline watches one step or more", t.steps));
  for (double s : one.step_times)
    if (!(s > 0)) refuse(fmt::format("a step time of {} s", s));
  const auto ordered = [&](const parallel::Range& r, const char* name, double floor, bool floor_included) {
    const bool above = floor_included ? r.low >= floor : r.low > floor;
    if (!(above && r.low <= r.value && r.value <= r.high))
      refuse(fmt::format("{}={},{},{} is not VALUE,LOW,HIGH with LOW <= VALUE <= HIGH and LOW {} {}", name, r.value,
                         r.low, r.high, floor_included ? ">=" : ">", floor));
  };
  ordered(one.dp_overhead, "dp", 0, true);
  ordered(one.sharing, "sharing", 0, false);
  if (sharing_given && (in.sharing_ranks < 2 || in.sharing_hosts < 1))
    refuse(fmt::format("sharing_ranks={} and sharing_hosts={}: ranks share a machine from 2 ranks on 1 host or more",
                       in.sharing_ranks, in.sharing_hosts));
}

}  // namespace

std::string format_prediction_inputs(const parallel::OneDevice& one, int sharing_ranks, int sharing_hosts) {
  const parallel::StepTimeline& t = one.timeline;
  std::vector<std::string> buckets;
  for (std::size_t k = 0; k < t.bucket_bytes.size(); ++k)
    buckets.push_back(fmt::format("{:.9g}@{:.9g}", t.bucket_bytes[k], t.bucket_ready_s[k]));
  std::vector<double> sorted = one.step_times, quantiles;
  std::sort(sorted.begin(), sorted.end());
  if (!sorted.empty())
    for (int k = 0; k < kStepQuantiles; ++k)
      quantiles.push_back(quantile_of_sorted(sorted, k / double(kStepQuantiles - 1)));
  std::string text = fmt::format("v1;buckets={};backward_end={:.9g};step_end={:.9g};timeline_steps={};steps={}",
                                 fmt::join(buckets, ","), t.backward_end_s, t.step_end_s, t.steps, numbers(quantiles));
  if (!one.dp_overhead_source.empty() && one.dp_overhead_source.rfind("not measured", 0) != 0)
    text += ";dp=" + range(one.dp_overhead);
  if (sharing_ranks > 1)
    text +=
        fmt::format(";sharing={};sharing_ranks={};sharing_hosts={}", range(one.sharing), sharing_ranks, sharing_hosts);
  return text;
}

PredictionInputs parse_prediction_inputs(const std::string& text) {
  const std::vector<std::string> fields = split(text, ';');
  if (fields.empty() || fields[0] != "v1")
    throw InputError(fmt::format(
        "prediction_inputs: '{}' is not version 1 of the column (v1;buckets=...): written by another trainbench?",
        text.substr(0, 40)));
  std::map<std::string, std::string> f;
  for (std::size_t k = 1; k < fields.size(); ++k) {
    const std::size_t eq = fields[k].find('=');
    if (eq == std::string::npos) throw InputError(fmt::format("prediction_inputs: '{}' is not NAME=VALUE", fields[k]));
    if (!f.emplace(fields[k].substr(0, eq), fields[k].substr(eq + 1)).second)
      throw InputError(fmt::format("prediction_inputs: {}= is given twice", fields[k].substr(0, eq)));
  }
  for (const char* needed : {"buckets", "backward_end", "step_end", "timeline_steps", "steps"})
    if (!f.count(needed)) throw InputError(fmt::format("prediction_inputs: no {}= field", needed));
  // A field no run writes (a misspelt dp=, an edit) would be ignored and its figure predicted
  // without; the sharing fields come together or not at all.
  static const std::vector<std::string> known = {"buckets",  "steps",          "backward_end",
                                                 "step_end", "timeline_steps", "dp",
                                                 "sharing",  "sharing_ranks",  "sharing_hosts"};
  for (const auto& [name, value] : f)
    if (std::find(known.begin(), known.end(), name) == known.end())
      throw InputError(fmt::format("prediction_inputs: {}= is no field of version 1 (its fields: {})", name,
                                   fmt::join(known, ", ")));
  const std::size_t sharing_fields = f.count("sharing") + f.count("sharing_ranks") + f.count("sharing_hosts");
  if (sharing_fields != 0 && sharing_fields != 3)
    throw InputError(
        "prediction_inputs: sharing=, sharing_ranks= and sharing_hosts= come together, and some are missing");
  PredictionInputs in;
  parallel::OneDevice& one = in.one;
  parallel::StepTimeline& t = one.timeline;
  if (!f["buckets"].empty())
    for (const std::string& bucket : split(f["buckets"], ',')) {
      const std::size_t at = bucket.find('@');
      if (at == std::string::npos)
        throw InputError(fmt::format("prediction_inputs: bucket '{}' is not BYTES@READY_S", bucket));
      t.bucket_bytes.push_back(number(bucket.substr(0, at), "buckets"));
      t.bucket_ready_s.push_back(number(bucket.substr(at + 1), "buckets"));
    }
  t.backward_end_s = number(f["backward_end"], "backward_end");
  t.step_end_s = number(f["step_end"], "step_end");
  t.steps = whole_number(f["timeline_steps"], "timeline_steps");
  if (!f["steps"].empty()) one.step_times = number_list(f["steps"], "steps");
  if (f.count("dp")) {
    one.dp_overhead = range_of(f["dp"], "dp");
    one.dp_overhead_source = fmt::format(
        "{:.3g} ms ({:.3g} to {:.3g}), steps through the data-parallel path with one replica against plain ones",
        one.dp_overhead.value * 1e3, one.dp_overhead.low * 1e3, one.dp_overhead.high * 1e3);
  } else {
    one.dp_overhead_source = "not measured";
  }
  if (f.count("sharing")) {
    one.sharing = range_of(f["sharing"], "sharing");
    in.sharing_ranks = int(whole_number(f["sharing_ranks"], "sharing_ranks"));
    in.sharing_hosts = int(whole_number(f["sharing_hosts"], "sharing_hosts"));
    one.sharing_source =
        fmt::format("x{:.3g} ({:.3g} to {:.3g}) with {} ranks stepping together on {} host(s)", one.sharing.value,
                    one.sharing.low, one.sharing.high, in.sharing_ranks, in.sharing_hosts);
  } else {
    one.sharing_source = "no ranks shared this machine in the run";
  }
  check_values(in, f.count("sharing") != 0);
  return in;
}

SavedRows saved_one_device_rows(const std::vector<Row>& rows, const std::string& filter, const std::string& flag,
                                const std::string& path) {
  std::regex pattern;
  try {
    pattern = std::regex(filter);
  } catch (const std::regex_error& e) {
    throw InputError(fmt::format("--benchmark_filter={}: not a regular expression ({})", filter, e.what()));
  }
  SavedRows saved;
  std::size_t without_inputs = 0;
  for (const Row& r : rows) {
    const std::string& name = r.benchmark;
    if (r.kind != "train" || r.measurement != "measured" || !is_ok_iteration(r) || r.data_parallel ||
        !std::regex_search(name, pattern))
      continue;
    if (r.prediction_inputs.empty()) {
      ++without_inputs;
      continue;
    }
    // Refused here, before anything runs, naming the file and the row: a replay's ranks all read
    // the file, and all stop alike (one rank failing later left the others in its collectives).
    const auto refuse = [&](const std::string& what) {
      throw InputError(fmt::format("{}={}: the row of {}: {}", flag, path, name, what));
    };
    try {
      parse_prediction_inputs(r.prediction_inputs);
    } catch (const InputError& e) {
      refuse(e.what());
    }
    if (!r.batch || *r.batch < 1 || !(r.samples_per_s.value_or(0) > 0) || !std::isfinite(*r.samples_per_s))
      refuse(
          fmt::format("batch {} at {} samples/s: an ok row a run wrote has a batch of 1 or more and a rate above 0 "
                      "(was it edited?)",
                      r.batch ? *r.batch : 0, r.samples_per_s.value_or(NAN)));
    if (!saved.rows.count(name)) saved.names.push_back(name);
    saved.rows[name].push_back(&r);
  }
  if (saved.names.empty())
    throw InputError(fmt::format(
        "{}={}: no one-device train/ row matching --benchmark_filter='{}' holds prediction_inputs{}. Rows carry them "
        "from schema 6 on, unless run with --timeline=off or --cuda_graph: run the one-device benchmark again with "
        "this trainbench (e.g. trainbench --devices=gpu:1 --csv=run.csv)",
        flag, path, filter, without_inputs ? fmt::format(" ({} such rows without them)", without_inputs) : ""));
  return saved;
}

}  // namespace tb::bench
