// The MPI communicator: nonblocking collectives on a duplicate of MPI_COMM_WORLD, completed by
// polling with a deadline so that a rank that died or hangs makes the others fail, not hang.
#include "engine/parallel/mpi_comm.hpp"

// The C API only: Open MPI and MPICH otherwise pull in their deprecated C++ bindings, which
// warn under -Wextra.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/core/error.hpp"

namespace tb {
// TB_MPI's check (engine/core/error.hpp): MPI's text for the status. Only calls on a
// communicator whose error handler is MPI_ERRORS_RETURN (or calls made before MPI_Init) can
// return a failure; on MPI_COMM_WORLD errors stay fatal.
void check_status(MpiStatus status, const char* expr, const char* file, int line) {
  if (status.code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(status.code, text, &length) != MPI_SUCCESS)
    std::snprintf(text, sizeof text, "error %d", status.code);
  fail_call(CallFailure::Backend, "MPI", text, expr, file, line);
}
}  // namespace tb

namespace tb::parallel {

namespace {

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

// A wait polls back to back for its first kSpin, giving up the core between polls only to a
// thread that wants it, then sleeps kPollInterval between polls, so as not to burn a core on a
// long one. Open MPI advances a nonblocking all-reduce only inside MPI calls, one round of it per
// poll that finds the last round's message: sleeping from the first poll cost every round about
// 100 us (the interval and the timer's slack), so that a 256-byte all-reduce between two ranks on
// one machine took 360-410 us where it takes 2-5 us, and the LSTM's mpi:2 step, one 2 KB
// all-reduce after 0.2 ms of compute, ran at 52,000-68,000 samples/s where it runs at 146,000-160,000.
constexpr auto kSpin = std::chrono::milliseconds(1);
constexpr auto kPollInterval = std::chrono::microseconds(50);
// Polls `count` requests until they complete (true) or `deadline` passes (false), as above,
// sleeping `interval` between polls after the spin.
bool complete_by(MPI_Request* requests, int count, std::chrono::steady_clock::time_point deadline,
                 std::chrono::microseconds interval = kPollInterval) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    int done = 0;
    TB_MPI(MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE));
    if (done) return true;
    const auto now = std::chrono::steady_clock::now();
    if (now - start < kSpin) {
      std::this_thread::yield();
      continue;
    }
    if (now > deadline) return false;
    std::this_thread::sleep_for(interval);
  }
}

// The time `seconds` from now, on the clock complete_by reads.
std::chrono::steady_clock::time_point seconds_from_now(double seconds) {
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
}

// MPI counts are int; longer buffers go in pieces of this many elements.
constexpr i64 kMaxPiece = i64(1) << 30;

