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
Winograd convolution (a `winograd_kernel` of a constant) is transformed here too, once (prims/convolve.py), and
int8 weights are packed for the integer kernels (a `qpack` of a constant, prims/qlinear.py). The constant kernel
[M, C, 1, 1] of a pointwise convolution over few positions (prims/convolve.py: pointwise_applies; one thread) is
stored transposed as panels [ceil(M / P), C, P], the convolve's impl becoming "pointwise" (ks::conv_pointwise: the
positions as the register tiles' rows, the output channels as their panels); a convolution with a window over few
positions likewise, its kernel's transpose [C·K, M] stored as panels block by block (prims/convolve.py: window_panels)
and its window's sides kept as the param `window`.
On a target without a vector unit (`vectors` false: a microcontroller) the panels are 4 columns wide
(lowering.DOT_PANEL), which ks::packed_gemm reads there as 4 dot products at a time (ks::tiles::panel_dots):
at most 3 zero-padded columns instead of 15.
"""
from __future__ import annotations

import collections

from ..ir.core import Func, Var
from ..ir.dense import Dense
from ..prims.convolve import pointwise_applies, window_panels, windowed
from ..prims.lowering import gemm_axes, to_panels
from ..prims.tensor import parse_spec
from .dce import dce
from .rewrite import bind_like, rewrite


def layout_constants(f: Func, vectors: bool = True, threads: int = 0) -> Func:
    """f with the constants that its gemms read stored as their kernels read them (see the module doc)."""
    uses = collections.Counter(a for eqn in f.eqns for a in eqn.ins if isinstance(a, Var))
    uses.update(r for r in f.results if isinstance(r, Var))
    single = {e.outs[0]: e.params["value"].array() for e in f.eqns
              if e.prim.name == "constant" and uses[e.outs[0]] == 1 and len(e.params["value"].shape) == 2}
    kernels = {e.outs[0]: e.params["value"] for e in f.eqns if e.prim.name == "constant"}
    folded = _constant_views(f, kernels)
    # a single-use view of such a constant (torch.export's weight.t(), an ONNX LSTM's W[0]) is a constant too
    for e in f.eqns:
        if e.prim.name == "constant" or not e.outs or e.outs[0] not in folded:
            continue
        source = e.ins[0] in single if e.prim.name == "transpose" else e.ins[0] in kernels and uses[e.ins[0]] == 1
        if source and uses[e.outs[0]] == 1 and e.outs[0].type.rank == 2:
            single[e.outs[0]] = folded[e.outs[0]].array()
    wrapped = {e.outs[0] for e in f.eqns if e.prim.name == "transpose" and e.outs[0] in single}
    views = _single_use_views(f, kernels, folded, uses)
    changed = False

    def rule(b, eqn, ins):
        nonlocal changed
        if eqn.prim.name == "loop":
            body = _loop_body_with_constants(eqn, folded, vectors, threads)
            if body is None:
                return None
            changed = True
            return bind_like(b, eqn, eqn.prim, list(ins), dict(eqn.params, body=body))
        if eqn.prim.precompute and eqn.ins[0] in folded:  # (a view of a constant too: QGemm's transposed weight)
            changed = True
            (value,) = eqn.prim.eval(folded[eqn.ins[0]].array(), env={}, **eqn.params)
            return [b.constant(value=Dense.of(value))]
        if eqn.prim.name == "convolve":
            new = _convolve_constants(b, eqn, ins, kernels, folded, views, uses, vectors and threads <= 1)
            changed = changed or new is not None
            return new
        if eqn.prim.name != "contract" or eqn.params["impl"] in ("loops", "dense") or not single:
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
            new_ins[-1] = b.constant(value=Dense.of(to_panels(panel_b, vectors)))
            bl = k + n
            params.update(impl="panels", cols=int(panel_b.shape[1]))
        elif b_new is not None:
            new_ins[-1] = b.constant(value=b_new)
            bl = k + n
        return bind_like(b, eqn, eqn.prim, new_ins, dict(params, spec=f"{a},{bl}->{out}"))

    g = rewrite(f, rule)
    return dce(g) if changed else f


def _constant_views(f: Func, kernels: dict) -> dict:
    """The constants of f and the values of its views of them with literal parameters (an ONNX LSTM's W[0]:
    index, reshape, transpose), computed now."""
    from ..ir.core import Lit
    values = dict(kernels)
    for e in f.eqns:
        src = e.ins[0] if e.ins else None
        if src not in values:
            continue
        x = values[src].array()
        if e.prim.name == "index" and isinstance(e.ins[1], Lit) and not e.ins[1].type.rank:
            values[e.outs[0]] = Dense.of(x.take(int(e.ins[1].value), axis=e.params["axis"]))
        elif e.prim.name == "reshape" and all(isinstance(d, int) for d in e.outs[0].type.shape):
            values[e.outs[0]] = Dense.of(x.reshape(e.outs[0].type.shape))
        elif e.prim.name == "transpose":
            values[e.outs[0]] = Dense.of(x.transpose(e.params["perm"]))
    return values


def _loop_body_with_constants(eqn, kernels: dict, vectors: bool, threads: int) -> Func | None:
    """The body of a loop with the constants it receives as loop constants (an RNN's recurrent weights) defined
    inside it, laid out by layout_constants like top-level ones (panels: a vector times the weights each step
    reads them in one stream instead of as dot products); None when that changes nothing. The loop keeps
    passing the original constants, which the body no longer reads (the loop's prune drops them)."""
    from ..ir.builder import Builder, inline
    body, n_consts = eqn.params["body"], eqn.params["n_consts"]
    consts = eqn.ins[1:1 + n_consts]
    if not any(c in kernels for c in consts):
        return None
    b = Builder()
    params = [Var(v.type, v.hint) for v in body.params]
    args = list(params)
    for j, c in enumerate(consts):
        if c in kernels:
            args[1 + j] = b.constant(value=kernels[c])
    sunk = b.func(body.name, params, inline(b, body, args))
    laid = layout_constants(sunk, vectors, threads)
    return laid if laid is not sunk else None


def _single_use_views(f: Func, kernels: dict, folded: dict, uses) -> set:
    """The views of constants (reshapes, transposes, ...) read once, each step back to the constant read once too:
    what a reader may take as a constant of its own without the constant staying for another reader."""
    views: set = set()
    for e in f.eqns:
        src = e.ins[0] if e.ins else None
        if e.outs and e.outs[0] in folded and e.outs[0] not in kernels and uses[e.outs[0]] == 1 and \
                (src in views or (src in kernels and uses[src] == 1)):
            views.add(e.outs[0])
    return views


def _convolve_constants(b, eqn, ins, kernels: dict, folded: dict, views: set, uses, pointwise: bool):
    """A convolve whose kernel is a constant read by it alone: stored as ks::conv_pointwise's panels where that
    kernel runs (`pointwise`: one thread, a vector unit), and a view of a constant (ConvTranspose's 1x1
    convolution reads the transposed kernel) stored as that view, computed now instead of on every call;
    None when neither applies."""
    w = eqn.ins[1]
    kernel = folded[w] if w in views else kernels.get(w) if uses[w] == 1 else None
    panels = _pointwise_panels(eqn, kernel) if pointwise and kernel is not None else None
    if panels is None:
        return bind_like(b, eqn, eqn.prim, [ins[0], b.constant(value=kernel)] + list(ins[2:]), dict(eqn.params)) \
            if w in views else None
    params = dict(eqn.params, impl="pointwise", cols=w.type.shape[0])
    x, y = eqn.ins[0].type, eqn.outs[0].type
    if windowed(x, w.type, y, eqn.params):  # (the kernel's window, which the panels' shape no longer says)
        params["window"] = tuple(w.type.shape[2:])
    return bind_like(b, eqn, eqn.prim, [ins[0], b.constant(value=panels)] + list(ins[2:]), params)


def _pointwise_panels(eqn, kernel: Dense) -> Dense | None:
    """The panels [ceil(M / P), C, P] of the transposed kernel [C, M] of a pointwise convolve that
    ks::conv_pointwise computes, or None."""
    x, w = eqn.ins[:2]
    if not pointwise_applies(x.type, w.type, eqn.outs[0].type, eqn.params):
        return None
    value = kernel.array()
    if windowed(x.type, w.type, eqn.outs[0].type, eqn.params):
        return Dense.of(window_panels(value))
    return Dense.of(to_panels(value.reshape(value.shape[:2]).T))


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
