// The data-parallel step: a replica wraps one backend network and a communicator. Its weights
// start as rank 0's; during backward, gradient buckets are all-reduced (averaged) as soon as
// every layer feeding them is done, overlapping communication with the rest of backward; the
// update waits for the last bucket, so every replica applies the same averaged gradients.
// The step is as asynchronous as the backend's own: on a GPU the update's stream waits for the
// all-reduces on the device, the host waits once at the step's end (within the communicator's
// deadline), and the trainer prepares the next batch meanwhile, as PyTorch DDP's step does.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/core/error.hpp"
#include "engine/core/network.hpp"
#include "engine/parallel/communicator.hpp"

namespace tb::parallel {

// The replicas' weights differ after training: the data-parallel path is broken (the row fails,
// and its verdicts say replicas_differ).
class ReplicasDiffer : public CheckFailed {
 public:
  using CheckFailed::CheckFailed;
};

// One all-reduce: a contiguous run of gradients of one type, from the segments of nodes
// [first_node, last_node]. Ready once backward has run first_node (it runs last to first).
struct Bucket {
  void* data = nullptr;
  ElemType type = ElemType::F32;
  i64 count = 0;
  int first_node = 0, last_node = 0;
};

// Buckets of about `bucket_bytes` (at least one segment each), last layers first within each
// storage type (Network::gradient_segments' order). A bucket joins only segments that are
// neighbours in memory, whatever order the backend placed them in; every segment is in exactly
// one bucket, and overlapping segments are refused.
std::vector<Bucket> plan_buckets(const std::vector<FlatSegment>& segments, std::size_t bucket_bytes);

// PyTorch DDP's default bucket size: large enough to amortise a collective's latency, small
// enough that the first bucket starts while most of backward is still to come.
inline constexpr std::size_t kDefaultBucketBytes = std::size_t(25) << 20;

// Communication of the steps since construction (or reset_stats()).
struct CommStats {
  i64 steps = 0;
  // Backward's end to the last bucket done: communication not hidden (on the device clock where
  // the device waited for it, on the wall clock where the host did).
  double wait_s = 0;
  double bytes = 0;       // gradient bytes all-reduced
  i64 buckets_early = 0;  // buckets started while backward still had layers to run
  i64 buckets = 0;
};

class ReplicaNetwork final : public Network {
 public:
  // Broadcasts rank 0's weights to every replica (a collective: every rank constructs one).
  // Takes `network` only once that is done: where the constructor throws (the broadcast's
  // deadline, a peer's failure), `network` is still the caller's, unhooked, and the other ranks
  // were told (abort()).
  ReplicaNetwork(std::unique_ptr<Network>&& network, std::unique_ptr<Communicator> comm,
                 std::size_t bucket_bytes = kDefaultBucketBytes);
  ~ReplicaNetwork() override;

  void set_batch(const BatchView& batch) override { net_->set_batch(batch); }
  float forward() override { return net_->forward(); }
  float evaluate() override { return net_->evaluate(); }
  std::int64_t correct() const override { return net_->correct(); }
  // Backward with the buckets' all-reduces, then the host's wait for the last one.
  void backward() override;
  void update() override { net_->update(); }
  // The backend's step with the all-reduces in it: start_step enqueues it (or, on a synchronous
  // backend, runs it), finish_step waits for its end once; asynchronous() as the backend.
  float train_step(StepTimes& times) override;
  void start_step() override;
  float finish_step(StepTimes& times) override;
  bool asynchronous() const override { return net_->asynchronous(); }
  // Forgets a step in flight (the backend's too); fail() tells the other ranks first.
  void abandon_step() override;
  // Tells the other ranks that this replica failed (the communicator's abort, once), so that they
  // stop at their next wait with `reason` instead of waiting out the deadline, and abandons any
  // step in flight. A call that throws does this itself; the caller does it for a failure outside
  // the replica's calls (the next batch could not be read, the loss was not finite).
  void fail(const std::string& reason);

  std::vector<float> read_output(int node) const override { return net_->read_output(node); }
  std::vector<float> read_grad(int node) const override { return net_->read_grad(node); }
  void set_output_grad(const std::vector<float>& grad) override { net_->set_output_grad(grad); }
  std::vector<float> read_param(int node, int index) const override { return net_->read_param(node, index); }
  std::vector<float> read_param_grad(int node, int index) const override { return net_->read_param_grad(node, index); }
  void write_param(int node, int index, const std::vector<float>& value) override;
  std::int64_t param_bytes() const override { return net_->param_bytes(); }
  std::vector<FlatSegment> gradient_segments() override { return net_->gradient_segments(); }
  std::vector<FlatSegment> param_segments() override { return net_->param_segments(); }
  void params_written() override { net_->params_written(); }
  void set_step_hook(std::function<void(int node)>) override;
  bool scale_gradients_in_update(float scale) override { return net_->scale_gradients_in_update(scale); }
  std::uint64_t param_checksum() override { return net_->param_checksum(); }
  void synchronize() override { net_->synchronize(); }
  ResidentData* resident_data() override { return net_->resident_data(); }
  const MemoryReport* memory_report() const override { return net_->memory_report(); }
  std::optional<CommEndpoint> comm_endpoint() const override { return net_->comm_endpoint(); }

  // A collective: throws tb::CheckFailed naming the ranks' disagreement unless every replica
  // holds the same weights, bit for bit.
  void check_weights_agree();
  const std::vector<Bucket>& buckets() const { return buckets_; }
  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = CommStats{}; }
  Communicator& comm() { return *comm_; }
  Network& inner() { return *net_; }
  // Gives the wrapped network back, unhooked: this replica can no longer step.
  std::unique_ptr<Network> release();

 private:
  void on_step_hook(int node);
  void start_ready(int node);  // starts every bucket whose first node has run
  void backward_done();        // starts what is left; orders the update after every bucket
  template <class F>
  auto aborting_on_error(F&& f) -> decltype(f());  // tells the other ranks of an exception

  std::unique_ptr<Network> net_;
  std::unique_ptr<Communicator> comm_;
  std::vector<Bucket> buckets_;
  std::size_t next_ = 0;      // the next bucket to start
  int first_param_node_ = 0;  // backward's last node with gradients
  // Inside start_step .. finish_step: the communicator orders the update after the all-reduces
  // on the device where it can, and finish_step waits for the step; outside it (backward()
  // called alone) the host waits at backward's end.
  bool in_step_ = false;
  bool failed_ = false;     // fail() told the other ranks
  double host_wait_s_ = 0;  // the last backward's end on the host, in the communicator's wait
  CommStats stats_;
};

}  // namespace tb::parallel
