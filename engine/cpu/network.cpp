// Planning and running a model on the CPU backend.
#include "engine/cpu/network.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <variant>

#include <fmt/format.h>

#include "engine/core/init.hpp"
#include "engine/core/layer_factory.hpp"

namespace tb::cpu {

namespace {
constexpr i64 kAlignFloats = 16;  // 64 bytes
i64 align_up(i64 n) { return (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }
i64 elements(const md& desc) {
  i64 n = 1;
  for (auto d : desc.dims()) n *= d;
  return n;
}
}  // namespace

std::unique_ptr<Layer> make_layer(Context& ctx, const LayerSpec& spec, const Inputs& in, const Dims& out) {
  return make_backend_layer(ctx, spec, in, out, "cpu");
}

namespace {
constexpr std::size_t kArenaAlignment = 64;

struct PlannedLayers {
  std::vector<std::unique_ptr<Layer>> layers;  // by node; null for the input
  std::vector<md> out_desc;                    // by node
  std::vector<PlanStep> steps;                 // one per layer
};

// The layers, each choosing its layouts given its producers' (the input is plain), and what the
// planner needs of each.
PlannedLayers plan_layers(Context& ctx, const ModelSpec& model, const std::vector<Dims>& shapes) {
  const int n = int(model.nodes.size());
  const bool has_loss = is_loss(model.nodes.back().spec);
  PlannedLayers p;
  p.layers.resize(std::size_t(n));
  p.out_desc.resize(std::size_t(n));
  p.out_desc[0] = plain_desc(to_dnnl(shapes[0]));
  for (int i = 1; i < n; ++i) {
    const Node& node = model.nodes[std::size_t(i)];
    Inputs in;
    for (int q : node.inputs) in.push_back(LayerInput{p.out_desc[std::size_t(q)], shapes[std::size_t(q)], q != 0});
    try {
      p.layers[std::size_t(i)] = make_layer(ctx, node.spec, in, shapes[std::size_t(i)]);
    } catch (...) {
      rethrow_for_node(model, i);
    }
    const Layer& layer = *p.layers[std::size_t(i)];
    p.out_desc[std::size_t(i)] = layer.output_desc();
    // In place only where both sides have one layout (the planner checks the sizes).
    const bool same_layout =
        node.inputs[0] != 0 && p.out_desc[std::size_t(node.inputs[0])] == p.out_desc[std::size_t(i)];
    p.steps.push_back(PlanStep{.nodes = {i},
                               .inputs = node.inputs,
                               .bytes = has_loss && i == n - 1 ? 0 : p.out_desc[std::size_t(i)].get_size(),
                               .reads = layer.backward_reads(),
                               .output_over_input = same_layout && layer.output_over_input(),
                               .dinput_over_doutput = same_layout && layer.dinput_over_doutput()});
  }
  return p;
}

// The graph the network runs: the model's, with each max pool before the activation it follows
// (pools_before_activations), unless every node's value is kept for reading, as the model has it.
ModelSpec graph_to_run(const ModelSpec& model, bool keep_values) {
  return keep_values ? model : pools_before_activations(model);
}
}  // namespace

MemoryPlan plan_network_memory(const ModelSpec& model, i64 batch) {
  Context ctx;
  const ModelSpec graph = graph_to_run(model, false);
  return plan_memory(graph, plan_layers(ctx, graph, infer_shapes(graph, batch)).steps,
                     PlanOptions{.alignment = kArenaAlignment});
}

int cpu_lanes(const ModelSpec& model, i64 batch, int threads, int requested) {
  const int lanes = requested > 0 ? requested : threads;
  if (lanes <= 1 || batch % lanes != 0 || !is_loss(model.nodes.back().spec)) return 1;
  for (const Node& node : model.nodes)
    if (std::holds_alternative<BatchNormSpec>(node.spec)) return 1;
  if (requested > 0) return lanes;
  const double param_bytes = double(model_cost(model).parameters) * sizeof(float);
  return double(plan_network_memory(model, batch / lanes).arena_bytes) > param_bytes ? lanes : 1;
}

namespace {
// Sets this thread's OpenMP team size for the scope: 1 while a lane's layers are made (oneDNN
// sizes its primitives' work for the threads it sees then) and while they run.
class ThreadsForScope {
 public:
  explicit ThreadsForScope(int threads) : previous_(omp_get_max_threads()) { omp_set_num_threads(threads); }
  ~ThreadsForScope() { omp_set_num_threads(previous_); }
  ThreadsForScope(const ThreadsForScope&) = delete;
  ThreadsForScope& operator=(const ThreadsForScope&) = delete;

