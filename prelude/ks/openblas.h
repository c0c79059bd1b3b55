// ks/openblas.h — matrix products through OpenBLAS, for packages built with backend = "openblas".
// ks::gemm is ks/blas.h's (OpenBLAS is a CBLAS); this header names the library the package links.
#ifndef KS_OPENBLAS_H
#define KS_OPENBLAS_H

#include "blas.h"

#endif  // KS_OPENBLAS_H
