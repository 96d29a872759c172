// Predicted N-device scaling from a one-device run: the step's timeline (when each gradient
// bucket became ready during backward, how many bytes it holds), what else one device measured
// (its step times, the data-parallel path's own overhead, the slow-down of devices sharing a
// machine) and a link, run through the queue of all-reduces the data-parallel path would issue.
// The prediction is a sum of named terms, each with a low and a high, so it is a band with the
// term that dominates it named (docs/prediction.md). Assumptions, stated with every prediction
// (kPredictionAssumptions): the all-reduce is NCCL's ring or, where it is faster (small buckets,
// many devices), a tree, over one bus bandwidth (the measured curve where a sweep exists); buckets
// are those the data-parallel path plans, not fused further; one communication stream; a
// synchronous step waits for the slowest of N devices; between CPU ranks the all-reduce runs on
// the cores backward needs and is counted as not overlapped (the band's fast end lets it overlap,
// as MPI's progress can); on a GPU, communication is assumed not to slow the computation it
// overlaps (not measured without a GPU).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tb::parallel {

inline constexpr const char* kPredictionAssumptions =
    "every device computes as the measured one (slowed where devices share a machine, as measured); a step waits "
    "for the slowest of N (stragglers from the measured step times); the data-parallel path's own overhead as "
    "measured on one device; NCCL's ring (2(N-1) steps) or, where faster, a tree (2 log2 N steps) per 25 MiB bucket "
    "at the link's bus bandwidth (the measured curve where the link was swept); one communication stream; no "
    "contention between communication and compute on a GPU (between CPU ranks the all-reduce runs on the "
    "computing cores: counted as not overlapped)";

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

// A link between devices: nccl-tests' bus bandwidth of an all-reduce over it and the latency
// one all-reduce between two devices pays (a ring of N pays it N-1 times, a tree log2 N times).
struct Link {
  std::string name;  // a preset's, "measured", or "custom"
  double busbw_gbps = 0;
  double latency_us = 0;
  std::string source;  // where the figures come from
  // False where the all-reduce runs on the cores that compute (MPI between CPU ranks): it then
  // cannot hide behind backward and is exposed whole.
  bool overlaps_compute = true;
  // The low end of the bus bandwidth: what people measure where a preset's ideal is not reached
  // (eight GPUs on PCIe crossing a switch or a CPU socket), with its source; the sweep's spread
  // for a measured link; 0: busbw_gbps itself.
  double busbw_low_gbps = 0;
  std::string low_source;
  // The high end: a measured link's sweep spread the other way; 0: busbw_gbps itself (a preset's
  // ideal is its most).
  double busbw_high_gbps = 0;
  // A measured link's sweep among `sweep_ranks` ranks: (bytes, seconds) per size, ascending; an
  // all-reduce among that many ranks takes the curve's time for its size.
  std::vector<std::pair<double, double>> sweep;
  std::vector<double> sweep_slowest;  // per size: the slowest repetition (the band's slow end)
  int sweep_ranks = 0;
  double low_busbw() const { return busbw_low_gbps > 0 ? busbw_low_gbps : busbw_gbps; }
  double high_busbw() const { return busbw_high_gbps > 0 ? busbw_high_gbps : busbw_gbps; }
};

// The presets --link names: NVLink 4 on an 8-GPU H100 board, NVLink 3 on an A100 board, PCIe 4
// and 5 x16 between GPUs, InfiniBand NDR 400 per GPU across nodes.
const std::vector<Link>& link_presets();
// --link=NAME or --link=BUSBW_GBPS[,LATENCY_US]; "measured" is returned as a Link named
// "measured" with no figures (the run measures them). Throws tb::InputError naming the flag.
Link parse_link(const std::string& text);

class Communicator;
// The link of `comm` measured as nccl-tests defines it: all-reduces of buffers of 4 KiB to
// `max_bytes` (host buffers for MPI: overlaps_compute false; `device_buffer` gives a device
// buffer of that many bytes for NCCL, which overlaps), each size's median time (the slowest
// rank's), kept as the sweep and fitted as latency + 2(N-1)/N x bytes / busbw. A collective:
// every rank calls it.
Link measure_link(Communicator& comm, std::size_t max_bytes = std::size_t(16) << 20, void* device_buffer = nullptr);

// The seconds one all-reduce of `bytes` takes among n devices over `link` at bus bandwidth
// `busbw_gbps` (the link's own where 0): the swept curve among the sweep's ranks (`slowest`: the
// curve of each size's slowest repetition), else the faster of a ring (latency x (n-1) +
// 2(n-1)/n x bytes / busbw) and a tree (latency x ceil(log2 n) + 2 x bytes / busbw).
double all_reduce_s(double bytes, int n, const Link& link, double busbw_gbps = 0, bool slowest = false);
// The ring alone, nccl-tests' bus bandwidth definition with the latency of one all-reduce.
double ring_all_reduce_s(double bytes, int n, const Link& link);

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
  std::vector<Term> terms;  // compute, sharing, stragglers, data-parallel overhead, communication
  std::string dominant;     // the term whose range moves the step most
};

// N devices each running the measured step with the all-reduces of the timeline queued on one
// communication stream over `link`, with every term of `one`.
Prediction predict(const OneDevice& one, int devices, const Link& link);
// The same from a timeline and a step alone (no stragglers, overhead or sharing measured).
Prediction predict(const StepTimeline& timeline, double step_s, double batch, int devices, const Link& link);

// The expected largest of n draws from `samples` (each equally likely, drawn independently).
double expected_max(std::vector<double> samples, int n);

}  // namespace tb::parallel
