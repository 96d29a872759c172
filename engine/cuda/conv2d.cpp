// Conv2d on cuDNN's convolution descriptors, plain NCHW, with the algorithm of each direction
// (forward, backward data, backward filter) chosen once per shape and cached for the process.
// N = batch, C = input channels, K = output channels, H, W = input height, width.
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/cuda/layer.hpp"

namespace tb::cuda {
namespace {

class ConvDesc : public ConvolutionDesc {
 public:
  void set(const Conv2dSpec& s, cudnnDataType_t compute_type, cudnnMathType_t math) {
    TB_CU(cudnnSetConvolution2dDescriptor(*this, int(s.padding), int(s.padding), int(s.stride), int(s.stride), 1, 1,
                                          CUDNN_CROSS_CORRELATION, compute_type));
    TB_CU(cudnnSetConvolutionMathType(*this, math));
  }
};

enum class Direction { Forward, BackwardData, BackwardFilter };

const char* direction_name(Direction d) {
  switch (d) {
    case Direction::Forward: return "forward";
    case Direction::BackwardData: return "backward data";
    case Direction::BackwardFilter: return "backward filter";
  }
  return "?";
}

// An algorithm and the math type cuDNN measured it with. Find and the _v7 heuristics try the
// descriptor's math type and CUDNN_DEFAULT_MATH (algorithms without a tensor-core kernel come
// back as DEFAULT), so the math type is part of the choice: the descriptor that runs the
// algorithm is set to it, and the workspace is asked for with it.
struct Choice {
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

// Everything about a convolution that determines its choices. The workspace cap is in it
// because results that need more are refused.
struct ShapeKey {
  int device;
  cudnnDataType_t dtype;
  cudnnMathType_t math;
  std::size_t workspace_cap;
  i64 n, c, h, w, k, kernel, stride, pad;
  auto operator<=>(const ShapeKey&) const = default;
};

// Only measured choices are kept: a heuristic fallback under a memory cap would otherwise stick
// to the shape for the rest of the process.
struct AlgoCache {
  std::mutex mutex;
  std::map<std::pair<ShapeKey, Direction>, Choice> choices;
};
AlgoCache& algo_cache() {
  static AlgoCache cache;
  return cache;
}

// How far a math type lets cuDNN depart from plain fp32 FMA: FMA only; TF32 tensor cores on
// Ampere and later (DEFAULT); tensor cores in the data type; tensor cores with down-conversion.
int latitude(cudnnMathType_t math) {
  switch (math) {
    case CUDNN_FMA_MATH: return 0;
    case CUDNN_DEFAULT_MATH: return 1;
    case CUDNN_TENSOR_OP_MATH: return 2;
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return 3;
  }
  return 4;
}

// The first usable result in cuDNN's order (Find: fastest measured first; _v7: most promising
// first): it ran, fits the workspace cap, and takes no more latitude than the context allows.
// Under strict fp32 (FMA) that means FMA results only, never DEFAULT (which may be TF32); under
// tensor-op math, DEFAULT results are accepted too, since requiring an exact match would leave
// shapes without a tensor-core kernel (3 input channels in fp16) with no algorithm at all.
template <class Perf>
std::optional<Choice> first_usable(const std::vector<Perf>& results, int returned, const Context& ctx) {
  for (int i = 0; i < returned; ++i) {
    const Perf& r = results[std::size_t(i)];
    if (r.status == CUDNN_STATUS_SUCCESS && r.memory <= ctx.workspace_cap && latitude(r.mathType) <= latitude(ctx.math))
      return Choice{int(r.algo), r.mathType};
  }
  return std::nullopt;
}

// What one search needs. The descriptor `conv` carries the context's math type.
struct SearchDescs {
  const TensorDesc& x;  // (N, C, H, W)
  const FilterDesc& w;  // (K, C, kernel, kernel)
  const ConvDesc& conv;
  const TensorDesc& y;  // (N, K, OH, OW)
  std::size_t x_bytes, w_bytes, y_bytes;
};

// Scratch memory for a measured search (Find*Ex), from the allocator like all device memory; it
// goes back to the allocator's cache when the search is over.
struct SearchBuffers {
  DeviceBuffer x, w, y, workspace;
};

std::optional<SearchBuffers> search_buffers(Context& ctx, const SearchDescs& d) {
  try {
    SearchBuffers b;
    b.x = DeviceBuffer(ctx.allocator, d.x_bytes, MemoryKind::Workspace);
    b.w = DeviceBuffer(ctx.allocator, d.w_bytes, MemoryKind::Workspace);
    b.y = DeviceBuffer(ctx.allocator, d.y_bytes, MemoryKind::Workspace);
    b.workspace = DeviceBuffer(ctx.allocator, ctx.workspace_cap, MemoryKind::Workspace);
    return b;
  } catch (const OutOfMemory&) {
    return std::nullopt;  // a memory cap: cuDNN's heuristic choice needs no memory
  }
}

// Measured with Find*Ex where `buffers` is given, otherwise cuDNN's heuristic.
std::optional<Choice> search(Context& ctx, Direction direction, const SearchDescs& d, SearchBuffers* buffers) {
  int count = 0, returned = 0;
  switch (direction) {
    case Direction::Forward: {
      TB_CU(cudnnGetConvolutionForwardAlgorithmMaxCount(ctx.cudnn, &count));
      std::vector<cudnnConvolutionFwdAlgoPerf_t> results(static_cast<std::size_t>(count));
      if (buffers)
        TB_CU(cudnnFindConvolutionForwardAlgorithmEx(ctx.cudnn, d.x, buffers->x.get(), d.w, buffers->w.get(), d.conv,
                                                     d.y, buffers->y.get(), count, &returned, results.data(),
                                                     buffers->workspace.get(), buffers->workspace.bytes()));
      else
        TB_CU(cudnnGetConvolutionForwardAlgorithm_v7(ctx.cudnn, d.x, d.w, d.conv, d.y, count, &returned,
                                                     results.data()));
      return first_usable(results, returned, ctx);
    }
    case Direction::BackwardData: {
      TB_CU(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(ctx.cudnn, &count));
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> results(static_cast<std::size_t>(count));
      if (buffers)
        TB_CU(cudnnFindConvolutionBackwardDataAlgorithmEx(ctx.cudnn, d.w, buffers->w.get(), d.y, buffers->y.get(),
                                                          d.conv, d.x, buffers->x.get(), count, &returned,
                                                          results.data(), buffers->workspace.get(),
                                                          buffers->workspace.bytes()));
      else
        TB_CU(cudnnGetConvolutionBackwardDataAlgorithm_v7(ctx.cudnn, d.w, d.y, d.conv, d.x, count, &returned,
                                                          results.data()));
      return first_usable(results, returned, ctx);
    }
    case Direction::BackwardFilter: {
      TB_CU(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(ctx.cudnn, &count));
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> results(static_cast<std::size_t>(count));
      if (buffers)
        TB_CU(cudnnFindConvolutionBackwardFilterAlgorithmEx(ctx.cudnn, d.x, buffers->x.get(), d.y, buffers->y.get(),
                                                            d.conv, d.w, buffers->w.get(), count, &returned,
                                                            results.data(), buffers->workspace.get(),
                                                            buffers->workspace.bytes()));
      else
        TB_CU(cudnnGetConvolutionBackwardFilterAlgorithm_v7(ctx.cudnn, d.x, d.y, d.conv, d.w, count, &returned,
                                                            results.data()));
      return first_usable(results, returned, ctx);
    }
  }
  return std::nullopt;
}

// The algorithm of each direction for one shape: from the process-wide cache, or searched,
// measured where scratch memory can be had.
std::map<Direction, Choice> choose(Context& ctx, const ShapeKey& shape, const std::vector<Direction>& directions,
                                   const SearchDescs& descs, const std::string& what) {
  AlgoCache& cache = algo_cache();
  // Held through the search: one search per shape, and no two searches timing each other.
  std::lock_guard<std::mutex> lock(cache.mutex);
  std::map<Direction, Choice> chosen;
  std::optional<SearchBuffers> buffers;
  bool allocated = false;
  for (Direction d : directions) {
    const std::pair key{shape, d};
    if (auto it = cache.choices.find(key); it != cache.choices.end()) {
      chosen[d] = it->second;
      continue;
    }
    if (!allocated) {
      buffers = search_buffers(ctx, descs);
      allocated = true;
    }
    const std::optional<Choice> c = search(ctx, d, descs, buffers ? &*buffers : nullptr);
    TB_CHECK(c.has_value(), "{}: cuDNN has no {} algorithm within the workspace cap of {} bytes at this precision; "
             "raise the cap", what, direction_name(d), ctx.workspace_cap);
    chosen[d] = *c;
    if (buffers) cache.choices[key] = *c;
  }
  return chosen;
}

// One direction of the convolution as it runs: a descriptor with the chosen math type, the
// algorithm, and the workspace it needs.
template <class Algo>
struct Pass {
  ConvDesc conv;
  Algo algo{};
  std::size_t workspace = 0;
};

class Conv2d final : public Layer {
 public:
  Conv2d(Context& ctx, const Conv2dSpec& s, const Inputs& in, const Dims& out_shape)
      : spec_(s), needs_dinput_(in.at(0).needs_grad) {
    const Dims& shape = in[0].shape;
    TB_CHECK(shape.size() == 4, "conv2d: the input must be (N, C, H, W), got {}", to_string(shape));
    const Nchw x = as_nchw(shape), y = as_nchw(out_shape);
    TB_CHECK(x.c == s.in_channels, "conv2d: the input {} has {} channels, the layer expects {}", to_string(shape),
             x.c, s.in_channels);
    x_desc_.set4d(ctx.cudnn_dtype, x.n, x.c, x.h, x.w);
    w_desc_.set4d(ctx.cudnn_dtype, s.out_channels, s.in_channels, s.kernel, s.kernel);
    y_desc_.set4d(ctx.cudnn_dtype, y.n, y.c, y.h, y.w);
    if (s.bias) bias_desc_.set4d(ctx.cudnn_dtype, 1, s.out_channels, 1, 1);

    ConvDesc search_conv;
    search_conv.set(s, ctx.compute_type, ctx.math);
    int n = 0, k = 0, oh = 0, ow = 0;
    TB_CU(cudnnGetConvolution2dForwardOutputDim(search_conv, x_desc_, w_desc_, &n, &k, &oh, &ow));
    TB_CHECK(n == y.n && k == y.c && oh == y.h && ow == y.w,
             "conv2d: cuDNN makes ({}, {}, {}, {}) of the input {}, the model expects {}", n, k, oh, ow,
             to_string(shape), to_string(out_shape));

    const std::size_t elem = ctx.elem_bytes();
    const SearchDescs descs{x_desc_,
                            w_desc_,
                            search_conv,
                            y_desc_,
                            std::size_t(product(shape)) * elem,
                            std::size_t(s.out_channels * s.in_channels * s.kernel * s.kernel) * elem,
                            std::size_t(product(out_shape)) * elem};
    const ShapeKey key{ctx.device, ctx.cudnn_dtype, ctx.math, ctx.workspace_cap, x.n, x.c, x.h, x.w,
                       s.out_channels, s.kernel, s.stride, s.padding};
    std::vector<Direction> directions{Direction::Forward, Direction::BackwardFilter};
    if (needs_dinput_) directions.push_back(Direction::BackwardData);
    const std::string what = fmt::format("conv2d of {} (kernel {}, stride {}, padding {})", to_string(shape), s.kernel,
                                         s.stride, s.padding);
    std::map<Direction, Choice> chosen = choose(ctx, key, directions, descs, what);

    fwd_.conv.set(s, ctx.compute_type, chosen[Direction::Forward].math);
    fwd_.algo = cudnnConvolutionFwdAlgo_t(chosen[Direction::Forward].algo);
    TB_CU(cudnnGetConvolutionForwardWorkspaceSize(ctx.cudnn, x_desc_, w_desc_, fwd_.conv, y_desc_, fwd_.algo,
                                                  &fwd_.workspace));
    ctx.need_workspace(fwd_.workspace);

    bwd_filter_.conv.set(s, ctx.compute_type, chosen[Direction::BackwardFilter].math);
    bwd_filter_.algo = cudnnConvolutionBwdFilterAlgo_t(chosen[Direction::BackwardFilter].algo);
    TB_CU(cudnnGetConvolutionBackwardFilterWorkspaceSize(ctx.cudnn, x_desc_, y_desc_, bwd_filter_.conv, w_desc_,
                                                         bwd_filter_.algo, &bwd_filter_.workspace));
    ctx.need_workspace(bwd_filter_.workspace);

    if (needs_dinput_) {
      bwd_data_.conv.set(s, ctx.compute_type, chosen[Direction::BackwardData].math);
      bwd_data_.algo = cudnnConvolutionBwdDataAlgo_t(chosen[Direction::BackwardData].algo);
      TB_CU(cudnnGetConvolutionBackwardDataWorkspaceSize(ctx.cudnn, w_desc_, y_desc_, bwd_data_.conv, x_desc_,
                                                         bwd_data_.algo, &bwd_data_.workspace));
      ctx.need_workspace(bwd_data_.workspace);
    }
  }

