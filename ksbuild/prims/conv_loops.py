"""A convolve of impl "loops": a loop nest over the convolution's literal sizes in the generated code.

What transforms/dot_convs.py picks at optimize = "size" on a target without a vector unit (a Cortex-M) for a network
of few distinct convolutions: ks::conv_dots's general code (its gathers, its dots 4 kernel rows at a time, its
epilogue records: about 1.1 KB of a Cortex-M4's flash, the same for one convolution or fifty) against a nest of
0.1-0.2 KB a layer whose bounds and strides are constants (issue 36 item 3). Per output element: the sum over its
window, input channels outermost, then the epilogue as it is stored. A window's index is tested against the image
(an unsigned compare) only along an axis with padding.

A convolution without an epilogue or with an affine one (a bias by channel, then bounds: codegen/epilogue.py
affine_parts) is a call of a helper function of the package (codegen/helpers.py: `detail::conv_loops(x, w, y,
bias)`), one per distinct text, so that the layers of the same sizes and bounds (a keyword spotter's four
depthwise-separable blocks) share their nest; any other epilogue is a lambda the nest calls, written in place.
"""
from __future__ import annotations

from ..codegen import epilogue as epilogues
from ..ir.core import Eqn
from ..ir.types import numel
from .lowering import apply_in_place


def literal_sizes(x, w, y) -> bool:
    """Whether a convolution's operand types x, w and result y have literal sizes (a loop nest's bounds), the batch
    apart: a symbolic batch (examples/onnx_cnn's N) is the image loop's bound, passed to the nest's helper."""
    return all(isinstance(d, int) for d in (*x.shape[1:], *w.shape, *y.shape[1:]))


def emit_conv_loops(ctx, eqn: Eqn, sx, sw, dst) -> None:
    """y [N, M, out...] = epi(conv(x [N, C, in...], w [M, C/G, taps...])) as a loop nest into dst (x, w, dst dense
    row-major storages), the epilogue applied as each element is stored (or after, when it cannot be read there)."""
    views = lambda s: epilogues.merge_tail(s, 2)  # noqa: E731
    parts = epilogues.affine_parts(ctx, eqn, views) if eqn.params.get("epilogue") is not None else None
    if ctx.helpers is not None and (parts is not None or eqn.params.get("epilogue") is None):
        c, bias, bits, lo, hi = parts or (ctx.ctype(eqn.outs[0].type), "nullptr", 0, "0", "0")
        store = _affine_store(bias != "nullptr", bits, lo, hi)
        lines = _nest(eqn, c, ("x", "w"), _numbered(), store)
        images = eqn.ins[0].type.shape[0]
        batch = ("", "") if isinstance(images, int) else (", int32_t images", f", int32_t({ctx.dim(images)})")
        head = f"static void {{name}}(const {c}* x, const {c}* w, {c}* y, const {c}* bias{batch[0]}) {{"
        unused = [] if bias != "nullptr" else ["    (void)bias;"]
        name = ctx.helpers.text("conv_loops", [head, *unused, *("    " + line for line in lines), "}"])
        ctx.line(f"detail::{name}({sx.base}, {sw.base}, {dst.base}, {bias}{batch[1]});")
        return
    epi = _epilogue(ctx, eqn) if eqn.params.get("epilogue") is not None else None

    def store(n, m, position, acc):
        return [f"{dst.base}[{{at}}] = {f'{epi}({n}, {m}, {position}, {acc})' if epi else acc};"]
    images = eqn.ins[0].type.shape[0]
    bound = images if isinstance(images, int) else f"int32_t({ctx.dim(images)})"
    for line in _nest(eqn, ctx.ctype(eqn.outs[0].type), (sx.base, sw.base), ctx.namer.fresh, store, bound):
        ctx.line(line)
    if eqn.params.get("epilogue") is not None and epi is None:
        apply_in_place(ctx, eqn, dst)


def _affine_store(bias: bool, bits: int, lo: str, hi: str):
    """The lines storing a value plus bias[channel], then within [lo, hi] (ks::affine::apply's order)."""
    def store(n, m, position, acc):
        lines = [f"{acc} += bias[{m}];"] if bias else []
        lines += [f"{acc} = {acc} < {lo} ? {lo} : {acc};"] if bits & 1 else []
        lines += [f"{acc} = {acc} > {hi} ? {hi} : {acc};"] if bits & 2 else []
        return lines + [f"y[{{at}}] = {acc};"]
    return store


