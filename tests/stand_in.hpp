// A stand-in for an asynchronous backend (a GPU and its stream) that needs no GPU, for tests of
// what the host waits for (test_host_waits.cpp): work is enqueued on a queue that the "device"
// runs only when the host waits, each operation advancing the device's clock by a fixed amount,
// and every wait that finds work queued is counted. Its network, its communicator (an NCCL-like
// one that enqueues its all-reduces on the same queue) and its clock (events on that queue) all
// work through it.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/dataset.hpp"
#include "engine/core/error.hpp"
#include "engine/core/network.hpp"
#include "engine/parallel/communicator.hpp"
#include "engine/parallel/timeline.hpp"

namespace tb::testing_support {

class StandInDevice {
 public:
  // Each operation takes this long on the device's clock.
  static constexpr double kOpSeconds = 1e-3;

  void enqueue(std::function<void()> op) { queue_.push_back(std::move(op)); }
  // The host waits until the device has run everything queued; a wait that finds nothing queued
  // returns at once and is not counted.
  void wait() {
    if (queue_.empty()) return;
    ++waits_;
    while (!queue_.empty()) {
      std::function<void()> op = std::move(queue_.front());
      queue_.pop_front();
      clock_ += kOpSeconds;
      if (op) op();
    }
  }
  bool idle() const { return queue_.empty(); }
  int waits() const { return waits_; }
  double clock() const { return clock_; }
  int all_reduces = 0;  // enqueued by communicators (which may go before the test ends)
  int aborts = 0;       // communicators' abort() calls

 private:
  std::deque<std::function<void()>> queue_;
  int waits_ = 0;
  double clock_ = 0;
};

// A network of `layers` nodes after the input, each with `params` parameters (their gradients
// counted as `type`'s elements: a GPU's 16-bit ones), whose forward, backward and update are one
// device operation per layer. Synchronous calls (forward, backward,
// update) wait; start_step enqueues the whole step and finish_step waits once, as a GPU
// network's do. It counts batches given while a step was in flight (the trainer's prefetch).
class StandInNetwork final : public Network {
 public:
  StandInNetwork(StandInDevice& device, int layers = 4, std::int64_t params = 8, ElemType type = ElemType::F32)
      : device_(device),
        layers_(layers),
        params_(std::size_t(layers * params), 0.5f),
        grads_(params_.size(), 0.0f),
        per_layer_(params),
        type_(type) {}

  void set_batch(const BatchView&) override {
    if (started_) ++prefetched_;
    ++batches_;
  }
  float forward() override {
    enqueue_forward();
    device_.wait();
    return 1.0f;
  }
  float evaluate() override { return forward(); }
  std::int64_t correct() const override { return -1; }
  void backward() override {
    enqueue_backward();
    device_.wait();
  }
  void update() override {
    enqueue_update();
    device_.wait();
  }
  void start_step() override {
    TB_CHECK(!started_, "a step was started and not finished");  // as the GPU network refuses it
    started_ = true;
    ++steps_;
    enqueue_forward();
    enqueue_backward();
    enqueue_update();
  }
  float finish_step(StepTimes& times) override {
    device_.wait();
    started_ = false;
    times = StepTimes{.forward = 0, .backward = 0, .update = 0, .device = device_seconds};
    return 1.0f;
  }
  bool asynchronous() const override { return true; }
  void abandon_step() override {
    started_ = false;
    ++abandoned_;
  }

  std::vector<float> read_output(int) const override { return {}; }
  std::vector<float> read_grad(int) const override { return {}; }
  void set_output_grad(const std::vector<float>&) override {}
  std::vector<float> read_param(int node, int) const override {
    return {params_.begin() + (node - 1) * per_layer_, params_.begin() + node * per_layer_};
  }
  std::vector<float> read_param_grad(int, int) const override { return {}; }
  void write_param(int, int, const std::vector<float>&) override {}
  std::int64_t param_bytes() const override { return std::int64_t(params_.size() * sizeof(float)); }
  std::vector<FlatSegment> gradient_segments() override { return segments(grads_.data(), type_); }
  std::vector<FlatSegment> param_segments() override { return segments(params_.data(), ElemType::F32); }
  std::uint64_t param_checksum() override { return fnv1a(params_.data(), params_.size() * sizeof(float)); }
  void set_step_hook(std::function<void(int node)> hook) override { hook_ = std::move(hook); }
  void synchronize() override { device_.wait(); }

  double device_seconds = 0;  // what each step's device clock says it took

