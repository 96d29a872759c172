// cuDNN's backend (graph) API, as trainbench's convolutions use it: an owner for its descriptors
// and the few builders they need (tensors, a convolution, one-operation graphs, execution
// plans, variant packs). The legacy convolution calls run older kernels: on an H100 the graph
// API's plans ran ResNet-152's 1x1 convolutions in bf16 two to four times faster.
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include <cudnn.h>

#include "engine/cuda/context.hpp"

namespace tb::cuda::graph {

// Owner of one backend descriptor; not copyable, movable.
class Desc {
 public:
  Desc() = default;
  explicit Desc(cudnnBackendDescriptorType_t type) { TB_CU(cudnnBackendCreateDescriptor(type, &desc_)); }
  ~Desc() {
    if (desc_) (void)cudnnBackendDestroyDescriptor(desc_);
  }
  Desc(Desc&& other) noexcept : desc_(std::exchange(other.desc_, nullptr)) {}
  Desc& operator=(Desc&& other) noexcept {
    std::swap(desc_, other.desc_);
    return *this;
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  cudnnBackendDescriptor_t get() const { return desc_; }

  template <class T>
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const T* values, std::int64_t count) {
    TB_CU(cudnnBackendSetAttribute(desc_, name, type, count, values));
  }
  void set(cudnnBackendAttributeName_t name, const Desc& value) {
    const cudnnBackendDescriptor_t d = value.get();
    set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, &d, 1);
  }
  void finalize() { TB_CU(cudnnBackendFinalize(desc_)); }

 private:
  cudnnBackendDescriptor_t desc_ = nullptr;
};

using Dims4 = std::array<std::int64_t, 4>;

// A 4-D tensor (dims in N, C, H, W order; a filter's as K, C, R, S) with the strides of `layout`.
Desc tensor(std::int64_t uid, cudnnDataType_t type, const Dims4& dims, Layout layout);
// Cross-correlation with square stride and padding, accumulating in fp32.
Desc convolution(std::int64_t stride, std::int64_t padding);

enum class ConvOp { Forward, BackwardData, BackwardFilter };
const char* op_name(ConvOp op);

// One convolution operation as a graph of one node, on `handle`.
struct OpGraph {
  Desc op, graph;
};
OpGraph conv_graph(cudnnHandle_t handle, ConvOp kind, const Desc& x, const Desc& w, const Desc& y, const Desc& conv);

// The engine configurations cuDNN's heuristics rank for a graph (mode A, then the fallback
// list), in their order, keeping those whose numerical notes the precision allows: strict fp32
// refuses tensor-core engines and down-conversion.
std::vector<Desc> engine_configs(const Desc& graph, bool allow_tensor_cores);

// An execution plan for one engine configuration; empty where cuDNN cannot finalize it.
struct Plan {
  Desc plan;
  std::int64_t workspace = 0;
  explicit operator bool() const { return plan.get() != nullptr; }
};
Plan make_plan(cudnnHandle_t handle, const Desc& config);

// A variant pack binding tensor ids to device pointers and the workspace, built once.
Desc variant_pack(const std::vector<std::int64_t>& uids, const std::vector<void*>& pointers, void* workspace);

inline void execute(cudnnHandle_t handle, const Plan& plan, const Desc& pack) {
  TB_CU(cudnnBackendExecute(handle, plan.plan.get(), pack.get()));
}

}  // namespace tb::cuda::graph
