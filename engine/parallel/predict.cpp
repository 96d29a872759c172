// The link presets and the all-reduce queue of a predicted N-device step (predict.hpp).
#include "engine/parallel/predict.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <numeric>
#include <optional>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/core/error.hpp"
#include "engine/core/stats.hpp"
#include "engine/core/timer.hpp"
#include "engine/parallel/communicator.hpp"

namespace tb::parallel {

double StepTimeline::gradient_bytes() const { return std::accumulate(bucket_bytes.begin(), bucket_bytes.end(), 0.0); }

namespace {

// One figure: VALUE, or VALUE:LOW-HIGH with the band either side of it (LOW <= VALUE <= HIGH).
struct Figure {
  double value = 0, low = 0, high = 0;
};

bool parse_number(const std::string& text, double& value) {
  char* end = nullptr;
  value = std::strtod(text.c_str(), &end);
  return !text.empty() && *end == '\0' && std::isfinite(value);
}

bool parse_figure(const std::string& text, Figure& f) {
  const auto colon = text.find(':');
  if (!parse_number(text.substr(0, colon), f.value)) return false;
  f.low = f.high = f.value;
  if (colon == std::string::npos) return true;
  // LOW-HIGH: the dash that is not an exponent's sign.
  const std::string band = text.substr(colon + 1);
  std::size_t dash = band.find('-', 1);
  while (dash != std::string::npos && (band[dash - 1] == 'e' || band[dash - 1] == 'E')) dash = band.find('-', dash + 1);
  return dash != std::string::npos && parse_number(band.substr(0, dash), f.low) &&
         parse_number(band.substr(dash + 1), f.high) && f.low <= f.value && f.value <= f.high;
}

// The figures a link may be given: beyond them a prediction's times overflow or vanish (a link of
// 1e308 GB/s and 1e308 us predicted 0 samples/s, its band NaN, written as an ok row).
constexpr double kLowestBusbwGbps = 1e-6, kHighestBusbwGbps = 1e5, kHighestLatencyUs = 1e6;

// BUSBW_GBPS[:LOW-HIGH][,LATENCY_US[:LOW-HIGH]] into a custom link named by `flag`.
std::optional<Link> parse_figures(const std::string& text, const std::string& flag) {
  const auto comma = text.find(',');
  Figure busbw, latency;
  if (!parse_figure(text.substr(0, comma), busbw) || busbw.low < kLowestBusbwGbps || busbw.high > kHighestBusbwGbps)
    return std::nullopt;
  if (comma != std::string::npos &&
      (!parse_figure(text.substr(comma + 1), latency) || latency.low < 0 || latency.high > kHighestLatencyUs))
    return std::nullopt;
  Link link{.name = "custom",
            .busbw_gbps = busbw.value,
            .latency_us = latency.value,
            .source = fmt::format("{}={}", flag, text)};
  if (busbw.low < busbw.value) link.busbw_low_gbps = busbw.low;
  if (busbw.high > busbw.value) link.busbw_high_gbps = busbw.high;
  if (latency.low < latency.value) link.latency_low_us = latency.low;
  if (latency.high > latency.value) link.latency_high_us = latency.high;
  if (link.busbw_low_gbps > 0 || link.busbw_high_gbps > 0 || link.latency_low_us >= 0 || link.latency_high_us >= 0)
    link.low_source = "the band given with " + flag;
  return link;
}

std::string names_of(const std::vector<Link>& presets) {
  std::string names;
  for (const Link& l : presets) names += l.name + ", ";
  return names;
}

}  // namespace

Link parse_link(const std::string& text) {
  for (const Link& l : link_presets())
    if (text == l.name) return l;
  if (text == "measured") return Link{.name = "measured", .source = "measured at start-up"};
  if (std::optional<Link> custom = parse_figures(text, "--link")) return *custom;
  throw InputError(fmt::format(
      "--link: '{}' is neither a preset ({}measured) nor BUSBW_GBPS[:LOW-HIGH][,LATENCY_US[:LOW-HIGH]] (e.g. "
      "--link=100,20: GB/s, us per step; --link=100:80-110,20:15-30 with their bands; {:g} to {:g} GB/s, 0 to {:g} "
      "us)",
      text, names_of(link_presets()), kLowestBusbwGbps, kHighestBusbwGbps, kHighestLatencyUs));
}

std::string link_figures(const Link& link) {
  const auto figure = [](double value, double low, double high) {
    return low < value || high > value ? fmt::format("{:.4g}:{:.4g}-{:.4g}", value, low, high)
                                       : fmt::format("{:.4g}", value);
  };
  return figure(link.busbw_gbps, link.low_busbw(), link.high_busbw()) + "," +
         figure(link.latency_us, link.low_latency(), link.high_latency());
}

Link parse_network(const std::string& text) {
  // xNICS ends the text: ib_ndr400x8, 12.5,5x2.
  std::string base = text;
  long long nics = 1;
  if (const auto x = text.rfind('x'); x != std::string::npos && x + 1 < text.size() &&
                                      text.find_first_not_of("0123456789", x + 1) == std::string::npos) {
    nics = std::strtoll(text.c_str() + x + 1, nullptr, 10);  // saturates: a count too large is refused below
    base = text.substr(0, x);
  }
  Link link;
  bool found = false;
  for (const Link& l : network_presets())
    if (base == l.name) link = l, found = true;
  if (!found)
    if (std::optional<Link> custom = parse_figures(base, "--network")) link = *custom, found = true;
  if (!found || nics < 1 || nics > 64)
    throw InputError(fmt::format(
        "--network: '{}' is neither a preset ({}each with xNICS for its NICs per node, e.g. ib_ndr400x8) nor "
        "BUSBW_GBPS[:LOW-HIGH][,LATENCY_US[:LOW-HIGH]][xNICS] per NIC (e.g. --network=10,50 or 12.5,5x2, or "
        "10:8-11,50:40-80 with their bands; {:g} to {:g} GB/s, 0 to {:g} us)",
        text, names_of(network_presets()), kLowestBusbwGbps, kHighestBusbwGbps, kHighestLatencyUs));
  link.nics = int(nics);
  if (nics > 1) link.name += fmt::format("x{}", nics);
  return link;
}

namespace {

// A measured link's bus bandwidth band comes from the swept sizes of this many bytes and up.
constexpr double kFitBandFromBytes = double(1 << 20);

// The swept time of `bytes` among the sweep's ranks, on `times` (one per swept size): between two
// sizes, on the line through them; beyond the largest, at the link's bus bandwidth from there;
// below the smallest, on the line from the fitted latency at no bytes to the smallest size's time.
double swept_s(double bytes, const Link& link, const std::vector<double>& times) {
  const auto& sw = link.sweep;
  const int n = link.sweep_ranks;
  if (bytes <= sw.front().first) {
    const double none = std::min(link.latency_us * 1e-6 * 2 * std::max(1, n - 1), times.front());
    return none + (times.front() - none) * bytes / sw.front().first;
  }
  for (std::size_t k = 1; k < sw.size(); ++k)
    if (bytes <= sw[k].first) {
      const double b0 = sw[k - 1].first, b1 = sw[k].first;
      return times[k - 1] + (times[k] - times[k - 1]) * (bytes - b0) / (b1 - b0);
    }
  return times.back() + allreduce_bus_factor(n) * (bytes - sw.back().first) / (link.busbw_gbps * 1e9);
}

}  // namespace

namespace {

// NCCL's protocols, from its tuning model (NVIDIA/nccl src/graph/tuning.cc, 2.28: baseLat,
// hwLat and the bandwidth refinements of ncclTopoTuneModel; the GPU machines ran 2.28.9, whose
// Hopper and Ampere figures are 2.28.3's and 2.28.7's): a base latency per algorithm, a latency per
// step over NVLink, PCIe and the network, and the share of the bus bandwidth each reaches. LL128
// runs only within NVLink nodes (or one GPU a node); its tree reaches 7/9 of the bus within one
// node, 120/128 across. ncclTopoGetAlgoTime then scales a tree's bandwidth by a factor of the
// buffer's size, its treeCorrectionFactor: by powers of two of bytes / 64, from 64 B up to 256 MB.
struct Protocol {
  const char* name;
  double ring_base_us, tree_base_us;
  double ring_step_us[3], tree_step_us[3];  // NVLink, PCIe, network
  double ring_share, tree_share;            // of the bus bandwidth (trees x 0.92 besides)
  double tree_share_one_node;               // within one node, where it differs
};
constexpr Protocol kProtocols[] = {
    {"ll", 6.6, 6.8, {0.6, 1.0, 2.7}, {0.6, 1.0, 5.0}, 0.5, 1.0 / 3.8, 1.0 / 3.8},
    {"ll128", 14.0, 14.0, {1.9, 2.5, 4.0}, {1.25, 1.9, 8.5}, 0.92, 120.0 / 128, 7.0 / 9},
    {"simple", 8.4, 8.4, {3.4, 5.7, 14.0}, {4.0, 4.0, 14.0}, 1.0, 1.0, 1.0},
};
// treeCorrectionFactor, per protocol as kProtocols: at log2(bytes / 64) = 0 .. 22, 1 beyond.
// clang-format off
constexpr double kTreeCorrection[][23] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9},
};
// clang-format on
static_assert(std::size(kTreeCorrection) == std::size(kProtocols));

