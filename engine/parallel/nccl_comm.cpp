// The NCCL communicator: collectives on a stream of its own per GPU, ordered after the compute
// stream by events, and completed by polling with a deadline that also watches NCCL's
// asynchronous errors, so that a rank that died or hangs makes the others fail, not hang. In a
// training step the compute stream waits for the all-reduces on the device, and the host polls
// once, at the step's end.
#include "engine/parallel/nccl_comm.hpp"
#include "engine/parallel/predict.hpp"

#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "engine/core/error.hpp"
#include "engine/cuda/context.hpp"

namespace tb {
// TB_NCCL's check (engine/core/error.hpp): NCCL's text and its last message.
void check_status(ncclResult_t status, const char* expr, const char* file, int line) {
  if (status == ncclSuccess) return;
  const char* detail = ncclGetLastError(nullptr);  // NCCL's last message; its argument is unused
  const bool has_detail = detail && *detail;
  fail_call(CallFailure::Backend, "NCCL",
            fmt::format("{}{}{}", ncclGetErrorString(status), has_detail ? ": " : "", has_detail ? detail : ""), expr,
            file, line);
}
}  // namespace tb

namespace tb::parallel {

namespace {

ncclDataType_t nccl_type(ElemType type) {
  switch (type) {
    case ElemType::F32:
      return ncclFloat;
    case ElemType::F16:
      return ncclHalf;
    case ElemType::BF16:
      return ncclBfloat16;
  }
  throw Error(fmt::format("nccl: unknown element type {}", int(type)));
}

// Makes `device` current for a scope and leaves the caller's device current after it, whatever
// the scope left current (NCCL's set-up may switch devices); where the device is current already
// (a replica's own thread, every bucket of a step) neither sets it: two reads of the
// thread's current device, no switch.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    TB_CU(cudaGetDevice(&previous_));
    if (previous_ != device) TB_CU(cudaSetDevice(device));
  }
  ~DeviceGuard() {
    int now = previous_;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) (void)cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

// Gaps between polls of a reduction: short against a step, long enough not to burn a core.
constexpr auto kPollInterval = std::chrono::microseconds(50);

// What the communicators of one process's GPUs share (make_nccl_group): the first failure of
// one of them. NCCL tells a rank of a peer in its own process that stopped only at the
// deadline (its kernels wait for the peer's); the others stop at their next poll instead.
class GroupFailure {
 public:
  void set(int rank, const std::string& reason) {
    std::lock_guard lock(mutex_);
    if (failed_) return;
    reason_ = fmt::format("rank {} failed: {}", rank, reason);
    failed_.store(true, std::memory_order_release);
  }
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  std::string reason() const {
    std::lock_guard lock(mutex_);
    return reason_;
  }

 private:
  std::atomic<bool> failed_{false};
  mutable std::mutex mutex_;
  std::string reason_;
};

class NcclComm final : public Communicator {
 public:
  // Owns `comm` from here on, even when the constructor throws.
  NcclComm(ncclComm_t comm, int device, cudaStream_t compute, double timeout_s,
           std::shared_ptr<GroupFailure> group = nullptr)
      : comm_(comm), device_(device), compute_(compute), timeout_s_(timeout_s), group_(std::move(group)) {
    try {
      TB_CHECK(timeout_s > 0, "nccl: timeout of {} s; pass a positive number of seconds", timeout_s);
      DeviceGuard guard(device_);
      TB_NCCL(ncclCommUserRank(comm_, &rank_));
      TB_NCCL(ncclCommCount(comm_, &size_));
      // The highest priority, so that reductions of early buckets are not starved by the
      // backward kernels they overlap with.
      int least = 0, greatest = 0;
      TB_CU(cudaDeviceGetStreamPriorityRange(&least, &greatest));
      TB_CU(cudaStreamCreateWithPriority(&comm_stream_, cudaStreamNonBlocking, greatest));
      TB_CU(cudaEventCreateWithFlags(&compute_ready_, cudaEventDisableTiming));
      TB_CU(cudaEventCreateWithFlags(&comm_done_, cudaEventDisableTiming));
      TB_CU(cudaEventCreateWithFlags(&step_done_, cudaEventDisableTiming));
      TB_CU(cudaEventCreate(&backward_end_));
      TB_CU(cudaEventCreate(&comm_waited_));
      TB_CU(cudaMalloc(&scalar_, sizeof(double)));
      // On the comm stream: a legacy-stream memset is not ordered with non-blocking streams.
      TB_CU(cudaMemsetAsync(scalar_, 0, sizeof(double), comm_stream_));
      TB_CU(cudaStreamSynchronize(comm_stream_));
      TB_CU(cudaMallocHost(&host_scalar_, sizeof(double)));
    } catch (...) {
      abort_comm();
      release();
      throw;
    }
  }

