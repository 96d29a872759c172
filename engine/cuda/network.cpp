// Planning and running a model on the CUDA backend.
#include "engine/cuda/network.hpp"

#include <algorithm>
#include <cstring>

#include "engine/core/dataset.hpp"
#include "engine/core/init.hpp"
#include "engine/core/layer_factory.hpp"

namespace tb::cuda {

namespace {
constexpr i64 kAlignElements = 64;  // 128 bytes in 16-bit storage, 256 in fp32
constexpr std::size_t kCublasWorkspace = std::size_t(32) << 20;  // NVIDIA's advice for Hopper
i64 align_up(i64 n) { return (n + kAlignElements - 1) / kAlignElements * kAlignElements; }

// Pinned host memory for the uploads and the loss read-back, so that copies are asynchronous
// and can be part of a captured graph.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes) TB_CU(cudaMallocHost(&ptr_, bytes));
  }
  ~PinnedBuffer() {
    if (ptr_) cudaFreeHost(ptr_);
  }
  PinnedBuffer(PinnedBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

class Event {
 public:
  Event() { TB_CU(cudaEventCreate(&event_)); }
  ~Event() { cudaEventDestroy(event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(cudaStream_t s) { TB_CU(cudaEventRecord(event_, s)); }
  // Seconds from `earlier` to this event; both must have completed.
  double since(const Event& earlier) const {
    float ms = 0;
    TB_CU(cudaEventElapsedTime(&ms, earlier.event_, event_));
    return double(ms) * 1e-3;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace

std::unique_ptr<Layer> make_layer(Context& ctx, const LayerSpec& spec, const Inputs& in, const Dims& out) {
  return make_backend_layer(ctx, spec, in, out, "cuda");
}

Nchw as_nchw(const Dims& shape) {
  TB_CHECK(!shape.empty(), "a tensor needs at least a batch dimension");
  if (shape.size() == 4) return {shape[0], shape[1], shape[2], shape[3]};
  return {shape[0], product(shape) / shape[0], 1, 1};
}

struct CudaNetwork::Impl {
  struct Slot {
    i64 offset = 0;  // elements into the flat buffers
    i64 elements = 0;
    bool fp32 = false;  // in the fp32 region [n_compute, n) under mixed precision
  };
  // A gradient set aside in the edge scratch, added into its producer's after the layer's backward.
  struct Accumulate {
    void* from;
    void* into;
    i64 count;
  };

  ModelSpec model;
  NetworkConfig config;
  std::vector<Dims> shapes;
  bool has_loss = false, mixed = false;
  bool scaled = false;  // dynamic loss scaling: mixed precision with a loss
  i64 target_count = 0;
  std::vector<std::unique_ptr<Layer>> layers;  // by node; null for the input
  std::vector<std::vector<Slot>> slots;        // by node
  i64 n = 0, n_compute = 0;
  DeviceBuffer params32, params_compute, grads, grads32, first, second, state;
  std::vector<DeviceBuffer> values, value_grads;  // by node
  std::vector<std::vector<Accumulate>> accumulate;  // by consuming node
  DeviceBuffer input32, labels, targets, edge_scratch, workspace, cublas_workspace, result;
  DeviceBuffer backward_scale;  // the loss scale the last backward used, for reading gradients
  bool batch_recorded = false;  // set_batch recorded batch_start for the coming step
  std::function<void(int node)> backward_hook;
  DeviceTargets device_targets;
  PinnedBuffer staging_input, staging_targets, readback;  // readback: loss (float), correct (int32)
  Event batch_start, step_start, forward_end, backward_end, step_end;
  cudaGraphExec_t graph = nullptr;
  DeviceBuffer pool_inputs, pool_targets;  // the resident dataset
  i64 pool_batches = 0;
  std::int64_t correct = -1;

  std::size_t elem(const Context& ctx) const { return ctx.elem_bytes(); }
  i64 input_count() const { return product(shapes[0]); }
  kernels::StepState* step_state() const { return state.as<kernels::StepState>(); }
};

CudaNetwork::CudaNetwork(const ModelSpec& model, const NetworkConfig& config)
    : ctx_(std::make_unique<Context>(config.device, config.precision, config.workspace_cap)),
      impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  Context& ctx = *ctx_;
  m.model = model;
  m.config = config;
  m.shapes = infer_shapes(model, config.batch);
  m.mixed = is_mixed(config.precision);
  const int count = int(model.nodes.size());
  m.has_loss = is_loss(model.nodes.back().spec);
  if (m.has_loss) m.target_count = product(target_shape(model, config.batch));
  m.layers.resize(count);
  m.slots.resize(count);
  m.values.resize(count);
  m.value_grads.resize(count);
  m.accumulate.resize(count);

  // The last consumer of a tensor (the first to run in backward) writes its gradient; the
  // others write into the edge scratch, then added (as in the CPU network).
  std::vector<int> last_consumer(count, -1);
  for (int i = 0; i < count; ++i)
    for (int p : model.nodes[i].inputs) last_consumer[p] = std::max(last_consumer[p], i);
  for (int i = 0; i + 1 < count; ++i)
    TB_CHECK(last_consumer[i] >= 0, "{}/{}: output is never used", model.name, model.nodes[i].name);

  // Plan every layer (descriptors, algorithms, workspace requests).
  for (int i = 1; i < count; ++i) {
    const Node& node = model.nodes[i];
    Inputs in;
    for (int p : node.inputs) in.push_back(LayerInput{m.shapes[p], p != 0});
    // The node is named in the message; the error keeps its type (out of memory stays so).
    const auto where = [&](const Error& e) {
      return fmt::format("{}/{} ({}): {}", model.name, node.name, kind_name(node.spec), e.what());
    };
    try {
      m.layers[i] = make_layer(ctx, node.spec, in, m.shapes[i]);
    } catch (const OutOfMemory& e) {
      throw OutOfMemory(where(e));
    } catch (const BackendError& e) {
      throw BackendError(where(e));
    } catch (const InputError& e) {
      throw InputError(where(e));
    } catch (const Error& e) {
      throw Error(where(e));
    }
  }

  // Parameter slots: compute-type slots first, fp32 slots (batch norm) after them, so that the
  // optimizer sees two contiguous regions. Without mixed precision every slot is fp32 storage.
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 1; i < count; ++i) {
      const auto declared = m.layers[i]->param_slots();
      if (pass == 0) m.slots[i].resize(declared.size());
      for (std::size_t k = 0; k < declared.size(); ++k) {
        const bool fp32 = m.mixed && declared[k].fp32;
        if (fp32 != (pass == 1)) continue;
        m.slots[i][k] = Impl::Slot{m.n, declared[k].elements, fp32};
        m.n += align_up(declared[k].elements);
      }
    }
    if (pass == 0) m.n_compute = m.n;
  }

  // Allocate everything once, through the device's caching allocator.
  Allocator& alloc = ctx.allocator;
  const std::size_t e = ctx.elem_bytes();
  m.params32 = DeviceBuffer(alloc, std::size_t(m.n) * 4, MemoryKind::Weights);
  m.grads = DeviceBuffer(alloc, std::size_t(m.n_compute) * e, MemoryKind::Gradients);
  if (m.mixed) {
    m.params_compute = DeviceBuffer(alloc, std::size_t(m.n_compute) * e, MemoryKind::Weights);
    m.grads32 = DeviceBuffer(alloc, std::size_t(m.n - m.n_compute) * 4, MemoryKind::Gradients);
  }
  m.first = DeviceBuffer(alloc, std::size_t(m.n) * 4, MemoryKind::OptimizerState);
  if (config.optimizer.kind == OptimizerConfig::Kind::Adam)
    m.second = DeviceBuffer(alloc, std::size_t(m.n) * 4, MemoryKind::OptimizerState);
  m.state = DeviceBuffer(alloc, sizeof(kernels::StepState), MemoryKind::OptimizerState);

  m.values[0] = DeviceBuffer(alloc, std::size_t(m.input_count()) * e, MemoryKind::Data);
  if (m.mixed) m.input32 = DeviceBuffer(alloc, std::size_t(m.input_count()) * 4, MemoryKind::Data);
  for (int i = 1; i < count; ++i) {
    if (m.has_loss && i == count - 1) continue;
    const std::size_t bytes = std::size_t(product(m.shapes[i])) * e;
    m.values[i] = DeviceBuffer(alloc, bytes, MemoryKind::Activations);
    m.value_grads[i] = DeviceBuffer(alloc, bytes, MemoryKind::Activations);
  }
  if (m.has_loss) {
    if (model.task == Task::Classification)
      m.labels = DeviceBuffer(alloc, std::size_t(m.target_count) * 4, MemoryKind::Data);
    else
      m.targets = DeviceBuffer(alloc, std::size_t(m.target_count) * 4, MemoryKind::Data);
  }
  m.device_targets = DeviceTargets{m.labels.as<std::int32_t>(), m.targets.as<float>()};
  m.result = DeviceBuffer(alloc, 2 * sizeof(float), MemoryKind::Other);
  m.backward_scale = DeviceBuffer(alloc, sizeof(float), MemoryKind::Other);

  std::vector<std::vector<char>> direct(count);
  i64 edge_bytes = 0;
  for (int i = 1; i < count; ++i) {
    const auto& inputs = model.nodes[i].inputs;
    i64 node_bytes = 0;
    for (std::size_t j = 0; j < inputs.size(); ++j) {
      const int p = inputs[j];
      const bool first_use = std::find(inputs.begin(), inputs.begin() + j, p) == inputs.begin() + j;
      direct[i].push_back(p != 0 && last_consumer[p] == i && first_use);
      if (p != 0 && !direct[i][j]) node_bytes += align_up(product(m.shapes[p])) * i64(e);
    }
    edge_bytes = std::max(edge_bytes, node_bytes);
  }
  m.edge_scratch = DeviceBuffer(alloc, std::size_t(edge_bytes), MemoryKind::Activations);
  m.workspace = DeviceBuffer(alloc, ctx.workspace_bytes, MemoryKind::Workspace);
  ctx.workspace = m.workspace.get();
  // cuBLAS gets its workspace from us too, so that it never allocates during a step (which
  // graph capture forbids) and the allocator sees it.
  m.cublas_workspace = DeviceBuffer(alloc, kCublasWorkspace, MemoryKind::Workspace);
  TB_CU(cublasSetWorkspace(ctx.cublas, m.cublas_workspace.get(), kCublasWorkspace));

  m.staging_input = PinnedBuffer(std::size_t(m.input_count()) * 4);
  m.staging_targets = PinnedBuffer(std::size_t(std::max<i64>(m.target_count, 1)) * 4);
  m.readback = PinnedBuffer(2 * sizeof(float));

  // Bind.
  char* params_c = static_cast<char*>(m.mixed ? m.params_compute.get() : m.params32.get());
  char* grads_c = static_cast<char*>(m.grads.get());
  for (int i = 1; i < count; ++i) {
    const Node& node = model.nodes[i];
    Bindings b;
    i64 edge_offset = 0;
    for (std::size_t j = 0; j < node.inputs.size(); ++j) {
      const int p = node.inputs[j];
      b.inputs.push_back(m.values[p].get());
      if (p == 0) {
        b.dinputs.push_back(nullptr);
      } else if (direct[i][j]) {
        b.dinputs.push_back(m.value_grads[p].get());
      } else {
        void* edge = static_cast<char*>(m.edge_scratch.get()) + edge_offset;
        edge_offset += align_up(product(m.shapes[p])) * i64(e);
        b.dinputs.push_back(edge);
        m.accumulate[i].push_back(Impl::Accumulate{edge, m.value_grads[p].get(), product(m.shapes[p])});
      }
    }
    b.output = m.values[i].get();
    b.doutput = m.value_grads[i].get();
    for (const Impl::Slot& s : m.slots[i]) {
      if (s.fp32) {
        b.params.push_back(m.params32.as<float>() + s.offset);
        b.dparams.push_back(m.grads32.as<float>() + (s.offset - m.n_compute));
      } else {
        b.params.push_back(params_c + s.offset * i64(e));
        b.dparams.push_back(grads_c + s.offset * i64(e));
      }
    }
    b.targets = &m.device_targets;
    b.loss = m.result.as<float>();
    b.correct = reinterpret_cast<std::int32_t*>(m.result.as<float>() + 1);
    b.state = m.step_state();
    m.layers[i]->bind(ctx, b);
  }

  // Zero state and gradients, then initialise parameters in canonical layouts.
  for (DeviceBuffer* buf : {&m.first, &m.second, &m.grads, &m.grads32, &m.params32, &m.params_compute})
    if (*buf) TB_CU(cudaMemsetAsync(buf->get(), 0, buf->bytes(), ctx.stream));
  // Only a loss scales its gradient; a gradient given with set_output_grad is unscaled.
  m.scaled = m.mixed && m.has_loss;
  kernels::init_step_state(m.step_state(), m.scaled ? config.initial_loss_scale : 1.0f, ctx.stream);
  std::uint64_t seed = config.seed * 1000003;
  for (int i = 1; i < count; ++i) {
    const auto specs = node_params(model.nodes[i].spec, m.shapes[model.nodes[i].inputs[0]]);
    for (std::size_t k = 0; k < specs.size(); ++k) write_param(i, int(k), init_param(specs[k], ++seed));
  }
  TB_CU(cudaStreamSynchronize(ctx.stream));
  n_params_ = m.n;
}

CudaNetwork::~CudaNetwork() {
  if (ctx_ && ctx_->stream) cudaStreamSynchronize(ctx_->stream);
  if (impl_ && impl_->graph) cudaGraphExecDestroy(impl_->graph);
}

void CudaNetwork::set_batch(const BatchView& batch) {
  Impl& m = *impl_;
  Context& ctx = *ctx_;
  m.batch_start.record(ctx.stream);
  m.batch_recorded = true;
  const std::size_t input_bytes = std::size_t(m.input_count()) * 4;
  const std::size_t target_bytes = std::size_t(m.target_count) * 4;
  float* input32 = m.mixed ? m.input32.as<float>() : m.values[0].as<float>();
  if (batch.resident >= 0) {
    TB_CHECK(m.pool_batches > 0, "batch {} is resident on the device, but no dataset was made resident",
             batch.resident);
    const i64 k = batch.resident % m.pool_batches;
    TB_CU(cudaMemcpyAsync(input32, m.pool_inputs.as<float>() + k * m.input_count(), input_bytes,
                          cudaMemcpyDeviceToDevice, ctx.stream));
    if (m.has_loss) {
      void* to = m.labels ? m.labels.get() : m.targets.get();
      TB_CU(cudaMemcpyAsync(to, m.pool_targets.as<char>() + k * i64(target_bytes), target_bytes,
                            cudaMemcpyDeviceToDevice, ctx.stream));
    }
  } else {
    // The previous step has finished (every step waits for its end), so the staging is free.
    std::memcpy(m.staging_input.as<float>(), batch.input, input_bytes);
    TB_CU(cudaMemcpyAsync(input32, m.staging_input.as<float>(), input_bytes, cudaMemcpyHostToDevice, ctx.stream));
    if (m.has_loss) {
      const void* from = m.model.task == Task::Classification ? static_cast<const void*>(batch.labels)
                                                              : static_cast<const void*>(batch.targets);
      std::memcpy(m.staging_targets.as<char>(), from, target_bytes);
      void* to = m.labels ? m.labels.get() : m.targets.get();
      TB_CU(cudaMemcpyAsync(to, m.staging_targets.as<char>(), target_bytes, cudaMemcpyHostToDevice, ctx.stream));
    }
  }
  if (m.mixed) kernels::cast_from_f32(ctx.dtype, input32, m.values[0].get(), m.input_count(), ctx.stream);
}

namespace {
void run_forward(std::vector<std::unique_ptr<Layer>>& layers, Context& ctx, bool training) {
  for (std::size_t i = 1; i < layers.size(); ++i) {
    if (training) layers[i]->forward(ctx);
    else layers[i]->forward_eval(ctx);
  }
}
}  // namespace

float CudaNetwork::forward() {
  Impl& m = *impl_;
  run_forward(m.layers, *ctx_, true);
  return read_loss();
}

float CudaNetwork::evaluate() {
  Impl& m = *impl_;
  run_forward(m.layers, *ctx_, false);
  return read_loss();
}

float CudaNetwork::read_loss() {
  Impl& m = *impl_;
  Context& ctx = *ctx_;
  if (m.has_loss)
    TB_CU(cudaMemcpyAsync(m.readback.as<float>(), m.result.get(), 2 * sizeof(float), cudaMemcpyDeviceToHost,
                          ctx.stream));
  TB_CU(cudaStreamSynchronize(ctx.stream));
  if (!m.has_loss) return 0.0f;
  m.correct = m.model.task == Task::Classification ? i64(m.readback.as<std::int32_t>()[1]) : -1;
  return m.readback.as<float>()[0];
}

std::int64_t CudaNetwork::correct() const { return impl_->has_loss ? impl_->correct : -1; }

void CudaNetwork::enqueue_backward() {
  Impl& m = *impl_;
  Context& ctx = *ctx_;
  // The update may change the scale (mixed precision); gradients read later are unscaled with
  // the one they were computed with.
  TB_CU(cudaMemcpyAsync(m.backward_scale.get(), &m.step_state()->scale, sizeof(float), cudaMemcpyDeviceToDevice,
                        ctx.stream));
  for (std::size_t i = m.layers.size() - 1; i >= 1; --i) {
    m.layers[i]->backward(ctx);
    for (const Impl::Accumulate& a : m.accumulate[i]) kernels::accumulate(ctx.dtype, a.into, a.from, a.count, ctx.stream);
    if (m.backward_hook && !m.slots[i].empty()) m.backward_hook(int(i));
  }
}

namespace {
ElemType elem_type(DType t) { return t == DType::F16 ? ElemType::F16 : t == DType::BF16 ? ElemType::BF16 : ElemType::F32; }
}  // namespace

std::vector<FlatSegment> CudaNetwork::gradient_segments() {
  Impl& m = *impl_;
  const std::size_t e = ctx_->elem_bytes();
  std::vector<FlatSegment> compute, fp32;
  for (std::size_t i = 0; i < m.slots.size(); ++i) {
    // A node's slots are all compute-type or (batch norm) all fp32, and adjacent.
    if (m.slots[i].empty()) continue;
    const Impl::Slot& first = m.slots[i].front();
    const Impl::Slot& last = m.slots[i].back();
    const i64 count = last.offset + last.elements - first.offset;
    if (first.fp32)
      fp32.push_back({m.grads32.as<float>() + (first.offset - m.n_compute), ElemType::F32, count, int(i)});
    else
      compute.push_back({m.grads.as<char>() + first.offset * i64(e), elem_type(ctx_->dtype), count, int(i)});
  }
  compute.insert(compute.end(), fp32.begin(), fp32.end());
  return compute;
}

std::vector<FlatSegment> CudaNetwork::param_segments() {
  Impl& m = *impl_;
  std::vector<FlatSegment> out;
  for (std::size_t i = 0; i < m.slots.size(); ++i) {
    if (m.slots[i].empty()) continue;
    const Impl::Slot& first = m.slots[i].front();
    const Impl::Slot& last = m.slots[i].back();
    out.push_back({m.params32.as<float>() + first.offset, ElemType::F32, last.offset + last.elements - first.offset,
                   int(i)});
  }
  return out;
}

void CudaNetwork::params_written() {
  Impl& m = *impl_;
  if (m.mixed)
    kernels::cast_from_f32(ctx_->dtype, m.params32.as<float>(), m.params_compute.get(), m.n_compute, ctx_->stream);
  synchronize();
}

void CudaNetwork::set_backward_hook(std::function<void(int node)> hook) { impl_->backward_hook = std::move(hook); }

std::uint64_t CudaNetwork::param_checksum() {
  const std::vector<float> params = download(impl_->params32.get(), DType::F32, impl_->n);
  return fnv1a(params.data(), params.size() * sizeof(float));
}

void CudaNetwork::synchronize() { TB_CU(cudaStreamSynchronize(ctx_->stream)); }

void CudaNetwork::enqueue_update() {
  Impl& m = *impl_;
  Context& ctx = *ctx_;
  kernels::OptimizerArgs a;
  a.type = ctx.dtype;
  a.params = m.params32.as<float>();
  a.params_compute = m.mixed ? m.params_compute.get() : nullptr;
  a.grads = m.grads.get();
  a.grads_f32 = m.mixed ? m.grads32.as<float>() : nullptr;
  a.n_compute = m.n_compute;
  a.n = m.n;
  a.first = m.first.as<float>();
  a.second = m.second.as<float>();
  const OptimizerConfig& o = m.config.optimizer;
  a.lr = float(o.lr);
  a.momentum = float(o.momentum);
  a.weight_decay = float(o.weight_decay);
  a.beta1 = float(o.beta1);
  a.beta2 = float(o.beta2);
  a.eps = float(o.eps);
  a.state = m.step_state();
  if (m.mixed)
    kernels::find_nonfinite(ctx.dtype, m.grads.get(), m.n_compute, m.grads32.as<float>(), m.n - m.n_compute,
                            a.state, ctx.stream);
  if (o.kind == OptimizerConfig::Kind::Adam) kernels::adam_step(a, ctx.stream);
  else kernels::sgd_step(a, ctx.stream);
  kernels::finish_step(a.state, m.scaled, m.config.loss_scale_growth_interval, ctx.stream);
}

void CudaNetwork::backward() {
  enqueue_backward();
  TB_CU(cudaStreamSynchronize(ctx_->stream));
}

void CudaNetwork::update() {
  enqueue_update();
  TB_CU(cudaStreamSynchronize(ctx_->stream));
}

float CudaNetwork::train_step(StepTimes& times) {
  Impl& m = *impl_;
  Context& ctx = *ctx_;
  if (!m.batch_recorded) m.batch_start.record(ctx.stream);  // the same batch as the last step
  m.batch_recorded = false;
  m.step_start.record(ctx.stream);
  if (m.config.cuda_graph && m.graph) {
    TB_CU(cudaGraphLaunch(m.graph, ctx.stream));
    m.step_end.record(ctx.stream);
    const float loss = read_loss();
    times = StepTimes{.forward = -1, .backward = -1, .update = -1, .device = m.step_end.since(m.batch_start)};
    return loss;
  }
  run_forward(m.layers, ctx, true);
  m.forward_end.record(ctx.stream);
  enqueue_backward();
  m.backward_end.record(ctx.stream);
  enqueue_update();
  m.step_end.record(ctx.stream);
  const float loss = read_loss();
  times = StepTimes{.forward = m.forward_end.since(m.step_start),
                    .backward = m.backward_end.since(m.forward_end),
                    .update = m.step_end.since(m.backward_end),
                    .device = m.step_end.since(m.batch_start)};
  if (m.config.cuda_graph) capture_step();
  return loss;
}

void CudaNetwork::capture_step() {
  // After one eager step, so that cuDNN's and cuBLAS's set-up on first use happened outside
  // the capture. Every pointer and size is fixed at planning and no call in the step
  // allocates or waits, so the one graph serves every later step. The backward hook would
  // run only while capturing, so data-parallel replicas do not use graphs.
  Impl& m = *impl_;
  Context& ctx = *ctx_;
  TB_CHECK(!m.backward_hook, "a CUDA graph replays backward without its hook; replicas run without --cuda_graph");
  cudaGraph_t graph = nullptr;
  TB_CU(cudaStreamBeginCapture(ctx.stream, cudaStreamCaptureModeThreadLocal));
  try {
    run_forward(m.layers, ctx, true);
    enqueue_backward();
    enqueue_update();
  } catch (...) {
    cudaStreamEndCapture(ctx.stream, &graph);
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  TB_CU(cudaStreamEndCapture(ctx.stream, &graph));
  const cudaError_t status = cudaGraphInstantiate(&m.graph, graph, 0);
  cudaGraphDestroy(graph);
  TB_CU(status);
}

std::vector<float> CudaNetwork::download(const void* ptr, DType type, i64 count) const {
  Context& ctx = *ctx_;
  std::vector<float> out(static_cast<std::size_t>(count));
  if (count == 0) return out;
  DeviceBuffer tmp;
  const float* src = static_cast<const float*>(ptr);
  if (type != DType::F32) {
    tmp = DeviceBuffer(ctx.allocator, std::size_t(count) * 4, MemoryKind::Other);
    kernels::cast_to_f32(type, ptr, tmp.as<float>(), count, ctx.stream);
    src = tmp.as<float>();
  }
  TB_CU(cudaMemcpyAsync(out.data(), src, std::size_t(count) * 4, cudaMemcpyDeviceToHost, ctx.stream));
  TB_CU(cudaStreamSynchronize(ctx.stream));
  return out;
}

void CudaNetwork::upload(const std::vector<float>& values, void* ptr, DType type) {
  Context& ctx = *ctx_;
  const i64 count = i64(values.size());
  if (count == 0) return;
  if (type == DType::F32) {
    TB_CU(cudaMemcpyAsync(ptr, values.data(), std::size_t(count) * 4, cudaMemcpyHostToDevice, ctx.stream));
  } else {
    DeviceBuffer tmp(ctx.allocator, std::size_t(count) * 4, MemoryKind::Other);
    TB_CU(cudaMemcpyAsync(tmp.get(), values.data(), std::size_t(count) * 4, cudaMemcpyHostToDevice, ctx.stream));
    kernels::cast_from_f32(type, tmp.as<float>(), ptr, count, ctx.stream);
    TB_CU(cudaStreamSynchronize(ctx.stream));  // before tmp goes back to the allocator
  }
  TB_CU(cudaStreamSynchronize(ctx.stream));
}

float CudaNetwork::grad_unscale() const {
  if (!impl_->has_loss) return 1.0f;
  return 1.0f / download(impl_->backward_scale.get(), DType::F32, 1)[0];
}

std::vector<float> CudaNetwork::read_output(int node) const {
  const Impl& m = *impl_;
  if (m.has_loss && node == int(m.layers.size()) - 1) {
    const auto v = download(m.result.get(), DType::F32, 1);
    return v;
  }
  return download(m.values.at(node).get(), ctx_->dtype, product(m.shapes.at(node)));
}

std::vector<float> CudaNetwork::read_grad(int node) const {
  const Impl& m = *impl_;
  TB_CHECK(node > 0 && m.value_grads.at(node), "node {} has no gradient", node);
  auto g = download(m.value_grads[node].get(), ctx_->dtype, product(m.shapes[node]));
  const float unscale = grad_unscale();
  for (float& v : g) v *= unscale;
  return g;
}

void CudaNetwork::set_output_grad(const std::vector<float>& grad) {
  Impl& m = *impl_;
  TB_CHECK(!m.has_loss, "the gradient of a loss is computed, not given");
  const int last = int(m.layers.size()) - 1;
  TB_CHECK(i64(grad.size()) == product(m.shapes[last]), "output gradient has {} values, expected {}", grad.size(),
           product(m.shapes[last]));
  upload(grad, m.value_grads[last].get(), ctx_->dtype);
}

std::vector<std::vector<float>> CudaNetwork::read_slots(int node, bool gradients) const {
  const Impl& m = *impl_;
  TB_CHECK(node > 0 && node < int(m.slots.size()), "node {} has no parameters", node);
  const std::size_t e = ctx_->elem_bytes();
  std::vector<std::vector<float>> out;
  for (const Impl::Slot& s : m.slots[node]) {
    if (!gradients) {
      out.push_back(download(m.params32.as<float>() + s.offset, DType::F32, s.elements));
    } else if (s.fp32) {
      out.push_back(download(m.grads32.as<float>() + (s.offset - m.n_compute), DType::F32, s.elements));
    } else {
      out.push_back(download(m.grads.as<char>() + s.offset * i64(e), ctx_->dtype, s.elements));
    }
  }
  return out;
}

std::vector<float> CudaNetwork::read_param(int node, int index) const {
  return impl_->layers.at(node)->canonical(index, read_slots(node, false));
}

std::vector<float> CudaNetwork::read_param_grad(int node, int index) const {
  auto g = impl_->layers.at(node)->canonical(index, read_slots(node, true));
  const float unscale = grad_unscale();
  for (float& v : g) v *= unscale;
  return g;
}

void CudaNetwork::write_param(int node, int index, const std::vector<float>& value) {
  Impl& m = *impl_;
  const auto specs = node_params(m.model.nodes.at(node).spec, m.shapes[m.model.nodes[node].inputs.at(0)]);
  TB_CHECK(index >= 0 && index < int(specs.size()), "node {} has no parameter {}", node, index);
  TB_CHECK(i64(value.size()) == specs[index].count(), "parameter {} of node {}: {} values given, {} expected", index,
           node, value.size(), specs[index].count());
  auto slots = read_slots(node, false);
  m.layers[node]->set_canonical(index, value, slots);
  const std::size_t e = ctx_->elem_bytes();
  for (std::size_t k = 0; k < slots.size(); ++k) {
    const Impl::Slot& s = m.slots[node][k];
    TB_CHECK(i64(slots[k].size()) == s.elements, "node {}: slot {} has {} values, expected {}", node, k,
             slots[k].size(), s.elements);
    upload(slots[k], m.params32.as<float>() + s.offset, DType::F32);
    if (m.mixed && !s.fp32) upload(slots[k], m.params_compute.as<char>() + s.offset * i64(e), ctx_->dtype);
  }
}

void CudaNetwork::make_resident(Dataset& data, i64 batches) {
  Impl& m = *impl_;
  Context& ctx = *ctx_;
  TB_CHECK(batches > 0, "a resident dataset needs at least one batch");
  const std::size_t input_bytes = std::size_t(m.input_count()) * 4, target_bytes = std::size_t(m.target_count) * 4;
  m.pool_inputs = DeviceBuffer(ctx.allocator, input_bytes * std::size_t(batches), MemoryKind::Data);
  m.pool_targets = DeviceBuffer(ctx.allocator, std::max<std::size_t>(target_bytes, 4) * std::size_t(batches),
                                MemoryKind::Data);
  for (i64 k = 0; k < batches; ++k) {
    const Batch& b = data.next();
    // On the network's stream (non-blocking: the legacy stream's copies are not ordered with
    // it), waited for before the host batch is reused.
    TB_CU(cudaMemcpyAsync(m.pool_inputs.as<char>() + k * i64(input_bytes), b.input.data(), input_bytes,
                          cudaMemcpyHostToDevice, ctx.stream));
    if (m.has_loss) {
      const void* from = m.model.task == Task::Classification ? static_cast<const void*>(b.labels.data())
                                                              : static_cast<const void*>(b.targets.data());
      TB_CU(cudaMemcpyAsync(m.pool_targets.as<char>() + k * i64(target_bytes), from, target_bytes,
                            cudaMemcpyHostToDevice, ctx.stream));
    }
    TB_CU(cudaStreamSynchronize(ctx.stream));
  }
  m.pool_batches = batches;
}

std::size_t CudaNetwork::batch_input_bytes() const {
  return std::size_t(impl_->input_count() + std::max<i64>(impl_->target_count, 1)) * 4;
}

MemoryBreakdown CudaNetwork::memory() const {
  const Impl& m = *impl_;
  MemoryBreakdown b;
  b.weights = m.params32.bytes() + m.params_compute.bytes();
  b.gradients = m.grads.bytes() + m.grads32.bytes();
  b.optimizer_state = m.first.bytes() + m.second.bytes() + m.state.bytes();
  for (std::size_t i = 0; i < m.values.size(); ++i) {
    if (i > 0) b.activations += m.values[i].bytes() + m.value_grads[i].bytes();
    if (m.layers[i]) b.activations += m.layers[i]->own_bytes();
  }
  b.activations += m.edge_scratch.bytes() + m.result.bytes();
  b.workspace = m.workspace.bytes() + m.cublas_workspace.bytes();
  b.data = m.values[0].bytes() + m.input32.bytes() + m.labels.bytes() + m.targets.bytes() + m.pool_inputs.bytes() +
           m.pool_targets.bytes();
  return b;
}

kernels::StepState CudaNetwork::step_state() const {
  kernels::StepState s{};
  TB_CU(cudaMemcpyAsync(&s, impl_->state.get(), sizeof s, cudaMemcpyDeviceToHost, ctx_->stream));
  TB_CU(cudaStreamSynchronize(ctx_->stream));
  return s;
}

std::int64_t CudaNetwork::skipped_steps() const { return step_state().skipped; }
float CudaNetwork::loss_scale() const { return step_state().scale; }

}  // namespace tb::cuda
