"""convolve: the lowering of `conv` (prims/conv.py), one prelude call for a whole batch of images.

convolve[strides, pads, dilations, groups, impl, epilogue?](x, w, *extra) -> y
    impl "tiles" is ks::conv (prelude/ks/conv.h: the kernel packed in row tiles, im2col blocks packed in
    panels for ks/gemm.h's register tiles, the epilogue applied as each element is stored), "gemm"
    ks::conv_rows with the backend's ks::gemm (ks/blas.h, ks/aten.h; the epilogue applied to each block
    just computed), "winograd" ks::conv_winograd (Winograd's F(2×2, 3×3) on the register tiles; w is then
    the transformed kernel u [16, C, M] that winograd_kernel makes), "depthwise" ks::conv_depthwise (one group
    per input channel: each channel copied zero-padded, then every tap's weight times vectors of the copy), "dots"
    ks::conv_dots (a target without a vector unit: transforms/dot_convs.py; each output position's window gathered,
    then dotted with the kernel's rows), "loops" a loop nest over literal sizes in the generated code (the same
    targets at optimize = "size", a network of few convolutions: prims/conv_loops.py), "pointwise"
    ks::conv_pointwise (a pointwise convolution over few positions
    computed transposed, the positions as the register tiles' rows: w is then the kernel's transpose stored as
    panels [ceil(M / P), C, P] by transforms/layout_constants.py, and the param `cols` is M; a convolution with a
    window, taps, a stride or padding, over few positions likewise by its im2col blocks: its kernel's transpose
    [C·K, M] stored as panels block by block, window_panels, and the param `window` its spatial sides). The epilogue
    (transforms/fuse_epilogue.py) is called with the image, the output channel and the flat output position.
winograd_kernel(w) -> u
    u [16, C, M] = G g Gᵀ for each 3×3 kernel g of w [M, C, 3, 3] (ks::winograd_kernel); a constant w is
    transformed when the package is compiled (transforms/layout_constants.py).
"""
from __future__ import annotations

import math
import re

import numpy as np

from ..codegen import epilogue as epilogues
from ..errors import KsbuildError
from ..ir.core import Eqn
from ..ir.types import Type, element_bytes, numel
from . import scratch as scratch_sizes
from .base import Prim, finite, first_rows, unsigned
from .conv import conv as _conv_prim
from .conv_loops import emit_conv_loops
from .lowering import (
    OPT_OUTS,
    PARALLEL_MIN_MACS,
    apply_epilogue,
    apply_in_place,
    epilogue_type,
    from_panels,
    to_panels,
)

