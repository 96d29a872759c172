// Checks the plain-loop reference ops (engine/reference/ops.hpp) that every backend is tested
// against: each backward against central differences in double, a few forwards and the
// optimizers against values worked out by hand, and that every backward overwrites what it writes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/reference/ops.hpp"

namespace tb::ref {
namespace {

using Vec = std::vector<double>;

constexpr std::uint32_t kSeed = 20240611;
constexpr double kStep = 1e-6;  // h of the central difference
// With h = 1e-6 the central difference has truncation error O(h^2 |L'''|) ~ 1e-12 and rounding
// error ~ 1e-16 |L| / h ~ 1e-10 |L|; the losses here are O(1..10), so a correct gradient agrees
// to ~1e-9. |a - n| <= 1e-6 + 1e-5 |n| leaves a wide margin over that noise, while a wrong term
// (a missing factor, a swapped index, a dropped path) is off by 1e-2 or more.
constexpr double kAbsTol = 1e-6;
constexpr double kRelTol = 1e-5;
constexpr std::size_t kMaxChecksPerTensor = 20;
// Hand-computed values are exact up to a few roundings (and FMA contraction where the compiler
// uses it); any real mistake is many orders of magnitude larger.
constexpr double kHandTol = 1e-12;

Vec uniform(std::mt19937& rng, i64 n, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec v(static_cast<std::size_t>(n));
  for (double& e : v) e = dist(rng);
  return v;
}

// Magnitudes in [0.2, 1] with a random sign: a step of h can never cross ReLU's kink at 0.
Vec away_from_zero(std::mt19937& rng, i64 n) {
  Vec v = uniform(rng, n, 0.2, 1.0);
  std::bernoulli_distribution negative(0.5);
  for (double& e : v)
    if (negative(rng)) e = -e;
  return v;
}

// Distinct values 0.01 apart in random order: no max-pool window has a tie, or a near-tie that a
// step of h could flip.
Vec distinct(std::mt19937& rng, i64 n) {
  Vec v(static_cast<std::size_t>(n));
  for (std::size_t e = 0; e < v.size(); ++e) v[e] = 0.01 * (double(e) - double(n) / 2);
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

double dot(const Vec& a, const Vec& b) {
  double sum = 0.0;
  for (std::size_t e = 0; e < a.size(); ++e) sum += a[e] * b[e];
  return sum;
}

bool all_finite(const Vec& v) {
  return std::all_of(v.begin(), v.end(), [](double e) { return std::isfinite(e); });
}

struct GradCheckResult {
  std::size_t checked = 0;
  std::string failures;  // empty when the gradient is right
};

// Compares `analytic`, the claimed gradient of `loss` w.r.t. `param`, with central differences
// at up to kMaxChecksPerTensor random elements. `loss` must read `param`, which is perturbed in
// place and restored.
GradCheckResult check_gradient(Vec& param, const Vec& analytic, const std::function<double()>& loss,
                               std::mt19937& rng) {
  GradCheckResult result;
  std::ostringstream failures;
  failures.precision(17);
  if (analytic.size() != param.size()) {
    failures << "analytic has " << analytic.size() << " elements, param " << param.size() << "\n";
    result.failures = failures.str();
    return result;
  }
  const double base = loss();
  if (!std::isfinite(base)) failures << "loss at the unperturbed point is " << base << "\n";
  double largest = 0.0;
  for (std::size_t e = 0; e < analytic.size(); ++e) {
    if (!std::isfinite(analytic[e])) failures << "analytic[" << e << "] = " << analytic[e] << "\n";
    largest = std::max(largest, std::abs(analytic[e]));
  }
  // An all-zero gradient would match a loss that ignores the parameter: refuse that easy pass.
  if (!(largest > 1e-10)) failures << "analytic gradient is all zeros\n";

  std::vector<std::size_t> order(param.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::shuffle(order.begin(), order.end(), rng);
  order.resize(std::min(order.size(), kMaxChecksPerTensor));
  for (std::size_t e : order) {
    const double saved = param[e];
    param[e] = saved + kStep;
    const double up = loss();
    param[e] = saved - kStep;
    const double down = loss();
    param[e] = saved;
    const double numeric = (up - down) / (2 * kStep);
    ++result.checked;
    // Written as !(<=) so that a NaN on either side fails too.
    if (!std::isfinite(numeric) || !(std::abs(analytic[e] - numeric) <= kAbsTol + kRelTol * std::abs(numeric))) {
      failures << "element " << e << ": analytic " << analytic[e] << ", numeric " << numeric << "\n";
    }
  }
  result.failures = failures.str();
  return result;
}

void expect_gradient_matches(const std::string& name, Vec& param, const Vec& analytic,
                             const std::function<double()>& loss, std::mt19937& rng) {
  SCOPED_TRACE("gradient w.r.t. " + name);
  const GradCheckResult result = check_gradient(param, analytic, loss, rng);
  EXPECT_GT(result.checked, 0u);
  EXPECT_TRUE(result.failures.empty()) << result.failures;
}

// ---- The checker itself: a gradient check that cannot fail proves nothing ----

// L(p) = sum r p^3, dL/dp = 3 r p^2.
struct CubicLoss {
  Vec p, r;
  double operator()() const {
    double sum = 0.0;
    for (std::size_t e = 0; e < p.size(); ++e) sum += r[e] * p[e] * p[e] * p[e];
    return sum;
  }
  Vec gradient() const {
    Vec g(p.size());
    for (std::size_t e = 0; e < p.size(); ++e) g[e] = 3 * r[e] * p[e] * p[e];
    return g;
  }
};

TEST(GradCheckHarness, AcceptsCorrectGradient) {
  std::mt19937 rng(kSeed);
  CubicLoss f{uniform(rng, 10), uniform(rng, 10)};
  const GradCheckResult result = check_gradient(f.p, f.gradient(), std::ref(f), rng);
  EXPECT_EQ(result.checked, 10u);
  EXPECT_TRUE(result.failures.empty()) << result.failures;
}

TEST(GradCheckHarness, RejectsGradientOffByOnePercent) {
  std::mt19937 rng(kSeed);
  CubicLoss f{uniform(rng, 10), uniform(rng, 10)};
  Vec wrong = f.gradient();
  for (double& e : wrong) e *= 1.01;
  EXPECT_FALSE(check_gradient(f.p, wrong, std::ref(f), rng).failures.empty());
}

TEST(GradCheckHarness, RejectsNonFiniteGradient) {
  std::mt19937 rng(kSeed);
  CubicLoss f{uniform(rng, 10), uniform(rng, 10)};
  for (double bad : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    Vec gradient = f.gradient();
    gradient[3] = bad;
    EXPECT_FALSE(check_gradient(f.p, gradient, std::ref(f), rng).failures.empty()) << bad;
  }
}

TEST(GradCheckHarness, RejectsNonFiniteLoss) {
  std::mt19937 rng(kSeed);
  CubicLoss f{uniform(rng, 10), uniform(rng, 10)};
  auto nan_loss = [&] { return f() * std::numeric_limits<double>::quiet_NaN(); };
  EXPECT_FALSE(check_gradient(f.p, f.gradient(), nan_loss, rng).failures.empty());
}

TEST(GradCheckHarness, RejectsAllZeroGradient) {
  std::mt19937 rng(kSeed);
  Vec p = uniform(rng, 10);
  auto constant_loss = [] { return 1.5; };  // its true gradient is zero: nothing is exercised
  EXPECT_FALSE(check_gradient(p, Vec(10, 0.0), constant_loss, rng).failures.empty());
}

// ---- Linear ----

TEST(LinearGradCheck, InputWeightAndBias) {
  std::mt19937 rng(kSeed);
  const i64 N = 3, I = 5, O = 4;
  Vec x = uniform(rng, N * I);        // (N, I)
  Vec w = uniform(rng, O * I);        // (O, I)
  Vec b = uniform(rng, O);            // (O)
  const Vec r = uniform(rng, N * O);  // (N, O) upstream gradient
  auto loss = [&] {
    Vec y(N * O);  // (N, O)
    linear_forward(x.data(), w.data(), b.data(), y.data(), N, I, O);
    return dot(y, r);
  };
  Vec dx(N * I), dw(O * I), db(O);
  linear_backward(x.data(), w.data(), r.data(), dx.data(), dw.data(), db.data(), N, I, O);
  expect_gradient_matches("x", x, dx, loss, rng);
  expect_gradient_matches("w", w, dw, loss, rng);
  expect_gradient_matches("b", b, db, loss, rng);
}

TEST(LinearForward, HandComputed) {
  const Vec x = {1, 2, 3, -1, 0, 1};        // (2, 3)
  const Vec w = {1, 0, -1, 0.5, 0.5, 0.5};  // (2, 3)
  const Vec b = {0.25, -1};                 // (2)
  Vec y(4);                                 // (2, 2)
  linear_forward(x.data(), w.data(), b.data(), y.data(), 2, 3, 2);
  EXPECT_EQ(y, (Vec{1 - 3 + 0.25, 3 - 1, -1 - 1 + 0.25, 0 - 1}));
  linear_forward<double>(x.data(), w.data(), nullptr, y.data(), 2, 3, 2);
  EXPECT_EQ(y, (Vec{-2, 3, -2, 0}));
}

TEST(LinearBackward, OptionalGradientsMayBeNull) {
  std::mt19937 rng(kSeed);
  const i64 N = 2, I = 3, O = 2;
  const Vec x = uniform(rng, N * I), w = uniform(rng, O * I), dy = uniform(rng, N * O);
  Vec dx(N * I), dw(O * I), db(O), dw_alone(O * I);
  linear_backward(x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data(), N, I, O);
  linear_backward<double>(x.data(), w.data(), dy.data(), nullptr, dw_alone.data(), nullptr, N, I, O);
  EXPECT_EQ(dw, dw_alone);
}

// ---- Conv2d ----

struct ConvCase {
  const char* name;
  i64 H, W, kernel, stride, pad;
};
void PrintTo(const ConvCase& c, std::ostream* os) { *os << c.name; }

class ConvGradCheck : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ConvGradCheck, InputWeightAndBias) {
  const ConvCase& c = GetParam();
  const ConvShape s{.N = 2, .C = 3, .H = c.H, .W = c.W, .O = 4, .kernel = c.kernel, .stride = c.stride, .pad = c.pad};
  const i64 k = s.kernel, y_size = s.N * s.O * s.out_h() * s.out_w();
  std::mt19937 rng(kSeed);
  Vec x = uniform(rng, s.N * s.C * s.H * s.W);  // (N, C, H, W)
  Vec w = uniform(rng, s.O * s.C * k * k);      // (O, C, k, k)
  Vec b = uniform(rng, s.O);                    // (O)
  const Vec r = uniform(rng, y_size);           // (N, O, OH, OW) upstream gradient
  auto loss = [&] {
    Vec y(y_size);  // (N, O, OH, OW)
    conv2d_forward(x.data(), w.data(), b.data(), y.data(), s);
    return dot(y, r);
  };
  Vec dx(x.size()), dw(w.size()), db(b.size());
  conv2d_backward(x.data(), w.data(), r.data(), dx.data(), dw.data(), db.data(), s);
  expect_gradient_matches("x", x, dx, loss, rng);
  expect_gradient_matches("w", w, dw, loss, rng);
  expect_gradient_matches("b", b, db, loss, rng);
}

INSTANTIATE_TEST_SUITE_P(Shapes, ConvGradCheck,
                         ::testing::Values(ConvCase{"k3_s1_p1", 8, 8, 3, 1, 1}, ConvCase{"k3_s2_p1", 8, 8, 3, 2, 1},
                                           // The last row and column are read by no window: their dx must be 0.
                                           ConvCase{"k3_s2_p0_ragged", 8, 6, 3, 2, 0},
                                           ConvCase{"k1_s1_p0", 8, 8, 1, 1, 0}, ConvCase{"k5_s2_p2", 7, 8, 5, 2, 2}),
                         [](const ::testing::TestParamInfo<ConvCase>& case_info) {
                           return std::string(case_info.param.name);
                         });

// An asymmetric kernel, so that a flipped (true convolution) kernel gives other numbers.
TEST(Conv2dForward, HandComputedNoPadding) {
  const ConvShape s{.N = 1, .C = 1, .H = 3, .W = 3, .O = 1, .kernel = 2, .stride = 1, .pad = 0};
  const Vec x = {1, 2, 3, 4, 5, 6, 7, 8, 9};  // (1, 1, 3, 3)
  const Vec w = {1, 2, 3, 4};                 // (1, 1, 2, 2)
  const Vec b = {0.5};                        // (1)
  Vec y(4);                                   // (1, 1, 2, 2)
  conv2d_forward(x.data(), w.data(), b.data(), y.data(), s);
  // y(0,0) = 1*1 + 2*2 + 3*4 + 4*5 = 37, and so on, plus the bias.
  EXPECT_EQ(y, (Vec{37.5, 47.5, 67.5, 77.5}));
}

TEST(Conv2dForward, HandComputedPaddingAndStride) {
  const ConvShape s{.N = 1, .C = 1, .H = 3, .W = 3, .O = 1, .kernel = 3, .stride = 2, .pad = 1};
  const Vec x = {1, 2, 3, 4, 5, 6, 7, 8, 9};   // (1, 1, 3, 3)
  const Vec w = {0, 1, 0, 1, -4, 1, 0, 1, 0};  // (1, 1, 3, 3): a Laplacian
  Vec y(4);                                    // (1, 1, 2, 2): centres (0,0) (0,2) (2,0) (2,2)
  conv2d_forward<double>(x.data(), w.data(), nullptr, y.data(), s);
  // Corner (0,0): right 2 + down 4 - 4*1 = 2; (0,2): 2 + 6 - 12 = -4;
  // (2,0): 4 + 8 - 28 = -16; (2,2): 6 + 8 - 36 = -22. Zero padding supplies the rest.
  EXPECT_EQ(y, (Vec{2, -4, -16, -22}));
}

TEST(Conv2dBackward, OptionalGradientsMayBeNull) {
  const ConvShape s{.N = 1, .C = 2, .H = 5, .W = 4, .O = 3, .kernel = 3, .stride = 2, .pad = 1};
  std::mt19937 rng(kSeed);
  const Vec x = uniform(rng, s.N * s.C * s.H * s.W), w = uniform(rng, s.O * s.C * 9);
  const Vec dy = uniform(rng, s.N * s.O * s.out_h() * s.out_w());
  Vec dx(x.size()), dw(w.size()), db(s.O), dw_alone(w.size());
  conv2d_backward(x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data(), s);
  conv2d_backward<double>(x.data(), w.data(), dy.data(), nullptr, dw_alone.data(), nullptr, s);
  EXPECT_EQ(dw, dw_alone);
}

// ---- MaxPool2d ----

struct PoolCase {
  const char* name;
  i64 H, W, kernel, stride, pad;
};
void PrintTo(const PoolCase& c, std::ostream* os) { *os << c.name; }

class MaxPoolGradCheck : public ::testing::TestWithParam<PoolCase> {};

TEST_P(MaxPoolGradCheck, Input) {
  const PoolCase& c = GetParam();
  const PoolShape s{.N = 2, .C = 3, .H = c.H, .W = c.W, .kernel = c.kernel, .stride = c.stride, .pad = c.pad};
  const i64 y_size = s.N * s.C * s.out_h() * s.out_w();
  std::mt19937 rng(kSeed);
  Vec x = distinct(rng, s.N * s.C * s.H * s.W);  // (N, C, H, W)
  const Vec r = uniform(rng, y_size);            // (N, C, OH, OW) upstream gradient
  auto loss = [&] {
    Vec y(y_size);  // (N, C, OH, OW)
    maxpool2d_forward(x.data(), y.data(), s);
    return dot(y, r);
  };
  Vec dx(x.size());
  maxpool2d_backward(x.data(), r.data(), dx.data(), s);
  expect_gradient_matches("x", x, dx, loss, rng);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MaxPoolGradCheck,
                         ::testing::Values(PoolCase{"k2_s2_p0", 8, 8, 2, 2, 0}, PoolCase{"k3_s2_p1", 8, 8, 3, 2, 1},
                                           PoolCase{"k3_s1_p1_overlapping", 7, 6, 3, 1, 1}),
                         [](const ::testing::TestParamInfo<PoolCase>& case_info) {
                           return std::string(case_info.param.name);
                         });

// All-negative input: if padding took part as a 0, every output would be 0.
TEST(MaxPool2d, PaddingNeverWins) {
  const PoolShape s{.N = 1, .C = 1, .H = 4, .W = 4, .kernel = 3, .stride = 2, .pad = 1};
  Vec x(16);  // (1, 1, 4, 4): x[i][j] = -(4i + j + 1), so the top-left of a window wins
  for (std::size_t e = 0; e < x.size(); ++e) x[e] = -double(e + 1);
  Vec y(4);  // (1, 1, 2, 2)
  maxpool2d_forward(x.data(), y.data(), s);
  // Windows cover rows/cols {-1,0,1} and {1,2,3}; their real top-left cells are
  // (0,0), (0,1), (1,0), (1,1).
  EXPECT_EQ(y, (Vec{-1, -2, -5, -6}));

  const Vec dy = {1, 2, 3, 4};  // (1, 1, 2, 2)
  Vec dx(16);                   // (1, 1, 4, 4)
  maxpool2d_backward(x.data(), dy.data(), dx.data(), s);
  Vec expected(16, 0.0);
  expected[0] = 1, expected[1] = 2, expected[4] = 3, expected[5] = 4;
  EXPECT_EQ(dx, expected);
}

TEST(MaxPool2d, TiesGoToTheFirstAndSharedWinnersAccumulate) {
  // Equal values: the first in row-major window order takes the gradient.
  const PoolShape tie{.N = 1, .C = 1, .H = 2, .W = 2, .kernel = 2, .stride = 1, .pad = 0};
  const Vec flat = {5, 5, 5, 5};  // (1, 1, 2, 2)
  const Vec one = {1};            // (1, 1, 1, 1)
  Vec dx_tie(4);                  // (1, 1, 2, 2)
  maxpool2d_backward(flat.data(), one.data(), dx_tie.data(), tie);
  EXPECT_EQ(dx_tie, (Vec{1, 0, 0, 0}));

  // Two overlapping windows share the winner 5: it receives both gradients.
  const PoolShape overlap{.N = 1, .C = 1, .H = 2, .W = 3, .kernel = 2, .stride = 1, .pad = 0};
  const Vec x = {0.1, 5, 1, 0.2, 0.3, 0.4};  // (1, 1, 2, 3)
  Vec y(2);                                  // (1, 1, 1, 2)
  maxpool2d_forward(x.data(), y.data(), overlap);
  EXPECT_EQ(y, (Vec{5, 5}));
  const Vec dy = {1, 2};  // (1, 1, 1, 2)
  Vec dx(6);              // (1, 1, 2, 3)
  maxpool2d_backward(x.data(), dy.data(), dx.data(), overlap);
  EXPECT_EQ(dx, (Vec{0, 3, 0, 0, 0, 0}));
}

// A window that holds only padding (pad >= kernel, which frameworks refuse) has no element to win:
// its output is the max of nothing, -inf, not a padding 0, and its gradient goes nowhere.
TEST(MaxPool2d, AWindowOfPaddingAloneGivesMinusInfinity) {
  const PoolShape s{.N = 1, .C = 1, .H = 1, .W = 1, .kernel = 1, .stride = 1, .pad = 1};
  const Vec x = {-2};  // (1, 1, 1, 1)
  Vec y(9);            // (1, 1, 3, 3): only the centre's window holds x
  maxpool2d_forward(x.data(), y.data(), s);
  Vec expected(9, -std::numeric_limits<double>::infinity());
  expected[4] = -2;
  EXPECT_EQ(y, expected);
  const Vec dy = {1, 2, 3, 4, 5, 6, 7, 8, 9};  // (1, 1, 3, 3)
  Vec dx(1);                                   // (1, 1, 1, 1)
  maxpool2d_backward(x.data(), dy.data(), dx.data(), s);
  EXPECT_EQ(dx, (Vec{5}));
}

// ---- Global average pooling ----

TEST(GlobalAvgPoolGradCheck, Input) {
  const i64 N = 2, C = 3, H = 3, W = 4;
  std::mt19937 rng(kSeed);
  Vec x = uniform(rng, N * C * H * W);  // (N, C, H, W)
  const Vec r = uniform(rng, N * C);    // (N, C, 1, 1) upstream gradient
  auto loss = [&] {
    Vec y(N * C);  // (N, C, 1, 1)
    global_avgpool_forward(x.data(), y.data(), N, C, H, W);
    return dot(y, r);
  };
  Vec dx(x.size());
  global_avgpool_backward(r.data(), dx.data(), N, C, H, W);
  expect_gradient_matches("x", x, dx, loss, rng);
}

TEST(GlobalAvgPoolForward, HandComputed) {
  const Vec x = {1, 2, 3, 4, 5, 6, -2, -2, -2, 0, 0, 12};  // (1, 2, 2, 3)
  Vec y(2);                                                // (1, 2, 1, 1)
  global_avgpool_forward(x.data(), y.data(), 1, 2, 2, 3);
  EXPECT_EQ(y, (Vec{3.5, 1}));
}

// ---- BatchNorm ----

TEST(BatchNormGradCheck, InputGammaAndBeta) {
  const i64 N = 3, C = 2, HW = 5;
  const double eps = 1e-5;
  std::mt19937 rng(kSeed);
  Vec x = uniform(rng, N * C * HW, -2, 3);  // (N, C, HW)
  Vec gamma = uniform(rng, C, 0.5, 1.5);    // (C)
  Vec beta = uniform(rng, C);               // (C)
  const Vec r = uniform(rng, N * C * HW);   // (N, C, HW) upstream gradient
  Vec mean(C), var(C);                      // (C) each
  auto loss = [&] {
    Vec y(N * C * HW), unused_mean(C), unused_var(C);  // (N, C, HW), (C), (C)
    batchnorm_forward_train<double>(x.data(), gamma.data(), beta.data(), y.data(), unused_mean.data(),
                                    unused_var.data(), nullptr, nullptr, N, C, HW, eps, 0.1);
    return dot(y, r);
  };
  Vec y(N * C * HW);  // (N, C, HW)
  batchnorm_forward_train<double>(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), var.data(), nullptr,
                                  nullptr, N, C, HW, eps, 0.1);
  Vec dx(x.size()), dgamma(C), dbeta(C);
  batchnorm_backward(x.data(), gamma.data(), mean.data(), var.data(), r.data(), dx.data(), dgamma.data(), dbeta.data(),
                     N, C, HW, eps);
  expect_gradient_matches("x", x, dx, loss, rng);
  expect_gradient_matches("gamma", gamma, dgamma, loss, rng);
  expect_gradient_matches("beta", beta, dbeta, loss, rng);
}

TEST(BatchNormForward, EachChannelHasMeanZeroVarianceOne) {
  const i64 N = 4, C = 3, HW = 6;
  std::mt19937 rng(kSeed);
  // A different scale and shift per channel, so that normalising with the wrong channel's
  // statistics shows.
  Vec x = uniform(rng, N * C * HW);  // (N, C, HW)
  for (i64 n = 0; n < N; ++n)
    for (i64 c = 0; c < C; ++c)
      for (i64 p = 0; p < HW; ++p) x[(n * C + c) * HW + p] = 3.0 * (c + 1) * x[(n * C + c) * HW + p] + 10.0 * c;
  const Vec gamma(C, 1.0), beta(C, 0.0);  // (C) each
  Vec y(x.size()), mean(C), var(C);       // (N, C, HW), (C), (C)
  batchnorm_forward_train<double>(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), var.data(), nullptr,
                                  nullptr, N, C, HW, 1e-5, 0.1);
  for (i64 c = 0; c < C; ++c) {
    double sum = 0.0, sq = 0.0;
    for (i64 n = 0; n < N; ++n)
      for (i64 p = 0; p < HW; ++p) sum += y[(n * C + c) * HW + p];
    const double y_mean = sum / double(N * HW);
    for (i64 n = 0; n < N; ++n)
      for (i64 p = 0; p < HW; ++p) sq += std::pow(y[(n * C + c) * HW + p] - y_mean, 2);
    EXPECT_NEAR(y_mean, 0.0, 1e-12) << "channel " << c;
    // eps = 1e-5 against a variance of order 1 shifts the output variance by about 1e-5.
    EXPECT_NEAR(sq / double(N * HW), 1.0, 1e-4) << "channel " << c;
  }
}

TEST(BatchNormForward, HandComputedStatisticsAndRunningUpdate) {
  const i64 N = 2, C = 2, HW = 2;
  // Channel 0 holds 1, 2, 3, 4 and channel 1 holds 10, 20, 30, 40, interleaved as (N, C, HW).
  const Vec x = {1, 2, 10, 20, 3, 4, 30, 40};         // (N, C, HW)
  const Vec gamma = {1, 2}, beta = {0, -1};           // (C) each
  Vec y(8), mean(2), var(2);                          // (N, C, HW), (C), (C)
  Vec running_mean = {0.5, 0}, running_var = {2, 1};  // (C) each
  const double eps = 1e-5, momentum = 0.1;
  batchnorm_forward_train<double>(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), var.data(),
                                  running_mean.data(), running_var.data(), N, C, HW, eps, momentum);
  EXPECT_NEAR(mean[0], 2.5, kHandTol);
  EXPECT_NEAR(mean[1], 25, kHandTol);
  EXPECT_NEAR(var[0], 1.25, kHandTol);  // biased: (2.25 + 0.25 + 0.25 + 2.25) / 4
  EXPECT_NEAR(var[1], 125, kHandTol);
  // Unbiased variances are 5 / 3 and 500 / 3.
  EXPECT_NEAR(running_mean[0], 0.9 * 0.5 + 0.1 * 2.5, kHandTol);
  EXPECT_NEAR(running_mean[1], 0.1 * 25, kHandTol);
  EXPECT_NEAR(running_var[0], 0.9 * 2 + 0.1 * 5.0 / 3.0, kHandTol);
  EXPECT_NEAR(running_var[1], 0.9 * 1 + 0.1 * 500.0 / 3.0, kHandTol);
  EXPECT_NEAR(y[0], (1 - 2.5) / std::sqrt(1.25 + eps), kHandTol);
  EXPECT_NEAR(y[3], 2 * (20 - 25) / std::sqrt(125 + eps) - 1, kHandTol);
}

