// Predicted N-device scaling from a one-device run: the step's timeline (when each gradient
// bucket became ready during backward, how many bytes it holds), what else one device measured
// (its step times, the data-parallel path's own overhead, the slow-down of devices sharing a
// machine) and a cluster (N devices on M nodes, a link within a node and one between nodes), run
// through the queue of all-reduces the data-parallel path would issue. The prediction is a sum of
// named terms, each with a low and a high, so it is a band with the term that dominates it named
// (docs/prediction.md). Each all-reduce takes the fastest of a ring and a tree, and on NCCL's
// links of its protocols, with the step counts and latencies of NCCL's own tuning model
// (src/graph/tuning.cc); the algorithm chosen is named. Assumptions, stated with every prediction
// (kPredictionAssumptions): buckets are those the data-parallel path plans, not fused further;
// one communication stream; a synchronous step waits for the slowest of N devices; between CPU
// ranks the all-reduce runs on the cores backward needs and is counted as not overlapped (the
// band's fast end lets it overlap, as MPI's progress can); on a GPU, communication slows the
// computation it overlaps by the published share kContentionPoint (0 to kContentionHigh).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tb::parallel {

// The version of the model below, which every predicted row names (its prediction_model column),
// so that a prediction asked later of a CSV says where the CSV's own were made by another:
//   1  (until 2026-11-28) NCCL 2.2x's tuning constants, bands from the sampled steps alone, no
//      contention between communication and compute;
//   2  NCCL 2.28's constants (the GPU machines ran 2.28.9), NVLink SHARP as nvlink4_nvls, a
//      contention term on GPUs, a band never narrower than its evidence (kStepRepeatSpread,
//      widened below kEnoughSteps);
//   3  (2026-11-30) the rest of NCCL 2.28's refinements that need no topology: LL's bus bandwidth
//      capped (llMaxBw), a tree's bandwidth scaled by the buffer's size (treeCorrectionFactor), a
//      ring's latency across nodes x1.4 (its plateau) and its steps within a node at least the
//      network's post, the tree's network step for a ring with a GPU per node, and a network as
//      the only level taken as a GPU per node.
inline constexpr int kPredictionModel = 3;

inline constexpr const char* kPredictionAssumptions =
    "every device computes as the measured one (slowed where devices share a machine, as measured), within 1% "
    "(more below 20 timed steps); a step waits for the slowest of N (stragglers from the measured step times); the "
    "data-parallel path's own overhead as measured on one device; per 25 MiB bucket the fastest of a ring (2(N-1) "
    "steps, 2(M-1) of them between M nodes), a tree (a chain within a node, 2 log2 M steps between nodes) and, on "
    "nvlink4_nvls, NVLink SHARP, with NCCL 2.28's protocols, latencies and refinements (src/graph/tuning.cc; across "
    "nodes Intel CPUs' figures, AMD's at the band's slow end), at the slower level's bus bandwidth (the measured curve "
    "where the link was swept at this N); one communication stream; on "
    "a GPU, compute that overlaps an all-reduce slowed by 18.9% (0 to 40%: published measurements of contention "
    "between NCCL and kernels); between CPU ranks the all-reduce runs on the computing cores: counted as not "
    "overlapped";

// A step measured again, in another window, moves by about this share of itself at the least
// (repetitions of one-GPU rows moved by up to 0.4%, ResNet-152 224 on the H100, and by 0.5-20% for
// the small models' short steps): the compute term's band is never narrower. Below kEnoughSteps
// timed steps it widens as the standard error of their median does, sqrt(kEnoughSteps / steps).
inline constexpr double kStepRepeatSpread = 0.01;
inline constexpr int kEnoughSteps = 20;
// The slow-down of GPU compute while an all-reduce runs beside it (NCCL's kernels take SMs and,
// above all, memory bandwidth): 18.9% on average, 40% at most, over A100, H100 and MI250 training
// runs (Lee et al., "Characterizing Compute-Communication Overlap in GPU-Accelerated Distributed
// Deep Learning", arXiv 2507.03114); the model's point and the band's slow end, 0 its fast end.
inline constexpr double kContentionPoint = 0.189;
inline constexpr double kContentionHigh = 0.40;

