"""select_backend: choose how each contraction is computed.

Requires: a Func after the transformations. Guarantees: every `einsum` is a `contract`; a
(batched) float matrix product (one letter each for rows, columns and the summed axis) has impl
"gemm" when the backend's record hands einsum to its header (Backend.gemm_prims: blas, aten; a
`ks::gemm` call that ks/blas.h or ks/aten.h implements), impl "tiles" otherwise on one thread (a
`ks::tiled_gemm` call: ks/gemm.h, portable register tiles), and every other einsum (or a product in a
plain build on several threads, whose loops the parallelize pass spreads) impl "loops". Every `conv`
is a `convolve`: impl "tiles" (ks::conv, the register tiles) with the plain backend, "gemm"
(ks::conv_rows with the backend's ks::gemm) when its record hands conv to its header (blas, aten); a
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
from ..prims.convolve import convolve, depthwise_applies, winograd_applies, winograd_kernel
from ..prims.lowering import contract, gemm_axes
from ..prims.qlinear import qpack
from .rewrite import bind_like, rewrite


def select_backend(f: Func, backend: Backend = BACKENDS["plain"], threads: int = 0) -> Func:
    """f with einsums lowered to contractions for `backend`."""
    def rule(b, eqn, ins):
        if eqn.prim.name in ("qconv", "qmatmul"):
            return _packed_weights(b, eqn, ins)
        if eqn.prim.name == "conv":
            p = eqn.params
            winograd = winograd_applies(eqn.ins[0].type, eqn.ins[1].type, eqn.outs[0].type, p["strides"],
                                        p["dilations"], p["groups"])
            if winograd and (not backend.gemm("conv") or threads <= 1):
                (u,) = b.bind(winograd_kernel, [ins[1]], {})
                return bind_like(b, eqn, convolve, [ins[0], u] + list(ins[2:]), dict(p, impl="winograd"))
            if depthwise_applies(eqn.ins[0].type, p["groups"]):
                return bind_like(b, eqn, convolve, ins, dict(p, impl="depthwise"))
            impl = "gemm" if backend.gemm("conv") else "tiles"
            return bind_like(b, eqn, convolve, ins, dict(p, impl=impl))
        if eqn.prim.name != "einsum":
            return None
        spec = eqn.params["spec"]
        impl = "loops"
        if eqn.outs[0].type.is_float and gemm_axes(spec) is not None:
            impl = "gemm" if backend.gemm("einsum") else "tiles" if threads <= 1 else "loops"
        return bind_like(b, eqn, contract, ins, {"spec": spec, "impl": impl, "acc": False})
    return rewrite(f, rule)


def _packed_weights(b, eqn, ins):
    """An integer convolution or product reading its weights packed for the register tiles (a qpack equation, which
    layout_constants folds when the weights are constant); a depthwise convolution reads them as they are."""
    p = eqn.params
    if p.get("packed"):
        return None
    w = eqn.ins[1]
    if eqn.prim.name == "qconv":
        if eqn.ins[0].type.shape[1] == p["groups"] and p["groups"] > 1:
            return None  # (ks::qconv_depthwise)
        layout, groups = "rows", p["groups"]
    else:
        layout, groups = "columns", 1
    (packed,) = b.bind(qpack, [ins[1]], {"layout": layout, "groups": groups})
    return bind_like(b, eqn, eqn.prim, [ins[0], packed] + list(ins[2:]), dict(p, packed=True, kernel=w.type.shape))
