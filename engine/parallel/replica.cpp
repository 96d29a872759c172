// Buckets and the data-parallel step.
#include "engine/parallel/replica.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "engine/core/timer.hpp"

namespace tb::parallel {

std::vector<Bucket> plan_buckets(const std::vector<FlatSegment>& segments, std::size_t bucket_bytes) {
  // Each segment's neighbour above it in memory among the segments of its type. A backend may
  // place a node's gradients out of node order (CudaNetwork puts a fused batch norm's where its
  // group runs, after the projection shortcut's nodes), so that "lies below the bucket" is not
  // enough: a bucket grows only over the segment just below it, and no gradient is in two.
  std::vector<const FlatSegment*> by_address;
  for (const FlatSegment& s : segments) {
    TB_CHECK(s.count > 0 && s.data, "gradient segment of node {} is empty", s.node);
    by_address.push_back(&s);
  }
  std::sort(by_address.begin(), by_address.end(), [](const FlatSegment* a, const FlatSegment* b) {
    if (a->type != b->type) return int(a->type) < int(b->type);
    return std::less<const void*>()(a->data, b->data);
  });
  std::map<const void*, const void*> above;
  for (std::size_t k = 0; k + 1 < by_address.size(); ++k) {
    const FlatSegment& lo = *by_address[k];
    const FlatSegment& hi = *by_address[k + 1];
    if (lo.type != hi.type) continue;
    const char* end_of_lo = static_cast<const char*>(lo.data) + lo.count * i64(elem_bytes(lo.type));
    TB_CHECK(end_of_lo <= static_cast<const char*>(hi.data), "the gradients of nodes {} and {} overlap in memory",
             lo.node, hi.node);
    above[lo.data] = hi.data;
  }
  std::vector<Bucket> out;
  // Backward finishes the last node first: walk the segments from the end.
  for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
    const FlatSegment& s = *it;
    const std::size_t e = elem_bytes(s.type);
    if (!out.empty()) {
      Bucket& b = out.back();
      const auto next = above.find(s.data);
      const bool just_below = s.type == b.type && next != above.end() && next->second == b.data;
      if (just_below && std::size_t(b.count) * e < bucket_bytes) {
        // with the padding between
        b.count += (static_cast<const char*>(b.data) - static_cast<const char*>(s.data)) / i64(e);
        b.data = s.data;
        b.first_node = s.node;
        continue;
      }
    }
    out.push_back(Bucket{s.data, s.type, s.count, s.node, s.node});
  }
  return out;
}

ReplicaNetwork::ReplicaNetwork(std::unique_ptr<Network>&& network, std::unique_ptr<Communicator> comm,
                               std::size_t bucket_bytes)
    : comm_(std::move(comm)) {
  // `network` stays the caller's until the end, where nothing is left to throw.
  Network& net = *network;
  const auto segments = net.gradient_segments();
  TB_CHECK(!segments.empty(), "data parallelism needs a model with parameters");
  first_param_node_ = std::min_element(segments.begin(), segments.end(), [](const auto& a, const auto& b) {
                        return a.node < b.node;
                      })->node;
  buckets_ = plan_buckets(segments, bucket_bytes);
  // Buckets of several storage types (16-bit gradients, fp32 batch-norm ones) come out of the
  // plan one type after the other; they are started in the order backward completes them.
  std::stable_sort(buckets_.begin(), buckets_.end(),
                   [](const Bucket& a, const Bucket& b) { return a.first_node > b.first_node; });
  // Weights start identical: rank 0's (optimizer state starts at zero everywhere). A replica
  // that cannot take part tells the others, which would otherwise wait out their deadline here.
  try {
    for (const FlatSegment& s : net.param_segments()) comm_->broadcast(s.data, s.count, s.type, 0);
    net.params_written();
  } catch (const std::exception& e) {
    comm_->abort(e.what());
    throw;
  }
  // Where the mean would be a pass of its own over host memory (MPI's division after the sums),
  // the optimizer's pass takes it instead.
  if (comm_->mean_costs_a_pass() && net.scale_gradients_in_update(1.0f / float(comm_->size()))) comm_->keep_sums();
  net.set_step_hook([this](int node) { on_step_hook(node); });
  net_ = std::move(network);
}