// With one value per channel the batch variance is 0 and has no unbiased form: the running
// variance decays towards the biased 0 rather than taking 0 / 0.
TEST(BatchNormForward, OneValuePerChannelKeepsTheRunningVarianceFinite) {
  const Vec x = {5, -3};                            // (N=1, C=2, HW=1)
  const Vec gamma = {2, 3}, beta = {0.5, -1};       // (C) each
  Vec y(2), mean(2), var(2);                        // (N, C, HW), (C), (C)
  Vec running_mean = {1, 1}, running_var = {2, 4};  // (C) each
  batchnorm_forward_train<double>(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), var.data(),
                                  running_mean.data(), running_var.data(), 1, 2, 1, 1e-5, 0.1);
  EXPECT_EQ(y, beta);  // x - mean = 0
  EXPECT_EQ(var, (Vec{0, 0}));
  EXPECT_NEAR(running_mean[0], 0.9 * 1 + 0.1 * 5, kHandTol);
  EXPECT_NEAR(running_mean[1], 0.9 * 1 - 0.1 * 3, kHandTol);
  EXPECT_NEAR(running_var[0], 0.9 * 2, kHandTol);
  EXPECT_NEAR(running_var[1], 0.9 * 4, kHandTol);
}

TEST(BatchNormForward, InferenceUsesRunningStatistics) {
  const Vec x = {3, -1, 0, 5};                                // (N=2, C=2, HW=1)
  const Vec gamma = {2, 1}, beta = {0.5, 0};                  // (C) each
  const Vec running_mean = {1, -1}, running_var = {4, 0.25};  // (C) each
  Vec y(4);                                                   // (N, C, HW)
  batchnorm_forward_infer(x.data(), gamma.data(), beta.data(), running_mean.data(), running_var.data(), y.data(), 2, 2,
                          1, 0.0);
  // Channel 0: 2 (x - 1) / 2 + 0.5; channel 1: (x + 1) / 0.5.
  EXPECT_EQ(y, (Vec{2.5, 0, -0.5, 12}));
}