// What one-device training steps showed, averaged over the timed steps. Times in seconds from
// the start of the step (the trainer's step, batch wait included).
struct StepTimeline {
  std::vector<double> bucket_ready_s;  // per bucket, in the order the data-parallel path starts them
  std::vector<double> bucket_bytes;
  double backward_end_s = 0;  // the last bucket ready: backward has no gradient left to produce
  double step_end_s = 0;      // after the optimizer's update
  long steps = 0;
  bool empty() const { return steps == 0 || bucket_ready_s.empty(); }
  double gradient_bytes() const;
};

// What a link's steps run over, for NCCL's tuning model: NVLink or PCIe within a node, a network
// between nodes; None where NCCL's protocols do not describe it (MPI between CPU ranks, a custom
// or measured link): one protocol, at the link's own latency per step.
enum class Hw { None, NVLink, PCIe, Net };

// A link between devices: nccl-tests' bus bandwidth of an all-reduce over it and the latency of
// one step of a ring over it (a ring all-reduce of N takes 2(N-1) steps).
struct Link {
  std::string name;       // a preset's, "measured", or "custom"
  double busbw_gbps = 0;  // per NIC on a network link
  double latency_us = 0;  // per step (NCCL's presets: its ring/Simple step; its table gives the others)
  std::string source{};   // where the figures come from
  // False where the all-reduce runs on the cores that compute (MPI between CPU ranks): it then
  // cannot hide behind backward and is exposed whole.
  bool overlaps_compute = true;
  // The low end of the bus bandwidth: what people measure where a preset's ideal is not reached
  // (eight GPUs on PCIe crossing a switch or a CPU socket), with its source; the sweep's spread
  // for a measured link; 0: busbw_gbps itself.
  double busbw_low_gbps = 0;
  std::string low_source{};
  // The high end: a measured link's sweep spread the other way; 0: busbw_gbps itself (a preset's
  // ideal is its most).
  double busbw_high_gbps = 0;
  // The latency's band: the fast and the slow end of a step's latency (a measured link's 256-byte
  // all-reduce issued back to back and its slowest; figures given as LATENCY_US:LOW-HIGH);
  // negative: latency_us itself.
  double latency_low_us = -1, latency_high_us = -1;
  Hw hw = Hw::None;
  int nics = 1;  // a network link: NICs per node, each of busbw_gbps
  // A measured link's sweep among `sweep_ranks` ranks: (bytes, seconds) per size, ascending; an
  // all-reduce among that many ranks takes the curve's time for its size. Up to 256 KiB a size's
  // time is the mean of those issued as a short training step issues them (one after the other,
  // kSweepStepGapS of compute apart, no barrier), above it the median after a barrier.
  std::vector<std::pair<double, double>> sweep{};
  // Per size, the band's ends: the slowest repetition after a barrier, or the slowest mean of a
  // tenth of those issued as a step issues them where slower; the median after a barrier, or the
  // fastest such mean where quicker.
  std::vector<double> sweep_slowest{}, sweep_fastest{};
  int sweep_ranks = 0;
  int sweep_in_step = 0;  // how many 256-byte all-reduces were issued as a step issues them
  // A measured link whose communicator ran a binomial tree below kMpiRingFromBytes (MPI's): its
  // latency_us is the 256-byte all-reduce over 2 log2 N steps, not 2(N-1).
  bool tree_below = false;
  // NVLink SHARP within a node (NVLS: the NVSwitch reduces): NCCL's algorithm beside the ring and
  // the tree, at the bus bandwidth nccl-tests measured for it at each N (nvls_busbw).
  bool nvls = false;
  // NCCL's cap on LL's bus bandwidth within one node of this link's GPUs (its llMaxBw, by their
  // generation: the NVLink presets'); 0: none known.
  double ll_max_gbps = 0;
  double low_busbw() const { return busbw_low_gbps > 0 ? busbw_low_gbps : busbw_gbps; }
  double high_busbw() const { return busbw_high_gbps > 0 ? busbw_high_gbps : busbw_gbps; }
  double low_latency() const { return latency_low_us >= 0 ? latency_low_us : latency_us; }
  double high_latency() const { return latency_high_us >= 0 ? latency_high_us : latency_us; }
};

