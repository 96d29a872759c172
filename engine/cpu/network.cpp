// Planning and running a model on the CPU backend.
#include "engine/cpu/network.hpp"

#include <omp.h>

#include <algorithm>

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

CpuNetwork::CpuNetwork(const ModelSpec& model, const NetworkConfig& config)
    : model_(model), config_(config), shapes_(infer_shapes(model, config.batch)) {
  const int n = int(model_.nodes.size());
  has_loss_ = is_loss(model_.nodes.back().spec);
  if (has_loss_) target_count_ = product(target_shape(model_, config_.batch));
  layers_.resize(n);
  values_.resize(n);
  grads_.resize(n);
  slots_.resize(n);
  accumulate_.resize(n);

  // The last consumer of a tensor (the first to run in backward) writes its gradient; the
  // others write into a scratch buffer that is then added.
  std::vector<int> last_consumer(n, -1);
  for (int i = 0; i < n; ++i)
    for (int p : model_.nodes[i].inputs) last_consumer[p] = std::max(last_consumer[p], i);
  for (int i = 0; i + 1 < n; ++i)
    TB_CHECK(last_consumer[i] >= 0, "{}/{}: output is never used", model_.name, model_.nodes[i].name);

  // Plan: the input is plain; every layer chooses its layouts given its producers'.
  std::vector<md> out_desc(n);
  out_desc[0] = plain_desc(to_dnnl(shapes_[0]));
  i64 param_floats = 0;
  for (int i = 1; i < n; ++i) {
    const Node& node = model_.nodes[i];
    Inputs in;
    for (int p : node.inputs) in.push_back(LayerInput{out_desc[p], shapes_[p], p != 0});
    try {
      layers_[i] = make_layer(ctx_, node.spec, in, shapes_[i]);
    } catch (const Error& e) {
      throw Error(fmt::format("{}/{} ({}): {}", model_.name, node.name, kind_name(node.spec), e.what()));
    }
    out_desc[i] = layers_[i]->output_desc();
    for (const md& d : layers_[i]->param_descs()) {
      slots_[i].push_back(ParamSlot{d, param_floats});
      param_floats += align_up(padded_floats(d));
    }
    const auto expected = node_params(node.spec, shapes_[node.inputs[0]]);
    TB_CHECK(expected.size() == slots_[i].size(), "{}: layer has {} parameters, spec {}", node.name,
             slots_[i].size(), expected.size());
  }

  // Where each input gradient goes: the last consumer writes the producer's gradient itself
  // (through one of its inputs only, should it read the same tensor twice); every other input
  // gradient gets a region of its own in the edge scratch, in its producer's layout, and is
  // added after the layer's backward. Regions are per input, not shared, because one layer may
  // set aside two gradients (an add whose inputs both feed later layers) in different layouts.
  std::vector<std::vector<char>> direct(n);
  i64 edge_floats = 0;
  for (int i = 1; i < n; ++i) {
    const auto& inputs = model_.nodes[i].inputs;
    i64 node_edge_floats = 0;
    for (std::size_t j = 0; j < inputs.size(); ++j) {
      const int p = inputs[j];
      const bool first_use = std::find(inputs.begin(), inputs.begin() + j, p) == inputs.begin() + j;
      direct[i].push_back(p != 0 && last_consumer[p] == i && first_use);
      if (p != 0 && !direct[i][j]) node_edge_floats += align_up(padded_floats(out_desc[p]));
    }
    edge_floats = std::max(edge_floats, node_edge_floats);
  }

  // Allocate: activations and their gradients, flat parameters, the shared scratchpad.
  values_[0] = dnnl::memory(out_desc[0], ctx_.engine);
  for (int i = 1; i < n; ++i) {
    if (has_loss_ && i == n - 1) continue;
    values_[i] = dnnl::memory(out_desc[i], ctx_.engine);
    grads_[i] = dnnl::memory(out_desc[i], ctx_.engine);
    activation_bytes_ += 2 * i64(out_desc[i].get_size());
  }
  if (has_loss_) values_[n - 1] = dnnl::memory(plain_desc({1}), ctx_.engine);
  params_ = HostBuffer(param_floats);
  grads_flat_ = HostBuffer(param_floats);
  scratch_ = HostBuffer(i64(ctx_.scratch_bytes / sizeof(float)) + 1);
  ctx_.scratch = scratch_.data();
  edge_scratch_ = HostBuffer(edge_floats);
  optimizer_ = std::make_unique<Optimizer>(config_.optimizer, param_floats);

  // Bind.
  for (int i = 1; i < n; ++i) {
    const Node& node = model_.nodes[i];
    Bindings b;
    i64 edge_offset = 0;
    for (std::size_t j = 0; j < node.inputs.size(); ++j) {
      const int p = node.inputs[j];
      b.inputs.push_back(values_[p]);
      if (p == 0) {
        b.dinputs.emplace_back();
      } else if (direct[i][j]) {
        b.dinputs.push_back(grads_[p]);
      } else {
        dnnl::memory edge(out_desc[p], ctx_.engine, edge_scratch_.data() + edge_offset);
        edge_offset += align_up(padded_floats(out_desc[p]));
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

  // Initialise parameters in canonical layouts and reorder them once into the chosen ones.
  std::uint64_t seed = config_.seed * 1000003;
  for (int i = 1; i < n; ++i) {
    const auto specs = node_params(model_.nodes[i].spec, shapes_[model_.nodes[i].inputs[0]]);
    for (size_t k = 0; k < specs.size(); ++k) write_param(i, int(k), init_param(specs[k], ++seed));
  }
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

float CpuNetwork::forward() {
  for (size_t i = 1; i < layers_.size(); ++i) layers_[i]->forward(ctx_);
  ctx_.stream.wait();
  return has_loss_ ? layers_.back()->loss() : 0.0f;
}

float CpuNetwork::evaluate() {
  for (size_t i = 1; i < layers_.size(); ++i) layers_[i]->forward_eval(ctx_);
  ctx_.stream.wait();
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
      const i64 count = padded_floats(a.into.get_desc());
#pragma omp parallel for simd schedule(static)
      for (i64 k = 0; k < count; ++k) into[k] += from[k];
    }
    if (backward_hook_ && !slots_[i].empty()) backward_hook_(int(i));
  }
  ctx_.stream.wait();
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

void CpuNetwork::update() { optimizer_->step(params_.data(), grads_flat_.data()); }

std::vector<float> CpuNetwork::read_output(int node) const {
  if (has_loss_ && node == int(layers_.size()) - 1) return {layers_.back()->loss()};
  std::vector<float> out(std::size_t(product(shapes_.at(node))));
  to_plain(ctx_, values_.at(node), out.data());
  return out;
}

std::vector<float> CpuNetwork::read_grad(int node) const {
  TB_CHECK(node > 0 && grads_.at(node), "node {} has no gradient", node);
  std::vector<float> out(std::size_t(product(shapes_.at(node))));
  to_plain(ctx_, grads_[node], out.data());
  return out;
}

void CpuNetwork::set_output_grad(const std::vector<float>& grad) {
  TB_CHECK(!has_loss_, "the gradient of a loss is computed, not given");
  const int last = int(layers_.size()) - 1;
  TB_CHECK(i64(grad.size()) == product(shapes_[last]), "output gradient has {} values, expected {}",
           grad.size(), product(shapes_[last]));
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
  TB_CHECK(i64(value.size()) == elements(s.desc),
           "parameter {} of node {}: {} values given", index, node, value.size());
  from_plain(ctx_, value.data(), dnnl::memory(s.desc, ctx_.engine, params_.data() + s.offset));
}

}  // namespace tb::cpu
