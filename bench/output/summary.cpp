// The end-of-run summary (summary.hpp), built from the run's CSV rows so that it shows exactly
// what the CSV holds: medians over repetitions, and predicted rows marked as such.
#include "bench/output/summary.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench/output/rows.hpp"
#include "engine/core/stats.hpp"

namespace tb::bench {
namespace {

// Rows a summary line is made of: a workload (model, dataset, batch-independent), a precision
// and a variant; the devices are its columns.
struct LineKey {
  std::string workload, precision;
  bool operator<(const LineKey& o) const { return std::tie(workload, precision) < std::tie(o.workload, o.precision); }
};

struct Cell {
  std::vector<double> rates, efficiencies, comm_shares, speedups;
  std::string speedup_differs;  // what differs between the rows and their cpu row
  double peak_bytes = 0;
};

// A number, -1 where there is none.
double value(const Number& v) { return v && !std::isnan(*v) ? *v : -1; }
double value(const Count& v) { return v ? double(*v) : -1; }

// The column a measured row belongs to: its device, marked where it is not a scaling figure
// (predicted rows have a table of their own).
std::string device_column(const Row& row) {
  std::string device = row.device;
  if (row.shared_device == 1) device += " (one GPU)";
  return device;
}

std::string rate_text(double v) { return v < 0 ? "" : v >= 1e4 ? fmt::format("{:.0f}", v) : fmt::format("{:.4g}", v); }

using Table = std::vector<std::vector<std::string>>;

std::string render(const Table& table, bool markdown) {
  std::vector<std::size_t> widths(table.at(0).size(), 0);
  for (const auto& line : table)
    for (std::size_t i = 0; i < line.size(); ++i) widths[i] = std::max(widths[i], line[i].size());
  std::string out;
  for (std::size_t r = 0; r < table.size(); ++r) {
    for (std::size_t i = 0; i < table[r].size(); ++i)
      out += markdown ? fmt::format("| {} ", table[r][i])
             : i == 0 ? fmt::format("{:<{}}", table[r][i], widths[i])
                      : fmt::format("  {:>{}}", table[r][i], widths[i]);
    out += markdown ? "|\n" : "\n";
    if (r == 0 && markdown) {
      for (std::size_t i = 0; i < widths.size(); ++i) out += i < 2 ? "| --- " : "| ---: ";
      out += "|\n";
    }
  }
  return out;
}

// A predicted rate with its band: "66.3 (62.1-70.4)"; the point alone for rows without one.
std::string band_text(const Row& row) {
  const double low = value(row.samples_per_s_low), high = value(row.samples_per_s_high);
  const std::string point = rate_text(value(row.samples_per_s));
  return low > 0 && high > 0 ? fmt::format("{} ({}-{})", point, rate_text(low), rate_text(high)) : point;
}

// A line per one-device row and link, a pair of columns (samples/s with its band, efficiency) per N.
std::string render_predictions(const std::vector<const Row*>& rows, bool markdown) {
  std::vector<std::string> counts;
  std::map<std::pair<std::string, std::string>, std::map<std::string, const Row*>> lines;
  for (const Row* r : rows) {
    const std::string& device = r->device;
    const std::string n = device.substr(device.find(':') + 1);
    if (std::find(counts.begin(), counts.end(), n) == counts.end()) counts.push_back(n);
    std::string link = fmt::format("{} ({:.3g} GB/s)", r->link, value(r->link_busbw_gbps));
    if (!r->network.empty())
      link += fmt::format(" + {} nodes, {} ({:.3g} GB/s per NIC)", r->nodes ? std::to_string(*r->nodes) : "",
                          r->network, value(r->network_busbw_gbps));
    lines[{r->predicted_from, link}][n] = r;
  }
  std::sort(counts.begin(), counts.end(),
            [](const auto& a, const auto& b) { return std::atoi(a.c_str()) < std::atoi(b.c_str()); });
  Table table{{"from", "link"}};
  for (const auto& n : counts) {
    table[0].push_back(fmt::format("N={} samples/s", n));
    table[0].push_back(fmt::format("N={} efficiency", n));
  }
  for (const auto& [key, by_n] : lines) {
    std::vector<std::string> line{key.first, key.second};
    for (const auto& n : counts) {
      const auto it = by_n.find(n);
      line.push_back(it == by_n.end() ? "" : band_text(*it->second));
      line.push_back(it == by_n.end() ? "" : fmt::format("{:.0f}%", 100 * value(it->second->scaling_efficiency)));
    }
    table.push_back(line);
  }
  return render(table, markdown);
}

// What a summary is made of, collected from the rows in the order they came.
struct Collected {
  std::map<LineKey, std::map<std::string, Cell>> lines;    // measured rows, by line and device column
  std::vector<std::string> devices;                        // the device columns, in the order rows came
  std::set<std::string> scaling, communicating, compared;  // device columns with efficiencies, comm shares, x cpu
  std::vector<std::string> skipped;                        // each reason once
  std::set<std::string> skip_seen;
  std::vector<const Row*> predicted;

