// Adapters between the layouts producers give and the layouts primitives want.
#include "engine/cpu/layer.hpp"

#include <omp.h>

#include <algorithm>

#include "engine/cpu/kernels/kernels.hpp"

namespace tb::cpu {

InputAdapter::InputAdapter(Context& ctx, const md& given, const md& wanted) : given_(given), wanted_(wanted) {
  if (given == wanted) return;
  if (is_plain(given) && is_plain(wanted) && given.get_size() == wanted.get_size()) return;  // a view
  TB_CHECK(given.dims() == wanted.dims(), "cannot adapt a tensor to other dims in another layout");
  copy_ = true;
  value_ = dnnl::memory(wanted, ctx.engine);
  grad_ = dnnl::memory(wanted, ctx.engine);
}

void InputAdapter::bind(Context& ctx, const dnnl::memory& value, const dnnl::memory& grad) {
  if (!copy_) {
    value_ = dnnl::memory(wanted_, ctx.engine, value.get_data_handle());
    grad_ = grad ? dnnl::memory(wanted_, ctx.engine, grad.get_data_handle()) : dnnl::memory();
    return;
  }
  to_wanted_ = Reorder(value, value_);
  if (grad) to_given_ = Reorder(grad_, grad);
}

void Relayout::bind_in(Context& ctx, const dnnl::memory& source) {
  if (source.get_desc() == wanted_) {
    mem_ = source;
    return;
  }
  mem_ = dnnl::memory(wanted_, ctx.engine);
  reorder_ = Reorder(source, mem_);
  ctx.implementations.push_back(kBackwardReorder);
}

void Relayout::bind_in(Context& ctx, const dnnl::memory& source, const Relayout& earlier) {
  if (earlier.wanted_ != wanted_) return bind_in(ctx, source);
  mem_ = earlier.mem_;
  reorder_ = Reorder();
}

void Relayout::bind_out(Context& ctx, const dnnl::memory& target) {
  if (target.get_desc() == wanted_) {
    mem_ = target;
    return;
  }
  mem_ = dnnl::memory(wanted_, ctx.engine);
  reorder_ = Reorder(mem_, target);
  ctx.implementations.push_back(kBackwardReorder);
}

void WeightedBackward::bind(Context& ctx, const dnnl::memory& src, const dnnl::memory& dsrc, const Bindings& b,
                            bool bias) {
  if (weights_) {
    weights_src_.bind_in(ctx, src);
    weights_ddst_.bind_in(ctx, b.doutput);
    dweights_.bind_out(ctx, b.dparams[0]);
    weights_.args = {{DNNL_ARG_SRC, weights_src_.mem()},
                     {DNNL_ARG_DIFF_DST, weights_ddst_.mem()},
                     {DNNL_ARG_DIFF_WEIGHTS, dweights_.mem()}};
    if (bias) weights_.args[DNNL_ARG_DIFF_BIAS] = b.dparams[1];
    weights_.bind_scratch(ctx);
  }
  if (data_) {
    data_ddst_.bind_in(ctx, b.doutput, weights_ddst_);  // run() reorders it for the weights first
    data_weights_.bind_in(ctx, b.params[0]);
    dsrc_.bind_out(ctx, dsrc);
    data_.args = {{DNNL_ARG_DIFF_DST, data_ddst_.mem()},
                  {DNNL_ARG_WEIGHTS, data_weights_.mem()},
                  {DNNL_ARG_DIFF_SRC, dsrc_.mem()}};
    data_.bind_scratch(ctx);
  }
}

void WeightedBackward::run(Context& ctx) const {
  if (weights_) {
    weights_src_(ctx);
    weights_ddst_(ctx);
    weights_.run(ctx);
    dweights_(ctx);
  }
  if (data_) {
    data_ddst_(ctx);
    data_weights_(ctx);
    data_.run(ctx);
    dsrc_(ctx);
  }
}

ThreadPartials::ThreadPartials(i64 weights, i64 biases) : weights_(weights), biases_(biases) {
  partial_.resize(std::size_t(omp_get_max_threads()));
  for (auto& p : partial_) {
    p.assign(std::size_t(weights + biases), 0.0f);
    parts_.push_back(p.data());
  }
}

void ThreadPartials::sum(i64 samples, float* dweights, float* dbias, const Add& add) {
  const i64 total = weights_ + (dbias ? biases_ : 0);
  const kernels::Table& k = kernels::active();
#pragma omp parallel num_threads(int(partial_.size()))
  {
    const int t = omp_get_thread_num(), threads = omp_get_num_threads();
    std::vector<float>& mine = partial_[std::size_t(t)];
    std::fill(mine.begin(), mine.end(), 0.0f);
    add(samples * t / threads, samples * (t + 1) / threads, mine.data(), dbias ? mine.data() + weights_ : nullptr);
#pragma omp barrier
    // This thread's share of the sums, weights then biases, by the run's ISA's kernel.
    const i64 first = total * t / threads, last = total * (t + 1) / threads;
    const i64 weights_end = std::min(last, weights_), biases_start = std::max(first, weights_);
    if (first < weights_end) k.sum_parts(dweights + first, parts_.data(), threads, first, weights_end - first);
    if (biases_start < last)
      k.sum_parts(dbias + (biases_start - weights_), parts_.data(), threads, biases_start, last - biases_start);
  }
}

std::vector<md> WeightedLayer::param_descs() const {
  std::vector<md> p{weights_desc_};
  if (bias_) p.push_back(bias_desc_);
  return p;
}

void WeightedLayer::bind(Context& ctx, const Bindings& b) {
  input_.bind(ctx, b.inputs[0], b.dinputs[0]);
  forward_.args = {{DNNL_ARG_SRC, input_.value()}, {DNNL_ARG_WEIGHTS, b.params[0]}, {DNNL_ARG_DST, b.output}};
  if (bias_) forward_.args[DNNL_ARG_BIAS] = b.params[1];
  forward_.bind_scratch(ctx);
  backward_.bind(ctx, input_.value(), input_.grad(), b, bias_);
}

void WeightedLayer::forward(Context& ctx) {
  input_.forward(ctx);
  forward_.run(ctx);
}

void WeightedLayer::backward(Context& ctx) {
  backward_.run(ctx);
  if (needs_dinput_) input_.backward(ctx);
}

}  // namespace tb::cpu
