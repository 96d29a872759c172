// Replicas in threads of one process: each collective is a rendezvous of all ranks on the
// group's condition variable; an all-reduce has every rank average its own slice of the
// bucket across all ranks' buffers, so the work is split evenly and nothing is copied twice.
// Reductions run on a worker thread per rank, so that they overlap with the caller's backward.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "engine/parallel/communicator.hpp"

namespace tb::parallel {

std::size_t elem_bytes(ElemType t) { return t == ElemType::F32 ? 4 : 2; }

class ThreadGroup {
 public:
  ThreadGroup(int size, double timeout_s) : size_(size), timeout_s_(timeout_s), slots_(std::size_t(size)) {}

  int size() const { return size_; }

  // Publishes `slot` for `rank`, waits until every rank has arrived, and returns every rank's
  // slot. Throws if a rank failed, or if the others do not arrive within the timeout.
  std::vector<void*> exchange(int rank, void* slot, const char* what) {
    std::unique_lock lock(mutex_);
    check_failure(rank);
    slots_[std::size_t(rank)] = slot;
    const std::uint64_t generation = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      published_ = slots_;
      ++generation_;
      cv_.notify_all();
      return published_;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
    if (!cv_.wait_until(lock, deadline, [&] { return generation_ != generation || !failure_.empty(); })) {
      failure_ = fmt::format("rank {} waited {:.0f} s for the other replicas in {}: a replica failed or hangs", rank,
                             timeout_s_, what);
      cv_.notify_all();
      throw Error(failure_);
    }
    check_failure(rank);
    return published_;
  }

  void fail(int rank, const std::string& reason) {
    std::lock_guard lock(mutex_);
    if (failure_.empty()) failure_ = fmt::format("replica {} failed: {}", rank, reason);
    cv_.notify_all();
  }

 private:
  void check_failure(int rank) const {
    if (!failure_.empty()) throw PeerFailed(fmt::format("rank {} stopped: {}", rank, failure_));
  }

  int size_;
  double timeout_s_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<void*> slots_, published_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
  std::string failure_;
};

std::shared_ptr<ThreadGroup> make_thread_group(int size, double timeout_s) {
  TB_CHECK(size >= 1, "a thread group needs at least one replica, not {}", size);
  return std::make_shared<ThreadGroup>(size, timeout_s);
}

namespace {

class ThreadComm final : public Communicator {
 public:
  ThreadComm(std::shared_ptr<ThreadGroup> group, int rank) : group_(std::move(group)), rank_(rank) {
    worker_ = std::thread([this] { work(); });
  }
  ~ThreadComm() override {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  std::string kind() const override { return "threads"; }

  void start_all_reduce_mean(void* data, i64 count, ElemType type) override {
    TB_CHECK(type == ElemType::F32, "replicas in threads all-reduce fp32 host buffers only");
    std::lock_guard lock(mutex_);
    queue_.push_back(Job{static_cast<float*>(data), count});
    cv_.notify_all();
  }

  void wait() override {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return (queue_.empty() && !busy_) || error_; });
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

  void broadcast(void* data, i64 count, ElemType type, int root) override {
    wait();
    const std::size_t bytes = std::size_t(count) * elem_bytes(type);
    const auto slots = group_->exchange(rank_, data, "a broadcast");
    if (rank_ != root) std::memcpy(data, slots[std::size_t(root)], bytes);
    group_->exchange(rank_, nullptr, "a broadcast");  // the root's buffer is read by all
  }

  void barrier() override {
    wait();
    group_->exchange(rank_, nullptr, "a barrier");
  }

  double max(double value) override {
    wait();
    const auto slots = group_->exchange(rank_, &value, "a max-reduction");
    double out = value;
    for (void* s : slots) out = std::max(out, *static_cast<double*>(s));
    group_->exchange(rank_, nullptr, "a max-reduction");  // `value` lives on this stack
    return out;
  }

  void abort(const std::string& reason) override { group_->fail(rank_, reason); }

 private:
  struct Job {
    float* data;
    i64 count;
  };

  void work() {
    std::unique_lock lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      const Job job = queue_.front();
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      std::exception_ptr error;
      try {
        reduce(job);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      busy_ = false;
      if (error && !error_) {
        error_ = error;
        queue_.clear();
      }
      cv_.notify_all();
    }
  }

  // Rank r averages elements [r * count / n, (r + 1) * count / n) of every rank's buffer.
  void reduce(const Job& job) {
    const auto slots = group_->exchange(rank_, job.data, "an all-reduce");
    const int n = size();
    const i64 lo = job.count * rank_ / n, hi = job.count * (rank_ + 1) / n;
    const float scale = 1.0f / float(n);
    for (i64 k = lo; k < hi; ++k) {
      float sum = 0;
      for (void* s : slots) sum += static_cast<const float*>(s)[k];
      for (void* s : slots) static_cast<float*>(s)[k] = sum * scale;
    }
    group_->exchange(rank_, nullptr, "an all-reduce");  // every slice written before anyone reads
  }

  std::shared_ptr<ThreadGroup> group_;
  int rank_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool busy_ = false, stop_ = false;
  std::exception_ptr error_;
  std::thread worker_;
};

}  // namespace

std::unique_ptr<Communicator> make_thread_comm(std::shared_ptr<ThreadGroup> group, int rank) {
  TB_CHECK(group && rank >= 0 && rank < group->size(), "replica {} is not in a group of {}", rank,
           group ? group->size() : 0);
  return std::make_unique<ThreadComm>(std::move(group), rank);
}

}  // namespace tb::parallel
