// A saved one-device step replayed (replay.hpp).
#include "engine/parallel/replay.hpp"

#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "engine/core/error.hpp"
#include "engine/core/timer.hpp"

namespace tb::parallel {

ReplayNetwork::ReplayNetwork(StepTimeline timeline, std::vector<double> step_times, std::uint64_t seed,
                             double dp_overhead_s)
    : timeline_(std::move(timeline)), step_times_(std::move(step_times)), random_(seed), dp_overhead_s_(dp_overhead_s) {
  TB_CHECK(dp_overhead_s_ >= 0, "replay: a data-parallel overhead of {} s", dp_overhead_s_);
  TB_CHECK(!timeline_.empty() && timeline_.bucket_bytes.size() == timeline_.bucket_ready_s.size(),
           "replay: a timeline of {} buckets and {} ready times", timeline_.bucket_bytes.size(),
           timeline_.bucket_ready_s.size());
  TB_CHECK(timeline_.step_end_s > 0, "replay: a step that takes no time");
  std::sort(step_times_.begin(), step_times_.end());
  std::size_t floats = 0;
  for (double bytes : timeline_.bucket_bytes) floats += std::size_t(std::ceil(bytes / sizeof(float)));
  gradients_.assign(floats, 0.0f);
}

// Bucket k (ready k-th) is node K - k, so that a backward hook of node K - k starts it and no
// later one (ReplicaNetwork starts the buckets whose first node has run).
std::vector<FlatSegment> ReplayNetwork::gradient_segments() {
  const int buckets = int(timeline_.bucket_bytes.size());
  std::vector<FlatSegment> segments(static_cast<std::size_t>(buckets));
  float* at = gradients_.data();
  // In node order: node 1 (the last bucket ready) first in memory.
  for (int node = 1; node <= buckets; ++node) {
    const double bytes = timeline_.bucket_bytes[std::size_t(buckets - node)];
    const auto count = std::int64_t(std::ceil(bytes / sizeof(float)));
    segments[std::size_t(node - 1)] = FlatSegment{at, ElemType::F32, count, node};
    at += count;
  }
  return segments;
}

std::vector<FlatSegment> ReplayNetwork::param_segments() {
  return {FlatSegment{params_.data(), ElemType::F32, std::int64_t(params_.size()), 1}};
}

std::uint64_t ReplayNetwork::param_checksum() {
  std::uint64_t h = 0;
  for (float p : params_) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &p, sizeof bits);
    h = h * 1099511628211ULL + bits;
  }
  return h;
}

// The compute is waited out to the microsecond: asleep until kWake before its end, then awake,
// polling the clock (and yielding the core to any thread that wants it). A sleep to the end
// itself overran by the time the kernel takes to wake a thread on an idle core, tens of
// microseconds on the 2-core VM each time, a third more on the LSTM's 0.2 ms step of four waits.
// The timer's slack (Linux's default 50 us, which would lengthen every sleep) is lifted for the
// sleep alone, so that the data-parallel path's own polling keeps the slack it has in training.
// While all-reduces are in flight the sleep wakes every kTurn to give them a turn (progress_).
void ReplayNetwork::wait_until(double seconds_after_start) const {
  constexpr double kWake = 200e-6;
  const double end = start_ + seconds_after_start;
  bool in_flight = bool(progress_);
  int slack = -1;
  for (double asleep = end - kWake - wall_seconds(); asleep > 0; asleep = end - kWake - wall_seconds()) {
    if (slack < 0) {
      slack = ::prctl(PR_GET_TIMERSLACK, 0UL, 0UL, 0UL, 0UL);
      ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    }
    if (in_flight) asleep = std::min(asleep, kTurn);
    timespec t{};
    t.tv_sec = time_t(asleep);
    t.tv_nsec = long((asleep - double(t.tv_sec)) * 1e9);
    while (::nanosleep(&t, &t) != 0) {
    }
    if (in_flight) in_flight = progress_();
  }
  if (slack > 0) ::prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(slack), 0UL, 0UL, 0UL);
  while (wall_seconds() < end) std::this_thread::yield();
}

float ReplayNetwork::forward() {
  start_ = wall_seconds();
  // A step's time from the saved distribution: a uniform draw read off its quantiles, each phase
  // scaled from the saved mean step to it.
  step_s_ = timeline_.step_end_s;
  if (!step_times_.empty()) {
    const double u = std::uniform_real_distribution<double>(0, 1)(random_) * double(step_times_.size() - 1);
    const std::size_t k = std::min(std::size_t(u), step_times_.size() - 1);
    const double next = step_times_[std::min(k + 1, step_times_.size() - 1)];
    step_s_ = step_times_[k] + (next - step_times_[k]) * (u - double(k));
  }
  scale_ = step_s_ / timeline_.step_end_s;
  return 0;
}

void ReplayNetwork::backward() {
  const int buckets = int(timeline_.bucket_bytes.size());
  for (int k = 0; k < buckets; ++k) {
    wait_until(timeline_.bucket_ready_s[std::size_t(k)] * scale_);
    if (hook_) hook_(buckets - k);
  }
  wait_until(timeline_.backward_end_s * scale_);
  if (hook_) hook_(kBackwardDone);
}

void ReplayNetwork::update() {
  // The update starts once every all-reduce is done: the rest of the step from there, and the
  // saved device's data-parallel overhead.
  const double rest = (timeline_.step_end_s - timeline_.backward_end_s) * scale_ + dp_overhead_s_;
  const double from = wall_seconds() - start_;
  wait_until(from + rest);
  if (hook_) hook_(kStepEnqueued);
}

}  // namespace tb::parallel
