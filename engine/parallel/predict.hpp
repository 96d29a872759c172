// Predicted N-device scaling from a one-device run: the step's timeline (when each gradient
// bucket became ready during backward, how many bytes it holds) and a link, run through the
// queue of all-reduces the data-parallel path would issue. Assumptions, stated with every
// prediction (kPredictionAssumptions): every device computes as the measured one does; each
// all-reduce is a ring (2(N-1)/N x bytes / busbw + the link's latency, nccl-tests' bus
// bandwidth); buckets are those the data-parallel path plans, not fused further; one
// communication stream, so an all-reduce starts when its bucket is ready and the previous one
// is done; communication does not slow the computation it overlaps, except between CPU ranks,
// where the all-reduce's copies and sums run on the cores backward needs and are counted as not
// overlapped at all (measured on 2 cores: hidden, the model overestimated mpi:2 ResNet-152 by
// up to 25%; not overlapped, within 3%).
#pragma once

#include <string>
#include <vector>

namespace tb::parallel {

inline constexpr const char* kPredictionAssumptions =
    "same per-device compute as the measured row; ring all-reduce (2(N-1)/N x bytes / busbw + latency per "
    "bucket); the data-parallel path's 25 MiB buckets, not fused further; one communication stream; no "
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
// each all-reduce pays.
struct Link {
  std::string name;  // a preset's, "measured", or "custom"
  double busbw_gbps = 0;
  double latency_us = 0;
  std::string source;  // where the figures come from
  // False where the all-reduce runs on the cores that compute (MPI between CPU ranks): it then
  // cannot hide behind backward and is exposed whole.
  bool overlaps_compute = true;
};

// The presets --link names: NVLink 4 on an 8-GPU H100 board, NVLink 3 on an A100 board, PCIe 4
// and 5 x16 between GPUs, InfiniBand NDR 400 per GPU across nodes.
const std::vector<Link>& link_presets();
// --link=NAME or --link=BUSBW_GBPS[,LATENCY_US]; "measured" is returned as a Link named
// "measured" with no figures (the run measures them). Throws tb::InputError naming the flag.
Link parse_link(const std::string& text);

class Communicator;
// The link of `comm` measured as nccl-tests defines it (host buffers: overlaps_compute false): all-reduces of host
// buffers from 64 KiB to 16 MiB, each size's median time (the slowest rank's), fitted as latency + 2(N-1)/N x bytes /
// busbw. A collective: every rank calls it.
Link measure_link(Communicator& comm);

// The seconds one all-reduce of `bytes` takes among n devices over `link`.
double ring_all_reduce_s(double bytes, int n, const Link& link);

struct Prediction {
  int devices = 1;
  double step_s = 0;          // the measured step plus the communication backward did not hide
  double exposed_comm_s = 0;  // per step
  double comm_s = 0;          // all-reduce time per step, hidden or not
  double samples_per_s = 0;   // devices x batch / step_s
  double efficiency = 0;      // samples_per_s / (devices x the measured row's)
};

// N devices each running the measured step (`step_s`, `batch` samples) with the all-reduces of
// `timeline` queued on one communication stream over `link`.
Prediction predict(const StepTimeline& timeline, double step_s, double batch, int devices, const Link& link);

}  // namespace tb::parallel
