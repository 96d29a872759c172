// Descriptor helpers and reorders of the CPU backend.
#include "engine/cpu/context.hpp"

#include <oneapi/dnnl/dnnl_debug.h>

#include <vector>

namespace tb {
void check_status(const dnnl::error& e, const char* expr, const char* file, int line) {
  fail_call(e.status == dnnl_out_of_memory ? CallFailure::OutOfMemory : CallFailure::Backend, "oneDNN",
            fmt::format("{} (status {})", e.what(), int(e.status)), expr, file, line);
}
}  // namespace tb

namespace tb::cpu {

dnnl::memory::dims to_dnnl(const Dims& dims) { return dnnl::memory::dims(dims.begin(), dims.end()); }

md plain_desc(const dnnl::memory::dims& dims) {
  static constexpr tag tags[] = {tag::undef, tag::a, tag::ab, tag::abc, tag::abcd, tag::abcde};
  TB_CHECK(!dims.empty() && dims.size() <= 5, "rank {} is not supported", dims.size());
  return md(dims, dt::f32, tags[dims.size()]);
}

bool is_plain(const md& desc) { return desc == plain_desc(desc.dims()); }

md channel_blocks(const dnnl::memory::dims& dims, i64 B) {
  TB_CHECK(B == 8 || B == 16, "channel blocks of {}: 8 or 16 only", B);
  return md(dims, dt::f32, B == 16 ? tag::aBcd16b : tag::aBcd8b);
}

md plain_view(const md& desc, const dnnl::memory::dims& dims) {
  TB_CHECK(is_plain(desc), "a blocked tensor cannot be reshaped");
  md view = plain_desc(dims);
  TB_CHECK(view.get_size() == desc.get_size(), "reshape changes the element count");
  return view;
}

i64 padded_floats(const md& desc) { return i64(desc.get_size() / sizeof(float)); }

void to_plain(Context& ctx, const dnnl::memory& src, float* dst) {
  dnnl::memory from = src;  // a handle: the copy shares the buffer
  dnnl::memory plain(plain_desc(src.get_desc().dims()), ctx.engine, dst);
  TB_DNNL(dnnl::reorder(from, plain).execute(ctx.stream, from, plain));
  ctx.stream.wait();
}

void from_plain(Context& ctx, const float* src, const dnnl::memory& dst) {
  dnnl::memory to = dst;
  dnnl::memory plain(plain_desc(dst.get_desc().dims()), ctx.engine, const_cast<float*>(src));
  TB_DNNL(dnnl::reorder(plain, to).execute(ctx.stream, plain, to));
  ctx.stream.wait();
}

Reorder::Reorder(const dnnl::memory& from, const dnnl::memory& to) : from_(from), to_(to) {
  TB_DNNL(prim_ = dnnl::reorder(from, to));
}

void Reorder::operator()(Context& ctx) const {
  if (prim_) TB_DNNL(prim_.execute(ctx.stream, from_, to_));
}

void Step::run(Context& ctx) const {
  try {
    prim.execute(ctx.stream, args);
  } catch (const dnnl::error& e) {
    throw BackendError(fmt::format("oneDNN: executing a {} primitive failed: {} (status {})",
                                   dnnl_prim_kind2str(dnnl_primitive_kind_t(prim.get_kind())), e.what(),
                                   int(e.status)));
  }
}

}  // namespace tb::cpu