// What NCCL 2.28's model takes from the nodes' CPUs across nodes (index1 of its llMaxBws, and
// getNetOverhead): LL's bus bandwidth at most ll_max_gbps (at 2 nodes, at more), and a ring step
// within a node at least the network's per-post overhead (x3 for Simple). Intel's figures are the
// point and the fast end (a DGX H100's CPUs), AMD's, the lower and the slower, the slow end.
struct NodeCpu {
  double ll_max_two_nodes_gbps, ll_max_more_nodes_gbps;
  double net_overhead_us;
};
constexpr NodeCpu kIntelNodes{39.0, 20.4, 1.0}, kAmdNodes{22.5, 19.0, 2.0};
// A ring's latency across nodes grows by its "plateau effect" (ncclTopoGetAlgoTime: x1.4 for
// Ampere and later, x1.9 before) for buffers of 64 B and more per rank on each channel; with
// NCCL's channels unknown here, from 64 B on each of 32.
constexpr double kRingPlateau = 1.4;
constexpr double kRingPlateauFromBytesPerRank = 64.0 * 32;

// NVLink SHARP's latency: NCCL 2.28's hwLat for NVLS over NVLink (Simple), its base latency 0.
constexpr double kNvlsLatencyUs = 25;

double busbw_at(const Link& link, End end) {
  return end == End::Slow ? link.low_busbw() : end == End::Fast ? link.high_busbw() : link.busbw_gbps;
}

