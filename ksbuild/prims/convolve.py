"""convolve: the lowering of `conv` (prims/conv.py), one prelude call for a whole batch of images.

convolve[strides, pads, dilations, groups, impl, epilogue?](x, w, *extra) -> y
    impl "tiles" is ks::conv (prelude/ks/conv.h: the kernel packed in row tiles, im2col blocks packed in
    panels for ks/gemm.h's register tiles, the epilogue applied as each element is stored), "gemm"
    ks::conv_rows with the backend's ks::gemm (ks/blas.h, ks/aten.h; the epilogue applied to each block
    just computed). The epilogue (transforms/fuse_epilogue.py) is called with the image, the output
    channel and the flat output position.
"""
from __future__ import annotations

from ..codegen import epilogue as epilogues
from ..errors import KsbuildError
from ..ir.core import Eqn
from ..ir.types import numel
from .base import Prim
from .conv import conv as _conv_prim
from .lowering import OPT_OUTS, _lowered_only, apply_epilogue, epilogue_type


def _convolve_rule(in_types, impl, epilogue=None, **geometry):
    if impl not in ("tiles", "gemm"):
        raise KsbuildError(f"internal: unknown convolution implementation '{impl}'")
    (y,) = _conv_prim.type_rule(in_types[:2], **geometry)
    return (epilogue_type(y, in_types[2:], epilogue),)


def _convolve_eval(x, w, *extra, impl, env, epilogue=None, **geometry):
    (y,) = _conv_prim.eval(x, w, env=env, **geometry)
    return (apply_epilogue(y, extra, epilogue, env),)


def _dense(ctx, a, hint: str):
    """The storage of a tensor operand as a dense row-major buffer (copied into one if it is a view)."""
    s = ctx.storage(a)
    if s.literal is None and (s.contiguous or s.dense()):
        return s
    buf = ctx.alloc(a.type, hint)
    ctx.copy(s, buf, a.type)
    return buf


def conv_shape(ctx, eqn: Eqn) -> str:
    """The ks::conv_shape of a convolution (ks/conv.h): spatial axes padded in front to three."""
    x, w = eqn.ins[:2]
    p, y = eqn.params, eqn.outs[0]
    k = x.type.rank - 2
    lead = 3 - k

    def triple(values, fill) -> str:
        return "{" + ", ".join([str(fill)] * lead + [ctx.dim(v) for v in values]) + "}"

    return (f"ks::conv_shape{{{ctx.dim(x.type.shape[1])}, {ctx.dim(w.type.shape[0])}, {p['groups']}, "
            f"{triple(x.type.shape[2:], 1)}, {triple(y.type.shape[2:], 1)}, {triple(w.type.shape[2:], 1)}, "
            f"{triple(p['strides'], 1)}, {triple(p['dilations'], 1)}, {triple(p['pads'][:k], 0)}}}")


def emit_convolve(ctx, eqn: Eqn, impl: str) -> None:
    """One ks::conv (or ks::conv_rows) call over all images; x, w and y dense row-major."""
    x, w = eqn.ins[:2]
    (y,) = eqn.outs
    c = ctx.ctype(y.type)
    sx, sw = _dense(ctx, x, "image"), _dense(ctx, w, "kernel")
    dst = ctx.target(y, "conv")
    out = dst if dst.contiguous or dst.dense() else ctx.alloc(y.type, "conv")
    shape = conv_shape(ctx, eqn)
    rows = impl == "gemm"
    scratch = ctx.scratch(c, f"ks::conv_scratch<{c}>({shape}{', true' if rows else ''})")
    geometry = ctx.namer.fresh("geometry")
    ctx.line(f"const ks::conv_shape {geometry}{shape.removeprefix('ks::conv_shape')};")
    epi = _epilogue(ctx, eqn) if eqn.params.get("epilogue") is not None else None
    call = "ks::conv_rows" if rows else "ks::conv"
    product = ", ks::library_gemm{}" if rows else ""
    ctx.line(f"{call}<{c}>({geometry}, {ctx.dim(x.type.shape[0])}, {sx.base}, {sw.base}, {out.base}, {scratch}"
             f"{product}{', ' + epi if epi else ''});")
    if out is not dst:
        ctx.copy(out, dst, y.type)
    if eqn.params.get("epilogue") is not None and epi is None:
        epilogues.apply_in_place(ctx, eqn, dst)
    ctx.env[y] = dst


def _epilogue(ctx, eqn: Eqn) -> str | None:
    """The epilogue lambda, called with (image, channel, flat position): the result's spatial axes merged."""
    y = eqn.outs[0]
    if y.type.rank > 3 and any(e.prim.name == "iota" for e in eqn.params["epilogue"].eqns):
        return None  # (an iota along a spatial axis needs that axis's own index)
    n, m, q = (ctx.namer.fresh(h) for h in ("image", "channel", "position"))
    merged = y.type.shape[:2] + (numel(y.type.shape[2:]),)
    return epilogues.declare(ctx, eqn, [n, m, q], merged, [n, m, q],
                             views=lambda s: epilogues.merge_tail(s, 2))



convolve = Prim(
    name="convolve",
    type_rule=_convolve_rule,
    eval=_convolve_eval,
    jvp=_lowered_only("convolve"),
    batch=_lowered_only("convolve"),
    emit=lambda ctx, eqn: emit_convolve(ctx, eqn, eqn.params["impl"]),
    doc="a convolution as one ks::conv call (or ks::conv_rows with a BLAS) over the batch of images",
    opt_outs=OPT_OUTS,
    lowering=True,
)
