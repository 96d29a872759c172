// The CUDA backend's planning decisions that need no GPU and no CUDA header, so that every build
// (a machine without the toolkit included) can compute a GPU network's memory plan: precisions
// and storage types, the image layout per precision and model, which nodes run fused as one
// layer, and what each layer's backward reads. CudaNetwork plans with these same functions, and
// checks that its layers agree with them.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/network.hpp"
#include "engine/core/planner.hpp"
#include "engine/core/spec.hpp"

namespace tb::cuda {

// Precisions and image layouts are every backend's settings (engine/core/network.hpp).
using ::tb::kDefaultWorkspaceCap;
using ::tb::Layout;
using ::tb::layout_name;
using ::tb::parse_precision;
using ::tb::Precision;
using ::tb::precision_name;
// Storage type of activations, gradients and the compute copy of weights.
enum class DType { F32, F16, BF16 };

inline bool is_mixed(Precision p) { return p == Precision::FP16 || p == Precision::BF16; }
DType storage_type(Precision p);
std::size_t dtype_bytes(DType t);

// Channels-last where tensor cores compute (tf32, fp16, bf16) and the model's convolutions suit
// them (every one with a multiple of 8 output channels: ResNet-152); NCHW elsewhere (strict
// fp32, whose FMA kernels are NCHW's, and LeNet-5's 6-channel convolutions).
Layout choose_layout(const ModelSpec& model, Precision precision);

// One layer of the network: a node, or batch norm fused with the residual add and ReLU after it.
struct LayerGroup {
  std::vector<int> nodes;   // computed, in order; the last one's output is the layer's
  std::vector<int> inputs;  // read, in order (fused: the batch norm's input, then the shortcut)
  bool fused = false;       // batch norm + (add) + ReLU (make_batchnorm_add_relu)
};
// The layers, in the order they run. Batch norm whose output only a ReLU reads, or only an add
// whose output only a ReLU reads, fuses with them (the add's other input is the shortcut);
// everything else is a layer of its own. In NCHW, batch norm + ReLU without an add sets its
// masked gradient aside in the cuDNN workspace, so it fuses only where that fits the cap.
std::vector<LayerGroup> group_layers(const ModelSpec& model, Layout layout, const std::vector<Dims>& shapes,
                                     DType dtype, std::size_t workspace_cap = kDefaultWorkspaceCap);

// What the layer of `group` reads in backward and whether it may run in place, by kind: the
// contract every CUDA layer keeps (CudaNetwork checks its layers against it).
struct LayerTraits {
  BackwardReads reads = BackwardReads::all();
  bool output_over_input = false, dinput_over_doutput = false;
  // Batch norm + ReLU: can recompute its output in backward; plan_steps does so where every
  // consumer is a convolution or a linear layer.
  bool recompute_output = false;
};
LayerTraits layer_traits(const ModelSpec& model, const LayerGroup& group);

// The steps for the planner: groups with their output bytes (the loss keeps none in the arena).
std::vector<PlanStep> plan_steps(const ModelSpec& model, const std::vector<LayerGroup>& groups,
                                 const std::vector<Dims>& shapes, DType dtype);

// How a CUDA network lays out its memory: parameter slots rounded to 64 elements (128 bytes in
// 16-bit storage, 256 in fp32), arena blocks to 256 bytes, and cuBLAS's workspace (NVIDIA's
// advice for Hopper) beside the cuDNN workspace cap.
inline constexpr std::size_t kParamAlignElements = 64;
inline constexpr std::size_t kArenaAlignment = 256;
inline constexpr std::size_t kCublasWorkspaceBytes = std::size_t(32) << 20;

// The arena of the layers `groups`: their steps (plan_steps) planned with the network's alignment.
MemoryPlan plan_arena(const ModelSpec& model, const std::vector<LayerGroup>& groups, const std::vector<Dims>& shapes,
                      DType dtype, bool keep_all);
// The arena of a network of `model` at `batch` in `precision` with the default workspace cap,
// planned exactly as CudaNetwork plans it, without a GPU.
MemoryPlan plan_network_memory(const ModelSpec& model, i64 batch, Precision precision, bool keep_all = false,
                               std::optional<Layout> layout = std::nullopt);

// Device bytes a network needs besides its arena, from the model alone: fp32 master weights, the
// 16-bit compute copy and gradients under mixed precision, optimizer state (SGD momentum or
// Adam's two moments), the batch (two uploads in flight, in fp32, and the input in the storage
// type). The cuDNN workspace (at most the cap) and layers' saved statistics come on top.
struct FixedBytes {
  std::size_t weights = 0, gradients = 0, optimizer_state = 0, data = 0;
};
FixedBytes fixed_bytes(const ModelSpec& model, i64 batch, Precision precision, bool adam);

}  // namespace tb::cuda