double latency_at(const Link& link, End end) {
  return end == End::Slow ? link.high_latency() : end == End::Fast ? link.low_latency() : link.latency_us;
}

int log2_steps(int n) { return n > 1 ? int(std::ceil(std::log2(double(n)))) : 0; }
// NCCL's log2i: log2 of v rounded down, 0 for v <= 1. A tree between M nodes takes log2i(M) steps
// (3 nodes: 1), and treeCorrectionFactor is read at log2i(bytes / 64).
int log2i(unsigned long long v) {
  int log = 0;
  while (v >>= 1) ++log;
  return log;
}

// treeCorrectionFactor's entry for `bytes` under kProtocols[protocol]: 1 below 64 B and from 2^23 x 64.
double tree_correction(std::size_t protocol, double bytes) {
  const auto sixty_fourths = static_cast<unsigned long long>(bytes / 64);
  if (sixty_fourths == 0) return 1.0;
  const int log = log2i(sixty_fourths);
  return log < 23 ? kTreeCorrection[protocol][log] : 1.0;
}

}  // namespace

AllReduce all_reduce(double bytes, const Cluster& c, End end) {
  const int n = c.devices;
  if (n <= 1 || bytes <= 0) return {0, ""};
  const Link& link = c.link;
  if (!link.sweep.empty() && n == link.sweep_ranks) {
    std::vector<double> times;
    for (const auto& [b, t] : link.sweep) times.push_back(t);
    if (end == End::Point) return {swept_s(bytes, link, times), "measured"};
    // The band: the curve's own ends (each size's slowest, its fastest at the fastest bus bandwidth),
    // from kFitBandFromBytes widened to the fitted figures' band where that is wider.
    // Between two swept sizes the curve is a straight line, and what a size of 1 MiB and up
    // reached at its slowest (fastest) may hold there too: over shared memory the 7.4 MB of the
    // MLP's bucket, on the line between 4 and 16 MiB, took 1.87 ms by the curve and 2.57 in its
    // replay, where the fit's low bus bandwidth gives 2.6. Below, latency rules and the fit's bus
    // bandwidth says nothing (its binomial tree moving the LSTM's 2 KB twice at 0.105 GB/s put the
    // slow end at three times the 20 us the curve measured).
    const auto& ends = end == End::Slow ? link.sweep_slowest : link.sweep_fastest;
    const double curve = swept_s(bytes, link, ends.size() == times.size() ? ends : times) *
                         (end == End::Slow ? 1.0 : link.busbw_gbps / busbw_at(link, end));
    if (bytes < kFitBandFromBytes) return {curve, "measured"};
    Cluster figures = c;
    figures.link.sweep.clear();
    const double fitted = all_reduce(bytes, figures, end).s;
    return {end == End::Slow ? std::max(curve, fitted) : std::min(curve, fitted), "measured"};
  }
  // A network as the only level (--link=ib_ndr400: a GPU per node) is N nodes of one GPU to NCCL.
  if (link.hw == Hw::Net && c.nodes <= 1 && c.library == Library::Nccl) {
    Cluster a_gpu_per_node = c;
    a_gpu_per_node.nodes = n;
    a_gpu_per_node.network = link;
    return all_reduce(bytes, a_gpu_per_node, end);
  }
  const int nodes = std::max(1, c.nodes), per_node = n / nodes;
  // The slower level sets the pace: within a node its link, between nodes the NICs a node's
  // devices reach (one each, at most the node's NICs).
  double busbw = busbw_at(link, end);
  if (nodes > 1) busbw = std::min(busbw, busbw_at(c.network, end) * std::min(c.network.nics, per_node));
  busbw *= 1e9;
  // NCCL's ring: 2(N-1) steps, 2(M-1) of them between nodes (its 2.28 model); its tree: a chain
  // within a node, a tree of log2 M between nodes (rounded down, as NCCL's log2i), up and down.
  const int inter_steps = nodes > 1 ? 2 * (nodes - 1) : 0, intra_steps = 2 * (n - 1) - inter_steps;
  AllReduce best{INFINITY, ""};
  const auto consider = [&](double latency_us, double s, std::string name) {
    const double t = latency_us * 1e-6 + s;
    if (t < best.s) best = {t, std::move(name)};
  };
  // MPI runs its own algorithms over any link, a preset's too (NCCL's protocols are NCCL's).
  if (link.hw == Hw::None || c.library == Library::Mpi) {
    // One protocol at the links' own latency per step: a ring, or a tree of log2 steps within a
    // node and log2 between nodes, up and down.
    const double intra = latency_at(link, end), inter = latency_at(c.network, end);
    const double tree_latency_us = 2 * (log2_steps(per_node) * intra + log2_steps(nodes) * inter);
    if (c.library == Library::Mpi) {
      // MPI runs what the communicator asks for. Its binomial tree moves the whole buffer in every
      // round, each over the link of its level.
      if (bytes >= kMpiRingFromBytes) {
        consider(intra_steps * intra + inter_steps * inter, allreduce_bus_factor(n) * bytes / busbw, "ring");
      } else {
        const double intra_s = log2_steps(per_node) * bytes / (busbw_at(link, end) * 1e9);
        const double inter_s = nodes > 1 ? log2_steps(nodes) * bytes / (busbw_at(c.network, end) * 1e9) : 0;
        consider(tree_latency_us, 2 * (intra_s + inter_s), "tree");
      }
      return best;
    }
    consider(intra_steps * intra + inter_steps * inter, allreduce_bus_factor(n) * bytes / busbw, "ring");
    consider(tree_latency_us, 2 * bytes / busbw, "tree");
    return best;
  }
  const int intra_hw = link.hw == Hw::NVLink ? 0 : link.hw == Hw::PCIe ? 1 : 2;
  const NodeCpu& cpus = end == End::Slow ? kAmdNodes : kIntelNodes;
  // LL's cap: within one node the GPUs' generation's (the NVLink presets name it; PCIe's half bus,
  // 24 GB/s at most, is under every generation's), across nodes the CPUs'.
  const double ll_max = nodes > 1 ? (nodes == 2 ? cpus.ll_max_two_nodes_gbps : cpus.ll_max_more_nodes_gbps) * 1e9
                        : link.ll_max_gbps > 0 ? link.ll_max_gbps * 1e9
                                               : INFINITY;
  for (std::size_t k = 0; k < std::size(kProtocols); ++k) {
    const Protocol& p = kProtocols[k];
    const std::string_view name = p.name;
    if (name == "ll128" && link.hw != Hw::NVLink && per_node > 1) continue;
    // With a GPU per node every step's latency is exposed: NCCL takes the tree's network step for
    // the ring too. Across nodes a ring's step within a node costs at least the network's post.
    const double* net_steps = per_node == 1 ? p.tree_step_us : p.ring_step_us;
    const double ring_inter = c.network.hw == Hw::Net ? net_steps[2] : latency_at(c.network, end);
    const double tree_inter = c.network.hw == Hw::Net ? p.tree_step_us[2] : latency_at(c.network, end);
    double ring_intra = p.ring_step_us[intra_hw];
    if (nodes > 1) ring_intra = std::max(ring_intra, cpus.net_overhead_us * (name == "simple" ? 3 : 1));
    double ring_latency = p.ring_base_us + intra_steps * ring_intra + inter_steps * ring_inter;
    if (name == "simple" && nodes > 1 && bytes >= kRingPlateauFromBytesPerRank * n) ring_latency *= kRingPlateau;
    const double tree_share = nodes > 1 ? p.tree_share : p.tree_share_one_node;
    double ring_bw = p.ring_share * busbw, tree_bw = 0.92 * tree_share * busbw;
    if (name == "ll") ring_bw = std::min(ring_bw, ll_max), tree_bw = std::min(tree_bw, ll_max);
    tree_bw *= tree_correction(k, bytes);
    consider(ring_latency, allreduce_bus_factor(n) * bytes / ring_bw, fmt::format("ring/{}", p.name));
    consider(p.tree_base_us + 2 * ((per_node - 1) * p.tree_step_us[intra_hw] + log2i(unsigned(nodes)) * tree_inter),
             2 * bytes / tree_bw, fmt::format("tree/{}", p.name));
  }
  // NVLink SHARP, within one node (NCCL 2.28 runs it across nodes only with CollNet): its slow end
  // takes no gain over the ring's bus bandwidth.
  if (link.nvls && nodes == 1 && nvls_busbw(n) > 0) {
    const double nvls = end == End::Slow ? busbw_at(link, end) : nvls_busbw(n);
    consider(kNvlsLatencyUs, allreduce_bus_factor(n) * bytes / (nvls * 1e9), "nvls/simple");
  }
  return best;
}

