// Planning and running a model on the CUDA backend.
#include "engine/cuda/network.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>

#include "engine/core/dataset.hpp"
#include "engine/core/layer_factory.hpp"
#include "engine/cuda/device.hpp"

namespace tb::cuda {

namespace {
i64 align_up(i64 n) { return (n + i64(kParamAlignElements) - 1) / i64(kParamAlignElements) * i64(kParamAlignElements); }

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
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// Seconds per layer and direction, summed over the eager steps timed, written as a table when
// the network goes (TB_CUDA_LAYER_TIMES=<file>): where a step's time goes, by layer.
struct LayerTimes {
  std::string path;
  std::vector<std::unique_ptr<Event>> forward, backward;  // by step: start events, plus one end
  std::vector<double> forward_s, backward_s;
  int steps = 0;
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

namespace {
std::vector<float> permute_channels(const std::vector<float>& from, const Nchw& s, bool to_last) {
  const i64 HW = s.h * s.w;
  TB_CHECK(i64(from.size()) == s.n * s.c * HW, "{} values for a tensor of {}", from.size(), s.n * s.c * HW);
  std::vector<float> to(from.size());
  for (i64 n = 0; n < s.n; ++n)
    for (i64 c = 0; c < s.c; ++c)
      for (i64 p = 0; p < HW; ++p) {
        const std::size_t nchw = std::size_t((n * s.c + c) * HW + p), nhwc = std::size_t((n * HW + p) * s.c + c);
        if (to_last)
          to[nhwc] = from[nchw];
        else
          to[nchw] = from[nhwc];
      }
  return to;
}
}  // namespace

std::vector<float> to_channels_last(const std::vector<float>& nchw, const Nchw& s) {
  return permute_channels(nchw, s, true);
}

std::vector<float> from_channels_last(const std::vector<float>& nhwc, const Nchw& s) {
  return permute_channels(nhwc, s, false);
}

struct CudaNetwork::Impl {
  struct Slot {
    i64 offset = 0;  // elements into the flat buffers
    i64 elements = 0;
    bool fp32 = false;  // in the fp32 region [n_compute, n) under mixed precision
  };
  // A gradient set aside in an edge region, added into its producer's after the layer's backward.
  struct Accumulate {
    void* from;
    void* into;
    i64 count;
  };
  // One of the two buffers a batch is uploaded into (fp32, canonical layout).
  struct Upload {
    DeviceBuffer input, targets;
    PinnedBuffer staging_input, staging_targets;
    Event done;      // on the upload stream: the copy into `input` and `targets` is complete
    Event consumed;  // on the main stream: the step that read them has converted them
    bool used = false;
  };

  ModelSpec model;
  NetworkOptions config;
  std::vector<Dims> shapes;
  bool has_loss = false, mixed = false;
  bool scaled = false;  // dynamic loss scaling: mixed precision with a loss
  i64 target_count = 0;
  std::vector<LayerGroup> groups;              // by step
  std::vector<std::unique_ptr<Layer>> layers;  // by step
  std::vector<Layer*> layer_of;                // by node; null for the input
  std::vector<int> hook_after;                 // by step: the node to report to the backward hook, or -1
  MemoryPlan plan;
  std::vector<std::vector<Slot>> slots;  // by node
  i64 n = 0, n_compute = 0;
  DeviceBuffer params32, params_compute, grads, grads32, first, second, state;
  DeviceBuffer arena, input, labels, targets;       // input: the model input in the storage type and layout
  std::vector<void*> values, value_grads;           // by node, into the arena (values[0]: input)
  std::vector<std::vector<Accumulate>> accumulate;  // by step
  DeviceBuffer workspace, cublas_workspace, result;
  DeviceBuffer backward_scale;  // the loss scale the last backward used, for reading gradients
  std::function<void(int node)> step_hook;
  DeviceTargets device_targets;
  Stream upload_stream;
  Upload uploads[2];
  int last_set = 1;            // the upload buffer set_batch filled last
  bool batch_waiting = false;  // set_batch filled it and no pass has taken it yet
  PinnedBuffer readback;       // loss (float), correct (int32)
  Event batch_start, data_ready, forward_end, backward_end, step_end;
  bool started = false;  // a step was started and not finished
  cudaGraphExec_t graph = nullptr;
  DeviceBuffer pool_inputs, pool_targets;  // the resident dataset
  i64 pool_batches = 0;
  std::int64_t correct = -1;
  int clock = 0;  // plan time at the end of the last pass: forward S, backward 2S
  LayerTimes timing;