  ~NcclComm() override {
    // Reductions started and never waited for may never finish (a peer failed): abort, since
    // a destroy would wait for them.
    if (pending_) abort_comm();
    release();
  }

  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string kind() const override { return "nccl"; }

  void start_all_reduce_mean(void* data, i64 count, ElemType type) override {
    check_usable();
    TB_CHECK(count >= 0, "nccl: all-reduce of {} elements", count);
    DeviceGuard guard(device_);
    order_after_compute();
    // A mean over one rank is the data itself: NCCL launches nothing for an in-place sum there,
    // where its average scales every element by 1 (a pass over the bucket that N ranks fold into
    // the ring), so that the data-parallel probe paid for a kernel no gpu:N row runs.
    TB_NCCL(ncclAllReduce(data, data, std::size_t(count), nccl_type(type), size_ == 1 ? ncclSum : ncclAvg, comm_,
                          comm_stream_));
    pending_ = true;
  }

  // Spins, as a step's end does (finish_device_step): measure_link times its all-reduces through
  // this wait, and a sleep's wake-up (50 us and the timer's slack) added to each was taken for
  // the link's latency.
  void wait() override {
    check_usable();
    DeviceGuard guard(device_);
    finish("an all-reduce", Poll::Spin);
  }

  void wait_on_device() override {
    check_usable();
    DeviceGuard guard(device_);
    TB_CU(cudaEventRecord(backward_end_, compute_));
    TB_CU(cudaEventRecord(comm_done_, comm_stream_));
    TB_CU(cudaStreamWaitEvent(compute_, comm_done_, 0));
    TB_CU(cudaEventRecord(comm_waited_, compute_));
    waiting_on_device_ = true;
  }

  double finish_device_step() override {
    if (!waiting_on_device_) return -1;
    check_usable();
    DeviceGuard guard(device_);
    // Everything the step enqueued on the compute stream (its update ordered after the
    // all-reduces) is done when this is.
    TB_CU(cudaEventRecord(step_done_, compute_));
    poll(step_done_, "a training step's all-reduces", Poll::Spin);
    waiting_on_device_ = false;
    pending_ = false;
    float ms = 0;
    TB_CU(cudaEventElapsedTime(&ms, backward_end_, comm_waited_));
    return double(ms) * 1e-3;
  }

  void broadcast(void* data, i64 count, ElemType type, int root) override {
    check_usable();
    TB_CHECK(count >= 0, "nccl: broadcast of {} elements", count);
    TB_CHECK(root >= 0 && root < size_, "nccl: broadcast from rank {} of {} ranks", root, size_);
    DeviceGuard guard(device_);
    order_after_compute();
    TB_NCCL(ncclBroadcast(data, data, std::size_t(count), nccl_type(type), root, comm_, comm_stream_));
    pending_ = true;
    finish("a broadcast");
  }

  void barrier() override {
    check_usable();
    DeviceGuard guard(device_);
    TB_NCCL(ncclAllReduce(scalar_, scalar_, 1, ncclFloat, ncclSum, comm_, comm_stream_));
    pending_ = true;
    finish("a barrier");
  }

  double max(double value) override { return reduce_one(value, ncclMax, "a max-reduction"); }
  double min(double value) override { return reduce_one(value, ncclMin, "a min-reduction"); }

  void abort(const std::string& reason) override {
    fail(reason);
    std::fprintf(stderr, "trainbench rank %d: %s\n", rank_, reason.c_str());
    std::fflush(stderr);
  }

 private:
  void check_usable() const {
    if (aborted_)
      throw Error(
          fmt::format("nccl: rank {} used a communicator that was aborted (after a timeout, an NCCL "
                      "error or abort()); end the run instead of communicating again",
                      rank_));
  }

  void order_after_compute() {
    TB_CU(cudaEventRecord(compute_ready_, compute_));
    TB_CU(cudaStreamWaitEvent(comm_stream_, compute_ready_, 0));
  }