// Which algorithm Open MPI's nonblocking all-reduce (its libnbc component) runs. Left to itself,
// libnbc takes a binomial tree for every buffer reduced in place, as ours are: the whole buffer
// up the tree to rank 0 and back down, log2 N rounds each way, so that two ranks move it twice
// in turn and reach half their link's bandwidth (a 1 Gbit/s link measured 0.059 GB/s), less at
// larger N. From kMpiRingFromBytes we ask for its ring instead (2(N-1) rounds of a 1/N share:
// the link's full bandwidth at any N, the algorithm NCCL and the model use); below that the
// binomial tree's 2 log2 N rounds are the quicker. The choice goes through MPI_T's control
// variable coll_libnbc_iallreduce_algorithm (Open MPI 4.1 and later), set before each
// all-reduce, the same on every rank. Another MPI, an older Open MPI, or a user's own
// OMPI_MCA_coll_libnbc_iallreduce_algorithm are left to choose for themselves.
class NbcAlgorithm {
 public:
  // After MPI_Init.
  void open() {
    if (std::getenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm")) return;
    int provided = 0, index = 0, count = 0;
    if (MPI_T_init_thread(MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) return;
    t_open_ = true;
    if (MPI_T_cvar_get_index("coll_libnbc_iallreduce_algorithm", &index) != MPI_SUCCESS ||
        MPI_T_cvar_handle_alloc(index, nullptr, &handle_, &count) != MPI_SUCCESS || count != 1) {
      close();
      return;
    }
    active_ = true;
  }

  // Before MPI_Finalize: MPI_T ends first (Open MPI 4.1 crashes the other way round).
  void close() {
    if (active_) (void)MPI_T_cvar_handle_free(&handle_);
    if (t_open_) (void)MPI_T_finalize();
    active_ = t_open_ = false;
  }

  void choose(double bytes) {
    if (!active_) return;
    int algorithm = bytes >= kMpiRingFromBytes ? kRing : kBinomial;
    if (algorithm == current_) return;
    TB_CHECK(MPI_T_cvar_write(handle_, &algorithm) == MPI_SUCCESS,
             "mpi: Open MPI refused coll_libnbc_iallreduce_algorithm = {}; set "
             "OMPI_MCA_coll_libnbc_iallreduce_algorithm to leave the choice to it",
             algorithm);
    current_ = algorithm;
  }

  std::string describe() const {
    return active_ ? fmt::format("Open MPI's ring from {} KiB, its binomial tree below", int(kMpiRingFromBytes) / 1024)
                   : "";
  }

 private:
  static constexpr int kRing = 1, kBinomial = 2;  // libnbc's numbers
  MPI_T_cvar_handle handle_ = MPI_T_CVAR_HANDLE_NULL;
  bool t_open_ = false, active_ = false;
  int current_ = 0;
};

NbcAlgorithm& nbc_algorithm() {
  static NbcAlgorithm algorithm;
  return algorithm;
}

class MpiComm final : public Communicator {
 public:
  explicit MpiComm(double timeout_s) : timeout_s_(timeout_s) {
    TB_CHECK(timeout_s > 0, "mpi: timeout of {} s; pass a positive number of seconds", timeout_s);
    int initialized = 0;
    MPI_Initialized(&initialized);
    TB_CHECK(initialized && !mpi_finalized(),
             "mpi: make_mpi_comm needs MPI running; create a tb::parallel::MpiSession first");
    TB_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
    TB_MPI(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    TB_MPI(MPI_Comm_rank(comm_, &rank_));
    TB_MPI(MPI_Comm_size(comm_, &size_));
  }

  ~MpiComm() override {
    // Freeing a communicator with collectives in flight (after a timeout) would leave MPI
    // waiting on them; such a run ends in abort() anyway.
    if (comm_ != MPI_COMM_NULL && !failed_ && requests_.empty() && !mpi_finalized()) (void)MPI_Comm_free(&comm_);
  }

  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string kind() const override { return "mpi"; }
  std::string algorithms() const override { return nbc_algorithm().describe(); }

  void start_all_reduce_mean(void* data, i64 count, ElemType type) override {
    check_usable();
    TB_CHECK(count >= 0, "mpi: all-reduce of {} elements", count);
    if (type != ElemType::F32)
      throw Error(
          fmt::format("mpi: rank {} was asked to all-reduce 16-bit elements, but MPI replicas are fp32 "
                      "(run CPU replicas in fp32, or use NCCL for mixed precision on GPUs)",
                      rank_));
    auto* values = static_cast<float*>(data);
    for (i64 offset = 0; offset < count; offset += kMaxPiece) {
      MPI_Request request = MPI_REQUEST_NULL;
      const int piece = int(std::min(kMaxPiece, count - offset));
      nbc_algorithm().choose(double(piece) * sizeof(float));
      TB_MPI(MPI_Iallreduce(MPI_IN_PLACE, values + offset, piece, MPI_FLOAT, MPI_SUM, comm_, &request));
      requests_.push_back(request);
    }
    pending_.push_back({values, count});
    // Open MPI advances nonblocking collectives only inside MPI calls: give the earlier ones a
    // turn while the caller computes the next gradients.
    progress();
  }

  void keep_sums() override { sums_ = true; }
  bool mean_costs_a_pass() const override { return true; }

  bool progress() override {
    if (requests_.empty() || failed_) return false;
    int done = 0;
    TB_MPI(MPI_Testall(int(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE));
    return !done;
  }

  void wait() override {
    check_usable();
    wait_for(requests_.data(), int(requests_.size()), "an all-reduce");
    requests_.clear();
    const float ranks = float(size_);
    if (!sums_)
      for (const Pending& p : pending_)
        for (i64 i = 0; i < p.count; ++i) p.data[i] /= ranks;
    pending_.clear();
  }

  void broadcast(void* data, i64 count, ElemType type, int root) override {
    check_usable();
    TB_CHECK(count >= 0, "mpi: broadcast of {} elements", count);
    TB_CHECK(root >= 0 && root < size_, "mpi: broadcast from rank {} of {} ranks", root, size_);
    // Nothing is computed on the elements, so 16-bit ones travel as their bits.
    const bool wide = type == ElemType::F32;
    auto* bytes = static_cast<char*>(data);
    const std::size_t elem = wide ? 4 : 2;
    for (i64 offset = 0; offset < count; offset += kMaxPiece) {
      MPI_Request request = MPI_REQUEST_NULL;
      const int piece = int(std::min(kMaxPiece, count - offset));
      TB_MPI(MPI_Ibcast(bytes + std::size_t(offset) * elem, piece, wide ? MPI_FLOAT : MPI_UINT16_T, root, comm_,
                        &request));
      wait_for(&request, 1, "a broadcast");
    }
  }

  void barrier() override {
    check_usable();
    MPI_Request request = MPI_REQUEST_NULL;
    TB_MPI(MPI_Ibarrier(comm_, &request));
    wait_for(&request, 1, "a barrier");
  }

  double max(double value) override { return reduce_one(value, MPI_MAX, "a max-reduction"); }
  double min(double value) override { return reduce_one(value, MPI_MIN, "a min-reduction"); }

  void abort(const std::string& reason) override {
    std::fprintf(stderr, "trainbench rank %d: %s\n", rank_, reason.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

 private:
  struct Pending {
    float* data;
    i64 count;
  };

  void check_usable() const {
    if (failed_)
      throw Error(
          fmt::format("mpi: rank {} used a communicator whose earlier wait timed out; end the run "
                      "(call abort) instead of communicating again",
                      rank_));
  }

  double reduce_one(double value, MPI_Op op, const char* what) {
    check_usable();
    double result = value;
    MPI_Request request = MPI_REQUEST_NULL;
    nbc_algorithm().choose(sizeof value);
    TB_MPI(MPI_Iallreduce(&value, &result, 1, MPI_DOUBLE, op, comm_, &request));
    wait_for(&request, 1, what);
    return result;
  }

  // Completes `count` requests, or throws once timeout_s has passed; the communicator is
  // unusable after that (the requests stay in flight).
  void wait_for(MPI_Request* requests, int count, const char* what) {
    if (count == 0) return;
    if (complete_by(requests, count, seconds_from_now(timeout_s_))) return;
    failed_ = true;
    throw Error(
        fmt::format("rank {} waited {} s for the other ranks in {}: a rank failed or hangs (see its error above)",
                    rank_, timeout_s_, what));
  }

  double timeout_s_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  bool failed_ = false;
  bool sums_ = false;                  // keep_sums()
  std::vector<MPI_Request> requests_;  // all-reductions started since the last wait()
  std::vector<Pending> pending_;       // their buffers, divided by size() once complete
};

}  // namespace

bool launched_by_mpirun() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"})
    if (std::getenv(name)) return true;
  return false;
}

MpiSession::MpiSession() {
  int initialized = 0;
  TB_MPI(MPI_Initialized(&initialized));
  if (initialized) {
    TB_CHECK(!mpi_finalized(), "mpi: MPI was already finalised in this process; keep one MpiSession for the whole run");
    return;
  }
  int provided = 0;
  TB_MPI(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
  initialised_here_ = true;
  nbc_algorithm().open();
}

MpiSession::~MpiSession() {
  if (initialised_here_ && !mpi_finalized()) {
    nbc_algorithm().close();
    (void)MPI_Finalize();
  }
}

int MpiSession::rank() const {
  int rank = 0;
  TB_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  return rank;
}

int MpiSession::size() const {
  int size = 1;
  TB_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size));
  return size;
}

std::pair<int, int> MpiSession::local_rank_and_size() const {
  MPI_Comm node = MPI_COMM_NULL;
  TB_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int rank = 0, size = 1;
  TB_MPI(MPI_Comm_rank(node, &rank));
  TB_MPI(MPI_Comm_size(node, &size));
  TB_MPI(MPI_Comm_free(&node));
  return {rank, size};
}

std::vector<std::string> MpiSession::all_gather(const std::string& mine, double timeout_s,
                                                const std::string& what) const {
  const int n = size(), length = int(mine.size());
  std::vector<int> lengths(static_cast<std::size_t>(n)), offsets(static_cast<std::size_t>(n));
  // Nonblocking on MPI_COMM_WORLD, whose errors stay fatal: a rank that never comes leaves the
  // collective in flight, and the job cannot go on.
  // Without a deadline (a rank standing by while rank 0 measures), polls a millisecond apart.
  const bool bounded = std::isfinite(timeout_s);
  const auto deadline = bounded ? seconds_from_now(timeout_s) : std::chrono::steady_clock::time_point::max();
  const auto interval = bounded ? kPollInterval : std::chrono::microseconds(1000);
  const auto wait = [&](MPI_Request& request) {
    if (complete_by(&request, 1, deadline, interval)) return;
    std::fprintf(stderr,
                 "trainbench rank %d: waited %.0f s for every rank to %s: a rank hangs (see its output); "
                 "ending the job\n",
                 rank(), timeout_s, what.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  };
  MPI_Request request = MPI_REQUEST_NULL;
  TB_MPI(MPI_Iallgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, MPI_COMM_WORLD, &request));
  wait(request);
  int total = 0;
  for (int r = 0; r < n; ++r) offsets[std::size_t(r)] = std::exchange(total, total + lengths[std::size_t(r)]);
  std::string all(std::size_t(total), '\0');
  TB_MPI(MPI_Iallgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR,
                         MPI_COMM_WORLD, &request));
  wait(request);
  std::vector<std::string> out;
  for (int r = 0; r < n; ++r)
    out.push_back(all.substr(std::size_t(offsets[std::size_t(r)]), std::size_t(lengths[std::size_t(r)])));
  return out;
}

std::unique_ptr<Communicator> make_mpi_comm(double timeout_s) { return std::make_unique<MpiComm>(timeout_s); }

}  // namespace tb::parallel
