// Where a workload's data comes from: the real files under the data directory when they are
// there (one sub-folder per dataset), else synthetic data of the same shape. Every loader
// names its source, and so does every result row.
#pragma once

#include <memory>
#include <string>

#include "datasets/loader.hpp"
#include "engine/core/dataset.hpp"
#include "engine/core/spec.hpp"

namespace tb::data {

// The data directory: the --data_dir flag when given, else $TB_DATA_DIR, else "data".
std::string data_dir(const std::string& flag);

// The folder holding dataset `name` ("mnist", "fashion-mnist", "cifar10") under `dir`, or ""
// when it has none. Fashion-MNIST is also found where Debian's dataset-fashion-mnist package
// installs it (/usr/share/datasets/fashion-mnist).
std::string find_dataset(const std::string& name, const std::string& dir);
// Whether dataset `name` can be read from files (find_dataset looks for them); the others are
// generated (the sine wave) or synthetic only (ImageNet-shaped images).
bool has_files(const std::string& name);

// Training and validation data of one workload, ready for the trainer.
struct Splits {
  std::unique_ptr<Dataset> train;
  // In order, no augmentation, whole batches only. Null where the split holds less than one batch,
  // `no_validation` saying why: only epochs/ rows validate, and they fail with it.
  std::unique_ptr<Dataset> validation;
  i64 validation_steps = 0;
  std::string no_validation;
  std::string source;
};

// `folder` empty: synthetic data; otherwise the real files in it (tb::InputError when they
// are missing or broken, naming the file).
Splits make_splits(const std::string& dataset, const std::string& folder, const ModelSpec& model,
                   const LoaderConfig& train_config);

// The synthetic training data of a model at a batch size (tests and quick experiments).
std::unique_ptr<Dataset> synthetic_for(const std::string& dataset, const ModelSpec& model, i64 batch,
                                       std::uint64_t seed);

}  // namespace tb::data
