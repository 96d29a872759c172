// Batch preparation and the worker queue of the loader.
#include "datasets/loader.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <system_error>

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "engine/core/timer.hpp"

namespace tb::data {

Normalisation Normalisation::of(const ImageSet& set) {
  Normalisation n;
  const i64 plane = set.rows * set.cols;
  for (i64 c = 0; c < set.channels; ++c) {
    double sum = 0, sum_sq = 0;
    for (i64 s = 0; s < set.count; ++s) {
      const std::uint8_t* p = set.pixels.data() + s * set.sample_size() + c * plane;
      for (i64 i = 0; i < plane; ++i) {
        const double x = p[i] / 255.0;
        sum += x;
        sum_sq += x * x;
      }
    }
    const double count = double(set.count * plane);
    const double mean = sum / count;
    const double var = std::max(sum_sq / count - mean * mean, 1e-12);
    n.mean.push_back(float(mean));
    n.stddev.push_back(float(std::sqrt(var)));
  }
  return n;
}

ImageLoader::ImageLoader(std::string name, std::string source, std::shared_ptr<const ImageSet> set, Normalisation norm,
                         Dims sample_dims, LoaderConfig config)
    : name_(std::move(name)),
      source_(std::move(source)),
      set_(std::move(set)),
      norm_(std::move(norm)),
      sample_dims_(std::move(sample_dims)),
      config_(config) {
  TB_CHECK(product(sample_dims_) == set_->sample_size(), "{}: samples have {} values, the model takes {}", name_,
           set_->sample_size(), product(sample_dims_));
  steps_per_epoch_ = set_->count / config_.batch;
  if (steps_per_epoch_ == 0)
    throw InputError(fmt::format("{}: {} samples are fewer than one batch of {}", name_, set_->count, config_.batch));
  TB_CHECK(config_.workers >= 0 && config_.prefetch >= 1, "loader: {} workers, prefetch {}", config_.workers,
           config_.prefetch);
  if (config_.workers > 0) {
    slots_.resize(std::size_t(config_.prefetch + 1));  // the one the consumer holds, and the queue
    for (int w = 0; w < config_.workers; ++w) {
      try {
        workers_.emplace_back([this] { worker_loop(); });
      } catch (const std::system_error& e) {
        // The system refused a thread (a limit on threads or memory): the ones started stop, and
        // the benchmark's row fails saying so; the run goes on.
        stop_workers();
        throw Error(fmt::format("{}: could not start loader worker {} of {} ({}); lower --loader_workers", name_, w + 1,
                                config_.workers, e.what()));
      }
    }
  }
}

ImageLoader::~ImageLoader() { stop_workers(); }

void ImageLoader::stop_workers() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  ready_cv_.notify_all();
  free_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
}

std::vector<std::int32_t> ImageLoader::permutation(i64 epoch) const {
  std::vector<std::int32_t> order(std::size_t(set_->count));
  std::iota(order.begin(), order.end(), 0);
  if (config_.shuffle) {
    std::mt19937_64 rng(config_.seed * 0x9E3779B97F4A7C15ull + std::uint64_t(epoch));
    std::shuffle(order.begin(), order.end(), rng);
  }
  return order;
}

