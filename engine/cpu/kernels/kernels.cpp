// The kernels' table for an ISA (kernels.hpp): each ISA's own translation unit defines its table.
#include "engine/cpu/kernels/kernels.hpp"

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "engine/cpu/isa.hpp"

namespace tb::cpu::kernels {
namespace sse2 {
extern const Table kTable;
}
namespace avx2 {
extern const Table kTable;
}
namespace avx512 {
extern const Table kTable;
}

const Table& table(Isa isa) {
  TB_CHECK(isa <= machine_isa(), "trainbench's {} kernels asked for on a CPU whose best is {}", isa_name(isa),
           isa_name(machine_isa()));
  switch (isa) {
    case Isa::Sse2:
      return sse2::kTable;
    case Isa::Avx2:
      return avx2::kTable;
    case Isa::Avx512:
      return avx512::kTable;
  }
  throw Error(fmt::format("no kernels for ISA {}", int(isa)));
}

const Table& active() { return table(active_isa()); }

}  // namespace tb::cpu::kernels
