// Several replicas per benchmark: the MPI world, the replica threads, and the step that waits
// for the slowest replica on every rank.
#include "bench/replicas.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "bench/gpu.hpp"
#include "engine/core/error.hpp"
#include "engine/core/timer.hpp"

#ifdef TB_HAVE_MPI
#include "engine/parallel/mpi_comm.hpp"
#endif

namespace tb::bench {

namespace {
World g_world;
#ifdef TB_HAVE_MPI
std::unique_ptr<parallel::MpiSession> g_mpi;
#endif

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}
}  // namespace

void start_world() {
#ifdef TB_HAVE_MPI
  if (!parallel::launched_by_mpirun()) return;
  g_mpi = std::make_unique<parallel::MpiSession>();
  g_world.rank = g_mpi->rank();
  g_world.size = g_mpi->size();
  g_world.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", g_world.rank);
  g_world.local_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", g_world.size);
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

std::unique_ptr<parallel::Communicator> world_comm() {
#ifdef TB_HAVE_MPI
  if (g_mpi) return parallel::make_mpi_comm();
#endif
  throw Error("not running under mpirun: there is no MPI world");
}

// One thread per replica, each bound to its GPU when there is one, running the same function
// for its replica when the caller asks and reporting back.
struct ReplicaRun::Pool {
  Pool(int n, const std::vector<int>& ordinals) : errors(std::size_t(n)) {
    for (int k = 0; k < n; ++k)
      threads.emplace_back([this, k, ordinal = k < int(ordinals.size()) ? ordinals[std::size_t(k)] : -1] {
        std::exception_ptr bind_error;
        try {
          if (ordinal >= 0) gpu_bind_thread(ordinal);
        } catch (...) {
          bind_error = std::current_exception();  // reported by every job this thread is given
        }
        std::uint64_t seen = 0;
        for (;;) {
          std::function<void(int)> fn;
          {
            std::unique_lock lock(mutex);
            cv.wait(lock, [&] { return stop || generation != seen; });
            if (stop) return;
            seen = generation;
            fn = job;
          }
          try {
            if (bind_error) std::rethrow_exception(bind_error);
            fn(k);
          } catch (...) {
            errors[std::size_t(k)] = std::current_exception();
          }
          std::lock_guard lock(mutex);
          if (++done == int(threads.size())) cv.notify_all();
        }
      });
  }
  ~Pool() {
    {
      std::lock_guard lock(mutex);
      stop = true;
    }
    cv.notify_all();
    for (auto& t : threads) t.join();
  }
  void run(const std::function<void(int)>& fn) {
    std::unique_lock lock(mutex);
    job = fn;
    done = 0;
    std::fill(errors.begin(), errors.end(), nullptr);
    ++generation;
    cv.notify_all();
    cv.wait(lock, [&] { return done == int(threads.size()); });
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
  }

  std::vector<std::thread> threads;
  std::mutex mutex;
  std::condition_variable cv;
  std::function<void(int)> job;
  std::vector<std::exception_ptr> errors;
  std::uint64_t generation = 0;
  int done = 0;
  bool stop = false;
};

ReplicaRun::ReplicaRun(Parallel mode, int local_replicas, const std::vector<int>& gpu_ordinals, const Factory& make)
    : mode_(mode), ordinals_(gpu_ordinals), replicas_(std::size_t(local_replicas)) {
  TB_CHECK(local_replicas >= 1, "a run needs a replica");
  if (mode == Parallel::Mpi || mode == Parallel::NcclMpi) world_ = world_comm();
  if (local_replicas > 1) pool_ = std::make_unique<Pool>(local_replicas, gpu_ordinals);
  std::vector<std::unique_ptr<Network>> nets(static_cast<std::size_t>(local_replicas));
  std::vector<std::unique_ptr<Dataset>> data(static_cast<std::size_t>(local_replicas));
  on_all([&](int k) { std::tie(nets[std::size_t(k)], data[std::size_t(k)]) = make(k); });

  std::vector<std::unique_ptr<parallel::Communicator>> comms(static_cast<std::size_t>(local_replicas));
  switch (mode) {
    case Parallel::Mpi:
#ifdef TB_HAVE_MPI
      comms[0] = parallel::make_mpi_comm();
#endif
      break;
    case Parallel::NcclThreads: {
      std::vector<Network*> raw;
      for (auto& n : nets) raw.push_back(n.get());
      comms = gpu_nccl_group(raw);
      break;
    }
    case Parallel::NcclMpi:
      comms[0] = gpu_nccl_over_mpi(*world_, *nets[0]);
      break;
    case Parallel::None:
    case Parallel::Jobs:
      break;
  }
  // Replicas start together: their constructors broadcast rank 0's weights (a collective).
  on_all([&](int k) {
    Replica& r = replicas_[std::size_t(k)];
    r.backend = nets[std::size_t(k)].get();
    std::unique_ptr<Network> net = std::move(nets[std::size_t(k)]);
    if (comms[std::size_t(k)]) {
      auto replica = std::make_unique<parallel::ReplicaNetwork>(std::move(net), std::move(comms[std::size_t(k)]));
      r.replica = replica.get();
      net = std::move(replica);
    }
    r.trainer = std::make_unique<Trainer>(std::move(net), std::move(data[std::size_t(k)]));
  });
}

ReplicaRun::~ReplicaRun() {
  // Trainers (and their networks, bound to their GPUs) go on their own threads.
  try {
    on_all([&](int k) { replicas_[std::size_t(k)].trainer.reset(); });
  } catch (...) {
  }
}

void ReplicaRun::on_all(const std::function<void(int k)>& fn) {
  if (pool_) pool_->run(fn);
  else fn(0);
}

void ReplicaRun::warm_up(i64 steps) {
  on_all([&](int k) {
    for (i64 s = 0; s < steps; ++s) replicas_[std::size_t(k)].trainer->step();
  });
}

double ReplicaRun::step() {
  std::vector<double> seconds(replicas_.size());
  on_all([&](int k) {
    Trainer& t = *replicas_[std::size_t(k)].trainer;
    const double t0 = wall_seconds();
    t.step();
    const double device = t.last_device_seconds();
    seconds[std::size_t(k)] = device >= 0 ? device : wall_seconds() - t0;
  });
  const double slowest = *std::max_element(seconds.begin(), seconds.end());
  return world_ ? world_->max(slowest) : slowest;
}

void ReplicaRun::check(const std::function<void(Trainer&)>& loss_fell) {
  std::vector<std::string> failures(replicas_.size());
  on_all([&](int k) {
    Replica& r = replicas_[std::size_t(k)];
    try {
      loss_fell(*r.trainer);
    } catch (const CheckFailed& e) {
      failures[std::size_t(k)] = fmt::format("replica {}: {}", k, e.what());
    }
    try {
      if (r.replica) r.replica->check_weights_agree();
    } catch (const CheckFailed& e) {
      if (failures[std::size_t(k)].empty()) failures[std::size_t(k)] = e.what();
    }
  });
  std::string failure;
  for (const std::string& f : failures)
    if (failure.empty()) failure = f;
  const bool ok_everywhere = world_ ? world_->min(failure.empty() ? 1.0 : 0.0) > 0 : failure.empty();
  if (!ok_everywhere)
    throw CheckFailed(failure.empty() ? std::string("a replica on another rank failed its check (see rank 0's "
                                                    "output or that rank's)")
                                      : failure);
}

parallel::CommStats ReplicaRun::comm_stats() const {
  return replicas_[0].replica ? replicas_[0].replica->stats() : parallel::CommStats{};
}

int ReplicaRun::communicating_ranks() const {
  if (mode_ == Parallel::Mpi || mode_ == Parallel::NcclMpi) return world().size * int(replicas_.size());
  return int(replicas_.size());
}

}  // namespace tb::bench