  // Canonical layouts: weight (K, C, kernel, kernel) is cuDNN's KCRS filter, bias (K).
  std::vector<ParamSlot> param_slots() const override {
    std::vector<ParamSlot> slots{{spec_.out_channels * spec_.in_channels * spec_.kernel * spec_.kernel, false}};
    if (spec_.bias) slots.push_back({spec_.out_channels, false});
    return slots;
  }

  void bind(Context&, const Bindings& b) override {
    x_ = b.inputs.at(0);
    dx_ = needs_dinput_ ? b.dinputs.at(0) : nullptr;
    TB_CHECK(!needs_dinput_ || dx_, "conv2d: the input needs a gradient but none is bound");
    y_ = b.output;
    dy_ = b.doutput;
    weight_ = b.params.at(0);
    dweight_ = b.dparams.at(0);
    if (spec_.bias) {
      bias_ = b.params.at(1);
      dbias_ = b.dparams.at(1);
    }
  }

  void forward(Context& ctx) override {
    TB_CU(cudnnConvolutionForward(ctx.cudnn, &kOne, x_desc_, x_, w_desc_, weight_, fwd_.conv, fwd_.algo, ctx.workspace,
                                  fwd_.workspace, &kZero, y_desc_, y_));
    if (spec_.bias) TB_CU(cudnnAddTensor(ctx.cudnn, &kOne, bias_desc_, bias_, &kOne, y_desc_, y_));
  }

