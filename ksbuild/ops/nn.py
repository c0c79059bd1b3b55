"""Neural-network layers as decompositions: convolution, pooling, normalization.

A float convolution is the `conv` primitive (prims/conv.py, compiled to a ks::conv call); an integer
one slides `window`s over every spatial axis of the (padded) input and contracts them with the kernel
in one `einsum`. The transpose (ConvTranspose) contracts first and `fold`s the windows back. Pooling
reduces over the windows. Layouts are ONNX/PyTorch's: x is [N, C, *spatial], a kernel is
[M, C / groups, *kernel].
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..ir.core import Atom, Lit, Var
from ..ir.types import Dim, Type, dim_add, dim_mul, dim_sub
from ._util import error, numel, scalar_lit
from .math import logical_and
from .reduce import expand_back

OUT_LETTERS = "opqr"
TAP_LETTERS = "uvwx"


def _spatial(b, x: Atom, w_rank: int | None = None) -> int:
    k = x.type.rank - 2
    if k < 1 or k > len(OUT_LETTERS):
        raise error(b, f"expected an input of rank 3 to {2 + len(OUT_LETTERS)} ([N, C, spatial...]), got {x.type}")
    return k


def _per_axis(b, values: Sequence[int] | None, k: int, default: int, what: str) -> list[int]:
    if values is None or len(values) == 0:
        return [default] * k
    if len(values) != k:
        raise error(b, f"{what} has {len(values)} entries for {k} spatial axes")
    return [int(v) for v in values]


def pad_axis(b, x: Atom, axis: int, lo: int, hi: int, value=0.0) -> Atom:
    """x with `lo` and `hi` entries of `value` before and after along axis (negative: cropped)."""
    if lo < 0 or hi < 0:
        n = x.type.shape[axis]
        x = b.slice(x, axis=axis, start=max(-lo, 0), stop=dim_sub(n, max(-hi, 0)))
        lo, hi = max(lo, 0), max(hi, 0)
    if lo == 0 and hi == 0:
        return x
    padded = b.pad(x, axis=axis, lo=lo, hi=hi)
    if not isinstance(value, (Lit, Var)) and value == 0:
        return padded
    n = padded.type.shape[axis]
    pos = b.iota(shape=(n,), axis=0, dtype="i64")
    inside = logical_and(b, b.ge(pos, Lit(lo, Type("i64"))), b.lt(pos, _i64(b, dim_add(lo, x.type.shape[axis]))))
    inside = b.reshape(inside, shape=tuple(n if i == axis else 1 for i in range(x.type.rank)))
    fill = value if isinstance(value, (Lit, Var)) else scalar_lit(value, x.type.dtype)
    return b.select(inside, padded, fill)


def _i64(b, d: Dim) -> Atom:
    return Lit(d, Type("i64")) if isinstance(d, int) else b.dim_size(dim=d)


def same_pads(b, sizes: Sequence[Dim], kernel, strides, dilations, upper: bool) -> list[int]:
    """auto_pad SAME_UPPER / SAME_LOWER: pads so that out = ceil(in / stride). With stride 1 they are (k - 1) · d
    whatever the size (torch's padding='same' with symbolic sizes); with a larger stride they depend on the size."""
    lo, hi = [], []
    for n, k, s, d in zip(sizes, kernel, strides, dilations):
        if s != 1 and not isinstance(n, int):
            raise error(b, f"auto_pad SAME with stride {s} needs static spatial sizes (the padding depends on the "
                           "size): export with fixed spatial sizes, or with explicit pads")
        total = (k - 1) * d if s == 1 else max((-(-n // s) - 1) * s + (k - 1) * d + 1 - n, 0)
        small, big = total // 2, total - total // 2
        lo.append(small if upper else big)
        hi.append(big if upper else small)
    return lo + hi


def windows(b, x: Atom, first: int, kernel, strides, dilations) -> Atom:
    """Windows along the k axes from `first`: [.., S1, S2, ..] -> [.., O1, K1, O2, K2, ..]."""
    for i, (k, s, d) in enumerate(zip(kernel, strides, dilations)):
        x = b.window(x, axis=first + 2 * i, size=k, stride=s, dilation=d)
    return x


def conv(b, x: Atom, w: Atom, bias: Atom | None, strides=None, pads=None, dilations=None, groups: int = 1) -> Atom:
    """N-d convolution (cross-correlation, as in ONNX and PyTorch) with zero padding and groups."""
    k = _spatial(b, x)
    if w.type.rank != k + 2:
        raise error(b, f"a kernel for {x.type} must have rank {k + 2}, got {w.type}")
    strides = _per_axis(b, strides, k, 1, "strides")
    dilations = _per_axis(b, dilations, k, 1, "dilations")
    pads = _per_axis(b, pads, 2 * k, 0, "pads")
    n, c = x.type.shape[:2]
    m, cg = w.type.shape[:2]
    grouped_ok = isinstance(c, int) and isinstance(m, int) and not c % groups and not m % groups \
        and c // groups == cg
    if not (grouped_ok or (groups == 1 and c == cg)):  # one group: symbolic channel counts are fine
        raise error(b, f"conv of {x.type} with kernel {w.type} and {groups} group(s): the channels do not match "
                       f"(input channels / groups must equal the kernel's axis 1)")
    if x.type.dtype in ("f32", "f64") and k <= 3:  # the conv primitive (prims/conv.py); negative pads crop first
        for i in range(k):
            x = pad_axis(b, x, 2 + i, min(pads[i], 0), min(pads[k + i], 0))
        y = b.conv(x, w, strides=tuple(strides), pads=tuple(max(p, 0) for p in pads), dilations=tuple(dilations),
                   groups=groups)
        return _add_channel_bias(b, y, bias)
    for i in range(k):  # integers and narrow floats: windows and an einsum
        x = pad_axis(b, x, 2 + i, pads[i], pads[k + i])
    x = b.reshape(x, shape=(n, groups, cg) + x.type.shape[2:])
    patches = windows(b, x, 3, w.type.shape[2:], strides, dilations)  # [N, G, C, O1, K1, O2, K2, ...]
    y = _conv_product(b, patches, w, groups)
    return _add_channel_bias(b, y, bias)


def _conv_product(b, patches: Atom, w: Atom, groups: int) -> Atom:
    """Convolution as a matrix product per image and group: the kernel's rows [G, M/G, C·K1·K2…] (a view
    broadcast over N) times the im2col matrix [N, G, C·K1·K2…, O1·O2…]. The reshape of the strided window
    view packs that matrix: for every channel and tap, whole rows of the image are copied (a loop that
    vectorizes). Neither operand is transposed (a plain gemm on the blas backend, which packs the
    columns once), and the result [N, G, M/G, O1·O2…] is already laid out as [N, M, O1, O2, …]."""
    k = (patches.type.rank - 3) // 2
    n, m, cg = patches.type.shape[0], w.type.shape[0], w.type.shape[1]
    outs = tuple(patches.type.shape[3 + 2 * i] for i in range(k))
    depth = numel((cg,) + tuple(w.type.shape[2:]))
    order = (0, 1, 2) + tuple(4 + 2 * i for i in range(k)) + tuple(3 + 2 * i for i in range(k))
    cols = b.reshape(b.transpose(patches, perm=order), shape=(n, groups, depth, numel(outs)))
    mg = m if groups == 1 else m // groups  # one group: m may be a symbolic dim
    rows = b.broadcast_to(b.reshape(w, shape=(1, groups, mg, depth)), shape=(n, groups, mg, depth))
    y = b.einsum(rows, cols, spec="ngmk,ngkp->ngmp")
    return b.reshape(y, shape=(n, m) + outs)


def _add_channel_bias(b, y: Atom, bias: Atom | None) -> Atom:
    if bias is None:
        return y
    if bias.type.rank != 1 or bias.type.shape[0] != y.type.shape[1]:
        raise error(b, f"a bias for {y.type} must be a vector of {y.type.shape[1]}, got {bias.type}")
    return b.add(y, b.reshape(bias, shape=(y.type.shape[1],) + (1,) * (y.type.rank - 2)))


def conv_transpose(b, x: Atom, w: Atom, bias: Atom | None, strides=None, pads=None, dilations=None,
                   groups: int = 1, output_padding=None) -> Atom:
    """The transpose of conv with respect to its input (ONNX ConvTranspose; kernel [C, M / groups, *K])."""
    k = _spatial(b, x)
    strides = _per_axis(b, strides, k, 1, "strides")
    dilations = _per_axis(b, dilations, k, 1, "dilations")
    pads = _per_axis(b, pads, 2 * k, 0, "pads")
    extra = _per_axis(b, output_padding, k, 0, "output_padding")
    n, c = x.type.shape[:2]
    cw, mg = w.type.shape[:2]
    if w.type.rank != k + 2 or cw != c or not isinstance(c, int) or c % groups:
        raise error(b, f"conv_transpose of {x.type} with kernel {w.type}: the kernel must be [C, M / groups, ...] "
                       f"with C = {c}")
    cg = c // groups
    wg = b.reshape(w, shape=(groups, cg, mg) + w.type.shape[2:])
    y = _transpose_product(b, x, wg, groups, k)  # [n, g, m / g, *taps, *positions]
    y = b.transpose(y, perm=(0, 1, 2) + tuple(a for i in range(k) for a in (3 + k + i, 3 + i)))
    for i in range(k):
        s_in, kk = x.type.shape[2 + i], w.type.shape[2 + i]
        full = dim_add(dim_mul(dim_sub(s_in, 1), strides[i]), (kk - 1) * dilations[i] + 1)
        y = b.fold(y, axis=3 + i, stride=strides[i], dilation=dilations[i], n=full)
    y = b.reshape(y, shape=(n, groups * mg) + y.type.shape[3:])
    for i in range(k):
        y = pad_axis(b, y, 2 + i, -pads[i], extra[i] - pads[k + i])
    return _add_channel_bias(b, y, bias)


def _transpose_product(b, x: Atom, wg: Atom, groups: int, k: int) -> Atom:
    """ConvTranspose's products before the overlap-add: y[n, g, m, taps, positions] = Σ_c x[n, g·c, positions] ·
    w[g, c, m, taps]. A float one is a 1x1 convolution with m·taps output channels per group (the conv primitive's
    pointwise kernels); others one einsum over merged letters (one matrix product per image and group: contracting
    straight into the taps-beside-positions order of the folds made a product per position)."""
    n, spatial = x.type.shape[0], x.type.shape[2:]
    g, cg, mg, taps = groups, wg.type.shape[1], wg.type.shape[2], wg.type.shape[3:]
    kernel = numel((mg,) + tuple(taps))
    if x.type.dtype in ("f32", "f64") and k <= 3:
        w1 = b.transpose(wg, perm=(0, 2) + tuple(range(3, 3 + k)) + (1,))  # [g, m, *taps, c]
        w1 = b.reshape(w1, shape=(g * kernel, cg) + (1,) * k)
        y = b.conv(x, w1, strides=(1,) * k, pads=(0,) * (2 * k), dilations=(1,) * k, groups=g)
    else:
        y = b.einsum(b.reshape(wg, shape=(g, cg, kernel)), b.reshape(x, shape=(n, g, cg, numel(spatial))),
                     spec="gcM,ngcP->ngMP")
    return b.reshape(y, shape=(n, g, mg) + tuple(taps) + tuple(spatial))


def pool_pads(b, sizes: Sequence[Dim], kernel, strides, dilations, pads, ceil_mode: bool) -> list[int]:
    """Pads (lo..., hi...) with the extra end padding ceil_mode needs (a window never starts in the end pad)."""
    k = len(kernel)
    pads = list(pads)
    if not ceil_mode:
        return pads
    for i in range(k):
        n = sizes[i]
        if not isinstance(n, int):
            raise error(b, "ceil_mode needs static spatial sizes")
        span = (kernel[i] - 1) * dilations[i] + 1
        room = n + pads[i] + pads[k + i] - span
        out = -(-room // strides[i]) + 1
        if (out - 1) * strides[i] >= n + pads[i]:
            out -= 1
        pads[k + i] += max(0, (out - 1) * strides[i] + span - (n + pads[i] + pads[k + i]))
    return pads


def max_pool(b, x: Atom, kernel, strides=None, pads=None, dilations=None, ceil_mode: bool = False) -> Atom:
    """The maximum over each window (padding never wins: it is -inf); its derivative goes to the window's first
    maximum, as torch's max pooling sends it (not shared among ties as amax does). 1-d and 2-d float images: the
    max_pool prim (prims/pooling.py, one ks::max_pool call); others: max_pool_windows and a reduce_max."""
    k = _spatial(b, x)
    strides = _per_axis(b, strides, k, 1, "strides")
    dilations = _per_axis(b, dilations, k, 1, "dilations")
    pads = pool_pads(b, x.type.shape[2:], kernel, strides, dilations, _per_axis(b, pads, 2 * k, 0, "pads"),
                     ceil_mode)
    if x.type.dtype in ("f32", "f64") and k <= 2 and min(pads) >= 0:
        return b.max_pool(x, window=tuple(kernel), strides=tuple(strides), pads=tuple(pads),
                          dilations=tuple(dilations))
    patches = max_pool_windows(b, x, kernel, strides, dilations, pads)
    return b.reduce_max(patches, axes=tuple(3 + 2 * i for i in range(k)), ties="first")


def max_pool_windows(b, x: Atom, kernel, strides, dilations, pads, fill=None) -> Atom:
    """The windows [N, C, O1, K1, ...] of x padded with `fill` (None: the lowest value, -inf for floats)."""
    k = len(kernel)
    if fill is None:
        fill = float("-inf") if x.type.is_float else _int_lowest(x.type.dtype)
    for i in range(k):
        x = pad_axis(b, x, 2 + i, pads[i], pads[k + i], fill)
    return windows(b, x, 2, kernel, strides, dilations)


def _int_lowest(dtype: str) -> int:
    import numpy as np

    from ..ir.types import numpy_dtype
    return int(np.iinfo(numpy_dtype(dtype)).min)


def avg_pool(b, x: Atom, kernel, strides=None, pads=None, dilations=None, ceil_mode: bool = False,
             count_include_pad: bool = False) -> Atom:
    """The mean over each window; the divisor counts the pads only if count_include_pad (never
    the end padding ceil_mode adds)."""
    k = _spatial(b, x)
    strides = _per_axis(b, strides, k, 1, "strides")
    dilations = _per_axis(b, dilations, k, 1, "dilations")
    given = _per_axis(b, pads, 2 * k, 0, "pads")
    pads = pool_pads(b, x.type.shape[2:], kernel, strides, dilations, given, ceil_mode)
    sizes = x.type.shape[2:]
    total = _window_sum(b, x, kernel, strides, dilations, pads)
    ones = Lit(1.0, Type(x.type.dtype, (1, 1) + tuple(sizes)))
    if count_include_pad:
        counted = [given[i] for i in range(k)] + [given[k + i] for i in range(k)]
        base = b.broadcast_to(ones, shape=ones.type.shape)
        for i in range(k):
            base = pad_axis(b, base, 2 + i, counted[i], counted[k + i], 1.0)
        extra = [0] * k + [pads[k + i] - given[k + i] for i in range(k)]
        count = _window_sum(b, base, kernel, strides, dilations, extra)
    else:
        count = _window_sum(b, b.broadcast_to(ones, shape=ones.type.shape), kernel, strides, dilations, pads)
    return b.div(total, count)


def _window_sum(b, x: Atom, kernel, strides, dilations, pads) -> Atom:
    k = len(kernel)
    for i in range(k):
        x = pad_axis(b, x, 2 + i, pads[i], pads[k + i])
    patches = windows(b, x, 2, kernel, strides, dilations)
    return b.reduce_sum(patches, axes=tuple(3 + 2 * i for i in range(k)))


def lp_pool(b, x: Atom, kernel, p: int, strides=None, pads=None, dilations=None, ceil_mode: bool = False) -> Atom:
    """(Σ |x|^p)^(1/p) over each window (zero padding)."""
    k = _spatial(b, x)
    strides = _per_axis(b, strides, k, 1, "strides")
    dilations = _per_axis(b, dilations, k, 1, "dilations")
    pads = pool_pads(b, x.type.shape[2:], kernel, strides, dilations, _per_axis(b, pads, 2 * k, 0, "pads"),
                     ceil_mode)
    powered = b.ipow(b.abs(x), n=p)
    s = _window_sum(b, powered, kernel, strides, dilations, pads)
    return b.pow(s, scalar_lit(1.0 / p, x.type.dtype))


# ---- normalization ----------------------------------------------------------------------------------

def channel(b, v: Atom, rank: int, axis: int = 1) -> Atom:
    """A per-channel vector shaped to broadcast against a tensor of `rank` along `axis`."""
    return b.reshape(v, shape=tuple(v.type.shape[0] if i == axis else 1 for i in range(rank)))


def _eps(eps: float, dtype: str) -> Lit:
    """A normalization's epsilon as a literal of dtype, rounded to float32 for f32 (ONNX's attribute is a float32:
    torch's 1e-12 gives the same IR from torch.export as from ONNX)."""
    return scalar_lit(float(np.float32(eps)) if dtype == "f32" else eps, dtype)


def normalize(b, x: Atom, axes: Sequence[int], eps: float) -> tuple[Atom, Atom, Atom]:
    """(x - mean) / sqrt(var + eps) over axes, with the mean and 1/sqrt(var + eps) (kept dims)."""
    from .reduce import mean
    mu = mean(b, x, axes, keepdim=True)
    centered = b.sub(x, mu)
    var = mean(b, b.ipow(centered, n=2), axes, keepdim=True)
    inv = b.div(scalar_lit(1.0, x.type.dtype), b.sqrt(b.add(var, _eps(eps, x.type.dtype))))
    return b.mul(centered, inv), mu, inv


def batch_norm(b, x: Atom, scale: Atom, bias: Atom, mean: Atom, var: Atom, eps: float) -> Atom:
    """Inference batch normalization: (x - mean) * scale / sqrt(var + eps) + bias per channel."""
    r = x.type.rank
    factor = b.div(scale, b.sqrt(b.add(var, _eps(eps, x.type.dtype))))
    shift = b.sub(bias, b.mul(mean, factor))
    return b.add(b.mul(x, channel(b, factor, r)), channel(b, shift, r))


def layer_norm(b, x: Atom, scale: Atom | None, bias: Atom | None, axis: int, eps: float):
    """Normalization over the axes from `axis` on; returns (y, mean, 1/std) (kept dims)."""
    axes = tuple(range(axis, x.type.rank))
    y, mu, inv = normalize(b, x, axes, eps)
    if scale is not None:
        y = b.mul(y, scale)
    if bias is not None:
        y = b.add(y, bias)
    return y, mu, inv


def group_norm(b, x: Atom, scale: Atom, bias: Atom, groups: int, eps: float) -> Atom:
    """Normalization over each group of channels (and the spatial axes), then a per-channel affine."""
    n, c = x.type.shape[:2]
    if isinstance(c, int) and c % groups:
        raise error(b, f"{c} channels do not split into {groups} groups")
    if not isinstance(c, int):
        raise error(b, f"{c} channels are not known to split into {groups} groups",
                    hint=f'give the channel dim as a literal or a multiple, e.g. "float[n, {groups} * g, t]"')
    g = b.reshape(x, shape=(n, groups, c // groups) + x.type.shape[2:])
    y, _, _ = normalize(b, g, tuple(range(2, g.type.rank)), eps)
    y = b.reshape(y, shape=x.type.shape)
    r = x.type.rank
    return b.add(b.mul(y, channel(b, scale, r)), channel(b, bias, r))


def attention(b, q: Atom, k: Atom, v: Atom, mask: Atom | None = None, causal: bool = False,
              scale: float | None = None, gqa: bool = False) -> Atom:
    """softmax(q kᵀ · scale + mask) v over the last two axes (torch's scaled_dot_product_attention): scale
    1/√E by default; a bool mask says which keys a query attends to, a float mask is added; causal lets query
    i attend to keys j <= i. A query that attends to nothing gets 0 (torch's _safe_softmax), not NaN. gqa:
    the heads (axis -3) of k and v each serve Hq / Hkv query heads in a row (torch's enable_gqa)."""
    from . import reduce as red
    from .linalg import matmul
    from .shape import swap_axes
    if gqa:
        k, v = _shared_heads(b, q, k), _shared_heads(b, q, v)
    if isinstance(mask, Lit) and isinstance(mask.value, (bool, int, float)) and \
            mask.value == (mask.type.dtype == "bool"):
        mask = None  # (every key attended to: a mask of True, or of 0 added; a folded transformers mask)
    e, dt = q.type.shape[-1], q.type.dtype
    if scale is not None or isinstance(e, int):
        factor = scalar_lit(scale if scale is not None else 1.0 / math.sqrt(e), dt)
    else:  # a symbolic head size: 1/√E at run time
        factor = b.div(scalar_lit(1.0, dt), b.sqrt(b.convert(b.dim_size(dim=e), dtype=dt)))
    s = b.mul(matmul(b, q, swap_axes(b, k, -1, -2)), factor)
    ninf = scalar_lit(-math.inf, q.type.dtype)
    lq, lk = s.type.shape[-2:]
    additive = mask is not None and mask.type.dtype != "bool"
    if additive:
        s = b.add(s, mask)
    allowed = None if additive else mask
    if causal:
        rows = b.iota(shape=(lq, lk), axis=0, dtype="i64")
        cols = b.iota(shape=(lq, lk), axis=1, dtype="i64")
        tri = b.le(cols, rows)
        if mask is None:  # (query i attends to key 0 at least: no row to keep free of NaN)
            return matmul(b, red.softmax(b, b.select(tri, s, ninf), -1), v)
        allowed = tri if allowed is None else logical_and(b, allowed, tri)
    if additive:  # (a -inf in the mask may leave a row nothing)
        return matmul(b, red.safe_softmax(b, s if allowed is None else b.select(allowed, s, ninf), -1), v)
    if allowed is None:  # (every query attends to every key)
        return matmul(b, red.softmax(b, s, -1), v)
    # (a query that attends to no key gets 0: the guard reads the mask, so it vanishes when the mask is all True)
    attends = b.gt(b.reduce_max(b.convert(allowed, dtype="i32"), axes=(allowed.type.rank - 1,)), Lit(0, Type("i32")))
    return matmul(b, red.safe_softmax(b, b.select(allowed, s, ninf), -1, attends), v)


def _shared_heads(b, q: Atom, t: Atom) -> Atom:
    """t's heads (axis -3) repeated in place to q's number of heads (torch's repeat_interleave for enable_gqa)."""
    from .shape import repeat_each
    hq, ht = q.type.shape[-3], t.type.shape[-3]
    if hq == ht:
        return t
    if not (isinstance(hq, int) and isinstance(ht, int)) or hq % ht:
        raise error(b, f"enable_gqa: {hq} query heads are not a multiple of {ht} key/value heads")
    return repeat_each(b, t, t.type.rank - 3, hq // ht)


def instance_norm(b, x: Atom, scale: Atom, bias: Atom, eps: float) -> Atom:
    """Normalization over the spatial axes of each sample and channel, then a per-channel affine."""
    y, _, _ = normalize(b, x, tuple(range(2, x.type.rank)), eps)
    r = x.type.rank
    return b.add(b.mul(y, channel(b, scale, r)), channel(b, bias, r))


def lrn(b, x: Atom, size: int, alpha: float, beta: float, bias: float) -> Atom:
    """Local response normalization across channels: x / (bias + alpha/size · Σ x²)^beta."""
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    sq = pad_axis(b, b.ipow(x, n=2), 1, lo, hi)
    s = b.reduce_sum(b.window(sq, axis=1, size=size, stride=1, dilation=1), axes=(2,))
    dt = x.type.dtype
    base = b.add(scalar_lit(bias, dt), b.mul(scalar_lit(alpha / size, dt), s))
    return b.div(x, b.pow(base, scalar_lit(beta, dt)))


def rms_norm(b, x: Atom, scale: Atom, axis: int, eps: float) -> Atom:
    """x / sqrt(mean(x²) + eps) · scale over the axes from `axis` on."""
    from .reduce import mean
    axes = tuple(range(axis, x.type.rank))
    ms = mean(b, b.ipow(x, n=2), axes, keepdim=True)
    return b.mul(b.div(x, b.sqrt(b.add(ms, _eps(eps, x.type.dtype)))), scale)


__all__ = ["conv", "conv_transpose", "max_pool", "avg_pool", "lp_pool", "batch_norm", "layer_norm", "group_norm",
           "instance_norm", "lrn", "rms_norm", "pad_axis", "same_pads", "expand_back"]


def col2im(b, x: Atom, image: Sequence[int], block: Sequence[int], strides=None, pads=None, dilations=None) -> Atom:
    """The transpose of im2col (ONNX Col2Im): columns [N, C·prod(block), L] added back into an
    image [N, C, *image]: a `fold` per spatial axis, then the pads cropped."""
    k = len(image)
    strides = _per_axis(b, strides, k, 1, "strides")
    dilations = _per_axis(b, dilations, k, 1, "dilations")
    pads = _per_axis(b, pads, 2 * k, 0, "pads")
    n, cb, length = x.type.shape
    kb = 1
    for v in block:
        kb *= v
    if not isinstance(cb, int) or cb % kb:
        raise error(b, f"Col2Im: {cb} columns do not split into blocks of {kb}")
    from .window import window_count_of
    padded = [image[i] + pads[i] + pads[k + i] for i in range(k)]
    counts = [window_count_of(padded[i], block[i], strides[i], dilations[i]) for i in range(k)]
    y = b.reshape(x, shape=(n, cb // kb) + tuple(block) + tuple(counts))
    perm = (0, 1) + tuple(v for i in range(k) for v in (2 + k + i, 2 + i))  # [N, C, O1, K1, O2, K2, ...]
    y = b.transpose(y, perm=perm)
    for i in range(k):
        y = b.fold(y, axis=2 + i, stride=strides[i], dilation=dilations[i], n=padded[i])
    for i in range(k):
        y = pad_axis(b, y, 2 + i, -pads[i], -pads[k + i])
    return y


def max_pool_indices(b, x: Atom, kernel, strides, pads, dilations, ceil_mode: bool, column_major: bool) -> Atom:
    """The flat input position (over the whole tensor) of each window's first maximum (ONNX MaxPool's
    Indices); column_major counts the spatial positions of a plane in column-major order."""
    from .index import arg_extremum
    k = _spatial(b, x)
    shape = x.type.shape
    if not all(isinstance(d, int) for d in shape[1:]):  # (the batch may be symbolic: it only scales the planes)
        raise error(b, f"MaxPool indices need static channels and spatial sizes, got {x.type}")
    strides = _per_axis(b, strides, k, 1, "strides")
    dilations = _per_axis(b, dilations, k, 1, "dilations")
    pads = pool_pads(b, shape[2:], kernel, strides, dilations, _per_axis(b, pads, 2 * k, 0, "pads"), ceil_mode)
    low = float("-inf") if x.type.is_float else _int_lowest(x.type.dtype)
    xp = x
    for i in range(k):
        xp = pad_axis(b, xp, 2 + i, pads[i], pads[k + i], low)
    patches = windows(b, xp, 2, kernel, strides, dilations)  # [N, C, O1, K1, O2, K2, ...]
    order = (0, 1) + tuple(2 + 2 * i for i in range(k)) + tuple(3 + 2 * i for i in range(k))
    taps = b.transpose(patches, perm=order)
    outs = taps.type.shape[2:2 + k]
    flat = b.reshape(taps, shape=tuple(shape[:2]) + tuple(outs) + (numel_int(kernel),))
    t = arg_extremum(b, flat, flat.type.rank - 1, False, True)
    i64 = lambda v: Lit(v, Type("i64"))  # noqa: E731
    coords = []
    rest = t
    for i in reversed(range(k)):  # tap index -> (k1, k2, ...), then the input coordinate of each axis
        ki = b.mod(rest, i64(kernel[i]))
        rest = b.floordiv(rest, i64(kernel[i]))
        o = b.iota(shape=t.type.shape, axis=2 + i, dtype="i64")
        coords.insert(0, b.sub(b.add(b.mul(o, i64(strides[i])), b.mul(ki, i64(dilations[i]))), i64(pads[i])))
    sizes = list(shape[2:])
    pos = None
    axes = list(reversed(range(k))) if column_major else list(range(k))
    for j, a in enumerate(axes):
        inner = numel_int([sizes[q] for q in axes[j + 1:]])
        term = b.mul(coords[a], i64(inner))
        pos = term if pos is None else b.add(pos, term)
    plane = b.add(b.mul(b.iota(shape=t.type.shape, axis=0, dtype="i64"), i64(shape[1])),
                  b.iota(shape=t.type.shape, axis=1, dtype="i64"))
    return b.add(b.mul(plane, i64(numel_int(sizes))), pos)


def numel_int(dims) -> int:
    out = 1
    for d in dims:
        out *= int(d)
    return out