void ImageLoader::prepare(i64 step, Batch& out, bool parallel) const {
  const i64 epoch = step / steps_per_epoch_, position = step % steps_per_epoch_;
  std::shared_ptr<const std::vector<std::int32_t>> order;
  {
    std::lock_guard lock(perm_mutex_);
    for (auto& [e, p] : perm_cache_)
      if (e == epoch) order = p;
    if (!order) {
      order = std::make_shared<const std::vector<std::int32_t>>(permutation(epoch));
      if (perm_cache_.size() >= 2) perm_cache_.erase(perm_cache_.begin());
      perm_cache_.emplace_back(epoch, order);
    }
  }
  const ImageSet& set = *set_;
  const i64 sample = set.sample_size(), plane = set.rows * set.cols, B = config_.batch;
  out.input.resize(std::size_t(B * sample));
  out.labels.resize(std::size_t(B));
  out.batch = B;
  // Each sample's crop and flip are drawn in order from the step's generator, so that they do not
  // depend on how the samples are then split between threads.
  std::mt19937_64 rng(config_.seed * 0xD1B54A32D192ED03ull + std::uint64_t(step));
  const bool augment = config_.augment && set.channels == 3;
  constexpr i64 kPad = 4;
  struct Draw {
    i64 dy = 0, dx = 0;
    bool flip = false;
  };
  std::vector<Draw> draws(std::size_t(augment ? B : 0));
  for (Draw& d : draws) {
    // Crop offset in [-pad, pad] on each axis (zero padding = the mean after normalising).
    d.dy = i64(rng() % (2 * kPad + 1)) - kPad;
    d.dx = i64(rng() % (2 * kPad + 1)) - kPad;
    d.flip = rng() & 1;
  }
  // On the training thread (no workers) the samples are shared among the OpenMP threads, which
  // would otherwise wait for this one; a worker thread converts its batch alone.
#pragma omp parallel for schedule(static) if (parallel)
  for (i64 b = 0; b < B; ++b) {
    const std::int32_t index = (*order)[std::size_t(position * B + b)];
    out.labels[b] = set.labels[index];
    const std::uint8_t* src = set.pixels.data() + i64(index) * sample;
    float* dst = out.input.data() + b * sample;
    const Draw d = augment ? draws[std::size_t(b)] : Draw{};
    for (i64 c = 0; c < set.channels; ++c) {
      const float scale = 1.0f / (255.0f * norm_.stddev[c]), shift = norm_.mean[c] / norm_.stddev[c];
      const std::uint8_t* in = src + c * plane;
      float* to = dst + c * plane;
      if (d.dy == 0 && d.dx == 0 && !d.flip) {
#pragma omp simd
        for (i64 k = 0; k < plane; ++k) to[k] = float(in[k]) * scale - shift;
        continue;
      }
      for (i64 y = 0; y < set.rows; ++y) {
        const i64 sy = y + d.dy;
        for (i64 x = 0; x < set.cols; ++x) {
          const i64 sx = (d.flip ? set.cols - 1 - x : x) + d.dx;
          const bool inside = sy >= 0 && sy < set.rows && sx >= 0 && sx < set.cols;
          to[y * set.cols + x] = inside ? float(in[sy * set.cols + sx]) * scale - shift : 0.0f;
        }
      }
    }
  }
}

void ImageLoader::worker_loop() {
  for (;;) {
    i64 step;
    {
      std::unique_lock lock(mutex_);
      step = next_to_claim_++;
      // Wait until the slot of this step is free: the consumer released step - slots.
      free_cv_.wait(lock, [&] { return stop_ || step - i64(slots_.size()) < released_; });
      if (stop_) return;
    }
    Slot& slot = slots_[std::size_t(step % i64(slots_.size()))];
    prepare(step, slot.batch, false);
    {
      std::lock_guard lock(mutex_);
      slot.step = step;
      slot.ready = true;
    }
    ready_cv_.notify_all();
  }
}

const Batch& ImageLoader::next() {
  const i64 step = consumed_++;
  if (workers_.empty()) {
    const double t0 = wall_seconds();
    prepare(step, inline_batch_, true);
    wait_seconds_ += wall_seconds() - t0;
    return inline_batch_;
  }
  const double t0 = wall_seconds();
  std::unique_lock lock(mutex_);
  released_ = step;  // the previous batch is no longer used by the caller
  free_cv_.notify_all();
  Slot& slot = slots_[std::size_t(step % i64(slots_.size()))];
  ready_cv_.wait(lock, [&] { return slot.ready && slot.step == step; });
  slot.ready = false;
  wait_seconds_ += wall_seconds() - t0;
  return slot.batch;
}

}  // namespace tb::data