// Inference adds eps to the running variance as training adds it to the batch's: with
// variance 0.75 and eps 0.25 the scale is exactly 1.
TEST(BatchNormForward, InferenceAddsEpsToTheRunningVariance) {
  const Vec x = {3, -1};                               // (N=1, C=1, HW=2)
  const Vec gamma = {1}, beta = {0};                   // (C) each
  const Vec running_mean = {1}, running_var = {0.75};  // (C) each
  Vec y(2);                                            // (N, C, HW)
  batchnorm_forward_infer(x.data(), gamma.data(), beta.data(), running_mean.data(), running_var.data(), y.data(), 1, 1,
                          2, 0.25);
  EXPECT_EQ(y, (Vec{2, -2}));
}

// ---- Activations and add ----

TEST(ReluGradCheck, Input) {
  const i64 n = 30;
  std::mt19937 rng(kSeed);
  Vec x = away_from_zero(rng, n);  // (n)
  const Vec r = uniform(rng, n);   // (n) upstream gradient
  auto loss = [&] {
    Vec y(n);  // (n)
    relu_forward(x.data(), y.data(), n);
    return dot(y, r);
  };
  Vec y(n), dx(n);
  relu_forward(x.data(), y.data(), n);
  relu_backward(y.data(), r.data(), dx.data(), n);
  expect_gradient_matches("x", x, dx, loss, rng);
}

