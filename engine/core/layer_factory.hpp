// The one dispatch from a layer spec to a backend's factory for it. Each backend declares, in
// its own namespace, one factory per layer kind (make_linear(ctx, spec, inputs, out_shape), ...,
// engine/cpu/layer.hpp and engine/cuda/layer.hpp); they are found by argument-dependent lookup
// on the backend's Context, so a new layer kind is added here once for every backend.
#pragma once

#include <variant>

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "engine/core/spec.hpp"

namespace tb {

template <class Context, class Inputs>
auto make_backend_layer(Context& ctx, const LayerSpec& spec, const Inputs& in, const Dims& out, const char* backend) {
  if (auto* s = std::get_if<LinearSpec>(&spec)) return make_linear(ctx, *s, in, out);
  if (auto* s = std::get_if<Conv2dSpec>(&spec)) return make_conv2d(ctx, *s, in, out);
  if (auto* s = std::get_if<MaxPool2dSpec>(&spec)) return make_maxpool2d(ctx, *s, in, out);
  if (std::holds_alternative<GlobalAvgPoolSpec>(spec)) return make_global_avgpool(ctx, in, out);
  if (auto* s = std::get_if<BatchNormSpec>(&spec)) return make_batchnorm(ctx, *s, in, out);
  if (std::holds_alternative<ReLUSpec>(spec)) return make_relu(ctx, in, out);
  if (std::holds_alternative<SigmoidSpec>(spec)) return make_sigmoid(ctx, in, out);
  if (auto* s = std::get_if<LSTMSpec>(&spec)) return make_lstm(ctx, *s, in, out);
  if (std::holds_alternative<AddSpec>(spec)) return make_add(ctx, in, out);
  if (auto* s = std::get_if<SoftmaxCrossEntropySpec>(&spec)) return make_softmax_cross_entropy(ctx, *s, in);
  if (std::holds_alternative<MSESpec>(spec)) return make_mse(ctx, in);
  throw Error(fmt::format("{} backend: no layer for {}", backend, kind_name(spec)));
}

}  // namespace tb
