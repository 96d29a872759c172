// The CUDA network: plans a model once for one batch size on one device and precision (the image
// layout, which layers fuse, cuDNN plans, one arena of values and gradients from the core
// planner, every buffer through the device's caching allocator) and runs training steps with no
// allocation and no synchronisation inside the step; optionally the whole step (forward,
// backward, update) is captured once as a CUDA graph and replayed. Batches are uploaded on a
// stream of their own into one of two buffers, so that the next batch's copy overlaps the
// current step.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "engine/core/dataset.hpp"
#include "engine/core/network.hpp"
#include "engine/cuda/context.hpp"
#include "engine/cuda/kernels.hpp"
#include "engine/cuda/layer.hpp"

namespace tb::cuda {

// Where the device memory of one network goes, in bytes.
struct MemoryBreakdown {
  std::size_t weights = 0;  // fp32 master plus the compute copy
  std::size_t gradients = 0;
  std::size_t optimizer_state = 0;
  std::size_t activations = 0;  // the arena of values and gradients, layers' saved state
  std::size_t workspace = 0;
  std::size_t data = 0;  // the batch, and a resident dataset (--data_on_device)
};

class CudaNetwork final : public Network, public ResidentData, public MemoryReport {
 public:
  CudaNetwork(const ModelSpec& model, const NetworkOptions& config);
  ~CudaNetwork() override;

  void set_batch(const BatchView& batch) override;
  float forward() override;
  float evaluate() override;
  std::int64_t correct() const override;
  void backward() override;
  void update() override;
  // Forward, backward and update enqueued together (or replayed as one graph) with one wait at
  // the end; the step's device time runs from its wait for the batch's upload to the update.
  float train_step(StepTimes& times) override;
  void start_step() override;
  float finish_step(StepTimes& times) override;
  bool asynchronous() const override { return true; }
  void abandon_step() override;

  std::vector<float> read_output(int node) const override;
  std::vector<float> read_grad(int node) const override;
  void set_output_grad(const std::vector<float>& grad) override;
  std::vector<float> read_param(int node, int index) const override;
  std::vector<float> read_param_grad(int node, int index) const override;
  void write_param(int node, int index, const std::vector<float>& value) override;
  std::int64_t param_bytes() const override { return n_params_ * i64(sizeof(float)); }
  // Device memory; compute-type segments (16-bit under mixed precision) then fp32 ones.
  std::vector<FlatSegment> gradient_segments() override;
  std::vector<FlatSegment> param_segments() override;
  // Refreshes the compute copy from the fp32 masters.
  void params_written() override;
  void set_step_hook(std::function<void(int node)> hook) override;
  std::uint64_t param_checksum() override;
  void synchronize() override;

  // ResidentData: `batches` batches of `data` kept on the device; use_resident(k) takes batch k
  // with a device-to-device copy instead of an upload. batch_bytes: one batch's fp32 input and
  // targets as kept.
  ResidentData* resident_data() override { return this; }
  std::size_t batch_bytes() const override;
  void make_resident(Dataset& data, i64 batches) override;
  void use_resident(i64 batch) override;
  // MemoryReport: the allocator's high-water mark and cap, the breakdown below, what the device
  // holds beyond the allocator, the loss scale and skipped steps.
  const MemoryReport* memory_report() const override { return this; }
  std::map<std::string, double> memory_counters() const override;
  std::optional<CommEndpoint> comm_endpoint() const override {
    return CommEndpoint{ctx_->device, static_cast<void*>(ctx_->stream)};
  }
  MemoryBreakdown memory() const;
  // Optimizer steps skipped because mixed-precision gradients overflowed, and the loss scale.
  std::int64_t skipped_steps() const;
  float loss_scale() const;
  const Context& context() const { return *ctx_; }

 private:
  struct Impl;
  // The loss and correct count of the last forward: a copy to pinned host memory enqueued after
  // it, then read_loss's wait for the stream.
  void enqueue_loss_readback();
  float read_loss();
  void take_batch();  // the main stream waits for the batch set last and converts it
  // Starts filling the upload buffer for the next batch: `copy` enqueues its copies on the
  // upload stream into (input, targets).
  void upload_next(const std::function<void(void* input, void* targets)>& copy);
  void enqueue_forward(bool training);
  void enqueue_backward();
  void enqueue_update();
  void capture_step();
  std::vector<float> download(const void* ptr, DType type, i64 count) const;
  void upload(const std::vector<float>& values, void* ptr, DType type);
  // A node's value or gradient in canonical (NCHW) order, and back.
  std::vector<float> to_canonical(int node, std::vector<float> values) const;
  std::vector<float> from_canonical(int node, const std::vector<float>& values) const;
  const void* readable(int node, bool gradient) const;
  std::vector<std::vector<float>> read_slots(int node, bool gradients) const;
  kernels::StepState step_state() const;
  float grad_unscale() const;  // 1 / loss scale where a loss scaled the gradients
  std::unique_ptr<Context> ctx_;
  std::unique_ptr<Impl> impl_;
  i64 n_params_ = 0;
};

}  // namespace tb::cuda