  void backward(Context& ctx) override {
    TB_CU(cudnnConvolutionBackwardFilter(ctx.cudnn, &kOne, x_desc_, x_, y_desc_, dy_, bwd_filter_.conv,
                                         bwd_filter_.algo, ctx.workspace, bwd_filter_.workspace, &kZero, w_desc_,
                                         dweight_));
    if (spec_.bias) TB_CU(cudnnConvolutionBackwardBias(ctx.cudnn, &kOne, y_desc_, dy_, &kZero, bias_desc_, dbias_));
    if (needs_dinput_)
      TB_CU(cudnnConvolutionBackwardData(ctx.cudnn, &kOne, w_desc_, weight_, y_desc_, dy_, bwd_data_.conv,
                                         bwd_data_.algo, ctx.workspace, bwd_data_.workspace, &kZero, x_desc_, dx_));
  }

 private:
  Conv2dSpec spec_;
  bool needs_dinput_;
  TensorDesc x_desc_, y_desc_, bias_desc_;
  FilterDesc w_desc_;
  Pass<cudnnConvolutionFwdAlgo_t> fwd_;
  Pass<cudnnConvolutionBwdDataAlgo_t> bwd_data_;
  Pass<cudnnConvolutionBwdFilterAlgo_t> bwd_filter_;

  const void* x_ = nullptr;       // (N, C, H, W)
  void* dx_ = nullptr;            // (N, C, H, W), null where the input needs no gradient
  void* y_ = nullptr;             // (N, K, OH, OW)
  const void* dy_ = nullptr;      // (N, K, OH, OW)
  const void* weight_ = nullptr;  // (K, C, kernel, kernel)
  void* dweight_ = nullptr;       // (K, C, kernel, kernel)
  const void* bias_ = nullptr;    // (K)
  void* dbias_ = nullptr;         // (K)
};

}  // namespace

std::unique_ptr<Layer> make_conv2d(Context& ctx, const Conv2dSpec& s, const Inputs& in, const Dims& out) {
  return std::make_unique<Conv2d>(ctx, s, in, out);
}

}  // namespace tb::cuda
