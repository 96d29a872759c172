// The trainer's own bookkeeping (engine/train/trainer.cpp), on a network that echoes its batch:
// which batch each step, evaluation and the first batch's loss ran on, on a synchronous backend
// and on an asynchronous one (where the next batch is fetched and set under the step), the loss
// checks, the phase times and the tally.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/dataset.hpp"
#include "engine/core/error.hpp"
#include "engine/core/network.hpp"
#include "engine/train/trainer.hpp"

namespace tb {
namespace {

// A network whose loss is the first input value of the batch it was given last, so that a loss
// names the batch it was computed on. Synchronous (the whole step runs in start_step, the
// default) or asynchronous (start_step returns at once and the trainer sets the next batch under
// it; the step keeps the batch it started on). Its steps report no device clock (StepTimes{}).
class EchoNetwork final : public Network {
 public:
  explicit EchoNetwork(bool asynchronous) : asynchronous_(asynchronous) {}

  void set_batch(const BatchView& batch) override { given_ = batch.input[0]; }
  float forward() override { return given_; }
  float evaluate() override { return given_; }
  std::int64_t correct() const override { return -1; }
  void backward() override {}
  void update() override {}
  void start_step() override { started_ = given_; }
  float finish_step(StepTimes& times) override {
    times = StepTimes{};
    return started_;
  }
  bool asynchronous() const override { return asynchronous_; }

  std::vector<float> read_output(int) const override { return {}; }
  std::vector<float> read_grad(int) const override { return {}; }
  void set_output_grad(const std::vector<float>&) override {}
  std::vector<float> read_param(int, int) const override { return {}; }
  std::vector<float> read_param_grad(int, int) const override { return {}; }
  void write_param(int, int, const std::vector<float>&) override {}
  std::int64_t param_bytes() const override { return 0; }
  std::vector<FlatSegment> gradient_segments() override { return {}; }
  std::vector<FlatSegment> param_segments() override { return {}; }
  std::uint64_t param_checksum() override { return 0; }
  void set_step_hook(std::function<void(int)>) override {}

 private:
  bool asynchronous_;
  float given_ = 0, started_ = 0;
};

// Batches numbered from `first` (each one sample whose only input is its number), in one buffer
// that each next() overwrites, as a loader's is; or every batch `value` where one is given.
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
    batch_.input[0] = number_;
    number_ += step_;
    return batch_;
  }
  std::string name() const override { return "numbered"; }
  std::string source() const override { return "test"; }
  int fetched = 0;

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

}  // namespace
}  // namespace tb
