"""select_backend: choose how each contraction is computed.

Requires: a Func after the transformations. Guarantees: every `einsum` is a `contract`; a
(batched) float matrix product (one letter each for rows, columns and the summed axis) has impl
"gemm" when the backend's header has a ks::gemm (Backend.gemm: blas, aten; a
`ks::gemm` call that ks/blas.h or ks/aten.h implements), impl "tiles" otherwise on one thread (a
`ks::tiled_gemm` call: ks/gemm.h, portable register tiles; on several threads too, in parts: ks/parts.h), and
every other einsum impl "loops". Every `conv`
is a `convolve`: impl "tiles" (ks::conv, the register tiles) with the plain backend, "gemm"
(ks::conv_rows with the backend's ks::gemm) when the backend's header has one (blas, aten); a
2-d 3×3 convolution with stride 1 and 2048 channel pairs or more (prims/convolve.py: winograd_applies)
is impl "winograd" (ks::conv_winograd, on the register tiles of the header-only prelude) of its kernel
transformed by a `winograd_kernel` equation, with every backend on one thread: its 16 products per
tile block are small (C × M by a block of 64 tiles), a BLAS call gains nothing on them, and it does 16
multiplications per 4 outputs where im2col and a BLAS product do 36. With blas or aten and threads > 1
it stays a ks::conv_rows call (the BLAS's threads).
A float convolution with one group per input channel (prims/convolve.py: depthwise_applies) is impl
"depthwise" (ks::conv_depthwise) with every backend: it has no product between channels for a BLAS or
the tiles to run, only each channel's taps. An integer `qconv` (not depthwise) or `qmatmul` reads its weights
through a `qpack` (the register tiles' layout, prims/qlinear.py).
"""
from __future__ import annotations

from ..compile.backends import BACKENDS, Backend
from ..ir.core import Func
from .rewrite import rewrite


def select_backend(f: Func, backend: Backend = BACKENDS["plain"], threads: int = 0) -> Func:
    """f with einsums lowered to contractions, convolutions to convolves, for `backend` (each prim's record says
    how: Prim.select_backend)."""
    def rule(b, eqn, ins):
        lower = eqn.prim.select_backend
        return lower(b, eqn, ins, backend, threads) if lower is not None else None
    return rewrite(f, rule)