// A link's figures as --link and --network take them, its band included:
// BUSBW_GBPS[:LOW-HIGH],LATENCY_US[:LOW-HIGH] (a measured link's, to predict over it elsewhere).
std::string link_figures(const Link& link);

// The presets --link names (within a node): NVLink 4 on an 8-GPU H100 board (with NVLink SHARP:
// nvlink4_nvls), NVLink 3 on an A100 board, PCIe 3, 4 and 5 x16 between GPUs; and, for one level,
// InfiniBand NDR 400 per GPU. --help, the README and docs/prediction.md list these tables' names.
const std::vector<Link>& link_presets();
// --link=NAME or --link=BUSBW_GBPS[:LOW-HIGH][,LATENCY_US[:LOW-HIGH]] (each figure with the band
// either side of it, if known); "measured" is returned as a Link named
// "measured" with no figures (the run measures them). Throws tb::InputError naming the flag.
Link parse_link(const std::string& text);
// The presets --network names (between nodes, per NIC): InfiniBand NDR 400, 100 and 25 Gbit
// Ethernet over TCP sockets; each measured figure cited (docs/prediction.md).
const std::vector<Link>& network_presets();
// --network=NAME|BUSBW_GBPS[:LOW-HIGH][,LATENCY_US[:LOW-HIGH]][xNICS]: a preset or figures per NIC, NICS per node
// (ib_ndr400x8: a DGX H100 node's eight). Throws tb::InputError naming the flag.
Link parse_network(const std::string& text);

class Communicator;
// The link of `comm` measured as nccl-tests defines it: all-reduces of buffers of 256 B to
// `max_bytes` (host buffers for MPI: overlaps_compute false; `device_buffer` gives a device
// buffer of that many bytes for NCCL, which overlaps), each size's median time after a barrier
// (the slowest rank's); sizes up to 256 KiB also issued as a short training step issues them, one
// after the other, each after kSweepStepGapS of busy compute (up to 16 KiB kSweepSmallAllReduces
// times, above 100), whose mean is their time, the means of each tenth of them its band. Kept as
// the sweep and fitted as 2(N-1) x latency + 2(N-1)/N x bytes / busbw. A collective: every rank
// calls it.
inline constexpr int kSweepSmallAllReduces = 2000;
inline constexpr double kSweepStepGapS = 200e-6;  // the LSTM's step
// At most about this long per size for those issued as a step issues them (fewer where each is
// slow: never under 100).
inline constexpr double kSweepSecondsPerSize = 1.5;
Link measure_link(Communicator& comm, std::size_t max_bytes = std::size_t(16) << 20, void* device_buffer = nullptr);
// measure_link's fit of a sweep of n ranks (link.sweep: each size's bytes and time, with its
// slowest and fastest in sweep_slowest and sweep_fastest): the latency per step (the smallest
// size's time over the ring's 2(n-1) steps, or 2 log2 n where the communicator runs a binomial
// tree below kMpiRingFromBytes), the bus bandwidth (the least-squares slope through the other
// sizes from that latency), and their bands.
void fit_link(Link& link, int n, bool tree_below);

