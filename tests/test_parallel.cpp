// Data parallelism with replicas in threads (engine/parallel): the thread communicator's
// collectives, bucketing, and the data-parallel step against one replica on the whole batch.
// Everything here runs on the CPU backend, so it runs on every machine.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "engine/core/error.hpp"
#include "engine/cpu/network.hpp"
#include "engine/parallel/communicator.hpp"
#include "engine/parallel/replica.hpp"
#include "models/models.hpp"
#include "tests/replica_checks.hpp"

namespace tb {
namespace {

using parallel::Communicator;

// Runs fn(rank) on `n` threads and rethrows the first failure.
void on_threads(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[std::size_t(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

std::vector<std::unique_ptr<Communicator>> thread_comms(int n, double timeout_s = 60) {
  auto group = parallel::make_thread_group(n, timeout_s);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < n; ++r) comms.push_back(parallel::make_thread_comm(group, r));
  return comms;
}

TEST(ThreadComm, AllReduceMeanBroadcastAndMaxAcrossThreeRanks) {
  auto comms = thread_comms(3);
  std::vector<std::vector<float>> data(3);
  on_threads(3, [&](int r) {
    Communicator& c = *comms[std::size_t(r)];
    std::vector<float>& v = data[std::size_t(r)];
    v.assign(1001, 0.0f);  // not a multiple of 3: uneven slices
    for (std::size_t k = 0; k < v.size(); ++k) v[k] = float(r * 1000 + int(k));
    c.start_all_reduce_mean(v.data(), i64(v.size()), ElemType::F32);
    c.wait();
    EXPECT_DOUBLE_EQ(c.max(double(r)), 2.0);
    EXPECT_DOUBLE_EQ(c.min(double(r) + 1), 1.0);
    std::vector<float> b(5, float(r));
    c.broadcast(b.data(), 5, ElemType::F32, 2);
    EXPECT_EQ(b, std::vector<float>(5, 2.0f));
    c.barrier();
  });
  for (const auto& v : data)
    for (std::size_t k = 0; k < v.size(); ++k) ASSERT_FLOAT_EQ(v[k], float(1000 + int(k))) << k;  // mean of r*1000
}

TEST(ThreadComm, AFailedRankStopsTheOthersWithItsReason) {
  auto comms = thread_comms(2);
  std::string message;
  on_threads(2, [&](int r) {
    if (r == 1) {
      comms[1]->abort("out of memory on replica 1");
      return;
    }
    std::vector<float> v(10, 1.0f);
    comms[0]->start_all_reduce_mean(v.data(), 10, ElemType::F32);
    try {
      comms[0]->wait();
    } catch (const Error& e) {
      message = e.what();
    }
  });
  EXPECT_NE(message.find("replica 1 failed: out of memory on replica 1"), std::string::npos) << message;
}

TEST(ThreadComm, ARankThatNeverComesIsATimeoutNotAHang) {
  auto comms = thread_comms(2, /*timeout_s=*/0.3);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(
      {
        try {
          comms[0]->barrier();  // rank 1 never arrives
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("waited"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

std::unique_ptr<cpu::CpuNetwork> cpu_net(const ModelSpec& spec, i64 batch, OptimizerConfig opt) {
  return std::make_unique<cpu::CpuNetwork>(spec, cpu::NetworkConfig{.batch = batch, .optimizer = opt, .seed = 7});
}

TEST(Buckets, CoverEveryGradientExactlyOnceInBackwardOrder) {
  for (const ModelSpec& spec : {models::workload("mlp", "mnist").spec, models::workload("lenet5", "cifar10").spec,
                                models::workload("resnet152", "cifar10").spec}) {
    auto net = cpu_net(spec, 2, OptimizerConfig{});
    const auto segments = net->gradient_segments();
    for (std::size_t bytes : {std::size_t(1), std::size_t(64) << 10, parallel::kDefaultBucketBytes}) {
      const auto buckets = parallel::plan_buckets(segments, bytes);
      ASSERT_FALSE(buckets.empty());
      // Every segment's elements lie in exactly one bucket; buckets do not overlap.
      std::set<int> seen;
      for (const FlatSegment& s : segments) {
        const float* begin = static_cast<const float*>(s.data);
        int inside = 0;
        for (const parallel::Bucket& b : buckets) {
          const float* bb = static_cast<const float*>(b.data);
          if (begin >= bb && begin + s.count <= bb + b.count) {
            ++inside;
            EXPECT_TRUE(s.node >= b.first_node && s.node <= b.last_node) << spec.name;
          }
        }
        EXPECT_EQ(inside, 1) << spec.name << " node " << s.node;
        seen.insert(s.node);
      }
      for (std::size_t k = 1; k < buckets.size(); ++k) {
        EXPECT_LT(buckets[k].last_node, buckets[k - 1].first_node) << "backward order";
        const float* lower = static_cast<const float*>(buckets[k].data);
        EXPECT_LE(lower + buckets[k].count, static_cast<const float*>(buckets[k - 1].data)) << "overlap";
      }
      if (bytes == 1) {
        EXPECT_EQ(buckets.size(), segments.size()) << "one segment per bucket at the smallest size";
      }
      EXPECT_EQ(seen.size(), segments.size());
    }
  }
}

std::vector<float> random_vector(std::mt19937& rng, std::size_t n) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Two replicas, each on half of every batch, against one network on the whole batch: with
// mean losses, the mean of the halves' gradients is the whole batch's gradient, so the weights
// agree after every step up to fp32 summation order (~1e-6 relative per step; 1e-4 after a few
// steps leaves margin, while a missing or unaveraged bucket is off by O(1)).
void expect_halves_match_whole(const ModelSpec& spec, OptimizerConfig opt, i64 batch, int steps,
                               std::size_t bucket_bytes) {
  const Dims in = infer_shapes(spec, batch)[0];
  const i64 sample = product(in) / batch;
  auto whole = cpu_net(spec, batch, opt);
  std::vector<std::unique_ptr<parallel::ReplicaNetwork>> replicas(2);
  auto comms = thread_comms(2);
  on_threads(2, [&](int r) {
    replicas[std::size_t(r)] = std::make_unique<parallel::ReplicaNetwork>(
        cpu_net(spec, batch / 2, opt), std::move(comms[std::size_t(r)]), bucket_bytes);
  });
  // Same start: rank 0's weights were broadcast; the whole-batch network copies them.
  testing_support::copy_params(spec, batch, *replicas[0], *whole);
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> label(0, int(spec.classes) - 1);
  for (int s = 0; s < steps; ++s) {
    std::vector<float> x = random_vector(rng, std::size_t(batch * sample));
    std::vector<std::int32_t> y(static_cast<std::size_t>(batch));
    for (auto& v : y) v = label(rng);
    StepTimes t;
    whole->set_batch(BatchView{x.data(), y.data(), nullptr});
    whole->train_step(t);
    on_threads(2, [&](int r) {
      const i64 half = batch / 2;
      replicas[std::size_t(r)]->set_batch(BatchView{x.data() + r * half * sample, y.data() + r * half, nullptr});
      StepTimes rt;
      replicas[std::size_t(r)]->train_step(rt);
    });
  }
  on_threads(2, [&](int r) { replicas[std::size_t(r)]->check_weights_agree(); });
  testing_support::expect_params_match(spec, batch, *replicas[1], *whole, 1e-4, spec.name);
  const parallel::CommStats& st = replicas[0]->stats();
  EXPECT_EQ(st.steps, steps);
  EXPECT_EQ(st.buckets, i64(replicas[0]->buckets().size()) * steps);
  EXPECT_DOUBLE_EQ(st.bytes / steps, [&] {
    double b = 0;
    for (const auto& bucket : replicas[0]->buckets()) b += double(bucket.count) * 4;
    return b;
  }());
}

TEST(DataParallel, TwoReplicasOnHalfBatchesMatchOneOnTheWholeBatchMlpSgd) {
  OptimizerConfig sgd;
  sgd.lr = 0.05;
  expect_halves_match_whole(models::workload("mlp", "mnist").spec, sgd, 16, 4, std::size_t(256) << 10);
}

TEST(DataParallel, TwoReplicasOnHalfBatchesMatchOneOnTheWholeBatchLenetAdam) {
  OptimizerConfig adam;
  adam.kind = OptimizerConfig::Kind::Adam;
  adam.lr = 1e-3;
  expect_halves_match_whole(models::workload("lenet5", "cifar10").spec, adam, 8, 3,
                            std::size_t(4) << 10);  // several buckets
}

TEST(DataParallel, ReplicasThatDivergeFailTheWeightCheck) {
  auto comms = thread_comms(2);
  std::vector<std::unique_ptr<parallel::ReplicaNetwork>> replicas(2);
  on_threads(2, [&](int r) {
    replicas[std::size_t(r)] = std::make_unique<parallel::ReplicaNetwork>(
        cpu_net(models::workload("mlp", "mnist").spec, 4, OptimizerConfig{}), std::move(comms[std::size_t(r)]));
  });
  on_threads(2, [&](int r) { replicas[std::size_t(r)]->check_weights_agree(); });  // broadcast made them equal
  std::vector<float> w = replicas[1]->read_param(1, 0);
  w[17] += 1e-3f;
  replicas[1]->write_param(1, 0, w);
  std::atomic<int> failures = 0;
  on_threads(2, [&](int r) {
    try {
      replicas[std::size_t(r)]->check_weights_agree();
    } catch (const CheckFailed& e) {
      EXPECT_NE(std::string(e.what()).find("weights differ"), std::string::npos);
      ++failures;
    }
  });
  EXPECT_EQ(failures, 2) << "every rank sees the disagreement";
}

}  // namespace
}  // namespace tb