TEST(ReluForward, HandComputed) {
  const Vec x = {-1, 0, 2.5};
  Vec y(3), dx(3);
  relu_forward(x.data(), y.data(), 3);
  EXPECT_EQ(y, (Vec{0, 0, 2.5}));
  const Vec dy = {7, 8, 9};
  relu_backward(y.data(), dy.data(), dx.data(), 3);
  EXPECT_EQ(dx, (Vec{0, 0, 9}));
}

TEST(SigmoidGradCheck, Input) {
  const i64 n = 30;
  std::mt19937 rng(kSeed);
  Vec x = uniform(rng, n, -3, 3);  // (n)
  const Vec r = uniform(rng, n);   // (n) upstream gradient
  auto loss = [&] {
    Vec y(n);  // (n)
    sigmoid_forward(x.data(), y.data(), n);
    return dot(y, r);
  };
  Vec y(n), dx(n);
  sigmoid_forward(x.data(), y.data(), n);
  sigmoid_backward(y.data(), r.data(), dx.data(), n);
  expect_gradient_matches("x", x, dx, loss, rng);
}

TEST(SigmoidForward, HandComputed) {
  const Vec x = {0, std::log(3.0)};  // sigmoid(log 3) = 3 / (3 + 1)
  Vec y(2);
  sigmoid_forward(x.data(), y.data(), 2);
  EXPECT_NEAR(y[0], 0.5, kHandTol);
  EXPECT_NEAR(y[1], 0.75, kHandTol);
}

