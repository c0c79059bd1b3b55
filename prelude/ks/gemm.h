// ks/gemm.h — matrix products in portable C++ (no heap, no library), for backend = "plain".
//
// Generated code calls ks::tiled_gemm for every float contraction shaped like a (batched) matrix
// product, c = a · b or c += a · b, on strided operands. Three strategies, chosen from the strides
// (compile-time constants after inlining, so the choice costs nothing):
//   - b and c with rows contiguous: register tiles. An MR x NR block of c stays in registers while
//     the k loop adds a[i][p] · b[p][j..j+NR) for each of its MR rows: every b element loaded is used
//     MR times, every a element NR times, and the NR-wide rows are what compilers vectorize. With
//     -march=native on an AVX-512 machine GCC 12 runs a 64 x 784 by 784 x 512 product at about
//     100 GFLOP/s, as fast as OpenBLAS (see docs/performance.md); with the baseline instruction set
//     (SSE2) 25-35 GFLOP/s, about as fast as dot products.
//   - a and b both contiguous along k: DOT dot products at a time (one row of a, DOT rows of bᵀ).
//   - anything else: one dot product per element.
// The k axis is cut into blocks of KC so that the rows of b a block reads stay in cache while
// every row block of a passes over them. Nothing is allocated: the stack holds one MR x NR tile.
#ifndef KS_GEMM_H
#define KS_GEMM_H

#include <cstdint>

#include "prelude.h"

namespace ks {

// A strided matrix: element (i, j) is data[i * rs + j * cs].
template <class T>
struct matrix {
    T* data;
    int64_t rs;
    int64_t cs;

