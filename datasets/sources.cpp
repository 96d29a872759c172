// Finding real dataset files, generating synthetic image sets, and building the loaders.
#include "datasets/sources.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <span>

#include <fmt/format.h>

#include "datasets/sine.hpp"
#include "engine/core/error.hpp"

namespace tb::data {
namespace fs = std::filesystem;

namespace {

constexpr const char* kDebianFashionMnist = "/usr/share/datasets/fashion-mnist";

// The IDX file `stem` in `folder`, plain or gzip-compressed (the plain one wins).
std::string idx_file(const std::string& folder, const std::string& stem) {
  const fs::path plain = fs::path(folder) / stem;
  std::error_code ec;
  // A link counts as there even where it points nowhere: the error then names it, not a .gz
  // the folder never had.
  if (fs::exists(fs::symlink_status(plain, ec))) return plain.string();
  return plain.string() + ".gz";
}

bool has_idx(const std::string& folder) {
  std::error_code ec;
  return fs::exists(idx_file(folder, "train-images-idx3-ubyte"), ec);
}

std::string cifar_folder(const std::string& folder) {
  std::error_code ec;
  const fs::path nested = fs::path(folder) / "cifar-10-batches-bin";
  return fs::is_directory(nested, ec) ? nested.string() : folder;
}

// Class c's fixed random pattern: 128 + N(0, 48^2) per pixel from a generator of its own (seeded
// 12345 + c, as scripts/peers/torchpeer/data.py draws them), the same for every split and seed.
void class_pattern(i64 c, std::span<float> pattern) {
  std::mt19937_64 rng(12345 + std::uint64_t(c));
  std::normal_distribution<float> normal(0.0f, 48.0f);
  for (float& p : pattern) p = 128.0f + normal(rng);
}

// Classes drawn around a fixed random pattern each: pixel = pattern + N(0, 48^2), clipped. The
// patterns are kept where they are few (CIFAR's 10), else made per sample: ImageNet's 1000 at
// 224x224 would take 600 MB at once, more than ResNet-152's whole arena at batch 8.
std::shared_ptr<ImageSet> synthetic_set(const Dims& sample_dims, i64 classes, i64 count, std::uint64_t seed) {
  auto set = std::make_shared<ImageSet>();
  const i64 features = product(sample_dims);
  set->count = count;
  set->channels = sample_dims.size() == 3 ? sample_dims[0] : 1;
  set->rows = sample_dims.size() == 3 ? sample_dims[1] : 1;
  set->cols = features / (set->channels * set->rows);
  constexpr i64 kKeptPatternFloats = i64(1) << 24;  // 64 MB
  const bool keep = classes * features <= kKeptPatternFloats;
  std::vector<float> patterns(std::size_t(keep ? classes * features : features));
  if (keep)
    for (i64 c = 0; c < classes; ++c)
      class_pattern(c, std::span(patterns).subspan(std::size_t(c * features), std::size_t(features)));
  std::normal_distribution<float> normal(0.0f, 48.0f);
  std::mt19937_64 rng(seed);
  set->pixels.resize(std::size_t(count * features));
  set->labels.resize(std::size_t(count));
  for (i64 s = 0; s < count; ++s) {
    const std::int32_t label = std::int32_t(rng() % std::uint64_t(classes));
    set->labels[s] = label;
    if (!keep) class_pattern(label, patterns);
    const float* pattern = patterns.data() + (keep ? label * features : 0);
    std::uint8_t* out = set->pixels.data() + s * features;
    for (i64 i = 0; i < features; ++i) out[i] = std::uint8_t(std::clamp(pattern[i] + normal(rng), 0.0f, 255.0f));
  }
  return set;
}

}  // namespace

std::string data_dir(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("TB_DATA_DIR"); env && *env) return env;
  return "data";
}

bool has_files(const std::string& name) { return name == "mnist" || name == "fashion-mnist" || name == "cifar10"; }

