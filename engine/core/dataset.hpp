// The interface the trainer pulls batches from; implementations live in datasets/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/network.hpp"
#include "engine/core/spec.hpp"

namespace tb {

// One batch in canonical layouts (see BatchView).
struct Batch {
  std::vector<float> input;
  std::vector<std::int32_t> labels;
  std::vector<float> targets;
  i64 batch = 0;   // samples in the batch
  i64 index = -1;  // which batch of its dataset, where the dataset numbers them
  BatchView view() const { return BatchView{input.data(), labels.data(), targets.data()}; }
  i64 samples() const { return batch; }
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  // The next training batch; valid until the following call.
  virtual const Batch& next() = 0;
  virtual std::string name() const = 0;    // "mnist", "cifar10", "sine", "imagenet"
  virtual std::string source() const = 0;  // "synthetic", or where the real files were found
  // Training steps in one pass over the data; 0 for an endless stream.
  virtual i64 steps_per_epoch() const { return 0; }
  // Seconds next() spent waiting for (or preparing) batches, summed since construction.
  virtual double wait_seconds() const { return 0; }
  // Gives `net` a batch this dataset made: its host data, by default; a dataset the network
  // keeps on its device names the batch instead (ResidentData).
  virtual void feed(Network& net, const Batch& batch) const { net.set_batch(batch.view()); }
};

}  // namespace tb
