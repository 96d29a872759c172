// The interface every backend's network implements: one replica of a model, with its
// parameters, gradients and optimizer state in flat buffers, planned once for one batch size.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/spec.hpp"

namespace tb {

struct OptimizerConfig {
  enum class Kind { SGD, Adam } kind = Kind::SGD;
  double lr = 0.01;
  double momentum = 0.9;
  double weight_decay = 0.0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
};
const char* optimizer_name(OptimizerConfig::Kind kind);

// fp32: strict single precision (no tensor-core conversion). tf32: fp32 storage, TF32 tensor
// cores in convolutions and GEMMs. fp16 and bf16: mixed precision, activations and a compute
// copy of the weights in 16 bits, fp32 master weights and optimizer state, dynamic loss scaling.
enum class Precision { FP32, TF32, FP16, BF16 };
// Throws tb::InputError naming --precisions for anything but fp32, tf32, fp16, bf16.
Precision parse_precision(const std::string& name);
const char* precision_name(Precision p);
// How a network stores its images (N, C, H, W): plain NCHW, or channels-last NHWC, the layout
// tensor cores read without transposing.
enum class Layout { NCHW, NHWC };
const char* layout_name(Layout l);
// --gpu_layout: nchw, nhwc, or auto (nullopt: the backend chooses per precision and model).
std::optional<Layout> parse_layout(const std::string& name);

// The most one cuDNN call's workspace may take, by default.
inline constexpr std::size_t kDefaultWorkspaceCap = std::size_t(256) << 20;

// How a network of a model is made: one set of settings for every backend (the CPU's reads the
// first three and the two switches for tests).
struct NetworkOptions {
  i64 batch = 1;
  OptimizerConfig optimizer;
  std::uint64_t seed = 1;  // the weights'
  // GPU networks:
  int device = 0;  // CUDA ordinal
  Precision precision = Precision::FP32;
  std::size_t workspace_cap = kDefaultWorkspaceCap;  // the most one cuDNN call may use
  bool cuda_graph = false;
  float initial_loss_scale = 65536.0f;  // mixed precision only
  std::int32_t loss_scale_growth_interval = 2000;
  std::optional<Layout> layout{};  // images: the backend's choice per precision and model unless set
  // CPU networks: slices of the batch run through the network on threads of their own
  // (cpu/network.hpp's lanes): 0 chosen by the network, 1 none, K: K where the model allows.
  int lanes = 0;
  // Tests and debugging: keep every value and gradient for the whole step (tests that read them),
  // and fill each arena block with NaN when its planned life ends.
  bool keep_values = false;
  bool poison_dead = false;
  // Tests: CPU networks fill the arena and the parameter gradients with NaN when they are made,
  // so that an element a layer should write and leaves alone reads NaN, not a fresh zero.
  bool poison_unwritten = false;
};

// One training batch in canonical layouts on the host: input (N, dims...) or (T, N, dims...),
// labels (N) for classification, targets shaped like the prediction for regression.
struct BatchView {
  const float* input = nullptr;
  const std::int32_t* labels = nullptr;
  const float* targets = nullptr;
};

class Dataset;

// What some networks can do beyond training. A harness asks a network for a capability and gets
// null where its backend has none: no harness code names a backend.
//
// A dataset kept on the network's device: make_resident copies up to `batches` batches of `data`
// there; use_resident(k) then sets batch k (modulo the pool) as set_batch would, without a host
// upload (a device-to-device copy).
class ResidentData {
 public:
  virtual ~ResidentData() = default;
  virtual std::size_t batch_bytes() const = 0;  // one batch's input and targets as kept
  virtual void make_resident(Dataset& data, std::int64_t batches) = 0;
  virtual void use_resident(std::int64_t batch) = 0;
};
// Where a network's device memory goes, and its mixed-precision state: the mem_* columns
// (results/SCHEMA.md), loss_scale and skipped_steps.
class MemoryReport {
 public:
  virtual ~MemoryReport() = default;
  virtual std::map<std::string, double> memory_counters() const = 0;
};
// Where a communicator orders its work for this network: its device and its stream (an opaque
// cudaStream_t), for NCCL.
struct CommEndpoint {
  int device = 0;
  void* stream = nullptr;
};

// Seconds one training step spent in each phase. `device` is the whole step measured on the
// device (CUDA events), negative where the backend has no device clock; a phase the backend
// cannot separate (a step replayed as one CUDA graph) is negative.
struct StepTimes {
  double forward = 0, backward = 0, update = 0;
  double device = -1;
  // Device seconds the step waited for its batch's upload and converted it (part of `device`);
  // negative where the backend has no device clock.
  double data = -1;
};

// What the step hook (Network::set_step_hook) hears besides a node's index.
inline constexpr int kBackwardDone = -1;  // every gradient is final; the update comes next
inline constexpr int kStepEnqueued = -2;  // the update is enqueued: the step's end

// How a flat buffer's elements are stored.
enum class ElemType { F32, F16, BF16 };

// A run of one node's parameter gradients (or parameters) in a backend's flat buffers: host
// memory on the CPU, device memory on a GPU. Data parallelism all-reduces these.
struct FlatSegment {
  void* data = nullptr;
  ElemType type = ElemType::F32;
  std::int64_t count = 0;
  int node = 0;  // the node whose backward writes it
};

class Network {
 public:
  virtual ~Network() = default;
  Network() = default;
  Network(const Network&) = delete;
  Network& operator=(const Network&) = delete;

