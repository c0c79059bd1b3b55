// ks/kernels.cpp — the kernel layer's one source (ks/kernels.h), compiled once per target and instruction set level
// (KS_KERNELS names the namespace: the generated CMake project defines it per level) into one or two objects: the
// matrix products and convolutions of ks/gemm.h and ks/conv.h for float and double (kernels_<level>.o), or, with
// KS_KERNELS_INT8, the int8 ones of ks/qconv.h alone (kernels_<level>_int8.o, which the projects of packages that
// call them link beside the first), so that an int8 package does not compile the float kernels again.
#define KS_KERNELS_INSTANTIATE
#include "kernels.h"

namespace ks {
inline namespace KS_KERNELS KS_HIDDEN {

#ifndef KS_KERNELS_INT8
KS_KERNEL_LAYER(template, float)
KS_KERNEL_LAYER(template, double)
KS_DOTS_LAYER(template, float)
KS_DOTS_LAYER(template, double)
#else  // (the integer kernels' object of the projects of packages that call them)
KS_QUANT_LAYER(template, uint8_t, uint8_t)
KS_QUANT_LAYER(template, uint8_t, int8_t)
KS_QUANT_LAYER(template, int8_t, uint8_t)
KS_QUANT_LAYER(template, int8_t, int8_t)
KS_QSUMS_LAYER(template, uint8_t)
KS_QSUMS_LAYER(template, int8_t)
#endif

}  // inline namespace KS_KERNELS
}  // namespace ks