 private:
  int previous_;
};

// The axis along which `lane` (a slice's dims) is a slice of `full`.
int batch_axis(const Dims& full, const Dims& lane) {
  for (std::size_t a = 0; a < full.size(); ++a)
    if (full[a] != lane[a]) return int(a);
  throw Error(fmt::format("a slice of {} values has no batch axis", product(full)));
}

// Copies slice k of `lanes` along `axis` between a plain tensor of dims `full` and a plain
// buffer of the slice: from the whole tensor into the slice where `from_whole`, else back. One
// lane's slice is the whole tensor, along axis 0.
template <class T>
void copy_slice(const Dims& full, int axis, i64 k, i64 lanes, const T* from, T* to, bool from_whole) {
  i64 outer = 1, inner = 1;
  for (int a = 0; a < axis; ++a) outer *= full[std::size_t(a)];
  for (std::size_t a = std::size_t(axis) + 1; a < full.size(); ++a) inner *= full[a];
  const i64 piece = full[std::size_t(axis)] / lanes * inner;
  for (i64 o = 0; o < outer; ++o) {
    const i64 whole = (o * lanes + k) * piece, slice = o * piece;
    std::memcpy(to + (from_whole ? slice : whole), from + (from_whole ? whole : slice), std::size_t(piece) * sizeof(T));
  }
}
}  // namespace

// One slice of the batch: the layers made for it, its arena, input and targets, and (after the
// first lane, which has the network's) its weights, their gradients and its optimizer's state.
// Every lane's weights are the same: each lane updates its own copy with the same gradients,
// so that no core writes weights another core's layers read.
struct CpuNetwork::Lane {
  // A gradient that must be added into its producer's (the producer feeds several layers).
  struct Accumulate {
    dnnl::memory from, into;
  };
  int index = 0;  // the slice: samples [index x batch, (index + 1) x batch)
  i64 batch = 0;
  mutable Context ctx;
  std::vector<std::unique_ptr<Layer>> layers;       // by node; null for the input
  std::vector<Dims> shapes;                         // by node
  std::vector<dnnl::memory> values, grads;          // by node
  std::vector<std::vector<Accumulate>> accumulate;  // by consuming node
  MemoryPlan plan;
  HostBuffer arena, input, own_params, own_grads, scratch, staging;
  float* params = nullptr;
  std::unique_ptr<Optimizer> optimizer;
  std::vector<std::int32_t> labels;
  std::vector<float> targets;
  BatchView batch_view;
  int clock = 0;  // plan time at the end of the last pass: forward S, backward 2S

