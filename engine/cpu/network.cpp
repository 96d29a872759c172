// Planning and running a model on the CPU backend.
#include "engine/cpu/network.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>

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

CpuNetwork::CpuNetwork(const ModelSpec& model, const NetworkOptions& config)
    : model_(graph_to_run(model, config.keep_values)), config_(config), shapes_(infer_shapes(model_, config.batch)) {
  const int n = int(model_.nodes.size());
  has_loss_ = is_loss(model_.nodes.back().spec);
  if (has_loss_) target_count_ = product(target_shape(model_, config_.batch));
  values_.resize(n);
  grads_.resize(n);
  slots_.resize(n);
  accumulate_.resize(n);

  // Plan: the layers and their layouts, then the arena.
  PlannedLayers planned = plan_layers(ctx_, model_, shapes_);
  layers_ = std::move(planned.layers);
  const std::vector<md>& out_desc = planned.out_desc;
  plan_ =
      plan_memory(model_, planned.steps, PlanOptions{.keep_all = config_.keep_values, .alignment = kArenaAlignment});
  i64 param_floats = 0;
  for (int i = 1; i < n; ++i) {
    const Node& node = model_.nodes[i];
    for (const md& d : layers_[i]->param_descs()) {
      slots_[i].push_back(ParamSlot{d, param_floats});
      param_floats += align_up(padded_floats(d));
    }
    const auto expected = node_params(node.spec, shapes_[node.inputs[0]]);
    TB_CHECK(expected.size() == slots_[i].size(), "{}: layer has {} parameters, spec {}", node.name, slots_[i].size(),
             expected.size());
  }

  // Allocate: the arena of values and gradients, the input, flat parameters, the scratchpad.
  arena_ = HostBuffer(i64(plan_.arena_bytes / sizeof(float)));
  input_ = HostBuffer(i64(out_desc[0].get_size() / sizeof(float)));
  char* arena = reinterpret_cast<char*>(arena_.data());
  values_[0] = dnnl::memory(out_desc[0], ctx_.engine, input_.data());
  for (int i = 1; i < n; ++i) {
    if (!plan_.values[i].empty()) values_[i] = dnnl::memory(out_desc[i], ctx_.engine, arena + plan_.values[i].offset);
    if (!plan_.grads[i].empty()) grads_[i] = dnnl::memory(out_desc[i], ctx_.engine, arena + plan_.grads[i].offset);
  }
  if (has_loss_) values_[n - 1] = dnnl::memory(plain_desc({1}), ctx_.engine);
  params_ = HostBuffer(param_floats);
  grads_flat_ = HostBuffer(param_floats);
  scratch_ = HostBuffer(i64(ctx_.scratch_bytes / sizeof(float)) + 1);
  ctx_.scratch = scratch_.data();
  staging_ = HostBuffer(i64(ctx_.staging_bytes / sizeof(float)) + 1);
  ctx_.staging = staging_.data();
  optimizer_ = std::make_unique<Optimizer>(config_.optimizer, param_floats);

  // Bind: each input gradient goes to its producer's gradient or, where the planner says the
  // layer is not the one to write it, to an edge region that is added into it after the layer.
  for (int i = 1; i < n; ++i) {
    const Node& node = model_.nodes[i];
    const int step = plan_.step_of_node(i);
    Bindings b;
    for (std::size_t j = 0; j < node.inputs.size(); ++j) {
      const int p = node.inputs[j];
      b.inputs.push_back(values_[p]);
      const InputGrad& g = plan_.input_grads[step][j];
      if (p == 0) {
        b.dinputs.emplace_back();
      } else if (g.direct) {
        b.dinputs.push_back(grads_[p]);
      } else {
        dnnl::memory edge(out_desc[p], ctx_.engine, arena + g.edge.offset);
        b.dinputs.push_back(edge);
        accumulate_[i].push_back(Accumulate{edge, grads_[p]});
      }
    }
    b.output = values_[i];
    b.doutput = grads_[i];
    for (const ParamSlot& s : slots_[i]) {
      b.params.emplace_back(s.desc, ctx_.engine, params_.data() + s.offset);
      b.dparams.emplace_back(s.desc, ctx_.engine, grads_flat_.data() + s.offset);
    }
    b.batch = &batch_;
    layers_[i]->bind(ctx_, b);
  }

  // Parameters in canonical layouts, reordered once into the chosen ones.
  initialize_parameters(*this, model_, shapes_, config_.seed);
}

void CpuNetwork::poison(int time) {
  if (!config_.poison_dead) return;
  char* arena = reinterpret_cast<char*>(arena_.data());
  for (int b : plan_.ending_at(time)) {
    const Region& r = plan_.blocks[std::size_t(b)].region;
    std::memset(arena + r.offset, 0xff, r.bytes);  // all-ones floats are NaN
  }
}

const dnnl::memory& CpuNetwork::readable(const std::vector<dnnl::memory>& mems, const std::vector<int>& blocks,
                                         int node, const char* what) const {
  TB_CHECK(node >= 0 && node < int(mems.size()) && mems[std::size_t(node)], "node {} has no {}", node, what);
  plan_.check_readable(blocks[std::size_t(node)], clock_, config_.poison_dead,
                       model_.name + "/" + model_.nodes[std::size_t(node)].name, what);
  return mems[std::size_t(node)];
}

