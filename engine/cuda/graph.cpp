// Builders over cuDNN's backend API (graph.hpp).
#include "engine/cuda/graph.hpp"

#include <algorithm>

namespace tb::cuda::graph {

Desc tensor(std::int64_t uid, cudnnDataType_t type, const Dims4& dims, Layout layout) {
  const auto [n, c, h, w] = dims;
  // Channels-last: C varies fastest, then W, then H (a filter (K, C, R, S) as K R S C).
  const Dims4 strides = layout == Layout::NHWC ? Dims4{h * w * c, 1, w * c, c} : Dims4{c * h * w, h * w, w, 1};
  const std::int64_t alignment = 16;
  Desc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &type, 1);
  t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims.data(), 4);
  t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides.data(), 4);
  t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &uid, 1);
  t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &alignment, 1);
  t.finalize();
  return t;
}

Desc convolution(std::int64_t stride, std::int64_t padding) {
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const std::int64_t spatial = 2;
  const std::int64_t pad[2] = {padding, padding}, strides[2] = {stride, stride}, dilation[2] = {1, 1};
  Desc c(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  c.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &compute, 1);
  c.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, &mode, 1);
  c.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, &spatial, 1);
  c.set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, pad, 2);
  c.set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, pad, 2);
  c.set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, strides, 2);
  c.set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, dilation, 2);
  c.finalize();
  return c;
}

const char* op_name(ConvOp op) {
  switch (op) {
    case ConvOp::Forward:
      return "forward";
    case ConvOp::BackwardData:
      return "backward data";
    case ConvOp::BackwardFilter:
      return "backward filter";
  }
  return "?";
}

namespace {

// The descriptor type and attribute names of one convolution operation: x, w, y are the
// operation's own (dx, dw, dy for the gradients).
struct ConvAttributes {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
};

ConvAttributes attributes(ConvOp kind) {
  switch (kind) {
    case ConvOp::Forward:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA};
    case ConvOp::BackwardData:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA};
    case ConvOp::BackwardFilter:
      break;
  }
  return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
}

}  // namespace

OpGraph conv_graph(cudnnHandle_t handle, ConvOp kind, const Desc& x, const Desc& w, const Desc& y, const Desc& conv) {
  const float alpha = 1.0f, beta = 0.0f;  // every gradient is overwritten, as in every layer
  const ConvAttributes a = attributes(kind);
  OpGraph g;
  g.op = Desc(a.type);
  g.op.set(a.x, x);
  g.op.set(a.w, w);
  g.op.set(a.y, y);
  g.op.set(a.conv, conv);
  g.op.set(a.alpha, CUDNN_TYPE_FLOAT, &alpha, 1);
  g.op.set(a.beta, CUDNN_TYPE_FLOAT, &beta, 1);
  g.op.finalize();
  g.graph = Desc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  g.graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, g.op);
  g.graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, &handle, 1);
  g.graph.finalize();
  return g;
}

namespace {

// The configurations one heuristics mode ranks; none where the mode has no answer.
std::vector<Desc> heuristic_configs(const Desc& graph, cudnnBackendHeurMode_t mode) {
  Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &mode, 1);
  if (cudnnBackendFinalize(heur.get()) != CUDNN_STATUS_SUCCESS) return {};
  std::int64_t count = 0;
  if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                               nullptr) != CUDNN_STATUS_SUCCESS ||
      count <= 0)
    return {};
  std::vector<Desc> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (std::int64_t i = 0; i < count; ++i) {
    configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(configs.back().get());
  }
  std::int64_t returned = 0;
  TB_CU(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                 &returned, raw.data()));
  configs.resize(std::size_t(std::max<std::int64_t>(returned, 0)));
  return configs;
}

bool notes_allowed(const Desc& config, bool allow_tensor_cores) {
  if (allow_tensor_cores) return true;
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t e = engine.get();
  std::int64_t count = 0;
  if (cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count,
                               &e) != CUDNN_STATUS_SUCCESS)
    return false;
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &count, notes) != CUDNN_STATUS_SUCCESS)
    return false;
  for (std::int64_t i = 0; i < count; ++i)
    if (notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE || notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS)
      return false;
  return true;
}

}  // namespace

std::vector<Desc> engine_configs(const Desc& graph, bool allow_tensor_cores) {
  std::vector<Desc> out;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK})
    for (Desc& c : heuristic_configs(graph, mode))
      if (notes_allowed(c, allow_tensor_cores)) out.push_back(std::move(c));
  return out;
}

Plan make_plan(cudnnHandle_t handle, const Desc& config) {
  Plan p;
  p.plan = Desc(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  p.plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, &handle, 1);
  p.plan.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, config);
  if (cudnnBackendFinalize(p.plan.get()) != CUDNN_STATUS_SUCCESS) return Plan{};
  std::int64_t count = 0;
  TB_CU(cudnnBackendGetAttribute(p.plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &count,
                                 &p.workspace));
  return p;
}

Desc variant_pack(const std::vector<std::int64_t>& uids, const std::vector<void*>& pointers, void* workspace) {
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids.data(), std::int64_t(uids.size()));
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, pointers.data(), std::int64_t(pointers.size()));
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &workspace, 1);
  pack.finalize();
  return pack;
}

}  // namespace tb::cuda::graph
