// A Network for tests of what runs around one (the trainer, the default step, the replicas' weight
// check): each member does nothing and returns nothing (a loss of 0, no accuracy, no tensors, no
// flat buffers). A test derives from it and overrides the members it checks.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/core/network.hpp"

namespace tb {

class InertNetwork : public Network {
 public:
  void set_batch(const BatchView&) override {}
  float forward() override { return 0; }
  float evaluate() override { return 0; }
  std::int64_t correct() const override { return -1; }
  void backward() override {}
  void update() override {}
  std::vector<float> read_output(int) const override { return {}; }
  std::vector<float> read_grad(int) const override { return {}; }
  void set_output_grad(const std::vector<float>&) override {}
  std::vector<float> read_param(int, int) const override { return {}; }
  std::vector<float> read_param_grad(int, int) const override { return {}; }
  void write_param(int, int, const std::vector<float>&) override {}
  std::int64_t param_bytes() const override { return 0; }
  std::vector<FlatSegment> gradient_segments() override { return {}; }
  std::vector<FlatSegment> param_segments() override { return {}; }
  std::uint64_t param_checksum() override { return 0; }
  void set_step_hook(std::function<void(int)>) override {}
};

}  // namespace tb