const CpuNetwork::ParamSlot& CpuNetwork::slot(int node, int index) const {
  TB_CHECK(node > 0 && node < int(slots_.size()) && index >= 0 && index < int(slots_[node].size()),
           "node {} has no parameter {}", node, index);
  return slots_[node][index];
}

void CpuNetwork::set_batch(const BatchView& batch) {
  std::memcpy(values_[0].get_data_handle(), batch.input, values_[0].get_desc().get_size());
  if (!has_loss_) return;
  if (model_.task == Task::Classification) {
    labels_.assign(batch.labels, batch.labels + target_count_);
    batch_.labels = labels_.data();
  } else {
    targets_.assign(batch.targets, batch.targets + target_count_);
    batch_.targets = targets_.data();
  }
}

std::size_t CpuNetwork::batch_bytes() const {
  return values_[0].get_desc().get_size() + std::size_t(std::max<i64>(target_count_, 1)) * 4;
}

void CpuNetwork::make_resident(Dataset& data, std::int64_t batches) {
  TB_CHECK(batches > 0, "a resident dataset needs at least one batch");
  const std::size_t input_floats = values_[0].get_desc().get_size() / sizeof(float);
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
  for (size_t i = 1; i < layers_.size(); ++i) {
    layers_[i]->forward(ctx_);
    poison(plan_.forward_time(plan_.step_of_node(int(i))));
  }
  ctx_.stream.wait();
  clock_ = plan_.steps;
  return has_loss_ ? layers_.back()->loss() : 0.0f;
}

float CpuNetwork::evaluate() {
  for (size_t i = 1; i < layers_.size(); ++i) layers_[i]->forward_eval(ctx_);
  ctx_.stream.wait();
  clock_ = plan_.steps;
  return has_loss_ ? layers_.back()->loss() : 0.0f;
}

std::int64_t CpuNetwork::correct() const { return has_loss_ ? layers_.back()->correct() : -1; }

void CpuNetwork::backward() {
  for (size_t i = layers_.size() - 1; i >= 1; --i) {
    layers_[i]->backward(ctx_);
    for (const Accumulate& a : accumulate_[i]) {
      // Same descriptor on both sides, so the sum is elementwise whatever the layout.
      float* into = static_cast<float*>(a.into.get_data_handle());
      const float* from = static_cast<const float*>(a.from.get_data_handle());
      kernels_.add(into, from, padded_floats(a.into.get_desc()));
    }
    poison(plan_.backward_time(plan_.step_of_node(int(i))));
    if (step_hook_ && !slots_[i].empty()) step_hook_(int(i));
  }
  ctx_.stream.wait();
  clock_ = plan_.last_time();
  if (step_hook_) step_hook_(kBackwardDone);
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
  optimizer_->step(params_.data(), grads_flat_.data());
  if (step_hook_) step_hook_(kStepEnqueued);
}

bool CpuNetwork::scale_gradients_in_update(float scale) {
  optimizer_->set_gradient_scale(scale);
  return true;
}

std::vector<float> CpuNetwork::read_output(int node) const {
  if (has_loss_ && node == int(layers_.size()) - 1) return {layers_.back()->loss()};
  std::vector<float> out(std::size_t(product(shapes_.at(node))));
  to_plain(ctx_, readable(values_, plan_.value_block, node, "output"), out.data());
  return out;
}

std::vector<float> CpuNetwork::read_grad(int node) const {
  TB_CHECK(node > 0, "node {} has no gradient", node);
  std::vector<float> out(std::size_t(product(shapes_.at(node))));
  to_plain(ctx_, readable(grads_, plan_.grad_block, node, "gradient"), out.data());
  return out;
}

void CpuNetwork::set_output_grad(const std::vector<float>& grad) {
  TB_CHECK(!has_loss_, "the gradient of a loss is computed, not given");
  const int last = int(layers_.size()) - 1;
  TB_CHECK(i64(grad.size()) == product(shapes_[last]), "output gradient has {} values, expected {}", grad.size(),
           product(shapes_[last]));
  from_plain(ctx_, grad.data(), grads_[last]);
}

std::vector<float> CpuNetwork::read_param(int node, int index) const {
  const ParamSlot& s = slot(node, index);
  std::vector<float> out(std::size_t(elements(s.desc)));
  to_plain(ctx_, dnnl::memory(s.desc, ctx_.engine, const_cast<float*>(params_.data()) + s.offset), out.data());
  return out;
}

std::vector<float> CpuNetwork::read_param_grad(int node, int index) const {
  const ParamSlot& s = slot(node, index);
  std::vector<float> out(std::size_t(elements(s.desc)));
  to_plain(ctx_, dnnl::memory(s.desc, ctx_.engine, const_cast<float*>(grads_flat_.data()) + s.offset), out.data());
  return out;
}

void CpuNetwork::write_param(int node, int index, const std::vector<float>& value) {
  const ParamSlot& s = slot(node, index);
  TB_CHECK(i64(value.size()) == elements(s.desc), "parameter {} of node {}: {} values given", index, node,
           value.size());
  from_plain(ctx_, value.data(), dnnl::memory(s.desc, ctx_.engine, params_.data() + s.offset));
}

}  // namespace tb::cpu