def _nest(eqn: Eqn, c: str, bases: tuple, fresh, store, images="images") -> list[str]:
    """The lines of the loop nest (indented by level), x and w read at `bases`; fresh(hint) names its variables;
    store(image, channel, flat position, accumulator) the lines storing an element ({at}: its flat index); `images`
    the image loop's bound when the batch is symbolic (a helper's parameter `images`, or the dim's C++)."""
    x, w = eqn.ins[:2]
    (y,) = eqn.outs
    p = eqn.params
    images = x.type.shape[0] if isinstance(x.type.shape[0], int) else images
    channels, ins = x.type.shape[1], x.type.shape[2:]
    m_all, cg, taps = w.type.shape[0], w.type.shape[1], w.type.shape[2:]
    outs, k = y.type.shape[2:], len(ins)
    lines: list[str] = []
    acc = fresh("acc")
    outer = [_open(lines, fresh(h), d) for h, d in (("image", images), ("channel", m_all))]
    outer += [_open(lines, fresh("o"), d) for d in outs]
    n, m, o = outer[0], outer[1], outer[2:]
    _line(lines, f"{c} {acc} = 0;")
    inner = [_open(lines, fresh("c"), cg)]
    group = [(m, f"/ {m_all // p['groups']} * {cg}")] if p["groups"] > 1 else []
    x_at, w_at = _sum([(n, f"* {channels}"), *group, (inner[0], "")]), _sum([(m, f"* {cg}"), (inner[0], "")])
    for a in range(k):
        inner.append(_open(lines, fresh("t"), taps[a]))
        i = fresh("i")
        pad = [("1", f"* -{p['pads'][a]}")] if p["pads"][a] else []
        first = _sum([(o[a], f"* {p['strides'][a]}"), *pad, (inner[-1], f"* {p['dilations'][a]}")])
        if first != "0":
            _line(lines, f"const int32_t {i} = {first};")
        if p["pads"][a] or p["pads"][k + a]:
            _line(lines, f"if (uint32_t({i}) >= {ins[a]}u) continue;")
        x_at = _sum([(f"({x_at})", f"* {ins[a]}"), (i if first != "0" else "0", "")])
        w_at = _sum([(f"({w_at})", f"* {taps[a]}"), (inner[-1], "")])
    _line(lines, f"{acc} += {bases[0]}[{x_at}] * {bases[1]}[{w_at}];")
    _close(lines, inner)
    position = _sum([(o[a], "".join(f"* {d} " for d in outs[a + 1:]).strip()) for a in range(k)])
    for line in store(n, m, position, acc):
        _line(lines, line.replace("{at}", _at(eqn, n, m, position)))
    _close(lines, outer)
    return [line.replace("\0", "    ") for line in lines]


def _numbered():
    """A fresh(hint) naming a helper's variables by their hints alone: hint, hint1, hint2, ... (the same in every
    helper, so that nests of the same sizes have the same text)."""
    seen: dict[str, int] = {}

    def fresh(hint: str) -> str:
        seen[hint] = seen.get(hint, -1) + 1
        return f"{hint}{seen[hint] or ''}"
    return fresh


def _at(eqn: Eqn, n: str, m: str, position: str) -> str:
    """The flat index of the result element (image n, channel m, flat position)."""
    y = eqn.outs[0].type
    plane = numel(y.shape[2:])
    return _sum([(n, f"* {y.shape[1] * plane}"), (m, f"* {plane}"), (position, "")])


def _line(lines: list[str], text: str) -> None:
    """A line at the nest's current depth (the open loops' count, kept as the last line's leading \\0s)."""
    depth = sum(1 for line in lines if line.endswith("{")) - sum(1 for line in lines if line.lstrip("\0") == "}")
    lines.append("\0" * depth + text)


def _open(lines: list[str], index: str, size: int) -> str:
    """A loop of `index` over size (none when size is 1: the index is then "0"); the index."""
    if size == 1:
        return "0"
    _line(lines, f"for (int32_t {index} = 0; {index} < {size}; ++{index}) {{")
    return index


def _close(lines: list[str], loops) -> None:
    """Close the loops of _open's indices."""
    for i in loops:
        if i != "0":
            _line(lines, "}")
            lines[-1] = lines[-1][1:]


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
