// What the host waits for in a training step, counted on a stand-in for an asynchronous backend
// (tests/stand_in.hpp), so that it runs without a GPU: a data-parallel replica's step waits no
// more often than the plain step and the trainer prepares the next batch under it; the timeline
// of a one-device row adds no wait and reads the device's clock; a probe's first step through a
// new path is not timed.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "engine/core/timer.hpp"
#include "engine/parallel/probe.hpp"
#include "engine/parallel/replica.hpp"
#include "engine/parallel/replica_run.hpp"
#include "engine/parallel/timeline.hpp"
#include "engine/train/trainer.hpp"
#include "tests/stand_in.hpp"

namespace tb {
namespace {

using testing_support::NoData;
using testing_support::StandInClock;
using testing_support::StandInComm;
using testing_support::StandInDevice;
using testing_support::StandInNetwork;

// Each layer's 8 parameters (32 bytes) a bucket of its own: four all-reduces a step, started
// during backward.
constexpr std::size_t kBucketBytes = 32;
constexpr int kSteps = 6;

struct Counts {
  int waits = 0, prefetched = 0, steps = 0;
};

// kSteps trainer steps after a first one (whose batch is fetched before the step: no prefetch
// yet); what the device and the network counted over them.
Counts count_steps(Trainer& trainer, StandInDevice& device, StandInNetwork& net) {
  trainer.step();
  const Counts before{device.waits(), net.prefetched(), net.steps()};
  for (int s = 0; s < kSteps; ++s) trainer.step();
  return Counts{device.waits() - before.waits, net.prefetched() - before.prefetched, net.steps() - before.steps};
}

// A trainer over a stand-in network with its first step taken (that step's batch was fetched
// before it: no prefetch yet).
struct Stepped {
  Stepped() {
    auto owned = std::make_unique<StandInNetwork>(device);
    net = owned.get();
    trainer = std::make_unique<Trainer>(std::move(owned), std::make_unique<NoData>());
    trainer->step();
  }
  StandInDevice device;
  StandInNetwork* net = nullptr;
  std::unique_ptr<Trainer> trainer;
};

TEST(HostWaits, APlainStepWaitsOnceWithTheNextBatchPreparedUnderIt) {
  StandInDevice device;
  auto owned = std::make_unique<StandInNetwork>(device);
  StandInNetwork& net = *owned;
  Trainer trainer(std::move(owned), std::make_unique<NoData>());
  const Counts c = count_steps(trainer, device, net);
  EXPECT_EQ(c.steps, kSteps);
  EXPECT_EQ(c.waits, kSteps);
  EXPECT_EQ(c.prefetched, kSteps);
}

// The replica's step is the backend's own, with the all-reduces in it: the device orders the
// update after them, the host waits once at the step's end, and the trainer prefetches under it.
TEST(HostWaits, AReplicaStepAddsNoWaitAndTheTrainerPrefetchesUnderIt) {
  StandInDevice device;
  auto owned = std::make_unique<StandInNetwork>(device);
  StandInNetwork& net = *owned;
  auto comm = std::make_unique<StandInComm>(device);
  auto replica = std::make_unique<parallel::ReplicaNetwork>(std::move(owned), std::move(comm), kBucketBytes);
  parallel::ReplicaNetwork& r = *replica;
  ASSERT_EQ(r.buckets().size(), 4u);
  ASSERT_TRUE(r.asynchronous()) << "a replica of an asynchronous backend must be asynchronous";
  Trainer trainer(std::move(replica), std::make_unique<NoData>());
  const Counts c = count_steps(trainer, device, net);
  EXPECT_EQ(c.steps, kSteps);
  EXPECT_EQ(c.waits, kSteps) << "the replica's step waits on the host more often than the plain step";
  EXPECT_EQ(c.prefetched, kSteps) << "the trainer did not prepare the next batch under the replica's step";
  EXPECT_EQ(device.all_reduces, 4 * (kSteps + 1));
  EXPECT_EQ(r.stats().steps, kSteps + 1);
  EXPECT_EQ(r.stats().buckets_early, 3 * (kSteps + 1)) << "every bucket but the last starts during backward";
}

// The communication a replica's step did not hide is what the device waited for the all-reduces
// (the host's wait is the step's own), and each step all-reduces the stand-in's 128 bytes of
// gradients. The replica's hook starts its all-reduces: another one (a timeline's) is refused.
TEST(HostWaits, AReplicaCountsTheDevicesWaitAndEveryStepsBytes) {
  StandInDevice device;
  auto comm = std::make_unique<StandInComm>(device);
  comm->device_wait_s = 0.25;
  auto replica = std::make_unique<parallel::ReplicaNetwork>(std::make_unique<StandInNetwork>(device), std::move(comm),
                                                            kBucketBytes);
  parallel::ReplicaNetwork& r = *replica;
  Trainer trainer(std::move(replica), std::make_unique<NoData>());
  for (int s = 0; s < kSteps; ++s) trainer.step();
  EXPECT_EQ(r.stats().steps, kSteps);
  EXPECT_DOUBLE_EQ(r.stats().wait_s, 0.25 * kSteps);
  EXPECT_DOUBLE_EQ(r.stats().bytes, 128.0 * kSteps);
  EXPECT_THROW(r.set_step_hook([](int) {}), Error);
}

// Called alone, backward waits for its all-reduces on the host (the step's halves are not there
// to wait for them): nothing is left in flight when it returns.
TEST(HostWaits, AReplicasBackwardAloneLeavesNothingInFlight) {
  StandInDevice device;
  parallel::ReplicaNetwork r(std::make_unique<StandInNetwork>(device), std::make_unique<StandInComm>(device),
                             kBucketBytes);
  r.forward();
  r.backward();
  EXPECT_TRUE(device.idle());
  r.update();
  EXPECT_TRUE(device.idle());
  EXPECT_EQ(r.stats().steps, 1);
}

// The timeline marks the step's end as the step is enqueued and reads its marks after the step's
// own wait: no wait of its own, and every time on the device's clock.
TEST(HostWaits, TheTimelineAddsNoWaitAndReadsTheDevicesClock) {
  Stepped stepped;
  StandInDevice& device = stepped.device;
  StandInNetwork& net = *stepped.net;
  Trainer& trainer = *stepped.trainer;
  parallel::TimelineRecorder recorder(trainer.network(), kBucketBytes, std::make_unique<StandInClock>(device),
                                      /*every_s=*/0);
  const int waits = device.waits(), prefetched = net.prefetched();
  for (int s = 0; s < kSteps; ++s) {
    recorder.before_step();
    trainer.step();
    recorder.after_step();
  }
  EXPECT_EQ(device.waits() - waits, kSteps) << "the timeline made the host wait";
  EXPECT_EQ(net.prefetched() - prefetched, kSteps);
  // On the device: time 0, four forward operations, then each layer's backward followed by its
  // bucket's mark (two operations of 1 ms each), the update, the step's end.
  const parallel::StepTimeline t = recorder.timeline();
  const double ms = StandInDevice::kOpSeconds;
  EXPECT_EQ(t.steps, kSteps);
  ASSERT_EQ(t.bucket_ready_s.size(), 4u);
  for (std::size_t k = 0; k < 4; ++k) EXPECT_NEAR(t.bucket_ready_s[k], (6 + 2 * double(k)) * ms, 1e-12) << k;
  EXPECT_NEAR(t.backward_end_s, 12 * ms, 1e-12);
  EXPECT_NEAR(t.step_end_s, 14 * ms, 1e-12);
}

// A recorder watches the first step, then one step in its interval: a step it does not watch has
// no mark on the device (the stand-in's step is its 9 operations alone), and steps further apart
// than the interval are each watched.
TEST(HostWaits, ATimelineWatchesOneStepInItsInterval) {
  Stepped stepped;
  StandInDevice& device = stepped.device;
  Trainer& trainer = *stepped.trainer;
  auto watched_step = [&](parallel::TimelineRecorder& recorder) {
    recorder.before_step();
    trainer.step();
    recorder.after_step();
  };
  {
    parallel::TimelineRecorder hourly(trainer.network(), kBucketBytes, std::make_unique<StandInClock>(device), 3600);
    watched_step(hourly);
    const double start = device.clock();
    for (int s = 0; s < kSteps; ++s) watched_step(hourly);
    EXPECT_NEAR(device.clock() - start, 9 * kSteps * StandInDevice::kOpSeconds, 1e-9) << "an unwatched step was marked";
    EXPECT_EQ(hourly.timeline().steps, 1);
  }
  parallel::TimelineRecorder often(trainer.network(), kBucketBytes, std::make_unique<StandInClock>(device), 0.005);
  for (int s = 0; s < 3; ++s) {
    watched_step(often);
    std::this_thread::sleep_for(std::chrono::milliseconds(8));
  }
  EXPECT_EQ(often.timeline().steps, 3);
}

// A network that never tells the hook where its step ends gives no timeline, rather than a
// wrong one.
TEST(HostWaits, ATimelineRefusesAStepWhoseEndWasNotReported) {
  StandInDevice device;
  StandInNetwork net(device);
  parallel::TimelineRecorder recorder(net, kBucketBytes, std::make_unique<StandInClock>(device));
  recorder.before_step();
  net.forward();  // a step's forward alone: no backward, no update
  EXPECT_THROW(recorder.after_step(), Error);
}

// A step that reported only part of itself to the hook gives no timeline either: its buckets but
// not its end, or its end but no bucket.
TEST(HostWaits, ATimelineRefusesAStepThatReportedOnlyPartOfItself) {
  StandInDevice device;
  StandInNetwork net(device);
  parallel::TimelineRecorder recorder(net, kBucketBytes, std::make_unique<StandInClock>(device), /*every_s=*/0);
  recorder.before_step();
  net.backward();  // every bucket, but not the step's end
  EXPECT_THROW(recorder.after_step(), Error);
  recorder.before_step();
  net.update();  // the step's end, but no bucket
  EXPECT_THROW(recorder.after_step(), Error);
  const parallel::StepTimeline none = recorder.timeline();
  EXPECT_EQ(none.steps, 0);
  EXPECT_TRUE(none.bucket_ready_s.empty()) << "a mean over no step";
}

// A bucket of 16-bit gradients (a GPU's) counts two bytes an element: the stand-in's four layers
// of 8 such gradients are buckets of 16 bytes each.
TEST(HostWaits, ATimelinesBucketsCountSixteenBitGradientsInTwoBytes) {
  StandInDevice device;
  StandInNetwork net(device, /*layers=*/4, /*params=*/8, ElemType::F16);
  parallel::TimelineRecorder recorder(net, /*bucket_bytes=*/16, std::make_unique<StandInClock>(device), /*every_s=*/0);
  recorder.before_step();
  net.start_step();
  StepTimes times;
  net.finish_step(times);
  recorder.after_step();
  const parallel::StepTimeline t = recorder.timeline();
  EXPECT_EQ(t.bucket_bytes, (std::vector<double>{16, 16, 16, 16}));
  EXPECT_DOUBLE_EQ(t.gradient_bytes(), 64);
}

// A model without parameters has no bucket to time: refused, saying so.
TEST(HostWaits, ATimelineRefusesAModelWithoutParameters) {
  StandInDevice device;
  StandInNetwork net(device, /*layers=*/0);
  try {
    parallel::TimelineRecorder recorder(net, kBucketBytes, std::make_unique<StandInClock>(device));
    ADD_FAILURE() << "a timeline of no buckets was made";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a timeline needs a model with parameters"), std::string::npos) << e.what();
  }
}

// The data-parallel probe steps once through the replica untimed (its first all-reduce pays the
// communicator's set-up: 0.2 s here), then times at least the steps asked for, on the trainer's
// own path (its prefetch), and gives the trainer its network back. The replica's buckets are the
// default's: the stand-in's 128 bytes of gradients in one.
TEST(HostWaits, TheProbesFirstStepThroughTheReplicaIsNotTimed) {
  Stepped stepped;
  StandInDevice& device = stepped.device;
  StandInNetwork& net = *stepped.net;
  Trainer& trainer = *stepped.trainer;
  const int steps = net.steps(), prefetched = net.prefetched();
  const std::vector<double> times = parallel::time_replica_steps(trainer, std::make_unique<StandInComm>(device, 0.2),
                                                                 parallel::ProbeSteps{.steps = 5, .seconds = 0.01});
  ASSERT_GE(times.size(), 5u);
  for (double t : times) EXPECT_LT(t, 0.1) << "the first step through the replica was timed";
  EXPECT_EQ(net.steps() - steps, int(times.size()) + 1);
  EXPECT_EQ(net.prefetched() - prefetched, int(times.size()) + 1);
  EXPECT_EQ(device.all_reduces, int(times.size()) + 1) << "the probe's steps skipped the replica";
  EXPECT_EQ(&trainer.network(), &net) << "the trainer did not get its own network back";
  trainer.step();  // and trains on without the replica's hook
  EXPECT_EQ(device.all_reduces, int(times.size()) + 1);
}

// The replica's probe times the steps it is asked for: no more than that where the seconds asked
// for are none.
TEST(HostWaits, TheReplicasProbeTimesTheStepsAskedFor) {
  Stepped stepped;
  const std::vector<double> times = parallel::time_replica_steps(
      *stepped.trainer, std::make_unique<StandInComm>(stepped.device), parallel::ProbeSteps{.steps = 2, .seconds = 0});
  EXPECT_EQ(times.size(), 2u);
}

// A replica that cannot be made (its broadcast of the weights failed) leaves the trainer its own
// network: the probe fails and the row trains on. (The replica took the network and freed it.)
TEST(HostWaits, AReplicaThatCannotBeMadeLeavesTheTrainerItsNetwork) {
  Stepped stepped;
  StandInDevice& device = stepped.device;
  StandInNetwork& net = *stepped.net;
  Trainer& trainer = *stepped.trainer;
  EXPECT_THROW(parallel::time_replica_steps(
                   trainer, std::make_unique<StandInComm>(device, 0, StandInComm::Fails::AtBroadcast), {}),
               Error);
  ASSERT_EQ(&trainer.network(), &net) << "the trainer lost its network";
  const int steps = net.steps();
  trainer.step();
  EXPECT_EQ(net.steps(), steps + 1);
  EXPECT_EQ(device.all_reduces, 0);
}

// A step through the replica that fails at its end (a peer's deadline) aborts the communicator
// and tells the backend to forget the step, so that the network, given back, steps again.
// (Before, the backend still held the step as started and refused the next one.)
TEST(HostWaits, AFailedReplicaStepLeavesTheNetworkAbleToStep) {
  Stepped stepped;
  StandInDevice& device = stepped.device;
  StandInNetwork& net = *stepped.net;
  Trainer& trainer = *stepped.trainer;
  try {
    parallel::time_replica_steps(trainer, std::make_unique<StandInComm>(device, 0, StandInComm::Fails::AtStepEnd), {});
    ADD_FAILURE() << "the probe's failing step did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("deadline"), std::string::npos) << e.what();
  }
  EXPECT_EQ(device.aborts, 1) << "the other ranks were not told";
  EXPECT_EQ(net.abandoned(), 1) << "the backend was not told to forget the failed step";
  ASSERT_EQ(&trainer.network(), &net);
  const int steps = net.steps();
  trainer.step();
  trainer.step();
  EXPECT_EQ(net.steps(), steps + 2);
}

// Batches of nothing, whose `fails_at`-th (counted from 1) cannot be read, as a corrupt file's.
class FailingData final : public Dataset {
 public:
  explicit FailingData(int fails_at) : fails_at_(fails_at) { batch_.batch = 1; }
  const Batch& next() override {
    if (++given_ == fails_at_) throw Error(fmt::format("stand-in: batch {} could not be read", fails_at_));
    return batch_;
  }
  std::string name() const override { return "none"; }
  std::string source() const override { return "stand-in"; }

