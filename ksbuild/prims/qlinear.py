"""qconv, qmatmul: 8-bit integer convolution and matrix product, requantized (ONNX QLinearConv, QLinearMatMul);
qlookup, qsoftmax, qpack.

qconv[strides, pads, dilations, groups, x_zero, y_zero, lo, hi, out](x, w, bias, scale) -> y
    x [N, C, S...] u8 or i8, w [M, C/G, K...] i8 (zero point 0), bias i32 [M], scale f32 [1] or [M];
    y [N, M, O...] of dtype `out` (u8 or i8):
    y = clamp(round_half_even(f32(Σ (x - x_zero)·w + bias) · scale) + y_zero, lo, hi)
    with the convolution's geometry as in `conv` (prims/conv.py; padding reads x_zero, i.e. x - x_zero = 0).
qmatmul[x_zero, y_zero, lo, hi, out](a, b, bias, scale) -> y
    a [..., K] u8 or i8, b [K, N] i8 (zero point 0), bias i32 [N], scale f32 [1] or [N]; y [..., N] alike.
    With out = "i32" (ONNX MatMulInteger) y is the int32 sums themselves, Σ (a - x_zero)·b + bias: no
    requantization (scale, y_zero, lo and hi unused); with out = "f32" (transforms/float_products.py: a
    MatMulInteger's sums converted to float and scaled, onnxruntime's MatMulIntegerToFloat) y is
    f32(Σ (a - x_zero)·b + bias) · scale, the f32 product of each sum and its column's scale (or the one scale).

qlookup(table, x) -> y
    table [256] u8 or i8, x u8 or i8 of any shape; y of x's shape and table's type: y = table[the byte of x] (an int8
    x's byte: x + 256 when negative). transforms/tabulate.py makes it of a float region from one 8-bit tensor to an
    8-bit result, the table being that region computed on all 256 bytes (ks::qlookup).
qsoftmax[ratio, y_zero, lo, hi](table, x) -> y
    table [256] f32 (ops/quant.py: softmax_table), x u8 or i8 [..., n]; y of x's shape and type: onnxruntime's
    QLinearSoftmax along the last axis, e = table[x - max(row) + 255], the row's f32 sum s added left to right,
    y = clamp(round_half_even(e · ratio / s) + y_zero, lo, hi) with the quotient in double (ks::qsoftmax).
qpack[layout, groups](w) -> bytes
    w as the kernels read it (prelude/ks/qconv.h): layout "rows", a convolution's kernel [M, C/G, K...], each
    group's output channels in tiles of 8 rows of four consecutive depths; layout "columns", a product's b [K, N],
    its columns in tiles of `width` (32; 4 on a microcontroller, param width = 4: transforms/narrow_qpacks.py,
    ks::qtile::product_cols on an M-profile core, so that a classifier's 10 columns are not padded to 32; the qpack's
    qmatmul has the same param width), then the columns' sums as int32 (for x_zero·Σw), except with param sums = False
    (transforms/narrow_qpacks.py: constant weights whose product's x_zero it folds into the bias; that qmatmul has
    sums = False too, and x_zero 0 for u8 activations, -128 for i8). select_backend makes qconv and qmatmul read their
    weights through a qpack (param packed = True, the weights' shape in `kernel`); layout_constants packs constant
    weights when the package is compiled, so nothing is packed at run time. The tiles, the sums and each group's
    weights are padded to multiples of param align bytes: 64, and 8 on a microcontroller (transforms/narrow_qpacks.py
    sets align = 8 on every qpack and on the qconv and qmatmul reading one: ks::qtile::pack_align there).

scale is x_scale · w_scale / y_scale in f32 (the frontend computes it as onnxruntime does); lo and hi are the
output type's range, narrowed by a Relu or Clip folded into the operator. The arithmetic is onnxruntime's
(f32 scale, round half to even), so results equal its kernels'. Integer operations: no derivative (their
tangents and cotangents are zero, as for any integer result). The C++ is ks::qconv, ks::qconv_depthwise and
ks::qmatmul of the kernel layer (prelude/ks/qconv.h).
"""
from __future__ import annotations