double nvls_busbw(int n) {
  constexpr double kByGpus[] = {0, 0, 370, 370, 370, 420, 440, 460, 480};  // GB/s at n = 0 .. 8
  return n >= 2 && n <= 8 ? kByGpus[n] : 0;
}

double expected_max(std::vector<double> samples, int n) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  if (samples.size() == 1 || n < 1) return samples.front();
  // The distribution is the one quantile_of_sorted reads and a replay draws its steps from: the
  // sorted samples at equal steps of probability, straight lines between. The largest of n draws
  // has the distribution function u^n, so its mean is the integral of Q(u) d(u^n), exact on each
  // straight piece: [Q u^n] minus the integral of u^n Q'(u) du. (Each sample as a point of equal
  // weight instead gave the slowest of 21 saved quantiles, the row's slowest step, a third of the
  // weight at n = 8: stragglers 1.4 times these.)
  const double m = double(samples.size() - 1);
  double e = 0;
  for (std::size_t k = 0; k + 1 < samples.size(); ++k) {
    const double u0 = double(k) / m, u1 = double(k + 1) / m, q0 = samples[k], q1 = samples[k + 1];
    const double slope = (q1 - q0) / (u1 - u0);
    e += q1 * std::pow(u1, n) - q0 * std::pow(u0, n) - slope * (std::pow(u1, n + 1) - std::pow(u0, n + 1)) / (n + 1);
  }
  return e;
}