  void add_skipped(const Row& row) {
    std::string why = row.message;
    if (why.rfind("skipped: ", 0) == 0) why.erase(0, 9);
    // "gpu:1: no CUDA device" is about the device; anything else about this precision on it.
    const std::string& device = row.device;
    const std::string what = why.rfind(device, 0) == 0 ? why : fmt::format("{} {}: {}", device, row.precision, why);
    if (skip_seen.insert(device + why).second) skipped.push_back(what);
  }

  void add_measured(const Row& row) {
    std::string variant = row.variant;
    if (const auto at = variant.find("shared_device"); at != std::string::npos) variant.erase(at);
    while (!variant.empty() && variant.back() == '/') variant.pop_back();
    const LineKey key{fmt::format("{}/{}{}", row.model, row.dataset, variant.empty() ? "" : " [" + variant + "]"),
                      row.precision};
    const std::string column = device_column(row);
    if (std::find(devices.begin(), devices.end(), column) == devices.end()) devices.push_back(column);
    Cell& c = lines[key][column];
    if (double r = value(row.samples_per_s); r >= 0) c.rates.push_back(r);  // a NaN rate is none, not -1
    if (value(row.data_parallel) >= 2) scaling.insert(column);
    if (double e = value(row.scaling_efficiency); e >= 0) c.efficiencies.push_back(e);
    if (double s = value(row.comm_share); s >= 0) {
      c.comm_shares.push_back(s);
      communicating.insert(column);
    }
    if (double x = value(row.speedup_vs_cpu); x >= 0) {
      c.speedups.push_back(x);
      c.speedup_differs = row.speedup_differs;
      compared.insert(column);
    }
    // A GPU row's device memory; a CPU row's resident set.
    const double device_bytes = value(row.mem_peak_bytes);
    c.peak_bytes = std::max(c.peak_bytes, device_bytes > 0 ? device_bytes : value(row.peak_rss_bytes));
  }

  void add(const Row& row) {
    if (row.kind != "train") return;
    if (row.status == "skipped")
      add_skipped(row);
    else if (!is_ok_iteration(row))
      return;
    else if (row.measurement == "predicted")
      predicted.push_back(&row);
    else
      add_measured(row);
  }
};

// The measured table: per line, samples/s of each device column, then x cpu, efficiency and
// comm share where the rows have them, then peak memory. Every figure is the rows' own.
class MeasuredTable {
 public:
  explicit MeasuredTable(const Collected& c) : c_(c) {}