  double reduce_one(double value, ncclRedOp_t op, const char* what) {
    check_usable();
    DeviceGuard guard(device_);
    // Through pinned host memory: a copy to pageable memory would block this thread until the
    // reduction finished, outside the deadline.
    *host_scalar_ = value;
    TB_CU(cudaMemcpyAsync(scalar_, host_scalar_, sizeof(double), cudaMemcpyHostToDevice, comm_stream_));
    TB_NCCL(ncclAllReduce(scalar_, scalar_, 1, ncclDouble, op, comm_, comm_stream_));
    TB_CU(cudaMemcpyAsync(host_scalar_, scalar_, sizeof(double), cudaMemcpyDeviceToHost, comm_stream_));
    pending_ = true;
    finish(what);
    return *host_scalar_;
  }

  // How a wait polls: sleeping between polls (set-up and agreement: a wait that may be long, and
  // another rank on this machine may want the core), or spinning with a yield (a step's end: a
  // wait as short as the step, which a sleep's wake-up would lengthen; the spin is what CUDA's
  // own synchronisation does by default).
  enum class Poll { Sleep, Spin };

  // Waits for everything on the communication stream (at most timeout_s), then orders later
  // work on the compute stream after it. The current device must be device_.
  void finish(const char* what, Poll how = Poll::Sleep) {
    TB_CU(cudaEventRecord(comm_done_, comm_stream_));
    poll(comm_done_, what, how);
    TB_CU(cudaStreamWaitEvent(compute_, comm_done_, 0));
    pending_ = false;
  }

  // Until `event` completes, at most timeout_s, watching NCCL's asynchronous errors; aborts the
  // communicator and throws on an error or at the deadline.
  void poll(cudaEvent_t event, const char* what, Poll how) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
    for (bool first = true;; first = false) {
      const cudaError_t status = cudaEventQuery(event);
      if (status == cudaSuccess) break;
      if (status != cudaErrorNotReady) {
        fail(fmt::format("CUDA error {} in {}", cudaGetErrorName(status), what));
        TB_CU(status);
      }
      cuda::forget_not_ready();
      if (first) cuda::count_host_wait();
      // Another replica of this process failed first: its error is the cause, and an NCCL error
      // this rank sees after it (its peer's communicator aborted) is a consequence.
      if (group_ && group_->failed()) {
        abort_comm();
        throw PeerFailed(fmt::format("nccl: rank {} stopped waiting in {}: {}; the communicator was aborted", rank_,
                                     what, group_->reason()));
      }
      ncclResult_t async = ncclSuccess;
      TB_NCCL(ncclCommGetAsyncError(comm_, &async));
      if (async != ncclSuccess && async != ncclInProgress) {
        const char* last = ncclGetLastError(comm_);  // before the abort frees comm_
        const std::string detail = last ? last : "";
        fail(fmt::format("NCCL error {} in {}", ncclGetErrorString(async), what));
        throw Error(
            fmt::format("nccl: rank {} hit an NCCL error in {}: {}{}{}; the communicator was aborted "
                        "(check the other ranks' errors and NCCL_DEBUG=WARN output)",
                        rank_, what, ncclGetErrorString(async), detail.empty() ? "" : ": ", detail));
      }
      if (std::chrono::steady_clock::now() > deadline) {
        fail(fmt::format("waited {} s in {}", timeout_s_, what));
        throw Error(
            fmt::format("nccl: rank {} waited {} s for the other ranks in {}: a rank failed or hangs (see "
                        "its error above); the communicator was aborted",
                        rank_, timeout_s_, what));
      }
      if (how == Poll::Sleep)
        std::this_thread::sleep_for(kPollInterval);
      else
        std::this_thread::yield();
    }
  }

  void abort_comm() noexcept {
    if (comm_ && !aborted_) (void)ncclCommAbort(comm_);
    aborted_ = true;
  }

  // This rank's own failure (a poll's error or deadline, or abort()): the process's other GPUs
  // are told before the abort (which may wait for their communicators), so that they stop at
  // their next poll, not at the deadline.
  void fail(const std::string& reason) {
    if (group_) group_->set(rank_, reason);
    abort_comm();
  }

  // Frees everything; statuses are ignored (destructors do not throw).
  void release() noexcept {
    int previous = 0;
    const bool restore = cudaGetDevice(&previous) == cudaSuccess;
    (void)cudaSetDevice(device_);
    if (comm_ && !aborted_) (void)ncclCommDestroy(comm_);
    comm_ = nullptr;
    if (host_scalar_) (void)cudaFreeHost(host_scalar_);
    if (scalar_) (void)cudaFree(scalar_);
    for (cudaEvent_t e : {comm_done_, step_done_, backward_end_, comm_waited_})
      if (e) (void)cudaEventDestroy(e);
    if (compute_ready_) (void)cudaEventDestroy(compute_ready_);
    if (comm_stream_) (void)cudaStreamDestroy(comm_stream_);
    if (restore) (void)cudaSetDevice(previous);
  }