 private:
  int fails_at_, given_ = 0;
  Batch batch_;
};

// A batch that cannot be read while a step is in flight (the trainer's prefetch) makes the
// network forget that step, so that the next one starts. (Before, the network still held the
// step as started and refused every later one.)
TEST(HostWaits, ABatchThatCannotBeReadUnderAStepLeavesTheNetworkAbleToStep) {
  StandInDevice device;
  auto owned = std::make_unique<StandInNetwork>(device);
  StandInNetwork& net = *owned;
  Trainer trainer(std::move(owned), std::make_unique<FailingData>(2));  // the first step's prefetch
  EXPECT_THROW(trainer.step(), Error);
  EXPECT_EQ(net.abandoned(), 1);
  trainer.step();
  trainer.step();
  EXPECT_EQ(net.steps(), 3);
}

// A probe times at least its steps and its seconds, after the untimed step and what is to run
// between (the sharing probe's barrier).
TEST(HostWaits, AProbeTimesAtLeastItsStepsAndItsSecondsAfterTheUntimedOne) {
  StandInDevice device;
  auto owned = std::make_unique<StandInNetwork>(device);
  StandInNetwork& net = *owned;
  Trainer trainer(std::move(owned), std::make_unique<NoData>());
  int steps_at_barrier = -1;
  const std::vector<double> few = parallel::time_steps(trainer, parallel::ProbeSteps{.steps = 7, .seconds = 0},
                                                       [&] { steps_at_barrier = net.steps(); });
  EXPECT_EQ(steps_at_barrier, 1);
  EXPECT_EQ(few.size(), 7u);
  const std::vector<double> timed = parallel::time_steps(trainer, parallel::ProbeSteps{.steps = 1, .seconds = 0.05});
  double total = 0;
  for (double t : timed) total += t;
  EXPECT_GE(total, 0.05);
}

// Each time is one step's own: the timed steps are disjoint spans of the probe, so that their sum
// is no more than the probe's own wall time (times counted from the first timed step's start
// would sum to several times it).
TEST(HostWaits, AProbesTimesAreEachOneStepsOwn) {
  StandInDevice device;
  Trainer trainer(std::make_unique<StandInNetwork>(device), std::make_unique<NoData>());
  const double start = wall_seconds();
  const std::vector<double> times = parallel::time_steps(trainer, parallel::ProbeSteps{.steps = 8, .seconds = 0});
  const double probe = wall_seconds() - start;
  ASSERT_EQ(times.size(), 8u);
  double total = 0;
  for (double t : times) {
    EXPECT_GT(t, 0);
    total += t;
  }
  EXPECT_LE(total, probe);
}

// A replica as ReplicaRun's factory returns it: `net` with `data`, or with no data.
std::pair<std::unique_ptr<Network>, std::unique_ptr<Dataset>> made_replica(std::unique_ptr<Network> net,
                                                                           std::unique_ptr<Dataset> data = nullptr) {
  if (!data) data = std::make_unique<NoData>();
  return {std::move(net), std::move(data)};
}

// A run's replicas in this process step together: warm_up(n) takes n steps on each, and a step's
// device time is the slowest replica's (the step is over when it is), whichever replica that is.
TEST(ReplicaRun, WarmUpStepsEveryReplicaAndAStepsDeviceTimeIsTheSlowestReplicas) {
  StandInDevice devices[2];
  StandInNetwork* nets[2] = {};
  parallel::ReplicaRun run(nullptr, /*across_ranks=*/false, 2, nullptr, [&](int k) {
    auto net = std::make_unique<StandInNetwork>(devices[k]);
    net->device_seconds = k == 1 ? 5e-3 : 2e-3;
    nets[k] = net.get();
    return made_replica(std::move(net));
  });
  run.connect();
  run.warm_up(3);
  EXPECT_EQ(nets[0]->steps(), 3);
  EXPECT_EQ(nets[1]->steps(), 3);
  EXPECT_DOUBLE_EQ(run.step().device, 5e-3);
}

// Each replica is made once, on its own thread after bind(k) ran there (a GPU replica's device
// is current when its network is made); one replica is made on the caller's thread. Replicas of
// one process that share gradients are as many as it runs.
TEST(ReplicaRun, EachReplicaIsMadeOnItsOwnThreadAfterItsBind) {
  StandInDevice devices[2];
  for (int n : {1, 2}) {
    SCOPED_TRACE(n);
    std::vector<std::thread::id> bound(2), made(2);
    std::vector<int> binds(2), makes(2);
    parallel::ReplicaRun run(
        nullptr, /*across_ranks=*/false, n,
        [&](int k) {
          bound[std::size_t(k)] = std::this_thread::get_id();
          ++binds[std::size_t(k)];
        },
        [&](int k) {
          made[std::size_t(k)] = std::this_thread::get_id();
          EXPECT_EQ(binds[std::size_t(k)], 1) << "replica " << k << " made before its bind";
          ++makes[std::size_t(k)];
          return made_replica(std::make_unique<StandInNetwork>(devices[k]));
        });
    EXPECT_EQ(binds, n == 1 ? (std::vector<int>{1, 0}) : (std::vector<int>{1, 1}));
    EXPECT_EQ(makes, binds);
    for (int k = 0; k < n; ++k) EXPECT_EQ(made[std::size_t(k)], bound[std::size_t(k)]) << k;
    if (n == 1)
      EXPECT_EQ(made[0], std::this_thread::get_id());
    else
      EXPECT_NE(made[0], made[1]);
    EXPECT_EQ(run.communicating_ranks(), n);
  }
}

// A run of no replicas is refused before anything is made.
TEST(ReplicaRun, ARunOfNoReplicasIsRefused) {
  int made = 0;
  try {
    parallel::ReplicaRun run(nullptr, /*across_ranks=*/false, 0, nullptr, [&](int) {
      ++made;
      return std::make_pair(std::unique_ptr<Network>(), std::unique_ptr<Dataset>());
    });
    ADD_FAILURE() << "the run was made";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a run needs a replica"), std::string::npos) << e.what();
  }
  EXPECT_EQ(made, 0);
}

// What a run of two stand-in replicas throws where binding their threads (`bind`) fails: it must
// not be made. The failure is rethrown for the test to catch as the type it expects.
void make_run_binding_with(const std::function<void(int)>& bind) {
  StandInDevice devices[2];
  parallel::ReplicaRun run(nullptr, /*across_ranks=*/false, 2, bind,
                           [&](int k) { return made_replica(std::make_unique<StandInNetwork>(devices[k])); });
  ADD_FAILURE() << "the run was made";
}

// A replica whose thread cannot be bound (its GPU is not there) fails the run with its reason.
TEST(ReplicaRun, AReplicaThatCannotBeBoundFailsTheRunWithItsReason) {
  try {
    make_run_binding_with([](int k) {
      if (k == 1) throw Error("stand-in: device 1 is not there");
    });
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stand-in: device 1 is not there"), std::string::npos) << e.what();
  }
}

// Where replicas fail on their own, the run reports the first one's failure by index, whichever
// failed last (here replica 1, later).
TEST(ReplicaRun, TheFirstReplicasOwnFailureIsReported) {
  try {
    make_run_binding_with([](int k) {
      if (k == 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      throw Error(fmt::format("stand-in: device {} is not there", k));
    });
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stand-in: device 0 is not there"), std::string::npos) << e.what();
  }
}

// Where every replica was stopped by another's failure (another rank's), the run reports that.
TEST(ReplicaRun, ReplicasAllStoppedByAnothersFailureReportIt) {
  try {
    make_run_binding_with(
        [](int k) { throw parallel::PeerFailed(fmt::format("rank {} stopped: replica 3 failed: stand-in", k)); });
  } catch (const parallel::PeerFailed& e) {
    EXPECT_EQ(std::string(e.what()), "rank 0 stopped: replica 3 failed: stand-in");
  }
}

// A step reports its own failures alone: after a replica's batch could not be read (replicas run
// as jobs), the next step, which goes well, does not report it again.
TEST(ReplicaRun, AStepAfterAFailedOneReportsOnlyItsOwnFailures) {
  StandInDevice devices[2];
  StandInNetwork* nets[2] = {};
  parallel::ReplicaRun run(nullptr, /*across_ranks=*/false, 2, nullptr, [&](int k) {
    auto net = std::make_unique<StandInNetwork>(devices[k]);
    nets[k] = net.get();
    return made_replica(std::move(net), std::make_unique<FailingData>(k == 1 ? 2 : 0));
  });
  run.connect();
  EXPECT_THROW(run.step(), Error);  // replica 1's prefetch
  EXPECT_NO_THROW(run.step());
  EXPECT_EQ(nets[0]->steps(), 2);
  EXPECT_EQ(nets[1]->steps(), 2);
}

// The run's communication counters are a replica's, counting every step it took through its
// communicator; replicas run as jobs (no wiring) communicate nothing and count nothing. A run
// connects once.
TEST(ReplicaRun, CommStatsCountTheStepsThroughTheCommunicatorAndAJobHasNone) {
  static StandInDevice devices[2];  // static: a wiring is a plain function
  const parallel::ReplicaRun::Factory make = [&](int k) {
    return made_replica(std::make_unique<StandInNetwork>(devices[k]));
  };
  parallel::Wiring stand_ins = [](const std::vector<Network*>& nets, parallel::Communicator*) {
    parallel::Communicators comms;
    for (std::size_t k = 0; k < nets.size(); ++k) comms.push_back(std::make_unique<StandInComm>(devices[k]));
    return comms;
  };
  parallel::ReplicaRun wired(stand_ins, /*across_ranks=*/false, 2, nullptr, make, kBucketBytes);
  wired.connect();
  EXPECT_THROW(wired.connect(), Error);
  wired.warm_up(3);
  EXPECT_EQ(wired.comm_stats().steps, 3);
  EXPECT_EQ(wired.comm_stats().buckets, 12);  // 4 a step
  ASSERT_NE(wired.replicas()[1].replica, nullptr);
  EXPECT_EQ(wired.replicas()[1].backend, &wired.replicas()[1].replica->inner());
  parallel::ReplicaRun jobs(nullptr, /*across_ranks=*/false, 2, nullptr, make);
  jobs.connect();
  jobs.warm_up(3);
  EXPECT_EQ(jobs.comm_stats().steps, 0);
  EXPECT_EQ(jobs.replicas()[0].replica, nullptr);
}

}  // namespace
}  // namespace tb
