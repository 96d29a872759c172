// Data parallelism across MPI ranks, run by ctest as `mpirun -np 2 test_mpi`: the MPI
// communicator's collectives, and mpi:2's exact reference: CPU replicas on shards against one
// network on the whole batch (computed by every rank on its own, without communication).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "engine/core/error.hpp"
#include "engine/cpu/network.hpp"
#include "engine/parallel/mpi_comm.hpp"
#include "engine/parallel/replica.hpp"
#include "models/models.hpp"
#include "tests/large_batch.hpp"
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

// Each rank trains its shard of every batch; the weights must equal (to fp32 summation order,
// 1e-4 relative after 4 SGD steps) those of one network trained on the whole batches, which
// every rank computes on its own without communication (tests/large_batch.hpp).
TEST(MpiDataParallel, EqualsLargeBatch) {
  struct Case {
    const char *model, *dataset;
    i64 shard;
  };
  for (const Case& c : {Case{"mlp", "mnist", 8}, Case{"lenet5", "cifar10", 4}, Case{"lstm", "sine", 5}}) {
    SCOPED_TRACE(c.model);
    const ModelSpec spec = models::workload(c.model, c.dataset).spec;
    OptimizerConfig sgd;
    sgd.lr = 0.05;
    auto comm = parallel::make_mpi_comm(60);
    const int r = comm->rank(), n = comm->size();
    testing_support::LargeBatch data(spec, c.shard, n);
    parallel::ReplicaNetwork replica(
        std::make_unique<cpu::CpuNetwork>(
            spec, NetworkOptions{.batch = c.shard, .optimizer = sgd, .seed = 11 + std::uint64_t(r)}),
        std::move(comm), std::size_t(4) << 10);
    cpu::CpuNetwork whole(spec, NetworkOptions{.batch = data.batch(), .optimizer = sgd, .seed = 11});
    testing_support::copy_params(spec, data.batch(), replica, whole);  // rank 0's, broadcast
    std::mt19937 rng(5);                                               // the same batches on every rank
    for (int step = 0; step < 4; ++step) {
      data.draw(rng);
      StepTimes t;
      whole.set_batch(data.whole());
      whole.train_step(t);
      replica.set_batch(data.shard(r));
      replica.train_step(t);
    }
    replica.check_weights_agree();
    testing_support::expect_params_match(spec, data.batch(), replica, whole, 1e-4, "rank " + std::to_string(r));
    EXPECT_GT(replica.stats().bytes, 0);
  }
}

}  // namespace
}  // namespace tb

int main(int argc, char** argv) {
  tb::parallel::MpiSession mpi;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