TEST(AddGradCheck, BothInputs) {
  const i64 n = 12;
  std::mt19937 rng(kSeed);
  Vec a = uniform(rng, n), b = uniform(rng, n);  // (n) each
  const Vec r = uniform(rng, n);                 // (n) upstream gradient
  auto loss = [&] {
    Vec y(n);  // (n)
    add_forward(a.data(), b.data(), y.data(), n);
    return dot(y, r);
  };
  Vec da(n), db(n);
  add_backward(r.data(), da.data(), db.data(), n);
  expect_gradient_matches("a", a, da, loss, rng);
  expect_gradient_matches("b", b, db, loss, rng);
}

// ---- LSTM ----

TEST(LstmGradCheck, InputAndAllWeights) {
  const LstmShape s{.T = 4, .N = 2, .I = 3, .Hd = 3};
  const i64 G = 4;
  std::mt19937 rng(kSeed);
  Vec x = uniform(rng, s.T * s.N * s.I);              // (T, N, I)
  Vec wx = uniform(rng, s.I * G * s.Hd, -0.7, 0.7);   // (I, G, Hd)
  Vec wh = uniform(rng, s.Hd * G * s.Hd, -0.7, 0.7);  // (Hd, G, Hd)
  Vec bias = uniform(rng, G * s.Hd, -0.5, 0.5);       // (G, Hd)
  const Vec r = uniform(rng, s.T * s.N * s.Hd);       // (T, N, Hd) upstream gradient
  auto loss = [&] {
    Vec h(r.size());  // (T, N, Hd)
    LstmCache<double> cache;
    lstm_forward(x.data(), wx.data(), wh.data(), bias.data(), h.data(), cache, s);
    return dot(h, r);
  };
  Vec h(r.size());  // (T, N, Hd)
  LstmCache<double> cache;
  lstm_forward(x.data(), wx.data(), wh.data(), bias.data(), h.data(), cache, s);
  Vec dx(x.size()), dwx(wx.size()), dwh(wh.size()), dbias(bias.size());
  lstm_backward<double>(x.data(), wx.data(), wh.data(), h.data(), cache, r.data(), dx.data(), dwx.data(), dwh.data(),
                        dbias.data(), s);
  expect_gradient_matches("x", x, dx, loss, rng);
  expect_gradient_matches("wx", wx, dwx, loss, rng);
  expect_gradient_matches("wh", wh, dwh, loss, rng);
  expect_gradient_matches("bias", bias, dbias, loss, rng);

  // dx is optional and leaves the weight gradients unchanged.
  Vec dwx_alone(wx.size()), dwh_alone(wh.size()), dbias_alone(bias.size());
  lstm_backward<double>(x.data(), wx.data(), wh.data(), h.data(), cache, r.data(), nullptr, dwx_alone.data(),
                        dwh_alone.data(), dbias_alone.data(), s);
  EXPECT_EQ(dwx, dwx_alone);
  EXPECT_EQ(dwh, dwh_alone);
  EXPECT_EQ(dbias, dbias_alone);
}

TEST(LstmForward, HandComputedSingleStep) {
  const LstmShape s{.T = 1, .N = 1, .I = 1, .Hd = 1};
  const Vec x = {1};                 // (T, N, I)
  const Vec wx = {0.5, -0.5, 1, 2};  // (I, G, Hd): gates i, f, c~, o
  const Vec wh = {9, 9, 9, 9};       // (Hd, G, Hd): unused, the initial state is zero
  const Vec bias = {0, 0.5, 0, -1};  // (G, Hd)
  Vec h(1);                          // (T, N, Hd)
  LstmCache<double> cache;
  lstm_forward(x.data(), wx.data(), wh.data(), bias.data(), h.data(), cache, s);
  // Pre-activations 0.5, 0, 1, 1.
  const double i = 0.6224593312018546;        // sigmoid(0.5)
  const double f = 0.5;                       // sigmoid(0)
  const double c_tilde = 0.7615941559557649;  // tanh(1)
  const double o = 0.7310585786300049;        // sigmoid(1)
  ASSERT_EQ(cache.gates.size(), 4u);
  EXPECT_NEAR(cache.gates[0], i, kHandTol);
  EXPECT_NEAR(cache.gates[1], f, kHandTol);
  EXPECT_NEAR(cache.gates[2], c_tilde, kHandTol);
  EXPECT_NEAR(cache.gates[3], o, kHandTol);
  ASSERT_EQ(cache.c.size(), 1u);
  EXPECT_NEAR(cache.c[0], 0.47406138896346633, kHandTol);  // f * 0 + i * c~
  EXPECT_NEAR(h[0], 0.3227440813830523, kHandTol);         // o * tanh(c)
}