  ncclComm_t comm_;
  int device_;
  cudaStream_t compute_;  // the network's stream; not owned
  double timeout_s_;
  std::shared_ptr<GroupFailure> group_;  // the other GPUs' of this process (make_nccl_group), or none
  int rank_ = 0, size_ = 1;
  cudaStream_t comm_stream_ = nullptr;
  cudaEvent_t compute_ready_ = nullptr;  // recorded on compute_ before each collective
  cudaEvent_t comm_done_ = nullptr;      // recorded on comm_stream_ by finish() and wait_on_device()
  cudaEvent_t step_done_ = nullptr;      // on compute_: a step's end, for finish_device_step()
  // On compute_, timed: backward's end, and the end of the compute stream's wait for the
  // all-reduces after it (their difference: the communication backward did not hide).
  cudaEvent_t backward_end_ = nullptr, comm_waited_ = nullptr;
  bool waiting_on_device_ = false;  // wait_on_device() since the last finish_device_step()
  double* scalar_ = nullptr;        // device: barrier and max/min operand
  double* host_scalar_ = nullptr;   // pinned host: max/min value in and out
  bool pending_ = false;            // collectives enqueued since the last finish()
  bool aborted_ = false;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_nccl_group(const std::vector<int>& devices,
                                                           const std::vector<cudaStream_t>& streams, double timeout_s) {
  TB_CHECK(!devices.empty() && devices.size() == streams.size(),
           "nccl: {} devices and {} streams; pass one compute stream per device", devices.size(), streams.size());
  const int count = int(devices.size());
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  {
    DeviceGuard guard(devices[0]);  // restores the caller's device, whatever NCCL leaves current
    TB_NCCL(ncclCommInitAll(comms.data(), count, devices.data()));
  }
  std::vector<std::unique_ptr<Communicator>> group;
  group.reserve(devices.size());
  const auto failure = std::make_shared<GroupFailure>();
  for (int i = 0; i < count; ++i) {
    try {
      group.push_back(
          std::make_unique<NcclComm>(std::exchange(comms[i], nullptr), devices[i], streams[i], timeout_s, failure));
    } catch (...) {
      for (ncclComm_t comm : comms)
        if (comm) (void)ncclCommAbort(comm);
      for (auto& member : group) member->abort("a peer's communicator could not be set up");
      throw;
    }
  }
  return group;
}

Link measure_nccl_link(Communicator& bootstrap, int device, std::size_t max_bytes) {
  DeviceGuard guard(device);
  cudaStream_t stream = nullptr;
  void* buffer = nullptr;
  TB_CU(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  try {
    TB_CU(cudaMalloc(&buffer, max_bytes));
    TB_CU(cudaMemsetAsync(buffer, 0, max_bytes, stream));
    TB_CU(cudaStreamSynchronize(stream));
    const std::unique_ptr<Communicator> comm = make_nccl_comm_mpi(bootstrap, device, stream);
    Link link = measure_link(*comm, max_bytes, buffer);
    (void)cudaFree(buffer);
    (void)cudaStreamDestroy(stream);
    return link;
  } catch (...) {
    if (buffer) (void)cudaFree(buffer);
    (void)cudaStreamDestroy(stream);
    throw;
  }
}

std::unique_ptr<Communicator> make_nccl_comm_mpi(Communicator& bootstrap, int device, cudaStream_t stream,
                                                 double timeout_s) {
  // The id travels as raw bits in F32 elements: the one type every communicator broadcasts.
  static_assert(sizeof(ncclUniqueId) % sizeof(float) == 0);
  ncclUniqueId id{};
  if (bootstrap.rank() == 0) TB_NCCL(ncclGetUniqueId(&id));
  bootstrap.broadcast(&id, i64(sizeof id / sizeof(float)), ElemType::F32, 0);
  ncclComm_t comm = nullptr;
  {
    DeviceGuard guard(device);
    TB_NCCL(ncclCommInitRank(&comm, bootstrap.size(), id, bootstrap.rank()));
  }
  return std::make_unique<NcclComm>(comm, device, stream, timeout_s);
}

}  // namespace tb::parallel
