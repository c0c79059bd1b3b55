"""A convolve of impl "loops": one loop nest in the generated code over the convolution's literal sizes.

What transforms/dot_convs.py picks at optimize = "size" on a target without a vector unit (a Cortex-M) for a network
of few convolutions: ks::conv_dots's general code (its gathers, its dots 4 kernel rows at a time, its epilogue
records: about 1.1 KB of a Cortex-M4's flash, the same for one convolution or fifty) against a nest of about
0.1-0.2 KB a layer whose bounds and strides are constants (issue 36 item 3). Per output element: the sum over its
window, input channels outermost, then the epilogue (codegen/epilogue.py's lambda, inlined) as it is stored. A
window's index is tested against the image (an unsigned compare) only along an axis with padding.
"""
from __future__ import annotations

from ..codegen import epilogue as epilogues
from ..ir.core import Eqn
from ..ir.types import numel
from .lowering import apply_in_place


def literal_sizes(x, w, y) -> bool:
    """Whether a convolution's operand types x, w and result y have literal sizes only (a loop nest's bounds)."""
    return all(isinstance(d, int) for d in (*x.shape, *w.shape, *y.shape))


def emit_conv_loops(ctx, eqn: Eqn, sx, sw, dst) -> None:
    """y [N, M, out...] = epi(conv(x [N, C, in...], w [M, C/G, taps...])) as a loop nest into dst (x, w, dst dense
    row-major storages), the epilogue applied as each element is stored (or after, when it cannot be read there)."""
    x, w = eqn.ins[:2]
    (y,) = eqn.outs
    p = eqn.params
    images, channels, ins = x.type.shape[0], x.type.shape[1], x.type.shape[2:]
    m_all, cg, taps = w.type.shape[0], w.type.shape[1], w.type.shape[2:]
    outs, k = y.type.shape[2:], len(ins)
    epi = _epilogue(ctx, eqn) if p.get("epilogue") is not None else None
    fresh = ctx.namer.fresh
    acc = fresh("acc")
    outer = [_open(ctx, fresh(h), d) for h, d in (("image", images), ("channel", m_all))]
    outer += [_open(ctx, fresh("o"), d) for d in outs]
    n, m, o = outer[0], outer[1], outer[2:]
    ctx.line(f"{ctx.ctype(y.type)} {acc} = 0;")
    inner = [_open(ctx, fresh("c"), cg)]
    group = [(m, f"/ {m_all // p['groups']} * {cg}")] if p["groups"] > 1 else []
    x_at, w_at = _sum([(n, f"* {channels}"), *group, (inner[0], "")]), _sum([(m, f"* {cg}"), (inner[0], "")])
    for a in range(k):
        inner.append(_open(ctx, fresh("t"), taps[a]))
        i = fresh("i")
        pad = [("1", f"* -{p['pads'][a]}")] if p["pads"][a] else []
        first = _sum([(o[a], f"* {p['strides'][a]}"), *pad, (inner[-1], f"* {p['dilations'][a]}")])
        if first != "0":
            ctx.line(f"const int32_t {i} = {first};")
        if p["pads"][a] or p["pads"][k + a]:
            ctx.line(f"if (uint32_t({i}) >= {ins[a]}u) continue;")
        x_at = _sum([(f"({x_at})", f"* {ins[a]}"), (i if first != "0" else "0", "")])
        w_at = _sum([(f"({w_at})", f"* {taps[a]}"), (inner[-1], "")])
    ctx.line(f"{acc} += {sx.base}[{x_at}] * {sw.base}[{w_at}];")
    ctx.close_loops(inner)
    position = _sum([(o[a], "".join(f"* {d} " for d in outs[a + 1:]).strip()) for a in range(k)])
    value = f"{epi}({n}, {m}, {position}, {acc})" if epi else acc
    at = _sum([(n, f"* {m_all * numel(outs)}"), (m, f"* {numel(outs)}"), (position, "")])
    ctx.line(f"{dst.base}[{at}] = {value};")
    ctx.close_loops(outer)
    if p.get("epilogue") is not None and epi is None:
        apply_in_place(ctx, eqn, dst)


def _open(ctx, index: str, size: int) -> str:
    """A loop of `index` over size (none when size is 1: the index is then "0"); the index."""
    if size == 1:
        return "0"
    ctx.line(f"for (int32_t {index} = 0; {index} < {size}; ++{index}) {{")
    ctx.depth += 1
    return index


def _sum(terms) -> str:
    """The C++ sum of (index, "* scale" or "") terms, those of index "0" (a loop of one step) left out; "0" if none."""
    kept = [i if not scale or scale in ("* 1", "/ 1 * 1") else f"{i} {scale}" for i, scale in terms if i != "0"]
    return " + ".join(kept).replace("+ 1 * -", "- ") or "0"


def _epilogue(ctx, eqn: Eqn) -> str | None:
    """The epilogue as a lambda of (image, channel, flat position, value), declared before the nest, or None."""
    y = eqn.outs[0].type
    if y.rank > 3 and any(e.prim.name == "iota" for e in eqn.params["epilogue"].eqns):
        return None  # (an iota along a spatial axis needs that axis's own index)
    names = [ctx.namer.fresh(h) for h in ("image", "channel", "position")]
    merged = y.shape[:2] + (numel(y.shape[2:]),)
    return epilogues.declare(ctx, eqn, names, merged, names, views=lambda s: epilogues.merge_tail(s, 2))
