// Data parallelism across MPI ranks, run by ctest as `mpirun -np 2 test_mpi`: the MPI
// communicator's collectives, and two CPU replicas on half batches against one network on the
// whole batch (computed by every rank on its own, without communication).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "engine/core/error.hpp"
#include "engine/cpu/network.hpp"
#include "engine/parallel/mpi_comm.hpp"
#include "engine/parallel/replica.hpp"
#include "models/models.hpp"
#include "tests/replica_checks.hpp"

namespace tb {
namespace {

TEST(MpiComm, CollectivesAgreeAcrossRanks) {
  auto comm = parallel::make_mpi_comm(60);
  const int r = comm->rank(), n = comm->size();
  ASSERT_GE(n, 2) << "run under mpirun -np 2 (ctest does)";
  std::vector<float> v(777);
  for (std::size_t k = 0; k < v.size(); ++k) v[k] = float(r * 100 + int(k));
  comm->start_all_reduce_mean(v.data(), i64(v.size()), ElemType::F32);
  comm->wait();
  const float mean_r = float(n - 1) / 2;
  for (std::size_t k = 0; k < v.size(); ++k) ASSERT_FLOAT_EQ(v[k], mean_r * 100 + float(k)) << k;
  EXPECT_DOUBLE_EQ(comm->max(double(r)), double(n - 1));
  EXPECT_DOUBLE_EQ(comm->min(double(r)), 0.0);
  std::vector<float> b(4, float(r));
  comm->broadcast(b.data(), 4, ElemType::F32, n - 1);
  EXPECT_EQ(b, std::vector<float>(4, float(n - 1)));
  comm->barrier();
}

// Each rank trains its share of every batch; the weights must equal (to fp32 summation order,
// 1e-4 relative after 4 steps) those of one network trained on the whole batches.
TEST(MpiDataParallel, RanksOnShardsMatchOneNetworkOnTheWholeBatch) {
  const ModelSpec spec = models::workload("mlp", "mnist").spec;
  OptimizerConfig sgd;
  sgd.lr = 0.05;
  auto comm = parallel::make_mpi_comm(60);
  const int r = comm->rank(), n = comm->size();
  const i64 shard = 8, batch = shard * n, sample = 784;
  parallel::ReplicaNetwork replica(
      std::make_unique<cpu::CpuNetwork>(
          spec, cpu::NetworkConfig{.batch = shard, .optimizer = sgd, .seed = 11 + std::uint64_t(r)}),
      std::move(comm), std::size_t(512) << 10);
  cpu::CpuNetwork whole(spec, cpu::NetworkConfig{.batch = batch, .optimizer = sgd, .seed = 11});
  testing_support::copy_params(spec, batch, replica, whole);  // rank 0's, broadcast
  std::mt19937 rng(5);                                        // the same batches on every rank
  std::normal_distribution<float> pixel(0.0f, 1.0f);
  std::uniform_int_distribution<int> label(0, 9);
  for (int step = 0; step < 4; ++step) {
    std::vector<float> x(static_cast<std::size_t>(batch * sample));
    std::vector<std::int32_t> y(static_cast<std::size_t>(batch));
    for (float& v : x) v = pixel(rng);
    for (auto& v : y) v = label(rng);
    StepTimes t;
    whole.set_batch(BatchView{x.data(), y.data(), nullptr});
    whole.train_step(t);
    replica.set_batch(BatchView{x.data() + r * shard * sample, y.data() + r * shard, nullptr});
    replica.train_step(t);
  }
  replica.check_weights_agree();
  testing_support::expect_params_match(spec, batch, replica, whole, 1e-4, "rank " + std::to_string(r));
  EXPECT_GT(replica.stats().bytes, 0);
  EXPECT_GT(replica.buckets().size(), 1u);
}

}  // namespace
}  // namespace tb

int main(int argc, char** argv) {
  tb::parallel::MpiSession mpi;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