    matrix<T> transposed() const { return {data, cs, rs}; }
};

namespace tiles {

// The widest vector registers the target compiles for, in bytes (16 when unknown: SSE2, NEON).
#ifndef KS_GEMM_MR
#if defined(__AVX512F__)
#define KS_GEMM_MR 8
#define KS_GEMM_VECTORS 2
#elif defined(__AVX__)
#define KS_GEMM_MR 6
#define KS_GEMM_VECTORS 2
#else
#define KS_GEMM_MR 4
#define KS_GEMM_VECTORS 4
#endif
#endif
#if defined(__AVX512F__)
constexpr int vector_bytes = 64;
#elif defined(__AVX__)
constexpr int vector_bytes = 32;
#else
constexpr int vector_bytes = 16;
#endif
constexpr int row_block = KS_GEMM_MR;
constexpr int row_vectors = KS_GEMM_VECTORS;
constexpr int64_t k_block = 256;  // KC
constexpr int dot_block = 4;

// c[0..MR)[0..NR) (+)= Σ_{p < kc} a[r][p] · b[p][0..NR): the tile in registers (b rows contiguous).
template <class T, int MR, int NR>
inline void tile(int64_t kc, const T* a, int64_t a_rs, int64_t a_cs, const T* b, int64_t b_rs, T* c, int64_t c_rs,
                 bool load) {
    T acc[MR][NR];
    for (int r = 0; r < MR; ++r) {
        for (int q = 0; q < NR; ++q) {
            acc[r][q] = load ? c[r * c_rs + q] : T(0);
        }
    }
    for (int64_t p = 0; p < kc; ++p) {
        const T* row = b + p * b_rs;
        for (int r = 0; r < MR; ++r) {
            const T x = a[r * a_rs + p * a_cs];
            KS_OMP_SIMD()  // (GCC 12 vectorizes this row for SSE2 only when told to)
            for (int q = 0; q < NR; ++q) {
                acc[r][q] += x * row[q];
            }
        }
    }
    for (int r = 0; r < MR; ++r) {
        for (int q = 0; q < NR; ++q) {
            c[r * c_rs + q] = acc[r][q];
        }
    }
}

// All m rows of an NR-wide column panel of c over kc values of k (a, b and c point at the panel's
// first element): tiles of MR rows, then single rows.
template <class T, int MR, int NR>
inline void panel(int64_t m, int64_t kc, const T* a, int64_t a_rs, int64_t a_cs, const T* b, int64_t b_rs, T* c,
                  int64_t c_rs, bool load) {
    const int64_t whole = m - m % MR;  // (bounds GCC can see: no "iteration ... invokes UB" warnings)
    for (int64_t i = 0; i < whole; i += MR) {
        tile<T, MR, NR>(kc, a + i * a_rs, a_rs, a_cs, b, b_rs, c + i * c_rs, c_rs, load);
    }
    for (int64_t i = whole; i < m; ++i) {
        tile<T, 1, NR>(kc, a + i * a_rs, a_rs, a_cs, b, b_rs, c + i * c_rs, c_rs, load);
    }
}

// The NR-wide panels over [j0, j1) (j1 - j0 a multiple of NR) for k in [k0, k0 + kc). Where the stack
// may hold it (x86 with AVX) and enough row tiles reuse it, each kc x NR block of b is first copied
// to contiguous rows: the tiles then read one stream instead of kc rows a whole row of b apart
// (which map to a few cache sets and miss when b is wide).
template <class T, int NR>
inline void panels(int64_t m, int64_t j0, int64_t j1, int64_t k0, int64_t kc, const matrix<const T>& a,
                   const matrix<const T>& b, const matrix<T>& c, bool load) {
    const T* ak = a.data + k0 * a.cs;
#if defined(__AVX__)
    if (m >= 2 * row_block && b.rs != NR) {
        alignas(64) T pack[k_block * NR];
        for (int64_t j = j0; j < j1; j += NR) {
            for (int64_t p = 0; p < kc; ++p) {
                const T* row = b.data + (k0 + p) * b.rs + j;
                for (int q = 0; q < NR; ++q) {
                    pack[p * NR + q] = row[q];
                }
            }
            panel<T, row_block, NR>(m, kc, ak, a.rs, a.cs, pack, NR, c.data + j, c.rs, load);
        }
        return;
    }
#endif
    for (int64_t j = j0; j < j1; j += NR) {
        panel<T, row_block, NR>(m, kc, ak, a.rs, a.cs, b.data + k0 * b.rs + j, b.rs, c.data + j, c.rs, load);
    }
}

// Rows of c one at a time (fewer rows than a tile: a vector times a matrix), each in chunks of 4 NR columns
// over the whole k: every row of b read is a long contiguous stretch.
template <class T, int NR>
void single_rows(int64_t m, int64_t n, int64_t k, const matrix<const T>& a, const matrix<const T>& b,
                 const matrix<T>& c, bool accumulate) {
    constexpr int wide = 4 * NR;
    const int64_t chunks = n - n % wide;
    const int64_t panels = n - n % NR;
    for (int64_t i = 0; i < m; ++i) {
        const T* ai = a.data + i * a.rs;
        T* ci = c.data + i * c.rs;
        for (int64_t j = 0; j < chunks; j += wide) {
            tile<T, 1, wide>(k, ai, a.rs, a.cs, b.data + j, b.rs, ci + j, c.rs, accumulate);
        }
        for (int64_t j = chunks; j < panels; j += NR) {
            tile<T, 1, NR>(k, ai, a.rs, a.cs, b.data + j, b.rs, ci + j, c.rs, accumulate);
        }
        for (int64_t j = panels; j < n; ++j) {
            tile<T, 1, 1>(k, ai, a.rs, a.cs, b.data + j, b.rs, ci + j, c.rs, accumulate);
        }
    }
}

// The product with b and c rows contiguous (b.cs == c.cs == 1).
template <class T>
void tiled(int64_t m, int64_t n, int64_t k, const matrix<const T>& a, const matrix<const T>& b, const matrix<T>& c,
           bool accumulate) {
    constexpr int nr = row_vectors * vector_bytes / static_cast<int>(sizeof(T));
    constexpr int half = nr / 2;
    if (m < row_block) {
        single_rows<T, nr>(m, n, k, a, b, c, accumulate);
        return;
    }
    const int64_t wide = n - n % nr;
    const int64_t narrow = n - n % half;
    for (int64_t k0 = 0; k0 < k; k0 += k_block) {
        const int64_t kc = k - k0 > k_block ? k_block : k - k0;
        const bool load = accumulate || k0 > 0;
        panels<T, nr>(m, 0, wide, k0, kc, a, b, c, load);
        panels<T, half>(m, wide, narrow, k0, kc, a, b, c, load);
        for (int64_t j = narrow; j < n; ++j) {
            panel<T, row_block, 1>(m, kc, a.data + k0 * a.cs, a.rs, a.cs, b.data + k0 * b.rs + j, b.rs, c.data + j,
                                   c.rs, load);
        }
    }
}

// The product with a and b contiguous along k (a.cs == b.rs == 1): dot products, DOT at a time.
template <class T>
void dots(int64_t m, int64_t n, int64_t k, const matrix<const T>& a, const matrix<const T>& b, const matrix<T>& c,
          bool accumulate) {
    for (int64_t i = 0; i < m; ++i) {
        const T* x = a.data + i * a.rs;
        const int64_t whole = n - n % dot_block;
        for (int64_t j = 0; j < whole; j += dot_block) {
            const T* y0 = b.data + j * b.cs;
            const T* y1 = y0 + b.cs;
            const T* y2 = y1 + b.cs;
            const T* y3 = y2 + b.cs;
            T d0 = 0, d1 = 0, d2 = 0, d3 = 0;
            KS_OMP_SIMD(reduction(+ : d0, d1, d2, d3))
            for (int64_t p = 0; p < k; ++p) {
                d0 += x[p] * y0[p];
                d1 += x[p] * y1[p];
                d2 += x[p] * y2[p];
                d3 += x[p] * y3[p];
            }
            T* out = c.data + i * c.rs + j * c.cs;
            const T d[dot_block] = {d0, d1, d2, d3};
            for (int q = 0; q < dot_block; ++q) {
                out[q * c.cs] = accumulate ? out[q * c.cs] + d[q] : d[q];
            }
        }
        for (int64_t j = whole; j < n; ++j) {
            const T* y = b.data + j * b.cs;
            T d = 0;
            KS_OMP_SIMD(reduction(+ : d))
            for (int64_t p = 0; p < k; ++p) {
                d += x[p] * y[p];
            }
            T& out = c.data[i * c.rs + j * c.cs];
            out = accumulate ? out + d : d;
        }
    }
}

// Any strides: one dot product per element.
template <class T>
void strided(int64_t m, int64_t n, int64_t k, const matrix<const T>& a, const matrix<const T>& b, const matrix<T>& c,
             bool accumulate) {
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            T d = 0;
            for (int64_t p = 0; p < k; ++p) {
                d += a.data[i * a.rs + p * a.cs] * b.data[p * b.rs + j * b.cs];
            }
            T& out = c.data[i * c.rs + j * c.cs];
            out = accumulate ? out + d : d;
        }
    }
}

}  // namespace tiles