  // The stages of construction, in the order the constructor runs them.
  void describe(const ModelSpec& spec, const NetworkOptions& cfg);  // shapes and per-node tables
  void make_layers(Context& ctx);
  void check_layer_traits(const LayerGroup& g, const Layer& layer) const;
  void place_parameters();
  void place_backward_hooks();
  void allocate(Context& ctx);
  void allocate_io(Context& ctx);
  void bind_layers(Context& ctx);
  void bind_parameters(Bindings& b, const std::vector<Slot>& owned, std::size_t elem_bytes) const;
  void zero_state(Context& ctx);
  void time_layers_if_asked();

  // TB_CUDA_LAYER_TIMES on an eager network: its layers' events are recorded and read. A network
  // with a CUDA graph records none, also in the eager step before its capture.
  bool times_layers() const { return !timing.path.empty() && !config.cuda_graph; }
  i64 input_count() const { return product(shapes[0]); }
  std::size_t target_bytes() const { return std::size_t(std::max<i64>(target_count, 1)) * 4; }
  kernels::StepState* step_state() const { return state.as<kernels::StepState>(); }
  bool images(int node) const { return shapes[std::size_t(node)].size() == 4; }
  // With poison_dead, fills the blocks whose life ends at `time` with NaN (all-ones bytes, in
  // every type), so that a read past the planned last use shows.
  void poison(int time, cudaStream_t stream) const {
    if (!config.poison_dead) return;
    for (int b : plan.ending_at(time)) {
      const Region& r = plan.blocks[std::size_t(b)].region;
      TB_CU(cudaMemsetAsync(arena.as<char>() + r.offset, 0xff, r.bytes, stream));
    }
  }
};

void CudaNetwork::Impl::describe(const ModelSpec& spec, const NetworkOptions& cfg) {
  model = spec;
  config = cfg;
  shapes = infer_shapes(spec, cfg.batch);
  mixed = is_mixed(cfg.precision);
  has_loss = is_loss(spec.nodes.back().spec);
  if (has_loss) target_count = product(target_shape(spec, cfg.batch));
  const std::size_t count = spec.nodes.size();
  layer_of.assign(count, nullptr);
  slots.resize(count);
  values.assign(count, nullptr);
  value_grads.assign(count, nullptr);
}

void CudaNetwork::Impl::make_layers(Context& ctx) {
  groups = group_layers(model, ctx.layout, shapes, ctx.dtype, config.workspace_cap);
  for (const LayerGroup& g : groups) {
    const int node = g.nodes.back();
    Inputs in;
    for (int p : g.inputs) in.push_back(LayerInput{shapes[std::size_t(p)], p != 0});
    try {
      if (g.fused)
        layers.push_back(make_batchnorm_add_relu(
            ctx, std::get<BatchNormSpec>(model.nodes[std::size_t(g.nodes[0])].spec), in, shapes[std::size_t(node)]));
      else
        layers.push_back(make_layer(ctx, model.nodes[std::size_t(node)].spec, in, shapes[std::size_t(node)]));
    } catch (...) {
      rethrow_for_node(model, node);
    }
    for (int covered : g.nodes) layer_of[std::size_t(covered)] = layers.back().get();
    check_layer_traits(g, *layers.back());
  }
}

// The layer keeps the contract the GPU-free plan assumed for it.
void CudaNetwork::Impl::check_layer_traits(const LayerGroup& g, const Layer& layer) const {
  const LayerTraits t = layer_traits(model, g);  // recompute_output: what the layer can do
  const BackwardReads r = layer.backward_reads();
  bool agree = r.output == t.reads.output && layer.output_over_input() == t.output_over_input &&
               layer.dinput_over_doutput() == t.dinput_over_doutput &&
               (!t.recompute_output || layer.recomputes_output());
  for (std::size_t j = 0; j < g.inputs.size(); ++j) agree = agree && r.reads_input(j) == t.reads.reads_input(j);
  TB_CHECK(agree, "{}/{}: the layer's backward reads or in-place use differ from plan.hpp's layer_traits", model.name,
           model.nodes[std::size_t(g.nodes.back())].name);
}

// Parameter slots: compute-type slots first, fp32 slots (batch norm) after them, so that the
// optimizer sees two contiguous regions. Without mixed precision every slot is fp32 storage.
// A fused layer's parameters are its batch norm's (the first node of its group).
void CudaNetwork::Impl::place_parameters() {
  for (int pass = 0; pass < 2; ++pass) {
    for (std::size_t s = 0; s < groups.size(); ++s) {
      const int owner = groups[s].nodes.front();
      const auto declared = layers[s]->param_slots();
      if (pass == 0) slots[std::size_t(owner)].resize(declared.size());
      for (std::size_t k = 0; k < declared.size(); ++k) {
        const bool fp32 = mixed && declared[k].fp32;
        if (fp32 != (pass == 1)) continue;
        slots[std::size_t(owner)][k] = Slot{n, declared[k].elements, fp32};
        n += align_up(declared[k].elements);
      }
    }
    if (pass == 0) n_compute = n;
  }
}

// The backward hook hears of a node once every node with parameters at or after it has its
// gradients (fused layers finish their batch norm after nodes with higher indices).
void CudaNetwork::Impl::place_backward_hooks() {
  const int count = int(model.nodes.size());
  std::vector<int> param_nodes;
  for (int i = 1; i < count; ++i)
    if (!slots[std::size_t(i)].empty()) param_nodes.push_back(i);
  std::vector<char> done(std::size_t(count), 0);
  std::size_t frontier = param_nodes.size();  // param_nodes[frontier..] are done
  hook_after.assign(groups.size(), -1);
  for (std::size_t s = groups.size(); s-- > 0;) {
    for (int node : groups[s].nodes) done[std::size_t(node)] = 1;
    const std::size_t before = frontier;
    while (frontier > 0 && done[std::size_t(param_nodes[frontier - 1])]) --frontier;
    if (frontier < before) hook_after[s] = param_nodes[frontier];
  }
}

// Everything once, through the device's caching allocator.
void CudaNetwork::Impl::allocate(Context& ctx) {
  Allocator& alloc = ctx.allocator;
  const std::size_t e = ctx.elem_bytes();
  params32 = DeviceBuffer(alloc, std::size_t(n) * 4, MemoryKind::Weights);
  grads = DeviceBuffer(alloc, std::size_t(n_compute) * e, MemoryKind::Gradients);
  if (mixed) {
    params_compute = DeviceBuffer(alloc, std::size_t(n_compute) * e, MemoryKind::Weights);
    grads32 = DeviceBuffer(alloc, std::size_t(n - n_compute) * 4, MemoryKind::Gradients);
  }
  first = DeviceBuffer(alloc, std::size_t(n) * 4, MemoryKind::OptimizerState);
  if (config.optimizer.kind == OptimizerConfig::Kind::Adam)
    second = DeviceBuffer(alloc, std::size_t(n) * 4, MemoryKind::OptimizerState);
  state = DeviceBuffer(alloc, sizeof(kernels::StepState), MemoryKind::OptimizerState);

  arena = DeviceBuffer(alloc, std::max<std::size_t>(plan.arena_bytes, 1), MemoryKind::Activations);
  input = DeviceBuffer(alloc, std::size_t(input_count()) * e, MemoryKind::Data);
  values[0] = input.get();
  for (std::size_t i = 1; i < model.nodes.size(); ++i) {
    if (!plan.values[i].empty()) values[i] = arena.as<char>() + plan.values[i].offset;
    if (!plan.grads[i].empty()) value_grads[i] = arena.as<char>() + plan.grads[i].offset;
  }
  allocate_io(ctx);
}

// The batch's buffers (two uploads in flight), the loss's, and the libraries' workspaces.
void CudaNetwork::Impl::allocate_io(Context& ctx) {
  Allocator& alloc = ctx.allocator;
  for (Upload& u : uploads) {
    u.input = DeviceBuffer(alloc, std::size_t(input_count()) * 4, MemoryKind::Data);
    u.targets = DeviceBuffer(alloc, target_bytes(), MemoryKind::Data);
    u.staging_input = PinnedBuffer(std::size_t(input_count()) * 4);
    u.staging_targets = PinnedBuffer(target_bytes());
  }
  if (has_loss) {
    if (model.task == Task::Classification)
      labels = DeviceBuffer(alloc, std::size_t(target_count) * 4, MemoryKind::Data);
    else
      targets = DeviceBuffer(alloc, std::size_t(target_count) * 4, MemoryKind::Data);
  }
  device_targets = DeviceTargets{labels.as<std::int32_t>(), targets.as<float>()};
  result = DeviceBuffer(alloc, 2 * sizeof(float), MemoryKind::Other);
  backward_scale = DeviceBuffer(alloc, sizeof(float), MemoryKind::Other);
  if (ctx.workspace_bytes > 0) workspace = DeviceBuffer(alloc, ctx.workspace_bytes, MemoryKind::Workspace);
  ctx.workspace = workspace.get();
  // cuBLAS gets its workspace from us too, so that it never allocates during a step (which
  // graph capture forbids) and the allocator sees it.
  cublas_workspace = DeviceBuffer(alloc, kCublasWorkspaceBytes, MemoryKind::Workspace);
  TB_CU(cublasSetWorkspace(ctx.cublas, cublas_workspace.get(), kCublasWorkspaceBytes));
  readback = PinnedBuffer(2 * sizeof(float));
}

// Each input gradient goes to its producer's gradient or, where the planner says the layer is
// not the one to write it, to an edge region added into it after the layer.
void CudaNetwork::Impl::bind_layers(Context& ctx) {
  accumulate.resize(groups.size());
  for (std::size_t s = 0; s < groups.size(); ++s) {
    const LayerGroup& g = groups[s];
    const int node = g.nodes.back();
    Bindings b;
    for (std::size_t j = 0; j < g.inputs.size(); ++j) {
      const int p = g.inputs[j];
      b.inputs.push_back(values[std::size_t(p)]);
      const InputGrad& ig = plan.input_grads[s][j];
      if (p == 0) {
        b.dinputs.push_back(nullptr);
      } else if (ig.direct) {
        b.dinputs.push_back(value_grads[std::size_t(p)]);
      } else {
        void* edge = arena.as<char>() + ig.edge.offset;
        b.dinputs.push_back(edge);
        accumulate[s].push_back(Accumulate{edge, value_grads[std::size_t(p)], product(shapes[std::size_t(p)])});
      }
    }
    b.output = has_loss && node == int(model.nodes.size()) - 1 ? nullptr : values[std::size_t(node)];
    b.doutput = value_grads[std::size_t(node)];
    bind_parameters(b, slots[std::size_t(g.nodes.front())], ctx.elem_bytes());
    b.targets = &device_targets;
    b.loss = result.as<float>();
    b.correct = reinterpret_cast<std::int32_t*>(result.as<float>() + 1);
    b.state = step_state();
    try {
      layers[s]->bind(ctx, b);
    } catch (...) {
      rethrow_for_node(model, node);
    }
  }
}

void CudaNetwork::Impl::bind_parameters(Bindings& b, const std::vector<Slot>& owned, std::size_t elem_bytes) const {
  char* params_c = static_cast<char*>(mixed ? params_compute.get() : params32.get());
  char* grads_c = static_cast<char*>(grads.get());
  for (const Slot& slot : owned) {
    if (slot.fp32) {
      b.params.push_back(params32.as<float>() + slot.offset);
      b.dparams.push_back(grads32.as<float>() + (slot.offset - n_compute));
    } else {
      b.params.push_back(params_c + slot.offset * i64(elem_bytes));
      b.dparams.push_back(grads_c + slot.offset * i64(elem_bytes));
    }
  }
}

// Zero state and gradients (and the padding between slots), before parameters are initialised
// in canonical layouts. Only a loss scales its gradient; a gradient given with set_output_grad
// is unscaled.
void CudaNetwork::Impl::zero_state(Context& ctx) {
  for (DeviceBuffer* buf : {&first, &second, &grads, &grads32, &params32, &params_compute})
    if (*buf) TB_CU(cudaMemsetAsync(buf->get(), 0, buf->bytes(), ctx.stream));
  scaled = mixed && has_loss;
  kernels::init_step_state(step_state(), scaled ? config.initial_loss_scale : 1.0f, ctx.stream);
  TB_CU(cudaStreamSynchronize(ctx.stream));
}

void CudaNetwork::Impl::time_layers_if_asked() {
  const char* path = std::getenv("TB_CUDA_LAYER_TIMES");
  if (!path || !*path) return;
  timing.path = path;
  for (std::size_t s = 0; s <= groups.size(); ++s) {
    timing.forward.push_back(std::make_unique<Event>());
    timing.backward.push_back(std::make_unique<Event>());
  }
  timing.forward_s.assign(groups.size(), 0.0);
  timing.backward_s.assign(groups.size(), 0.0);
}

CudaNetwork::CudaNetwork(const ModelSpec& model, const NetworkOptions& config)
    : ctx_(std::make_unique<Context>(config.device, config.precision, config.workspace_cap)),
      impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  Context& ctx = *ctx_;
  m.describe(model, config);
  // The layout and the layers (plan.hpp: the same decisions plan_network_memory makes).
  ctx.layout = config.layout.value_or(choose_layout(model, config.precision));
  m.make_layers(ctx);
  m.plan = plan_arena(model, m.groups, m.shapes, ctx.dtype, config.keep_values);
  m.place_parameters();
  m.place_backward_hooks();
  m.allocate(ctx);
  m.bind_layers(ctx);
  m.zero_state(ctx);
  n_params_ = m.n;
  initialize_parameters(*this, model, m.shapes, config.seed);
  m.time_layers_if_asked();
}

CudaNetwork::~CudaNetwork() {
  Impl& m = *impl_;
  cudaStreamSynchronize(ctx_->stream);
  cudaStreamSynchronize(m.upload_stream);
  if (m.graph) cudaGraphExecDestroy(m.graph);
  if (m.timing.path.empty() || m.timing.steps == 0) return;
  std::ofstream out(m.timing.path, std::ios::app);
  out << "# " << m.model.name << " batch " << m.config.batch << " " << precision_name(m.config.precision) << " "
      << layout_name(ctx_->layout) << ", mean of " << m.timing.steps << " eager steps (ms)\n"
      << "step\tlayer\tkind\tforward_ms\tbackward_ms\n";
  for (std::size_t s = 0; s < m.groups.size(); ++s) {
    std::string kinds;
    for (int node : m.groups[s].nodes)
      kinds += std::string(kinds.empty() ? "" : "+") + kind_name(m.model.nodes[std::size_t(node)].spec);
    out << s << '\t' << m.model.nodes[std::size_t(m.groups[s].nodes.back())].name << '\t' << kinds << '\t'
        << m.timing.forward_s[s] * 1e3 / m.timing.steps << '\t' << m.timing.backward_s[s] * 1e3 / m.timing.steps
        << '\n';
  }
}

void CudaNetwork::upload_next(const std::function<void(void* input, void* targets)>& copy) {
  Impl& m = *impl_;
  const int k = 1 - m.last_set;
  Impl::Upload& u = m.uploads[k];
  // The buffer's last upload has been copied (its staging is free) and the step that used it
  // has converted it (its device buffer is free): the copy stream waits for the second.
  wait_for(u.done.get());
  if (u.used) TB_CU(cudaStreamWaitEvent(m.upload_stream, u.consumed.get(), 0));
  copy(u.input.get(), u.targets.get());
  u.done.record(m.upload_stream);
  m.last_set = k;
  m.batch_waiting = true;
}

void CudaNetwork::set_batch(const BatchView& batch) {
  Impl& m = *impl_;
  const std::size_t input_bytes = std::size_t(m.input_count()) * 4;
  const std::size_t target_bytes = std::size_t(m.target_count) * 4;
  const Impl::Upload& next = m.uploads[1 - m.last_set];
  upload_next([&](void* input, void* targets) {
    std::memcpy(next.staging_input.as<float>(), batch.input, input_bytes);
    TB_CU(cudaMemcpyAsync(input, next.staging_input.as<float>(), input_bytes, cudaMemcpyHostToDevice, m.upload_stream));
    if (!m.has_loss) return;
    const void* from = m.model.task == Task::Classification ? static_cast<const void*>(batch.labels)
                                                            : static_cast<const void*>(batch.targets);
    std::memcpy(next.staging_targets.as<char>(), from, target_bytes);
    TB_CU(cudaMemcpyAsync(targets, next.staging_targets.as<char>(), target_bytes, cudaMemcpyHostToDevice,
                          m.upload_stream));
  });
}

void CudaNetwork::use_resident(i64 batch) {
  Impl& m = *impl_;
  TB_CHECK(m.pool_batches > 0, "batch {} is resident on the device, but no dataset was made resident", batch);
  const std::size_t input_bytes = std::size_t(m.input_count()) * 4;
  const std::size_t target_bytes = std::size_t(m.target_count) * 4;
  const i64 r = batch % m.pool_batches;
  upload_next([&](void* input, void* targets) {
    TB_CU(cudaMemcpyAsync(input, m.pool_inputs.as<char>() + r * i64(input_bytes), input_bytes, cudaMemcpyDeviceToDevice,
                          m.upload_stream));
    if (m.has_loss)
      TB_CU(cudaMemcpyAsync(targets, m.pool_targets.as<char>() + r * i64(target_bytes), target_bytes,
                            cudaMemcpyDeviceToDevice, m.upload_stream));
  });
}

void CudaNetwork::take_batch() {
  Impl& m = *impl_;
  Context& ctx = *ctx_;
  m.batch_start.record(ctx.stream);
  if (m.batch_waiting) {
    Impl::Upload& u = m.uploads[m.last_set];
    TB_CU(cudaStreamWaitEvent(ctx.stream, u.done.get(), 0));
    const Dims& x = m.shapes[0];
    if (ctx.layout == Layout::NHWC && x.size() == 4)
      kernels::nchw_to_nhwc(ctx.dtype, u.input.as<float>(), m.input.get(), x[0], x[1], x[2] * x[3], ctx.stream);
    else if (ctx.dtype != DType::F32)
      kernels::cast_from_f32(ctx.dtype, u.input.as<float>(), m.input.get(), m.input_count(), ctx.stream);
    else
      TB_CU(cudaMemcpyAsync(m.input.get(), u.input.get(), std::size_t(m.input_count()) * 4, cudaMemcpyDeviceToDevice,
                            ctx.stream));
    if (m.has_loss) {
      void* to = m.labels ? m.labels.get() : m.targets.get();
      TB_CU(
          cudaMemcpyAsync(to, u.targets.get(), std::size_t(m.target_count) * 4, cudaMemcpyDeviceToDevice, ctx.stream));
    }
    u.consumed.record(ctx.stream);
    u.used = true;
    m.batch_waiting = false;
  }
  m.data_ready.record(ctx.stream);
}

void CudaNetwork::enqueue_forward(bool training) {
  Impl& m = *impl_;
  Context& ctx = *ctx_;
  const bool timed = training && m.times_layers();
  for (std::size_t s = 0; s < m.layers.size(); ++s) {
    if (timed) m.timing.forward[s]->record(ctx.stream);
    if (training)
      m.layers[s]->forward(ctx);
    else
      m.layers[s]->forward_eval(ctx);
    m.poison(m.plan.forward_time(int(s)), ctx.stream);
  }
  if (timed) m.timing.forward.back()->record(ctx.stream);
  m.clock = m.plan.steps;
}

float CudaNetwork::forward() {
  take_batch();
  enqueue_forward(true);
  enqueue_loss_readback();
  return read_loss();
}

float CudaNetwork::evaluate() {
  take_batch();
  enqueue_forward(false);
  enqueue_loss_readback();
  return read_loss();
}

void CudaNetwork::enqueue_loss_readback() {
  Impl& m = *impl_;
  if (m.has_loss)
    TB_CU(cudaMemcpyAsync(m.readback.as<float>(), m.result.get(), 2 * sizeof(float), cudaMemcpyDeviceToHost,
                          ctx_->stream));
}

float CudaNetwork::read_loss() {
  Impl& m = *impl_;
  wait_for(ctx_->stream);
  if (!m.has_loss) return 0.0f;
  m.correct = m.model.task == Task::Classification ? i64(m.readback.as<std::int32_t>()[1]) : -1;
  return m.readback.as<float>()[0];
}

std::int64_t CudaNetwork::correct() const { return impl_->has_loss ? impl_->correct : -1; }

void CudaNetwork::enqueue_backward() {
  Impl& m = *impl_;
  Context& ctx = *ctx_;
  const bool timed = m.times_layers();
  // The update may change the scale (mixed precision); gradients read later are unscaled with
  // the one they were computed with.
  TB_CU(cudaMemcpyAsync(m.backward_scale.get(), &m.step_state()->scale, sizeof(float), cudaMemcpyDeviceToDevice,
                        ctx.stream));
  for (std::size_t s = m.layers.size(); s-- > 0;) {
    if (timed) m.timing.backward[s + 1]->record(ctx.stream);
    for (int r : m.plan.recompute_before[s]) m.layers[std::size_t(r)]->recompute(ctx);
    m.layers[s]->backward(ctx);
    for (const Impl::Accumulate& a : m.accumulate[s])
      kernels::accumulate(ctx.dtype, a.into, a.from, a.count, ctx.stream);
    m.poison(m.plan.backward_time(int(s)), ctx.stream);
    if (m.step_hook && m.hook_after[s] >= 0) m.step_hook(m.hook_after[s]);
  }
  if (timed) m.timing.backward[0]->record(ctx.stream);
  m.clock = m.plan.last_time();
  if (m.step_hook) m.step_hook(kBackwardDone);
}

namespace {
ElemType elem_type(DType t) {
  return t == DType::F16 ? ElemType::F16 : t == DType::BF16 ? ElemType::BF16 : ElemType::F32;
}
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
    out.push_back(
        {m.params32.as<float>() + first.offset, ElemType::F32, last.offset + last.elements - first.offset, int(i)});
  }
  return out;
}

void CudaNetwork::params_written() {
  Impl& m = *impl_;
  if (m.mixed)
    kernels::cast_from_f32(ctx_->dtype, m.params32.as<float>(), m.params_compute.get(), m.n_compute, ctx_->stream);
  synchronize();
}

void CudaNetwork::set_step_hook(std::function<void(int node)> hook) { impl_->step_hook = std::move(hook); }

std::uint64_t CudaNetwork::param_checksum() {
  const std::vector<float> params = download(impl_->params32.get(), DType::F32, impl_->n);
  return fnv1a(params.data(), params.size() * sizeof(float));
}

void CudaNetwork::synchronize() { wait_for(ctx_->stream); }

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
    kernels::find_nonfinite(ctx.dtype, m.grads.get(), m.n_compute, m.grads32.as<float>(), m.n - m.n_compute, a.state,
                            ctx.stream);
  if (o.kind == OptimizerConfig::Kind::Adam)
    kernels::adam_step(a, ctx.stream);
  else
    kernels::sgd_step(a, ctx.stream);
  kernels::finish_step(a.state, m.scaled, m.config.loss_scale_growth_interval, ctx.stream);
  if (m.step_hook) m.step_hook(kStepEnqueued);
}