namespace {

struct Queue {
  double exposed = 0, total = 0;
  double overlapped = 0;                // backward's compute with an all-reduce running beside it
  std::vector<std::string> algorithms;  // each bucket's, in order
};

// The all-reduces of `t`'s buckets on one stream over `c`, its times stretched by `slower`
// (compute slowed by sharing), at `end` of the links' bands; `overlaps`: whether an all-reduce
// may start before backward has ended.
Queue queue(const StepTimeline& t, const Cluster& c, double slower, End end, bool overlaps) {
  Queue q;
  double done = 0;
  for (std::size_t k = 0; k < t.bucket_bytes.size(); ++k) {
    const AllReduce a = all_reduce(t.bucket_bytes[k], c, end);
    // On cores shared with compute, nothing starts before backward has let go of them.
    const double ready = (overlaps ? t.bucket_ready_s[k] : t.backward_end_s) * slower;
    const double start = std::max(done, ready);
    done = start + a.s;
    if (overlaps) q.overlapped += std::max(0.0, std::min(done, t.backward_end_s * slower) - start);
    q.total += a.s;
    q.algorithms.push_back(a.algorithm);
  }
  // The update waits for the last all-reduce; what backward did not hide lengthens the step.
  q.exposed = c.devices > 1 ? std::max(0.0, done - t.backward_end_s * slower) : 0.0;
  return q;
}

}  // namespace

namespace {
// The fastest of the measured step times, scaled to the step the prediction is made from (the
// times are one window's; the step is the median over repetitions); 0 without times.
double fastest_step(const std::vector<double>& times, double step) {
  if (times.empty()) return 0;
  const double m = tb::median(times);
  return m > 0 ? *std::min_element(times.begin(), times.end()) / m * step : 0;
}
}  // namespace

