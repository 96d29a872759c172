// The trainer's own bookkeeping (engine/train/trainer.cpp), on a network that echoes its batch:
// which batch each step, evaluation and the first batch's loss ran on, on a synchronous backend
// and on an asynchronous one (where the next batch is fetched and set under the step), the loss
// checks, the phase times and the tally; the epoch loop over it (engine/train/epochs.cpp); and the
// default step a synchronous network inherits (engine/core/network.cpp).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/dataset.hpp"
#include "engine/core/error.hpp"
#include "engine/core/network.hpp"
#include "engine/core/timer.hpp"
#include "engine/train/epochs.hpp"
#include "engine/train/trainer.hpp"
#include "tests/inert_network.hpp"

namespace tb {
namespace {

// A network whose loss is the first input value of the batch it was given last, so that a loss
// names the batch it was computed on. Synchronous (the whole step runs in start_step, the
// default) or asynchronous (start_step returns at once and the trainer sets the next batch under
// it; the step keeps the batch it started on). Its steps report `reported` (by default no device
// clock, StepTimes{}); its one sample is correct where the batch's number is at least
// `correct_from` (none: no accuracy, a regression's -1).
class EchoNetwork final : public InertNetwork {
 public:
  explicit EchoNetwork(bool asynchronous) : asynchronous_(asynchronous) {}

  void set_batch(const BatchView& batch) override { given_ = batch.input[0]; }
  float forward() override { return given_; }
  float evaluate() override { return given_; }
  std::int64_t correct() const override {
    if (!std::isfinite(correct_from)) return -1;
    return given_ >= correct_from ? 1 : 0;
  }
  void start_step() override { started_ = given_; }
  float finish_step(StepTimes& times) override {
    times = reported;
    return started_;
  }
  bool asynchronous() const override { return asynchronous_; }

  StepTimes reported{};
  float correct_from = std::numeric_limits<float>::infinity();

 private:
  bool asynchronous_;
  float given_ = 0, started_ = 0;
};

// Batches numbered from `first` (each `samples` samples, one by default, whose only input read is
// its number), in one buffer
// that each next() overwrites, as a loader's is; or every batch `value` where one is given.
// `epoch_steps` batches make an epoch (0: endless); next() and feed() can be made to take time.
class Numbered final : public Dataset {
 public:
  explicit Numbered(float first = 1) : number_(first) {
    batch_.batch = 1;
    batch_.input = {0};
  }
  static std::unique_ptr<Numbered> always(float value) {
    auto data = std::make_unique<Numbered>(value);
    data->step_ = 0;
    return data;
  }
  const Batch& next() override {
    ++fetched;
    std::this_thread::sleep_for(next_takes);
    batch_.batch = samples;
    batch_.input[0] = number_;
    number_ += step_;
    return batch_;
  }
  void feed(Network& net, const Batch& batch) const override {
    std::this_thread::sleep_for(feed_takes);
    if (++fed == feed_fails_at) throw Error("numbered: a batch could not be copied to the network");
    Dataset::feed(net, batch);
  }
  std::string name() const override { return "numbered"; }
  std::string source() const override { return "test"; }
  i64 steps_per_epoch() const override { return epoch_steps; }
  int fetched = 0;
  i64 epoch_steps = 0;
  i64 samples = 1;  // each batch's (the network reads its first input alone)
  std::chrono::milliseconds next_takes{0}, feed_takes{0};
  int feed_fails_at = 0;  // the feed() (counted from 1) that throws; 0: none
  mutable int fed = 0;

