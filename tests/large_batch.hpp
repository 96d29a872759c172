// The exact reference of data parallelism (test_parallel.cpp, test_mpi.cpp, test_cuda.cpp): N
// replicas of batch b, each on its shard, averaging gradients, must hold after k SGD steps the
// weights of one network trained on the N*b samples. SGD, not Adam: Adam divides by the
// gradient's own scale, so a sum in place of a mean would pass under it.
#pragma once

#include <random>
#include <vector>

#include "engine/core/network.hpp"
#include "engine/core/spec.hpp"

namespace tb::testing_support {

// One step's data for the whole batch, and each replica's shard of it. Inputs are (N, ...) or,
// for sequences, time-major (T, N, ...); so are regression targets.
class LargeBatch {
 public:
  LargeBatch(const ModelSpec& spec, i64 per_replica, int replicas)
      : spec_(spec),
        shard_(per_replica),
        replicas_(replicas),
        batch_(per_replica * replicas),
        shard_input_(std::size_t(replicas)),
        shard_targets_(std::size_t(replicas)),
        shard_labels_(std::size_t(replicas)) {
    const auto shapes = infer_shapes(spec, batch_);
    input_dims_ = shapes.front();
    target_dims_ = shapes.at(shapes.size() - 2);  // what the loss compares: the prediction
  }

  // New random data for the whole batch (the same on every rank for the same seed sequence).
  void draw(std::mt19937& rng) {
    std::normal_distribution<float> value(0.0f, 1.0f);
    input_.resize(std::size_t(product(input_dims_)));
    for (float& v : input_) v = value(rng);
    if (spec_.task == Task::Regression) {
      targets_.resize(std::size_t(product(target_dims_)));
      for (float& v : targets_) v = value(rng);
    } else {
      std::uniform_int_distribution<int> label(0, int(spec_.classes) - 1);
      labels_.resize(std::size_t(batch_));
      for (auto& v : labels_) v = label(rng);
    }
  }

  BatchView whole() const { return view(input_, labels_, targets_); }

  // Replica r's samples [r*b, (r+1)*b), gathered into its own buffers (replicas may call this
  // from their own threads at once).
  BatchView shard(int r) {
    const auto k = std::size_t(r);
    shard_input_[k] = slice(input_, input_dims_, r);
    if (!targets_.empty()) shard_targets_[k] = slice(targets_, target_dims_, r);
    if (!labels_.empty()) shard_labels_[k].assign(labels_.begin() + r * shard_, labels_.begin() + (r + 1) * shard_);
    return view(shard_input_[k], shard_labels_[k], shard_targets_[k]);
  }

  i64 batch() const { return batch_; }

 private:
  static BatchView view(const std::vector<float>& x, const std::vector<std::int32_t>& y, const std::vector<float>& t) {
    return BatchView{x.data(), y.empty() ? nullptr : y.data(), t.empty() ? nullptr : t.data()};
  }
  // Samples [r*b, (r+1)*b) of a batch-major (N, ...) or time-major (T, N, ...) tensor.
  std::vector<float> slice(const std::vector<float>& all, const Dims& dims, int r) const {
    const bool time_major = dims.at(0) != batch_;
    const i64 outer = time_major ? dims.at(0) : 1;
    const i64 per_sample = product(dims) / outer / batch_;
    std::vector<float> out;
    for (i64 t = 0; t < outer; ++t) {
      const auto begin = all.begin() + (t * batch_ + r * shard_) * per_sample;
      out.insert(out.end(), begin, begin + shard_ * per_sample);
    }
    return out;
  }

  ModelSpec spec_;
  i64 shard_;
  int replicas_;
  i64 batch_;
  Dims input_dims_, target_dims_;
  std::vector<float> input_, targets_;
  std::vector<std::int32_t> labels_;
  std::vector<std::vector<float>> shard_input_, shard_targets_;
  std::vector<std::vector<std::int32_t>> shard_labels_;
};

}  // namespace tb::testing_support
