// The CPU network: plans a model once for one batch size (layers, layouts, every buffer) and
// runs training steps with no allocation and no primitive creation on the step path.
//
// Lanes: where no layer mixes samples (no batch norm) and a slice of the batch keeps more
// activations than the model has parameters, the batch is cut into one slice per thread, and
// each thread runs its slice through the whole network on layers of its own, made for one
// thread; the slices' weight gradients are then summed. A slice's activations then stay in its
// core's caches from layer to layer, and a pass has one parallel region instead of one or more
// per layer. On the 2-core VM, whose two vCPUs are at times on cores that share no cache (data
// written by one core and read by the other then moves at half the rate), LeNet-5 capped at
// AVX2, as one network of batch 100, ran 29,000 samples/s in one placement and 21,500 in the
// other; two processes of batch 50, one per core, ran 30,700 together in both
// (docs/cpu-kernels.md).
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

// The arena CpuNetwork plans for `model` at `batch` on one lane (its layers are made, nothing is
// allocated); a network of L lanes has L arenas of the plan at batch / L.
MemoryPlan plan_network_memory(const ModelSpec& model, i64 batch);

// The lanes CpuNetwork runs `model` at `batch` on with `threads` OpenMP threads, as `requested`
// (NetworkOptions::lanes): 1 where the model mixes samples (batch norm), has no loss, or the
// batch does not divide evenly, or where it is chosen (0) and one lane's activations take fewer
// bytes than the parameters (the sum of the lanes' gradients would then move more memory than
// the lanes keep in their caches).
int cpu_lanes(const ModelSpec& model, i64 batch, int threads, int requested = 0);

class CpuNetwork final : public Network, public ResidentData {
 public:
  CpuNetwork(const ModelSpec& model, const NetworkOptions& config);
  ~CpuNetwork() override;

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
  // The first lane's weights; params_written() copies them to the other lanes'.
  std::vector<FlatSegment> param_segments() override { return segments(params_.data()); }
  void params_written() override;
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

  // The arenas of values and their gradients, as planned (every lane's).
  std::int64_t activation_bytes() const;
  std::int64_t scratch_bytes() const;
  // The first lane's primitives (every lane makes the same).
  const std::vector<std::string>& implementations() const;
  int lanes() const { return int(lanes_.size()); }
  // The threads the last pass ran its lanes on: at most the caller's OpenMP threads (lanes left
  // over run in turn); 1 for one lane.
  int lane_threads() const { return lanes_.size() > 1 ? lane_threads_ : 1; }

 private:
  struct ParamSlot {
    md desc;
    i64 offset;  // in floats, into the flat buffers
  };
  struct Lane;
  const ParamSlot& slot(int node, int index) const;
  // Runs fn(lane) for every lane, each on a thread of its own where there are several.
  void on_lanes(const std::function<void(Lane&)>& fn);
  // Lane k's slice of the batch, and the lanes' plain values of a node put together.
  void slice_batch(const BatchView& batch, Lane& lane);
  std::vector<float> gather(int node, bool gradient) const;
  float mean_loss() const;  // the lanes' losses averaged: the batch's (a model with a loss)
  // The lanes' weight gradients summed into the first's (grads_flat_), as the gradient of the
  // mean loss over the whole batch.
  void sum_lane_gradients();
  // One segment per node with parameters, from its first slot to the end of its last.
  std::vector<FlatSegment> segments(float* base) const;

  ModelSpec model_;
  NetworkOptions config_;
  std::vector<Dims> shapes_;                   // at the whole batch
  std::vector<std::unique_ptr<Lane>> lanes_;   // one per slice of the batch
  int lane_threads_ = 1;                       // on_lanes's last team
  std::vector<std::vector<ParamSlot>> slots_;  // by node
  HostBuffer params_, grads_flat_;             // the first lane's weights, and the batch's gradients
  std::vector<Batch> pool_;                    // the resident batches (make_resident)
  bool has_loss_;
  i64 target_count_ = 0;  // labels or target values per batch
  std::function<void(int node)> step_hook_;
  const kernels::Table& kernels_ = kernels::active();  // the ISA active when the network was made
};

}  // namespace tb::cpu
