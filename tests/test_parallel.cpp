// Data parallelism with replicas in threads (engine/parallel): the thread communicator's
// collectives, bucketing, and the data-parallel step against one replica on the whole batch.
// Everything here runs on the CPU backend, so it runs on every machine.
#include <gtest/gtest.h>
#include <sys/prctl.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <new>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "engine/core/dataset.hpp"
#include "engine/core/error.hpp"
#include "engine/cpu/network.hpp"
#include "engine/parallel/communicator.hpp"
#include "engine/parallel/predict.hpp"
#include "engine/parallel/replay.hpp"
#include "engine/parallel/replica.hpp"
#include "engine/parallel/replica_run.hpp"
#include "engine/parallel/timeline.hpp"
#include "engine/parallel/world.hpp"
#include "models/models.hpp"
#include "tests/inert_network.hpp"
#include "tests/large_batch.hpp"
#include "tests/replica_checks.hpp"
#include "tests/stand_in.hpp"
#include "tests/threads.hpp"

namespace tb {
namespace {

using parallel::Communicator;

using testing_support::on_threads;

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
  bool from_a_peer = false;
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
      from_a_peer = dynamic_cast<const parallel::PeerFailed*>(&e) != nullptr;
    }
  });
  EXPECT_NE(message.find("replica 1 failed: out of memory on replica 1"), std::string::npos) << message;
  EXPECT_TRUE(from_a_peer) << "rank 0's stop is not marked as another rank's failure";
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

// Where two ranks fail, the others report the first failure, the cause, not what followed it.
TEST(ThreadComm, TheOthersReportTheFirstFailure) {
  auto comms = thread_comms(3);
  comms[1]->abort("out of memory on replica 1");
  comms[2]->abort("replica 2 stopped after replica 1");
  try {
    comms[0]->barrier();
    ADD_FAILURE() << "rank 0 passed the barrier";
  } catch (const parallel::PeerFailed& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 stopped: replica 1 failed: out of memory on replica 1"),
              std::string::npos)
        << e.what();
  }
}

// A rank that comes after another gave up waiting for it stops with that rank's timeout, rather
// than completing the collective with the arrival the other left behind.
TEST(ThreadComm, ARankThatComesAfterAnotherTimedOutStops) {
  auto comms = thread_comms(2, /*timeout_s=*/0.05);
  EXPECT_THROW(comms[1]->barrier(), Error);  // rank 0 does not come in time
  try {
    comms[0]->barrier();
    ADD_FAILURE() << "rank 0 passed a barrier that rank 1 had left";
  } catch (const parallel::PeerFailed& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 stopped: rank 1 waited"), std::string::npos) << e.what();
  }
}

// A rank's worker keeps its first failure: an all-reduce started after one timed out fails too
// (the group has stopped), and wait() reports the timeout, the cause, not the stop that followed.
// (The sleeps order the worker's failures before the wait; the test passes whatever the timing.)
TEST(ThreadComm, WaitReportsTheWorkersFirstFailure) {
  auto comms = thread_comms(2, /*timeout_s=*/0.05);
  std::vector<float> v(4, 1.0f);
  comms[0]->start_all_reduce_mean(v.data(), 4, ElemType::F32);  // rank 1 never comes
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the worker has given up by then
  comms[0]->start_all_reduce_mean(v.data(), 4, ElemType::F32);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // and has failed this one too
  try {
    comms[0]->wait();
    ADD_FAILURE() << "the all-reduces passed";
  } catch (const Error& e) {
    EXPECT_EQ(dynamic_cast<const parallel::PeerFailed*>(&e), nullptr) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("rank 0 waited 0 s for the other replicas in an all-reduce", 0), 0u)
        << e.what();
  }
}

TEST(ThreadComm, ARankOutsideTheGroupIsRefused) {
  auto group = parallel::make_thread_group(2, 60);
  for (int rank : {-1, 2}) {
    try {
      parallel::make_thread_comm(group, rank);
      ADD_FAILURE() << "rank " << rank << " was taken";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fmt::format("replica {} is not in a group of 2", rank)), std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(parallel::make_thread_group(0, 60), Error);
}

std::unique_ptr<cpu::CpuNetwork> cpu_net(const ModelSpec& spec, i64 batch, OptimizerConfig opt) {
  return std::make_unique<cpu::CpuNetwork>(spec, NetworkOptions{.batch = batch, .optimizer = opt, .seed = 7});
}

TEST(Buckets, CoverEveryGradientExactlyOnceInBackwardOrder) {
  for (const ModelSpec& spec : {models::workload("mlp", "mnist").spec, models::workload("lenet5", "cifar10").spec,
                                models::workload("resnet152", "cifar10").spec}) {
    auto net = cpu_net(spec, 2, OptimizerConfig{});
    const auto segments = net->gradient_segments();
    for (std::size_t bytes : {std::size_t(1), std::size_t(64) << 10, parallel::kDefaultBucketBytes}) {
      const auto buckets = parallel::plan_buckets(segments, bytes);
      testing_support::expect_buckets_cover_each_gradient_once(segments, buckets, spec.name);
      if (bytes == 1) {
        EXPECT_EQ(buckets.size(), segments.size()) << "one segment per bucket at the smallest size";
      }
    }
  }
}

// The GPU backend's layout (CudaNetwork::place_parameters): a fused batch norm + add + ReLU group
// runs after the projection shortcut, and its batch norm's gradients lie where it runs, above the
// shortcut's, though its node comes before them. Before the plan joined only neighbours in
// memory, walking backward joined the main path's convolution to that batch norm across the
// shortcut's gradients, which were in a bucket already: ResNet-152's fp32 GPU rows all-reduced
// about 11 MB a step twice (results/h100/: 243.8 MB of buckets in their prediction_inputs
// against 232.7 MB of gradients).
TEST(Buckets, GradientsPlacedOutOfNodeOrderAreEachInOneBucket) {
  // node: 1 main conv, 2 main batch norm (fused, placed last), 3 shortcut conv, 4 shortcut batch
  // norm, 5 the next block's conv; offsets in floats, padded to 64 as the GPU backend pads.
  std::vector<float> grads(448);
  struct At {
    int node;
    i64 offset, count;
  };
  const std::vector<At> layout = {{1, 0, 100}, {2, 256, 10}, {3, 128, 60}, {4, 192, 10}, {5, 320, 120}};
  std::vector<FlatSegment> segments;
  for (const At& a : layout) segments.push_back({grads.data() + a.offset, ElemType::F32, a.count, a.node});
  for (std::size_t bytes : {std::size_t(1), std::size_t(1) << 20}) {
    const auto buckets = parallel::plan_buckets(segments, bytes);
    testing_support::expect_buckets_cover_each_gradient_once(segments, buckets, fmt::format("{} bytes", bytes));
    double floats = 0;
    for (const auto& b : buckets) floats += double(b.count);
    EXPECT_LE(floats, double(grads.size())) << "a gradient counted twice";
  }
  // In one type the buckets are [5], [3, 4], [2], [1]: 3 and 4 are neighbours, the others not.
  const auto joined = parallel::plan_buckets(segments, std::size_t(1) << 20);
  ASSERT_EQ(joined.size(), 4u);
  EXPECT_EQ(joined[1].first_node, 3);
  EXPECT_EQ(joined[1].last_node, 4);
}

TEST(Buckets, OverlappingSegmentsAreRefused) {
  std::vector<float> grads(200);
  const std::vector<FlatSegment> segments = {{grads.data(), ElemType::F32, 100, 1},
                                             {grads.data() + 50, ElemType::F32, 100, 2}};
  try {
    parallel::plan_buckets(segments, parallel::kDefaultBucketBytes);
    ADD_FAILURE() << "overlapping gradients were planned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the gradients of nodes 1 and 2 overlap"), std::string::npos) << e.what();
  }
}

TEST(Buckets, AnEmptySegmentIsRefused) {
  std::vector<float> grads(100);
  const std::vector<FlatSegment> segments = {{grads.data(), ElemType::F32, 100, 1},
                                             {grads.data() + 100, ElemType::F32, 0, 2}};
  try {
    parallel::plan_buckets(segments, parallel::kDefaultBucketBytes);
    ADD_FAILURE() << "an empty gradient segment was planned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gradient segment of node 2 is empty"), std::string::npos) << e.what();
  }
}

// 16-bit gradients and fp32 ones (a GPU's batch norm) are bucketed each type on its own, counted
// in their own elements: an fp16 buffer lying below the fp32 one is no overlap, and two fp16
// neighbours join into one bucket of both. Offsets in bytes of one buffer: nodes 1 and 2 fp16
// (16 elements, 32 bytes each), then nodes 3 and 4 fp32 (16 elements, 64 bytes each).
TEST(Buckets, SixteenBitAndFp32GradientsAreBucketedEachInItsOwnElements) {
  alignas(64) std::byte grads[192];
  const std::vector<FlatSegment> segments = {{grads, ElemType::F16, 16, 1},
                                             {grads + 32, ElemType::F16, 16, 2},
                                             {grads + 64, ElemType::F32, 16, 3},
                                             {grads + 128, ElemType::F32, 16, 4}};
  const auto buckets = parallel::plan_buckets(segments, parallel::kDefaultBucketBytes);
  testing_support::expect_buckets_cover_each_gradient_once(segments, buckets, "fp16 and fp32");
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(buckets[0].type, ElemType::F32);
  EXPECT_EQ(buckets[0].count, 32);
  EXPECT_EQ(buckets[1].type, ElemType::F16);
  EXPECT_EQ(buckets[1].data, static_cast<void*>(grads));
  EXPECT_EQ(buckets[1].count, 32);
  EXPECT_EQ(parallel::elem_bytes(ElemType::F16), 2u);
  EXPECT_EQ(parallel::elem_bytes(ElemType::BF16), 2u);
}

// A communicator that passes every call to another; the stand-ins below change one of them.
class Forwarding : public Communicator {
 public:
  explicit Forwarding(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string kind() const override { return inner_->kind(); }
  void start_all_reduce_mean(void* data, i64 count, ElemType type) override {
    inner_->start_all_reduce_mean(data, count, type);
  }
  void wait() override { inner_->wait(); }
  void broadcast(void* data, i64 count, ElemType type, int root) override {
    inner_->broadcast(data, count, type, root);
  }
  void barrier() override { inner_->barrier(); }
  double max(double value) override { return inner_->max(value); }
  void abort(const std::string& reason) override { inner_->abort(reason); }

 private:
  std::unique_ptr<Communicator> inner_;
};

// A communicator that sums where it should average (a missing division by N): the exact
// reference below must catch it.
class SumNotMean final : public Forwarding {
 public:
  using Forwarding::Forwarding;
  std::string kind() const override { return "sum-not-mean"; }
  void start_all_reduce_mean(void* data, i64 count, ElemType type) override {
    Forwarding::start_all_reduce_mean(data, count, type);
    pending_.emplace_back(static_cast<float*>(data), count);
  }
  void wait() override {
    Forwarding::wait();
    for (auto [data, count] : pending_)
      for (i64 k = 0; k < count; ++k) data[k] *= float(size());
    pending_.clear();
  }