  // After the pass at `time` of the plan: fills the blocks whose life ended with NaN.
  void poison(int time, bool on) {
    if (!on) return;
    char* base = reinterpret_cast<char*>(arena.data());
    for (int b : plan.ending_at(time)) {
      const Region& r = plan.blocks[std::size_t(b)].region;
      std::memset(base + r.offset, 0xff, r.bytes);  // all-ones floats are NaN
    }
  }
  // The memory of node's value or gradient, if it still holds what the last pass left there.
  const dnnl::memory& readable(const ModelSpec& model, bool poisoned, int node, bool gradient) const {
    const std::vector<dnnl::memory>& mems = gradient ? grads : values;
    const char* what = gradient ? "gradient" : "output";
    TB_CHECK(node >= 0 && node < int(mems.size()) && mems[std::size_t(node)], "node {} has no {}", node, what);
    plan.check_readable((gradient ? plan.grad_block : plan.value_block)[std::size_t(node)], clock, poisoned,
                        model.name + "/" + model.nodes[std::size_t(node)].name, what);
    return mems[std::size_t(node)];
  }
};

CpuNetwork::CpuNetwork(const ModelSpec& model, const NetworkOptions& config)
    : model_(graph_to_run(model, config.keep_values)), config_(config), shapes_(infer_shapes(model_, config.batch)) {
  const int n = int(model_.nodes.size());
  has_loss_ = is_loss(model_.nodes.back().spec);
  if (has_loss_) target_count_ = product(target_shape(model_, config_.batch));
  const int lanes = cpu_lanes(model_, config_.batch, omp_get_max_threads(), config_.lanes);
  slots_.resize(n);

  // Plan each lane: its layers and their layouts (made for one thread where there are several
  // lanes), then its arena.
  std::vector<md> out_desc;
  for (int k = 0; k < lanes; ++k) {
    auto lane = std::make_unique<Lane>();
    lane->index = k;
    lane->batch = config_.batch / lanes;
    lane->shapes = infer_shapes(model_, lane->batch);
    PlannedLayers planned;
    {
      ThreadsForScope threads(lanes > 1 ? 1 : omp_get_max_threads());
      planned = plan_layers(lane->ctx, model_, lane->shapes);
    }
    lane->layers = std::move(planned.layers);
    TB_CHECK(k == 0 || planned.out_desc == out_desc, "{}: the lanes of a batch of {} chose different layouts",
             model_.name, config_.batch);
    out_desc = planned.out_desc;
    lane->plan =
        plan_memory(model_, planned.steps, PlanOptions{.keep_all = config_.keep_values, .alignment = kArenaAlignment});
    lanes_.push_back(std::move(lane));
  }
  Lane& first = *lanes_.front();
  i64 param_floats = 0;
  for (int i = 1; i < n; ++i) {
    const Node& node = model_.nodes[i];
    for (const md& d : first.layers[i]->param_descs()) {
      slots_[i].push_back(ParamSlot{d, param_floats});
      param_floats += align_up(padded_floats(d));
    }
    const auto expected = node_params(node.spec, shapes_[node.inputs[0]]);
    TB_CHECK(expected.size() == slots_[i].size(), "{}: layer has {} parameters, spec {}", node.name, slots_[i].size(),
             expected.size());
    for (const auto& lane : lanes_)
      TB_CHECK(lane->layers[i]->param_descs() == first.layers[i]->param_descs(),
               "{}: the lanes of a batch of {} chose different parameter layouts", node.name, config_.batch);
  }
  params_ = HostBuffer(param_floats);
  grads_flat_ = HostBuffer(param_floats);

  // Allocate each lane's arena of values and gradients, input, scratchpad and (after the first)
  // weight gradients; bind its layers: each input gradient goes to its producer's gradient or,
  // where the planner says the layer is not the one to write it, to an edge region that is added
  // into it after the layer.
  for (std::size_t k = 0; k < lanes_.size(); ++k) {
    Lane& lane = *lanes_[k];
    lane.values.resize(n);
    lane.grads.resize(n);
    lane.accumulate.resize(n);
    lane.arena = HostBuffer(i64(lane.plan.arena_bytes / sizeof(float)));
    lane.input = HostBuffer(i64(out_desc[0].get_size() / sizeof(float)));
    char* arena = reinterpret_cast<char*>(lane.arena.data());
    Context& ctx = lane.ctx;
    lane.values[0] = dnnl::memory(out_desc[0], ctx.engine, lane.input.data());
    for (int i = 1; i < n; ++i) {
      if (!lane.plan.values[i].empty())
        lane.values[i] = dnnl::memory(out_desc[i], ctx.engine, arena + lane.plan.values[i].offset);
      if (!lane.plan.grads[i].empty())
        lane.grads[i] = dnnl::memory(out_desc[i], ctx.engine, arena + lane.plan.grads[i].offset);
    }
    if (has_loss_) lane.values[n - 1] = dnnl::memory(plain_desc({1}), ctx.engine);
    lane.scratch = HostBuffer(i64(ctx.scratch_bytes / sizeof(float)) + 1);
    ctx.scratch = lane.scratch.data();
    lane.staging = HostBuffer(i64(ctx.staging_bytes / sizeof(float)) + 1);
    ctx.staging = lane.staging.data();
    if (k > 0) lane.own_params = HostBuffer(param_floats), lane.own_grads = HostBuffer(param_floats);
    lane.params = k == 0 ? params_.data() : lane.own_params.data();
    float* dparams = k == 0 ? grads_flat_.data() : lane.own_grads.data();
    if (config_.poison_unwritten) {  // all-ones floats are NaN; a model without parameters has none
      if (arena) std::memset(arena, 0xff, lane.plan.arena_bytes);
      if (dparams) std::memset(dparams, 0xff, std::size_t(param_floats) * sizeof(float));
    }
    lane.optimizer = std::make_unique<Optimizer>(config_.optimizer, param_floats);

    for (int i = 1; i < n; ++i) {
      const Node& node = model_.nodes[i];
      const int step = lane.plan.step_of_node(i);
      Bindings b;
      for (std::size_t j = 0; j < node.inputs.size(); ++j) {
        const int p = node.inputs[j];
        b.inputs.push_back(lane.values[p]);
        const InputGrad& g = lane.plan.input_grads[step][j];
        if (p == 0) {
          b.dinputs.emplace_back();
        } else if (g.direct) {
          b.dinputs.push_back(lane.grads[p]);
        } else {
          dnnl::memory edge(out_desc[p], ctx.engine, arena + g.edge.offset);
          b.dinputs.push_back(edge);
          lane.accumulate[i].push_back(Lane::Accumulate{edge, lane.grads[p]});
        }
      }
      b.output = lane.values[i];
      b.doutput = lane.grads[i];
      for (const ParamSlot& s : slots_[i]) {
        b.params.emplace_back(s.desc, ctx.engine, lane.params + s.offset);
        b.dparams.emplace_back(s.desc, ctx.engine, dparams + s.offset);
      }
      b.batch = &lane.batch_view;
      b.first_sample = i64(lane.index) * lane.batch;
      lane.layers[i]->bind(ctx, b);
    }
  }

  // Parameters in canonical layouts, reordered once into the chosen ones.
  initialize_parameters(*this, model_, shapes_, config_.seed);
}

void CpuNetwork::params_written() {
  for (std::size_t k = 1; k < lanes_.size(); ++k)
    std::copy_n(params_.data(), params_.size(), lanes_[k]->own_params.data());
}

CpuNetwork::~CpuNetwork() = default;

std::int64_t CpuNetwork::activation_bytes() const {
  i64 bytes = 0;
  for (const auto& lane : lanes_) bytes += i64(lane->plan.arena_bytes);
  return bytes;
}

std::int64_t CpuNetwork::scratch_bytes() const {
  i64 bytes = 0;
  for (const auto& lane : lanes_) bytes += i64(lane->ctx.scratch_bytes);
  return bytes;
}

const std::vector<std::string>& CpuNetwork::implementations() const { return lanes_.front()->ctx.implementations; }

void CpuNetwork::on_lanes(const std::function<void(Lane&)>& fn) {
  if (lanes_.size() == 1) {
    fn(*lanes_.front());
    return;
  }
  // Each lane on a thread of its own (or in turn, where the caller's OpenMP threads are fewer:
  // a cpu:N row runs on its N threads, whatever TB_CPU_LANES asked for), its layers' own
  // parallel regions on that thread alone; an exception must not leave the parallel region, so
  // the first is rethrown after it.
  std::vector<std::exception_ptr> failed(lanes_.size());
#pragma omp parallel num_threads(std::min(int(lanes_.size()), omp_get_max_threads()))
  {
    if (omp_get_thread_num() == 0) lane_threads_ = omp_get_num_threads();
    ThreadsForScope threads(1);
    for (std::size_t k = std::size_t(omp_get_thread_num()); k < lanes_.size(); k += std::size_t(omp_get_num_threads()))
      try {
        fn(*lanes_[k]);
      } catch (...) {
        failed[k] = std::current_exception();
      }
  }
  for (const std::exception_ptr& e : failed)
    if (e) std::rethrow_exception(e);
}

const CpuNetwork::ParamSlot& CpuNetwork::slot(int node, int index) const {
  TB_CHECK(node > 0 && node < int(slots_.size()) && index >= 0 && index < int(slots_[node].size()),
           "node {} has no parameter {}", node, index);
  return slots_[node][index];
}

void CpuNetwork::slice_batch(const BatchView& batch, Lane& lane) {
  const i64 lanes = i64(lanes_.size());
  auto axis = [&](const Dims& full, const Dims& slice) { return lanes == 1 ? 0 : batch_axis(full, slice); };
  copy_slice(shapes_[0], axis(shapes_[0], lane.shapes[0]), lane.index, lanes, batch.input,
             static_cast<float*>(lane.values[0].get_data_handle()), true);
  if (!has_loss_) return;
  const Dims full = target_shape(model_, config_.batch);
  const int a = axis(full, target_shape(model_, lane.batch));
  const std::size_t count = std::size_t(target_count_ / lanes);
  if (model_.task == Task::Classification) {
    lane.labels.resize(count);
    copy_slice(full, a, lane.index, lanes, batch.labels, lane.labels.data(), true);
    lane.batch_view.labels = lane.labels.data();
  } else {
    lane.targets.resize(count);
    copy_slice(full, a, lane.index, lanes, batch.targets, lane.targets.data(), true);
    lane.batch_view.targets = lane.targets.data();
  }
}

void CpuNetwork::set_batch(const BatchView& batch) {
  // Each lane's thread writes its own slice, which its layers then read from its core's caches.
  on_lanes([&](Lane& lane) { slice_batch(batch, lane); });
}

std::size_t CpuNetwork::batch_bytes() const {
  return std::size_t(product(shapes_[0])) * sizeof(float) + std::size_t(std::max<i64>(target_count_, 1)) * 4;
}

void CpuNetwork::make_resident(Dataset& data, std::int64_t batches) {
  TB_CHECK(batches > 0, "a resident dataset needs at least one batch");
  const std::size_t input_floats = std::size_t(product(shapes_[0]));
  pool_.clear();
  for (i64 k = 0; k < batches; ++k) {
    pool_.push_back(data.next());
    TB_CHECK(pool_.back().input.size() == input_floats, "{}: a batch of {} values, the network takes {}", data.name(),
             pool_.back().input.size(), input_floats);
  }
}

void CpuNetwork::use_resident(std::int64_t batch) {
  TB_CHECK(!pool_.empty(), "no resident dataset: make_resident first");
  set_batch(pool_[std::size_t(batch % i64(pool_.size()))].view());
}

float CpuNetwork::forward() {
  on_lanes([&](Lane& lane) {
    for (size_t i = 1; i < lane.layers.size(); ++i) {
      lane.layers[i]->forward(lane.ctx);
      lane.poison(lane.plan.forward_time(lane.plan.step_of_node(int(i))), config_.poison_dead);
    }
    lane.ctx.stream.wait();
    lane.clock = lane.plan.steps;
  });
  return has_loss_ ? mean_loss() : 0.0f;
}

float CpuNetwork::evaluate() {
  on_lanes([&](Lane& lane) {
    for (size_t i = 1; i < lane.layers.size(); ++i) lane.layers[i]->forward_eval(lane.ctx);
    lane.ctx.stream.wait();
    lane.clock = lane.plan.steps;
  });
  return has_loss_ ? mean_loss() : 0.0f;
}

float CpuNetwork::mean_loss() const {
  float loss = 0;  // the mean over the batch: the lanes' means, of equal slices, averaged
  for (const auto& lane : lanes_) loss += lane->layers.back()->loss();
  return loss / float(lanes_.size());
}

std::int64_t CpuNetwork::correct() const {
  if (!has_loss_) return -1;
  i64 correct = 0;
  for (const auto& lane : lanes_) correct += lane->layers.back()->correct();
  return correct;
}

void CpuNetwork::backward() {
  const bool one_lane = lanes_.size() == 1;
  on_lanes([&](Lane& lane) {
    for (size_t i = lane.layers.size() - 1; i >= 1; --i) {
      lane.layers[i]->backward(lane.ctx);
      for (const Lane::Accumulate& a : lane.accumulate[i]) {
        // Same descriptor on both sides, so the sum is elementwise whatever the layout.
        float* into = static_cast<float*>(a.into.get_data_handle());
        const float* from = static_cast<const float*>(a.from.get_data_handle());
        kernels_.add(into, from, padded_floats(a.into.get_desc()));
      }
      lane.poison(lane.plan.backward_time(lane.plan.step_of_node(int(i))), config_.poison_dead);
      // One lane: each node's gradients are final here. Several: after the sum below.
      if (one_lane && step_hook_ && !slots_[i].empty()) step_hook_(int(i));
    }
    lane.ctx.stream.wait();
    lane.clock = lane.plan.last_time();
  });
  if (!one_lane) {
    sum_lane_gradients();
    for (int i = int(slots_.size()) - 1; i >= 1; --i)
      if (step_hook_ && !slots_[std::size_t(i)].empty()) step_hook_(i);
  }
  if (step_hook_) step_hook_(kBackwardDone);
}

void CpuNetwork::sum_lane_gradients() {
  // Each lane's loss is the mean over its slice, so the whole batch's gradient is the lanes' mean.
  const float scale = 1.0f / float(lanes_.size());
  float* into = grads_flat_.data();
  const i64 count = grads_flat_.size();
#pragma omp parallel for schedule(static)
  for (i64 i = 0; i < count; ++i) {
    float sum = into[i];
    for (std::size_t k = 1; k < lanes_.size(); ++k) sum += lanes_[k]->own_grads.data()[i];
    into[i] = sum * scale;
  }
}

std::vector<FlatSegment> CpuNetwork::segments(float* base) const {
  std::vector<FlatSegment> out;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].empty()) continue;
    const ParamSlot& first = slots_[i].front();
    const ParamSlot& last = slots_[i].back();
    const i64 end = last.offset + padded_floats(last.desc);
    out.push_back(FlatSegment{base + first.offset, ElemType::F32, end - first.offset, int(i)});
  }
  return out;
}

