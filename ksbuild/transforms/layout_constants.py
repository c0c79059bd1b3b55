"""layout_constants: store a constant that a gemm reads in the order BLAS reads fastest.

Requires: a Func after select_backend. Guarantees: the same values; a dense constant read only by
one matrix product call (impl "gemm" or "tiles") as its transposed operand (an ONNX Gemm's weight
with transB = 1, a torch Linear's weight) is replaced by the transposed constant, and the product's
spec names its letters in the new order. A transpose of such a constant read by the product (torch.export's
`weight.t()`) is folded into the stored constant the same way. The transposition happens once, when the package is
compiled, instead of inside BLAS on every call (OpenBLAS 0.3.21's sgemm on a 64×784 by 784×512
product takes 0.53 ms with B row-major and 0.57 ms with B transposed), and ks/gemm.h's register
tiles need b's rows contiguous. With the plain backend (impl "tiles") such a constant b is stored as
panels, the layout ks/gemm.h's register tiles read (impl "panels", a ks::packed_gemm call): nothing is
packed when the product runs, and a vector times a matrix reads the weights in one stream. The kernel of a
Winograd convolution (a `winograd_kernel` of a constant) is transformed here too, once (prims/convolve.py).
"""
from __future__ import annotations

import collections

from ..ir.core import Func, Var
from ..ir.dense import Dense
from ..prims.convolve import winograd_transform
from ..prims.lowering import gemm_axes, to_panels
from ..prims.tensor import parse_spec
from .dce import dce
from .rewrite import bind_like, rewrite


def layout_constants(f: Func) -> Func:
    """f with the constants that its gemms read transposed stored transposed (see the module doc)."""
    uses = collections.Counter(a for eqn in f.eqns for a in eqn.ins if isinstance(a, Var))
    uses.update(r for r in f.results if isinstance(r, Var))
    single = {e.outs[0]: e.params["value"].array() for e in f.eqns
              if e.prim.name == "constant" and uses[e.outs[0]] == 1 and len(e.params["value"].shape) == 2}
    for e in f.eqns:  # a single-use transpose of such a constant (torch.export's weight.t()) is a constant too
        if e.prim.name == "transpose" and e.ins[0] in single and uses[e.outs[0]] == 1:
            single[e.outs[0]] = single[e.ins[0]].transpose(e.params["perm"])
    wrapped = {e.outs[0] for e in f.eqns if e.prim.name == "transpose" and e.outs[0] in single}
    kernels = {e.outs[0]: e.params["value"] for e in f.eqns if e.prim.name == "constant"}
    changed = False

    def rule(b, eqn, ins):
        nonlocal changed
        if eqn.prim.name == "winograd_kernel" and eqn.ins[0] in kernels:
            changed = True
            return [b.constant(value=Dense.of(winograd_transform(kernels[eqn.ins[0]].array())))]
        if eqn.prim.name != "contract" or eqn.params["impl"] == "loops" or not single:
            return None
        spec = eqn.params["spec"]
        axes = gemm_axes(spec)
        if axes is None or axes[0]:  # batched products keep their layout
            return None
        _, m, n, k = axes
        a, bl, out = parse_spec(spec)
        a_new = _reordered(a, m + k, eqn.ins[-2], single, eqn.ins[-2] in wrapped)
        b_new = _reordered(bl, k + n, eqn.ins[-1], single, eqn.ins[-1] in wrapped)
        panel_b = _panel_source(eqn, bl, k + n, b_new, single)
        if a_new is None and b_new is None and panel_b is None:
            return None
        changed = True
        new_ins = list(ins)
        params = dict(eqn.params)
        if a_new is not None:
            new_ins[-2] = b.constant(value=a_new)
            a = m + k
        if panel_b is not None:
            new_ins[-1] = b.constant(value=Dense.of(to_panels(panel_b)))
            bl = k + n
            params.update(impl="panels", cols=int(panel_b.shape[1]))
        elif b_new is not None:
            new_ins[-1] = b.constant(value=b_new)
            bl = k + n
        return bind_like(b, eqn, eqn.prim, new_ins, dict(params, spec=f"{a},{bl}->{out}"))

    g = rewrite(f, rule)
    return dce(g) if changed else f


def _panel_source(eqn, letters: str, want: str, reordered: Dense | None, single: dict):
    """The [k, n] value of a tiles product's b to store as panels (a single-use constant, read
    row-major once reordered), or None."""
    operand = eqn.ins[-1]
    if eqn.params["impl"] != "tiles" or operand not in single or not isinstance(eqn.ins[-2], Var):
        return None
    if reordered is not None:
        return reordered.array()
    return single[operand] if letters == want else None


def _reordered(letters: str, want: str, operand, single: dict, wrapped: bool) -> Dense | None:
    """The value of a single-use 2-D constant operand stored with its letters in the order `want`: transposed
    when its letters are `want` reversed; as it is read (a transpose folded in) when `wrapped`."""
    if operand not in single or letters not in (want, want[::-1]) or (letters == want and not wrapped):
        return None
    value = single[operand]
    return Dense.of(value if letters == want else value.T)