  int steps() const { return steps_; }            // steps started
  int prefetched() const { return prefetched_; }  // batches given while a step was in flight
  int batches() const { return batches_; }        // batches given
  int abandoned() const { return abandoned_; }    // steps abandoned after a failure

 private:
  std::vector<FlatSegment> segments(float* base, ElemType type) {
    std::vector<FlatSegment> out;
    for (int node = 1; node <= layers_; ++node)
      out.push_back(FlatSegment{base + (node - 1) * per_layer_, type, per_layer_, node});
    return out;
  }
  void enqueue_forward() {
    for (int node = 1; node <= layers_; ++node) device_.enqueue({});
  }
  void enqueue_backward() {
    for (int node = layers_; node >= 1; --node) {
      device_.enqueue({});
      if (hook_) hook_(node);
    }
    if (hook_) hook_(kBackwardDone);
  }
  void enqueue_update() {
    device_.enqueue({});
    if (hook_) hook_(kStepEnqueued);
  }

  StandInDevice& device_;
  int layers_;
  std::vector<float> params_, grads_;
  std::int64_t per_layer_;
  ElemType type_;
  std::function<void(int node)> hook_;
  bool started_ = false;
  int steps_ = 0, prefetched_ = 0, batches_ = 0, abandoned_ = 0;
};

// One replica's communicator in NCCL's manner: its all-reduces are device operations on the same
// queue (a mean over one rank leaves the data as it is); wait() is a host wait, wait_on_device()
// only orders (the queue is in order), finish_device_step() waits for the step. The first
// all-reduce can be made slow on the host, as NCCL's first use sets up its connections. It can
// fail as NCCL does when a peer is gone: at the broadcast that makes a replica, or at the end of
// its first step (the deadline), throwing tb::Error; abort() is counted by the device.
class StandInComm final : public parallel::Communicator {
 public:
  enum class Fails { Never, AtBroadcast, AtStepEnd };
  explicit StandInComm(StandInDevice& device, double first_use_s = 0, Fails fails = Fails::Never)
      : device_(device), first_use_s_(first_use_s), fails_(fails) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string kind() const override { return "stand-in"; }
  void start_all_reduce_mean(void*, std::int64_t, ElemType) override {
    if (first_use_s_ > 0) std::this_thread::sleep_for(std::chrono::duration<double>(std::exchange(first_use_s_, 0)));
    device_.enqueue({});
    ++device_.all_reduces;
  }
  void wait() override { device_.wait(); }
  void wait_on_device() override { waited_on_device_ = true; }
  double finish_device_step() override {
    if (!std::exchange(waited_on_device_, false)) return -1;
    if (fails_ == Fails::AtStepEnd) throw Error("stand-in: the step's all-reduces passed their deadline");
    device_.wait();
    return device_wait_s;
  }
  void broadcast(void*, std::int64_t, ElemType, int) override {
    if (fails_ == Fails::AtBroadcast) throw Error("stand-in: the broadcast passed its deadline");
  }
  void barrier() override {}
  double max(double value) override { return value; }
  void abort(const std::string&) override { ++device_.aborts; }

  double device_wait_s = 0;  // what each step's end says the device waited for the all-reduces

 private:
  StandInDevice& device_;
  double first_use_s_;
  Fails fails_;
  bool waited_on_device_ = false;
};

// Marks as device operations: each records the device's clock when the device runs it. Reading
// marks the device has not run yet makes the host wait (counted by the device).
class StandInClock final : public parallel::MarkClock {
 public:
  explicit StandInClock(StandInDevice& device) : device_(device) {}
  void mark(std::size_t slot) override {
    if (slot >= times_.size()) times_.resize(slot + 1, -1);
    times_[slot] = -1;
    device_.enqueue([this, slot] { times_[slot] = device_.clock(); });
  }
  std::vector<double> read(std::size_t count) override {
    if (!device_.idle()) device_.wait();
    std::vector<double> out;
    for (std::size_t k = 1; k < count; ++k) out.push_back(times_[k] - times_[0]);
    return out;
  }

 private:
  StandInDevice& device_;
  std::vector<double> times_;
};

// Batches of nothing, endless, for a trainer over a stand-in network.
class NoData final : public Dataset {
 public:
  NoData() { batch_.batch = 1; }
  const Batch& next() override { return batch_; }
  std::string name() const override { return "none"; }
  std::string source() const override { return "stand-in"; }

 private:
  Batch batch_;
};

}  // namespace tb::testing_support