// Two steps, two inputs and two hidden units, wired so that a transposed wx or wh, or a lost
// cell state, changes the answer.
TEST(LstmForward, HandComputedRecurrence) {
  const LstmShape s{.T = 2, .N = 1, .I = 2, .Hd = 2};
  const i64 G = 4;
  const Vec x = {0, 1, 0, 0};   // (T, N, I): only input 1 at step 0
  Vec wx(s.I * G * s.Hd, 0.0);  // (I, G, Hd): input 1 drives unit 0 only
  const double wx_gates[] = {0.5, 0, 1, 1};
  for (i64 g = 0; g < G; ++g) wx[(1 * G + g) * s.Hd + 0] = wx_gates[g];
  Vec wh(s.Hd * G * s.Hd, 0.0);  // (Hd, G, Hd): h of unit 0 drives unit 1 only
  const double wh_gates[] = {1, 2, 3, -1};
  for (i64 g = 0; g < G; ++g) wh[(0 * G + g) * s.Hd + 1] = wh_gates[g];
  const Vec bias(G * s.Hd, 0.0);  // (G, Hd)
  Vec h(4);                       // (T, N, Hd)
  LstmCache<double> cache;
  lstm_forward(x.data(), wx.data(), wh.data(), bias.data(), h.data(), cache, s);

  // Step 0, unit 0: pre-activations 0.5, 0, 1, 1 as in the single-step case.
  const double c00 = 0.47406138896346633, h00 = 0.3227440813830523;
  // Step 0, unit 1: all pre-activations 0, so c~ = 0 and c = h = 0.
  EXPECT_NEAR(cache.c[0], c00, kHandTol);
  EXPECT_NEAR(h[0], h00, kHandTol);
  EXPECT_EQ(cache.c[1], 0.0);
  EXPECT_EQ(h[1], 0.0);
  // Step 1, unit 0: pre-activations 0, so i = f = o = 0.5 and c~ = 0: c = c00 / 2 is carried.
  EXPECT_NEAR(cache.c[2], 0.23703069448173317, kHandTol);
  EXPECT_NEAR(h[2], 0.1163445811097927, kHandTol);  // 0.5 tanh(c00 / 2)
  // Step 1, unit 1: pre-activations h00 * (1, 2, 3, -1);
  // c = sigmoid(h00) tanh(3 h00), h = sigmoid(-h00) tanh(c).
  EXPECT_NEAR(cache.c[3], 0.4337919904263665, kHandTol);
  EXPECT_NEAR(h[3], 0.1715668065774343, kHandTol);
}

// ---- Losses ----

TEST(SoftmaxCrossEntropyGradCheck, Logits) {
  const i64 N = 4, K = 5;
  std::mt19937 rng(kSeed);
  Vec logits = uniform(rng, N * K, -2, 2);  // (N, K)
  std::vector<std::int32_t> labels(N);      // (N)
  std::uniform_int_distribution<std::int32_t> label_dist(0, K - 1);
  for (auto& label : labels) label = label_dist(rng);
  auto loss = [&] { return softmax_cross_entropy_forward(logits.data(), labels.data(), N, K); };
  Vec dlogits(logits.size());
  softmax_cross_entropy_backward(logits.data(), labels.data(), dlogits.data(), N, K);
  expect_gradient_matches("logits", logits, dlogits, loss, rng);
}

TEST(SoftmaxCrossEntropy, HandComputed) {
  const Vec logits = {0, 0, 0, 1, 2, 3};            // (N=2, K=3)
  const std::vector<std::int32_t> labels = {1, 2};  // (N)
  // Row 0: -log(1/3) = log 3. Row 1: log(e + e^2 + e^3) - 3 = log(1 + e^-1 + e^-2).
  const double row0 = 1.0986122886681098, row1 = 0.40760596444438013;
  EXPECT_NEAR(softmax_cross_entropy_forward(logits.data(), labels.data(), 2, 3), (row0 + row1) / 2, kHandTol);

  Vec dlogits(6);  // (N, K)
  softmax_cross_entropy_backward(logits.data(), labels.data(), dlogits.data(), 2, 3);
  const double sum = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  const Vec expected = {1.0 / 6,
                        (1.0 / 3 - 1) / 2,
                        1.0 / 6,
                        std::exp(1.0) / sum / 2,
                        std::exp(2.0) / sum / 2,
                        (std::exp(3.0) / sum - 1) / 2};
  for (std::size_t e = 0; e < expected.size(); ++e) EXPECT_NEAR(dlogits[e], expected[e], kHandTol) << "element " << e;
}

// The shift by the row's largest logit finds it wherever it is: each row's 1000 is at another
// position, so a shift that missed it would overflow exp() to inf, or give log(0).
TEST(SoftmaxCrossEntropy, TheLargestLogitIsFoundAnywhereInItsRow) {
  // (N=3, K=3): each row's largest at another position, each label 2000 below it
  const Vec logits = {1000, -1000, -1000, -1000, 1000, -1000, -1000, -1000, 1000};
  const std::vector<std::int32_t> labels = {1, 2, 0};  // (N)
  EXPECT_NEAR(softmax_cross_entropy_forward(logits.data(), labels.data(), 3, 3), 2000.0, 1e-9);
  Vec dlogits(9);  // (N, K): softmax is one-hot on the largest (exp(-2000) is 0)
  softmax_cross_entropy_backward(logits.data(), labels.data(), dlogits.data(), 3, 3);
  const double third = 1.0 / 3;
  EXPECT_EQ(dlogits, (Vec{third, -third, 0, 0, third, -third, -third, 0, third}));
}

TEST(MseGradCheck, Prediction) {
  const i64 n = 10;
  std::mt19937 rng(kSeed);
  Vec pred = uniform(rng, n);          // (n)
  const Vec target = uniform(rng, n);  // (n)
  auto loss = [&] { return mse_forward(pred.data(), target.data(), n); };
  Vec dpred(n);
  mse_backward(pred.data(), target.data(), dpred.data(), n);
  expect_gradient_matches("pred", pred, dpred, loss, rng);
}

TEST(Mse, HandComputed) {
  const Vec pred = {1, 2, 3}, target = {1, 0, 0};
  EXPECT_NEAR(mse_forward(pred.data(), target.data(), 3), 13.0 / 3, kHandTol);  // (0 + 4 + 9) / 3
  Vec dpred(3);
  mse_backward(pred.data(), target.data(), dpred.data(), 3);
  EXPECT_NEAR(dpred[0], 0.0, kHandTol);
  EXPECT_NEAR(dpred[1], 4.0 / 3, kHandTol);
  EXPECT_NEAR(dpred[2], 2.0, kHandTol);
}

// ---- Extreme inputs must not produce inf or NaN ----

