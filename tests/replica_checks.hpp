// What the data-parallel tests (test_parallel.cpp, test_mpi.cpp, test_cuda.cpp) share: one
// network on the whole batch starts from a replica's weights, and every parameter is compared
// after training; a run whose replica fails (its batches turned NaN) stops with that replica's
// own failure.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/dataset.hpp"
#include "engine/core/error.hpp"
#include "engine/core/network.hpp"
#include "engine/core/spec.hpp"
#include "engine/parallel/replica.hpp"
#include "engine/parallel/replica_run.hpp"

namespace tb::testing_support {

// f(node, index, "node.parameter") for every canonical parameter of the model.
inline void for_each_param(const ModelSpec& spec, i64 batch,
                           const std::function<void(int, int, const std::string&)>& f) {
  const auto shapes = infer_shapes(spec, batch);
  for (std::size_t i = 1; i < spec.nodes.size(); ++i) {
    const auto params = node_params(spec.nodes[i].spec, shapes[spec.nodes[i].inputs[0]]);
    for (std::size_t k = 0; k < params.size(); ++k) f(int(i), int(k), spec.nodes[i].name + "." + params[k].name);
  }
}

inline double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    diff += (double(a[k]) - b[k]) * (double(a[k]) - b[k]);
    norm += double(b[k]) * b[k];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

inline void copy_params(const ModelSpec& spec, i64 batch, const Network& from, Network& to) {
  for_each_param(spec, batch,
                 [&](int node, int k, const std::string&) { to.write_param(node, k, from.read_param(node, k)); });
}

// Every parameter of `replica` within `tol` (relative L2) of the whole-batch network's.
inline void expect_params_match(const ModelSpec& spec, i64 batch, const Network& replica, const Network& whole,
                                double tol, const std::string& who) {
  for_each_param(spec, batch, [&](int node, int k, const std::string& name) {
    EXPECT_LT(relative_difference(replica.read_param(node, k), whole.read_param(node, k)), tol) << who << " " << name;
  });
}

// The parameters after a replica's steps (or one GPU step) against the reference's (the CPU's,
// or the large batch's), relative to the size of the reference's steps: the parameters
// themselves barely move in a step, so comparing them directly would pass without any update.
// One ulp of the parameter is forgiven per element, since p - lr v rounds on each side.
inline ::testing::AssertionResult same_update(const std::vector<float>& after, const std::vector<float>& reference,
                                              const std::vector<float>& before, double tol,
                                              double max_zero_fraction = 0.5) {
  if (after.size() != reference.size() || reference.size() != before.size() || before.empty())
    return ::testing::AssertionFailure() << "sizes " << after.size() << ", " << reference.size() << ", "
                                         << before.size();
  std::size_t unmoved = 0;
  double step2 = 0, err2 = 0;
  for (std::size_t i = 0; i < before.size(); ++i) {
    if (!std::isfinite(after[i]) || !std::isfinite(reference[i]))
      return ::testing::AssertionFailure() << "non-finite parameter at " << i;
    const double step = double(reference[i]) - double(before[i]);
    unmoved += step == 0.0;
    step2 += step * step;
    const float magnitude = std::abs(reference[i]);
    const double ulp = double(std::nextafter(magnitude, std::numeric_limits<float>::infinity()) - magnitude);
    const double err = std::max(0.0, std::abs(double(after[i]) - double(reference[i])) - ulp);
    err2 += err * err;
  }
  if (double(unmoved) > max_zero_fraction * double(before.size()))
    return ::testing::AssertionFailure() << unmoved << " of " << before.size()
                                         << " parameters did not move in the reference";
  const double rel = std::sqrt(err2 / step2);
  if (rel > tol)
    return ::testing::AssertionFailure() << "the step differs from the reference's by " << rel << " of its size";
  return ::testing::AssertionSuccess();
}

// How far each precision's replicas may drift from the large batch, relative to the size of the
// large batch's own steps: fp32 and tf32 differ by summation order only (the same TF32 inputs on
// both sides); fp16 and bf16 average 16-bit gradients, each rounded to 2^-11 and 2^-8 of itself,
// which momentum carries over 4 steps. A sum in place of a mean is off by 100%.
inline double large_batch_tolerance(Precision p) {
  switch (p) {
    case Precision::FP32:
    case Precision::TF32:
      return 1e-3;
    case Precision::FP16:
      return 2e-2;
    case Precision::BF16:
      return 5e-2;
  }
  return 0;
}

// Random batches of a regression model (the LSTM on the sine wave); from batch `poisoned_from` on
// (counted from 1; 0: never) every target is NaN, as a corrupt shard would make it, so that the
// loss is NaN whatever the activations do with a NaN (a ReLU may drop it).
class RandomBatches final : public Dataset {
 public:
  RandomBatches(const ModelSpec& spec, i64 batch, unsigned seed, i64 poisoned_from)
      : rng_(seed), poisoned_from_(poisoned_from) {
    TB_CHECK(spec.task == Task::Regression, "RandomBatches makes regression targets");
    const auto shapes = infer_shapes(spec, batch);
    batch_.batch = batch;
    batch_.input.resize(std::size_t(product(shapes.front())));
    batch_.targets.resize(std::size_t(product(shapes.at(shapes.size() - 2))));  // what the loss compares
  }
  const Batch& next() override {
    std::normal_distribution<float> value(0.0f, 1.0f);
    const bool poisoned = poisoned_from_ > 0 && ++given_ >= poisoned_from_;
    for (float& v : batch_.input) v = value(rng_);
    for (float& v : batch_.targets) v = poisoned ? std::nanf("") : value(rng_);
    return batch_;
  }
  std::string name() const override { return "random"; }
  std::string source() const override { return "synthetic"; }