ReplicaNetwork::~ReplicaNetwork() {
  if (net_) net_->set_step_hook({});
}

std::unique_ptr<Network> ReplicaNetwork::release() {
  net_->set_step_hook({});
  return std::move(net_);
}

void ReplicaNetwork::set_step_hook(std::function<void(int node)>) {
  throw Error("a replica's step hook starts its all-reduces; it cannot be replaced");
}

void ReplicaNetwork::write_param(int node, int index, const std::vector<float>& value) {
  net_->write_param(node, index, value);
}

void ReplicaNetwork::on_step_hook(int node) {
  if (node >= 0)
    start_ready(node);
  else if (node == kBackwardDone)
    backward_done();
}

void ReplicaNetwork::start_ready(int node) {
  // Every bucket whose first node has run is complete; start them in plan order (the same on
  // every rank, as collectives require).
  while (next_ < buckets_.size() && buckets_[next_].first_node >= node) {
    const Bucket& b = buckets_[next_++];
    comm_->start_all_reduce_mean(b.data, b.count, b.type);
    stats_.bytes += double(b.count) * double(elem_bytes(b.type));
    ++stats_.buckets;
    if (node > first_param_node_) ++stats_.buckets_early;  // layers with gradients still to run
  }
}

void ReplicaNetwork::backward_done() {
  start_ready(0);  // anything not started yet (nothing, when the hook saw every node)
  next_ = 0;
  ++stats_.steps;
  // In a step the host waits here only where the device cannot (host buffers: threads, MPI).
  const double t0 = wall_seconds();
  if (in_step_)
    comm_->wait_on_device();
  else
    comm_->wait();
  host_wait_s_ = wall_seconds() - t0;
  if (!in_step_) stats_.wait_s += host_wait_s_;
}

template <class F>
auto ReplicaNetwork::aborting_on_error(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    fail(e.what());
    throw;
  }
}

void ReplicaNetwork::fail(const std::string& reason) {
  if (!std::exchange(failed_, true)) comm_->abort(reason);
  abandon_step();
}

void ReplicaNetwork::backward() {
  aborting_on_error([&] { net_->backward(); });
}

void ReplicaNetwork::start_step() {
  TB_CHECK(!in_step_, "a replica's step was started and not finished");
  in_step_ = true;
  aborting_on_error([&] { net_->start_step(); });
}

float ReplicaNetwork::finish_step(StepTimes& times) {
  TB_CHECK(in_step_, "finish_step without start_step");
  return aborting_on_error([&] {
    // Where the device waited for the all-reduces, the host waits here for the step's end (its
    // one wait), within the communicator's deadline; the backend's own wait then finds it done.
    const double device_wait = comm_->finish_device_step();
    in_step_ = false;
    const float loss = net_->finish_step(times);
    stats_.wait_s += device_wait >= 0 ? device_wait : host_wait_s_;
    return loss;
  });
}

void ReplicaNetwork::abandon_step() {
  // The next step starts its buckets from the first, whatever this one reached.
  next_ = 0;
  if (std::exchange(in_step_, false)) net_->abandon_step();
}

float ReplicaNetwork::train_step(StepTimes& times) {
  start_step();
  return finish_step(times);
}

void ReplicaNetwork::check_weights_agree() {
  // The 64-bit hash in three exact pieces of 22 bits (doubles hold 53): equal on every rank
  // iff each piece's maximum equals its minimum.
  const std::uint64_t hash = net_->param_checksum();
  for (int piece = 0; piece < 3; ++piece) {
    const double v = double((hash >> (22 * piece)) & ((1u << 22) - 1));
    const double hi = aborting_on_error([&] { return comm_->max(v); });
    const double lo = aborting_on_error([&] { return comm_->min(v); });
    if (hi != lo)
      throw ReplicasDiffer(
          fmt::format("the {} replicas' weights differ after training (rank {}'s checksum {:016x}): "
                      "data-parallel replicas must stay identical",
                      comm_->size(), comm_->rank(), hash));
  }
}

}  // namespace tb::parallel