TEST(NonFinite, ExtremeInputsStayFinite) {
  const Vec logits = {1000, 0, -1000, -1000, 0, 1000};  // (N=2, K=3)
  const std::vector<std::int32_t> labels = {2, 2};
  const double ce = softmax_cross_entropy_forward(logits.data(), labels.data(), 2, 3);
  EXPECT_TRUE(std::isfinite(ce)) << ce;
  EXPECT_NEAR(ce, 1000.0, 1e-9);  // row 0 costs 2000, row 1 about 0
  Vec dlogits(6);
  softmax_cross_entropy_backward(logits.data(), labels.data(), dlogits.data(), 2, 3);
  EXPECT_TRUE(all_finite(dlogits));

  const Vec x = {-1000, 1000};
  Vec y(2), dx(2);
  sigmoid_forward(x.data(), y.data(), 2);
  EXPECT_EQ(y, (Vec{0, 1}));
  const Vec ones = {1, 1};
  sigmoid_backward(y.data(), ones.data(), dx.data(), 2);
  EXPECT_TRUE(all_finite(dx));

  // A constant channel has zero variance: eps keeps the normalisation finite.
  const Vec constant = {4, 4, 4, 4};  // (N=2, C=1, HW=2)
  const Vec gamma = {1}, beta = {0.5};
  Vec bn_y(4), mean(1), var(1), bn_dx(4), dgamma(1), dbeta(1);
  batchnorm_forward_train<double>(constant.data(), gamma.data(), beta.data(), bn_y.data(), mean.data(), var.data(),
                                  nullptr, nullptr, 2, 1, 2, 1e-5, 0.1);
  EXPECT_EQ(bn_y, (Vec{0.5, 0.5, 0.5, 0.5}));
  const Vec dy = {1, -2, 3, 0.5};
  batchnorm_backward(constant.data(), gamma.data(), mean.data(), var.data(), dy.data(), bn_dx.data(), dgamma.data(),
                     dbeta.data(), 2, 1, 2, 1e-5);
  EXPECT_TRUE(all_finite(bn_dx));
}

// ---- Optimizers ----

TEST(SgdMomentum, HandComputedTwoSteps) {
  // lr 0.1, momentum 0.9, weight decay 0.01.
  Vec param = {1, -2}, velocity = {0, 0};
  const Vec grad1 = {0.5, -1}, grad2 = {0.5, 0.25};
  sgd_momentum_update(param.data(), grad1.data(), velocity.data(), 2, 0.1, 0.9, 0.01);
  // g + wd p = 0.51 and -1.02 become the velocity; p -= 0.1 v.
  EXPECT_NEAR(velocity[0], 0.51, kHandTol);
  EXPECT_NEAR(velocity[1], -1.02, kHandTol);
  EXPECT_NEAR(param[0], 0.949, kHandTol);
  EXPECT_NEAR(param[1], -1.898, kHandTol);
  sgd_momentum_update(param.data(), grad2.data(), velocity.data(), 2, 0.1, 0.9, 0.01);
  // v = 0.9 * 0.51 + (0.5 + 0.00949) = 0.96849; v = 0.9 * -1.02 + (0.25 - 0.01898) = -0.68698.
  EXPECT_NEAR(velocity[0], 0.96849, kHandTol);
  EXPECT_NEAR(velocity[1], -0.68698, kHandTol);
  EXPECT_NEAR(param[0], 0.852151, kHandTol);
  EXPECT_NEAR(param[1], -1.829302, kHandTol);

  // The float instantiation follows the same arithmetic.
  std::vector<float> param_f = {1, -2}, velocity_f = {0, 0};
  const std::vector<float> grad1_f = {0.5f, -1}, grad2_f = {0.5f, 0.25f};
  sgd_momentum_update(param_f.data(), grad1_f.data(), velocity_f.data(), 2, 0.1, 0.9, 0.01);
  sgd_momentum_update(param_f.data(), grad2_f.data(), velocity_f.data(), 2, 0.1, 0.9, 0.01);
  EXPECT_NEAR(param_f[0], 0.852151, 1e-6);
  EXPECT_NEAR(param_f[1], -1.829302, 1e-6);
}

TEST(Adam, HandComputedTwoSteps) {
  // lr 0.01, beta1 0.9, beta2 0.999, eps 1e-8. Element 1 never sees a gradient.
  const double lr = 0.01, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  Vec param = {1, 3}, m = {0, 0}, v = {0, 0};
  const Vec grad1 = {0.5, 0}, grad2 = {-0.25, 0};
  adam_update(param.data(), grad1.data(), m.data(), v.data(), 2, lr, beta1, beta2, eps, 1);
  // m = 0.05, v = 0.001 * 0.25; corrected: 0.05 / 0.1 = 0.5 and 0.00025 / 0.001 = 0.25.
  EXPECT_NEAR(m[0], 0.05, kHandTol);
  EXPECT_NEAR(v[0], 0.00025, kHandTol);
  const double after_step1 = 1 - 0.01 * 0.5 / (0.5 + 1e-8);
  EXPECT_NEAR(param[0], after_step1, kHandTol);
  adam_update(param.data(), grad2.data(), m.data(), v.data(), 2, lr, beta1, beta2, eps, 2);
  // m = 0.045 - 0.025 = 0.02; v = 0.999 * 0.00025 + 0.001 * 0.0625 = 0.00031225;
  // corrections 1 - 0.81 = 0.19 and 1 - 0.998001 = 0.001999.
  EXPECT_NEAR(m[0], 0.02, kHandTol);
  EXPECT_NEAR(v[0], 0.00031225, kHandTol);
  EXPECT_NEAR(param[0], after_step1 - 0.01 * (0.02 / 0.19) / (std::sqrt(0.00031225 / 0.001999) + 1e-8), kHandTol);
  EXPECT_EQ(param[1], 3.0);  // 0 / (0 + eps) leaves it alone
  EXPECT_EQ(m[1], 0.0);
  EXPECT_EQ(v[1], 0.0);
}

// ---- Every backward overwrites what it writes (ops.hpp: "=", never "+=") ----

// Runs `backward` twice, into its gradient buffers filled first with zeros and then with NaN, and
// expects the same numbers from both: a backward that adds to what it finds, or leaves alone an
// element it should zero, gives NaN the second time. Callers of the reference pass fresh zeros,
// so nothing else sees either mistake.
void expect_overwrites(const std::string& op, const std::vector<Vec*>& gradients,
                       const std::function<void()>& backward) {
  SCOPED_TRACE(op);
  for (Vec* g : gradients) std::fill(g->begin(), g->end(), 0.0);
  backward();
  std::vector<Vec> from_zeros;
  for (const Vec* g : gradients) from_zeros.push_back(*g);
  for (Vec* g : gradients) std::fill(g->begin(), g->end(), std::numeric_limits<double>::quiet_NaN());
  backward();
  for (std::size_t k = 0; k < gradients.size(); ++k) {
    EXPECT_TRUE(all_finite(from_zeros[k])) << "gradient " << k;
    EXPECT_TRUE(std::any_of(from_zeros[k].begin(), from_zeros[k].end(), [](double e) { return e != 0.0; }))
        << "gradient " << k << " is all zeros";
    EXPECT_EQ(*gradients[k], from_zeros[k]) << "gradient " << k << " depends on what the buffer held";
  }
}