void CudaNetwork::backward() {
  enqueue_backward();
  wait_for(ctx_->stream);
}

void CudaNetwork::update() {
  enqueue_update();
  wait_for(ctx_->stream);
}

void CudaNetwork::start_step() {
  Impl& m = *impl_;
  Context& ctx = *ctx_;
  TB_CHECK(!m.started, "a step was started and not finished");
  take_batch();
  if (m.config.cuda_graph && m.graph) {
    TB_CU(cudaGraphLaunch(m.graph, ctx.stream));
  } else {
    enqueue_forward(true);
    m.forward_end.record(ctx.stream);
    enqueue_backward();
    m.backward_end.record(ctx.stream);
    enqueue_update();
  }
  m.step_end.record(ctx.stream);
  // The loss's copy to the host is part of the step: whoever waits for the step's end (the
  // data-parallel step's communicator polls for it) finds it done, and finish_step's wait
  // returns at once instead of sending a copy to an idle stream and waiting again.
  enqueue_loss_readback();
  m.started = true;
}

void CudaNetwork::abandon_step() { impl_->started = false; }

float CudaNetwork::finish_step(StepTimes& times) {
  Impl& m = *impl_;
  TB_CHECK(m.started, "finish_step without start_step");
  m.started = false;
  const bool eager = !(m.config.cuda_graph && m.graph);
  const float loss = read_loss();
  const double data = m.data_ready.since(m.batch_start), device = m.step_end.since(m.batch_start);
  if (eager)
    times = StepTimes{.forward = m.forward_end.since(m.data_ready),
                      .backward = m.backward_end.since(m.forward_end),
                      .update = m.step_end.since(m.backward_end),
                      .device = device,
                      .data = data};
  else
    times = StepTimes{.forward = -1, .backward = -1, .update = -1, .device = device, .data = data};
  if (m.times_layers()) {
    ++m.timing.steps;
    for (std::size_t s = 0; s < m.groups.size(); ++s) {
      m.timing.forward_s[s] += m.timing.forward[s + 1]->since(*m.timing.forward[s]);
      m.timing.backward_s[s] += m.timing.backward[s]->since(*m.timing.backward[s + 1]);
    }
  }
  if (m.config.cuda_graph && !m.graph) capture_step();
  return loss;
}