// N devices on M nodes (M divides N; 1: one level), the link within a node and, with M > 1, the
// network between nodes.
// Which library all-reduces: NCCL runs the quickest of its algorithms for each size (the model
// takes the quickest); MPI the communicator's rule (kMpiRingFromBytes: a ring from 64 KiB, a
// binomial tree below).
enum class Library { Nccl, Mpi };

struct Cluster {
  int devices = 1;
  int nodes = 1;
  Link link;
  Link network{};
  Library library = Library::Nccl;
  int per_node() const { return devices / nodes; }
};

// Which end of a band a time is for: the point, the slow end (every bus bandwidth at its low,
// a swept link's slowest repetitions) or the fast end (at its high).
enum class End { Point, Slow, Fast };

// NVLink SHARP's bus bandwidth among n GPUs of an 8-GPU H100 board, as nccl-tests measured it
// (NCCL_ALGO=NVLS, 2-4 GB buffers: NVIDIA/nccl#1455): the ring's 370 GB/s up to 4 GPUs, then 420,
// 440, 460 and 480 GB/s at 5 to 8; 0 where n is outside the board.
double nvls_busbw(int n);

// One all-reduce of `bytes` over `c`: its seconds and the algorithm chosen ("ring/simple",
// "tree/ll", "nvls/simple", or "ring"/"tree" where no protocols apply, "measured" on a swept
// link's curve).
struct AllReduce {
  double s = 0;
  std::string algorithm;
};
AllReduce all_reduce(double bytes, const Cluster& c, End end = End::Point);

// A measured figure with its uncertainty.
struct Range {
  double value = 0, low = 0, high = 0;
  static Range exactly(double v) { return {v, v, v}; }
};

// What one device measured, beside its timeline.
struct OneDevice {
  StepTimeline timeline;
  double step_s = 0;                  // the measured step (wall clock; the median of repetitions)
  double batch = 0;                   // samples per step per device
  std::vector<double> step_times;     // each timed step's wall clock: stragglers and the step's spread
  Range dp_overhead = Range{};        // seconds per step the data-parallel path adds (one replica, measured)
  std::string dp_overhead_source;     // how it was measured, or why not
  Range sharing = Range::exactly(1);  // compute slow-down where the devices share a machine (1: none)
  std::string sharing_source;
};

// A term of a predicted step: the seconds it adds (compute: the step itself), low and high.
struct Term {
  std::string name;
  double s = 0, low = 0, high = 0;
};

struct Prediction {
  int devices = 1;
  double step_s = 0;                                     // the sum of the terms
  double exposed_comm_s = 0;                             // per step: communication backward did not hide
  double comm_s = 0;                                     // all-reduce time per step, hidden or not
  double samples_per_s = 0;                              // devices x batch / step_s
  double efficiency = 0;                                 // samples_per_s / (devices x the measured row's)
  double samples_per_s_low = 0, samples_per_s_high = 0;  // every term at its slow end, at its fast end
  std::vector<Term> terms;  // compute, sharing, stragglers, data-parallel overhead, communication, contention
  std::string dominant;     // the term whose range moves the step most
  std::string algorithm;    // the buckets' all-reduce algorithms, each once, joined by '+'
};

// N devices each running the measured step with the all-reduces of the timeline queued on one
// communication stream over the cluster, with every term of `one`.
Prediction predict(const OneDevice& one, const Cluster& cluster);
// The same on one level: `devices` devices over `link`.
Prediction predict(const OneDevice& one, int devices, const Link& link);
// From a timeline and a step alone (no stragglers, overhead or sharing measured).
Prediction predict(const StepTimeline& timeline, double step_s, double batch, int devices, const Link& link);

// The expected largest of n independent draws from the distribution of `samples`: the sorted
// samples at equal steps of probability with straight lines between (quantile_of_sorted's reading
// of them, which a replay draws its steps from); n = 1 gives its mean.
double expected_max(std::vector<double> samples, int n);

}  // namespace tb::parallel