 private:
  std::vector<std::pair<float*, i64>> pending_;
};

// A communicator whose broadcast fails before reaching the others, as a GPU out of memory or a
// CUDA error would make a replica's first collective fail.
class BroadcastFails final : public Forwarding {
 public:
  using Forwarding::Forwarding;
  void broadcast(void*, i64, ElemType, int) override { throw Error("replica 1's device ran out of memory"); }
};

// N replicas of batch b on their shards against one network on the N*b samples, k SGD steps:
// with mean losses the mean of the shards' gradients is the whole batch's, so the weights agree
// up to fp32 summation order (~1e-6 relative per step; 1e-4 after a few steps leaves margin,
// while a missing division by N, a bucket averaged twice or overlapping shards are off by O(1)).
// Returns the largest relative difference over the parameters.
double large_batch_difference(const ModelSpec& spec, int replicas, i64 shard, int steps, std::size_t bucket_bytes,
                              bool sum_not_mean = false) {
  OptimizerConfig sgd;
  sgd.lr = 0.05;
  testing_support::LargeBatch data(spec, shard, replicas);
  auto whole = cpu_net(spec, data.batch(), sgd);
  std::vector<std::unique_ptr<parallel::ReplicaNetwork>> nets(static_cast<std::size_t>(replicas));
  auto comms = thread_comms(replicas);
  on_threads(replicas, [&](int r) {
    std::unique_ptr<Communicator> comm = std::move(comms[std::size_t(r)]);
    if (sum_not_mean) comm = std::make_unique<SumNotMean>(std::move(comm));
    nets[std::size_t(r)] =
        std::make_unique<parallel::ReplicaNetwork>(cpu_net(spec, shard, sgd), std::move(comm), bucket_bytes);
  });
  testing_support::copy_params(spec, data.batch(), *nets[0], *whole);  // rank 0's, broadcast
  std::mt19937 rng(3);
  for (int s = 0; s < steps; ++s) {
    data.draw(rng);
    StepTimes t;
    whole->set_batch(data.whole());
    whole->train_step(t);
    on_threads(replicas, [&](int r) {
      nets[std::size_t(r)]->set_batch(data.shard(r));
      StepTimes rt;
      nets[std::size_t(r)]->train_step(rt);
    });
  }
  on_threads(replicas, [&](int r) { nets[std::size_t(r)]->check_weights_agree(); });
  const parallel::CommStats& st = nets[0]->stats();
  EXPECT_EQ(st.steps, steps);
  EXPECT_EQ(st.buckets, i64(nets[0]->buckets().size()) * steps);
  double worst = 0;
  testing_support::for_each_param(spec, data.batch(), [&](int node, int k, const std::string&) {
    worst = std::max(worst, testing_support::relative_difference(nets[std::size_t(replicas - 1)]->read_param(node, k),
                                                                 whole->read_param(node, k)));
  });
  return worst;
}

constexpr double kLargeBatchTolerance = 1e-4;

TEST(DataParallel, EqualsLargeBatch) {
  struct Case {
    const char *model, *dataset;
    int replicas;
    i64 shard;
    std::size_t bucket_bytes;
  };
  for (const Case& c :
       {Case{"mlp", "mnist", 2, 8, std::size_t(256) << 10}, Case{"mlp", "mnist", 3, 4, std::size_t(1)},
        Case{"lenet5", "cifar10", 2, 4, std::size_t(4) << 10},  // several buckets
        Case{"lenet5", "cifar10", 3, 3, parallel::kDefaultBucketBytes}, Case{"lstm", "sine", 2, 5, std::size_t(64)},
        Case{"lstm", "sine", 4, 3, std::size_t(1) << 20}}) {
    SCOPED_TRACE(fmt::format("{} x{} shard {}", c.model, c.replicas, c.shard));
    EXPECT_LT(large_batch_difference(models::workload(c.model, c.dataset).spec, c.replicas, c.shard, 4, c.bucket_bytes),
              kLargeBatchTolerance);
  }
}

TEST(DataParallel, EqualsLargeBatchCatchesASumInPlaceOfAMean) {
  const double wrong =
      large_batch_difference(models::workload("mlp", "mnist").spec, 2, 8, 4, std::size_t(256) << 10, true);
  EXPECT_GT(wrong, 100 * kLargeBatchTolerance) << "the reference cannot tell a sum from a mean";
}

// Batch norm keeps statistics per replica by design, so ResNet-152 is checked for what data
// parallelism promises it: every replica holds the same weights after training.
TEST(DataParallel, ResNetReplicasStayIdentical) {
  const ModelSpec spec = models::workload("resnet152", "cifar10").spec;
  OptimizerConfig sgd;
  sgd.lr = 0.01;
  testing_support::LargeBatch data(spec, 2, 2);
  std::vector<std::unique_ptr<parallel::ReplicaNetwork>> nets(2);
  auto comms = thread_comms(2);
  on_threads(2, [&](int r) {
    nets[std::size_t(r)] =
        std::make_unique<parallel::ReplicaNetwork>(cpu_net(spec, 2, sgd), std::move(comms[std::size_t(r)]));
  });
  std::mt19937 rng(9);
  data.draw(rng);
  on_threads(2, [&](int r) {
    nets[std::size_t(r)]->set_batch(data.shard(r));
    StepTimes t;
    nets[std::size_t(r)]->train_step(t);
  });
  on_threads(2, [&](int r) { nets[std::size_t(r)]->check_weights_agree(); });
  EXPECT_NE(nets[0]->read_param(1, 0), cpu_net(spec, 2, sgd)->read_param(1, 0)) << "training changed nothing";
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

// A network of one 4-float gradient whose parameter checksum is given: for the weight check alone.
class Checksummed final : public InertNetwork {
 public:
  explicit Checksummed(std::uint64_t checksum) : checksum_(checksum) {}
  std::vector<FlatSegment> gradient_segments() override { return {{grads_.data(), ElemType::F32, 4, 1}}; }
  std::uint64_t param_checksum() override { return checksum_; }

 private:
  std::uint64_t checksum_;
  std::vector<float> grads_ = std::vector<float>(4);
};

// The weight check compares all 64 bits of the checksum (in three pieces of 22): replicas whose
// checksums differ in any one bit fail it on every rank, each naming its own checksum, and equal
// ones pass.
TEST(DataParallel, ChecksumsThatDifferInAnyOneBitFailTheWeightCheck) {
  for (int bit : {0, 21, 22, 43, 44, 63}) {
    SCOPED_TRACE(bit);
    const std::uint64_t differs = std::uint64_t(1) << bit;
    auto comms = thread_comms(2);
    std::vector<std::string> messages(2);
    on_threads(2, [&](int r) {
      parallel::ReplicaNetwork replica(std::make_unique<Checksummed>(r == 0 ? 0 : differs),
                                       std::move(comms[std::size_t(r)]));
      try {
        replica.check_weights_agree();
      } catch (const parallel::ReplicasDiffer& e) {
        messages[std::size_t(r)] = e.what();
      }
    });
    EXPECT_EQ(messages[0],
              "the 2 replicas' weights differ after training (rank 0's checksum 0000000000000000): data-parallel "
              "replicas must stay identical");
    EXPECT_NE(messages[1].find(fmt::format("(rank 1's checksum {:016x})", differs)), std::string::npos) << messages[1];
  }
  auto comms = thread_comms(2);
  on_threads(2, [&](int r) {
    parallel::ReplicaNetwork replica(std::make_unique<Checksummed>(0x8000'0400'0020'0001),
                                     std::move(comms[std::size_t(r)]));
    EXPECT_NO_THROW(replica.check_weights_agree());
  });
}

// One replica's communicator (a one-device row's step through the data-parallel path) has no
// one to exchange with: every collective leaves its value as it is.
TEST(World, OneReplicasCommunicatorLeavesEveryValueAsItIs) {
  Checksummed net(0);
  const std::unique_ptr<Communicator> comm = parallel::one_replica_comm(net);
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->kind(), "one replica");
  EXPECT_DOUBLE_EQ(comm->max(-2.5), -2.5);
  EXPECT_DOUBLE_EQ(comm->min(3.5), 3.5);
  std::vector<float> v{1, 2, 3};
  comm->start_all_reduce_mean(v.data(), 3, ElemType::F32);
  comm->wait();
  comm->broadcast(v.data(), 3, ElemType::F32, 0);
  comm->barrier();
  EXPECT_EQ(v, (std::vector<float>{1, 2, 3}));
}

// Alone (no mpirun), a row's set-up runs once and throws its own failure as it was thrown.
TEST(World, ASetUpAloneThrowsItsOwnFailure) {
  int ran = 0;
  parallel::set_up_together("a row", [&] { ++ran; });
  EXPECT_EQ(ran, 1);
  try {
    parallel::set_up_together("a row", [] { throw CheckFailed("cifar10: data_batch_3.bin is truncated"); });
    ADD_FAILURE() << "the set-up passed";
  } catch (const CheckFailed& e) {
    EXPECT_EQ(std::string(e.what()), "cifar10: data_batch_3.bin is truncated");
  }
  EXPECT_THROW(parallel::set_up_together("a row", [] { throw std::bad_alloc(); }), std::bad_alloc);
}

// Rank 0 tells a row that failed because another rank could not set it up (it says so once, not
// as its own failure) from its own failures, by the message set_up_together threw.
TEST(World, AnotherRanksSetUpFailureIsToldFromThisRanksOwn) {
  EXPECT_TRUE(parallel::another_ranks_set_up_failed("rank 1 could not set up this row: no train-images-idx3-ubyte"));
  EXPECT_FALSE(parallel::another_ranks_set_up_failed("mnist: no train-images-idx3-ubyte"));
  EXPECT_FALSE(parallel::another_ranks_set_up_failed("replica 1 could not set up this row: out of memory"));
  EXPECT_FALSE(parallel::another_ranks_set_up_failed("mnist: rank 1 could not set up this row: x"));
  EXPECT_FALSE(parallel::another_ranks_set_up_failed("rank 1 stopped: replica 0 failed: x"));
}

// The run's check reports the first replica's failure, and replicas whose weights differ as
// ReplicasDiffer (the row's verdict names them) even where a loss check failed too, keeping that
// replica's loss message: here both replicas' losses did not fall and their weights differ.
TEST(DataParallel, TheRunsCheckReportsTheFirstFailureAndDifferingWeightsAsSuch) {
  parallel::Wiring threads = [](const std::vector<Network*>& nets, Communicator*) {
    return thread_comms(int(nets.size()));
  };
  parallel::ReplicaRun run(threads, /*across_ranks=*/false, 2, nullptr, [&](int k) {
    return std::make_pair(std::unique_ptr<Network>(std::make_unique<Checksummed>(std::uint64_t(k))),
                          std::unique_ptr<Dataset>(std::make_unique<testing_support::NoData>()));
  });
  run.connect();
  try {
    run.check([&](Trainer& t) {
      throw CheckFailed(&t == run.replicas()[0].trainer.get() ? "the loss did not fall (0)"
                                                              : "the loss did not fall (1)");
    });
    ADD_FAILURE() << "the check passed";
  } catch (const CheckFailed& e) {
    EXPECT_NE(dynamic_cast<const parallel::ReplicasDiffer*>(&e), nullptr) << "not reported as differing weights";
    EXPECT_EQ(std::string(e.what()), "replica 0: the loss did not fall (0)");
  }
}

// A replica whose loss is not finite (found by the trainer after the step, outside the replica's
// own calls) tells the others, which stop at their next all-reduce instead of waiting out the
// deadline, and the run reports the cause, as a one-device row would: the non-finite loss, not
// another replica's wait. (Before, replica 0 waited the group's 60 s and its timeout was what the
// run reported.)
TEST(DataParallel, AReplicaWhoseLossIsNotFiniteStopsTheOthersWithItsReason) {
  const ModelSpec spec = models::workload("lstm", "sine").spec;
  constexpr i64 kBatch = 4;
  parallel::Wiring threads = [](const std::vector<Network*>& nets, Communicator*) {
    return thread_comms(int(nets.size()));  // a 60-s deadline
  };
  parallel::ReplicaRun run(threads, /*across_ranks=*/false, 2, nullptr, [&](int k) {
    std::unique_ptr<Network> net = cpu_net(spec, kBatch, OptimizerConfig{});
    std::unique_ptr<Dataset> data =
        std::make_unique<testing_support::RandomBatches>(spec, kBatch, unsigned(k), k == 1 ? 3 : 0);
    return std::make_pair(std::move(net), std::move(data));
  });
  run.connect();
  testing_support::expect_stops_with(run, 10, "loss is NaN at training step 3", std::chrono::seconds(30));
}

// A replica that fails in its first collective (the constructor's broadcast of rank 0's weights,
// before any step) tells the others, which stop at once, and the run reports its failure, not
// another replica's wait. (Before, replica 0 waited out the group's deadline and its timeout was
// what the run reported.)
TEST(DataParallel, AReplicaWhoseBroadcastFailsStopsTheOthersWithItsReason) {
  const ModelSpec spec = models::workload("lstm", "sine").spec;
  constexpr i64 kBatch = 4;
  parallel::Wiring failing = [](const std::vector<Network*>& nets, Communicator*) {
    auto comms = thread_comms(int(nets.size()));  // a 60-s deadline
    comms[1] = std::make_unique<BroadcastFails>(std::move(comms[1]));
    return comms;
  };
  const auto t0 = std::chrono::steady_clock::now();
  try {
    parallel::ReplicaRun run(failing, /*across_ranks=*/false, 2, nullptr, [&](int k) {
      std::unique_ptr<Network> net = cpu_net(spec, kBatch, OptimizerConfig{});
      std::unique_ptr<Dataset> data = std::make_unique<testing_support::RandomBatches>(spec, kBatch, unsigned(k), 0);
      return std::make_pair(std::move(net), std::move(data));
    });
    run.connect();
    ADD_FAILURE() << "the replicas started";
  } catch (const std::exception& e) {
    EXPECT_EQ(dynamic_cast<const parallel::PeerFailed*>(&e), nullptr) << "not the replica's own failure: " << e.what();
    EXPECT_NE(std::string(e.what()).find("replica 1's device ran out of memory"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30)) << "replica 0 waited out its deadline";
}

// ---- Predicted N-device scaling ----

// One all-reduce over one level of a link NCCL's protocols do not describe (MPI, a custom link).
parallel::AllReduce flat(double bytes, int n, const parallel::Link& link, parallel::End end = parallel::End::Point) {
  parallel::Cluster c;
  c.devices = n;
  c.link = link;
  return parallel::all_reduce(bytes, c, end);
}

TEST(Predict, RingTimeFollowsTheBusBandwidthDefinition) {
  const parallel::Link link{.name = "test", .busbw_gbps = 100, .latency_us = 10, .source = "a test"};
  EXPECT_EQ(flat(1e9, 1, link).s, 0.0) << "one device has nothing to reduce";
  // 2(N-1)/N x bytes / busbw and 2(N-1) steps of latency (NCCL's step count): N=2 sends the bytes
  // once in 2 steps, N=8 1.75 times in 14.
  EXPECT_DOUBLE_EQ(flat(1e9, 2, link).s, 2 * 10e-6 + 1e9 / 100e9);
  EXPECT_EQ(flat(1e9, 2, link).algorithm, "ring");
  EXPECT_DOUBLE_EQ(flat(1e9, 8, link).s, 14 * 10e-6 + 1.75 * 1e9 / 100e9);
}

TEST(Predict, BucketsQueueOnOneStreamAndOnlyTheTailIsExposed) {
  // Two buckets of 1 GB ready at 10 ms and 30 ms of a 50 ms step; backward ends at 30 ms. Over
  // 100 GB/s with no latency and N=2 each all-reduce takes 10 ms: the first runs 10-20 ms,
  // hidden; the second 30-40 ms, 10 ms past backward's end.
  parallel::StepTimeline t;
  t.bucket_ready_s = {0.010, 0.030};
  t.bucket_bytes = {1e9, 1e9};
  t.backward_end_s = 0.030;
  t.step_end_s = 0.045;
  t.steps = 1;
  const parallel::Link link{.name = "test", .busbw_gbps = 100, .latency_us = 0, .source = "a test"};
  const parallel::Prediction p = parallel::predict(t, 0.050, 64, 2, link);
  EXPECT_NEAR(p.comm_s, 0.020, 1e-12);
  EXPECT_NEAR(p.exposed_comm_s, 0.010, 1e-12);
  // Plus the contention of the first all-reduce's 10 ms beside backward (on a GPU).
  const double step = 0.060 + parallel::kContentionPoint * 0.010;
  EXPECT_NEAR(p.step_s, step, 1e-12);
  EXPECT_NEAR(p.samples_per_s, 2 * 64 / step, 1e-9);
  EXPECT_NEAR(p.efficiency, 0.050 / step, 1e-12);
  EXPECT_EQ(p.algorithm, "ring");
  // Ready together at the end: the two queue one after the other, all exposed.
  t.bucket_ready_s = {0.030, 0.030};
  EXPECT_NEAR(parallel::predict(t, 0.050, 64, 2, link).exposed_comm_s, 0.020, 1e-12);
  EXPECT_NEAR(parallel::predict(t, 0.050, 64, 2, link).step_s, 0.070, 1e-12)
      << "neither beside backward: no contention";
  // On cores shared with compute (MPI between CPU ranks) nothing hides: both are exposed.
  t.bucket_ready_s = {0.010, 0.030};
  parallel::Link host = link;
  host.overlaps_compute = false;
  EXPECT_NEAR(parallel::predict(t, 0.050, 64, 2, host).exposed_comm_s, 0.020, 1e-12);
  // One device: the measured row itself.
  const parallel::Prediction one = parallel::predict(t, 0.050, 64, 1, link);
  EXPECT_EQ(one.step_s, 0.050);
  EXPECT_EQ(one.efficiency, 1.0);
}

TEST(Predict, LatencyGrowsWithNAndATreeTakesSmallBuckets) {
  const parallel::Link link{.name = "test", .busbw_gbps = 100, .latency_us = 10, .source = "a test"};
  // 1 KB among 8: a ring pays 14 steps, a tree 2 log2 8 = 6 (and twice the bytes): the tree.
  EXPECT_NEAR(flat(1e3, 8, link).s, 6 * 10e-6 + 2 * 1e3 / 100e9, 1e-15);
  EXPECT_EQ(flat(1e3, 8, link).algorithm, "tree");
  // 10 GB among 8: the ring's 2(N-1)/N bytes win.
  EXPECT_NEAR(flat(1e10, 8, link).s, 14 * 10e-6 + 1.75 * 1e10 / 100e9, 1e-12);
  // The band's slow end at the link's low bus bandwidth.
  parallel::Link slow = link;
  slow.busbw_low_gbps = 50;
  EXPECT_NEAR(flat(1e10, 8, slow, parallel::End::Slow).s, 14 * 10e-6 + 1.75 * 1e10 / 50e9, 1e-12);
}

// Two levels: N devices on M nodes take the slower level's bus bandwidth (the network's, times
// the NICs a node's devices reach) and NCCL 2.28's step counts: 2(M-1) of the ring's 2(N-1) steps
// cross the network; a tree is a chain within a node and log2 M steps between nodes, each way.
TEST(Predict, TwoLevelsTakeTheSlowerLevelAndNcclsStepCounts) {
  parallel::Cluster c;
  c.devices = 8;
  c.nodes = 4;
  c.link = parallel::Link{.name = "shm", .busbw_gbps = 20, .latency_us = 1, .source = "a test"};
  c.network = parallel::Link{.name = "net", .busbw_gbps = 10, .latency_us = 50, .source = "a test"};
  // 8 ranks, 4 nodes: of 14 ring steps 6 cross the network; 10 GB/s, one NIC per node.
  EXPECT_NEAR(parallel::all_reduce(1e9, c).s, (8 * 1 + 6 * 50) * 1e-6 + 1.75 * 1e9 / 10e9, 1e-12);
  // Small: a tree of one intra step and log2 4 = 2 network steps, each way.
  EXPECT_NEAR(parallel::all_reduce(1e3, c).s, 2 * (1 * 1 + 2 * 50) * 1e-6 + 2 * 1e3 / 10e9, 1e-15);
  EXPECT_EQ(parallel::all_reduce(1e3, c).algorithm, "tree");
  // Two NICs per node carry both of a node's ranks: the link within the node is now the slower.
  c.network.nics = 2;
  EXPECT_NEAR(parallel::all_reduce(1e9, c).s, (8 * 1 + 6 * 50) * 1e-6 + 1.75 * 1e9 / 20e9, 1e-12);
  // The same 8 as one node: the network plays no part.
  c.nodes = 1;
  EXPECT_NEAR(parallel::all_reduce(1e9, c).s, 14 * 1e-6 + 1.75 * 1e9 / 20e9, 1e-12);
}

// MPI runs what the communicator asks Open MPI for, not the quicker of the two: a ring from
// kMpiRingFromBytes even where a tree's fewer steps would win, and below it a binomial tree that
// moves the whole buffer in each of its 2 log2 N rounds, each over its own level's link.
TEST(Predict, MpiRunsTheCommunicatorsRingFrom64KiBAndItsBinomialTreeBelow) {
  parallel::Cluster c;
  c.devices = 8;
  c.nodes = 4;
  c.library = parallel::Library::Mpi;
  c.link = parallel::Link{.name = "shm", .busbw_gbps = 20, .latency_us = 1, .source = "a test"};
  c.network = parallel::Link{.name = "net", .busbw_gbps = 10, .latency_us = 5000, .source = "a test"};
  // 64 KiB: the ring's 6 network steps of 5 ms, where NCCL's choice would be the tree's 4.
  const double ring = (8 * 1 + 6 * 5000) * 1e-6 + 1.75 * 65536 / 10e9;
  EXPECT_NEAR(parallel::all_reduce(65536, c).s, ring, 1e-12);
  EXPECT_EQ(parallel::all_reduce(65536, c).algorithm, "ring");
  c.library = parallel::Library::Nccl;
  EXPECT_EQ(parallel::all_reduce(65536, c).algorithm, "tree");
  // Just under 64 KiB: the binomial tree, one round within a node and two between, each way,
  // the whole buffer in every round.
  c.library = parallel::Library::Mpi;
  const double bytes = 65535;
  EXPECT_NEAR(parallel::all_reduce(bytes, c).s, 2 * (1 * 1 + 2 * 5000) * 1e-6 + 2 * (bytes / 20e9 + 2 * bytes / 10e9),
              1e-12);
  EXPECT_EQ(parallel::all_reduce(bytes, c).algorithm, "tree");
  // Over a preset link, MPI's rule still, at the preset's ring step and bus bandwidth: NCCL's
  // protocols (ring/ll, its base latencies) are NCCL's alone.
  c.nodes = 1;
  c.link = parallel::parse_link("pcie4");
  for (double b : {2e3, 1e6}) {
    const parallel::AllReduce mpi = parallel::all_reduce(b, c);
    EXPECT_EQ(mpi.algorithm, b < parallel::kMpiRingFromBytes ? "tree" : "ring") << b;
    if (b >= parallel::kMpiRingFromBytes) {
      EXPECT_NEAR(mpi.s, 14 * c.link.latency_us * 1e-6 + 1.75 * b / (c.link.busbw_gbps * 1e9), 1e-12);
    }
  }
  // Six ranks: the binomial tree takes ceil(log2 6) = 3 rounds each way (two reach only four).
  c.devices = 6;
  c.link = parallel::Link{.name = "shm", .busbw_gbps = 20, .latency_us = 1, .source = "a test"};
  EXPECT_NEAR(parallel::all_reduce(2e3, c).s, 2 * 3 * 1e-6 + 2 * 3 * 2e3 / 20e9, 1e-15);
}

// NCCL's links take its protocols: LL for small messages, Simple for large, LL128 only on NVLink,
// and a DGX H100 node's eight NICs carry eight times one NIC's bus bandwidth.
TEST(Predict, NcclLinksChooseAProtocolAndNameIt) {
  parallel::Cluster c;
  c.devices = 8;
  c.link = parallel::parse_link("nvlink4");
  // 4 KB among 8: LL's 6.6 + 14 x 0.6 us beats Simple's 8.4 + 14 x 3.4.
  EXPECT_EQ(parallel::all_reduce(4e3, c).algorithm, "ring/ll");
  // 25 MiB: LL128 at 92% of the bus bandwidth, its latency 14 + 14 x 1.9 us, still beats Simple's.
  const parallel::AllReduce mid = parallel::all_reduce(25 << 20, c);
  EXPECT_EQ(mid.algorithm, "ring/ll128");
  EXPECT_NEAR(mid.s, (14 + 14 * 1.9) * 1e-6 + 1.75 * double(25 << 20) / (0.92 * 370e9), 1e-9);
  // 1 GB: the ring at full bus bandwidth, its Simple latency 8.4 + 14 x 3.4 us.
  const parallel::AllReduce big = parallel::all_reduce(1e9, c);
  EXPECT_EQ(big.algorithm, "ring/simple");
  EXPECT_NEAR(big.s, (8.4 + 14 * 3.4) * 1e-6 + 1.75 * 1e9 / 370e9, 1e-9);
  c.link = parallel::parse_link("pcie5");
  EXPECT_EQ(parallel::all_reduce(4e3, c).algorithm.find("ll128"), std::string::npos) << "LL128 needs NVLink";
  // 16 GPUs on 2 DGX H100 nodes: 8 NICs of 45 GB/s against one.
  c.devices = 16;
  c.nodes = 2;
  c.link = parallel::parse_link("nvlink4");
  c.network = parallel::parse_network("ib_ndr400x8");
  const double eight = parallel::all_reduce(1e9, c).s;
  c.network = parallel::parse_network("ib_ndr400");
  const double one = parallel::all_reduce(1e9, c).s;
  EXPECT_NEAR(one / eight, 8, 0.5) << "bandwidth-bound: about 8x";
}

// NCCL 2.28's tuning model (src/graph/tuning.cc) pinned, one protocol at a time, where each wins:
// base latency + steps x the step's latency per hardware, and the bytes over the protocol's share
// of the bus bandwidth (ring: 2(N-1)/N of them; tree: 2 over 0.92 x its share), with its
// refinements: LL capped at llMaxBw (141 GB/s within a Hopper node; across nodes of Intel CPUs 39
// at 2 nodes, 20.4 at more), a tree's bandwidth x treeCorrectionFactor at log2(bytes / 64), and a
// ring across nodes with its latency x1.4 (the plateau). Each figure is written out, so that a
// constant that moves fails here. nvlink4: 370 GB/s; ib_ndr400x8: 8 NICs of 45 GB/s, so 360 for 8
// GPUs a node.
TEST(Predict, NcclsProtocolsCostWhatItsTuningModelSays) {
  struct Case {
    const char* what;
    const char* link;
    int devices, nodes;
    double bytes, expected_us;
    const char* algorithm;
  };
  const double ring8 = 1.75;  // 2(N-1)/N, N = 8
  const Case cases[] = {
      {"ring/ll: base 6.6, 14 NVLink steps of 0.6, half the bus capped at Hopper's 141 GB/s", "nvlink4", 8, 1, 262144,
       6.6 + 14 * 0.6 + ring8 * 262144 / 141e9 * 1e6, "ring/ll"},
      {"ring/ll128: base 14, steps of 1.9, 0.92 of the bus", "nvlink4", 8, 1, 26214400,
       14 + 14 * 1.9 + ring8 * 26214400 / (0.92 * 370e9) * 1e6, "ring/ll128"},
      {"ring/simple: base 8.4, steps of 3.4, the whole bus", "nvlink4", 8, 1, 1e8,
       8.4 + 14 * 3.4 + ring8 * 1e8 / 370e9 * 1e6, "ring/simple"},
      // At 6 MB ring/ll128 wins over tree/ll128 at 7/9 of the bus and x0.8 (6e6 / 64 is 2^16.5).
      {"the one-node tree's 7/9 keeps ring/ll128 ahead at 6 MB", "nvlink4", 8, 1, 6e6,
       14 + 14 * 1.9 + ring8 * 6e6 / (0.92 * 370e9) * 1e6, "ring/ll128"},
      {"tree/ll128 across nodes: chains of 7 steps of 1.25, 1 of 8.5, 120/128 of the bus, x0.9 at 2^17", "ib_ndr400x8",
       16, 2, 1e7, 14 + 2 * (7 * 1.25 + 1 * 8.5) + 2 * 1e7 / (0.92 * 120.0 / 128 * 360e9 * 0.9) * 1e6, "tree/ll128"},
      {"tree/ll across 2 nodes: base 6.8, steps of 0.6 and 5.0, 39 GB/s (not 1/3.8 of the bus), x0.8 at 2^5",
       "ib_ndr400x8", 16, 2, 4000, 6.8 + 2 * (7 * 0.6 + 1 * 5.0) + 2 * 4000 / (39e9 * 0.8) * 1e6, "tree/ll"},
      {"tree/simple across 16 nodes: steps of 4.0 and 14, log2 16 = 4 between, x1 past 2^22", "ib_ndr400x8", 128, 16,
       1e9, 8.4 + 2 * (7 * 4.0 + 4 * 14) + 2 * 1e9 / (0.92 * 360e9) * 1e6, "tree/simple"},
      {"the ring's 2(M-1) steps between 4 nodes at 14, 2(N-1) - 2(M-1) within at 3.4, all x1.4", "ib_ndr400x8", 32, 4,
       1e9, (8.4 + 56 * 3.4 + 6 * 14) * 1.4 + 2.0 * 31 / 32 * 1e9 / 360e9 * 1e6, "ring/simple"},
      // NCCL's log2i rounds down: 3 nodes are 1 step of the tree apart, not 2.
      {"tree/ll across 3 nodes: log2 3 rounded down, LL at 20.4 GB/s beyond 2 nodes", "ib_ndr400x8", 24, 3, 4000,
       6.8 + 2 * (7 * 0.6 + 1 * 5.0) + 2 * 4000 / (20.4e9 * 0.8) * 1e6, "tree/ll"},
      {"PCIe: steps of 1.0, no LL128", "pcie4", 8, 1, 4000, 6.6 + 14 * 1.0 + ring8 * 4000 / (0.5 * 24e9) * 1e6,
       "ring/ll"},
      {"NVLS: 25 us, 480 GB/s among 8", "nvlink4_nvls", 8, 1, 1e8, 25 + ring8 * 1e8 / 480e9 * 1e6, "nvls/simple"},
      {"nvlink3: LL capped at Ampere's 87.7 GB/s", "nvlink3", 8, 1, 262144,
       6.6 + 14 * 0.6 + ring8 * 262144 / 87.7e9 * 1e6, "ring/ll"},
      // A network as the only level is a GPU per node: a tree of log2 8 = 3 network steps, where a
      // chain within one node took 7; the ring would take the tree's 5.0 per step, not its own 2.7.
      {"ib_ndr400 alone: 8 nodes of one GPU, tree/ll at 0.92/3.8 of 45 GB/s x0.8", "ib_ndr400", 8, 1, 4000,
       6.8 + 2 * (3 * 5.0) + 2 * 4000 / (0.92 / 3.8 * 45e9 * 0.8) * 1e6, "tree/ll"},
      // With one GPU a node LL128 runs off NVLink too, and its ring takes the tree's network step.
      {"ib_ndr400 alone, 2 GPUs: ring/ll128, 2 network steps of the tree's 8.5 (not the ring's 4.0), 0.92 of 45 GB/s",
       "ib_ndr400", 2, 1, 1e6, 14 + 2 * 8.5 + 1e6 / (0.92 * 45e9) * 1e6, "ring/ll128"},
      {"4 nodes of 2 GPUs reach 2 of a node's 8 NICs: 90 GB/s, not 360", "ib_ndr400x8", 8, 4, 1e9,
       (8.4 + 8 * 3.4 + 6 * 14) * 1.4 + 1.75 * 1e9 / 90e9 * 1e6, "ring/simple"},
      // The plateau from 64 B per rank on each of 32 channels: 2048 B among 8 ranks are 256 a rank.
      {"no plateau under 2048 B a rank: 2 KiB among 8 on 2 nodes over 10 MB/s and 100 us", "0.01,100", 8, 2, 2048,
       8.4 + 12 * 3.4 + 2 * 100 + 1.75 * 2048 / 0.01e9 * 1e6, "ring/simple"},
  };
  for (const Case& k : cases) {
    parallel::Cluster c;
    c.devices = k.devices;
    c.nodes = k.nodes;
    if (k.nodes > 1) {
      c.link = parallel::parse_link("nvlink4");
      c.network = parallel::parse_network(k.link);
    } else {
      c.link = parallel::parse_link(k.link);
    }
    const parallel::AllReduce a = parallel::all_reduce(k.bytes, c);
    EXPECT_EQ(a.algorithm, k.algorithm) << k.what;
    EXPECT_NEAR(a.s * 1e6, k.expected_us, 1e-6) << k.what;
  }
}

// What NCCL's model takes from the nodes' CPUs (unknown to a prediction) spans the band: Intel's
// figures at the point and the fast end, AMD's at the slow end: LL at most 22.5 GB/s between 2
// nodes (Intel 39), and a ring's step within a node at least the network's post, 2 us (x3 for
// Simple; Intel 1 us, under NVLink's 3.4). The slow end's bus bandwidth is the lower of nvlink4's
// 365 and 8 NDR NICs at 37.5 (300 GB/s).
TEST(Predict, NcclsRefinementsAcrossNodesTakeTheNodesCpusFromTheBand) {
  parallel::Cluster c;
  c.devices = 16;
  c.nodes = 2;
  c.link = parallel::parse_link("nvlink4");
  c.network = parallel::parse_network("ib_ndr400x8");
  const parallel::AllReduce small = parallel::all_reduce(4000, c, parallel::End::Slow);
  EXPECT_EQ(small.algorithm, "tree/ll");
  EXPECT_NEAR(small.s * 1e6, 6.8 + 2 * (7 * 0.6 + 1 * 5.0) + 2 * 4000 / (22.5e9 * 0.8) * 1e6, 1e-6);
  const parallel::AllReduce big = parallel::all_reduce(1e9, c, parallel::End::Slow);
  EXPECT_EQ(big.algorithm, "ring/simple");
  EXPECT_NEAR(big.s * 1e6, (8.4 + 28 * 6.0 + 2 * 14) * 1.4 + 1.875 * 1e9 / 300e9 * 1e6, 1e-6);
  // The point: Intel's post (3 us for Simple) is under NVLink's 3.4; the bandwidth 360.
  EXPECT_NEAR(parallel::all_reduce(1e9, c).s * 1e6, (8.4 + 28 * 3.4 + 2 * 14) * 1.4 + 1.875 * 1e9 / 360e9 * 1e6, 1e-6);
}

// NVLink SHARP (nvlink4_nvls) joins the ring and the tree where NCCL runs it, within one node:
// at 5 to 8 GPUs its measured bus bandwidth (420-480 GB/s) beats the ring's 370 for large buffers;
// up to 4 GPUs it reaches the ring's and gains nothing but latency (25 us against the ring's 28.8
// at 4); its band's slow end takes no gain over the ring's bandwidth.
TEST(Predict, NvlsBeatsTheRingFromFiveGpusOfOneNodeOnly) {
  parallel::Cluster c, ring;
  c.link = parallel::parse_link("nvlink4_nvls");
  ring.link = parallel::parse_link("nvlink4");
  c.devices = ring.devices = 8;
  const parallel::AllReduce big = parallel::all_reduce(1e9, c);
  EXPECT_EQ(big.algorithm, "nvls/simple");
  EXPECT_NEAR(big.s, 25e-6 + 1.75 * 1e9 / 480e9, 1e-9);
  EXPECT_LT(big.s, 0.8 * parallel::all_reduce(1e9, ring).s);
  EXPECT_NEAR(parallel::all_reduce(1e9, c, parallel::End::Slow).s,
              parallel::all_reduce(1e9, ring, parallel::End::Slow).s, 50e-6)
      << "the slow end: the ring's bandwidth";
  c.devices = ring.devices = 4;
  EXPECT_NEAR(parallel::all_reduce(1e9, c).s, parallel::all_reduce(1e9, ring).s, 5e-6) << "no gain at 4 GPUs";
  EXPECT_EQ(parallel::nvls_busbw(8), 480);
  EXPECT_EQ(parallel::nvls_busbw(9), 0) << "outside an 8-GPU board";
  // Across nodes NCCL 2.28 runs no NVLS without CollNet.
  c.devices = 16;
  c.nodes = 2;
  c.network = parallel::parse_network("ib_ndr400x8");
  EXPECT_EQ(parallel::all_reduce(1e9, c).algorithm.find("nvls"), std::string::npos);
  c.devices = 8;
  EXPECT_EQ(parallel::all_reduce(1e9, c).algorithm.find("nvls"), std::string::npos) << "8 GPUs, but on 2 nodes";
  // Without NVLS the same board's ring.
  c = parallel::Cluster{};
  c.link = parallel::parse_link("nvlink4");
  c.devices = 8;
  EXPECT_EQ(parallel::all_reduce(1e9, c).algorithm, "ring/simple");
}

// On a GPU, compute beside an all-reduce slows: the contention term is kContentionPoint of the
// backward time an all-reduce overlapped (0 to kContentionHigh); CPU ranks' all-reduces overlap
// nothing and take none.
TEST(Predict, ContentionSlowsTheComputeAnAllReduceOverlapsOnAGpu) {
  // One 1 GB bucket ready at 10 ms of a 50 ms step, backward ending at 30: over 100 GB/s at N=2
  // it runs 10-20 ms, 10 ms beside backward.
  parallel::StepTimeline t;
  t.bucket_ready_s = {0.010};
  t.bucket_bytes = {1e9};
  t.backward_end_s = 0.030;
  t.step_end_s = 0.045;
  t.steps = 100;
  const parallel::Link link{.name = "test", .busbw_gbps = 100, .latency_us = 0, .source = "a test"};
  const parallel::Prediction p = parallel::predict(t, 0.050, 64, 2, link);
  const parallel::Term& contention = p.terms.back();
  ASSERT_EQ(contention.name, "contention");
  EXPECT_NEAR(contention.s, parallel::kContentionPoint * 0.010, 1e-12);
  EXPECT_EQ(contention.low, 0);
  EXPECT_NEAR(contention.high, parallel::kContentionHigh * 0.010, 1e-12);
  EXPECT_NEAR(p.step_s, 0.050 + parallel::kContentionPoint * 0.010, 1e-12) << "the rest is hidden";
  parallel::Link host = link;
  host.overlaps_compute = false;
  EXPECT_EQ(parallel::predict(t, 0.050, 64, 2, host).terms.back().s, 0) << "CPU ranks overlap nothing";
  // The slow end's share is of what the slow end overlaps: at the link's low 40 GB/s the 25 ms
  // all-reduce runs 10-35 ms, 20 ms of it beside backward.
  parallel::Link banded = link;
  banded.busbw_low_gbps = 40;
  EXPECT_NEAR(parallel::predict(t, 0.050, 64, 2, banded).terms.back().high, parallel::kContentionHigh * 0.020, 1e-12);
  // Where devices share a machine backward stretches with the compute (x1.5: the bucket ready at
  // 15 ms, backward ending at 45): at 50 GB/s the 20 ms all-reduce runs 15-35 ms, all of it beside
  // backward.
  parallel::OneDevice one;
  one.timeline = t;
  one.step_s = 0.050;
  one.batch = 64;
  parallel::OneDevice shared = one;
  shared.sharing = parallel::Range::exactly(1.5);
  parallel::Link fifty = link;
  fifty.busbw_gbps = 50;
  EXPECT_NEAR(parallel::predict(shared, 2, fifty).terms.back().s, parallel::kContentionPoint * 0.020, 1e-12);
  // A replay's MPI ranks overlap their all-reduces, but with compute that is only waited out:
  // nothing contends.
  parallel::Cluster replay;
  replay.devices = 2;
  replay.link = link;
  replay.library = parallel::Library::Mpi;
  const parallel::Prediction replayed = parallel::predict(one, replay);
  EXPECT_EQ(replayed.terms.back().s, 0);
  EXPECT_EQ(replayed.terms.back().high, 0);
}

// A band is never narrower than its evidence: the compute term moves by kStepRepeatSpread at the
// least, and by sqrt(kEnoughSteps / steps) times that below kEnoughSteps timed steps.
// A 50-ms step of batch 64 whose one 1-KB bucket is ready 10 ms in, backward ending at 30 ms.
parallel::OneDevice fifty_ms_step() {
  parallel::OneDevice one;
  one.timeline.bucket_ready_s = {0.010};
  one.timeline.bucket_bytes = {1e3};
  one.timeline.backward_end_s = 0.030;
  one.timeline.step_end_s = 0.045;
  one.step_s = 0.050;
  one.batch = 64;
  return one;
}

TEST(Predict, TheComputeBandIsNeverNarrowerThanARepeatedStepMoves) {
  parallel::OneDevice one = fifty_ms_step();
  one.step_times.assign(21, 0.050);  // no spread at all in the steps sampled
  const parallel::Link link = parallel::parse_link("nvlink4");
  for (const long steps : {2L, 5L, 20L, 500L}) {
    one.timeline.steps = steps;
    const parallel::Prediction p = parallel::predict(one, 8, link);
    const parallel::Term& compute = p.terms.front();
    const double half = parallel::kStepRepeatSpread * std::sqrt(20.0 / double(std::min(steps, 20L)));
    EXPECT_NEAR(compute.high, 0.050 * (1 + half), 1e-12) << steps << " steps";
    EXPECT_NEAR(compute.low, 0.050 * (1 - half), 1e-12) << steps << " steps";
  }
  // The whole band of 8 GPUs is then at least 2% of its point wide.
  one.timeline.steps = 500;
  const parallel::Prediction p = parallel::predict(one, 8, link);
  EXPECT_GE((p.samples_per_s_high - p.samples_per_s_low) / p.samples_per_s, 0.02);
}

// A row so noisy that its spread exceeds the step: the compute term's fast end is the fastest
// step seen (scaled to the row's step), never below it and never negative.
TEST(Predict, TheComputeBandOfAVeryNoisyRowEndsAtItsFastestStep) {
  parallel::OneDevice one = fifty_ms_step();
  one.timeline.steps = 500;
  one.step_times = {0.01, 0.02, 0.02, 0.05, 0.05, 0.05, 0.2, 0.2, 0.3, 0.3};  // median 0.05
  const parallel::Prediction p = parallel::predict(one, 8, parallel::parse_link("nvlink4"));
  const parallel::Term& compute = p.terms.front();
  EXPECT_NEAR(compute.low, 0.01 / 0.05 * 0.050, 1e-12);
  EXPECT_NEAR(compute.high, 0.050 * (1 + 0.18 / 0.05), 1e-12)
      << "the interquartile range, 0.02 to 0.2, over the median";
  EXPECT_GT(p.samples_per_s_high, 0);
  EXPECT_TRUE(std::isfinite(p.samples_per_s_high));
  // The times are one window's and the step the median of repetitions: the fastest scales to the step.
  one.step_s = 0.060;
  EXPECT_NEAR(parallel::predict(one, 8, parallel::parse_link("nvlink4")).terms.front().low, 0.01 / 0.05 * 0.060, 1e-12);
}

TEST(Predict, ASweptLinkGivesItsCurveAmongItsRanks) {
  parallel::Link link{
      .name = "measured", .busbw_gbps = 1, .latency_us = 100, .sweep = {{1e5, 1e-3}, {1e6, 3e-3}}, .sweep_ranks = 2};
  EXPECT_NEAR(flat(5.5e5, 2, link).s, 2e-3, 1e-12);  // between the two sizes, on their line
  EXPECT_EQ(flat(5.5e5, 2, link).algorithm, "measured");
  // Below the smallest size: on the line from the fitted latency (2 steps of 100 us) at no bytes to it.
  EXPECT_NEAR(flat(1e4, 2, link).s, 200e-6 + (1e-3 - 200e-6) * 0.1, 1e-12);
  EXPECT_NEAR(flat(2e6, 2, link).s, 3e-3 + 1e6 / 1e9, 1e-12);  // beyond: at the busbw
  // Among other counts of ranks the curve says nothing: the fitted model (6 ring steps, 4 tree).
  EXPECT_NEAR(flat(1e6, 4, link).s, std::min(600e-6 + 1.5e6 / 1e9, 400e-6 + 2e6 / 1e9), 1e-12);
  // A sweep among 4 ranks: beyond its largest size, 2(N-1)/N = 1.5 times the further bytes.
  link.sweep_ranks = 4;
  EXPECT_NEAR(flat(2e6, 4, link).s, 3e-3 + 1.5 * 1e6 / 1e9, 1e-12);
}

TEST(Predict, TheSlowestOfNDrawsIsExpectedHigherTheMoreDevices) {
  EXPECT_DOUBLE_EQ(parallel::expected_max({1, 2}, 1), 1.5);
  EXPECT_DOUBLE_EQ(parallel::expected_max({1, 2}, 2), 5.0 / 3);  // the larger of two uniform draws on [1, 2]
  EXPECT_DOUBLE_EQ(parallel::expected_max({3, 3, 3}, 8), 3);
  EXPECT_DOUBLE_EQ(parallel::expected_max({4}, 8), 4);
  EXPECT_GT(parallel::expected_max({1, 2, 3, 4}, 8), parallel::expected_max({1, 2, 3, 4}, 2));
  EXPECT_LT(parallel::expected_max({1, 2, 3, 4}, 1000), 4);  // never beyond the slowest
}

// The distribution expected_max reads is the one a replay draws from: a uniform draw read off the
// sorted samples with straight lines between (ReplayNetwork::forward). Against many such draws,
// for 21 quantiles with one slow outlier as a saved row has them.
TEST(Predict, TheSlowestOfNIsTheLargestOfNDrawsAsAReplayDrawsThem) {
  std::vector<double> q;
  for (int k = 0; k < 20; ++k) q.push_back(0.27 + 0.001 * k);
  q.push_back(0.35);
  std::mt19937 random(7);
  std::uniform_real_distribution<double> uniform(0, 1);
  const auto draw = [&] {
    const double u = uniform(random) * double(q.size() - 1);
    const std::size_t k = std::min(std::size_t(u), q.size() - 1);
    const double next = q[std::min(k + 1, q.size() - 1)];
    return q[k] + (next - q[k]) * (u - double(k));
  };
  for (int n : {1, 2, 8}) {
    double sum = 0;
    constexpr int kTrials = 200000;
    for (int t = 0; t < kTrials; ++t) {
      double most = 0;
      for (int d = 0; d < n; ++d) most = std::max(most, draw());
      sum += most;
    }
    EXPECT_NEAR(parallel::expected_max(q, n), sum / kTrials, 2e-4) << n << " draws";
  }
}

// A saved step of one 1000-byte bucket, ready at `ready`, backward ending at `backward_end`.
parallel::StepTimeline one_bucket_step(double ready, double backward_end, double step_end) {
  parallel::StepTimeline t;
  t.bucket_bytes = {1000};
  t.bucket_ready_s = {ready};
  t.backward_end_s = backward_end;
  t.step_end_s = step_end;
  t.steps = 1;
  return t;
}

// While a replay waits out its compute it gives the communicator's all-reduces a turn every
// kTurn, until the communicator says none is in flight; each later wait asks again (a hook may
// have started one), and a wait with nothing to ask sleeps through.
TEST(Replay, GivesTheAllReducesInFlightTheirTurnsWhileItWaits) {
  const parallel::StepTimeline t = one_bucket_step(0.02, 0.03, 0.035);
  parallel::ReplayNetwork replay(t, {}, 1);
  int started = 0, turns = 0, turns_when_started = -1;
  std::vector<int> ends;  // the hook's calls after the bucket's: backward's end, then the step's
  replay.set_step_hook([&](int node) {
    if (node < 0) return ends.push_back(node);
    ++started;
    turns_when_started = turns;
  });
  replay.set_progress([&] { return ++turns < 5; });
  replay.forward();
  replay.backward();
  replay.update();
  EXPECT_EQ(started, 1);
  EXPECT_EQ(ends, (std::vector<int>{kBackwardDone, kStepEnqueued}));
  // Five turns up to the bucket's 20 ms (the fifth says none is left in flight), one as the wait
  // for backward's end begins, one as the update's does.
  EXPECT_EQ(turns_when_started, 5);
  EXPECT_EQ(turns, 7);
  // Without a communicator to ask, the same step asks nothing.
  parallel::ReplayNetwork alone(t, {}, 1);
  alone.forward();
  alone.backward();
  alone.update();
  EXPECT_EQ(turns, 7);
}

// The saved device's data-parallel overhead is waited out after the all-reduces, on top of the
// step (a wait ends no earlier than asked: a lower bound, whatever the machine's load).
TEST(Replay, WaitsOutTheSavedDataParallelOverheadAfterTheStep) {
  const parallel::StepTimeline t = one_bucket_step(0.001, 0.002, 0.003);
  parallel::ReplayNetwork replay(t, {}, 1, 0.005);
  const auto start = std::chrono::steady_clock::now();
  replay.forward();
  replay.backward();
  const auto backward = std::chrono::steady_clock::now();
  replay.update();
  const auto end = std::chrono::steady_clock::now();
  EXPECT_GE(std::chrono::duration<double>(backward - start).count(), 0.002);
  EXPECT_GE(std::chrono::duration<double>(end - backward).count(), 0.001 + 0.005 - 1e-4);
  EXPECT_THROW(parallel::ReplayNetwork(t, {}, 1, -0.001), Error);
}

// A saved step of buckets of `bytes`, ready at `ready` (in the order the data-parallel path starts
// them), backward ending at `backward_end`, the step at `step_end`.
parallel::StepTimeline saved_step(std::vector<double> bytes, std::vector<double> ready, double backward_end,
                                  double step_end) {
  parallel::StepTimeline t;
  t.bucket_bytes = std::move(bytes);
  t.bucket_ready_s = std::move(ready);
  t.backward_end_s = backward_end;
  t.step_end_s = step_end;
  t.steps = 1;
  return t;
}

// Bucket k (ready k-th) is node K - k: the segments in node order carry the saved buckets from
// the last ready to the first, each its own bytes (rounded up to whole floats), one after the
// other; backward's hook names the nodes as their buckets become ready, then backward's end.
TEST(Replay, EachSavedBucketIsTheSegmentOfTheNodeThatMakesItReady) {
  parallel::ReplayNetwork replay(saved_step({4000, 1000, 6}, {1e-4, 2e-4, 3e-4}, 3e-4, 4e-4), {}, 1);
  const std::vector<FlatSegment> segments = replay.gradient_segments();
  ASSERT_EQ(segments.size(), 3u);
  std::vector<std::int64_t> counts;
  for (std::size_t k = 0; k < segments.size(); ++k) {
    EXPECT_EQ(segments[k].node, int(k) + 1);
    counts.push_back(segments[k].count);
    if (k > 0) {
      EXPECT_EQ(static_cast<float*>(segments[k].data),
                static_cast<float*>(segments[k - 1].data) + segments[k - 1].count);
    }
  }
  EXPECT_EQ(counts, (std::vector<std::int64_t>{2, 250, 1000}));  // 6 bytes, 1000 bytes, 4000 bytes
  std::vector<int> heard;
  replay.set_step_hook([&](int node) { heard.push_back(node); });
  replay.forward();
  replay.backward();
  EXPECT_EQ(heard, (std::vector<int>{3, 2, 1, kBackwardDone}));
}

// Each step's time is a uniform draw read off the saved quantiles (given in any order) with
// straight lines between them: never outside the fastest and the slowest, between quantiles
// rather than on them, and on average the distribution's mean. (forward() draws; it waits for
// nothing.)
TEST(Replay, DrawsEachStepFromTheSavedQuantilesWithLinesBetween) {
  parallel::ReplayNetwork replay(saved_step({1000}, {0.001}, 0.001, 0.002), {0.003, 0.001, 0.002}, 7);
  constexpr int kDraws = 20000;
  double sum = 0, fastest = 1, slowest = 0;
  int on_a_quantile = 0;
  for (int d = 0; d < kDraws; ++d) {
    replay.forward();
    const double s = replay.last_step_s();
    sum += s;
    fastest = std::min(fastest, s);
    slowest = std::max(slowest, s);
    if (s == 0.001 || s == 0.002 || s == 0.003) ++on_a_quantile;
  }
  EXPECT_GE(fastest, 0.001);
  EXPECT_LE(slowest, 0.003);
  EXPECT_LT(on_a_quantile, kDraws / 100);
  // Uniform on [1, 3] ms: mean 2 ms, standard error 0.58 ms / sqrt(20000) = 4 us.
  EXPECT_NEAR(sum / kDraws, 0.002, 4e-5);
}

// A drawn step longer than the saved one lengthens every phase alike: the buckets' and backward's
// ends and the rest of the step after backward, all scaled from the saved step (10 ms) to the
// drawn one (40 ms). Each wait ends no earlier than asked: lower bounds, whatever the load.
TEST(Replay, ScalesEveryPhaseToTheDrawnStep) {
  parallel::ReplayNetwork replay(saved_step({1000}, {0.002}, 0.005, 0.010), {0.040, 0.040}, 1);
  const auto start = std::chrono::steady_clock::now();
  replay.forward();
  EXPECT_DOUBLE_EQ(replay.last_step_s(), 0.040);
  replay.backward();
  const auto backward = std::chrono::steady_clock::now();
  replay.update();
  const auto end = std::chrono::steady_clock::now();
  EXPECT_GE(std::chrono::duration<double>(backward - start).count(), 4 * 0.005);
  EXPECT_GE(std::chrono::duration<double>(end - backward).count(), 4 * (0.010 - 0.005) - 1e-4);
}

// A saved step that cannot be replayed is refused, saying why: ready times that do not match the
// buckets, a step that takes no time.
TEST(Replay, ATimelineThatCannotBeReplayedIsRefused) {
  try {
    parallel::ReplayNetwork(saved_step({1000, 1000}, {1e-3}, 1e-3, 2e-3), {}, 1);
    ADD_FAILURE() << "a timeline of 2 buckets and 1 ready time was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("replay: a timeline of 2 buckets and 1 ready times"), std::string::npos)
        << e.what();
  }
  try {
    parallel::ReplayNetwork(saved_step({1000}, {0}, 0, 0), {}, 1);
    ADD_FAILURE() << "a step of no time was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("replay: a step that takes no time"), std::string::npos) << e.what();
  }
}

// Every saved bucket's gradients are the replay's own memory, to the last (rounded-up) float, as
// the all-reduces write them; and the thread's timer slack, lifted for the replay's sleeps, is
// given back.
TEST(Replay, EachSegmentIsWritableAndTheTimerSlackIsGivenBack) {
  parallel::ReplayNetwork replay(saved_step({4000, 1000, 6}, {1e-4, 2e-4, 3e-4}, 3e-4, 2e-3), {}, 1);
  for (const FlatSegment& s : replay.gradient_segments()) std::fill_n(static_cast<float*>(s.data), s.count, 1.0f);
  const int slack = ::prctl(PR_GET_TIMERSLACK, 0UL, 0UL, 0UL, 0UL);
  replay.forward();
  replay.backward();
  replay.update();
  EXPECT_EQ(::prctl(PR_GET_TIMERSLACK, 0UL, 0UL, 0UL, 0UL), slack);
}

// The term of `p` named `name`.
const parallel::Term& term_named(const parallel::Prediction& p, const std::string& name) {
  for (const parallel::Term& t : p.terms)
    if (t.name == name) return t;
  throw std::runtime_error("no term " + name);
}

// One device's 50 ms step of 64 samples with two 1 GB buckets, ready at 10 and 30 ms of it;
// backward ends at 30 ms, the update at 45.
parallel::OneDevice two_bucket_step() {
  parallel::OneDevice one;
  one.timeline.bucket_ready_s = {0.010, 0.030};
  one.timeline.bucket_bytes = {1e9, 1e9};
  one.timeline.backward_end_s = 0.030;
  one.timeline.step_end_s = 0.045;
  one.timeline.steps = 4;
  one.step_s = 0.050;
  one.batch = 64;
  return one;
}

// Every term adds to the step, the band holds the point, and the widest term is named.
TEST(Predict, TermsAddUpToTheStepWithABandAndTheDominantTermNamed) {
  parallel::OneDevice one = two_bucket_step();
  one.step_times = {0.048, 0.050, 0.050, 0.052};
  one.dp_overhead = {0.001, 0.0005, 0.0015};
  one.sharing = {1.2, 1.1, 1.3};
  parallel::Link link{.name = "test", .busbw_gbps = 100, .latency_us = 0, .source = "a test"};
  link.busbw_low_gbps = 40;
  const parallel::Prediction p = parallel::predict(one, 2, link);
  ASSERT_EQ(p.terms.size(), 6u);
  double sum = 0;
  for (const parallel::Term& t : p.terms) {
    EXPECT_LE(t.low, t.s + 1e-15) << t.name;
    EXPECT_GE(t.high, t.s - 1e-15) << t.name;
    sum += t.s;
  }
  EXPECT_NEAR(p.step_s, sum, 1e-15);
  EXPECT_NEAR(p.terms[1].s, 0.050 * 0.2, 1e-12);  // sharing: 20% slower compute
  EXPECT_NEAR(p.terms[2].s, 0.050 * (parallel::expected_max(one.step_times, 2) / 0.050 - 1), 1e-12);
  EXPECT_NEAR(p.terms[3].s, 0.001, 1e-15);
  // The buckets' times stretch with the compute (x1.2): ready at 12 and 36 ms, backward ends at
  // 36, each all-reduce 10 ms: the second is exposed 10 ms.
  EXPECT_NEAR(p.exposed_comm_s, 0.010, 1e-12);
  EXPECT_LT(p.samples_per_s_low, p.samples_per_s);
  EXPECT_GT(p.samples_per_s_high, p.samples_per_s);
  EXPECT_NEAR(p.efficiency, 0.050 / p.step_s, 1e-12);
  // The link's slow end (40 GB/s: 25 ms each, 25 exposed against 10 at the fast end) moves the
  // step most: more than sharing's 10 ms.
  EXPECT_EQ(p.dominant, "communication");
}

// Sharing is a slow-down: a measured ratio below 1 (ranks together faster than rank 0 alone, the
// two timings' noise) adds nothing at the point, which stays at 100% efficiency at most, and the
// band keeps it (committed rows had 0.77 and predicted 110%).
TEST(Predict, SharingBelowOneSlowsNothingAtThePoint) {
  parallel::OneDevice one = two_bucket_step();
  one.sharing = {0.77, 0.7, 0.85};
  parallel::Link link{.name = "test", .busbw_gbps = 1e6, .latency_us = 0, .source = "a test"};
  const parallel::Prediction p = parallel::predict(one, 2, link);
  const parallel::Term& sharing = term_named(p, "sharing");
  EXPECT_EQ(sharing.s, 0.0);
  EXPECT_NEAR(sharing.low, 0.050 * (0.7 - 1), 1e-12);
  EXPECT_EQ(sharing.high, 0.0);
  EXPECT_LE(p.efficiency, 1.0);
  EXPECT_GT(p.samples_per_s_high, p.samples_per_s);
}

// A synchronous step waits for the slowest of N: the step stretches by the expected largest of N
// steps over the expected one, both of the distribution a replay draws from (expected_max), not
// over the median step.
TEST(Predict, StragglersStretchTheStepByTheSlowestOfNOverTheMeanStep) {
  parallel::OneDevice one = two_bucket_step();
  // Median 0.05; with straight lines between, uniform on [0.04, 0.05] half the time and on
  // [0.05, 0.08] the other half: mean 0.055.
  one.step_times = {0.04, 0.05, 0.08};
  // The larger of two has density 2u: the integral of Q(u) 2u du, with Q = 0.04 + 0.02u on
  // [0, 1/2] and 0.02 + 0.06u on [1/2, 1].
  const double slower_of_two = (0.04 / 4 + 0.04 / 3 / 8) + (0.02 + 0.04 - 0.02 / 4 - 0.04 / 8);
  EXPECT_NEAR(parallel::expected_max(one.step_times, 1), 0.055, 1e-15);
  EXPECT_NEAR(parallel::expected_max(one.step_times, 2), slower_of_two, 1e-15);
  const parallel::Link link{.name = "test", .busbw_gbps = 100, .latency_us = 0, .source = "a test"};
  EXPECT_NEAR(term_named(parallel::predict(one, 2, link), "stragglers").s, 0.050 * (slower_of_two / 0.055 - 1), 1e-12);
}

// One device is the measured row: sharing, stragglers and the data-parallel path's overhead,
// measured for N, add nothing, and no term is named as moving a band of N.
TEST(Predict, OneDeviceIsTheMeasuredRowWhateverElseWasMeasured) {
  parallel::OneDevice one = two_bucket_step();
  one.step_times = {0.048, 0.050, 0.050, 0.052};
  one.dp_overhead = {0.001, 0.0005, 0.0015};
  one.sharing = {1.2, 1.1, 1.3};
  const parallel::Prediction p = parallel::predict(one, 1, parallel::parse_link("nvlink4"));
  EXPECT_EQ(p.step_s, 0.050);
  EXPECT_EQ(p.efficiency, 1.0);
  for (const parallel::Term& t : p.terms)
    if (t.name != "compute") {
      EXPECT_EQ(t.s, 0) << t.name;
      EXPECT_EQ(t.low, 0) << t.name;
      EXPECT_EQ(t.high, 0) << t.name;
    }
  EXPECT_EQ(p.dominant, "");
}

// N devices on M nodes: M divides N, or the prediction is refused naming both.
TEST(Predict, DevicesThatTheNodesDoNotDivideAreRefused) {
  parallel::Cluster c;
  c.devices = 6;
  c.nodes = 4;
  c.link = parallel::parse_link("nvlink4");
  c.network = parallel::parse_network("ib_ndr400");
  try {
    parallel::predict(two_bucket_step(), c);
    ADD_FAILURE() << "6 devices on 4 nodes predicted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("6 devices on 4 nodes"), std::string::npos) << e.what();
  }
  c.devices = 8;
  EXPECT_NO_THROW(parallel::predict(two_bucket_step(), c));
}

TEST(Predict, CpuRanksCountTheAllReduceExposedWithOverlapAsTheFastEnd) {
  const parallel::OneDevice one = two_bucket_step();
  parallel::Link host{.name = "test", .busbw_gbps = 100, .latency_us = 0, .source = "a test"};
  host.overlaps_compute = false;
  const parallel::Prediction p = parallel::predict(one, 2, host);
  EXPECT_NEAR(p.exposed_comm_s, 0.020, 1e-12);  // both all-reduces after backward
  const parallel::Term& comm = term_named(p, "communication");
  EXPECT_NEAR(comm.low, 0.010, 1e-12);  // overlapped as on a GPU: only the second is exposed
  // Overlapping on the cores backward needs may cost more than one after the other: the slow
  // end counts the 10 ms that could overlap twice.
  EXPECT_NEAR(comm.high, 0.030, 1e-12);
  // One bucket ready 10 ms in, which overlapping would hide whole: 10 ms exposed at the point, none
  // at the fast end, and at the slow end those 10 and the 10 that could have overlapped.
  parallel::OneDevice single = one;
  single.timeline.bucket_ready_s = {0.010};
  single.timeline.bucket_bytes = {1e9};
  const parallel::Prediction q = parallel::predict(single, 2, host);
  const parallel::Term& alone = term_named(q, "communication");
  EXPECT_NEAR(alone.s, 0.010, 1e-12);
  EXPECT_NEAR(alone.low, 0, 1e-12);
  EXPECT_NEAR(alone.high, 0.020, 1e-12);
}

// A swept link's ends are each size's slowest and fastest (sweep_slowest, sweep_fastest).
TEST(Predict, ASweptLinksEndsAreItsSlowestAndItsFastest) {
  parallel::OneDevice one;
  one.timeline.bucket_ready_s = {0.030};
  one.timeline.bucket_bytes = {1e6};
  one.timeline.backward_end_s = 0.030;
  one.timeline.step_end_s = 0.045;
  one.timeline.steps = 1;
  one.step_s = 0.050;
  one.batch = 64;
  parallel::Link link{.name = "measured",
                      .busbw_gbps = 1,
                      .latency_us = 0,
                      .sweep = {{1e5, 1e-3}, {1e6, 3e-3}},
                      .sweep_slowest = {2e-3, 5e-3},
                      .sweep_ranks = 2};
  const parallel::Prediction p = parallel::predict(one, 2, link);
  const parallel::Term& comm = term_named(p, "communication");
  EXPECT_NEAR(comm.s, 3e-3, 1e-12);
  EXPECT_NEAR(comm.high, 5e-3, 1e-12);
  // The fast end: each size's fastest, at the fast bus bandwidth (here the same).
  EXPECT_NEAR(comm.low, 3e-3, 1e-12) << "without fastest times, the curve's own";
  link.sweep_fastest = {0.5e-3, 2e-3};
  EXPECT_NEAR(term_named(parallel::predict(one, 2, link), "communication").low, 2e-3, 1e-12);
  EXPECT_NEAR(flat(5.5e5, 2, link, parallel::End::Fast).s, 1.25e-3, 1e-12) << "on the line between the fastest";
}

// A measured link over threads: each size swept, its time between its band's ends; small sizes
// (issued as a step issues them) carry a band of their own, the latency's.
TEST(Predict, AMeasuredLinksSizesLieInsideTheirBands) {
  auto comms = thread_comms(2);
  std::vector<parallel::Link> links(2);
  on_threads(2, [&](int r) { links[std::size_t(r)] = parallel::measure_link(*comms[std::size_t(r)], 1 << 20); });
  const parallel::Link& link = links[0];
  ASSERT_EQ(link.sweep.size(), 7u) << "256 B to 1 MiB, by fours";
  ASSERT_EQ(link.sweep_slowest.size(), link.sweep.size());
  ASSERT_EQ(link.sweep_fastest.size(), link.sweep.size());
  EXPECT_EQ(link.sweep.front().first, 256);
  for (std::size_t k = 0; k < link.sweep.size(); ++k) {
    const double t = link.sweep[k].second;
    EXPECT_GT(t, 0) << link.sweep[k].first;
    EXPECT_LE(link.sweep_fastest[k], t) << link.sweep[k].first;
    EXPECT_GE(link.sweep_slowest[k], t) << link.sweep[k].first;
    EXPECT_EQ(links[1].sweep[k].second, t) << "every rank keeps the slowest rank's figures";
  }
  EXPECT_LE(link.low_latency(), link.latency_us);
  EXPECT_GE(link.high_latency(), link.latency_us);
  EXPECT_GT(link.busbw_gbps, 0);
  EXPECT_EQ(link.sweep_ranks, 2);
  EXPECT_FALSE(link.overlaps_compute) << "host buffers: the all-reduce runs on the cores that compute";
}

// The fit of an exact sweep gives back its link: the latency per step over the ring's 2(N-1)
// steps (2 log2 N under a binomial tree), the bus bandwidth, and bands from the sweep's slowest
// and fastest figures: a size faster than the line widens the fast end, a slower one the slow.
TEST(Predict, TheLinkFitGivesBackTheLatencyAndBusBandwidthOfAnExactSweep) {
  constexpr double kLatencyUs = 5, kBusbwGbps = 10;
  for (const bool tree : {false, true}) {
    const int n = 4;
    const double steps = tree ? 4 : 6;  // 2 log2 4, 2 (4 - 1)
    parallel::Link link{.name = "measured"};
    for (double bytes = 256; bytes <= double(16 << 20); bytes *= 4) {
      double t = steps * kLatencyUs * 1e-6 + parallel::allreduce_bus_factor(n) * bytes / (kBusbwGbps * 1e9);
      if (bytes == double(4 << 20)) t *= 0.8;  // one size faster than the line
      link.sweep.emplace_back(bytes, t);
      link.sweep_slowest.push_back(t * 1.2);
      link.sweep_fastest.push_back(t * 0.9);
    }
    parallel::fit_link(link, n, tree);
    EXPECT_NEAR(link.latency_us, kLatencyUs, 0.01 * kLatencyUs) << "tree " << tree;
    EXPECT_NEAR(link.low_latency(), 0.9 * link.latency_us, 1e-9) << "tree " << tree;
    EXPECT_NEAR(link.high_latency(), 1.2 * link.latency_us, 1e-9) << "tree " << tree;
    EXPECT_NEAR(link.busbw_gbps, kBusbwGbps, 0.05 * kBusbwGbps) << "tree " << tree;
    EXPECT_LT(link.low_busbw(), 0.9 * link.busbw_gbps) << "the slowest repetitions widen the slow end";
    EXPECT_GT(link.high_busbw(), 1.15 * link.busbw_gbps) << "the size faster than the line widens the fast end";
    EXPECT_EQ(link.tree_below, tree);
  }
}

// A sweep that saw no bandwidth limit (every size as fast as 256 bytes, or one a hair slower) fits
// the highest bus bandwidth --link takes, band included, so that its figures, which a row gives
// after "as figures:", are taken back by --link (the fit said 1e6 GB/s, and --link refused it).
TEST(Predict, ALinkFitWithoutABandwidthLimitGivesFiguresLinkTakesBack) {
  for (const double slower : {0.0, 1e-12}) {
    parallel::Link link{.name = "measured"};
    for (double bytes = 256; bytes <= double(16 << 20); bytes *= 4) {
      const double t = 30e-6 + (bytes >= double(1 << 20) ? slower : 0);
      link.sweep.emplace_back(bytes, t);
      link.sweep_slowest.push_back(t);
      link.sweep_fastest.push_back(t);
    }
    parallel::fit_link(link, 4, false);
    EXPECT_EQ(link.busbw_gbps, 1e5) << slower;
    EXPECT_EQ(link.high_busbw(), 1e5) << slower;
    EXPECT_NEAR(link.latency_us, 5, 1e-9) << "30 us over 6 ring steps";
    const std::string figures = parallel::link_figures(link);
    try {
      EXPECT_EQ(parallel::parse_link(figures).busbw_gbps, 1e5) << figures;
    } catch (const InputError& e) {
      ADD_FAILURE() << figures << " refused: " << e.what();
    }
  }
}

// The fit's band from the sizes of 1 MiB and up, 1 MiB included: the slow end each size's ring
// bytes over its slowest repetition less the latency, the fast end over its median, so that
// repetitions faster than their median widen nothing.
TEST(Predict, TheLinkFitsBandIsTheSlowestRepetitionsAndTheMediansFromOneMiB) {
  constexpr double kLatencyS = 6 * 5e-6, kBusbw = 10e9;  // 6 ring steps of 5 us among 4
  parallel::Link link{.name = "measured"};
  for (double bytes = 256; bytes <= double(16 << 20); bytes *= 4) {
    const double t = kLatencyS + 1.5 * bytes / kBusbw;
    link.sweep.emplace_back(bytes, t);
    link.sweep_slowest.push_back(bytes == double(1 << 20) ? 2 * t : t);  // 1 MiB's slowest alone is slow
    link.sweep_fastest.push_back(0.5 * t);
  }
  parallel::fit_link(link, 4, false);
  // Every median on the line: the fast end is the fit's own, to within the 256 bytes' share of
  // the smallest of those sizes (1 in 4096).
  EXPECT_NEAR(link.high_busbw(), link.busbw_gbps, 1e-3 * link.busbw_gbps);
  // The latency is the 256 bytes' time.
  const double ring_bytes = 1.5 * double(1 << 20), intercept = kLatencyS + 1.5 * 256 / kBusbw;
  EXPECT_NEAR(link.low_busbw(), ring_bytes / (2 * (kLatencyS + ring_bytes / kBusbw) - intercept) * 1e-9, 1e-9);
}

// Between two swept sizes the curve is a line; from 1 MiB, where the fit's bus bandwidth band was
// measured, the band also holds what those figures allow where that is wider. Below, the curve's.
TEST(Predict, ASweptLinksBandIsTheWiderOfItsCurvesAndItsFits) {
  parallel::Link link{.name = "measured",
                      .busbw_gbps = 1,
                      .latency_us = 0,
                      .busbw_low_gbps = 0.8,
                      .busbw_high_gbps = 1.25,
                      .sweep = {{1e5, 1e-4}, {1e6, 1e-3}, {1e7, 1e-2}},
                      .sweep_slowest = {1.1e-4, 1.1e-3, 1.1e-2},
                      .sweep_ranks = 2};
  EXPECT_NEAR(flat(5.5e6, 2, link).s, 5.5e-3, 1e-12);
  EXPECT_NEAR(flat(5.5e6, 2, link, parallel::End::Slow).s, 5.5e6 / 0.8e9, 1e-12) << "the fit's low bus bandwidth";
  EXPECT_NEAR(flat(5.5e6, 2, link, parallel::End::Fast).s, 5.5e6 / 1.25e9, 1e-12);
  EXPECT_EQ(flat(5.5e6, 2, link, parallel::End::Slow).algorithm, "measured");
  EXPECT_NEAR(flat(5.5e5, 2, link, parallel::End::Slow).s, 6.05e-4, 1e-12) << "below 1 MiB: the curve's";
  EXPECT_NEAR(flat(5.5e5, 2, link, parallel::End::Fast).s, 5.5e-4 / 1.25, 1e-12);
  EXPECT_NEAR(flat(double(1 << 20), 2, link, parallel::End::Slow).s, double(1 << 20) / 0.8e9, 1e-12)
      << "from 1 MiB itself";
  link.busbw_low_gbps = 0.95;
  EXPECT_NEAR(flat(5.5e6, 2, link, parallel::End::Slow).s, 6.05e-3, 1e-12) << "the slowest repetitions, wider";
  // The fast end likewise: the fastest repetitions (at the fit's high bus bandwidth), where quicker.
  link.sweep_fastest = {0.5e-4, 0.5e-3, 0.5e-2};
  EXPECT_NEAR(flat(5.5e6, 2, link, parallel::End::Fast).s, 2.75e-3 / 1.25, 1e-12);
}

// Every preset's latency is the ring/Simple step of NCCL's tuning model for its hardware
// (hwLat in NVIDIA/nccl src/graph/tuning.cc: NVLink 3.4 us, PCIe 5.7, network 14), as presets.cpp
// says; the presets are those --help lists, in its order, and 10gbe's bus bandwidth is scaled
// from 25gbe's as its source says.
TEST(Predict, EveryPresetsLatencyIsNcclsRingStepForItsHardware) {
  const auto latency = [](parallel::Hw hw) {
    return hw == parallel::Hw::NVLink ? 3.4 : hw == parallel::Hw::PCIe ? 5.7 : hw == parallel::Hw::Net ? 14 : -1;
  };
  for (const auto* presets : {&parallel::link_presets(), &parallel::network_presets()})
    for (const parallel::Link& l : *presets) EXPECT_EQ(l.latency_us, latency(l.hw)) << l.name;
  std::vector<std::string> links, networks;
  for (const parallel::Link& l : parallel::link_presets()) links.push_back(l.name);
  for (const parallel::Link& l : parallel::network_presets()) networks.push_back(l.name);
  EXPECT_EQ(links,
            (std::vector<std::string>{"nvlink4", "nvlink4_nvls", "nvlink3", "pcie3", "pcie4", "pcie5", "ib_ndr400"}));
  EXPECT_EQ(networks, (std::vector<std::string>{"ib_ndr400", "100gbe", "25gbe", "10gbe"}));
  // 10 Gb Ethernet has no published figure: 25gbe's share of its line rate, of 10 Gb/s.
  EXPECT_NEAR(parallel::parse_network("10gbe").busbw_gbps, parallel::parse_network("25gbe").busbw_gbps * 10 / 25,
              1e-12);
  EXPECT_EQ(parallel::parse_link("nvlink3").hw, parallel::Hw::NVLink);
  EXPECT_EQ(parallel::parse_link("pcie4").hw, parallel::Hw::PCIe);
}

TEST(Predict, LinksByNameByFiguresAndRefused) {
  EXPECT_EQ(parallel::parse_link("nvlink4").busbw_gbps, 370);
  for (const auto* presets : {&parallel::link_presets(), &parallel::network_presets()})
    for (const parallel::Link& l : *presets) {
      EXPECT_GT(l.busbw_gbps, 0) << l.name;
      EXPECT_FALSE(l.source.empty()) << l.name;
      EXPECT_LE(l.low_busbw(), l.busbw_gbps) << l.name;
      EXPECT_EQ(l.busbw_low_gbps > 0, !l.low_source.empty()) << l.name << ": a low figure says where it comes from";
    }
  // Eight GPUs on PCIe 5 usually cross a switch or a socket: what people measure there.
  EXPECT_EQ(parallel::parse_link("pcie5").low_busbw(), 28);
  const parallel::Link custom = parallel::parse_link("100,20");
  EXPECT_EQ(custom.name, "custom");
  EXPECT_EQ(custom.busbw_gbps, 100);
  EXPECT_EQ(custom.latency_us, 20);
  EXPECT_EQ(parallel::parse_link("12.5").latency_us, 0);
  EXPECT_EQ(parallel::parse_link("measured").name, "measured");
  for (const char* bad : {"", "nvlink9", "-1", "100,", "100,x", "0", "inf"})
    EXPECT_THROW(parallel::parse_link(bad), InputError) << bad;
  // Figures beyond any link's predict nothing finite (1e308 GB/s and us: 0 samples/s, a NaN band):
  // refused, saying the range.
  for (const char* beyond : {"1e308,1e308", "1e6", "1e-7", "100,2e6", "100:50-2e5", "100,20:10-2e6"}) try {
      parallel::parse_link(beyond);
      ADD_FAILURE() << "taken: " << beyond;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("1e-06 to 100000 GB/s, 0 to 1e+06 us"), std::string::npos) << e.what();
    }
  EXPECT_EQ(parallel::parse_link("100000,1000000").busbw_gbps, 1e5) << "the ends are taken";
}

TEST(Predict, NetworksByNameByFiguresWithTheirNics) {
  const parallel::Link dgx = parallel::parse_network("ib_ndr400x8");
  EXPECT_EQ(dgx.name, "ib_ndr400x8");
  EXPECT_EQ(dgx.nics, 8);
  EXPECT_EQ(dgx.busbw_gbps, 45) << "per NIC";
  EXPECT_EQ(parallel::parse_network("100gbe").nics, 1);
  const parallel::Link custom = parallel::parse_network("10,50");
  EXPECT_EQ(custom.busbw_gbps, 10);
  EXPECT_EQ(custom.latency_us, 50);
  EXPECT_EQ(custom.hw, parallel::Hw::None);
  EXPECT_EQ(parallel::parse_network("12.5,5x2").nics, 2);
  EXPECT_EQ(parallel::parse_network("10x64").nics, 64) << "up to 64 NICs a node";
  for (const char* bad :
       {"", "ib_ndr800", "10,50x", "10,50x0", "x8", "nvlink4", "10x65", "10x4294967298", "1e308,1e308", "10,1e7x2"})
    EXPECT_THROW(parallel::parse_network(bad), InputError) << bad;
}

// Figures with their bands, VALUE:LOW-HIGH: the band's ends move the prediction's, and a link's
// figures, written back the same way, give the same link (a measured link predicted elsewhere).
TEST(Predict, FiguresCarryTheirBandAndRoundTrip) {
  const parallel::Link l = parallel::parse_network("0.46:0.43-0.5,233:180-250e0x2");
  EXPECT_EQ(l.busbw_gbps, 0.46);
  EXPECT_EQ(l.low_busbw(), 0.43);
  EXPECT_EQ(l.high_busbw(), 0.5);
  EXPECT_EQ(l.latency_us, 233);
  EXPECT_EQ(l.low_latency(), 180);
  EXPECT_EQ(l.high_latency(), 250);
  EXPECT_EQ(l.nics, 2);
  EXPECT_FALSE(l.low_source.empty()) << "a band says where it comes from";
  const parallel::Link plain = parallel::parse_link("100,20");
  EXPECT_EQ(plain.low_latency(), 20);
  EXPECT_EQ(plain.high_latency(), 20);
  EXPECT_EQ(parallel::link_figures(plain), "100,20");
  EXPECT_TRUE(plain.low_source.empty()) << "no band given, none said to be";
  EXPECT_EQ(parallel::parse_link("1e-3:5e-4-2e-3,0").low_busbw(), 5e-4);  // exponents are not dashes
  EXPECT_EQ(parallel::parse_link("1E-3:5E-4-2E-3,0").low_busbw(), 5e-4);
  // A band on one side of its figure is written back with it.
  EXPECT_EQ(parallel::link_figures(parallel::parse_link("10:8-10,5")), "10:8-10,5");
  for (const char* bad : {"10:11-12", "10:8-9", "10:8", "10:8-", "10,5:6-7", "10,5:-1-6", "10:0-11"})
    EXPECT_THROW(parallel::parse_link(bad), InputError) << bad;

  parallel::Link measured{.name = "measured", .busbw_gbps = 0.5, .latency_us = 300};
  measured.busbw_low_gbps = 0.45;
  measured.busbw_high_gbps = 0.52;
  measured.latency_low_us = 250;
  measured.latency_high_us = 340;
  EXPECT_EQ(parallel::link_figures(measured), "0.5:0.45-0.52,300:250-340");
  const parallel::Link again = parallel::parse_link(parallel::link_figures(measured));
  EXPECT_EQ(again.low_busbw(), 0.45);
  EXPECT_EQ(again.high_busbw(), 0.52);
  EXPECT_EQ(again.low_latency(), 250);
  EXPECT_EQ(again.high_latency(), 340);

  // Over two levels of such links, a latency-bound all-reduce's band is the latencies' band.
  parallel::Cluster c;
  c.devices = 8;
  c.nodes = 4;
  c.link = again;
  c.network = parallel::parse_network("0.05:0.04-0.06,400:300-500");
  const double point = parallel::all_reduce(1024, c, parallel::End::Point).s;
  const double fast = parallel::all_reduce(1024, c, parallel::End::Fast).s;
  const double slow = parallel::all_reduce(1024, c, parallel::End::Slow).s;
  EXPECT_LT(fast, point * 0.85);
  EXPECT_GT(slow, point * 1.15);
}

// The recorder sees the buckets ReplicaNetwork would plan, ready in backward order, each no
// later than backward's end and the step's end.
TEST(Timeline, RecordsEveryBucketInOrderOnTheCpu) {
  const ModelSpec spec = models::workload("lenet5", "cifar10").spec;
  auto net = cpu_net(spec, 8, OptimizerConfig{});
  const std::size_t bucket_bytes = std::size_t(4) << 10;
  const auto planned = parallel::plan_buckets(net->gradient_segments(), bucket_bytes);
  testing_support::LargeBatch data(spec, 8, 1);
  std::mt19937 rng(1);
  {
    parallel::TimelineRecorder recorder(*net, bucket_bytes, nullptr, /*every_s=*/0);
    for (int s = 0; s < 3; ++s) {
      data.draw(rng);
      net->set_batch(data.whole());
      recorder.before_step();
      StepTimes t;
      net->train_step(t);
      recorder.after_step();
    }
    const parallel::StepTimeline t = recorder.timeline();
    EXPECT_EQ(t.steps, 3);
    ASSERT_EQ(t.bucket_ready_s.size(), planned.size());
    ASSERT_GT(planned.size(), 1u);
    double bytes = 0;
    for (const auto& b : planned) bytes += double(b.count) * 4;
    EXPECT_DOUBLE_EQ(t.gradient_bytes(), bytes);
    for (std::size_t k = 0; k < t.bucket_ready_s.size(); ++k) {
      EXPECT_GT(t.bucket_ready_s[k], 0) << k;
      if (k > 0) {
        EXPECT_GE(t.bucket_ready_s[k], t.bucket_ready_s[k - 1]) << k;
      }
    }
    EXPECT_DOUBLE_EQ(t.backward_end_s, t.bucket_ready_s.back());
    EXPECT_LE(t.backward_end_s, t.step_end_s);
  }
  // The recorder took its hook away: training goes on without it.
  StepTimes t;
  net->train_step(t);
}

}  // namespace
}  // namespace tb
