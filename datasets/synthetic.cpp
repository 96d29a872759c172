// Generators of the synthetic datasets.
#include "datasets/synthetic.hpp"

#include <cmath>
#include <random>

#include "engine/core/error.hpp"

namespace tb::data {
namespace {

class Pool final : public Dataset {
 public:
  Pool(std::string name, std::vector<Batch> batches) : name_(std::move(name)), batches_(std::move(batches)) {}
  const Batch& next() override {
    const Batch& b = batches_[cursor_];
    cursor_ = (cursor_ + 1) % batches_.size();
    return b;
  }
  std::string name() const override { return name_; }
  std::string source() const override { return "synthetic"; }

 private:
  std::string name_;
  std::vector<Batch> batches_;
  std::size_t cursor_ = 0;
};

}  // namespace

std::unique_ptr<Dataset> synthetic_images(const std::string& name, const Dims& sample_dims, i64 classes,
                                          i64 batch, std::uint64_t seed, int pool_batches) {
  const i64 features = product(sample_dims);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<std::int32_t> label_of(0, std::int32_t(classes - 1));
  std::vector<float> prototypes(std::size_t(classes * features));
  for (float& p : prototypes) p = 0.5f * normal(rng);

  std::vector<Batch> batches(pool_batches);
  for (Batch& b : batches) {
    b.input.resize(std::size_t(batch * features));
    b.labels.resize(std::size_t(batch));
    for (i64 n = 0; n < batch; ++n) {
      const std::int32_t label = label_of(rng);
      b.labels[n] = label;
      const float* proto = prototypes.data() + label * features;
      float* x = b.input.data() + n * features;
      for (i64 i = 0; i < features; ++i) x[i] = proto[i] + normal(rng);
    }
  }
  return std::make_unique<Pool>(name, std::move(batches));
}

std::unique_ptr<Dataset> sine_wave(i64 seq_len, i64 batch, std::uint64_t seed, int pool_batches) {
  constexpr double kPeriod = 25.0;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> phase_of(0.0, 2 * M_PI);
  std::vector<Batch> batches(pool_batches);
  for (Batch& b : batches) {
    b.input.resize(std::size_t(seq_len * batch));  // (T, N, 1)
    b.targets.resize(std::size_t(seq_len * batch));
    for (i64 n = 0; n < batch; ++n) {
      const double phase = phase_of(rng);
      for (i64 t = 0; t < seq_len; ++t) {
        b.input[t * batch + n] = float(std::sin(2 * M_PI * double(t) / kPeriod + phase));
        b.targets[t * batch + n] = float(std::sin(2 * M_PI * double(t + 1) / kPeriod + phase));
      }
    }
  }
  return std::make_unique<Pool>("sine", std::move(batches));
}

std::unique_ptr<Dataset> synthetic_for(const std::string& name, const ModelSpec& model, i64 batch,
                                       std::uint64_t seed) {
  const InputSpec& in = model.input();
  if (model.task == Task::Regression) {
    TB_CHECK(in.seq_len > 0, "{}: regression data exists only for sequences", model.name);
    return sine_wave(in.seq_len, batch, seed);
  }
  return synthetic_images(name, in.sample_dims, model.classes, batch, seed);
}

}  // namespace tb::data
