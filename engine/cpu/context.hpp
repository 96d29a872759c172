// The oneDNN engine and stream of the CPU backend, the status-check macro, and helpers for
// memory descriptors shared by the layers.
#pragma once

#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl_debug.h>
#include <oneapi/dnnl/dnnl.hpp>

#include "engine/core/error.hpp"
#include "engine/core/spec.hpp"

namespace tb::cpu {

using md = dnnl::memory::desc;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

// One per network. Every primitive is created with a user scratchpad, and all of them share one
// buffer sized for the largest, so that no primitive allocates on the step path.
struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  dnnl::primitive_attr attr = scratchpad_attr();
  std::size_t scratch_bytes = 0;  // the largest scratchpad any primitive asked for
  void* scratch = nullptr;        // owned by the network, set before layers are bound
  // A buffer a layer uses between primitives and never across layers (conv2d_expanded.cpp's
  // kernel in a primitive's layout), shared the same way: the most any layer asked for.
  std::size_t staging_bytes = 0;
  void* staging = nullptr;
  // Every primitive's kind and oneDNN implementation ("convolution jit_1x1:avx2",
  // "batch_normalization bnorm_ref:any"), in the order the layers created them: what tests read
  // to see which path a layer took and that none fell to a reference loop; and, as the layers
  // are bound, one entry for each tensor reordered between a layer's forward and backward
  // layouts every step (layer.hpp's kBackwardReorder).
  std::vector<std::string> implementations;

  template <class PrimitiveDesc>
  void reserve(const PrimitiveDesc& pd) {
    scratch_bytes = std::max(scratch_bytes, pd.scratchpad_desc().get_size());
    implementations.push_back(std::string(dnnl_prim_kind2str(dnnl_primitive_kind_t(pd.get_kind()))) + " " +
                              pd.impl_info_str());
  }
  static dnnl::primitive_attr scratchpad_attr() {
    dnnl::primitive_attr a;
    a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return a;
  }
};

}  // namespace tb::cpu

namespace tb {
// TB_DNNL's check (engine/core/error.hpp): oneDNN's text and status.
[[noreturn]] void check_status(const dnnl::error& e, const char* expr, const char* file, int line);
}  // namespace tb

namespace tb::cpu {

dnnl::memory::dims to_dnnl(const Dims& dims);
// Plain row-major f32 descriptor of the given dims.
md plain_desc(const dnnl::memory::dims& dims);
bool is_plain(const md& desc);
// 4-D f32 in blocks of B = 8 or 16 channels: oneDNN's aBcd8b or aBcd16b.
md channel_blocks(const dnnl::memory::dims& dims, i64 B);
// The same bytes seen with other dims; the descriptor must be plain.
md plain_view(const md& desc, const dnnl::memory::dims& dims);
// Number of floats the descriptor's buffer holds (blocked layouts may pad).
i64 padded_floats(const md& desc);

// Copies between a memory of any layout and a plain host buffer of the same dims.
void to_plain(Context& ctx, const dnnl::memory& src, float* dst);
void from_plain(Context& ctx, const float* src, const dnnl::memory& dst);

// A reorder between two descriptors made once at planning time; a no-op where they match.
class Reorder {
 public:
  Reorder() = default;
  Reorder(const dnnl::memory& from, const dnnl::memory& to);
  void operator()(Context& ctx) const;
  explicit operator bool() const { return static_cast<bool>(prim_); }

 private:
  dnnl::reorder prim_;
  mutable dnnl::memory from_, to_;  // handles; execute() takes them non-const
};

// A primitive with its arguments, bound once, executed every step.
struct Step {
  dnnl::primitive prim;
  md scratch_desc;
  std::unordered_map<int, dnnl::memory> args;

  template <class PrimitiveDesc>
  void create(Context& ctx, const PrimitiveDesc& pd, dnnl::primitive p) {
    prim = std::move(p);
    scratch_desc = pd.scratchpad_desc();
    ctx.reserve(pd);
  }
  // Called at bind time, once the network has allocated the shared scratchpad.
  void bind_scratch(Context& ctx) {
    if (scratch_desc.get_size() > 0) args[DNNL_ARG_SCRATCHPAD] = dnnl::memory(scratch_desc, ctx.engine, ctx.scratch);
  }
  void run(Context& ctx) const;
  explicit operator bool() const { return static_cast<bool>(prim); }
};

}  // namespace tb::cpu