 private:
  float number_, step_ = 1;
  Batch batch_;
};

// A trainer over an EchoNetwork and numbered batches from 1.
struct EchoTrainer {
  explicit EchoTrainer(bool asynchronous) {
    auto owned = std::make_unique<Numbered>();
    data = owned.get();
    trainer = std::make_unique<Trainer>(std::make_unique<EchoNetwork>(asynchronous), std::move(owned));
  }
  Numbered* data = nullptr;
  std::unique_ptr<Trainer> trainer;
};

class TrainerOn : public testing::TestWithParam<bool> {};

// Each step trains on the next batch: on a synchronous backend fetched at its start, on an
// asynchronous one fetched and set under the step before it (one batch ahead).
TEST_P(TrainerOn, EachStepTrainsOnTheNextBatch) {
  const bool asynchronous = GetParam();
  EchoTrainer s(asynchronous);
  for (int k = 0; k < 4; ++k) s.trainer->step();
  EXPECT_EQ(s.trainer->losses(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(s.data->fetched, asynchronous ? 5 : 4);
}

// The first batch's loss is that of the first batch trained on (kept as a copy: the loader's
// buffer holds a later one by then), and the step after it trains on its own batch, not on the
// first one given again.
TEST_P(TrainerOn, TheFirstBatchsLossIsOfTheFirstBatchAndTheNextStepKeepsItsOwn) {
  EchoTrainer s(GetParam());
  for (int k = 0; k < 3; ++k) s.trainer->step();
  EXPECT_EQ(s.trainer->first_batch_loss(), 1.0f);
  EXPECT_EQ(s.trainer->step(), 4.0f);
}

// An evaluation sets the validation batches; the next training step still trains on the batch
// fetched for it (on an asynchronous backend, already set before the evaluation).
TEST_P(TrainerOn, AnEvaluationLeavesTheNextTrainingBatchInPlace) {
  EchoTrainer s(GetParam());
  s.trainer->step();
  s.trainer->step();
  auto validation = Numbered::always(100);
  const Tally t = s.trainer->evaluate(*validation, 2);
  EXPECT_EQ(t.steps, 2);
  EXPECT_DOUBLE_EQ(t.mean_loss(), 100);
  EXPECT_EQ(s.trainer->step(), 3.0f);
}

// An evaluation's tally counts every sample of its batches, so that its accuracy is over samples,
// not batches: 2 batches of 4 samples with one correct each are 2 of 8 correct.
// A batch that cannot be set on the network under a step (the asynchronous backend's prefetch,
// whose feed() throws) is not trained on: the next step fetches and sets a batch of its own,
// rather than stepping on the batch the failed feed left unset (the network still held batch 1).
TEST(Trainer, ABatchWhoseFeedFailsUnderAStepIsNotTrainedOn) {
  auto data = std::make_unique<Numbered>();
  data->feed_fails_at = 2;  // batch 2's, the first step's prefetch
  Trainer trainer(std::make_unique<EchoNetwork>(/*asynchronous=*/true), std::move(data));
  EXPECT_THROW(trainer.step(), Error);
  trainer.step();
  EXPECT_EQ(trainer.losses(), std::vector<float>{3});
}

TEST(Trainer, AnEvaluationCountsEverySampleOfItsBatches) {
  auto network = std::make_unique<EchoNetwork>(false);
  network->correct_from = 0;
  Trainer trainer(std::move(network), std::make_unique<Numbered>());
  auto validation = Numbered::always(7);
  validation->samples = 4;
  const Tally t = trainer.evaluate(*validation, 2);
  EXPECT_EQ(t.steps, 2);
  EXPECT_EQ(t.samples, 8);
  EXPECT_EQ(t.correct, 2);
  EXPECT_DOUBLE_EQ(t.accuracy(), 0.25);
}

INSTANTIATE_TEST_SUITE_P(Backends, TrainerOn, testing::Bool(), [](const testing::TestParamInfo<bool>& i) {
  return i.param ? "Asynchronous" : "Synchronous";
});

// A non-finite loss stops training and evaluation alike, naming the phase and the step.
TEST(Trainer, ANonFiniteLossIsRefusedNamingThePhaseAndTheStep) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EchoTrainer s(false);
  s.trainer->step();
  auto validation = Numbered::always(nan);
  try {
    s.trainer->evaluate(*validation, 3);
    ADD_FAILURE() << "a NaN validation loss was taken";
  } catch (const CheckFailed& e) {
    EXPECT_NE(std::string(e.what()).find("loss is NaN at validation step 1"), std::string::npos) << e.what();
  }
  Trainer diverged(std::make_unique<EchoNetwork>(false), Numbered::always(std::numeric_limits<float>::infinity()));
  try {
    diverged.step();
    ADD_FAILURE() << "an infinite training loss was taken";
  } catch (const CheckFailed& e) {
    EXPECT_NE(std::string(e.what()).find("loss is inf at training step 1"), std::string::npos) << e.what();
  }
}

// A backend without a device clock reports no device data time (negative): the data phase is
// the host's fetch alone, never less than its wait, and steps whose phases were timed (0 s here)
// stay split.
TEST(Trainer, PhasesAddOnlyWhatTheBackendMeasured) {
  EchoTrainer s(false);
  for (int k = 0; k < 5; ++k) s.trainer->step();
  const PhaseTimes& p = s.trainer->phases();
  EXPECT_GE(p.data_wait, 0);
  EXPECT_GE(p.data, p.data_wait);
  EXPECT_TRUE(p.split);
  EXPECT_EQ(p.device, 0);
  EXPECT_EQ(s.trainer->last_device_seconds(), -1);
}

// A backend with a device clock: each phase is summed from what its steps measured, the device's
// data time is added to the host's, and the last step's device time is kept.
TEST(Trainer, PhasesSumWhatEachStepMeasured) {
  auto owned = std::make_unique<EchoNetwork>(false);
  owned->reported = StepTimes{.forward = 1, .backward = 2, .update = 3, .device = 6, .data = 0.5};
  Trainer trainer(std::move(owned), std::make_unique<Numbered>());
  for (int k = 0; k < 3; ++k) trainer.step();
  const PhaseTimes& p = trainer.phases();
  EXPECT_DOUBLE_EQ(p.forward, 3);
  EXPECT_DOUBLE_EQ(p.backward, 6);
  EXPECT_DOUBLE_EQ(p.update, 9);
  EXPECT_DOUBLE_EQ(p.device, 18);
  EXPECT_GE(p.data, 1.5);
  EXPECT_TRUE(p.split);
  EXPECT_EQ(trainer.last_device_seconds(), 6);
}

// The host's data phase: its wait is the fetch alone (next()), the phase the fetch and the copy
// into the network (feed()). Each is no shorter than the sleep the stand-in takes in it.
TEST(Trainer, TheDataWaitIsTheFetchAndTheDataPhaseAddsTheCopy) {
  auto data = std::make_unique<Numbered>();
  data->next_takes = std::chrono::milliseconds(2);
  data->feed_takes = std::chrono::milliseconds(3);
  Trainer trainer(std::make_unique<EchoNetwork>(false), std::move(data));
  for (int k = 0; k < 3; ++k) trainer.step();
  const PhaseTimes& p = trainer.phases();
  EXPECT_GE(p.data_wait, 3 * 0.002);
  EXPECT_GE(p.data - p.data_wait, 3 * 0.003);
}

// Epochs of 2 training batches (numbered 1, 2, then 3, 4, ...) each followed by 2 validation
// batches (10, 11, then 12, 13, ...); a batch numbered 12 or more is correct. Each epoch's
// figures are its own steps' (the tally restarts), its steps count from the first epoch, and
// each record is also handed to the callback.
struct EpochSetUp {
  EpochSetUp() {
    auto owned = std::make_unique<EchoNetwork>(false);
    owned->correct_from = 12;
    auto training = std::make_unique<Numbered>();
    training->epoch_steps = 2;
    training->next_takes = std::chrono::milliseconds(2);
    trainer = std::make_unique<Trainer>(std::move(owned), std::move(training));
  }
  std::unique_ptr<Trainer> trainer;
  Numbered validation{10};
};

TEST(Epochs, EachEpochReportsItsOwnStepsAndItsValidation) {
  EpochSetUp s;
  std::vector<EpochRecord> heard;
  const EpochResult result = train_epochs(*s.trainer, s.validation, 2, EpochOptions{.epochs = 3},
                                          [&](const EpochRecord& r) { heard.push_back(r); });
  ASSERT_EQ(result.records.size(), 3u);
  ASSERT_EQ(heard.size(), 3u);
  EXPECT_EQ(result.time_to_target_s, -1) << "no target was asked for";
  for (std::size_t k = 0; k < 3; ++k) {
    const EpochRecord& r = result.records[k];
    SCOPED_TRACE(k);
    EXPECT_EQ(r.epoch, i64(k) + 1);
    EXPECT_EQ(r.steps, 2 * (i64(k) + 1));
    EXPECT_DOUBLE_EQ(r.train_loss, 1.5 + 2 * double(k));
    EXPECT_DOUBLE_EQ(r.val_loss, 10.5 + 2 * double(k));
    EXPECT_DOUBLE_EQ(r.train_acc, 0);
    EXPECT_DOUBLE_EQ(r.val_acc, k == 0 ? 0 : 1);
    // The training time sums the epochs' steps (2 ms each at least), within the elapsed time,
    // and the CPU time is the steps' own (they sleep most of it).
    EXPECT_GE(r.train_s, 2 * 0.002 * double(k + 1));
    EXPECT_LE(r.train_s, r.elapsed_s);
    EXPECT_LT(r.train_cpu_s, r.train_s);
    EXPECT_EQ(heard[k].epoch, r.epoch);
    EXPECT_EQ(heard[k].train_loss, r.train_loss);
  }
}

// A target accuracy ends training at the first epoch whose validation reaches it (equal counts),
// at that epoch's elapsed time.
TEST(Epochs, TrainingStopsAtTheFirstEpochThatReachesTheTarget) {
  EpochSetUp s;
  const EpochResult result =
      train_epochs(*s.trainer, s.validation, 2, EpochOptions{.epochs = 5, .target_accuracy = 1.0}, {});
  ASSERT_EQ(result.records.size(), 2u);
  EXPECT_EQ(result.time_to_target_s, result.records[1].elapsed_s);
}

TEST(Epochs, DataWithoutEpochsOrAWholeValidationBatchIsRefused) {
  EpochSetUp s;
  try {
    train_epochs(*s.trainer, s.validation, 0, EpochOptions{}, {});
    ADD_FAILURE() << "an empty validation split was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("numbered: the validation split holds no whole batch"), std::string::npos)
        << e.what();
  }
  Trainer endless(std::make_unique<EchoNetwork>(false), std::make_unique<Numbered>());
  try {
    train_epochs(endless, s.validation, 2, EpochOptions{}, {});
    ADD_FAILURE() << "endless training data was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("numbered: the training data has no epochs"), std::string::npos) << e.what();
  }
}

// A task without accuracy (a batch's correct of -1) has none for the whole tally, whatever
// batches follow.
TEST(Trainer, ATallyWithoutAccuracyStaysWithout) {
  Tally t;
  t.add(1.0f, 3, 4);
  EXPECT_DOUBLE_EQ(t.accuracy(), 0.75);
  t.add(3.0f, -1, 4);
  t.add(5.0f, 4, 4);
  EXPECT_EQ(t.correct, -1);
  EXPECT_EQ(t.accuracy(), -1.0);
  EXPECT_DOUBLE_EQ(t.mean_loss(), 3.0);
  EXPECT_EQ(t.samples, 12);
}

// ---- the default step of a synchronous network (engine/core/network.cpp) ----

// A synchronous network that keeps the default train_step, start_step and finish_step
// (engine/core/network.cpp): its forward, backward and update each sleep and note on the host clock
// when they began and ended, so that each phase's time can be held between what it must at least
// and at most contain, with no bound on how long anything takes.
class PhasedNetwork final : public InertNetwork {
 public:
  struct Span {
    double begin = 0, end = 0;
  };
  float forward() override { return timed(forward_span, 2.5f); }
  void backward() override { timed(backward_span, 0.0f); }
  void update() override { timed(update_span, 0.0f); }

  Span forward_span, backward_span, update_span;

 private:
  static float timed(Span& span, float loss) {
    span.begin = wall_seconds();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    span.end = wall_seconds();
    return loss;
  }
};

// Each phase's time spans its own call and none of its neighbours': the forward time ends before
// the backward begins, and so on. A phase that also took in the next one's 5 ms sleep (t2 - t0
// for the forward) would pass its upper bound. The host clock is all a synchronous step has, so
// its device and data times say there is none (negative).
void expect_phases_within_their_calls(const PhasedNetwork& net, const StepTimes& times, double before, double after) {
  EXPECT_GE(times.forward, net.forward_span.end - net.forward_span.begin);
  EXPECT_LE(times.forward, net.backward_span.begin - before);
  EXPECT_GE(times.backward, net.backward_span.end - net.backward_span.begin);
  EXPECT_LE(times.backward, net.update_span.begin - net.forward_span.end);
  EXPECT_GE(times.update, net.update_span.end - net.update_span.begin);
  EXPECT_LE(times.update, after - net.backward_span.end);
  EXPECT_LT(times.device, 0);
  EXPECT_LT(times.data, 0);
}

TEST(DefaultStep, EachPhaseIsTimedOverItsOwnCallAndTheTwoHalvesGiveTheStepsLossAndTimes) {
  PhasedNetwork net;
  StepTimes times;
  double before = wall_seconds();
  EXPECT_EQ(net.train_step(times), 2.5f);
  double after = wall_seconds();
  {
    SCOPED_TRACE("train_step");
    expect_phases_within_their_calls(net, times, before, after);
  }

  StepTimes halves;
  before = wall_seconds();
  net.start_step();
  after = wall_seconds();
  EXPECT_EQ(net.finish_step(halves), 2.5f);
  SCOPED_TRACE("start_step and finish_step");
  expect_phases_within_their_calls(net, halves, before, after);
}

}  // namespace
}  // namespace tb
