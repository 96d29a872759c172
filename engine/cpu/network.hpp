// The CPU network: plans a model once for one batch size (layers, layouts, every buffer) and
// runs training steps with no allocation and no primitive creation on the step path.
#pragma once

#include <memory>
#include <vector>

#include "engine/core/buffer.hpp"
#include "engine/core/dataset.hpp"
#include "engine/core/network.hpp"
#include "engine/core/planner.hpp"
#include "engine/cpu/kernels/kernels.hpp"
#include "engine/cpu/layer.hpp"
#include "engine/optim/optimizer.hpp"

namespace tb::cpu {

// The arena CpuNetwork plans for `model` at `batch` (its layers are made, nothing is allocated).
MemoryPlan plan_network_memory(const ModelSpec& model, i64 batch);

class CpuNetwork final : public Network, public ResidentData {
 public:
  CpuNetwork(const ModelSpec& model, const NetworkOptions& config);

  void set_batch(const BatchView& batch) override;
  float forward() override;
  float evaluate() override;
  std::int64_t correct() const override;
  void backward() override;
  void update() override;

  std::vector<float> read_output(int node) const override;
  std::vector<float> read_grad(int node) const override;
  void set_output_grad(const std::vector<float>& grad) override;
  std::vector<float> read_param(int node, int index) const override;
  std::vector<float> read_param_grad(int node, int index) const override;
  void write_param(int node, int index, const std::vector<float>& value) override;
  std::int64_t param_bytes() const override { return params_.size() * i64(sizeof(float)); }
  std::vector<FlatSegment> gradient_segments() override { return segments(grads_flat_.data()); }
  std::vector<FlatSegment> param_segments() override { return segments(params_.data()); }
  void set_step_hook(std::function<void(int node)> hook) override { step_hook_ = std::move(hook); }
  bool scale_gradients_in_update(float scale) override;
  std::uint64_t param_checksum() override { return fnv1a(params_.data(), std::size_t(params_.size()) * sizeof(float)); }

  // ResidentData (--data_on_device): `batches` batches of a dataset prepared once and kept in
  // host memory; use_resident(k) copies batch k into the network's input, as set_batch does,
  // without the loader's work per step.
  ResidentData* resident_data() override { return this; }
  std::size_t batch_bytes() const override;
  void make_resident(Dataset& data, std::int64_t batches) override;
  void use_resident(std::int64_t batch) override;

  // The arena of values and their gradients, as planned.
  std::int64_t activation_bytes() const { return i64(plan_.arena_bytes); }
  std::int64_t scratch_bytes() const { return i64(ctx_.scratch_bytes); }
  const std::vector<std::string>& implementations() const { return ctx_.implementations; }

 private:
  struct ParamSlot {
    md desc;
    i64 offset;  // in floats, into the flat buffers
  };
  // A gradient that must be added into its producer's (the producer feeds several layers).
  struct Accumulate {
    dnnl::memory from, into;
  };
  const ParamSlot& slot(int node, int index) const;
  // After the pass at `time` of the plan: fills the blocks whose life ended with NaN.
  void poison(int time);
  // The memory of node's value or gradient, if it still holds what the last pass left there.
  const dnnl::memory& readable(const std::vector<dnnl::memory>& mems, const std::vector<int>& blocks, int node,
                               const char* what) const;
  // One segment per node with parameters, from its first slot to the end of its last.
  std::vector<FlatSegment> segments(float* base) const;

  ModelSpec model_;
  NetworkOptions config_;
  std::vector<Dims> shapes_;
  mutable Context ctx_;
  std::vector<std::unique_ptr<Layer>> layers_;       // by node; null for the input
  std::vector<dnnl::memory> values_, grads_;         // by node
  std::vector<std::vector<ParamSlot>> slots_;        // by node
  std::vector<std::vector<Accumulate>> accumulate_;  // by consuming node
  MemoryPlan plan_;
  HostBuffer arena_, input_, params_, grads_flat_, scratch_, staging_;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<std::int32_t> labels_;
  std::vector<float> targets_;
  std::vector<Batch> pool_;  // the resident batches (make_resident)
  BatchView batch_;
  bool has_loss_;
  i64 target_count_ = 0;  // labels or target values per batch
  std::function<void(int node)> step_hook_;
  const kernels::Table& kernels_ = kernels::active();  // the ISA active when the network was made
  int clock_ = 0;                                      // plan time at the end of the last pass: forward S, backward 2S
};

}  // namespace tb::cpu