 private:
  std::mt19937 rng_;
  i64 poisoned_from_, given_ = 0;
  Batch batch_;
};

// The buckets plan_buckets made of `segments`: every segment's elements lie in exactly one bucket
// of its type, within that bucket's nodes; buckets do not overlap; each type's buckets come last
// node first. A gradient in two buckets would be averaged twice and counted twice in the bytes
// the row reports and predicts from.
inline void expect_buckets_cover_each_gradient_once(const std::vector<FlatSegment>& segments,
                                                    const std::vector<parallel::Bucket>& buckets,
                                                    const std::string& who) {
  ASSERT_FALSE(buckets.empty()) << who;
  auto span = [](const void* data, i64 count, ElemType type) {
    const char* begin = static_cast<const char*>(data);
    return std::pair(begin, begin + count * i64(parallel::elem_bytes(type)));
  };
  for (const FlatSegment& s : segments) {
    const auto [begin, end] = span(s.data, s.count, s.type);
    int inside = 0;
    for (const parallel::Bucket& b : buckets) {
      const auto [bb, be] = span(b.data, b.count, b.type);
      if (b.type == s.type && begin >= bb && end <= be) {
        ++inside;
        EXPECT_TRUE(s.node >= b.first_node && s.node <= b.last_node) << who << " node " << s.node;
      }
    }
    EXPECT_EQ(inside, 1) << who << ": node " << s.node << "'s gradients are in " << inside << " buckets";
  }
  for (std::size_t k = 0; k < buckets.size(); ++k)
    for (std::size_t j = 0; j < k; ++j) {
      if (buckets[k].type != buckets[j].type) continue;
      const auto [lo, hi] = span(buckets[k].data, buckets[k].count, buckets[k].type);
      const auto [jlo, jhi] = span(buckets[j].data, buckets[j].count, buckets[j].type);
      EXPECT_TRUE(hi <= jlo || jhi <= lo) << who << ": buckets " << j << " and " << k << " overlap";
      EXPECT_LT(buckets[k].last_node, buckets[j].first_node) << who << ": bucket " << k << " is not in backward order";
    }
}

// Warms `run` up for `steps`, which must stop with the replica's own failure: a tb::CheckFailed
// saying `message` (not another replica's wait, PeerFailed, or its deadline), within `within`.
inline void expect_stops_with(parallel::ReplicaRun& run, i64 steps, const std::string& message,
                              std::chrono::seconds within) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    run.warm_up(steps);
    ADD_FAILURE() << "the run did not stop";
  } catch (const std::exception& e) {
    EXPECT_NE(dynamic_cast<const CheckFailed*>(&e), nullptr) << "not the replica's own failure: " << e.what();
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, within) << "the other replicas waited out their deadline";
}

}  // namespace tb::testing_support
