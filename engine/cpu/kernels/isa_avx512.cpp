// trainbench's own CPU loops compiled for avx512 (kernels.hpp): 16 floats a vector, 32 vector
// registers; CMake compiles this file with avx512's flags alone, whatever the build's.
#define TB_KERNEL_ISA avx512
#define TB_KERNEL_ID 2
#define TB_KERNEL_LANES 16
#define TB_KERNEL_REGISTERS 32
#include "engine/cpu/kernels/kernels.inc"
