// ks/kernels.cpp — the kernel layer's one source (ks/kernels.h), compiled once per target, instruction set level and
// part (KS_KERNELS names the namespace: the generated CMake project defines it per level) into one object per part a
// package calls: the matrix products of ks/gemm.h for float and double (kernels_<level>_products.o), with
// KS_KERNELS_CONVS the convolutions and pooling of ks/conv.h and ks/maxpool.h and the products again
// (kernels_<level>_convs.o: one translation unit, as the products and the convolutions share the register tiles and
// GCC's local copies of them; a package that calls both links this object alone), with KS_KERNELS_INT8 the int8
// kernels of ks/qconv.h (kernels_<level>_int8.o, linked beside either).
#define KS_KERNELS_INSTANTIATE
#include "kernels.h"

namespace ks {
inline namespace KS_KERNELS KS_HIDDEN {

#if defined(KS_KERNELS_INT8)
KS_QUANT_LAYER(template, uint8_t, uint8_t)
KS_QUANT_LAYER(template, uint8_t, int8_t)
KS_QUANT_LAYER(template, int8_t, uint8_t)
KS_QUANT_LAYER(template, int8_t, int8_t)
KS_QSUMS_LAYER(template, uint8_t)
KS_QSUMS_LAYER(template, int8_t)
#elif defined(KS_KERNELS_CONVS)  // (in this order, type by type: GCC's inlining follows it, and instantiating the
KS_KERNEL_LAYER(template, float)  // products of both types first gave a block of tiles a 560 B frame)
KS_KERNEL_LAYER(template, double)
KS_DOTS_LAYER(template, float)
KS_DOTS_LAYER(template, double)
#else
KS_PRODUCTS_LAYER(template, float)
KS_PRODUCTS_LAYER(template, double)
#endif

}  // inline namespace KS_KERNELS
}  // namespace ks
