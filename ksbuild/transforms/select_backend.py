"""select_backend: choose how each contraction is computed.

Requires: a Func after the transformations. Guarantees: every `einsum` is a `contract`
with impl "gemm" when the backend is blas or aten and the einsum is a (batched) float matrix
product (one letter each for rows, columns and the summed axis), else impl "loops". Both
backends emit the same `ks::gemm` call; ks/blas.h or ks/aten.h implements it.
"""
from __future__ import annotations

from ..ir.core import Func
from ..prims.lowering import contract, gemm_axes
from .rewrite import bind_like, rewrite

GEMM_BACKENDS = ("blas", "aten")  # backends whose prelude header implements ks::gemm


def select_backend(f: Func, backend: str = "plain") -> Func:
    """f with einsums lowered to contractions for `backend`."""
    def rule(b, eqn, ins):
        if eqn.prim.name != "einsum":
            return None
        spec = eqn.params["spec"]
        gemm = backend in GEMM_BACKENDS and eqn.outs[0].type.is_float and gemm_axes(spec) is not None
        return bind_like(b, eqn, contract, ins, {"spec": spec, "impl": "gemm" if gemm else "loops", "acc": False})
    return rewrite(f, rule)
