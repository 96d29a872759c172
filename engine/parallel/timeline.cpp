// Recording a one-device step's bucket timeline (timeline.hpp).
#include "engine/parallel/timeline.hpp"

#include <algorithm>
#include <optional>
#include <utility>

#include "engine/core/error.hpp"
#include "engine/core/timer.hpp"

namespace tb::parallel {
namespace {

class HostClock final : public MarkClock {
 public:
  void mark(std::size_t slot) override {
    if (slot >= times_.size()) times_.resize(slot + 1);
    times_[slot] = wall_seconds();
  }
  std::vector<double> read(std::size_t count) override {
    std::vector<double> out;
    for (std::size_t k = 1; k < count; ++k) out.push_back(times_[k] - times_[0]);
    return out;
  }

 private:
  std::vector<double> times_;
};

}  // namespace

std::unique_ptr<MarkClock> make_host_clock() { return std::make_unique<HostClock>(); }

#ifndef TB_HAVE_CUDA
std::unique_ptr<MarkClock> make_device_clock(int, void*, std::size_t) {
  throw Error("a device clock needs the CUDA backend, which this build lacks");
}
#endif

TimelineRecorder::TimelineRecorder(Network& network, std::size_t bucket_bytes, std::unique_ptr<MarkClock> clock,
                                   double every_s)
    : network_(network), clock_(std::move(clock)), every_s_(every_s) {
  const auto segments = network_.gradient_segments();
  TB_CHECK(!segments.empty(), "a timeline needs a model with parameters");
  buckets_ = plan_buckets(segments, bucket_bytes);
  std::stable_sort(buckets_.begin(), buckets_.end(),
                   [](const Bucket& a, const Bucket& b) { return a.first_node > b.first_node; });
  if (!clock_) {
    // Time 0, a mark per bucket at most, and the step's end.
    const std::optional<CommEndpoint> endpoint = network_.comm_endpoint();
    clock_ = endpoint ? make_device_clock(endpoint->device, endpoint->stream, buckets_.size() + 2) : make_host_clock();
  }
  ready_sum_.assign(buckets_.size(), 0.0);
  bucket_slot_.assign(buckets_.size(), 0);
  network_.set_step_hook([this](int node) { on_step_hook(node); });
}

TimelineRecorder::~TimelineRecorder() {
  try {
    network_.set_step_hook({});
  } catch (...) {
  }
}

void TimelineRecorder::before_step() {
  const double now = wall_seconds();
  watching_ = last_watched_ < 0 || now - last_watched_ >= every_s_;
  if (!watching_) return;
  last_watched_ = now;
  next_bucket_ = 0;
  next_slot_ = 1;
  end_slot_ = 0;
  clock_->mark(0);
}

// Every bucket whose first node has run is complete (ReplicaNetwork's rule): one mark for all
// that complete at this node; at backward's end every bucket left (one the hook did not see
// complete); at the step's end, the end.
void TimelineRecorder::on_step_hook(int node) {
  if (!watching_) return;
  if (node == kStepEnqueued) {
    end_slot_ = next_slot_++;
    clock_->mark(end_slot_);
    return;
  }
  bool marked = false;
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].first_node >= std::max(node, 0)) {
    if (!marked) clock_->mark(next_slot_++), marked = true;
    bucket_slot_[next_bucket_++] = next_slot_ - 1;
  }
}

void TimelineRecorder::after_step() {
  if (!std::exchange(watching_, false)) return;
  TB_CHECK(end_slot_ > 0 && next_bucket_ == buckets_.size(),
           "the timeline's network did not report its backward's and its step's end to the step hook");
  const std::vector<double> t = clock_->read(next_slot_);  // t[k - 1]: slot k
  for (std::size_t b = 0; b < buckets_.size(); ++b) ready_sum_[b] += t[bucket_slot_[b] - 1];
  backward_end_sum_ += t[bucket_slot_.back() - 1];
  step_end_sum_ += t[end_slot_ - 1];
  ++steps_;
}

StepTimeline TimelineRecorder::timeline() const {
  StepTimeline out;
  out.steps = steps_;
  if (steps_ == 0) return out;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    out.bucket_ready_s.push_back(ready_sum_[b] / double(steps_));
    out.bucket_bytes.push_back(double(buckets_[b].count) * double(elem_bytes(buckets_[b].type)));
  }
  out.backward_end_s = backward_end_sum_ / double(steps_);
  out.step_end_s = step_end_sum_ / double(steps_);
  return out;
}

}  // namespace tb::parallel
