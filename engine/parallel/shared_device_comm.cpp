// The communicator of replicas sharing one GPU (shared_device_comm.hpp): a rendezvous per
// collective in host memory, and the collective itself on the device, ordered by events.
#include "engine/parallel/shared_device_comm.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "engine/cuda/context.hpp"
#include "engine/cuda/kernels.hpp"

namespace tb::parallel {
namespace {

cuda::DType device_type(ElemType type) {
  switch (type) {
    case ElemType::F32:
      return cuda::DType::F32;
    case ElemType::F16:
      return cuda::DType::F16;
    case ElemType::BF16:
      return cuda::DType::BF16;
  }
  throw Error(fmt::format("shared-device all-reduce: unknown element type {}", int(type)));
}

// A collective in flight: each rank's buffer and the event after which it is ready; issued
// once every rank arrived, done when `done` completes.
struct Call {
  enum class Op { Mean, Broadcast } op = Op::Mean;
  i64 count = 0;
  ElemType type = ElemType::F32;
  int root = 0;
  std::vector<void*> data;
  std::vector<cudaEvent_t> ready{};
  int arrived = 0, waited = 0;
  bool issued = false;
  cudaEvent_t done = nullptr;
};

class Group {
 public:
  Group(int size, int device, double timeout_s) : size_(size), device_(device), timeout_s_(timeout_s) {
    TB_CU(cudaSetDevice(device_));
    int least = 0, greatest = 0;
    TB_CU(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    TB_CU(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest));
  }
  ~Group() {
    for (auto& [seq, call] : calls_)
      if (call.done) (void)cudaEventDestroy(call.done);
    (void)cudaStreamSynchronize(stream_);
    (void)cudaStreamDestroy(stream_);
  }
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  int size() const { return size_; }

  // Rank `rank`'s part of collective `seq`: the last rank to arrive issues it on the group's stream.
  void arrive(std::uint64_t seq, int rank, const Call& mine, cudaEvent_t ready) {
    std::unique_lock lock(mutex_);
    check_alive();
    Call& c = calls_[seq];
    if (c.arrived == 0) {
      c.op = mine.op, c.count = mine.count, c.type = mine.type, c.root = mine.root;
      c.data.assign(std::size_t(size_), nullptr);
      c.ready.assign(std::size_t(size_), nullptr);
    } else if (c.op != mine.op || c.count != mine.count || c.type != mine.type || c.root != mine.root) {
      fail_locked(fmt::format("replica {} issued a different collective ({} elements) than replica 0's {} as call {}",
                              rank, mine.count, c.count, seq));
    }
    c.data[std::size_t(rank)] = mine.data.at(0);
    c.ready[std::size_t(rank)] = ready;
    if (++c.arrived < size_) return;
    for (cudaEvent_t e : c.ready) TB_CU(cudaStreamWaitEvent(stream_, e, 0));
    if (c.op == Call::Op::Mean) {
      cuda::kernels::average_replicas(device_type(c.type), c.data.data(), size_, c.count, stream_);
    } else {
      const std::size_t bytes = std::size_t(c.count) * elem_bytes(c.type);
      for (int k = 0; k < size_; ++k)
        if (k != c.root && bytes > 0)
          TB_CU(cudaMemcpyAsync(c.data[std::size_t(k)], c.data[std::size_t(c.root)], bytes, cudaMemcpyDeviceToDevice,
                                stream_));
    }
    TB_CU(cudaEventCreateWithFlags(&c.done, cudaEventDisableTiming));
    TB_CU(cudaEventRecord(c.done, stream_));
    c.issued = true;
    cv_.notify_all();
  }

  // Blocks until collective `seq` is issued (every replica has enqueued its part) and, with
  // `host_waits`, finished on the device; then orders `stream` after it. The last rank to
  // collect it frees it.
  void collect(std::uint64_t seq, cudaStream_t stream, bool host_waits) {
    std::unique_lock lock(mutex_);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
    while (!failed_ && !calls_[seq].issued)
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout)
        fail_locked(
            fmt::format("shared-device collective {} still waits for a replica after {:g} s (a replica "
                        "stopped or issued fewer collectives)",
                        seq, timeout_s_));
    check_alive();
    Call& c = calls_[seq];
    const cudaEvent_t done = c.done;
    lock.unlock();
    if (host_waits) cuda::wait_for(done);
    TB_CU(cudaStreamWaitEvent(stream, done, 0));
    lock.lock();
    if (++c.waited == size_) {
      TB_CU(cudaEventDestroy(c.done));
      calls_.erase(seq);
    }
  }

  // Polls `event` until it completes (a replica's step, spinning with a yield), at most the
  // group's deadline, stopping if a replica fails meanwhile.
  void poll(cudaEvent_t event) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
    for (bool first = true;; first = false) {
      const cudaError_t status = cudaEventQuery(event);
      if (status == cudaSuccess) return;
      if (status != cudaErrorNotReady) TB_CU(status);
      cuda::forget_not_ready();
      if (first) cuda::count_host_wait();
      // Read without the lock on every spin: the replicas still enqueuing their steps take it in
      // arrive() and collect(), and a spinning one must not keep them waiting for it.
      if (failed_.load(std::memory_order_acquire)) {
        std::lock_guard lock(mutex_);
        check_alive();
      }
      if (std::chrono::steady_clock::now() > deadline)
        throw Error(fmt::format("shared-device communicator: a step's end still not reached after {:g} s", timeout_s_));
      std::this_thread::yield();
    }
  }

