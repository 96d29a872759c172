// Conv2d on cuDNN's graph API (graph.hpp), in the network's layout (NCHW, or NHWC with NHWC
// filters where tensor cores compute). For each direction (forward, backward data, backward
// filter) the plans cuDNN's heuristics rank first are built and timed, several runs each, and
// the one with the lowest median runs from then on; the choice is cached per shape for the
// process. A bias is added and reduced by trainbench's own kernels.
// N = batch, C = input channels, K = output channels, H, W = input height, width.
#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "engine/cuda/graph.hpp"
#include "engine/cuda/layer.hpp"

namespace tb::cuda {
namespace {

using graph::ConvOp;

// Tensor ids in every convolution graph and variant pack.
constexpr std::int64_t kX = 1, kW = 2, kY = 3;
// Candidates timed per direction, and runs timed per candidate (after one warm-up run): a
// median of several runs, so that one noisy measurement cannot pick a plan that is several
// times slower in steady state (as one legacy Find call did for LeNet-5's fp16 filter gradient).
constexpr std::size_t kCandidates = 8;
constexpr int kTimedRuns = 5;

// Everything that determines the choice; the workspace cap is in it because plans that need
// more are refused.
struct ShapeKey {
  int device;
  cudnnDataType_t dtype;
  bool tensor_cores;
  Layout layout;
  std::size_t workspace_cap;
  i64 n, c, h, w, k, kernel, stride, pad;
  auto operator<=>(const ShapeKey&) const = default;
};

// The chosen configuration's index among engine_configs()'s (deterministic for one graph on
// one device), and the median milliseconds measured for it. Only measured choices are kept: a
// heuristic pick under a memory cap would otherwise stick for the rest of the process.
using ChoiceKey = std::pair<ShapeKey, ConvOp>;
struct AlgoCache {
  std::mutex mutex;
  std::map<ChoiceKey, std::size_t> choices;
};
AlgoCache& algo_cache() {
  static AlgoCache cache;
  return cache;
}

// What a search for a layer's plans needs to know of it: its tensors' bytes, and its name for errors.
struct Search {
  std::size_t x_bytes, w_bytes, y_bytes;
  std::string what;
};

// Scratch tensors for timing candidates, from the allocator like all device memory; they go back
// to its cache when the search is over. Filled with a non-zero pattern: kernels can run faster
// on zeros than on real data.
struct SearchBuffers {
  DeviceBuffer x, w, y, workspace;
};

std::optional<SearchBuffers> search_buffers(Context& ctx, std::size_t x_bytes, std::size_t w_bytes,
                                            std::size_t y_bytes) {
  try {
    SearchBuffers b;
    b.x = DeviceBuffer(ctx.allocator, x_bytes, MemoryKind::Workspace);
    b.w = DeviceBuffer(ctx.allocator, w_bytes, MemoryKind::Workspace);
    b.y = DeviceBuffer(ctx.allocator, y_bytes, MemoryKind::Workspace);
    b.workspace = DeviceBuffer(ctx.allocator, ctx.workspace_cap, MemoryKind::Workspace);
    for (const DeviceBuffer* d : {&b.x, &b.w, &b.y}) TB_CU(cudaMemsetAsync(d->get(), 0x3c, d->bytes(), ctx.stream));
    return b;
  } catch (const OutOfMemory&) {
    return std::nullopt;  // under a memory cap: cuDNN's first-ranked plan, untimed
  }
}

// Median milliseconds of kTimedRuns runs of `plan` after a warm-up run.
float time_plan(Context& ctx, const graph::Plan& plan, const graph::Desc& pack) {
  Event start, stop;
  std::vector<float> ms;
  graph::execute(ctx.cudnn, plan, pack);
  for (int r = 0; r < kTimedRuns; ++r) {
    start.record(ctx.stream);
    graph::execute(ctx.cudnn, plan, pack);
    stop.record(ctx.stream);
    TB_CU(cudaEventSynchronize(stop.get()));
    ms.push_back(float(stop.since(start) * 1e3));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

class Conv2d final : public Layer {
 public:
  Conv2d(Context& ctx, const Conv2dSpec& s, const Inputs& in, const Dims& out_shape)
      : spec_(s), needs_dinput_(in.at(0).needs_grad), layout_(ctx.layout) {
    const Dims& shape = in[0].shape;
    TB_CHECK(shape.size() == 4, "conv2d: the input must be (N, C, H, W), got {}", to_string(shape));
    x_ = as_nchw(shape);
    y_ = as_nchw(out_shape);
    TB_CHECK(x_.c == s.in_channels, "conv2d: the input {} has {} channels, the layer expects {}", to_string(shape),
             x_.c, s.in_channels);
    const graph::Desc x = graph::tensor(kX, ctx.cudnn_dtype, {x_.n, x_.c, x_.h, x_.w}, layout_);
    const graph::Desc w =
        graph::tensor(kW, ctx.cudnn_dtype, {s.out_channels, s.in_channels, s.kernel, s.kernel}, layout_);
    const graph::Desc y = graph::tensor(kY, ctx.cudnn_dtype, {y_.n, y_.c, y_.h, y_.w}, layout_);
    const graph::Desc conv = graph::convolution(s.stride, s.padding);

    const std::size_t e = ctx.elem_bytes();
    const Search search{std::size_t(product(shape)) * e,
                        std::size_t(s.out_channels * s.in_channels * s.kernel * s.kernel) * e,
                        std::size_t(product(out_shape)) * e,
                        fmt::format("conv2d of {} (kernel {}, stride {}, padding {}, {})", to_string(shape), s.kernel,
                                    s.stride, s.padding, layout_name(layout_))};
    std::vector<ConvOp> ops{ConvOp::Forward, ConvOp::BackwardFilter};
    if (needs_dinput_) ops.push_back(ConvOp::BackwardData);

    AlgoCache& cache = algo_cache();
    // Held through the search: one search per shape, and no two searches timing each other.
    std::lock_guard<std::mutex> lock(cache.mutex);
    std::optional<SearchBuffers> buffers;
    bool allocated = false;
    for (ConvOp op : ops) {
      Pass& pass = passes_[int(op)];
      pass.graph = graph::conv_graph(ctx.cudnn, op, x, w, y, conv);
      const std::vector<graph::Desc> configs =
          graph::engine_configs(pass.graph.graph, ctx.precision != Precision::FP32);
      const ChoiceKey choice{shape_key(ctx), op};
      if (!use_cached(ctx, cache, choice, configs, pass)) {
        if (!allocated) {
          buffers = search_buffers(ctx, search.x_bytes, search.w_bytes, search.y_bytes);
          allocated = true;
        }
        time_candidates(ctx, configs, buffers, pass, cache.choices, choice);
      }
      TB_CHECK(pass.plan,
               "{}: cuDNN has no {} plan within the workspace cap of {} bytes at this precision "
               "({} configurations ranked); raise the cap",
               search.what, graph::op_name(op), ctx.workspace_cap, configs.size());
      ctx.need_workspace(std::size_t(pass.plan.workspace));
    }
  }

  // Canonical layouts: weight (K, C, kernel, kernel) row-major; the slot holds it as KCRS, or
  // as KRSC (channels-last filters) in an NHWC network. Bias (K).
  std::vector<ParamSlot> param_slots() const override {
    std::vector<ParamSlot> slots{{spec_.out_channels * spec_.in_channels * spec_.kernel * spec_.kernel, false}};
    if (spec_.bias) slots.push_back({spec_.out_channels, false});
    return slots;
  }
  std::vector<float> canonical(int index, const std::vector<std::vector<float>>& slots) const override {
    if (index != 0 || layout_ == Layout::NCHW) return slots.at(std::size_t(index));
    return from_channels_last(slots[0], filter_shape());
  }
  void set_canonical(int index, const std::vector<float>& value,
                     std::vector<std::vector<float>>& slots) const override {
    slots.at(std::size_t(index)) =
        index == 0 && layout_ == Layout::NHWC ? to_channels_last(value, filter_shape()) : value;
  }
  BackwardReads backward_reads() const override { return BackwardReads::only_inputs(); }

  void bind(Context& ctx, const Bindings& b) override {
    x_ptr_ = b.inputs.at(0);
    dx_ptr_ = needs_dinput_ ? b.dinputs.at(0) : nullptr;
    TB_CHECK(!needs_dinput_ || dx_ptr_, "conv2d: the input needs a gradient but none is bound");
    y_ptr_ = b.output;
    dy_ptr_ = b.doutput;
    weight_ = b.params.at(0);
    dweight_ = b.dparams.at(0);
    if (spec_.bias) {
      bias_ = b.params.at(1);
      dbias_ = b.dparams.at(1);
    }
    void* x = const_cast<void*>(x_ptr_);
    void* w = const_cast<void*>(weight_);
    passes_[int(ConvOp::Forward)].pack = graph::variant_pack({kX, kW, kY}, {x, w, y_ptr_}, ctx.workspace);
    passes_[int(ConvOp::BackwardFilter)].pack =
        graph::variant_pack({kX, kW, kY}, {x, dweight_, const_cast<void*>(dy_ptr_)}, ctx.workspace);
    if (needs_dinput_)
      passes_[int(ConvOp::BackwardData)].pack =
          graph::variant_pack({kX, kW, kY}, {dx_ptr_, w, const_cast<void*>(dy_ptr_)}, ctx.workspace);
  }

  void forward(Context& ctx) override {
    run(ctx, ConvOp::Forward);
    if (!spec_.bias) return;
    if (layout_ == Layout::NHWC)
      kernels::add_bias(ctx.dtype, y_ptr_, bias_, y_.n * y_.h * y_.w, y_.c, ctx.stream);
    else
      kernels::add_channel_bias(ctx.dtype, y_ptr_, bias_, y_.n, y_.c, y_.h * y_.w, ctx.stream);
  }

  void backward(Context& ctx) override {
    run(ctx, ConvOp::BackwardFilter);
    if (spec_.bias) {
      // trainbench's own reduction in every precision: cuDNN's bias gradient refuses bf16.
      if (layout_ == Layout::NHWC)
        kernels::bias_grad(ctx.dtype, dy_ptr_, dbias_, y_.n * y_.h * y_.w, y_.c, ctx.stream);
      else
        kernels::channel_sum(ctx.dtype, dy_ptr_, dbias_, y_.n, y_.c, y_.h * y_.w, ctx.stream);
    }
    if (needs_dinput_) run(ctx, ConvOp::BackwardData);
  }

 private:
  struct Pass {
    graph::OpGraph graph;
    graph::Plan plan;
    graph::Desc pack;
  };

  ShapeKey shape_key(const Context& ctx) const {
    return ShapeKey{ctx.device,
                    ctx.cudnn_dtype,
                    ctx.precision != Precision::FP32,
                    layout_,
                    ctx.workspace_cap,
                    x_.n,
                    x_.c,
                    x_.h,
                    x_.w,
                    spec_.out_channels,
                    spec_.kernel,
                    spec_.stride,
                    spec_.padding};
  }

  // The configuration measured fastest for this shape earlier in the process, where it still
  // makes a plan within the workspace cap.
  static bool use_cached(Context& ctx, const AlgoCache& cache, const ChoiceKey& choice,
                         const std::vector<graph::Desc>& configs, Pass& pass) {
    const auto cached = cache.choices.find(choice);
    if (cached == cache.choices.end() || cached->second >= configs.size()) return false;
    pass.plan = graph::make_plan(ctx.cudnn, configs[cached->second]);
    if (pass.plan && std::size_t(pass.plan.workspace) <= ctx.workspace_cap) return true;
    pass.plan = graph::Plan{};  // the search below starts from none
    return false;
  }

  // Times up to kCandidates of cuDNN's ranked configurations that fit the workspace cap and keeps
  // the fastest (remembered in `choices`); without buffers to time with, the first that fits.
  static void time_candidates(Context& ctx, const std::vector<graph::Desc>& configs,
                              const std::optional<SearchBuffers>& buffers, Pass& pass,
                              std::map<ChoiceKey, std::size_t>& choices, const ChoiceKey& choice) {
    float best_ms = 0;
    std::size_t tried = 0;
    for (std::size_t i = 0; i < configs.size() && tried < kCandidates; ++i) {
      graph::Plan candidate = graph::make_plan(ctx.cudnn, configs[i]);
      if (!candidate || std::size_t(candidate.workspace) > ctx.workspace_cap) continue;
      ++tried;
      if (!buffers) {  // no memory to time with: the first plan cuDNN ranks that fits
        pass.plan = std::move(candidate);
        return;
      }
      const graph::Desc pack = graph::variant_pack({kX, kW, kY}, {buffers->x.get(), buffers->w.get(), buffers->y.get()},
                                                   buffers->workspace.get());
      float ms = 0;
      try {
        ms = time_plan(ctx, candidate, pack);
      } catch (const BackendError&) {
        continue;  // a plan that finalizes but does not run: not a candidate
      }
      if (!pass.plan || ms < best_ms) {
        best_ms = ms;
        pass.plan = std::move(candidate);
        choices[choice] = i;
      }
    }
  }

  void run(Context& ctx, ConvOp op) {
    Pass& p = passes_[int(op)];
    graph::execute(ctx.cudnn, p.plan, p.pack);
  }

  Nchw filter_shape() const { return {spec_.out_channels, spec_.in_channels, spec_.kernel, spec_.kernel}; }

  Conv2dSpec spec_;
  bool needs_dinput_;
  Layout layout_;
  Nchw x_{}, y_{};
  Pass passes_[3];  // by ConvOp

  const void* x_ptr_ = nullptr;  // (N, C, H, W) in the layout
  void* dx_ptr_ = nullptr;       // null where the input needs no gradient
  void* y_ptr_ = nullptr;        // (N, K, OH, OW)
  const void* dy_ptr_ = nullptr;
  const void* weight_ = nullptr;  // (K, C, kernel, kernel), KCRS or KRSC
  void* dweight_ = nullptr;
  const void* bias_ = nullptr;  // (K)
  void* dbias_ = nullptr;
};

}  // namespace

std::unique_ptr<Layer> make_conv2d(Context& ctx, const Conv2dSpec& s, const Inputs& in, const Dims& out) {
  return std::make_unique<Conv2d>(ctx, s, in, out);
}

}  // namespace tb::cuda