# Winograd's F(2×2, 3×3) (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks", 2016): the
# kernel transform G; prelude/ks/conv.h has the whole algorithm.
WINOGRAD_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
# When Winograd is faster than ks::conv's direct path (docs/performance.md, measured on AVX-512 over channels
# 16..128 and sides 4..56): with fewer than 2048 channel pairs (input x output) the transforms cost about what
# the products save, and output sides shorter than 6 give too few tiles to fill a panel.
WINOGRAD_MIN_CHANNELS = 16
WINOGRAD_MIN_PAIRS = 2048
WINOGRAD_MIN_SIZE = 6
# Below sides of 8 (at most 16 tiles per image) a kernel of 256 × 256 channel pairs or more stays direct: Winograd's
# transformed kernel is 16/9 the size of the direct one and is read once per image for those few tiles (AMD EPYC with
# AVX-512, one image: 512 × 512 at 7 × 7 took 1.8× the direct path's time, 256 × 256 1.2×).
WINOGRAD_SMALL_SIDE = 8
WINOGRAD_SMALL_MAX_PAIRS = 256 * 256
# ks::conv_pointwise (pointwise_applies): for planes whose positions end in a panel at most this full (a fraction), and
# of at least this many positions (fewer: ks::conv's dot products, convs::few_positions).
POINTWISE_MAX_TAIL = 0.5
POINTWISE_MIN_POSITIONS = 16
# ... and with at least this many input channels: the result's transposition costs as much per output value whatever
# the channels, the products' saving grows with them (AVX-512, 14 × 14: 384 -> 64 channels 1.11 -> 0.95 onnxruntime's
# time, 64 -> 384 1.00 -> 1.25; 7 × 7: 320 -> 1280 1.19 -> 1.13, 160 -> 960 1.17 -> 1.16).
POINTWISE_MIN_DEPTH = 192
# ... or, for a pointwise convolution (no window) whose last panel of positions holds at most this fraction (7 × 7 = 3 ·
# 16 + 1), from at least POINTWISE_SPARSE_MIN_DEPTH input channels: ks::conv's panels there are a quarter padding, which
# costs more than the copy out (AVX2 on an AMD Zen 3, 8 positions a step by untranspose8, one image: 160 -> 960 at 7 ×
# 7 0.84-0.85 of ks::conv's time, 96 -> 576 0.85; at 14 × 14, 4 of 16 positions in the last panel, 64 -> 384 1.12-1.16,
# 112 -> 672 0.89-1.07: those stay with ks::conv).
POINTWISE_SPARSE_TAIL = 0.125
POINTWISE_SPARSE_MIN_DEPTH = 96
# A convolution with a window (taps, a stride or padding) taken by ks::conv_pointwise the same way, by its im2col blocks
# (docs/performance.md: ResNet-18's 3 × 3 layers at 7 × 7 at batch 1, whose last panel of 16 positions held one):
# its kernel's transpose [C·K, M] stored as panels block by block, each block the rows of WINDOW_BLOCK_BYTES of it
# (ks::convs::window_channels: whole input channels), and at most WINDOW_MAX_ROWS output rows (pack_strided's chunks:
# one run per output row, at most 2 · 4 panels of positions' worth).
WINDOW_BLOCK_BYTES = 512 * 1024
WINDOW_MAX_ROWS = 64


IMPLS = ("tiles", "gemm", "winograd", "depthwise", "dots", "pointwise", "loops")


def winograd_transform(w: np.ndarray) -> np.ndarray:
    """u [16, C, M] of a kernel w [M, C, 3, 3] (in float64, then w's dtype)."""
    g = w.astype(np.float64)
    u = np.einsum("ri,mcij,sj->rscm", WINOGRAD_G, g, WINOGRAD_G)
    return u.reshape((16,) + u.shape[2:]).astype(w.dtype)


def winograd_untransform(u: np.ndarray) -> np.ndarray:
    """The kernel w [M, C, 3, 3] whose transform is u (G has a left inverse)."""
    inv = np.linalg.pinv(WINOGRAD_G)
    g = np.einsum("ir,rscm,js->mcij", inv, u.astype(np.float64).reshape((4, 4) + u.shape[1:]), inv)
    return g.astype(u.dtype)


def winograd_applies(x: Type, w: Type, y: Type, strides, dilations, groups) -> bool:
    """Whether a conv of x with kernel w (output y) is computed by Winograd's F(2×2, 3×3): a 2-d float 3×3
    convolution with stride 1, dilation 1, one group, enough channels (at least 16 each way and 2048 pairs) and
    literal output sides of at least 6 (symbolic ones are taken to be large), and of at least 8 with 256 × 256
    channel pairs or more."""
    if x.rank != 4 or x.dtype not in ("f32", "f64") or tuple(w.shape[2:]) != (3, 3) or groups != 1:
        return False
    if tuple(strides) != (1, 1) or tuple(dilations) != (1, 1):
        return False
    c, m = w.shape[1], w.shape[0]
    if not (isinstance(c, int) and isinstance(m, int)) or min(c, m) < WINOGRAD_MIN_CHANNELS or \
            c * m < WINOGRAD_MIN_PAIRS:
        return False
    sides = [d for d in y.shape[2:] if isinstance(d, int)]
    if c * m >= WINOGRAD_SMALL_MAX_PAIRS and min(sides, default=WINOGRAD_SMALL_SIDE) < WINOGRAD_SMALL_SIDE:
        return False
    return min(sides, default=WINOGRAD_MIN_SIZE) >= WINOGRAD_MIN_SIZE