  void fail(const std::string& reason) {
    std::lock_guard lock(mutex_);
    if (!failed_) reason_ = reason, failed_.store(true, std::memory_order_release);
    cv_.notify_all();
  }

 private:
  void check_alive() const {
    if (failed_) throw PeerFailed(fmt::format("shared-device communicator: a replica failed: {}", reason_));
  }
  [[noreturn]] void fail_locked(const std::string& reason) {
    if (!failed_) reason_ = reason, failed_.store(true, std::memory_order_release);
    cv_.notify_all();
    throw Error(fmt::format("shared-device communicator: {}", reason));
  }

  const int size_, device_;
  const double timeout_s_;
  cudaStream_t stream_ = nullptr;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::uint64_t, Call> calls_;
  std::atomic<bool> failed_{false};  // written under mutex_, with reason_ first
  std::string reason_;
};

class SharedDeviceComm final : public Communicator {
 public:
  SharedDeviceComm(std::shared_ptr<Group> group, std::unique_ptr<Communicator> host, int rank, cudaStream_t stream)
      : group_(std::move(group)), host_(std::move(host)), rank_(rank), stream_(stream) {}
  ~SharedDeviceComm() override {
    for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
    for (cudaEvent_t e : {step_done_, backward_end_, comm_waited_})
      if (e) (void)cudaEventDestroy(e);
  }
  SharedDeviceComm(const SharedDeviceComm&) = delete;
  SharedDeviceComm& operator=(const SharedDeviceComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  std::string kind() const override { return "shared_device"; }

  void start_all_reduce_mean(void* data, i64 count, ElemType type) override {
    TB_CHECK(count >= 0, "shared-device all-reduce of {} elements", count);
    start(Call{.op = Call::Op::Mean, .count = count, .type = type, .data = {data}});
  }
  void wait() override { collect_all(true); }

  void wait_on_device() override {
    if (!step_done_) {
      TB_CU(cudaEventCreateWithFlags(&step_done_, cudaEventDisableTiming));
      TB_CU(cudaEventCreate(&backward_end_));
      TB_CU(cudaEventCreate(&comm_waited_));
    }
    TB_CU(cudaEventRecord(backward_end_, stream_));
    collect_all(false);
    TB_CU(cudaEventRecord(comm_waited_, stream_));
    waiting_on_device_ = true;
  }

  double finish_device_step() override {
    if (!waiting_on_device_) return -1;
    waiting_on_device_ = false;
    TB_CU(cudaEventRecord(step_done_, stream_));
    group_->poll(step_done_);
    float ms = 0;
    TB_CU(cudaEventElapsedTime(&ms, backward_end_, comm_waited_));
    return double(ms) * 1e-3;
  }
  void broadcast(void* data, i64 count, ElemType type, int root) override {
    TB_CHECK(root >= 0 && root < size(), "shared-device broadcast from rank {} of {}", root, size());
    start(Call{.op = Call::Op::Broadcast, .count = count, .type = type, .root = root, .data = {data}});
    wait();
  }
  void barrier() override { host_->barrier(); }
  double max(double value) override { return host_->max(value); }
  double min(double value) override { return host_->min(value); }
  void abort(const std::string& reason) override {
    group_->fail(reason);
    host_->abort(reason);
  }

 private:
  void collect_all(bool host_waits) {
    for (std::uint64_t seq : pending_) group_->collect(seq, stream_, host_waits);
    pending_.clear();
    in_flight_ = 0;
  }

  // An event per collective in flight, reused after each wait().
  void start(const Call& call) {
    if (in_flight_ == events_.size()) {
      cudaEvent_t e = nullptr;
      TB_CU(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      events_.push_back(e);
    }
    cudaEvent_t ready = events_[in_flight_++];
    TB_CU(cudaEventRecord(ready, stream_));
    group_->arrive(next_seq_, rank_, call, ready);
    pending_.push_back(next_seq_++);
  }

  std::shared_ptr<Group> group_;
  std::unique_ptr<Communicator> host_;
  const int rank_;
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;
  std::size_t in_flight_ = 0;
  std::vector<std::uint64_t> pending_;
  std::uint64_t next_seq_ = 0;
  // For a step's wait on the device (made at its first): its end, and backward's end and the
  // end of the stream's wait for the collectives after it (timed).
  cudaEvent_t step_done_ = nullptr, backward_end_ = nullptr, comm_waited_ = nullptr;
  bool waiting_on_device_ = false;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_shared_device_group(int device,
                                                                    const std::vector<cudaStream_t>& streams,
                                                                    double timeout_s) {
  const int n = int(streams.size());
  TB_CHECK(n >= 1, "a shared-device group needs a replica");
  auto group = std::make_shared<Group>(n, device, timeout_s);
  auto host = make_thread_group(n, timeout_s);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int k = 0; k < n; ++k)
    out.push_back(std::make_unique<SharedDeviceComm>(group, make_thread_comm(host, k), k, streams[std::size_t(k)]));
  return out;
}

}  // namespace tb::parallel
