// The ISA of trainbench's own CPU loops (isa.hpp).
#include "engine/cpu/isa.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>

#include <fmt/format.h>

#include "engine/core/error.hpp"

namespace tb::cpu {
namespace {

constexpr Isa kAll[] = {Isa::Sse2, Isa::Avx2, Isa::Avx512};

std::atomic<int> g_cap{int(Isa::Avx512)};
std::once_flag g_env_once;

void read_env_cap() {
  const char* text = std::getenv("TB_MAX_CPU_ISA");
  if (text && *text) g_cap = std::min(g_cap.load(), int(parse_isa(text, "TB_MAX_CPU_ISA")));
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Sse2:
      return "sse2";
    case Isa::Avx2:
      return "avx2";
    case Isa::Avx512:
      return "avx512";
  }
  return "?";
}

Isa parse_isa(const std::string& name, const std::string& where) {
  for (Isa isa : kAll)
    if (name == isa_name(isa)) return isa;
  throw InputError(
      fmt::format("{}: '{}' is not an instruction set of trainbench's own CPU kernels (sse2, avx2, "
                  "avx512; e.g. {}=avx2)",
                  where, name, where));
}

Isa machine_isa() {
  // __builtin_cpu_supports reads CPUID and, for AVX and AVX-512, whether the OS saves their
  // registers (XGETBV).
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return Isa::Avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::Avx2;
  return Isa::Sse2;
}

std::vector<Isa> runnable_isas() {
  std::vector<Isa> out;
  for (Isa isa : kAll)
    if (isa <= machine_isa()) out.push_back(isa);
  return out;
}

Isa active_isa() {
  std::call_once(g_env_once, read_env_cap);
  return std::min(machine_isa(), Isa(g_cap.load()));
}

void cap_isa(Isa isa) {
  std::call_once(g_env_once, read_env_cap);
  g_cap = int(isa);
}

}  // namespace tb::cpu
