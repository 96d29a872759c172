// Data parallelism across MPI ranks, run by ctest as `mpirun -np 2 test_mpi`: the MPI
// communicator's collectives, and mpi:2's exact reference: CPU replicas on shards against one
// network on the whole batch (computed by every rank on its own, without communication); with a
// GPU, the same for gpu:2's ranks as emulated nodes sharing it over NCCL (skipped, saying why,
// without one).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "engine/core/error.hpp"
#include "engine/cpu/network.hpp"
#ifdef TB_HAVE_CUDA
#include "engine/core/error.hpp"
#include "engine/cuda/device.hpp"
#include "engine/cuda/network.hpp"
#include "engine/parallel/nccl_comm.hpp"
#endif
#include "engine/parallel/mpi_comm.hpp"
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include "engine/parallel/replica.hpp"
#include "models/models.hpp"
#include "tests/large_batch.hpp"
#include "tests/replica_checks.hpp"

namespace tb {
namespace {

// What `f` threw as a tb::Error, or "(nothing thrown)": a refusal's words to look for.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

// Four SGD steps of the same batches on every rank: the whole batch on `whole`, rank r's shard on
// its replica.
void train_alike(testing_support::LargeBatch& data, Network& whole, Network& replica, int r) {
  std::mt19937 rng(5);
  for (int step = 0; step < 4; ++step) {
    data.draw(rng);
    StepTimes t;
    whole.set_batch(data.whole());
    whole.train_step(t);
    replica.set_batch(data.shard(r));
    replica.train_step(t);
  }
}

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

// The value of Open MPI's coll_libnbc_iallreduce_algorithm now, read through MPI_T; -1 where there
// is none (another MPI, Open MPI before 4.1).
int nbc_allreduce_algorithm() {
  int provided = 0, index = 0, count = 0, value = -1;
  if (MPI_T_init_thread(MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) return -1;
  MPI_T_cvar_handle handle = MPI_T_CVAR_HANDLE_NULL;
  if (MPI_T_cvar_get_index("coll_libnbc_iallreduce_algorithm", &index) == MPI_SUCCESS &&
      MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) == MPI_SUCCESS) {
    if (MPI_T_cvar_read(handle, &value) != MPI_SUCCESS) value = -1;
    MPI_T_cvar_handle_free(&handle);
  }
  MPI_T_finalize();
  return value;
}

// On both sides of kMpiRingFromBytes the mean is exact, and the communicator asked Open MPI for
// the algorithm it names: its ring (libnbc's 1) for 64 KiB and more, its binomial tree (2) below.
// Where the user chose one in OMPI_MCA_coll_libnbc_iallreduce_algorithm (ctest's mpi_user_algorithm
// runs this so), the communicator leaves it, and says it chose none.
TEST(MpiComm, AllReducesRingFrom64KiBAndTreeBelowAgree) {
  auto comm = parallel::make_mpi_comm(60);
  const int r = comm->rank(), n = comm->size();
  const char* users = std::getenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm");
  const bool chooses = users == nullptr && nbc_allreduce_algorithm() >= 0;
  if (chooses) {
    EXPECT_NE(comm->algorithms().find("ring from 64 KiB"), std::string::npos) << comm->algorithms();
  }
  if (users) {
    EXPECT_EQ(comm->algorithms(), "") << "the user chose the algorithm";
  }
  for (const i64 count : {i64(16383), i64(16384), i64(250001)}) {
    std::vector<float> v(static_cast<std::size_t>(count));
    for (std::size_t k = 0; k < v.size(); ++k) v[k] = float(r * 1000 + int(k % 1000));
    comm->start_all_reduce_mean(v.data(), count, ElemType::F32);
    comm->wait();
    const float mean_r = float(n - 1) / 2;
    for (std::size_t k = 0; k < v.size(); ++k)
      ASSERT_FLOAT_EQ(v[k], mean_r * 1000 + float(k % 1000)) << count << " " << k;
    if (chooses) {
      EXPECT_EQ(nbc_allreduce_algorithm(), count * 4 >= 65536 ? 1 : 2) << count << " floats";
    }
    if (users && nbc_allreduce_algorithm() >= 0) {
      EXPECT_EQ(nbc_allreduce_algorithm(), std::atoi(users)) << count << " floats: the user's choice was changed";
    }
  }
}

// progress() alone moves an all-reduce to its end (the turns a replay gives it while it waits
// out the compute): once it says none is in flight, wait() has nothing left to do.
TEST(MpiComm, ProgressAloneFinishesAnAllReduce) {
  auto comm = parallel::make_mpi_comm(60);
  const int r = comm->rank(), n = comm->size();
  EXPECT_FALSE(comm->progress()) << "nothing started";
  std::vector<float> v(std::size_t(1) << 20, float(r));  // 4 MiB: Open MPI's ring, many rounds
  comm->start_all_reduce_mean(v.data(), i64(v.size()), ElemType::F32);
  while (comm->progress()) {
  }
  // The sums are in before wait(), which only divides them by N.
  const float sum = float(n * (n - 1) / 2);
  EXPECT_FLOAT_EQ(v.front(), sum);
  EXPECT_FLOAT_EQ(v.back(), sum);
  comm->wait();
  EXPECT_FLOAT_EQ(v.front(), sum / float(n));
  EXPECT_FLOAT_EQ(v.back(), sum / float(n));
}

// keep_sums(): wait() leaves the sums (a replay's buffers, whose mean nobody reads).
TEST(MpiComm, KeepSumsLeavesTheSums) {
  auto comm = parallel::make_mpi_comm(60);
  const int r = comm->rank(), n = comm->size();
  comm->keep_sums();
  std::vector<float> v(1000, float(r + 1));
  comm->start_all_reduce_mean(v.data(), i64(v.size()), ElemType::F32);
  comm->wait();
  EXPECT_FLOAT_EQ(v.front(), float(n * (n + 1) / 2));
  EXPECT_FLOAT_EQ(v.back(), float(n * (n + 1) / 2));
}

// What the communicator refuses before any rank communicates, each error naming the fix: a
// deadline that is no positive number of seconds, 16-bit elements to all-reduce (MPI replicas are
// fp32), a negative count, a broadcast from a rank that does not exist. The communicator stays
// usable after each.
TEST(MpiCommRefusals, AreErrorsNamingTheFixAndLeaveTheCommunicatorUsable) {
  for (const double bad : {0.0, -1.0}) {
    const std::string error = error_of([&] { parallel::make_mpi_comm(bad); });
    EXPECT_NE(error.find("pass a positive number of seconds"), std::string::npos) << bad << " s: " << error;
  }
  auto comm = parallel::make_mpi_comm(60);
  const int r = comm->rank(), n = comm->size();
  std::vector<std::uint16_t> half(8, 1);
  const std::string half_error = error_of([&] { comm->start_all_reduce_mean(half.data(), 8, ElemType::BF16); });
  EXPECT_NE(half_error.find("MPI replicas are fp32 (run CPU replicas in fp32"), std::string::npos) << half_error;
  std::vector<float> v(4, float(r));
  EXPECT_THROW(comm->start_all_reduce_mean(v.data(), -1, ElemType::F32), Error);
  EXPECT_THROW(comm->broadcast(v.data(), -1, ElemType::F32, 0), Error);
  for (const int root : {-1, n}) {
    const std::string error = error_of([&] { comm->broadcast(v.data(), 4, ElemType::F32, root); });
    EXPECT_NE(error.find(fmt::format("broadcast from rank {} of {} ranks", root, n)), std::string::npos) << error;
  }
  comm->start_all_reduce_mean(v.data(), 4, ElemType::F32);
  comm->wait();
  EXPECT_EQ(v, std::vector<float>(4, float(n - 1) / 2));
}

// Broadcast takes 16-bit elements as their bits (a replica's bf16 parameters): exactly `count`
// of them, the memory after them left as it was; and zero elements, of either collective, is
// nothing to do.
TEST(MpiCommBroadcast, MovesSixteenBitElementsAsTheirBitsAndNoMore) {
  auto comm = parallel::make_mpi_comm(60);
  const int r = comm->rank(), n = comm->size();
  std::vector<std::uint16_t> bits(10, std::uint16_t(0xAB00 + r));
  for (std::size_t k = 0; k < 5; ++k) bits[k] = std::uint16_t(r == n - 1 ? 0x3F80 + k : 0);
  comm->broadcast(bits.data(), 5, ElemType::BF16, n - 1);
  for (std::size_t k = 0; k < 5; ++k) EXPECT_EQ(bits[k], 0x3F80 + k) << k;
  for (std::size_t k = 5; k < 10; ++k) EXPECT_EQ(bits[k], 0xAB00 + r) << k << ": past the broadcast's elements";
  std::vector<float> none(1, float(r));
  comm->broadcast(none.data(), 0, ElemType::F32, 0);
  comm->start_all_reduce_mean(none.data(), 0, ElemType::F32);
  comm->wait();
  EXPECT_EQ(none[0], float(r));
}

// A rank whose peer never comes is not left waiting: each kind of wait (a barrier, an
// all-reduce's wait(), a max-reduction) throws once the communicator's timeout has passed,
// naming the rank, the seconds and what it waited in; after that the communicator refuses every
// collective (its own is still in flight, and the next would pair with the wrong one on the other
// rank), saying so; releasing it is safe while its collective is still in flight (rank 0 crashed
// in Open MPI once rank 1 came, had it freed it). No clock is read here: rank 1 joins only after
// rank 0 has given up, over another communicator, and then completes the abandoned collective so
// that nothing stays in flight.
TEST(MpiCommDeadline, AWaitPastTheTimeoutThrowsAndTheCommunicatorRefusesFurtherUse) {
  auto healthy = parallel::make_mpi_comm(60);
  const int r = healthy->rank();
  std::vector<float> v(16, float(r));
  const auto run = [&](parallel::Communicator& comm, const std::string& what) {
    if (what == "a barrier") comm.barrier();
    if (what == "an all-reduce") comm.start_all_reduce_mean(v.data(), i64(v.size()), ElemType::F32), comm.wait();
    if (what == "a max-reduction") comm.max(1.0);
  };
  for (const std::string what : {"a barrier", "an all-reduce", "a max-reduction"}) {
    SCOPED_TRACE(what);
    auto late = parallel::make_mpi_comm(r == 0 ? 0.25 : 60);
    if (r == 0) {
      const std::string error = error_of([&] { run(*late, what); });
      EXPECT_NE(error.find("rank 0 waited 0.25 s for the other ranks in " + what + ": a rank failed or hangs"),
                std::string::npos)
          << error;
      std::vector<std::function<void()>> uses{
          [&] { late->barrier(); }, [&] { late->start_all_reduce_mean(v.data(), i64(v.size()), ElemType::F32); },
          [&] { late->wait(); },    [&] { late->broadcast(v.data(), i64(v.size()), ElemType::F32, 0); },
          [&] { late->max(1.0); },  [&] { late->min(1.0); }};
      for (std::size_t u = 0; u < uses.size(); ++u) {
        const std::string use_error = error_of(uses[u]);
        EXPECT_NE(use_error.find("rank 0 used a communicator whose earlier wait timed out; end the run"),
                  std::string::npos)
            << "use " << u << ": " << use_error;
      }
      EXPECT_FALSE(late->progress()) << "a timed-out communicator has nothing to progress";
      late.reset();  // as the failed row drops it, before rank 1 comes: MPI keeps it for the collective
    }
    healthy->barrier();            // rank 0 has given up
    if (r != 0) run(*late, what);  // completed by rank 0's polls in the barrier below
    healthy->barrier();
  }
}

// A row that fails between an all-reduce's start and its wait (an exception in the backward
// pass) drops its communicator with the reduction in flight: the process goes on, and the next
// row's communicator works (MPI finishes the abandoned reduction into the buffer, still alive):
// freed, the communicator crashed Open MPI as it progressed the reduction.
TEST(MpiCommRelease, DroppedWithAnAllReduceInFlightTheNextCommunicatorWorks) {
  int r = 0, n = 1;
  // 4 MiB: Open MPI's ring, many rounds. Static: nothing says when MPI is done writing it.
  static std::vector<float> gradients(std::size_t(1) << 20, 1.0f);
  {
    auto comm = parallel::make_mpi_comm(60);
    r = comm->rank(), n = comm->size();
    comm->start_all_reduce_mean(gradients.data(), i64(gradients.size()), ElemType::F32);
  }
  auto next = parallel::make_mpi_comm(60);
  std::vector<float> v(4, float(r));
  next->start_all_reduce_mean(v.data(), 4, ElemType::F32);
  next->wait();
  EXPECT_EQ(v, std::vector<float>(4, float(n - 1) / 2));
  next->barrier();
}

// What the ranks agree on at start-up and before each row (engine/parallel/world.cpp): every
// rank's string, in rank order, whatever their lengths (an empty one too, the mark of a rank that
// set up well); with no deadline (a rank standing by while rank 0 measures) the gather waits for a
// rank that comes late. On one machine each rank's local rank is its rank. A second session in the
// process (MPI already running) neither initialises nor finalises MPI: collectives work after it.
TEST(MpiSession, AllGatherGivesEveryRanksStringInRankOrder) {
  {
    parallel::MpiSession again;
    EXPECT_TRUE(parallel::launched_by_mpirun());
    auto comm = parallel::make_mpi_comm(60);
    EXPECT_EQ(again.rank(), comm->rank());
    EXPECT_EQ(again.size(), comm->size());
  }
  parallel::MpiSession session;
  const int r = session.rank(), n = session.size();
  EXPECT_EQ(session.local_rank_and_size(), std::make_pair(r, n)) << "both ranks run on this machine";
  const auto mine = [](int rank) {
    return rank == 0 ? std::string() : std::string(std::size_t(rank) * 3, char('a' + rank));
  };
  std::vector<std::string> expected;
  for (int k = 0; k < n; ++k) expected.push_back(mine(k));
  EXPECT_EQ(session.all_gather(mine(r), 60, "test"), expected);
  if (r == n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(50));  // comes late
  EXPECT_EQ(session.all_gather(mine(r), INFINITY, "test"), expected);
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
    train_alike(data, whole, replica, r);
    replica.check_weights_agree();
    testing_support::expect_params_match(spec, data.batch(), replica, whole, 1e-4, "rank " + std::to_string(r));
    EXPECT_GT(replica.stats().bytes, 0);
    // The mean costs no pass of its own: MPI leaves the sums of the shards' mean gradients (n
    // times the whole batch's mean) and the optimizer's pass divides them.
    testing_support::for_each_param(spec, data.batch(), [&](int node, int k, const std::string& name) {
      std::vector<float> scaled = whole.read_param_grad(node, k);
      for (float& g : scaled) g *= float(n);
      EXPECT_LT(testing_support::relative_difference(replica.read_param_grad(node, k), scaled), 1e-4)
          << "rank " << r << " " << name << ": the replica's gradients are not the sums";
    });
  }
}

#ifdef TB_HAVE_CUDA
// gpu:N across ranks as the emulated-node launcher runs it on a machine with one GPU: every rank
// on GPU 0, each its own NCCL host (NCCL_HOSTID) over the socket transport on the loopback; each
// rank trains its shard, against one network of the whole batch on the same GPU in the same
// precision (the large batch every rank computes on its own).
class NcclRanks : public testing::TestWithParam<Precision> {
 protected:
  void SetUp() override {
    const cuda::GpuInventory& inventory = cuda::gpu_inventory();
    if (inventory.devices.empty()) GTEST_SKIP() << "no usable GPU: " << inventory.unavailable;
    if (std::string why = cuda::precision_unsupported(inventory.devices[0], GetParam()); !why.empty())
      GTEST_SKIP() << why;
  }
};

TEST_P(NcclRanks, AsEmulatedNodesOnOneGpuEqualLargeBatch) {
  const Precision precision = GetParam();
  auto bootstrap = parallel::make_mpi_comm(60);
  const int r = bootstrap->rank(), n = bootstrap->size();
  // What scripts/emulate_nodes.sh --gpu N sets, before NCCL reads it.
  ::setenv("NCCL_HOSTID", ("tb-test-node-" + std::to_string(r)).c_str(), 1);
  ::setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  ::setenv("NCCL_IB_DISABLE", "1", 1);
  TB_CU(cudaSetDevice(0));
  for (const auto& [name, dataset, shard] :
       {std::tuple{"mlp", "mnist", i64(8)}, std::tuple{"lenet5", "cifar10", i64(4)}}) {
    SCOPED_TRACE(name);
    const ModelSpec spec = models::workload(name, dataset).spec;
    const OptimizerConfig sgd{.kind = OptimizerConfig::Kind::SGD, .lr = 0.05, .momentum = 0.9};
    testing_support::LargeBatch data(spec, shard, n);
    auto net = std::make_unique<cuda::CudaNetwork>(
        spec, NetworkOptions{.batch = shard, .optimizer = sgd, .seed = 11 + std::uint64_t(r), .precision = precision});
    const cudaStream_t stream = net->context().stream;
    parallel::ReplicaNetwork replica(std::move(net), parallel::make_nccl_comm_mpi(*bootstrap, 0, stream, 60));
    cuda::CudaNetwork whole(
        spec, NetworkOptions{.batch = data.batch(), .optimizer = sgd, .seed = 11, .precision = precision});
    testing_support::copy_params(spec, data.batch(), replica, whole);  // rank 0's, broadcast
    std::vector<std::vector<float>> before;
    testing_support::for_each_param(
        spec, data.batch(), [&](int node, int k, const std::string&) { before.push_back(whole.read_param(node, k)); });
    train_alike(data, whole, replica, r);
    replica.check_weights_agree();
    std::size_t i = 0;
    testing_support::for_each_param(spec, data.batch(), [&](int node, int k, const std::string& param) {
      EXPECT_TRUE(testing_support::same_update(replica.read_param(node, k), whole.read_param(node, k), before[i++],
                                               testing_support::large_batch_tolerance(precision)))
          << param << " on rank " << r;
    });
    EXPECT_GT(replica.stats().bytes, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, NcclRanks, testing::Values(Precision::FP32, Precision::BF16),
                         [](const testing::TestParamInfo<Precision>& info) {
                           return std::string(precision_name(info.param));
                         });
#endif

}  // namespace
}  // namespace tb

int main(int argc, char** argv) {
  tb::parallel::MpiSession mpi;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