float CudaNetwork::train_step(StepTimes& times) {
  start_step();
  return finish_step(times);
}

void CudaNetwork::capture_step() {
  // After one eager step, so that cuDNN's and cuBLAS's set-up on first use happened outside
  // the capture. Every pointer and size is fixed at planning and no call in the step
  // allocates or waits, so the one graph serves every later step. The backward hook would
  // run only while capturing, so data-parallel replicas do not use graphs. The batch's
  // conversion stays outside the graph (it reads one of two upload buffers).
  Impl& m = *impl_;
  Context& ctx = *ctx_;
  TB_CHECK(!m.step_hook, "a CUDA graph replays backward without its hook; replicas run without --cuda_graph");
  cudaGraph_t graph = nullptr;
  TB_CU(cudaStreamBeginCapture(ctx.stream, cudaStreamCaptureModeThreadLocal));
  try {
    enqueue_forward(true);
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

std::vector<float> CudaNetwork::to_canonical(int node, std::vector<float> values) const {
  const Impl& m = *impl_;
  if (ctx_->layout != Layout::NHWC || !m.images(node)) return values;
  return from_channels_last(values, as_nchw(m.shapes[std::size_t(node)]));
}

std::vector<float> CudaNetwork::from_canonical(int node, const std::vector<float>& values) const {
  const Impl& m = *impl_;
  if (ctx_->layout != Layout::NHWC || !m.images(node)) return values;
  return to_channels_last(values, as_nchw(m.shapes[std::size_t(node)]));
}

// A node's value or gradient where it still holds what the last pass left: a node fused into a
// later layer has none, and a block the planner gave to others after its last use is refused.
const void* CudaNetwork::readable(int node, bool gradient) const {
  const Impl& m = *impl_;
  TB_CHECK(node >= 0 && node < int(m.values.size()), "no node {}", node);
  const char* what = gradient ? "gradient" : "output";
  const void* ptr = gradient ? m.value_grads[std::size_t(node)] : m.values[std::size_t(node)];
  TB_CHECK(ptr, "{}/{}: no {} is kept ({}, or fused into the layer after it)", m.model.name,
           m.model.nodes[std::size_t(node)].name, what, gradient ? "the input or the loss" : "the loss");
  m.plan.check_readable(gradient ? m.plan.grad_block[std::size_t(node)] : m.plan.value_block[std::size_t(node)],
                        m.clock, m.config.poison_dead, m.model.name + "/" + m.model.nodes[std::size_t(node)].name,
                        what);
  return ptr;
}

std::vector<float> CudaNetwork::read_output(int node) const {
  const Impl& m = *impl_;
  if (m.has_loss && node == int(m.values.size()) - 1) return download(m.result.get(), DType::F32, 1);
  return to_canonical(node, download(readable(node, false), ctx_->dtype, product(m.shapes.at(std::size_t(node)))));
}

std::vector<float> CudaNetwork::read_grad(int node) const {
  const Impl& m = *impl_;
  TB_CHECK(node > 0, "node {} has no gradient", node);
  auto g = to_canonical(node, download(readable(node, true), ctx_->dtype, product(m.shapes.at(std::size_t(node)))));
  const float unscale = grad_unscale();
  for (float& v : g) v *= unscale;
  return g;
}

void CudaNetwork::set_output_grad(const std::vector<float>& grad) {
  Impl& m = *impl_;
  TB_CHECK(!m.has_loss, "the gradient of a loss is computed, not given");
  const int last = int(m.values.size()) - 1;
  TB_CHECK(i64(grad.size()) == product(m.shapes[std::size_t(last)]), "output gradient has {} values, expected {}",
           grad.size(), product(m.shapes[std::size_t(last)]));
  upload(from_canonical(last, grad), m.value_grads[std::size_t(last)], ctx_->dtype);
}

std::vector<std::vector<float>> CudaNetwork::read_slots(int node, bool gradients) const {
  const Impl& m = *impl_;
  TB_CHECK(node > 0 && node < int(m.slots.size()), "node {} has no parameters", node);
  const std::size_t e = ctx_->elem_bytes();
  std::vector<std::vector<float>> out;
  for (const Impl::Slot& s : m.slots[std::size_t(node)]) {
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
  return impl_->layer_of.at(std::size_t(node))->canonical(index, read_slots(node, false));
}

std::vector<float> CudaNetwork::read_param_grad(int node, int index) const {
  auto g = impl_->layer_of.at(std::size_t(node))->canonical(index, read_slots(node, true));
  const float unscale = grad_unscale();
  for (float& v : g) v *= unscale;
  return g;
}

void CudaNetwork::write_param(int node, int index, const std::vector<float>& value) {
  Impl& m = *impl_;
  const auto specs = node_params(m.model.nodes.at(std::size_t(node)).spec,
                                 m.shapes[std::size_t(m.model.nodes[std::size_t(node)].inputs.at(0))]);
  TB_CHECK(index >= 0 && index < int(specs.size()), "node {} has no parameter {}", node, index);
  TB_CHECK(i64(value.size()) == specs[std::size_t(index)].count(),
           "parameter {} of node {}: {} values given, {} expected", index, node, value.size(),
           specs[std::size_t(index)].count());
  auto slots = read_slots(node, false);
  m.layer_of[std::size_t(node)]->set_canonical(index, value, slots);
  const std::size_t e = ctx_->elem_bytes();
  for (std::size_t k = 0; k < slots.size(); ++k) {
    const Impl::Slot& s = m.slots[std::size_t(node)][k];
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
  m.pool_targets =
      DeviceBuffer(ctx.allocator, std::max<std::size_t>(target_bytes, 4) * std::size_t(batches), MemoryKind::Data);
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

std::size_t CudaNetwork::batch_bytes() const {
  return std::size_t(impl_->input_count() + std::max<i64>(impl_->target_count, 1)) * 4;
}

MemoryBreakdown CudaNetwork::memory() const {
  const Impl& m = *impl_;
  MemoryBreakdown b;
  b.weights = m.params32.bytes() + m.params_compute.bytes();
  b.gradients = m.grads.bytes() + m.grads32.bytes();
  b.optimizer_state = m.first.bytes() + m.second.bytes() + m.state.bytes();
  b.activations = m.arena.bytes() + m.result.bytes() + m.backward_scale.bytes();
  for (const auto& layer : m.layers) b.activations += layer->own_bytes();
  b.workspace = m.workspace.bytes() + m.cublas_workspace.bytes();
  b.data = m.input.bytes() + m.labels.bytes() + m.targets.bytes() + m.pool_inputs.bytes() + m.pool_targets.bytes();
  for (const Impl::Upload& u : m.uploads) b.data += u.input.bytes() + u.targets.bytes();
  return b;
}

std::map<std::string, double> CudaNetwork::memory_counters() const {
  const MemoryBreakdown b = memory();
  const MemoryStats s = ctx_->allocator.stats();
  const std::size_t used = device_memory_used(ctx_->device);
  return {{"mem_peak_bytes", double(s.peak_in_use)},
          {"mem_reserved_bytes", double(s.peak_reserved)},
          {"mem_limit_bytes", double(ctx_->allocator.limit())},
          {"mem_weights_bytes", double(b.weights)},
          {"mem_grads_bytes", double(b.gradients)},
          {"mem_optimizer_bytes", double(b.optimizer_state)},
          {"mem_activations_bytes", double(b.activations)},
          {"mem_workspace_bytes", double(b.workspace)},
          {"mem_data_bytes", double(b.data)},
          // What the device has in use beyond what this allocator holds: the CUDA context, the
          // cuDNN/cuBLAS handles and their kernels, and anything else on the device.
          {"mem_context_bytes", used > s.reserved ? double(used - s.reserved) : 0.0},
          {"loss_scale", double(loss_scale())},
          {"skipped_steps", double(skipped_steps())}};
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
