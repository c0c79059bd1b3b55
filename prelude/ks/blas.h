// ks/blas.h — matrix products through CBLAS, for packages built with backend = "blas".
//
// Generated code calls ks::gemm for every contraction shaped like a (batched) matrix product;
// the batch axes stay loops in the generated code. Any CBLAS works (OpenBLAS, BLIS, MKL): the
// prototypes below are the standard CBLAS ABI, so no cblas.h is needed to compile, and the
// CMake package links the BLAS that find_package(BLAS) finds.
//
// Not runtime-free: the BLAS library may allocate and start threads. Use backend = "plain"
// (the default) for embedded targets.
#ifndef KS_BLAS_H
#define KS_BLAS_H

#include <climits>
#include <cstdint>

#include "kernels.h"  // ks::conv_rows; gemm.h: ks::matrix, and ks::tiled_gemm for the layouts BLAS cannot take

extern "C" {
// The standard CBLAS enums are int-sized: RowMajor = 101, NoTrans = 111, Trans = 112.
void cblas_sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a,
                 int lda, const float* b, int ldb, float beta, float* c, int ldc);
void cblas_dgemm(int order, int trans_a, int trans_b, int m, int n, int k, double alpha, const double* a,
                 int lda, const double* b, int ldb, double beta, double* c, int ldc);
}

namespace ks {
inline namespace KS_KERNELS KS_HIDDEN {

namespace detail {
constexpr int cblas_row_major = 101;
constexpr int cblas_no_trans = 111;
constexpr int cblas_trans = 112;

// The CBLAS form of a rows x cols matrix: (transposed?, leading dimension), or false when
// neither stride is 1 (or the leading dimension is too small for BLAS).
template <class T>
bool blas_form(const matrix<T>& x, int64_t rows, int64_t cols, int& trans, int& ld) {
    const int64_t one_row = cols > 1 ? cols : 1;
    const int64_t one_col = rows > 1 ? rows : 1;
    if ((x.cs == 1 || cols == 1) && x.rs >= one_row && x.rs <= INT_MAX) {
        trans = cblas_no_trans;
        ld = static_cast<int>(x.rs);
        return true;
    }
    if ((x.rs == 1 || rows == 1) && x.cs >= one_col && x.cs <= INT_MAX) {
        trans = cblas_trans;
        ld = static_cast<int>(x.cs);
        return true;
    }
    return false;
}

inline void cblas_gemm(int ta, int tb, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                       float beta, float* c, int ldc) {
    cblas_sgemm(cblas_row_major, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

inline void cblas_gemm(int ta, int tb, int m, int n, int k, const double* a, int lda, const double* b, int ldb,
                       double beta, double* c, int ldc) {
    cblas_dgemm(cblas_row_major, ta, tb, m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc);
}

// x (rows x cols) copied row-major (contiguous) into out.
template <class T>
void copy_rows(const matrix<const T>& x, int64_t rows, int64_t cols, T* out) {
    for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) {
            out[i * cols + j] = x.data[i * x.rs + j * x.cs];
        }
    }
}
}  // namespace detail

// An operand of at most this many elements that BLAS would read transposed is first copied
// untransposed to the stack: an all-untransposed product of small matrices takes OpenBLAS's
// unpacked small-matrix kernels (4x faster for the GMM's 20 x 20 by 20 x 1000 products), and the
// copy is cheap next to the product.
constexpr int64_t small_operand = 2048;
// c = a · b (or c += a · b when accumulate): a is m x k, b is k x n, c is m x n.
template <class T>
void gemm(int64_t m, int64_t n, int64_t k, matrix<const T> a, matrix<const T> b, matrix<T> c, bool accumulate) {
    if (m == 0 || n == 0) {
        return;
    }
    if (c.cs != 1 && c.rs == 1) {  // a column-major result: compute cᵀ = bᵀ · aᵀ instead
        gemm<T>(n, m, k, b.transposed(), a.transposed(), c.transposed(), accumulate);
        return;
    }
    int ta = 0, tb = 0, lda = 0, ldb = 0, ldc = 0, trans_c = 0;
    const bool fits = m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && detail::blas_form(a, m, k, ta, lda) &&
                      detail::blas_form(b, k, n, tb, ldb) && detail::blas_form(c, m, n, trans_c, ldc) &&
                      trans_c == detail::cblas_no_trans;
    if (!fits || k == 0) {
        tiled_gemm<T>(m, n, k, a, b, c, accumulate);
        return;
    }
    if (ta == detail::cblas_trans && m * k <= small_operand) {
        T copy[small_operand];
        detail::copy_rows(a, m, k, copy);
        gemm<T>(m, n, k, {copy, k, 1}, b, c, accumulate);
        return;
    }
    if (tb == detail::cblas_trans && k * n <= small_operand) {
        T copy[small_operand];
        detail::copy_rows(b, k, n, copy);
        gemm<T>(m, n, k, a, {copy, n, 1}, c, accumulate);
        return;
    }
    detail::cblas_gemm(ta, tb, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), a.data, lda,
                       b.data, ldb, accumulate ? T(1) : T(0), c.data, ldc);
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

#endif  // KS_BLAS_H