Prediction predict(const OneDevice& one, const Cluster& cluster) {
  const StepTimeline& t = one.timeline;
  const int devices = cluster.devices;
  const Link& link = cluster.link;
  TB_CHECK(cluster.nodes >= 1 && devices % cluster.nodes == 0, "predict: {} devices on {} nodes", devices,
           cluster.nodes);
  TB_CHECK(devices >= 1 && one.step_s > 0 && one.batch > 0, "predict: {} devices, step {} s, batch {}", devices,
           one.step_s, one.batch);
  TB_CHECK(t.bucket_ready_s.size() == t.bucket_bytes.size(), "predict: {} ready times for {} buckets",
           t.bucket_ready_s.size(), t.bucket_bytes.size());
  // The step's relative spread: the same step measured again (the multi-device run is another
  // window, minutes later) moves by about its interquartile range; half of it, which bounds one
  // window's median, left the measured mpi:2 of the MLP 0.4% below the band in a debug build.
  const double step = one.step_s, spread = relative_spread(one.step_times);
  // No narrower than a step measured again moves, wider below kEnoughSteps timed steps.
  const double repeat =
      kStepRepeatSpread * std::sqrt(double(kEnoughSteps) / double(std::clamp<long>(t.steps, 1, kEnoughSteps)));
  // A slow-down: at least 1 at the point (the ranks' steps together and rank 0's alone are timed
  // alike, so a ratio below 1 is their noise, which the band keeps).
  Range sharing = devices > 1 ? one.sharing : Range::exactly(1);
  sharing.value = std::max(1.0, sharing.value);
  sharing.high = std::max(sharing.value, sharing.high);
  const Range dp = devices > 1 ? one.dp_overhead : Range{};
  // A synchronous step waits for the slowest of N: the expected largest of N step times, over
  // their mean, stretches the measured step.
  double stragglers = 0;
  if (devices > 1 && !one.step_times.empty()) {
    stragglers = step * (expected_max(one.step_times, devices) / expected_max(one.step_times, 1) - 1);
  }
  const Queue point = queue(t, cluster, sharing.value, End::Point, link.overlaps_compute);
  Queue slow = queue(t, cluster, sharing.high, End::Slow, link.overlaps_compute);
  // Between CPU ranks the point counts the all-reduce as not overlapped; MPI's progress can still
  // move some of it during backward, so the fast end lets it overlap as on a GPU. What overlaps
  // runs on the cores backward needs, and the two together can take longer than one after the
  // other (polling, caches): not measured, so the slow end counts the part that could overlap
  // twice.
  const Queue fast = queue(t, cluster, sharing.low, End::Fast, true);
  if (!link.overlaps_compute) slow.exposed += slow.exposed - queue(t, cluster, sharing.high, End::Slow, true).exposed;
  // On a GPU the compute beside an all-reduce slows (kContentionPoint); CPU ranks' all-reduces do
  // not overlap (their slow end counts the overlap twice instead, above).
  const bool contends = devices > 1 && link.overlaps_compute && cluster.library == Library::Nccl;
  Prediction p;
  p.devices = devices;
  p.terms = {
      // A step measured again is no faster than the fastest step seen (a very noisy row's spread
      // can exceed the step itself), and moves by the floor at least.
      {"compute", step,
       std::min(step * (1 - repeat), std::max(step * (1 - spread), fastest_step(one.step_times, step))),
       step * (1 + std::max(spread, repeat))},
      {"sharing", step * (sharing.value - 1), step * (sharing.low - 1), step * (sharing.high - 1)},
      {"stragglers", stragglers, 0, stragglers},
      {"data-parallel overhead", dp.value, dp.low, dp.high},
      {"communication", point.exposed, fast.exposed, slow.exposed},
      {"contention", contends ? kContentionPoint * point.overlapped : 0, 0,
       contends ? kContentionHigh * slow.overlapped : 0},
  };
  for (const Term& term : p.terms) p.step_s += term.s;
  double fastest = 0, slowest = 0;
  for (const Term& term : p.terms) fastest += term.low, slowest += term.high;
  p.exposed_comm_s = point.exposed;
  p.comm_s = point.total;
  p.samples_per_s = devices * one.batch / p.step_s;
  p.samples_per_s_low = devices * one.batch / slowest;
  p.samples_per_s_high = devices * one.batch / fastest;
  p.efficiency = scaling_efficiency(p.samples_per_s, devices, one.batch / step);
  double widest = -1;
  for (const Term& term : p.terms)
    if (devices > 1 && term.high - term.low > widest) widest = term.high - term.low, p.dominant = term.name;
  std::vector<std::string> algorithms;
  for (const std::string& a : point.algorithms)
    if (!a.empty() && std::find(algorithms.begin(), algorithms.end(), a) == algorithms.end()) algorithms.push_back(a);
  p.algorithm = fmt::format("{}", fmt::join(algorithms, "+"));
  return p;
}

