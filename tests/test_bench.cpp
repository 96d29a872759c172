// The trainbench binary's own logic, without running a benchmark: the window jobs are timed on.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "bench/jobs.hpp"
#include "engine/core/error.hpp"

namespace tb::bench {
namespace {

// `steps` steps of `step_s` each from `start`, `batch` samples each.
JobSteps steady(double start, int steps, double step_s, double batch) {
  JobSteps j;
  j.first_start = start;
  j.samples_per_step = batch;
  for (int k = 1; k <= steps; ++k) j.ends.push_back(start + k * step_s);
  return j;
}

// Two jobs of unequal speed: the slow one steps 0.2 s from t = 0 to 2; the fast one 0.05 s from
// t = 0 to 2 and, with the device to itself, 0.025 s from 2 to 3. Only [0, 2] had both running:
// 10 + 40 steps of 100 samples there, 2500 samples/s. Each job's own rate summed (the rows'
// combination before the common window) says 100 x 10 / 2 + 100 x 80 / 3 = 3167: the fast job's
// time alone counted as if shared.
TEST(JobsWindow, CountsOnlyWhatEveryJobRanTogether) {
  JobSteps slow = steady(0, 10, 0.2, 100);
  JobSteps fast = steady(0, 40, 0.05, 100);
  for (int k = 1; k <= 40; ++k) fast.ends.push_back(2 + k * 0.025);
  const CommonWindow w = common_window({slow, fast});
  EXPECT_DOUBLE_EQ(w.start, 0);
  EXPECT_DOUBLE_EQ(w.end, 2);
  ASSERT_EQ(w.samples.size(), 2u);
  EXPECT_NEAR(w.samples[0], 1000, 1e-9);
  EXPECT_NEAR(w.samples[1], 4000, 1e-9);
  EXPECT_NEAR(w.samples_per_s(), 2500, 1e-9);
  const double own_rates_summed = 100.0 * 10 / 2 + 100.0 * 80 / 3;
  EXPECT_GT(own_rates_summed / w.samples_per_s(), 1.25);
}

// A job that started late: the window starts with it, and the steps of the others that straddle
// its start count for their part inside.
TEST(JobsWindow, StepsAcrossTheEdgesCountForTheirPartInside) {
  const JobSteps early = steady(0, 4, 1.0, 10);   // steps end at 1, 2, 3, 4
  const JobSteps late = steady(1.5, 5, 0.5, 10);  // from 1.5 to 4
  const CommonWindow w = common_window({early, late});
  EXPECT_DOUBLE_EQ(w.start, 1.5);
  EXPECT_DOUBLE_EQ(w.end, 4);
  EXPECT_NEAR(w.samples[0], 10 * (0.5 + 1 + 1), 1e-9);  // half of the step ending at 2, then two whole
  EXPECT_NEAR(w.samples[1], 50, 1e-9);
  EXPECT_NEAR(w.length(), 2.5, 1e-12);
}

TEST(JobsWindow, JobsThatNeverRanTogetherAreAnError) {
  const JobSteps first = steady(0, 2, 1, 10), second = steady(3, 2, 1, 10);
  EXPECT_THROW(common_window({first, second}), Error);
  JobSteps none;
  EXPECT_THROW(common_window({first, none}), Error);
}

}  // namespace
}  // namespace tb::bench
