// Buckets and the data-parallel step.
#include "engine/parallel/replica.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "engine/core/timer.hpp"
#include "engine/parallel/timeline.hpp"

namespace tb::parallel {

std::vector<Bucket> plan_buckets(const std::vector<FlatSegment>& segments, std::size_t bucket_bytes) {
  std::vector<Bucket> out;
  // Backward finishes the last node first: walk the segments from the end. A bucket grows
  // while its next segment has the same type and lies just below it in memory.
  for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
    const FlatSegment& s = *it;
    TB_CHECK(s.count > 0 && s.data, "gradient segment of node {} is empty", s.node);
    const std::size_t e = elem_bytes(s.type);
    if (!out.empty()) {
      Bucket& b = out.back();
      const char* begin = static_cast<const char*>(b.data);
      const char* end_of_s = static_cast<const char*>(s.data) + s.count * i64(e);
      const bool below = end_of_s <= begin && s.type == b.type;
      if (below && std::size_t(b.count) * e < bucket_bytes) {
        b.count += (begin - static_cast<const char*>(s.data)) / i64(e);  // with any padding between
        b.data = s.data;
        b.first_node = s.node;
        continue;
      }
    }
    out.push_back(Bucket{s.data, s.type, s.count, s.node, s.node});
  }
  return out;
}

ReplicaNetwork::ReplicaNetwork(std::unique_ptr<Network> network, std::unique_ptr<Communicator> comm,
                               std::size_t bucket_bytes)
    : net_(std::move(network)), comm_(std::move(comm)) {
  const auto segments = net_->gradient_segments();
  TB_CHECK(!segments.empty(), "data parallelism needs a model with parameters");
  first_param_node_ = std::min_element(segments.begin(), segments.end(), [](const auto& a, const auto& b) {
                        return a.node < b.node;
                      })->node;
  buckets_ = plan_buckets(segments, bucket_bytes);
  // Buckets of several storage types (16-bit gradients, fp32 batch-norm ones) come out of the
  // plan one type after the other; they are started in the order backward completes them.
  std::stable_sort(buckets_.begin(), buckets_.end(),
                   [](const Bucket& a, const Bucket& b) { return a.first_node > b.first_node; });
  // Weights start identical: rank 0's (optimizer state starts at zero everywhere).
  for (const FlatSegment& s : net_->param_segments()) comm_->broadcast(s.data, s.count, s.type, 0);
  net_->params_written();
  net_->set_backward_hook([this](int node) { on_node_done(node); });
  if (const std::optional<CommEndpoint> e = net_->comm_endpoint())
    device_clock_ = make_device_clock(e->device, e->stream);
}

ReplicaNetwork::~ReplicaNetwork() {
  if (net_) net_->set_backward_hook({});
}

std::unique_ptr<Network> ReplicaNetwork::release() {
  net_->set_backward_hook({});
  return std::move(net_);
}

void ReplicaNetwork::set_backward_hook(std::function<void(int node)>) {
  throw Error("a replica's backward hook starts its all-reduces; it cannot be replaced");
}

void ReplicaNetwork::write_param(int node, int index, const std::vector<float>& value) {
  net_->write_param(node, index, value);
}

void ReplicaNetwork::on_node_done(int node) {
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

void ReplicaNetwork::finish_backward() {
  const double t0 = wall_seconds();
  on_node_done(0);  // anything not started yet (nothing, when the hooks saw every node)
  comm_->wait();
  stats_.wait_s += wall_seconds() - t0;
  next_ = 0;
  ++stats_.steps;
}

void ReplicaNetwork::backward() {
  try {
    net_->backward();
    finish_backward();
  } catch (const std::exception& e) {
    comm_->abort(e.what());
    throw;
  }
}

float ReplicaNetwork::train_step(StepTimes& times) {
  try {
    if (device_clock_) device_clock_->mark(0);
    const double t0 = wall_seconds();
    const float loss = net_->forward();
    const double t1 = wall_seconds();
    net_->backward();
    finish_backward();
    const double t2 = wall_seconds();
    net_->update();
    const double t3 = wall_seconds();
    double device = -1;  // the step on the device clock, from forward to the update's end
    if (device_clock_) {
      device_clock_->mark(1);
      device = device_clock_->read(2).at(0);
    }
    times = StepTimes{.forward = t1 - t0, .backward = t2 - t1, .update = t3 - t2, .device = device};
    return loss;
  } catch (const std::exception& e) {
    comm_->abort(e.what());
    throw;
  }
}

void ReplicaNetwork::check_weights_agree() {
  // The 64-bit hash in three exact pieces of 22 bits (doubles hold 53): equal on every rank
  // iff each piece's maximum equals its minimum.
  const std::uint64_t hash = net_->param_checksum();
  for (int piece = 0; piece < 3; ++piece) {
    const double v = double((hash >> (22 * piece)) & ((1u << 22) - 1));
    const double hi = comm_->max(v), lo = comm_->min(v);
    if (hi != lo)
      throw ReplicasDiffer(
          fmt::format("the {} replicas' weights differ after training (rank {}'s checksum {:016x}): "
                      "data-parallel replicas must stay identical",
                      comm_->size(), comm_->rank(), hash));
  }
}

}  // namespace tb::parallel