def depthwise_applies(x: Type, groups: int) -> bool:
    """Whether a conv of x is computed by ks::conv_depthwise: a float convolution with one group per input channel
    (more than one: a single-channel image stays with the register tiles), any stride, dilation and padding."""
    c = x.shape[1] if x.rank >= 3 else None
    return x.dtype in ("f32", "f64") and isinstance(c, int) and groups == c and groups > 1


def _kernel_type(u: Type) -> Type:
    """The [M, C, 3, 3] kernel type of a transformed kernel u [16, C, M]."""
    return Type(u.dtype, (u.shape[2], u.shape[1], 3, 3))


def given_kernel(w: Type, params) -> Type:
    """The [M, C/G, taps...] type of the kernel a convolve with `params` computes with, whose operand has type w:
    transformed (winograd), stored as panels (pointwise) or as it is."""
    if params.get("impl") == "winograd":
        return _kernel_type(w)
    if params.get("impl") == "pointwise":
        window = tuple(params.get("window", (1,) * len(params["strides"])))
        return Type(w.dtype, (params["cols"], w.shape[1] // math.prod(window)) + window)
    return w


def window_channels(channels: int, out_channels: int, taps: int, size: int) -> int:
    """ks::convs::window_channels: the input channels of one block of a windowed kernel's panels."""
    return max(1, min(channels, WINDOW_BLOCK_BYTES // (out_channels * taps * size)))


def window_panels(kernel: np.ndarray) -> np.ndarray:
    """The transpose [C·K, M] of a kernel [M, C, window...] as panels [ceil(M / P), C·K, P] stored block by block
    (each block's rows, window_channels input channels' worth, as to_panels stores them, one block after the other):
    what ks::conv_pointwise reads for a convolution with a window."""
    m, c = kernel.shape[:2]
    taps = math.prod(kernel.shape[2:])
    wt = kernel.reshape(m, c * taps).T
    cc = window_channels(c, m, taps, kernel.dtype.itemsize)
    blocks = [to_panels(wt[c0 * taps:(c0 + cc) * taps]).ravel() for c0 in range(0, c, cc)]
    return np.concatenate(blocks).reshape(-(-m // (64 // kernel.dtype.itemsize)), c * taps, -1)


def window_kernel(panels: np.ndarray, cols: int, window: tuple) -> np.ndarray:
    """The kernel [cols, C, window...] that window_panels stored."""
    j, depth, p = panels.shape
    taps = math.prod(window)
    c = depth // taps
    cc = window_channels(c, cols, taps, panels.dtype.itemsize)
    flat, rows, at = panels.ravel(), [], 0
    for c0 in range(0, c, cc):
        kc = min(cc, c - c0) * taps
        rows.append(from_panels(flat[at:at + j * kc * p].reshape(j, kc, p), cols))
        at += j * kc * p
    return np.concatenate(rows).T.reshape((cols, c) + tuple(window))


def pointwise_applies(x: Type, w: Type, y: Type, params) -> bool:
    """Whether a convolve of the plain backend's tiles (x, w: its operands, y: its result) runs as ks::conv_pointwise:
    a float pointwise convolution (one group, 1 × 1 taps, stride 1, no padding) of literal sizes over at least
    POINTWISE_MIN_POSITIONS positions whose last panel of positions is at most POINTWISE_MAX_TAIL full (the register
    tiles' lanes that ks::conv would leave padding: 7 × 7 = 3 · 16 + 1, 14 × 14 = 12 · 16 + 4), from at least
    POINTWISE_MIN_DEPTH input channels (POINTWISE_SPARSE_MIN_DEPTH for a pointwise one whose last panel is at most
    POINTWISE_SPARSE_TAIL full: 7 × 7)."""
    k = x.rank - 2
    if params.get("impl") != "tiles" or x.dtype not in ("f32", "f64") or params["groups"] != 1 or k < 1:
        return False
    sizes = [*x.shape[1:], *y.shape[1:], *w.shape[2:]]
    if not all(isinstance(d, int) for d in sizes):
        return False
    n, panel = math.prod(y.shape[2:]), 64 // element_bytes(x.dtype)
    if n < POINTWISE_MIN_POSITIONS or not 0 < n % panel <= POINTWISE_MAX_TAIL * panel:
        return False
    if not windowed(x, w, y, params):
        sparse = n % panel <= POINTWISE_SPARSE_TAIL * panel
        return x.shape[1] >= (POINTWISE_SPARSE_MIN_DEPTH if sparse else POINTWISE_MIN_DEPTH)
    return x.shape[1] * math.prod(w.shape[2:]) >= POINTWISE_MIN_DEPTH and math.prod(y.shape[2:-1]) <= WINDOW_MAX_ROWS


def windowed(x: Type, w: Type, y: Type, params) -> bool:
    """Whether a convolution is not a pointwise one (ks::convs::windowed: taps, a stride or padding)."""
    k = x.rank - 2
    return tuple(w.shape[2:]) != (1,) * k or tuple(params["strides"]) != (1,) * k or any(params["pads"]) or \
        tuple(x.shape[2:]) != tuple(y.shape[2:])


def _convolve_rule(in_types, impl, epilogue=None, **geometry):
    if impl not in IMPLS:
        raise KsbuildError(f"internal: unknown convolution implementation '{impl}'")
    x, w = in_types[:2]
    cols, window = geometry.pop("cols", None), geometry.pop("window", None)
    extra = {"window": window} if window is not None else {}
    (y,) = _conv_prim.type_rule((x, given_kernel(w, dict(geometry, impl=impl, cols=cols, **extra))), **geometry)
    return (epilogue_type(y, in_types[2:], epilogue),)


def _convolve_rows(eqn: Eqn, n):
    """Image i of the result reads image i alone (the kernel and bias whole); not once an epilogue is fused, whose
    operands may be per image."""
    return first_rows(eqn, n) if eqn.params.get("epilogue") is None else None


def _convolve_eval(x, w, *extra, impl, env, epilogue=None, cols=None, window=None, **geometry):
    if impl == "winograd":
        w = winograd_untransform(w)
    elif impl == "pointwise" and window is not None:
        w = window_kernel(w, cols, window)
    elif impl == "pointwise":
        w = from_panels(w, cols).T.reshape((cols, w.shape[1]) + (1,) * len(geometry["strides"]))
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


def _dense_target(ctx, v, hint: str):
    """(v's storage, a dense row-major buffer to compute it into: that storage, or a new one copied into it)."""
    dst = ctx.target(v, hint)
    return dst, dst if dst.contiguous or dst.dense() else ctx.alloc(v.type, hint)


def conv_shape(ctx, eqn: Eqn, kernel: Type | None = None) -> str:
    """The ks::conv_shape of a convolution (ks/conv.h): spatial axes padded in front to three; `kernel`, the kernel's
    type when the equation reads it transformed or packed."""
    x, w = eqn.ins[:2]
    p, y = eqn.params, eqn.outs[0]
    kernel = kernel or given_kernel(w.type, p)
    k = x.type.rank - 2
    lead = 3 - k

    def dim(v) -> str:  # (a symbolic size converted: a conv_shape's fields are int32_t on a 32-bit target)
        s = ctx.dim(v)
        return s if re.fullmatch(r"-?\d+", s) else f"ks::conv_dim({s})"

    def triple(values, fill) -> str:
        return "{" + ", ".join([str(fill)] * lead + [dim(v) for v in values]) + "}"

    return (f"ks::conv_shape{{{dim(x.type.shape[1])}, {dim(kernel.shape[0])}, {p['groups']}, "
            f"{triple(x.type.shape[2:], 1)}, {triple(y.type.shape[2:], 1)}, {triple(kernel.shape[2:], 1)}, "
            f"{triple(p['strides'], 1)}, {triple(p['dilations'], 1)}, {triple(p['pads'][:k], 0)}}}")


def emit_convolve(ctx, eqn: Eqn, impl: str) -> None:
    """One ks::conv (ks::conv_rows, ks::conv_winograd) call over all images, or impl "loops"'s loop nest; x, w and y
    dense row-major."""
    x, w = eqn.ins[:2]
    (y,) = eqn.outs
    c = ctx.ctype(y.type)
    sx, sw = _dense(ctx, x, "image"), _dense(ctx, w, "kernel")
    dst, out = _dense_target(ctx, y, "conv")
    if impl == "loops":
        emit_conv_loops(ctx, eqn, sx, sw, out)
        if out is not dst:
            ctx.copy(out, dst, y.type)
        ctx.env[y] = dst
        return
    shape = conv_shape(ctx, eqn)
    threads = eqn.params.get("threads", 0)
    scratch = ctx.scratch(c, _scratch_size(c, impl, shape, threads, ctx.dim(x.type.shape[0])), required=True, eqn=eqn)
    scoped = eqn.params.get("epilogue") is not None  # (its lambda in a block of its own: frames share the room)
    if scoped:
        ctx.line("{")
        ctx.depth += 1
    geometry = ctx.namer.fresh("geometry")
    fields = shape.removeprefix("ks::conv_shape")
    # (literal sizes: a constant in read-only data, not 168 bytes of stack per convolution)
    storage = "const" if re.search(r"[A-Za-z_]", fields) else "static constexpr"
    # (ks::dots_shape<U>: at optimize = "size" on a microcontroller its sizes in U, 21 or 42 bytes, when they fit)
    sizes = [int(v) for v in re.findall(r"-?\d+", fields)]
    kind = "ks::conv_shape"
    if impl == "dots" and storage != "const" and threads <= 1 and 0 <= min(sizes) and max(sizes) < 65536:
        kind = f"ks::dots_shape<{'uint8_t' if max(sizes) < 256 else 'uint16_t'}>"
    ctx.line(f"{storage} {kind} {geometry}{fields};")
    epi = _epilogue(ctx, eqn, impl) if eqn.params.get("epilogue") is not None else None
    images = ctx.dim(x.type.shape[0])
    if threads > 1:
        per = _image_macs(eqn)
        when = f"{images} * {per} >= {PARALLEL_MIN_MACS}" if per is not None and not images.isdigit() else ""
        count = "" if impl == "winograd" else f"ks::parts::conv_parts({threads}, {geometry}, {images})"
        _emit_parts(ctx, impl, threads, when, count, c,
                    f"{geometry}, {images}, {sx.base}, {sw.base}, {out.base}, {scratch}", epi)
    else:
        _emit_call(ctx, impl, c, geometry, storage, images, f"{sx.base}, {sw.base}, {out.base}, {scratch}", epi)
    if scoped:
        ctx.depth -= 1
        ctx.line("}")
    if out is not dst:
        ctx.copy(out, dst, y.type)
    if eqn.params.get("epilogue") is not None and epi is None:
        apply_in_place(ctx, eqn, dst)
    ctx.env[y] = dst


def _scratch_size(c: str, impl: str, shape: str, threads: int, images: str) -> str:
    """The C++ expression of a call's scratch elements (ks/conv.h); a ks::conv_as call (_emit_call: literal shapes and
    images) packs the kernel only when its method does."""
    size = {"tiles": "ks::conv_scratch<{c}>({s})", "gemm": "ks::conv_scratch<{c}>({s}, true)",
            "winograd": "ks::winograd_scratch<{c}>({s})", "depthwise": "ks::depthwise_scratch<{c}>({s})",
            "dots": "ks::convs::dots_scratch({s})", "pointwise": "ks::pointwise_scratch<{c}>({s})"}[impl]
    size = size.format(c=c, s=shape)
    if impl == "tiles" and threads <= 1 and _as_plan(shape, images):
        size = f"ks::conv_scratch<{c}>({shape}, false, {images})"
    return f"ks::parts::room({threads}, {size})" if threads > 1 else size  # (each part its own slice: ks/parts.h)


def _as_plan(shape: str, images: str) -> bool:
    """Whether a ks::conv call has literal sizes and images (then ks::conv_as with a constant plan: _emit_call)."""
    return not re.search(r"[A-Za-z_]", shape.removeprefix("ks::conv_shape")) and images.isdigit()


def _emit_call(ctx, impl: str, c: str, geometry: str, storage: str, images: str, buffers: str, epi) -> None:
    """One kernel-layer call over the whole convolution."""
    call = {"tiles": "ks::conv", "gemm": "ks::conv_rows", "winograd": "ks::conv_winograd",
            "depthwise": "ks::conv_depthwise", "dots": "ks::conv_dots",
            "pointwise": "ks::conv_pointwise"}[impl] + f"<{c}"
    args = f"{geometry}, {images}"
    if impl == "tiles" and storage == "static constexpr" and images.isdigit():
        # (shapes known: the method and plan ks::conv would choose, constants, so that the others are not linked)
        plan = ctx.namer.fresh("plan")
        ctx.line(f"static constexpr ks::convs::conv_plan {plan} = ks::convs::plan_of<{c}>({geometry}, {images});")
        call, args = f"ks::conv_as<{c}, ks::convs::method_of<{c}>({geometry}, {images})", f"{plan}, {args}"
    product = ", ks::library_gemm{}" if impl == "gemm" else ""
    ctx.line(f"{call}>({args}, {buffers}{product}{f', {epi}' if epi else ''});")


def _emit_parts(ctx, impl: str, threads: int, when: str, count: str, c: str, args: str, epi) -> None:
    """The convolution in parts on `threads` threads (ks/parts.h: ranges of images or of output channels, each
    thread with its own slice of the scratch; ks/pool.h runs them); `count`, a C++ expression of the number of
    parts (else one per thread); `when`, a C++ condition for splitting."""
    fn = {"tiles": "ks::parts::conv", "winograd": "ks::parts::winograd", "depthwise": "ks::parts::depthwise"}[impl]
    ctx.run_parts(threads, when, lambda part, parts, slot: f"{fn}<{c}>({part}, {parts}, {slot}, {args}"
                                                           f"{f', {epi}' if epi else ''});", count)


def _image_macs(eqn: Eqn) -> int | None:
    """The multiply-adds of one image of a convolution (None when a size is symbolic)."""
    w, y = eqn.ins[1], eqn.outs[0]
    taps = given_kernel(w.type, eqn.params).shape[1:]
    sizes = [*y.type.shape[1:], *taps]
    return math.prod(sizes) if all(isinstance(d, int) for d in sizes) else None


def _parallel(eqn: Eqn) -> bool:
    """Whether a convolution runs in parts on the threads (ks/parts.h): a kernel of the plain backend's (a BLAS call
    threads itself) with enough work to pay for a parallel region (PARALLEL_MIN_MACS, when the sizes are known; a
    symbolic batch is checked when it runs: _emit_parts)."""
    if eqn.params["impl"] not in ("tiles", "winograd", "depthwise"):
        return False
    images, per = eqn.ins[0].type.shape[0], _image_macs(eqn)
    return per is None or not isinstance(images, int) or images * per >= PARALLEL_MIN_MACS


def _epilogue(ctx, eqn: Eqn, impl: str) -> str | None:
    """The kernel's epilogue argument: a bias and clamps as data (ks::affine_epilogue, applied in registers by
    the tiles and depthwise kernels), else a lambda called with (image, channel, flat position), the result's
    spatial axes merged."""
    y = eqn.outs[0]
    views = lambda s: epilogues.merge_tail(s, 2)  # noqa: E731
    simple = epilogues.affine(ctx, eqn, views) if impl in ("tiles", "depthwise", "dots", "pointwise") else None
    if simple is not None:
        name = ctx.namer.fresh("epilogue")
        ctx.line(f"const auto {name} = {simple};")
        return f"ks::affine_epilogue<{ctx.ctype(y.type)}>({name})"
    if y.type.rank > 3 and any(e.prim.name == "iota" for e in eqn.params["epilogue"].eqns):
        return None  # (an iota along a spatial axis needs that axis's own index)
    n, m, q = (ctx.namer.fresh(h) for h in ("image", "channel", "position"))
    merged = y.type.shape[:2] + (numel(y.type.shape[2:]),)
    name = epilogues.declare(ctx, eqn, [n, m, q], merged, [n, m, q], views=views)
    return f"ks::conv_epilogue<{ctx.ctype(y.type)}>({name})" if name else None



def _convolve_scratch(eqn: Eqn, tiles) -> int | None:
    """The bytes of scratch the call needs on the levels of `tiles` (prims/scratch.py), None when a size other than the
    batch is symbolic."""
    x, w = eqn.ins[:2]
    (y,) = eqn.outs
    impl = eqn.params["impl"]
    s = scratch_sizes.conv_geometry(x.type, given_kernel(w.type, eqn.params), y.type, eqn.params)
    if s is None:
        return None
    size, threads, images = element_bytes(y.type.dtype), eqn.params.get("threads", 0), x.type.shape[0]
    images = images if isinstance(images, int) and threads <= 1 else 0  # (a ks::conv_as call: _scratch_size)
    of = {"tiles": lambda s, n, t: scratch_sizes.conv_scratch(s, n, t, images=images),
          "gemm": lambda s, n, t: scratch_sizes.conv_scratch(s, n, t, rows=True),
          "winograd": scratch_sizes.winograd_scratch, "depthwise": scratch_sizes.depthwise_scratch,
          "dots": lambda s, n, t: scratch_sizes.dots_scratch(s),
          "pointwise": scratch_sizes.pointwise_scratch, "loops": lambda s, n, t: 0}[impl]

    def elements(t) -> int:
        n = of(s, size, t)
        return scratch_sizes.parts_room(threads, n) if threads > 1 else n
    return scratch_sizes.most_bytes(elements, size, tiles)


def _emit_winograd_kernel(ctx, eqn: Eqn) -> None:
    (w,), (u,) = eqn.ins, eqn.outs
    sw = _dense(ctx, w, "kernel")
    dst, out = _dense_target(ctx, u, "transformed")
    ctx.line(f"ks::winograd_kernel<{ctx.ctype(u.type)}>({ctx.dim(w.type.shape[0])}, {ctx.dim(w.type.shape[1])}, "
             f"{sw.base}, {out.base});")
    if out is not dst:
        ctx.copy(out, dst, u.type)
    ctx.env[u] = dst


def _winograd_kernel_rule(in_types):
    (w,) = in_types
    return (Type(w.dtype, (16, w.shape[1], w.shape[0])),)


winograd_kernel = Prim(
    name="winograd_kernel",
    sign=unsigned,
    nonfinite=finite,
    type_rule=_winograd_kernel_rule,
    eval=lambda w, env: (winograd_transform(w),),
    jvp=None,  # (lowering only: OPT_OUTS)
    batch=None,
    emit=_emit_winograd_kernel,
    precompute=True,
    doc="a 3×3 kernel [M, C, 3, 3] transformed for Winograd's F(2×2, 3×3): u [16, C, M] (ks::winograd_kernel)",
    opt_outs=OPT_OUTS,
    lowering=True,
)

convolve = Prim(
    name="convolve",
    sign=unsigned,
    nonfinite=finite,
    epilogue_impls=IMPLS,
    type_rule=_convolve_rule,
    eval=_convolve_eval,
    jvp=None,  # (lowering only: OPT_OUTS)
    batch=None,
    emit=lambda ctx, eqn: emit_convolve(ctx, eqn, eqn.params["impl"]),
    rows=_convolve_rows,
    parallel=_parallel,
    scratch=_convolve_scratch,
    doc="a convolution as one ks::conv call (or ks::conv_rows with a BLAS) over the batch of images",
    opt_outs=OPT_OUTS,
    lowering=True,
)