  virtual void set_batch(const BatchView& batch) = 0;
  // Training-mode forward pass; returns the loss (0 for a graph without a loss node).
  virtual float forward() = 0;
  // Inference-mode forward pass (batch norm uses its running statistics); returns the loss.
  virtual float evaluate() = 0;
  // Correct predictions of the last forward or evaluate (classification); -1 for regression.
  virtual std::int64_t correct() const = 0;
  // Backward from the loss, or from the gradient given to set_output_grad.
  virtual void backward() = 0;
  // One optimizer step over the flat buffers.
  virtual void update() = 0;
  // Forward, backward and update; returns the loss. This default runs the three and times
  // each on the host clock; asynchronous backends enqueue the whole step and wait once.
  virtual float train_step(StepTimes& times);
  // The step in two halves: start_step() begins a training step on the batch given last to
  // set_batch, finish_step() waits for it and returns its loss. An asynchronous backend
  // (asynchronous() true) returns from start_step at once, so that the caller can prepare and
  // set the next batch while the device computes; by default the whole step runs in start_step.
  virtual void start_step();
  virtual float finish_step(StepTimes& times);
  virtual bool asynchronous() const { return false; }
  // After a step that failed between start_step and finish_step (a data-parallel peer's failure
  // or deadline, with the communicator aborted): the step is forgotten, without waiting for what
  // it left on the device, so that the network can start steps again.
  virtual void abandon_step() {}

  // Inspection in canonical (plain row-major) layouts, for tests and replica checks.
  virtual std::vector<float> read_output(int node) const = 0;
  virtual std::vector<float> read_grad(int node) const = 0;
  virtual void set_output_grad(const std::vector<float>& grad) = 0;
  virtual std::vector<float> read_param(int node, int index) const = 0;
  virtual std::vector<float> read_param_grad(int node, int index) const = 0;
  virtual void write_param(int node, int index, const std::vector<float>& value) = 0;

  // Bytes of the flat parameter buffer (with any padding the backend's layouts need).
  virtual std::int64_t param_bytes() const = 0;

  // For data parallelism. The gradient segments, one per node with parameters, in node order;
  // segments of one type do not overlap, and lie next to one another in memory (padding between
  // them included), in node order or in another (a fused group's where the group runs).
  virtual std::vector<FlatSegment> gradient_segments() = 0;
  // The fp32 master parameters as segments likewise; after writing them, call params_written().
  virtual std::vector<FlatSegment> param_segments() = 0;
  virtual void params_written() {}
  // A hash of every parameter's bits (fp32 masters): replicas that agree have equal ones.
  virtual std::uint64_t param_checksum() = 0;
  // Called while a training step is enqueued (on an asynchronous backend before the device has
  // run it): with a node's index after the node's backward (last node first), once its
  // gradients are final, so that the hook may start communicating them; with kBackwardDone once
  // every gradient is final, before the update is enqueued, so that the hook may order the
  // update after its communication; with kStepEnqueued once the update is enqueued (the step's
  // last work). Empty: no hook.
  virtual void set_step_hook(std::function<void(int node)> hook) = 0;
  // The update multiplies every gradient by `scale` in its own pass, from now on (a
  // data-parallel mean folded into the optimizer, where the communicator leaves sums); false
  // where the backend cannot, and then nothing changes.
  virtual bool scale_gradients_in_update(float /*scale*/) { return false; }
  // Waits for the backend's work (device streams); a no-op on the host.
  virtual void synchronize() {}

  // Capabilities (above); null where the backend has none.
  virtual ResidentData* resident_data() { return nullptr; }
  virtual const MemoryReport* memory_report() const { return nullptr; }
  virtual std::optional<CommEndpoint> comm_endpoint() const { return std::nullopt; }

 private:
  float started_loss_ = 0;  // the default start_step's results, for finish_step
  StepTimes started_times_;
};

// What both backends' networks do the same way while they plan.
//
// Rethrows the exception in flight with "<model>/<node> (<kind>): " before its message, keeping
// its type (an out-of-memory stays tb::OutOfMemory, a library failure tb::BackendError).
[[noreturn]] void rethrow_for_node(const ModelSpec& model, int node);
// Writes every parameter's initial value in canonical layout (tb::init_param), node by node,
// each with a seed of its own derived from `seed`: the same weights on every backend.
void initialize_parameters(Network& network, const ModelSpec& model, const std::vector<Dims>& shapes,
                           std::uint64_t seed);

// FNV-1a over `bytes` bytes, continuing from `hash` (start with kFnvOffset).
inline constexpr std::uint64_t kFnvOffset = 14695981039346656037ull;  // FNV-1a's 64-bit offset basis
std::uint64_t fnv1a(const void* data, std::size_t bytes, std::uint64_t hash = kFnvOffset);

}  // namespace tb
