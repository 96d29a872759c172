// Which instruction set trainbench's own CPU loops run (engine/cpu/kernels/: small convolutions,
// plain max pooling, the small LSTM, the optimizer, gradient sums), chosen at run time for the CPU
// found, as oneDNN chooses its kernels, whatever the build's flags: AVX-512 (F, BW, DQ, VL: 32
// registers of 16 floats), AVX2 with FMA (16 registers of 8), or x86-64's baseline SSE2 (16
// registers of 4). TB_MAX_CPU_ISA caps the choice, as ONEDNN_MAX_CPU_ISA caps oneDNN's, so that
// every path runs on a machine that has a better one.
#pragma once

#include <string>
#include <vector>

namespace tb::cpu {

enum class Isa : int { Sse2, Avx2, Avx512 };  // ascending

// "sse2", "avx2", "avx512": the names TB_MAX_CPU_ISA takes and rows record.
const char* isa_name(Isa isa);
// Throws tb::InputError naming `where` (the variable or flag) and the names it takes.
Isa parse_isa(const std::string& name, const std::string& where);

// The best this CPU and its OS support.
Isa machine_isa();
// Every ISA this machine can run, ascending (what tests check each of).
std::vector<Isa> runnable_isas();
// What the kernels run: machine_isa() capped by TB_MAX_CPU_ISA (read once; a bad value throws
// tb::InputError) and by cap_isa().
Isa active_isa();
// Sets the cap from now on, in place of TB_MAX_CPU_ISA's (tests run each ISA); the machine's
// best still bounds it. Layers take the kernels active when they are made.
void cap_isa(Isa isa);

}  // namespace tb::cpu
