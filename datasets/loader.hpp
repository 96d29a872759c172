// The loader: batches from an in-memory image set (real or synthetic) with per-epoch shuffling,
// per-channel normalisation and optional CIFAR augmentation, prepared either on the training
// thread (0 workers: story 004's serial iterator) or by worker threads into a bounded queue.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "datasets/readers.hpp"
#include "engine/core/dataset.hpp"
#include "engine/core/spec.hpp"

namespace tb::data {

struct LoaderConfig {
  i64 batch = 1;
  int workers = 0;   // threads preparing batches; 0 = on the caller's thread
  int prefetch = 2;  // batches prepared ahead (with workers)
  bool shuffle = true;
  bool augment = false;  // random crop (padding 4) and horizontal flip, for 3-channel images
  std::uint64_t seed = 1;
};

// Per-channel statistics of a training set, applied as (x / 255 - mean) / std.
struct Normalisation {
  std::vector<float> mean, stddev;
  static Normalisation of(const ImageSet& set);
};

class ImageLoader final : public Dataset {
 public:
  // sample_dims: the model's input dims per sample (e.g. {784} or {3, 32, 32}); the set's
  // sample size must match. Samples past the last whole batch of an epoch are dropped.
  ImageLoader(std::string name, std::string source, std::shared_ptr<const ImageSet> set, Normalisation norm,
              Dims sample_dims, LoaderConfig config);
  ~ImageLoader() override;

  const Batch& next() override;
  std::string name() const override { return name_; }
  std::string source() const override { return source_; }
  i64 steps_per_epoch() const override { return steps_per_epoch_; }
  double wait_seconds() const override { return wait_seconds_; }

 private:
  // Global step k -> epoch k / steps, position k % steps; parallel: over the OpenMP threads.
  void prepare(i64 step, Batch& out, bool parallel) const;
  std::vector<std::int32_t> permutation(i64 epoch) const;
  void worker_loop();
  void stop_workers();  // asks every worker to stop and joins it

  std::string name_, source_;
  std::shared_ptr<const ImageSet> set_;
  Normalisation norm_;
  Dims sample_dims_;
  LoaderConfig config_;
  i64 steps_per_epoch_;
  double wait_seconds_ = 0;
  i64 consumed_ = 0;  // batches handed out

  // Worker queue: slot k % slots holds step k; a worker may fill step k once step k - slots
  // has been released by the consumer.
  struct Slot {
    Batch batch;
    i64 step = -1;
    bool ready = false;
  };
  std::vector<Slot> slots_;
  Batch inline_batch_;
  std::mutex mutex_;
  std::condition_variable ready_cv_, free_cv_;
  i64 next_to_claim_ = 0;
  i64 released_ = 0;  // steps below this are released by the consumer
  bool stop_ = false;
  std::vector<std::thread> workers_;
  mutable std::mutex perm_mutex_;
  mutable std::vector<std::pair<i64, std::shared_ptr<const std::vector<std::int32_t>>>> perm_cache_;
};

}  // namespace tb::data
