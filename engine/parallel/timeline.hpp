// The timeline of a one-device network's training steps, for predicted N-device scaling
// (predict.hpp): when each gradient bucket the data-parallel path would all-reduce becomes ready
// during backward, read from the network's step hook with the device's clock (CUDA events on
// the compute stream) on a GPU and the wall clock on the CPU. Marks are taken only when a bucket
// completes (a few per step) and at the step's end as the step is enqueued, and read once the
// step's own wait has ended: the timeline synchronises nothing of its own.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "engine/core/network.hpp"
#include "engine/parallel/predict.hpp"
#include "engine/parallel/replica.hpp"

namespace tb::parallel {

// Marks on a clock: mark(k) notes "now" in slot k (on a device: when the device reaches it);
// read(n) gives slots 1..n-1 in seconds after slot 0. A caller reads once the marks' step has
// ended (on a device: after the host's wait for it), so that reading waits for nothing.
class MarkClock {
 public:
  virtual ~MarkClock() = default;
  virtual void mark(std::size_t slot) = 0;
  virtual std::vector<double> read(std::size_t count) = 0;
};
std::unique_ptr<MarkClock> make_host_clock();
// CUDA events on `stream` of `device`, `slots` of them made at once so that a mark is one record
// (builds with the CUDA backend; throws tb::Error elsewhere).
std::unique_ptr<MarkClock> make_device_clock(int device, void* stream, std::size_t slots);

// How often a recorder watches a step by default: the first, then the first to start at least
// this long after the last watched one started. A watched step's marks and reads are about 5
// CUDA calls for the MLP (event records, a query, elapsed times), estimated at 10 us of host
// time (not yet measured on a GPU): 3% of its 0.35-ms step on an H200, step 6's bound. Watching
// one step in 2 ms keeps such a cost within 0.5% of any step, and every step of 2 ms or more
// (ResNet-152's) is watched.
inline constexpr double kTimelineEverySeconds = 2e-3;

class TimelineRecorder {
 public:
  // Watches `network`'s backward through the buckets ReplicaNetwork would plan for it, on
  // `clock` (by default the network's device's, or the host's), one step in `every_s` (0: every
  // step). The network must outlive the recorder, which removes its hook when it goes. A network
  // that cannot call a hook (a step replayed as a CUDA graph) must not be given one.
  explicit TimelineRecorder(Network& network, std::size_t bucket_bytes = kDefaultBucketBytes,
                            std::unique_ptr<MarkClock> clock = nullptr, double every_s = kTimelineEverySeconds);
  ~TimelineRecorder();
  TimelineRecorder(const TimelineRecorder&) = delete;
  TimelineRecorder& operator=(const TimelineRecorder&) = delete;

  // The step's time 0, where this step is watched; a step not watched costs a clock read.
  void before_step();
  // After the step's own wait: a watched step's marks (the last at its end, as it was enqueued)
  // are read and added to the mean.
  void after_step();
  // The mean over the steps recorded so far.
  StepTimeline timeline() const;

 private:
  void on_step_hook(int node);

  Network& network_;
  std::vector<Bucket> buckets_;  // in the order the data-parallel path starts them
  std::unique_ptr<MarkClock> clock_;
  double every_s_;
  bool watching_ = false;                 // this step is watched: the hook marks it
  double last_watched_ = -1;              // the host time the last watched step started (none: negative)
  std::vector<std::size_t> bucket_slot_;  // this step: the mark at which each bucket was ready
  std::size_t next_bucket_ = 0, next_slot_ = 0;
  std::size_t end_slot_ = 0;  // this step: the mark at its end (0: not reached)
  std::vector<double> ready_sum_;
  double backward_end_sum_ = 0, step_end_sum_ = 0;
  long steps_ = 0;
};

}  // namespace tb::parallel
