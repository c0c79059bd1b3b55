// ks/aten.h — matrix products through ATen (libtorch), for packages built with backend = "aten".
//
// Generated code calls ks::gemm for every contraction shaped like a (batched) matrix product,
// exactly as with backend = "blas"; here ks::gemm views the strided operands as ATen tensors
// (at::from_blob, no copy) and calls at::mm_out (or addmm_ to accumulate). The kernels
// themselves stay free of exceptions and RTTI: only the bridge functions below touch ATen, and
// they are compiled in their own source file (src/ks_aten.cpp: this header with
// KS_ATEN_IMPLEMENTATION defined) with the exceptions and RTTI libtorch needs. An ATen error
// is caught there and the product falls back to loops.
//
// Not runtime-free: libtorch allocates and runs its own thread pool. x86-64 hosts only.
#ifndef KS_ATEN_H
#define KS_ATEN_H

#include <cstdint>

#include "kernels.h"  // ks::conv_rows; gemm.h: ks::matrix, and ks::tiled_gemm when ATen fails

extern "C" {
// c (m x n) = a (m x k) · b (k x n), or c += a · b when accumulate; element (i, j) of x is
// x[i * x_rs + j * x_cs]. Return 0 on success, nonzero if ATen failed (c is then unspecified).
int ks_aten_gemm_f32(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
                     int64_t b_rs, int64_t b_cs, float* c, int64_t c_rs, int64_t c_cs, int accumulate);
int ks_aten_gemm_f64(int64_t m, int64_t n, int64_t k, const double* a, int64_t a_rs, int64_t a_cs, const double* b,
                     int64_t b_rs, int64_t b_cs, double* c, int64_t c_rs, int64_t c_cs, int accumulate);
}

namespace ks {
inline namespace KS_KERNELS KS_HIDDEN {

namespace detail {
inline int aten_gemm(int64_t m, int64_t n, int64_t k, matrix<const float> a, matrix<const float> b, matrix<float> c,
                     bool accumulate) {
    return ks_aten_gemm_f32(m, n, k, a.data, a.rs, a.cs, b.data, b.rs, b.cs, c.data, c.rs, c.cs, accumulate);
}

inline int aten_gemm(int64_t m, int64_t n, int64_t k, matrix<const double> a, matrix<const double> b,
                     matrix<double> c, bool accumulate) {
    return ks_aten_gemm_f64(m, n, k, a.data, a.rs, a.cs, b.data, b.rs, b.cs, c.data, c.rs, c.cs, accumulate);
}
}  // namespace detail

// c = a · b (or c += a · b when accumulate): a is m x k, b is k x n, c is m x n. ks/gemm.h if ATen fails.
template <class T>
void gemm(int64_t m, int64_t n, int64_t k, matrix<const T> a, matrix<const T> b, matrix<T> c, bool accumulate) {
    if (m == 0 || n == 0 || detail::aten_gemm(m, n, k, a, b, c, accumulate) == 0) {
        return;
    }
    tiled_gemm<T>(m, n, k, a, b, c, accumulate);
}

// ks::gemm as a function object: the product ks::conv_rows multiplies its im2col blocks with.
struct library_gemm {
    template <class T>
    void operator()(int64_t m, int64_t n, int64_t k, matrix<const T> a, matrix<const T> b, matrix<T> c,
                    bool accumulate) const {
        gemm<T>(m, n, k, a, b, c, accumulate);
    }
};

}  // inline namespace KS_KERNELS
}  // namespace ks

#ifdef KS_ATEN_IMPLEMENTATION
#include <ATen/ATen.h>

namespace ks {
inline namespace KS_KERNELS KS_HIDDEN {
namespace detail {
template <class T>
int aten_gemm_impl(int64_t m, int64_t n, int64_t k, const T* a, int64_t a_rs, int64_t a_cs, const T* b, int64_t b_rs,
                   int64_t b_cs, T* c, int64_t c_rs, int64_t c_cs, int accumulate) {
    try {
        const auto options = at::TensorOptions().dtype(c10::CppTypeToScalarType<T>::value);
        // from_blob does not copy and never frees: the tensors are views of the caller's buffers
        const at::Tensor ta = at::from_blob(const_cast<T*>(a), {m, k}, {a_rs, a_cs}, options);
        const at::Tensor tb = at::from_blob(const_cast<T*>(b), {k, n}, {b_rs, b_cs}, options);
        at::Tensor tc = at::from_blob(c, {m, n}, {c_rs, c_cs}, options);
        if (accumulate) {
            tc.addmm_(ta, tb);
        } else {
            at::mm_out(tc, ta, tb);
        }
        return 0;
    } catch (...) {
        return 1;
    }
}
}  // namespace detail
}  // inline namespace KS_KERNELS
}  // namespace ks

extern "C" int ks_aten_gemm_f32(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs,
                                const float* b, int64_t b_rs, int64_t b_cs, float* c, int64_t c_rs, int64_t c_cs,
                                int accumulate) {
    return ks::detail::aten_gemm_impl(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, c_rs, c_cs, accumulate);
}

extern "C" int ks_aten_gemm_f64(int64_t m, int64_t n, int64_t k, const double* a, int64_t a_rs, int64_t a_cs,
                                const double* b, int64_t b_rs, int64_t b_cs, double* c, int64_t c_rs, int64_t c_cs,
                                int accumulate) {
    return ks::detail::aten_gemm_impl(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, c_rs, c_cs, accumulate);
}
#endif  // KS_ATEN_IMPLEMENTATION

#endif  // KS_ATEN_H
