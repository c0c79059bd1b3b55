// ks/kernels.cpp — the kernel layer's one translation unit (ks/kernels.h): the matrix products and
// convolutions of ks/gemm.h and ks/conv.h for float and double, and the int8 ones of ks/qconv.h, compiled once per target and instruction
// set level. KS_KERNELS names the namespace (the generated CMake project defines it per level).
#ifndef KS_KERNELS
#define KS_KERNELS ks_kernels
#endif
#define KS_PACKAGE KS_KERNELS  // (the prelude's helpers these kernels use, in the same namespace)
#define KS_KERNELS_INSTANTIATE
#include "kernels.h"

namespace ks {
inline namespace KS_KERNELS {

KS_KERNEL_LAYER(template, float)
KS_KERNEL_LAYER(template, double)
KS_DOTS_LAYER(template, float)
KS_DOTS_LAYER(template, double)
#ifdef KS_KERNELS_INT8  // (defined by the projects of packages that call the integer kernels)
KS_QUANT_LAYER(template, uint8_t, uint8_t)
KS_QUANT_LAYER(template, uint8_t, int8_t)
KS_QUANT_LAYER(template, int8_t, uint8_t)
KS_QUANT_LAYER(template, int8_t, int8_t)
KS_QSUMS_LAYER(template, uint8_t)
KS_QSUMS_LAYER(template, int8_t)
#endif

}  // inline namespace KS_KERNELS
}  // namespace ks
