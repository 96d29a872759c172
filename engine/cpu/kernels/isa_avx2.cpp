// trainbench's own CPU loops compiled for avx2 (kernels.hpp): 8 floats a vector, 16 vector
// registers; CMake compiles this file with avx2's flags alone, whatever the build's.
#define TB_KERNEL_ISA avx2
#define TB_KERNEL_ID 1
#define TB_KERNEL_LANES 8
#define TB_KERNEL_REGISTERS 16
#include "engine/cpu/kernels/kernels.inc"
