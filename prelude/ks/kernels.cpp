// ks/kernels.cpp — the kernel layer's one source (ks/kernels.h), compiled once per target, instruction set level and
// part (KS_KERNELS names the namespace: the generated CMake project defines it per level) into one object per part a
// package calls, each for one element type (a package of float models compiles no double kernel): with
// KS_KERNELS_PRODUCTS32 (64) the matrix products of ks/gemm.h for float (double) (kernels_<level>_products32.o), with
// KS_KERNELS_CONVS32 (64) the convolutions and pooling of ks/conv.h and ks/maxpool.h and the products again for that
// type (kernels_<level>_convs32.o: one translation unit, as the products and the convolutions share the register tiles
// and GCC's local copies of them; a package that calls both links this object alone), with KS_KERNELS_INT8U (INT8S)
// the int8 kernels of ks/qconv.h for uint8_t (int8_t) activations, of either output type (kernels_<level>_int8u.o,
// kernels_<level>_int8s.o, linked beside either). KS_KERNELS_PRODUCTS, KS_KERNELS_CONVS and KS_KERNELS_INT8 (or
// none: the products) compile a part for both types.
#if defined(KS_KERNELS_PRODUCTS32) || defined(KS_KERNELS_PRODUCTS64)
#define KS_KERNELS_PRODUCTS  // (ks/gemm.h: the products' object)
#endif
#define KS_KERNELS_INSTANTIATE
#include "kernels.h"

namespace ks {
inline namespace KS_KERNELS KS_HIDDEN {

#if defined(KS_KERNELS_INT8U) || defined(KS_KERNELS_INT8S) || defined(KS_KERNELS_INT8)
#ifndef KS_KERNELS_INT8S
KS_QUANT_LAYER(template, uint8_t, uint8_t)
KS_QUANT_LAYER(template, uint8_t, int8_t)
KS_QSUMS_LAYER(template, uint8_t)
#endif
#ifndef KS_KERNELS_INT8U
KS_QUANT_LAYER(template, int8_t, uint8_t)
KS_QUANT_LAYER(template, int8_t, int8_t)
KS_QSUMS_LAYER(template, int8_t)
#endif
#elif defined(KS_KERNELS_CONVS32)
KS_KERNEL_LAYER(template, float)
KS_DOTS_LAYER(template, float)
#elif defined(KS_KERNELS_CONVS64)
KS_KERNEL_LAYER(template, double)
KS_DOTS_LAYER(template, double)
#elif defined(KS_KERNELS_CONVS)  // (in this order, type by type: GCC's inlining follows it, and instantiating the
KS_KERNEL_LAYER(template, float)  // products of both types first gave a block of tiles a 560 B frame)
KS_KERNEL_LAYER(template, double)
KS_DOTS_LAYER(template, float)
KS_DOTS_LAYER(template, double)
#elif defined(KS_KERNELS_PRODUCTS32)
KS_PRODUCTS_LAYER(template, float)
#elif defined(KS_KERNELS_PRODUCTS64)
KS_PRODUCTS_LAYER(template, double)
#else
KS_PRODUCTS_LAYER(template, float)
KS_PRODUCTS_LAYER(template, double)
#endif

}  // inline namespace KS_KERNELS
}  // namespace ks