import re

import numpy as np

from ..errors import KsbuildError
from ..ir.core import Eqn
from ..ir.types import Type, dim_mul, numel
from . import scratch as scratch_sizes
from .base import Prim, finite, unsigned
from .conv import conv as _conv_prim
from .convolve import _dense, _dense_target, conv_shape

ACTIVATIONS = ("u8", "i8")


def _check_requant(what: str, x: Type, w: Type, bias: Type, scale: Type, channels, x_zero: int, y_zero: int,
                   lo: int, hi: int, out: str, sums: bool = False) -> None:
    """The operands of an integer kernel (sums: unrequantized results allowed, out = "i32" or "f32")."""
    if x.dtype not in ACTIVATIONS or w.dtype != "i8":
        raise KsbuildError(f"{what} takes u8 or i8 activations and i8 weights, got {x} and {w}")
    if bias.dtype != "i32" or bias.shape != (channels,):
        raise KsbuildError(f"{what}: the bias must be i32 [{channels}], got {bias}")
    if scale.dtype != "f32" or scale.rank != 1 or scale.shape[0] not in (1, channels):
        raise KsbuildError(f"{what}: the scale must be f32 [1] or [{channels}], got {scale}")
    if sums and out in ("i32", "f32"):
        return
    if out not in ACTIVATIONS:
        raise KsbuildError(f"{what}: the output type must be u8 or i8{' or i32 or f32' if sums else ''}, not {out}")
    lo_t, hi_t = (0, 255) if out == "u8" else (-128, 127)
    if not (lo_t <= lo <= hi <= hi_t and lo_t <= y_zero <= hi_t):
        raise KsbuildError(f"{what}: bounds [{lo}, {hi}] and zero point {y_zero} do not fit {out}")


ROWS, COLS = 8, 32  # the register tile (ks::qtile::rows, ks::qtile::cols)
NARROW_COLS = 4  # a product's packed columns on an M-profile core (ks::qtile::product_cols there)
ALIGN, NARROW_ALIGN = 64, 8  # packed weights' padding (ks::qtile::pack_align), and an M-profile core's


def _round_up(n: int, to: int) -> int:
    return (n + to - 1) // to * to


def _padded(a: np.ndarray, align: int) -> np.ndarray:
    """The bytes of a, zeros after them up to a multiple of align."""
    a = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    return np.concatenate([a, np.zeros(_round_up(a.size, align) - a.size, np.uint8)])


def _tiles(w2: np.ndarray, width: int, sums: bool = True, align: int = ALIGN) -> np.ndarray:
    """w2 [n, depth] int8 packed [tile][quad][width][4] as bytes, zeros past the ends, padded to `align` bytes, then
    (sums) its rows' sums as int32 (little-endian, as the targets are), padded alike (ks::qtile::pack_weights)."""
    n, depth = w2.shape
    q = (depth + 3) // 4
    buf = np.zeros((_round_up(n, width), 4 * q), np.int8)
    buf[:n, :depth] = w2
    flat = buf.reshape(-1, width, q, 4).transpose(0, 2, 1, 3)
    if not sums:
        return _padded(flat, align)
    return np.concatenate([_padded(flat, align), _padded(w2.astype(np.int32).sum(1).astype("<i4"), align)])


def _untiles(packed: np.ndarray, n: int, depth: int, width: int) -> np.ndarray:
    q = (depth + 3) // 4
    size = _round_up(n, width) * 4 * q
    tiles = packed[:size].view(np.int8).reshape(-1, q, width, 4).transpose(0, 2, 1, 3)
    return tiles.reshape(-1, 4 * q)[:n, :depth]