// c = a · b (or c += a · b when accumulate): a is m x k, b is k x n, c is m x n.
template <class T>
void tiled_gemm(int64_t m, int64_t n, int64_t k, matrix<const T> a, matrix<const T> b, matrix<T> c,
                bool accumulate) {
    if (m <= 0 || n <= 0) {
        return;
    }
    if (c.cs != 1 && c.rs == 1) {  // a column-major result: compute cᵀ = bᵀ · aᵀ instead
        tiled_gemm<T>(n, m, k, b.transposed(), a.transposed(), c.transposed(), accumulate);
        return;
    }
    if (k <= 0) {
        if (!accumulate) {
            for (int64_t i = 0; i < m; ++i) {
                for (int64_t j = 0; j < n; ++j) {
                    c.data[i * c.rs + j * c.cs] = T(0);
                }
            }
        }
        return;
    }
    if ((b.cs == 1 || n == 1) && (c.cs == 1 || n == 1)) {
        tiles::tiled<T>(m, n, k, a, {b.data, b.rs, 1}, {c.data, c.rs, 1}, accumulate);
    } else if ((a.cs == 1 || k == 1) && (b.rs == 1 || k == 1)) {
        tiles::dots<T>(m, n, k, {a.data, a.rs, 1}, {b.data, 1, b.cs}, c, accumulate);
    } else {
        tiles::strided<T>(m, n, k, a, b, c, accumulate);
    }
}

}  // namespace ks

#endif  // KS_GEMM_H