std::string find_dataset(const std::string& name, const std::string& dir) {
  if (!has_files(name)) return "";
  std::error_code ec;
  const fs::path folder = fs::path(dir) / name;
  if (fs::is_directory(folder, ec)) return folder.string();
  if (name == "fashion-mnist" && has_idx(kDebianFashionMnist)) return kDebianFashionMnist;
  return "";
}

Splits make_splits(const std::string& dataset, const std::string& folder, const ModelSpec& model,
                   const LoaderConfig& train_config) {
  const InputSpec& in = model.input();
  Splits s;
  if (model.task == Task::Regression) {
    s.train = std::make_unique<SineWave>(in.seq_len, train_config.batch, false, train_config.seed);
    s.validation = std::make_unique<SineWave>(in.seq_len, train_config.batch, true, train_config.seed);
    s.validation_steps = s.validation->steps_per_epoch();
    s.source = "generated";
    return s;
  }
  std::shared_ptr<const ImageSet> train, val;
  std::string train_files, val_files;  // what each split was read from, for a message
  if (folder.empty()) {
    const i64 features = product(in.sample_dims);
    const i64 count = std::max<i64>(features <= 4096 ? 8192 : 256, 2 * train_config.batch);
    train = synthetic_set(in.sample_dims, model.classes, count, train_config.seed);
    val = synthetic_set(in.sample_dims, model.classes, std::max<i64>(count / 4, train_config.batch),
                        train_config.seed + 1);
    s.source = "synthetic";
  } else if (dataset == "cifar10") {
    const std::string dir = cifar_folder(folder);
    std::vector<std::string> files;
    for (int i = 1; i <= 5; ++i) files.push_back((fs::path(dir) / fmt::format("data_batch_{}.bin", i)).string());
    train = std::make_shared<ImageSet>(read_cifar10(files));
    val = std::make_shared<ImageSet>(read_cifar10({(fs::path(dir) / "test_batch.bin").string()}));
    s.source = dir;
    train_files = (fs::path(dir) / "data_batch_{1..5}.bin").string();
    val_files = (fs::path(dir) / "test_batch.bin").string();
  } else {
    const std::string train_images = idx_file(folder, "train-images-idx3-ubyte");
    const std::string val_images = idx_file(folder, "t10k-images-idx3-ubyte");
    train = std::make_shared<ImageSet>(read_idx(train_images, idx_file(folder, "train-labels-idx1-ubyte"), 28, 28, 10));
    val = std::make_shared<ImageSet>(read_idx(val_images, idx_file(folder, "t10k-labels-idx1-ubyte"), 28, 28, 10));
    s.source = folder;
    train_files = train_images;
    val_files = val_images;
  }
  const auto fewer = [&](const char* split, const ImageSet& set, const std::string& files) {
    return fmt::format(
        "{}: its {} split ({}) holds {} samples, fewer than one batch of {}: give a smaller --batch, or the "
        "dataset's whole files",
        dataset, split, files, set.count, train_config.batch);
  };
  if (train->count < train_config.batch) throw InputError(fewer("training", *train, train_files));
  if (train->sample_size() != product(in.sample_dims))
    throw InputError(fmt::format("{}: samples of {}x{}x{} do not fit {} (input {})", s.source, train->channels,
                                 train->rows, train->cols, model.name, to_string(in.sample_dims)));
  const Normalisation norm = Normalisation::of(*train);
  LoaderConfig val_config = train_config;
  val_config.workers = 0;
  val_config.shuffle = false;
  val_config.augment = false;
  s.train = std::make_unique<ImageLoader>(dataset, s.source, train, norm, in.sample_dims, train_config);
  if (val->count < train_config.batch) {
    s.no_validation = fewer("validation", *val, val_files);
    return s;
  }
  auto validation = std::make_unique<ImageLoader>(dataset, s.source, val, norm, in.sample_dims, val_config);
  s.validation_steps = validation->steps_per_epoch();
  s.validation = std::move(validation);
  return s;
}

std::unique_ptr<Dataset> synthetic_for(const std::string& dataset, const ModelSpec& model, i64 batch,
                                       std::uint64_t seed) {
  return make_splits(dataset, "", model, LoaderConfig{.batch = batch, .seed = seed}).train;
}

}  // namespace tb::data
