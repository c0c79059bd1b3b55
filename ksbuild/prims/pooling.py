"""max_pool: the maximum over each window of 1-d and 2-d float images, one prim, one kernel-layer call.

max_pool[window, strides, pads, dilations](x) -> y
    x [N, C, S1(, S2)] float, y [N, C, O1(, O2)] with Oi = (Si + lo_i + hi_i - dilation_i·(Ki - 1) - 1) // stride_i + 1
    and y[n, c, o] = max over taps t of x[n, c, o·stride + t·dilation - lo] (-inf outside x: the padding never
    wins; a NaN in a window is its maximum). pads = (lo_1, ..., hi_1, ...) >= 0 hold ceil_mode's extra end padding
    (ops/nn.py: pool_pads).

It is what ops/nn.py's decomposition computes (the image padded with -inf, windows, reduce_max with ties "first"),
and its jvp is that decomposition's: the derivative goes to each window's first maximum. The generated code calls
ks::max_pool (prelude/ks/maxpool.h: per output row the maxima over the window's rows, then along it), one pass
over the input instead of the decomposition's pad and select per axis before the windows.
"""
from __future__ import annotations

import numpy as np

from ..errors import KsbuildError
from ..ir.core import Eqn
from ..ir.types import Type, dim_add, dim_mul, element_bytes
from . import scratch as scratch_sizes
from .base import Prim, finite, first_rows, unsigned
from .tensor import reduce_max
from .window import window_count


def _rule(in_types, window, strides, pads, dilations):
    (x,) = in_types
    k = x.rank - 2
    if k not in (1, 2) or x.dtype not in ("f32", "f64"):
        raise KsbuildError(f"max_pool takes a float [N, C, 1 or 2 spatial axes] input, got {x}")
    if not (len(window) == len(strides) == len(dilations) == k and len(pads) == 2 * k):
        raise KsbuildError(f"max_pool over {k} spatial axes needs {k} taps, strides and dilations and {2 * k} pads")
    if min(window) < 1 or min(strides) < 1 or min(dilations) < 1 or min(pads) < 0:
        raise KsbuildError("max_pool: taps, strides and dilations must be >= 1 and pads >= 0")
    outs = []
    for i in range(k):
        o = window_count(dim_add(x.shape[2 + i], pads[i] + pads[k + i]), window[i], strides[i], dilations[i])
        if isinstance(o, int) and o < 1:
            raise KsbuildError(f"a max_pool window of {window[i]} taps (dilation {dilations[i]}) does not fit in "
                               f"spatial axis {i} of {x} (padded by {pads[i]} + {pads[k + i]})")
        outs.append(o)
    return (Type(x.dtype, tuple(x.shape[:2]) + tuple(outs)),)


def _eval(x, window, strides, pads, dilations, env):
    k = x.ndim - 2
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[k + i]) for i in range(k)], constant_values=-np.inf)
    for i in range(k):  # [.., S, ..] -> [.., O, K, ..] along spatial axis i (now at 2 + 2i)
        axis = 2 + 2 * i
        count = (xp.shape[axis] - dilations[i] * (window[i] - 1) - 1) // strides[i] + 1
        taps = np.arange(count)[:, None] * strides[i] + np.arange(window[i])[None, :] * dilations[i]
        xp = np.take(xp, taps, axis=axis)
    return (np.max(xp, axis=tuple(3 + 2 * i for i in range(k))).astype(x.dtype),)


def _jvp(b, p, t, window, strides, pads, dilations):
    """The decomposition's: the tangent of each window's first maximum (ops/nn.py: max_pool_windows)."""
    from ..ops.nn import max_pool_windows
    (x,), (tx,) = p, t
    y = b.max_pool(x, window=window, strides=strides, pads=pads, dilations=dilations)
    if tx is None:
        return [y], [None]
    geometry = (window, strides, dilations, pads)
    axes = tuple(3 + 2 * i for i in range(len(window)))
    patches, tangents = max_pool_windows(b, x, *geometry), max_pool_windows(b, tx, *geometry, fill=0.0)
    _, (ty,) = reduce_max.jvp(b, [patches], [tangents], axes=axes, ties="first")
    return [y], [ty]


def _batch(b, ins, batched, size, window, strides, pads, dilations):
    """Lanes of images are more images."""
    (x,) = ins
    lanes, n = x.type.shape[:2]
    y = b.max_pool(b.reshape(x, shape=(dim_mul(lanes, n),) + x.type.shape[2:]), window=window, strides=strides,
                   pads=pads, dilations=dilations)
    return [b.reshape(y, shape=(lanes, n) + y.type.shape[1:])], [True]


def _geometry(x: Type, y: Type, params) -> list:
    """The fields of ks::pool_shape (h, w, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw): a 1-d pooling as one row."""
    k = x.rank - 2
    lead = 2 - k

    def pair(values, fill):
        return [fill] * lead + list(values)
    h, w = pair(x.shape[2:], 1)
    oh, ow = pair(y.shape[2:], 1)
    return [h, w, oh, ow, *pair(params["window"], 1), *pair(params["strides"], 1), *pair(params["dilations"], 1),
            *pair(params["pads"][:k], 0)]


def _emit(ctx, eqn: Eqn) -> None:
    from .convolve import _dense, _dense_target
    (x,), (y,) = eqn.ins, eqn.outs
    c = ctx.ctype(y.type)
    sx = _dense(ctx, x, "image")
    dst, out = _dense_target(ctx, y, "pooled")
    fields = "{" + ", ".join(ctx.dim(v) for v in _geometry(x.type, y.type, eqn.params)) + "}"
    shape = ctx.namer.fresh("pooling")
    storage = "const" if any(not isinstance(v, int) for v in _geometry(x.type, y.type, eqn.params)) \
        else "static constexpr"
    scratch = ctx.scratch(c, f"ks::max_pool_scratch<{c}>(ks::pool_shape{fields})", required=True, eqn=eqn)
    ctx.line(f"{storage} ks::pool_shape {shape}{fields};")
    planes = ctx.dim(dim_mul(x.type.shape[0], x.type.shape[1]))
    ctx.line(f"ks::max_pool<{c}>({shape}, {planes}, {sx.base}, {out.base}, {scratch});")
    if out is not dst:
        ctx.copy(out, dst, y.type)
    ctx.env[y] = dst


def _scratch(eqn: Eqn, tiles) -> int | None:
    """The bytes of ks::max_pool_scratch (prims/scratch.py: max_pool_scratch); None when a size is symbolic."""
    g = _geometry(eqn.ins[0].type, eqn.outs[0].type, eqn.params)
    if not all(isinstance(v, int) for v in g):
        return None
    return scratch_sizes.max_pool_scratch(*g) * element_bytes(eqn.outs[0].type.dtype)


max_pool = Prim(
    name="max_pool",
    sign=unsigned,
    nonfinite=finite,
    type_rule=_rule,
    eval=_eval,
    jvp=_jvp,
    batch=_batch,
    emit=_emit,
    rows=first_rows,
    scratch=_scratch,
    doc="the maximum over each window of 1-d and 2-d float images, padded with -inf (ks::max_pool)",
    opt_outs=("transpose: not linear",),
)