Prediction predict(const OneDevice& one, int devices, const Link& link) {
  Cluster c;
  c.devices = devices;
  c.link = link;
  return predict(one, c);
}

Prediction predict(const StepTimeline& t, double step_s, double batch, int devices, const Link& link) {
  OneDevice one;
  one.timeline = t;
  one.step_s = step_s;
  one.batch = batch;
  return predict(one, devices, link);
}

namespace {
constexpr std::size_t kBackToBackBytes = std::size_t(256) << 10;
constexpr int kBackToBack = 100;
// Up to kManyBytes, kSweepSmallAllReduces of them (predict.hpp). Over TCP between emulated nodes
// here, about one 2 KB all-reduce in a thousand stalls for 1 to 4 ms, which moves the mean of 200
// from 26 us to 30-47, and the level itself drifts between about 20, 26 and 35 us from one second
// to the next: the mean of 2,000 holds a few stalls, and the means of its kSweepBlocks blocks of
// consecutive ones (the band) the drift the sweep saw.
constexpr std::size_t kManyBytes = std::size_t(16) << 10;
constexpr int kSweepBlocks = 10;
static_assert(kSweepSmallAllReduces % kSweepBlocks == 0 && kBackToBack % kSweepBlocks == 0,
              "the blocks split the small all-reduces evenly: their means average to the size's time");

// How many of a size's all-reduces to issue as a step issues them: `wanted`, unless that would
// take over kSweepSecondsPerSize at the time one took after a barrier (the same on every rank:
// it is the slowest rank's); then as many as fit, a whole number of blocks, at least ten blocks'
// worth. NCCL over the socket transport between emulated nodes took 4.8 ms per 256-byte
// all-reduce: 2,000 of each small size made 38 s of start-up.
int in_step_count(int wanted, double after_barrier_s) {
  const double each = after_barrier_s + kSweepStepGapS;
  const int fit = int(kSweepSecondsPerSize / each) / kSweepBlocks * kSweepBlocks;
  return std::clamp(fit, 10 * kSweepBlocks, wanted);
}
}  // namespace

Link measure_link(Communicator& comm, std::size_t max_bytes, void* device_buffer) {
  const int n = comm.size();
  std::vector<float> host;
  Link link{.name = "measured", .overlaps_compute = device_buffer != nullptr};
  link.sweep_ranks = n;
  // From 256 bytes: the smallest buckets (the LSTM's 1 KB of gradients) cost what a tiny
  // all-reduce costs, which a line from larger sizes to the fitted latency misses.
  for (std::size_t bytes = 256; bytes <= max_bytes; bytes *= 4) {
    void* data = device_buffer;
    if (!data) {
      host.assign(bytes / sizeof(float), 1.0f);
      data = host.data();
    }
    std::vector<double> times;
    for (int rep = 0; rep < 7; ++rep) {
      comm.barrier();
      const double t0 = wall_seconds();
      comm.start_all_reduce_mean(data, i64(bytes / sizeof(float)), ElemType::F32);
      comm.wait();
      times.push_back(wall_seconds() - t0);
    }
    std::sort(times.begin() + 2, times.end());  // the first two warm up
    const double after_barrier = comm.max(times[2 + (times.size() - 2) / 2]);
    // Small all-reduces the way training issues them: one after the other, no barrier between,
    // each rank starting its next once its last is done and a short step's compute (kSweepStepGapS,
    // busy) has passed, as the LSTM's 0.2 ms steps do; the mean of the all-reduces alone is the
    // size's time (over TCP here the median of five after a barrier put a 2 KB all-reduce at 19 to
    // 31 us run by run, where the LSTM's replays spent 31 to 34: their point 3 to 5% too fast).
    double time = after_barrier, slowest_block = 0, fastest_block = INFINITY;
    if (bytes <= kBackToBackBytes) {
      const int reps = in_step_count(bytes <= kManyBytes ? kSweepSmallAllReduces : kBackToBack, after_barrier);
      if (bytes == 256) link.sweep_in_step = reps;
      std::vector<double> in_step;
      comm.barrier();
      for (int rep = 0; rep < reps; ++rep) {
        for (const double gap = wall_seconds(); wall_seconds() - gap < kSweepStepGapS;) {
        }
        const double t0 = wall_seconds();
        comm.start_all_reduce_mean(data, i64(bytes / sizeof(float)), ElemType::F32);
        comm.wait();
        in_step.push_back(wall_seconds() - t0);
      }
      // Their band: the slowest and the fastest mean of kSweepBlocks blocks of consecutive ones,
      // whose mean is their time.
      const int per = reps / kSweepBlocks;
      double blocks = 0;
      for (int b = 0; b < kSweepBlocks; ++b) {
        const double block = std::accumulate(in_step.begin() + b * per, in_step.begin() + (b + 1) * per, 0.0) / per;
        slowest_block = std::max(slowest_block, block);
        fastest_block = std::min(fastest_block, block);
        blocks += block;
      }
      time = comm.max(blocks / kSweepBlocks);
      slowest_block = comm.max(slowest_block);
      fastest_block = comm.max(fastest_block);
    }
    link.sweep.emplace_back(double(bytes), time);
    link.sweep_slowest.push_back(std::max(comm.max(times.back()), slowest_block));
    link.sweep_fastest.push_back(std::min(after_barrier, fastest_block));
  }
  fit_link(link, n, !comm.algorithms().empty());
  link.source = fmt::format("{} all-reduce of {} ranks{}, 256 B to {} MiB, measured at start-up", comm.kind(), n,
                            link.tree_below ? " (" + comm.algorithms() + ")" : "", max_bytes >> 20);
  return link;
}

