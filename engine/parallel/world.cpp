// The MPI world and the communicators of a benchmark's replicas (world.hpp): MPI where CMake
// found it (TB_HAVE_MPI), NCCL with the CUDA backend (TB_HAVE_CUDA).
#include "engine/parallel/world.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <new>
#include <optional>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "engine/parallel/predict.hpp"

#ifdef TB_HAVE_CUDA
#include "engine/parallel/nccl_comm.hpp"
#include "engine/parallel/shared_device_comm.hpp"
#endif
#ifdef TB_HAVE_MPI
#include "engine/parallel/mpi_comm.hpp"
#endif

namespace tb::parallel {

namespace {
World g_world;
#ifdef TB_HAVE_MPI
std::unique_ptr<MpiSession> g_mpi;
#endif

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

[[maybe_unused]] CommEndpoint endpoint(const Network& network) {
  const std::optional<CommEndpoint> e = network.comm_endpoint();
  TB_CHECK(e.has_value(), "NCCL needs GPU networks (this network has no device stream)");
  return *e;
}
}  // namespace

void start_world() {
#ifdef TB_HAVE_MPI
  if (!launched_by_mpirun()) return;
  g_mpi = std::make_unique<MpiSession>();
  g_world.rank = g_mpi->rank();
  g_world.size = g_mpi->size();
  std::tie(g_world.local_rank, g_world.local_size) = g_mpi->local_rank_and_size();
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "?");
  g_world.rank_hosts = g_mpi->all_gather(fmt::format("{}:{}", host, g_world.local_rank), kAgreeTimeout_s, "start");
  std::set<std::string> hosts;
  for (const std::string& h : g_world.rank_hosts) hosts.insert(h.substr(0, h.rfind(':')));
  g_world.nodes = int(hosts.size());
  g_world.emulated_nodes = env_int("TB_EMULATED_NODES", 0) > 1;
  // Finalised at exit, after main has released every benchmark's communicators.
  std::atexit([] { g_mpi.reset(); });
#else
  if (env_int("OMPI_COMM_WORLD_SIZE", 1) > 1 || env_int("PMI_SIZE", 1) > 1) {
    std::cerr << "trainbench: error: started by mpirun, but this build has no MPI support (install libopenmpi-dev "
                 "and rebuild)\n";
    std::exit(2);
  }
#endif
}

const World& world() { return g_world; }

std::vector<std::string> all_ranks(const std::string& mine, const std::string& what, double timeout_s) {
#ifdef TB_HAVE_MPI
  if (g_mpi) return g_mpi->all_gather(mine, timeout_s, what);
#else
  (void)what, (void)timeout_s;
#endif
  return {mine};
}

namespace {
constexpr const char* kCouldNotSetUp = " could not set up this row: ";
}  // namespace

void set_up_together(const std::string& row, const std::function<void()>& local) {
  std::exception_ptr failure;
  std::string mine;  // "" where it went well, else "!" and the error
  try {
    local();
  } catch (const std::bad_alloc&) {
    failure = std::current_exception();
    mine = "!out of host memory (std::bad_alloc)";
  } catch (const std::exception& e) {
    failure = std::current_exception();
    mine = std::string("!") + e.what();
  } catch (...) {
    failure = std::current_exception();
    mine = "!an exception that is no std::exception";
  }
  if (g_world.size == 1) {
    if (failure) std::rethrow_exception(failure);
    return;
  }
  const std::vector<std::string> all = all_ranks(mine, "set up " + row);
  if (failure) std::rethrow_exception(failure);
  for (std::size_t r = 0; r < all.size(); ++r)
    if (!all[r].empty()) throw Error(fmt::format("rank {}{}{}", r, kCouldNotSetUp, all[r].substr(1)));
}

bool another_ranks_set_up_failed(const std::string& message) {
  return message.rfind("rank ", 0) == 0 && message.find(kCouldNotSetUp) != std::string::npos;
}

std::unique_ptr<Communicator> world_comm() {
#ifdef TB_HAVE_MPI
  if (g_mpi) return make_mpi_comm();
#endif
  throw Error("not running under mpirun: there is no MPI world");
}

Link measure_world_link(int gpu) {
  const std::unique_ptr<Communicator> comm = world_comm();
  if (gpu < 0) return measure_link(*comm);
#ifdef TB_HAVE_CUDA
  return measure_nccl_link(*comm, gpu, std::size_t(64) << 20);
#else
  throw Error("this build of trainbench has no NCCL (the CUDA toolkit, cuDNN or NCCL was not found by CMake)");
#endif
}

namespace {
// Rank 0 of 1: every collective is already done.
class SoloComm final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string kind() const override { return "one replica"; }
  void start_all_reduce_mean(void*, i64, ElemType) override {}
  void wait() override {}
  void broadcast(void*, i64, ElemType, int) override {}
  void barrier() override {}
  double max(double value) override { return value; }
  void abort(const std::string&) override {}
};
}  // namespace

std::unique_ptr<Communicator> one_replica_comm(Network& network) {
  if (network.comm_endpoint()) {
    Communicators one = nccl_threads_wiring({&network}, nullptr);
    return std::move(one.at(0));
  }
  return std::make_unique<SoloComm>();
}

Communicators mpi_wiring(const std::vector<Network*>& networks, Communicator*) {
  Communicators comms(networks.size());
  comms.at(0) = world_comm();
  return comms;
}

#ifdef TB_HAVE_CUDA
namespace {
std::pair<std::vector<int>, std::vector<cudaStream_t>> endpoints(const std::vector<Network*>& networks) {
  std::vector<int> devices;
  std::vector<cudaStream_t> streams;
  for (const Network* n : networks) {
    const CommEndpoint e = endpoint(*n);
    devices.push_back(e.device);
    streams.push_back(static_cast<cudaStream_t>(e.stream));
  }
  return {devices, streams};
}
}  // namespace

Communicators nccl_threads_wiring(const std::vector<Network*>& networks, Communicator*) {
  const auto [devices, streams] = endpoints(networks);
  return make_nccl_group(devices, streams);
}

Communicators shared_device_wiring(const std::vector<Network*>& networks, Communicator*) {
  const auto [devices, streams] = endpoints(networks);
  for (int d : devices) TB_CHECK(d == devices.at(0), "shared-device replicas on devices {} and {}", devices[0], d);
  return make_shared_device_group(devices.at(0), streams);
}

Communicators nccl_ranks_wiring(const std::vector<Network*>& networks, Communicator* world) {
  TB_CHECK(world, "NCCL across ranks bootstraps through the MPI world");
  Communicators comms(networks.size());
  const CommEndpoint e = endpoint(*networks.at(0));
  comms.at(0) = make_nccl_comm_mpi(*world, e.device, static_cast<cudaStream_t>(e.stream));
  return comms;
}
#else
namespace {
[[noreturn]] void no_nccl() {
  throw Error("this build of trainbench has no NCCL (the CUDA toolkit, cuDNN or NCCL was not found by CMake)");
}
}  // namespace
Communicators nccl_threads_wiring(const std::vector<Network*>&, Communicator*) { no_nccl(); }
Communicators shared_device_wiring(const std::vector<Network*>&, Communicator*) { no_nccl(); }
Communicators nccl_ranks_wiring(const std::vector<Network*>&, Communicator*) { no_nccl(); }
#endif

}  // namespace tb::parallel
