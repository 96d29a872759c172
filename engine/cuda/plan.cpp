// The CUDA backend's GPU-free planning (plan.hpp).
#include "engine/cuda/plan.hpp"

#include <variant>

#include <fmt/format.h>

#include "engine/core/error.hpp"

namespace tb::cuda {

DType storage_type(Precision p) {
  return p == Precision::FP16 ? DType::F16 : p == Precision::BF16 ? DType::BF16 : DType::F32;
}

std::size_t dtype_bytes(DType t) { return t == DType::F32 ? 4 : 2; }

Layout choose_layout(const ModelSpec& model, Precision precision) {
  if (precision == Precision::FP32) return Layout::NCHW;
  bool convolutions = false;
  for (const Node& node : model.nodes)
    if (const auto* c = std::get_if<Conv2dSpec>(&node.spec)) {
      convolutions = true;
      if (c->out_channels % 8 != 0) return Layout::NCHW;
    }
  return convolutions ? Layout::NHWC : Layout::NCHW;
}

namespace {

std::vector<std::vector<int>> consumers_of(const ModelSpec& model) {
  auto out = std::vector<std::vector<int>>(model.nodes.size());
  for (std::size_t i = 0; i < model.nodes.size(); ++i)
    for (int p : model.nodes[i].inputs) out[std::size_t(p)].push_back(int(i));
  return out;
}

template <class S>
bool is(const ModelSpec& model, int node) {
  return std::holds_alternative<S>(model.nodes[std::size_t(node)].spec);
}

}  // namespace

std::vector<LayerGroup> group_layers(const ModelSpec& model, Layout layout, const std::vector<Dims>& shapes,
                                     DType dtype, std::size_t workspace_cap) {
  const int n = int(model.nodes.size());
  const auto consumers = consumers_of(model);
  const auto only = [&](int node) {
    return consumers[std::size_t(node)].size() == 1 ? consumers[std::size_t(node)][0] : -1;
  };
  auto fused_into = std::vector<int>(std::size_t(n), -1);   // absorbed node -> the ReLU whose layer computes it
  auto fused_at = std::vector<LayerGroup>(std::size_t(n));  // by the ReLU node
  {
    for (int bn = 1; bn < n; ++bn) {
      if (!is<BatchNormSpec>(model, bn) || fused_into[std::size_t(bn)] >= 0) continue;
      const int next = only(bn);
      if (next < 0) continue;
      const Node& x = model.nodes[std::size_t(bn)];
      if (is<ReLUSpec>(model, next)) {
        const std::size_t masked = std::size_t(product(shapes[std::size_t(bn)])) * dtype_bytes(dtype);
        if (layout == Layout::NCHW && masked > workspace_cap) continue;
        fused_at[std::size_t(next)] = LayerGroup{{bn, next}, {x.inputs[0]}, true};
      } else if (is<AddSpec>(model, next)) {
        const int relu = only(next);
        const auto& add_inputs = model.nodes[std::size_t(next)].inputs;
        if (relu < 0 || !is<ReLUSpec>(model, relu) || add_inputs[0] == add_inputs[1]) continue;
        // The add's first input that is this batch norm's output fuses; the other is the shortcut.
        if (add_inputs[0] != bn &&
            !(add_inputs[1] == bn && !(is<BatchNormSpec>(model, add_inputs[0]) && only(add_inputs[0]) == next)))
          continue;
        const int shortcut = add_inputs[0] == bn ? add_inputs[1] : add_inputs[0];
        if (fused_into[std::size_t(next)] >= 0 || fused_at[std::size_t(relu)].fused) continue;
        fused_at[std::size_t(relu)] = LayerGroup{{bn, next, relu}, {x.inputs[0], shortcut}, true};
        fused_into[std::size_t(next)] = relu;
      } else {
        continue;
      }
      fused_into[std::size_t(bn)] = next;
    }
  }
  std::vector<LayerGroup> groups;
  for (int i = 1; i < n; ++i) {
    if (fused_at[std::size_t(i)].fused)
      groups.push_back(fused_at[std::size_t(i)]);
    else if (fused_into[std::size_t(i)] < 0)
      groups.push_back(LayerGroup{{i}, model.nodes[std::size_t(i)].inputs, false});
  }
  return groups;
}

LayerTraits layer_traits(const ModelSpec& model, const LayerGroup& group) {
  const std::size_t inputs = group.inputs.size();
  // Batch norm + ReLU (no add): its output is made again in backward from the batch norm's input
  // and statistics, which backward keeps anyway, instead of being kept through the step.
  if (group.fused)
    return LayerTraits{.reads = BackwardReads{std::vector<bool>{true, false}, true}, .recompute_output = inputs == 1};
  const LayerSpec& spec = model.nodes[std::size_t(group.nodes.back())].spec;
  if (std::holds_alternative<Conv2dSpec>(spec) || std::holds_alternative<LinearSpec>(spec) ||
      std::holds_alternative<BatchNormSpec>(spec) || std::holds_alternative<MSESpec>(spec))
    return LayerTraits{BackwardReads::only_inputs()};
  if (std::holds_alternative<ReLUSpec>(spec) || std::holds_alternative<SigmoidSpec>(spec))
    return LayerTraits{BackwardReads::only_output(inputs), true, true};
  if (std::holds_alternative<AddSpec>(spec)) return LayerTraits{BackwardReads::nothing(inputs), false, true};
  if (std::holds_alternative<SoftmaxCrossEntropySpec>(spec)) return LayerTraits{BackwardReads::nothing(inputs)};
  return LayerTraits{};  // pooling (cuDNN's backward takes x and y), LSTM: everything
}

std::vector<PlanStep> plan_steps(const ModelSpec& model, const std::vector<LayerGroup>& groups,
                                 const std::vector<Dims>& shapes, DType dtype) {
  const auto consumers = consumers_of(model);
  std::vector<PlanStep> steps;
  for (const LayerGroup& g : groups) {
    const int node = g.nodes.back();
    const bool loss = is_loss(model.nodes[std::size_t(node)].spec);
    LayerTraits t = layer_traits(model, g);
    // Recomputed only for consumers that take it as a matrix operand (convolutions, linear
    // layers): a recomputed value may differ from the forward's in the last bit, and max
    // pooling's backward finds its maximum by comparing the input with its output.
    for (int c : consumers[std::size_t(node)])
      if (!is<Conv2dSpec>(model, c) && !is<LinearSpec>(model, c)) t.recompute_output = false;
    steps.push_back(PlanStep{.nodes = g.nodes,
                             .inputs = g.inputs,
                             .bytes = loss ? 0 : std::size_t(product(shapes[std::size_t(node)])) * dtype_bytes(dtype),
                             .reads = t.reads,
                             .output_over_input = t.output_over_input,
                             .dinput_over_doutput = t.dinput_over_doutput,
                             .recompute_output = t.recompute_output});
  }
  return steps;
}

MemoryPlan plan_arena(const ModelSpec& model, const std::vector<LayerGroup>& groups, const std::vector<Dims>& shapes,
                      DType dtype, bool keep_all) {
  return plan_memory(model, plan_steps(model, groups, shapes, dtype),
                     PlanOptions{.keep_all = keep_all, .alignment = kArenaAlignment});
}

MemoryPlan plan_network_memory(const ModelSpec& model, i64 batch, Precision precision, bool keep_all,
                               std::optional<Layout> layout) {
  const auto shapes = infer_shapes(model, batch);
  const auto groups =
      group_layers(model, layout.value_or(choose_layout(model, precision)), shapes, storage_type(precision));
  return plan_arena(model, groups, shapes, storage_type(precision), keep_all);
}

FixedBytes fixed_bytes(const ModelSpec& model, i64 batch, Precision precision, bool adam) {
  const auto shapes = infer_shapes(model, batch);
  const std::size_t e = dtype_bytes(storage_type(precision));
  const bool mixed = is_mixed(precision);
  std::size_t compute = 0, fp32 = 0;  // elements
  for (std::size_t i = 1; i < model.nodes.size(); ++i) {
    const Node& node = model.nodes[i];
    const bool batch_norm = std::holds_alternative<BatchNormSpec>(node.spec);
    for (const ParamSpec& p : node_params(node.spec, shapes[std::size_t(node.inputs[0])])) {
      const std::size_t n =
          (std::size_t(p.count()) + kParamAlignElements - 1) / kParamAlignElements * kParamAlignElements;
      (batch_norm && mixed ? fp32 : compute) += n;
    }
  }
  const std::size_t all = compute + fp32;
  FixedBytes b;
  b.weights = all * 4 + (mixed ? compute * e : 0);
  b.gradients = compute * e + fp32 * 4;
  b.optimizer_state = all * 4 * (adam ? 2 : 1);
  const std::size_t input = std::size_t(product(shapes[0]));
  b.data = 2 * input * 4 + input * e;
  return b;
}

}  // namespace tb::cuda