  Table table() const {
    Table table{{"workload", "precision"}};
    for (const auto& d : c_.devices) table[0].push_back(d + " samples/s");
    for (const auto& d : c_.devices)
      if (c_.compared.count(d)) table[0].push_back(d + " x cpu");
    for (const auto& d : c_.devices)
      if (c_.scaling.count(d)) table[0].push_back(d + " efficiency");
    for (const auto& d : c_.devices)
      if (c_.communicating.count(d)) table[0].push_back(d + " comm share");
    table[0].push_back("peak GiB");
    for (const auto& [key, by_device] : c_.lines) table.push_back(line(key, by_device));
    return table;
  }

 private:
  // "187.00x (bf16 vs fp32, bs 128 vs 8)": the row's speed-up with what differs from its cpu row.
  static std::string speedup_text(const Cell& c) {
    if (c.speedups.empty()) return "";
    const std::string ratio = fmt::format("{:.2f}x", median(c.speedups));
    return c.speedup_differs.empty() ? ratio : fmt::format("{} ({})", ratio, c.speedup_differs);
  }

  std::vector<std::string> line(const LineKey& key, const std::map<std::string, Cell>& by_device) const {
    std::vector<std::string> line{key.workload, key.precision};
    auto each = [&](auto&& include, auto&& text) {
      for (const auto& d : c_.devices) {
        if (!include(d)) continue;
        const auto it = by_device.find(d);
        line.push_back(it == by_device.end() ? "" : text(it->second));
      }
    };
    each([](const std::string&) { return true; }, [](const Cell& c) { return rate_text(median(c.rates)); });
    each([&](const std::string& d) { return c_.compared.count(d) > 0; }, [](const Cell& c) { return speedup_text(c); });
    each([&](const std::string& d) { return c_.scaling.count(d) > 0; },
         [](const Cell& c) {
           return c.efficiencies.empty() ? "" : fmt::format("{:.0f}%", 100 * median(c.efficiencies));
         });
    each(
        [&](const std::string& d) { return c_.communicating.count(d) > 0; },
        [](const Cell& c) { return c.comm_shares.empty() ? "" : fmt::format("{:.0f}%", 100 * median(c.comm_shares)); });
    double peak = 0;
    for (const auto& [d, c] : by_device) peak = std::max(peak, c.peak_bytes);
    line.push_back(peak > 0 ? fmt::format("{:.2f}", peak / double(1 << 30)) : "");
    return line;
  }

  const Collected& c_;
};

}  // namespace

std::string summary_table(const std::vector<Row>& rows, bool markdown) {
  Collected c;
  for (const Row& row : rows) c.add(row);
  if (c.lines.empty() && c.skipped.empty() && c.predicted.empty()) return "";
  std::string out = markdown ? "# trainbench summary\n\n" : "";
  if (!c.lines.empty()) {
    out += render(MeasuredTable(c).table(), markdown);
    out += markdown ? "\n" : "";
    out +=
        "samples/s: median over repetitions, on the wall clock (host gaps included, every device); x cpu: over "
        "this machine's cpu row of the workload in the same precision, else fp32, with what differs between the "
        "two in brackets (precision, batch); "
        "efficiency: samples/s / (N x the one-device row's); peak GiB: the largest of the line's rows (GPU: "
        "device memory trainbench allocated; CPU: the process's resident set); (one GPU): N replicas sharing "
        "one GPU, a correctness check, not scaling\n";
  }
  if (!c.predicted.empty()) {
    out += markdown ? "\n## Predicted N-device scaling\n\n" : "\npredicted N-device scaling (not measured):\n";
    out += render_predictions(c.predicted, markdown);
    out += markdown ? "\n" : "";
    out +=
        "samples/s predicted (low-high: the band, every term of the prediction at its slow end, then its fast end; "
        "the CSV's dominant_term names the term that moves it most: docs/prediction.md)\n";
  }
  if (!c.skipped.empty()) {
    out += markdown ? "\n## Skipped\n\n" : "skipped:\n";
    for (const std::string& s : c.skipped) out += markdown ? fmt::format("- {}\n", s) : fmt::format("  {}\n", s);
  }
  return out;
}

}  // namespace tb::bench