void CpuNetwork::update() {
  on_lanes([&](Lane& lane) { lane.optimizer->step(lane.params, grads_flat_.data()); });
  if (step_hook_) step_hook_(kStepEnqueued);
}

bool CpuNetwork::scale_gradients_in_update(float scale) {
  for (const auto& lane : lanes_) lane->optimizer->set_gradient_scale(scale);
  return true;
}

std::vector<float> CpuNetwork::gather(int node, bool gradient) const {
  TB_CHECK(node > 0 || !gradient, "node {} has no gradient", node);
  TB_CHECK(node >= 0 && node < int(shapes_.size()), "node {} is not in the model", node);
  std::vector<float> out(std::size_t(product(shapes_[std::size_t(node)])));
  const Lane& first = *lanes_.front();
  if (lanes_.size() == 1) {
    to_plain(first.ctx, first.readable(model_, config_.poison_dead, node, gradient), out.data());
    return out;
  }
  const int axis = batch_axis(shapes_[std::size_t(node)], first.shapes[std::size_t(node)]);
  std::vector<float> slice(out.size() / lanes_.size());
  for (std::size_t k = 0; k < lanes_.size(); ++k) {
    to_plain(lanes_[k]->ctx, lanes_[k]->readable(model_, config_.poison_dead, node, gradient), slice.data());
    copy_slice(shapes_[std::size_t(node)], axis, i64(k), i64(lanes_.size()), slice.data(), out.data(), false);
  }
  // A lane's gradients are of its own slice's mean loss: the batch's mean weighs each 1 / lanes.
  if (gradient)
    for (float& g : out) g /= float(lanes_.size());
  return out;
}