TEST(BackwardOverwrites, GradientBuffersFilledWithNaNGetTheSameGradients) {
  std::mt19937 rng(kSeed);

  const i64 N = 2, I = 3, O = 2;
  const Vec lx = uniform(rng, N * I), lw = uniform(rng, O * I), ldy = uniform(rng, N * O);
  Vec ldx(lx.size()), ldw(lw.size()), ldb(O);
  expect_overwrites("linear", {&ldx, &ldw, &ldb}, [&] {
    linear_backward(lx.data(), lw.data(), ldy.data(), ldx.data(), ldw.data(), ldb.data(), N, I, O);
  });

  // Stride 2 without padding leaves the last row and column read by no window: their dx is 0.
  const ConvShape cs{.N = 2, .C = 2, .H = 6, .W = 6, .O = 3, .kernel = 3, .stride = 2, .pad = 0};
  const Vec cx = uniform(rng, cs.N * cs.C * cs.H * cs.W), cw = uniform(rng, cs.O * cs.C * 9);
  const Vec cdy = uniform(rng, cs.N * cs.O * cs.out_h() * cs.out_w());
  Vec cdx(cx.size()), cdw(cw.size()), cdb(cs.O);
  expect_overwrites("conv2d", {&cdx, &cdw, &cdb},
                    [&] { conv2d_backward(cx.data(), cw.data(), cdy.data(), cdx.data(), cdw.data(), cdb.data(), cs); });

  // Three of every four inputs win no window: their dx is 0.
  const PoolShape ps{.N = 1, .C = 2, .H = 4, .W = 4, .kernel = 2, .stride = 2, .pad = 0};
  const Vec px = distinct(rng, ps.N * ps.C * ps.H * ps.W), pdy = uniform(rng, ps.N * ps.C * 4);
  Vec pdx(px.size());
  expect_overwrites("maxpool2d", {&pdx}, [&] { maxpool2d_backward(px.data(), pdy.data(), pdx.data(), ps); });

  const Vec gdy = uniform(rng, 2 * 3);
  Vec gdx(2 * 3 * 4);
  expect_overwrites("global_avgpool", {&gdx}, [&] { global_avgpool_backward(gdy.data(), gdx.data(), 2, 3, 2, 2); });

  const i64 BN = 2, BC = 2, HW = 3;
  const Vec bx = uniform(rng, BN * BC * HW), gamma = uniform(rng, BC, 0.5, 1.5), beta = uniform(rng, BC);
  const Vec bdy = uniform(rng, bx.size());
  Vec by(bx.size()), mean(BC), var(BC), bdx(bx.size()), dgamma(BC), dbeta(BC);
  batchnorm_forward_train<double>(bx.data(), gamma.data(), beta.data(), by.data(), mean.data(), var.data(), nullptr,
                                  nullptr, BN, BC, HW, 1e-5, 0.1);
  expect_overwrites("batchnorm", {&bdx, &dgamma, &dbeta}, [&] {
    batchnorm_backward(bx.data(), gamma.data(), mean.data(), var.data(), bdy.data(), bdx.data(), dgamma.data(),
                       dbeta.data(), BN, BC, HW, 1e-5);
  });

  const i64 n = 6;
  const Vec ax = away_from_zero(rng, n), ady = uniform(rng, n);
  Vec ay(n), adx(n), adx2(n);
  relu_forward(ax.data(), ay.data(), n);
  expect_overwrites("relu", {&adx}, [&] { relu_backward(ay.data(), ady.data(), adx.data(), n); });
  sigmoid_forward(ax.data(), ay.data(), n);
  expect_overwrites("sigmoid", {&adx}, [&] { sigmoid_backward(ay.data(), ady.data(), adx.data(), n); });
  expect_overwrites("add", {&adx, &adx2}, [&] { add_backward(ady.data(), adx.data(), adx2.data(), n); });

  const LstmShape ls{.T = 3, .N = 2, .I = 2, .Hd = 2};
  const Vec sx = uniform(rng, ls.T * ls.N * ls.I), wx = uniform(rng, ls.I * 4 * ls.Hd);
  const Vec wh = uniform(rng, ls.Hd * 4 * ls.Hd), bias = uniform(rng, 4 * ls.Hd);
  const Vec dh = uniform(rng, ls.T * ls.N * ls.Hd);
  Vec h(dh.size()), sdx(sx.size()), dwx(wx.size()), dwh(wh.size()), dbias(bias.size());
  LstmCache<double> cache;
  lstm_forward(sx.data(), wx.data(), wh.data(), bias.data(), h.data(), cache, ls);
  expect_overwrites("lstm", {&sdx, &dwx, &dwh, &dbias}, [&] {
    lstm_backward<double>(sx.data(), wx.data(), wh.data(), h.data(), cache, dh.data(), sdx.data(), dwx.data(),
                          dwh.data(), dbias.data(), ls);
  });

  const Vec logits = uniform(rng, 2 * 3);
  const std::vector<std::int32_t> labels = {2, 0};
  Vec dlogits(logits.size());
  expect_overwrites("softmax_cross_entropy", {&dlogits},
                    [&] { softmax_cross_entropy_backward(logits.data(), labels.data(), dlogits.data(), 2, 3); });
  const Vec pred = uniform(rng, n), target = uniform(rng, n);
  Vec dpred(n);
  expect_overwrites("mse", {&dpred}, [&] { mse_backward(pred.data(), target.data(), dpred.data(), n); });
}

// ---- The float instantiations agree with the double ones ----

std::vector<float> to_float(const Vec& v) { return std::vector<float>(v.begin(), v.end()); }

void expect_close_to(const std::vector<float>& f, const Vec& d, double tol) {
  ASSERT_EQ(f.size(), d.size());
  for (std::size_t e = 0; e < d.size(); ++e)
    EXPECT_NEAR(double(f[e]), d[e], tol * (1 + std::abs(d[e]))) << "element " << e;
}

TEST(FloatInstantiation, ConvAndLstmMatchDouble) {
  std::mt19937 rng(kSeed);
  const ConvShape s{.N = 2, .C = 3, .H = 8, .W = 8, .O = 4, .kernel = 3, .stride = 2, .pad = 1};
  const Vec x = uniform(rng, s.N * s.C * s.H * s.W), w = uniform(rng, s.O * s.C * 9);
  const Vec b = uniform(rng, s.O), dy = uniform(rng, s.N * s.O * s.out_h() * s.out_w());
  Vec y(dy.size()), dx(x.size()), dw(w.size()), db(b.size());
  conv2d_forward(x.data(), w.data(), b.data(), y.data(), s);
  conv2d_backward(x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data(), s);
  const auto xf = to_float(x), wf = to_float(w), bf = to_float(b), dyf = to_float(dy);
  std::vector<float> yf(y.size()), dxf(dx.size()), dwf(dw.size()), dbf(db.size());
  conv2d_forward(xf.data(), wf.data(), bf.data(), yf.data(), s);
  conv2d_backward(xf.data(), wf.data(), dyf.data(), dxf.data(), dwf.data(), dbf.data(), s);
  expect_close_to(yf, y, 1e-5);
  expect_close_to(dxf, dx, 1e-5);
  expect_close_to(dwf, dw, 1e-5);
  expect_close_to(dbf, db, 1e-5);

  const LstmShape ls{.T = 3, .N = 2, .I = 3, .Hd = 2};
  const Vec lx = uniform(rng, ls.T * ls.N * ls.I), wx = uniform(rng, ls.I * 4 * ls.Hd);
  const Vec wh = uniform(rng, ls.Hd * 4 * ls.Hd), bias = uniform(rng, 4 * ls.Hd);
  Vec h(ls.T * ls.N * ls.Hd);
  LstmCache<double> cache;
  lstm_forward(lx.data(), wx.data(), wh.data(), bias.data(), h.data(), cache, ls);
  const auto lxf = to_float(lx), wxf = to_float(wx), whf = to_float(wh), biasf = to_float(bias);
  std::vector<float> hf(h.size());
  LstmCache<float> cache_f;
  lstm_forward(lxf.data(), wxf.data(), whf.data(), biasf.data(), hf.data(), cache_f, ls);
  expect_close_to(hf, h, 1e-5);
}

}  // namespace
}  // namespace tb::ref