def packed_bytes(layout: str, kernel: tuple, groups: int, width: int = COLS, sums: bool = True,
                 align: int = ALIGN) -> int:
    """The bytes of weights of shape `kernel` packed in `layout` (columns in tiles of `width`, then their sums
    unless `sums` is false; each part padded to `align` bytes)."""
    if layout == "columns":
        k, n = kernel
        return _round_up(_round_up(n, width) * 4 * ((k + 3) // 4), align) + (_round_up(4 * n, align) if sums else 0)
    m, depth = kernel[0] // groups, int(np.prod(kernel[1:]))
    return groups * (_round_up(_round_up(m, ROWS) * 4 * ((depth + 3) // 4), align) + _round_up(4 * m, align))


def pack(w: np.ndarray, layout: str, groups: int, width: int = COLS, sums: bool = True,
         align: int = ALIGN) -> np.ndarray:
    """Weights as the kernels read them (qpack)."""
    if layout == "columns":
        return _tiles(w.T, width, sums, align)
    m = w.shape[0] // groups
    flat = w.reshape(w.shape[0], -1)
    return np.concatenate([_tiles(flat[g * m:(g + 1) * m], ROWS, align=align) for g in range(groups)])


def unpack(packed: np.ndarray, layout: str, kernel: tuple, groups: int, width: int = COLS,
           align: int = ALIGN) -> np.ndarray:
    """The weights of shape `kernel` that `pack` packed."""
    if layout == "columns":
        k, n = kernel
        return _untiles(packed, n, k, width).T
    m, depth = kernel[0] // groups, int(np.prod(kernel[1:]))
    one = packed_bytes(layout, (m,) + tuple(kernel[1:]), 1, align=align)  # (a group's tiles and sums)
    parts = [_untiles(packed[g * one:(g + 1) * one], m, depth, ROWS) for g in range(groups)]
    return np.concatenate(parts).reshape(kernel)


def _weights(w: np.ndarray, packed: bool, layout: str, kernel, groups: int, width: int = COLS,
             align: int = ALIGN) -> np.ndarray:
    return unpack(w, layout, tuple(kernel), groups, width, align) if packed else w


def requantize(acc: np.ndarray, bias: np.ndarray, scale: np.ndarray, y_zero: int, lo: int, hi: int,
               out: str) -> np.ndarray:
    """The exact requantization (ks::qtile::requantize): f32 product, clamp, round half to even."""
    v = (acc + bias).astype(np.float32) * scale.astype(np.float32)
    v = np.clip(v, np.float32(lo - y_zero), np.float32(hi - y_zero))
    return (np.rint(v).astype(np.int64) + y_zero).astype(np.uint8 if out == "u8" else np.int8)


# ---- qconv ------------------------------------------------------------------------------------------------------

def _logical(w: Type, packed: bool, kernel, layout: str, groups: int, what: str, width: int = COLS,
             sums: bool = True, align: int = ALIGN) -> Type:
    """The weights' own type: w's, or the `kernel` shape that packed bytes w hold."""
    if not packed:
        return w
    size = packed_bytes(layout, tuple(kernel), groups, width, sums, align)
    if w.dtype != "u8" or w.rank != 1 or w.shape[0] != size:
        raise KsbuildError(f"{what}: packed weights must be the u8 [{size}] that qpack makes of {kernel}, got {w}")
    return Type("i8", tuple(kernel))


def _qconv_rule(in_types, strides, pads, dilations, groups, x_zero, y_zero, lo, hi, out, packed=False, kernel=None,
                align=ALIGN):
    x, w, bias, scale = in_types
    w = _logical(w, packed, kernel, "rows", groups, "qconv", align=align)
    _check_requant("qconv", x, w, bias, scale, w.shape[0], x_zero, y_zero, lo, hi, out)
    try:  # (conv's geometry rule, on stand-in float types)
        (y,) = _conv_prim.type_rule((Type("f32", x.shape), Type("f32", w.shape)), strides=strides, pads=pads,
                                    dilations=dilations, groups=groups)
    except KsbuildError as e:
        reason = str(e.args[0]).split(": ", 1)[-1]
        raise KsbuildError(f"qconv of {x} with kernel {w}: {reason}") from None
    return (Type(out, y.shape),)


def _qconv_eval(x, w, bias, scale, strides, pads, dilations, groups, x_zero, y_zero, lo, hi, out, env, packed=False,
                kernel=None, align=ALIGN):
    w = _weights(w, packed, "rows", kernel, groups, align=align)
    (acc,) = _conv_prim.eval(x.astype(np.int64) - x_zero, w.astype(np.int64), strides=strides, pads=pads,
                             dilations=dilations, groups=groups, env=env)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return (requantize(acc, bias.reshape(shape), scale.reshape(shape), y_zero, lo, hi, out),)


def _qconv_batch(b, ins, batched, size, **params):
    x, w, bias, scale = ins
    if any(batched[1:]):
        raise KsbuildError("vmap of qconv over its weights, bias or scale is not supported (only over images)")
    lanes, n = x.type.shape[:2]
    y = b.qconv(b.reshape(x, shape=(dim_mul(lanes, n),) + x.type.shape[2:]), w, bias, scale, **params)
    return [b.reshape(y, shape=(lanes, n) + y.type.shape[1:])], [True]


def _requant_call(ctx, eqn: Eqn, bias, scale, call: str) -> None:
    """`call`, a kernel call whose last argument is the ks::requant of the equation's bias, scale and zero points
    (ks/qconv.h), with that record before it in a block of their own. A record of constants alone (the bias and the
    scales arrays of their own, codegen/data.py; literal sizes) is a static constexpr one, in read-only data: no
    stores to build it on each call, nor room for it in the frame (28 B on a Cortex-M4); another one is on the stack,
    and the block lets the records of successive calls share their bytes of the frame."""
    p = eqn.params
    name = ctx.namer.fresh("requant")
    count = ctx.dim(scale_count(eqn))
    constant = count.isdigit() and all(ctx.data.is_array(s.base) for s in (bias, scale))
    ctx.line("{")
    ctx.depth += 1
    ctx.line(f"{'static constexpr' if constant else 'const'} ks::requant {name}{{{bias.base}, {scale.base}, {count}, "
             f"{p['x_zero']}, {p['y_zero']}, {p['lo']}, {p['hi']}}};")
    ctx.line(f"{call}{name});")
    ctx.depth -= 1
    ctx.line("}")


def _finish(ctx, y, out, dst) -> None:
    """y is what the kernel wrote into out: copied into y's place dst when that is another buffer."""
    if out is not dst:
        ctx.copy(out, dst, y.type)
    ctx.env[y] = dst


def scale_count(eqn: Eqn):
    return eqn.ins[3].type.shape[0]


def _emit_qconv(ctx, eqn: Eqn) -> None:
    x, w, bias, scale = eqn.ins
    (y,) = eqn.outs
    sx, sw = _dense(ctx, x, "image"), _dense(ctx, w, "kernel")
    sb, ss = _dense(ctx, bias, "bias"), _dense(ctx, scale, "scale")
    dst, out = _dense_target(ctx, y, "qconv")
    p = eqn.params
    shape = conv_shape(ctx, eqn, Type("i8", tuple(p["kernel"])) if p.get("packed") else None)
    geometry = ctx.namer.fresh("geometry")
    fields = shape.removeprefix("ks::conv_shape")
    ctx.line(f"{'const' if re.search(r'[A-Za-z_]', fields) else 'static constexpr'} ks::conv_shape {geometry}{fields};")
    depthwise = not eqn.params.get("packed")
    call = "ks::qconv_depthwise" if depthwise else "ks::qconv"
    _width_check(ctx, eqn)
    scratch = ctx.scratch("uint8_t", f"{call}_scratch({shape})", required=True, eqn=eqn)
    _requant_call(ctx, eqn, sb, ss, f"{call}<{ctx.ctype(x.type)}, {ctx.ctype(y.type)}>({geometry}, "
                  f"{ctx.dim(x.type.shape[0])}, {sx.base}, {sw.base}, {out.base}, {scratch}, ")
    _finish(ctx, y, out, dst)


def _qconv_scratch(eqn: Eqn, _tiles) -> int | None:
    """The bytes of ks::qconv's (ks::qconv_depthwise's) scratch (prims/scratch.py: the same on every level)."""
    x, w = eqn.ins[:2]
    p = eqn.params
    s = scratch_sizes.conv_geometry(x.type, Type("i8", tuple(p["kernel"])) if p.get("packed") else w.type,
                                    eqn.outs[0].type, p)
    if s is None:
        return None
    return scratch_sizes.qconv_scratch(s) if p.get("packed") else scratch_sizes.qconv_depthwise_scratch(s)


def _qmatmul_scratch(eqn: Eqn, _tiles) -> int | None:
    """The bytes of ks::qmatmul's scratch (prims/scratch.py), once its weights are packed."""
    if not eqn.params.get("packed"):
        return None
    if not eqn.params.get("sums", True):
        return 0  # (ks::qmatmul_folded, a microcontroller's, reads its rows in place)
    k, n = eqn.params["kernel"]
    return scratch_sizes.qmatmul_scratch(k, n) if isinstance(k, int) and isinstance(n, int) else None


def _pack_weights(layout: str):
    """The select_backend rule of an integer convolution (layout "rows") or product ("columns"): it reads its
    weights packed for the register tiles through a qpack equation (which layout_constants folds when the weights
    are constant); a depthwise convolution (ks::qconv_depthwise) reads them as they are."""
    def select(b, eqn, ins, backend, threads):
        from ..transforms.rewrite import bind_like
        p = eqn.params
        depthwise = layout == "rows" and eqn.ins[0].type.shape[1] == p["groups"] and p["groups"] > 1
        if p.get("packed") or depthwise:
            return None
        groups = p["groups"] if layout == "rows" else 1
        (packed,) = b.bind(qpack, [ins[1]], {"layout": layout, "groups": groups})
        return bind_like(b, eqn, eqn.prim, [ins[0], packed] + list(ins[2:]),
                         dict(p, packed=True, kernel=eqn.ins[1].type.shape))
    return select


qconv = Prim(
    name="qconv",
    sign=unsigned,
    nonfinite=finite,
    type_rule=_qconv_rule,
    eval=_qconv_eval,
    jvp=None,  # (8-bit results: transforms/jvp.py binds it as it is)
    batch=_qconv_batch,
    emit=_emit_qconv,
    select_backend=_pack_weights("rows"),
    scratch=_qconv_scratch,
    doc="8-bit integer convolution with int32 sums requantized to 8 bits (ONNX QLinearConv)",
    opt_outs=("jvp: 8-bit results carry no tangent",),
)


# ---- qmatmul ----------------------------------------------------------------------------------------------------

def _qmatmul_rule(in_types, x_zero, y_zero, lo, hi, out, packed=False, kernel=None, width=COLS, sums=True,
                  align=ALIGN):
    a, b, bias, scale = in_types
    b = _logical(b, packed, kernel, "columns", 1, "qmatmul", width, sums, align)
    if not sums and x_zero != unsigned_zero(a.dtype):
        raise KsbuildError(f"qmatmul: weights packed without their sums need x_zero {unsigned_zero(a.dtype)} "
                           f"(the tiles' zero point 0), not {x_zero}")
    if a.rank < 1 or b.rank != 2 or a.shape[-1] != b.shape[0]:
        raise KsbuildError(f"qmatmul of {a} and {b}: expected [..., K] and [K, N]")
    _check_requant("qmatmul", a, b, bias, scale, b.shape[1], x_zero, y_zero, lo, hi, out, sums=True)
    return (Type(out, a.shape[:-1] + (b.shape[1],)),)


def _qmatmul_eval(a, b, bias, scale, x_zero, y_zero, lo, hi, out, env, packed=False, kernel=None, width=COLS,
                  sums=True, align=ALIGN):
    b = _weights(b, packed, "columns", kernel, 1, width, align)
    acc = (a.astype(np.int64) - x_zero) @ b.astype(np.int64)
    if out == "i32":
        return ((acc + bias).astype(np.int32),)
    if out == "f32":
        return ((acc + bias).astype(np.int32).astype(np.float32) * scale.astype(np.float32),)
    return (requantize(acc, bias, scale, y_zero, lo, hi, out),)


def _qmatmul_batch(b, ins, batched, size, **params):
    if any(batched[1:]):
        raise KsbuildError("vmap of qmatmul over its weights, bias or scale is not supported (only over rows)")
    return [b.qmatmul(*ins, **params)], [True]


def _emit_qmatmul(ctx, eqn: Eqn) -> None:
    a, b, bias, scale = eqn.ins
    (y,) = eqn.outs
    sa, sb = _dense(ctx, a, "rows"), _dense(ctx, b, "weights")
    sbias, ss = _dense(ctx, bias, "bias"), _dense(ctx, scale, "scale")
    dst, out = _dense_target(ctx, y, "qmatmul")
    k, n = (ctx.dim(d) for d in (eqn.params["kernel"] if eqn.params.get("packed") else b.type.shape))
    if not eqn.params.get("packed"):
        raise KsbuildError("internal: a qmatmul reaches the C++ without packed weights (select_backend packs them)")
    _width_check(ctx, eqn)
    folded = not eqn.params.get("sums", True)
    scratch = "nullptr" if folded else ctx.scratch("uint8_t", f"ks::qmatmul_scratch({k}, {n})", required=True, eqn=eqn)
    if folded:
        ctx.line("static_assert(ks::qtile::bias_offsets, \"weights packed without their sums (ksbuild/transforms/"
                 "narrow_qpacks.py: a microcontroller's) are read by a ks::qmatmul that takes the bias as offsets\");")
    rows = ctx.dim(numel(a.type.shape[:-1])) if a.type.rank > 1 else "1"
    fn = "ks::qmatmul_folded" if folded else "ks::qmatmul"  # (folded: the bias is the offsets, ks/qconv.h)
    _requant_call(ctx, eqn, sbias, ss, f"{fn}<{ctx.ctype(a.type)}, {ctx.ctype(y.type)}>({rows}, {k}, {n}, {sa.base}, "
                  f"{k}, {sb.base}, {out.base}, {scratch}, ")
    _finish(ctx, y, out, dst)


qmatmul = Prim(
    name="qmatmul",
    sign=unsigned,
    nonfinite=finite,
    type_rule=_qmatmul_rule,
    eval=_qmatmul_eval,
    jvp=None,  # (integer results: transforms/jvp.py binds it as it is; out f32 only after the transformations)
    batch=_qmatmul_batch,
    emit=_emit_qmatmul,
    select_backend=_pack_weights("columns"),
    scratch=_qmatmul_scratch,
    doc="8-bit integer matrix product with int32 sums requantized to 8 bits (ONNX QLinearMatMul, QGemm) or kept "
        "(out i32: MatMulInteger) or scaled as float (out f32: MatMulIntegerToFloat)",
    opt_outs=("jvp: integer results carry no tangent, and the float form (out f32) is made by "
              "transforms/float_products.py, a pass after the transformations",),
)


# ---- qpack ------------------------------------------------------------------------------------------------------

def _qpack_rule(in_types, layout, groups, width=COLS, sums=True, align=ALIGN):
    (w,) = in_types
    if w.dtype != "i8" or not all(isinstance(d, int) for d in w.shape) or (layout == "columns" and w.rank != 2) or \
            layout not in ("rows", "columns") or width not in (COLS, NARROW_COLS) or \
            (not sums and layout != "columns") or align not in (ALIGN, NARROW_ALIGN):
        raise KsbuildError(f"qpack of {w} ({layout}, width {width}, sums {sums}, align {align}): expected literal i8 "
                           "weights")
    return (Type("u8", (packed_bytes(layout, w.shape, groups, width, sums, align),)),)


def _width_check(ctx, eqn: Eqn) -> None:
    """Narrow columns and padding (params width and align: transforms/narrow_qpacks.py) only where the C++ packs and
    reads them so."""
    if eqn.params.get("width", COLS) != COLS:
        ctx.line(f"static_assert(ks::qtile::product_cols == {eqn.params['width']}, \"a product's packed columns "
                 f"(ksbuild/transforms/narrow_qpacks.py: a microcontroller's) are ks::qtile::product_cols\");")
    if eqn.params.get("align", ALIGN) != ALIGN:
        ctx.line(f"static_assert(ks::qtile::pack_align == {eqn.params['align']}, \"packed weights' padding "
                 f"(ksbuild/transforms/narrow_qpacks.py: a microcontroller's) is ks::qtile::pack_align\");")


def _emit_qpack(ctx, eqn: Eqn) -> None:
    (w,), (y,) = eqn.ins, eqn.outs
    sw = _dense(ctx, w, "weights")
    dst, out = _dense_target(ctx, y, "packed")
    if not eqn.params.get("sums", True):
        raise KsbuildError("internal: a qpack without sums reaches the C++ (narrow_qpacks makes them of constant "
                           "weights only, which layout_constants packs when the package is compiled)")
    _width_check(ctx, eqn)
    if eqn.params["layout"] == "columns":
        k, n = w.type.shape
        ctx.line(f"ks::qpack_columns({k}, {n}, {sw.base}, {out.base});")
    else:
        depth = numel(w.type.shape[1:])
        ctx.line(f"ks::qpack_rows({w.type.shape[0]}, {depth}, {eqn.params['groups']}, {sw.base}, {out.base});")
    _finish(ctx, y, out, dst)


def unsigned_zero(dtype: str) -> int:
    """The activations' zero point at which the tiles' is 0 (ks::qtile::tile_zero on a core without SDOT): u8 0,
    i8 -128 (the tiles multiply an int8 activation's byte + 128)."""
    return 0 if dtype == "u8" else -128


qpack = Prim(
    name="qpack",
    sign=unsigned,
    nonfinite=finite,
    type_rule=_qpack_rule,
    eval=lambda w, layout, groups, env, width=COLS, sums=True, align=ALIGN: (pack(w, layout, groups, width, sums,
                                                                                   align),),
    jvp=None,  # (lowering only: the select_backend pass makes it, after every transformation)
    batch=None,
    emit=_emit_qpack,
    precompute=True,
    lowering=True,
    opt_outs=("jvp: lowering only (transformations run before it)", "batch: lowering only",
              "transpose: lowering only"),
    doc="int8 weights packed in the register tiles' layout (ks::qpack_rows, ks::qpack_columns)",
)


# ---- qlookup ----------------------------------------------------------------------------------------------------

def _qlookup_rule(in_types):
    table, x = in_types
    if table.dtype not in ACTIVATIONS or table.shape != (256,) or x.dtype not in ACTIVATIONS:
        raise KsbuildError(f"qlookup of {x} in {table}: expected a u8 or i8 table [256] and u8 or i8 bytes")
    return (Type(table.dtype, x.shape),)


def _qlookup_batch(b, ins, batched, size, **params):
    if batched[0]:
        raise KsbuildError("vmap of qlookup over its table is not supported (only over its bytes)")
    return [b.qlookup(*ins)], [True]


def _emit_qlookup(ctx, eqn: Eqn) -> None:
    table, x = eqn.ins
    (y,) = eqn.outs
    st, sx = _dense(ctx, table, "table"), _dense(ctx, x, "bytes")
    dst, out = _dense_target(ctx, y, "qlookup")
    ctx.line(f"ks::qlookup<{ctx.ctype(x.type)}, {ctx.ctype(y.type)}>({ctx.dim(numel(x.type.shape))}, {st.base}, "
             f"{sx.base}, {out.base});")
    _finish(ctx, y, out, dst)


qlookup = Prim(
    name="qlookup",
    sign=unsigned,
    nonfinite=finite,
    type_rule=_qlookup_rule,
    eval=lambda table, x, env: (table[np.asarray(x).astype(np.uint8)],),
    jvp=None,  # (8-bit results: transforms/jvp.py binds it as it is)
    batch=_qlookup_batch,
    emit=_emit_qlookup,
    doc="an 8-bit tensor mapped through a 256-entry table (a unary region of an int8 model, tabulated)",
    opt_outs=("jvp: 8-bit results carry no tangent",),
)


# ---- qsoftmax ---------------------------------------------------------------------------------------------------

def _qsoftmax_rule(in_types, ratio, y_zero, lo, hi):
    table, x = in_types
    if table.dtype != "f32" or table.shape != (256,) or x.dtype not in ACTIVATIONS or x.rank < 1:
        raise KsbuildError(f"qsoftmax of {x} with {table}: expected an f32 table [256] and u8 or i8 bytes")
    return (Type(x.dtype, x.shape),)


def qsoftmax_reference(table, x, ratio, y_zero, lo, hi, env=None):
    """ks::qsoftmax in numpy: the row sums left to right in f32, the quotients in double."""
    xi = np.asarray(x).astype(np.int64)
    e = np.asarray(table, np.float32)[xi - xi.max(-1, keepdims=True) + 255]
    s = np.zeros(e.shape[:-1], np.float32)
    for k in range(e.shape[-1]):
        s = (s + e[..., k]).astype(np.float32)
    q = np.minimum(e.astype(np.float64) * ratio / s[..., None].astype(np.float64), hi - y_zero + 1.0)
    return (np.clip(np.rint(q) + y_zero, lo, hi).astype(np.asarray(x).dtype),)


def _qsoftmax_batch(b, ins, batched, size, **params):
    if batched[0]:
        raise KsbuildError("vmap of qsoftmax over its table is not supported (only over its rows)")
    return [b.qsoftmax(*ins, **params)], [True]


def _emit_qsoftmax(ctx, eqn: Eqn) -> None:
    table, x = eqn.ins
    (y,) = eqn.outs
    st, sx = _dense(ctx, table, "table"), _dense(ctx, x, "bytes")
    dst, out = _dense_target(ctx, y, "qsoftmax")
    rows = ctx.dim(numel(x.type.shape[:-1])) if x.type.rank > 1 else "1"
    p = eqn.params
    ctx.line(f"ks::qsoftmax<{ctx.ctype(x.type)}>({rows}, {ctx.dim(x.type.shape[-1])}, {st.base}, {sx.base}, "
             f"{out.base}, {float(p['ratio'])!r}, {p['y_zero']}, {p['lo']}, {p['hi']});")
    _finish(ctx, y, out, dst)


qsoftmax = Prim(
    name="qsoftmax",
    sign=unsigned,
    nonfinite=finite,
    type_rule=_qsoftmax_rule,
    eval=qsoftmax_reference,
    jvp=None,  # (8-bit results: transforms/jvp.py binds it as it is)
    batch=_qsoftmax_batch,
    emit=_emit_qsoftmax,
    doc="onnxruntime's QLinearSoftmax of 8-bit rows (the last axis) through its table of exponentials (ks::qsoftmax)",
    opt_outs=("jvp: 8-bit results carry no tangent",),
)