std::vector<float> CpuNetwork::read_output(int node) const {
  if (has_loss_ && node == int(shapes_.size()) - 1) return {mean_loss()};
  return gather(node, false);
}

std::vector<float> CpuNetwork::read_grad(int node) const { return gather(node, true); }

void CpuNetwork::set_output_grad(const std::vector<float>& grad) {
  TB_CHECK(!has_loss_, "the gradient of a loss is computed, not given");
  const int last = int(shapes_.size()) - 1;
  TB_CHECK(i64(grad.size()) == product(shapes_[last]), "output gradient has {} values, expected {}", grad.size(),
           product(shapes_[last]));
  Lane& lane = *lanes_.front();  // a model without a loss has one lane (cpu_lanes)
  from_plain(lane.ctx, grad.data(), lane.grads[last]);
}

std::vector<float> CpuNetwork::read_param(int node, int index) const {
  const ParamSlot& s = slot(node, index);
  Context& ctx = lanes_.front()->ctx;
  std::vector<float> out(std::size_t(elements(s.desc)));
  to_plain(ctx, dnnl::memory(s.desc, ctx.engine, const_cast<float*>(params_.data()) + s.offset), out.data());
  return out;
}

std::vector<float> CpuNetwork::read_param_grad(int node, int index) const {
  const ParamSlot& s = slot(node, index);
  Context& ctx = lanes_.front()->ctx;
  std::vector<float> out(std::size_t(elements(s.desc)));
  to_plain(ctx, dnnl::memory(s.desc, ctx.engine, const_cast<float*>(grads_flat_.data()) + s.offset), out.data());
  return out;
}

void CpuNetwork::write_param(int node, int index, const std::vector<float>& value) {
  const ParamSlot& s = slot(node, index);
  TB_CHECK(i64(value.size()) == elements(s.desc), "parameter {} of node {}: {} values given", index, node,
           value.size());
  for (const auto& lane : lanes_)
    from_plain(lane->ctx, value.data(), dnnl::memory(s.desc, lane->ctx.engine, lane->params + s.offset));
}

}  // namespace tb::cpu
