// Replicas on threads, wired and stepped together (replica_run.hpp).
#include "engine/parallel/replica_run.hpp"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "engine/core/timer.hpp"

namespace tb::parallel {

// One thread per replica, each bound to its GPU when there is one, running the same function
// for its replica when the caller asks and reporting back.
struct ReplicaRun::Pool {
  Pool(int n, const Bind& bind) : errors(std::size_t(n)) {
    for (int k = 0; k < n; ++k)
      threads.emplace_back([this, k, bind] {
        std::exception_ptr bind_error;
        try {
          if (bind) bind(k);
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
  // Runs fn on every thread, then throws the failure of the first replica (by index) that failed
  // on its own; the first PeerFailed (a replica stopped by another's failure) only where none did.
  void run(const std::function<void(int)>& fn) {
    std::unique_lock lock(mutex);
    job = fn;
    done = 0;
    std::fill(errors.begin(), errors.end(), nullptr);
    ++generation;
    cv.notify_all();
    cv.wait(lock, [&] { return done == int(threads.size()); });
    auto cause = std::find_if(errors.begin(), errors.end(), [](const auto& e) { return e && !from_a_peer(e); });
    if (cause == errors.end())
      cause = std::find_if(errors.begin(), errors.end(), [](const auto& e) { return bool(e); });
    if (cause != errors.end()) std::rethrow_exception(*cause);
  }
  static bool from_a_peer(const std::exception_ptr& e) {
    try {
      std::rethrow_exception(e);
    } catch (const PeerFailed&) {
      return true;
    } catch (...) {
      return false;
    }
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

ReplicaRun::ReplicaRun(Wiring wiring, bool across_ranks, int local_replicas, const Bind& bind, const Factory& make,
                       std::size_t bucket_bytes)
    : wiring_(wiring),
      bucket_bytes_(bucket_bytes),
      across_ranks_(across_ranks),
      replicas_(std::size_t(local_replicas)),
      nets_(std::size_t(local_replicas)),
      data_(std::size_t(local_replicas)) {
  TB_CHECK(local_replicas >= 1, "a run needs a replica");
  if (local_replicas > 1)
    pool_ = std::make_unique<Pool>(local_replicas, bind);
  else if (bind)
    bind(0);
  on_all([&](int k) { std::tie(nets_[std::size_t(k)], data_[std::size_t(k)]) = make(k); });
}

void ReplicaRun::connect() {
  TB_CHECK(!nets_.empty() && nets_[0], "ReplicaRun::connect: called twice");
  if (across_ranks_) world_ = world_comm();
  std::vector<Network*> raw;
  for (auto& n : nets_) raw.push_back(n.get());
  Communicators comms = wiring_ ? wiring_(raw, world_.get()) : Communicators(raw.size());
  // Replicas start together: their constructors broadcast rank 0's weights (a collective).
  on_all([&](int k) {
    Replica& r = replicas_[std::size_t(k)];
    r.backend = nets_[std::size_t(k)].get();
    std::unique_ptr<Network> net = std::move(nets_[std::size_t(k)]);
    if (comms[std::size_t(k)]) {
      auto replica = std::make_unique<ReplicaNetwork>(std::move(net), std::move(comms[std::size_t(k)]), bucket_bytes_);
      r.replica = replica.get();
      net = std::move(replica);
    }
    r.trainer = std::make_unique<Trainer>(std::move(net), std::move(data_[std::size_t(k)]));
  });
  nets_.clear();
  data_.clear();
}

ReplicaRun::~ReplicaRun() {
  // Trainers (and their networks, bound to their GPUs) go on their own threads.
  try {
    on_all([&](int k) {
      replicas_[std::size_t(k)].trainer.reset();
      if (k < int(nets_.size())) nets_[std::size_t(k)].reset();  // never connected
    });
  } catch (...) {
  }
}

void ReplicaRun::on_all(const std::function<void(int k)>& fn) {
  if (pool_)
    pool_->run(fn);
  else
    fn(0);
}

void ReplicaRun::training(const std::function<void(int k, Trainer&)>& fn) {
  on_all([&](int k) {
    Replica& r = replicas_[std::size_t(k)];
    try {
      fn(k, *r.trainer);
    } catch (const std::exception& e) {
      // Across ranks the others are not told: ranks that fail together (a loss that diverges
      // does so on every rank in the same step: they share the gradients) fail the row and the
      // run goes on, where MPI's abort would end the job; one that fails alone is found at the
      // others' deadline.
      if (r.replica && !across_ranks_) r.replica->fail(e.what());
      throw;
    }
  });
}

void ReplicaRun::warm_up(i64 steps) {
  training([&](int, Trainer& t) {
    for (i64 s = 0; s < steps; ++s) t.step();
  });
}

ReplicaRun::StepSeconds ReplicaRun::step() {
  std::vector<double> device(replicas_.size());
  const double t0 = wall_seconds();
  training([&](int k, Trainer& t) {
    t.step();
    device[std::size_t(k)] = t.last_device_seconds();
  });
  return StepSeconds{.wall = wall_seconds() - t0, .device = *std::max_element(device.begin(), device.end())};
}

double ReplicaRun::slowest(double local) const { return world_ ? world_->max(local) : local; }

void ReplicaRun::check(const std::function<void(Trainer&)>& loss_fell) {
  std::vector<std::string> failures(replicas_.size());
  std::vector<char> differ(replicas_.size(), 0);
  on_all([&](int k) {
    Replica& r = replicas_[std::size_t(k)];
    try {
      loss_fell(*r.trainer);
    } catch (const CheckFailed& e) {
      failures[std::size_t(k)] = fmt::format("replica {}: {}", k, e.what());
    }
    try {
      if (r.replica) r.replica->check_weights_agree();
    } catch (const ReplicasDiffer& e) {
      differ[std::size_t(k)] = 1;
      if (failures[std::size_t(k)].empty()) failures[std::size_t(k)] = e.what();
    }
  });
  std::string failure;
  for (const std::string& f : failures)
    if (failure.empty()) failure = f;
  const bool ok_everywhere = world_ ? world_->min(failure.empty() ? 1.0 : 0.0) > 0 : failure.empty();
  if (std::find(differ.begin(), differ.end(), 1) != differ.end()) throw ReplicasDiffer(failure);
  if (!ok_everywhere)
    throw CheckFailed(failure.empty() ? std::string("a replica on another rank failed its check (see rank 0's "
                                                    "output or that rank's)")
                                      : failure);
}

CommStats ReplicaRun::comm_stats() const { return replicas_[0].replica ? replicas_[0].replica->stats() : CommStats{}; }

int ReplicaRun::communicating_ranks() const {
  if (across_ranks_) return world().size * int(replicas_.size());
  return int(replicas_.size());
}

}  // namespace tb::parallel
