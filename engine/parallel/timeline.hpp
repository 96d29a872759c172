// The timeline of a one-device network's training steps, for predicted N-device scaling
// (predict.hpp): when each gradient bucket the data-parallel path would all-reduce becomes ready
// during backward, read from the network's backward hook with the device's clock (CUDA events on
// the compute stream) on a GPU and the wall clock on the CPU. Marks are taken only when a bucket
// completes (a few per step) and read after the step, so the step itself is not slowed.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "engine/core/network.hpp"
#include "engine/parallel/predict.hpp"
#include "engine/parallel/replica.hpp"

namespace tb::parallel {

// Marks on a clock: mark(k) notes "now" in slot k; read(n) gives slots 1..n-1 in seconds after
// slot 0, once every mark is done.
class MarkClock {
 public:
  virtual ~MarkClock() = default;
  virtual void mark(std::size_t slot) = 0;
  virtual std::vector<double> read(std::size_t count) = 0;
};
std::unique_ptr<MarkClock> make_host_clock();
// CUDA events on `stream` of `device` (builds with the CUDA backend; throws tb::Error elsewhere).
std::unique_ptr<MarkClock> make_device_clock(int device, void* stream);

class TimelineRecorder {
 public:
  // Watches `network`'s backward through the buckets ReplicaNetwork would plan for it. The
  // network must outlive the recorder, which removes its hook when it goes. A network that
  // cannot call a hook (a step replayed as a CUDA graph) must not be given one.
  explicit TimelineRecorder(Network& network, std::size_t bucket_bytes = kDefaultBucketBytes);
  ~TimelineRecorder();
  TimelineRecorder(const TimelineRecorder&) = delete;
  TimelineRecorder& operator=(const TimelineRecorder&) = delete;

  void before_step();  // the step's time 0
  void after_step();   // the step's end: its marks are read and added to the mean
  // The mean over the steps recorded so far.
  StepTimeline timeline() const;

 private:
  void on_node_done(int node);

  Network& network_;
  std::vector<Bucket> buckets_;  // in the order the data-parallel path starts them
  std::unique_ptr<MarkClock> clock_;
  std::vector<std::size_t> bucket_slot_;  // this step: the mark at which each bucket was ready
  std::size_t next_bucket_ = 0, next_slot_ = 0;
  std::vector<double> ready_sum_;
  double backward_end_sum_ = 0, step_end_sum_ = 0;
  long steps_ = 0;
};

}  // namespace tb::parallel
