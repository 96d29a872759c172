// trainbench's own CPU loops compiled for sse2 (kernels.hpp): 4 floats a vector, 16 vector
// registers; CMake compiles this file with sse2's flags alone, whatever the build's.
#define TB_KERNEL_ISA sse2
#define TB_KERNEL_ID 0
#define TB_KERNEL_LANES 4
#define TB_KERNEL_REGISTERS 16
#include "engine/cpu/kernels/kernels.inc"