void fit_link(Link& link, int n, bool tree_below) {
  TB_CHECK(!link.sweep.empty() && link.sweep_slowest.size() == link.sweep.size() &&
               link.sweep_fastest.size() == link.sweep.size(),
           "fit_link: a sweep of {} sizes with {} slowest and {} fastest times", link.sweep.size(),
           link.sweep_slowest.size(), link.sweep_fastest.size());
  std::vector<double> x, y;  // ring bytes, seconds
  for (const auto& [bytes, time] : link.sweep) {
    x.push_back(allreduce_bus_factor(n) * bytes);
    y.push_back(time);
  }
  // The latency is the smallest size's time (256 bytes: nothing but latency), which a line fitted
  // through every size misses by a factor of several on TCP (the large sizes set its intercept);
  // the bus bandwidth the least-squares slope over the rest: y = a + b x with a fixed.
  const double intercept = y.front();
  double sxy = 0, sxx = 0;
  for (std::size_t k = 0; k < x.size(); ++k) sxy += x[k] * (y[k] - intercept), sxx += x[k] * x[k];
  // A sweep whose large sizes took no longer than its smallest saw no bandwidth limit at all: the
  // fit then says the highest bus bandwidth --link takes (kHighestBusbwGbps), so that the figures a
  // row gives of it can be given back (its floor of 1e-15 s/byte said 1e6 GB/s, which --link refused).
  const double slope = std::max(sxy / sxx, 1e-9 / kHighestBusbwGbps);
  link.busbw_gbps = 1.0 / slope * 1e-9;
  // A ring all-reduce among n takes 2(n-1) steps: the latency is that many of them; where the
  // communicator runs a binomial tree for small buffers (MPI's, kMpiRingFromBytes), 2 log2 n.
  link.tree_below = tree_below;
  const double steps = tree_below ? 2.0 * std::max(1, log2_steps(n)) : 2.0 * std::max(1, n - 1);
  link.latency_us = intercept * 1e6 / steps;
  // Its band: the 256 bytes' own.
  link.latency_low_us = link.sweep_fastest.front() * 1e6 / steps;
  link.latency_high_us = link.sweep_slowest.front() * 1e6 / steps;
  // The band: the sizes of 1 MiB and more, each one's bus bandwidth beside the fit's. The slow end
  // takes each size's slowest repetition, as the curve's slow end does among the swept ranks, so
  // that figures carried to another N keep the spread the sweep saw (the medians' alone gave 1 Gbit/s
  // a band of 0.3%); the fast end the fastest size's median.
  double low = link.busbw_gbps, high = link.busbw_gbps;
  for (std::size_t k = 0; k < x.size(); ++k) {
    if (link.sweep[k].first < kFitBandFromBytes) continue;
    if (link.sweep_slowest[k] > intercept) low = std::min(low, x[k] / (link.sweep_slowest[k] - intercept) * 1e-9);
    if (y[k] > intercept) high = std::max(high, x[k] / (y[k] - intercept) * 1e-9);
  }
  link.busbw_low_gbps = low;
  link.busbw_high_gbps = std::min(high, kHighestBusbwGbps);  // as the fit, what --link takes
  link.low_source = "the sweep (1 MiB and up) against the fit: its slowest repetition, its fastest size's median";
}

}  // namespace tb::parallel
