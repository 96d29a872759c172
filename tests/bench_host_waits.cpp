// A benchmark, not a test: what a training step makes the host wait for, per step, on the stand-in
// for an asynchronous backend (tests/stand_in.hpp): the plain step, the plain step under the
// timeline, and the data-parallel replica's step with an NCCL-like communicator. Counters:
// host_waits (waits that found device work queued), prefetched (batches given while the step was
// in flight), all_reduces; the time is the host's own cost of a step (the stand-in's device work
// is free), so that the replica's bookkeeping shows beside the plain step's.
//   build/release/tests/bench_host_waits [--benchmark_min_time=0.2]
#include <benchmark/benchmark.h>

#include <memory>

#include "engine/parallel/replica.hpp"
#include "engine/parallel/timeline.hpp"
#include "engine/train/trainer.hpp"
#include "tests/stand_in.hpp"

namespace {

using namespace tb;
using testing_support::NoData;
using testing_support::StandInClock;
using testing_support::StandInComm;
using testing_support::StandInDevice;
using testing_support::StandInNetwork;

// The MLP's shape: three layers, each gradient a bucket of its own (as ResNet's many buckets are).
constexpr int kLayers = 3;
constexpr std::int64_t kParams = 64;
constexpr std::size_t kBucketBytes = kParams * sizeof(float);

void report(benchmark::State& state, const StandInDevice& device, const StandInNetwork& net, int waits0,
            int prefetched0, int all_reduces0) {
  const double steps = double(state.iterations());
  state.counters["host_waits"] = double(device.waits() - waits0) / steps;
  state.counters["prefetched"] = double(net.prefetched() - prefetched0) / steps;
  state.counters["all_reduces"] = double(device.all_reduces - all_reduces0) / steps;
}

void plain_step(benchmark::State& state) {
  StandInDevice device;
  auto owned = std::make_unique<StandInNetwork>(device, kLayers, kParams);
  StandInNetwork& net = *owned;
  Trainer trainer(std::move(owned), std::make_unique<NoData>());
  trainer.step();
  const int waits = device.waits(), prefetched = net.prefetched();
  for (auto _ : state) trainer.step();
  report(state, device, net, waits, prefetched, 0);
}

void plain_step_with_timeline(benchmark::State& state) {
  StandInDevice device;
  auto owned = std::make_unique<StandInNetwork>(device, kLayers, kParams);
  StandInNetwork& net = *owned;
  Trainer trainer(std::move(owned), std::make_unique<NoData>());
  trainer.step();
  // Every step watched: the cost of a watched one.
  parallel::TimelineRecorder timeline(trainer.network(), kBucketBytes, std::make_unique<StandInClock>(device),
                                      /*every_s=*/0);
  const int waits = device.waits(), prefetched = net.prefetched();
  for (auto _ : state) {
    timeline.before_step();
    trainer.step();
    timeline.after_step();
  }
  report(state, device, net, waits, prefetched, 0);
}

void replica_step(benchmark::State& state) {
  StandInDevice device;
  auto owned = std::make_unique<StandInNetwork>(device, kLayers, kParams);
  StandInNetwork& net = *owned;
  Trainer trainer(
      std::make_unique<parallel::ReplicaNetwork>(std::move(owned), std::make_unique<StandInComm>(device), kBucketBytes),
      std::make_unique<NoData>());
  trainer.step();
  const int waits = device.waits(), prefetched = net.prefetched(), all_reduces = device.all_reduces;
  for (auto _ : state) trainer.step();
  report(state, device, net, waits, prefetched, all_reduces);
}

BENCHMARK(plain_step);
BENCHMARK(plain_step_with_timeline);
BENCHMARK(replica_step);

}  // namespace

BENCHMARK_MAIN();
