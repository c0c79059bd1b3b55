"""Resizing (ONNX Resize, Upsample; torch interpolate exports them): separable interpolation.

Every resized axis is a linear map of that axis, out[j] = Σ_i W[j, i] x[i] (+ a constant where
tf_crop_and_resize extrapolates), with W computed when the model is compiled from the sizes
and the ONNX coordinate rules. Nearest-neighbour maps are a `gather`; the others an `einsum`
with the constant W. Sizes must be static.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..ir.core import Atom, Lit
from ..ir.types import Type
from ._util import error
from .create import array
from .linalg import LETTERS
from .shape import pad_mode


@dataclass(frozen=True)
class ResizeSpec:
    """The attributes of a resize that shape its weights."""

    mode: str = "nearest"                      # nearest | linear | cubic
    coordinates: str = "half_pixel"            # ONNX coordinate_transformation_mode
    nearest_mode: str = "round_prefer_floor"
    cubic_a: float = -0.75
    exclude_outside: bool = False
    antialias: bool = False
    extrapolation: float = 0.0
    scaled_length: bool = False                # align_corners divides by n_in · scale - 1 (onnx.reference)


def source_coords(spec: ResizeSpec, n_in: int, n_out: int, scale: float, roi=None) -> tuple[np.ndarray, np.ndarray]:
    """The input coordinate of each output position and whether it extrapolates (tf_crop_and_resize).
    `length_resized` of align_corners is the output's length n_out, a whole number, as onnxruntime and torch
    compute it; with spec.scaled_length it is n_in · scale, fractional when the scale does not divide evenly,
    as onnx.reference computes it (and so the expected outputs of two backend node tests, downsampling by 0.6
    and 0.8 with align_corners). half_pixel_symmetric always uses that fractional width."""
    y = np.arange(n_out, dtype=np.float64)
    width = scale * n_in
    outside = np.zeros(n_out, dtype=bool)
    mode = spec.coordinates
    if mode == "align_corners":
        length = width if spec.scaled_length else n_out
        x = np.zeros(n_out) if length == 1 else y * (n_in - 1) / (length - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_crop_and_resize":
        lo, hi = roi
        x = np.full(n_out, (hi - lo) * (n_in - 1) / 2) if n_out == 1 else y * (hi - lo) * (n_in - 1) / (n_out - 1)
        x = x + lo * (n_in - 1)
        outside = (x < 0) | (x > n_in - 1)
    elif mode == "pytorch_half_pixel":
        x = np.zeros(n_out) if n_out == 1 else (y + 0.5) / scale - 0.5
    elif mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif mode == "tf_half_pixel_for_nn":  # (Resize-11)
        x = (y + 0.5) / scale
    elif mode == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / width)
        x = offset + (y + 0.5) / scale - 0.5
    else:
        raise ValueError(f"unknown coordinate_transformation_mode '{mode}'")
    return x, outside


def _coeffs(spec: ResizeSpec, ratio: float, scale: float) -> np.ndarray:
    """The interpolation weights of the taps around a point `ratio` in (0, 1] past the left tap."""
    if spec.mode == "nearest":
        if ratio == 1:
            return np.array([0.0, 1.0])
        up = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5, "floor": False, "ceil": True}
        return np.array([0.0, 1.0]) if up[spec.nearest_mode] else np.array([1.0, 0.0])
    if spec.mode == "linear":
        if not spec.antialias:
            return np.array([1 - ratio, ratio])
        s = min(scale, 1.0)
        start = math.floor(-1 / s) + 1
        taps = (np.arange(start, 2 - start) - ratio) * s
        w = np.clip(1 - np.abs(taps), 0, 1)
        return w / w.sum()
    a = spec.cubic_a
    if not spec.antialias:
        return np.array([_cubic(a, ratio + 1), _cubic(a, ratio), _cubic(a, 1 - ratio), _cubic(a, 2 - ratio)])
    s = min(scale, 1.0)
    start = math.floor(-2 / s) + 1
    w = np.array([_cubic(a, abs(s * (i - ratio))) for i in range(start, 2 - start)])
    return w / w.sum()


def _cubic(a: float, t: float) -> float:
    """Keys' cubic convolution kernel with parameter a at distance t >= 0."""
    t = abs(t)
    if t <= 1:
        return (a + 2) * t ** 3 - (a + 3) * t ** 2 + 1
    if t < 2:
        return a * t ** 3 - 5 * a * t ** 2 + 8 * a * t - 4 * a
    return 0.0


def weights(spec: ResizeSpec, n_in: int, n_out: int, scale: float, roi=None) -> tuple[np.ndarray, np.ndarray]:
    """W [n_out, n_in] with out = W x, and the mask of extrapolated outputs."""
    x, outside = source_coords(spec, n_in, n_out, scale, roi)
    w = np.zeros((n_out, n_in))
    for j in range(n_out):
        left = math.floor(x[j])
        ratio = 1.0 if x[j] == left else x[j] - left
        base = left - 1 if x[j] == left else left
        c = _coeffs(spec, ratio, scale)
        taps = base - len(c) // 2 + 1 + np.arange(len(c))
        if spec.exclude_outside:
            c = np.where((taps < 0) | (taps >= n_in), 0.0, c)
            c = c / (c.sum() or 1.0)
        for t, v in zip(np.clip(taps, 0, n_in - 1), c):
            w[j, t] += v
    w[outside] = 0.0
    return w, outside


def periodic_taps(w: np.ndarray) -> tuple[int, int, np.ndarray] | None:
    """(s, lo, M) when W [n_in · s, n_in] is an upsampling by the whole factor s whose output s·q + r is
    Σ_k M[r, k] · x[clamp(q - lo + k)] (the same taps around q for every q, clamped at the edges: linear and cubic
    resizes by 2, 3, ...); else None."""
    n_out, n_in = w.shape
    if n_in < 2 or n_out % n_in or n_out == n_in:
        return None
    s, q = n_out // n_in, n_in // 2
    rows = w[s * q:s * q + s]
    nz = np.flatnonzero(rows.any(axis=0))
    if not len(nz):
        return None
    lo, m = q - nz[0], rows[:, nz[0]:nz[-1] + 1]
    again = np.zeros_like(w)
    for j in range(n_out):
        for k in range(m.shape[1]):
            again[j, min(max(j // s - lo + k, 0), n_in - 1)] += m[j % s, k]
    return (s, int(lo), m) if np.array_equal(again, w) else None


def _upsample_taps(b, x: Atom, axis: int, s: int, lo: int, m: np.ndarray, dtype) -> Atom:
    """x upsampled by s along axis as periodic_taps describes: the edges repeated, then for each tap k the slice
    starting k positions in, [.., n, 1, ..] (views) times M[:, k] [s], summed, and [.., n, s, ..] read as
    [.., n·s, ..]: one loop over the result; the taps' order is W's columns' (the dense product's sums)."""
    n, taps = x.type.shape[axis], m.shape[1]
    padded = pad_mode(b, x, axis, lo, taps - 1 - lo, "edge")
    padded = b.reshape(padded, shape=padded.type.shape[:axis + 1] + (1,) + padded.type.shape[axis + 1:])
    along = [s if i == axis + 1 else 1 for i in range(x.type.rank + 1)]
    y = None
    for k in range(taps):
        if m[:, k].any():
            coef = array(b, m[:, k].astype(dtype).reshape(along))
            term = b.mul(b.slice(padded, axis=axis, start=k, stop=k + n), coef)
            y = term if y is None else b.add(y, term)
    return b.reshape(y, shape=x.type.shape[:axis] + (n * s,) + x.type.shape[axis + 1:])


def resize_axis(b, x: Atom, axis: int, w: np.ndarray, outside: np.ndarray, spec: ResizeSpec) -> Atom:
    """x with one axis mapped by W (a gather when every row picks one input)."""
    picks = (np.count_nonzero(w, axis=1) == 1) & np.isclose(w.max(axis=1), 1.0)
    if picks.all() and not outside.any():
        return b.gather(x, array(b, w.argmax(axis=1).astype(np.int64)), axis=axis)
    if not x.type.is_float:
        raise error(b, f"{spec.mode} resize of {x.type} (an integer tensor) is not supported")
    dtype = np.float32 if x.type.dtype == "f32" else np.float64
    periodic = periodic_taps(w) if not outside.any() and isinstance(x.type.shape[axis], int) else None
    if periodic is not None:
        y = _upsample_taps(b, x, axis, *periodic, dtype)
    else:
        letters = LETTERS[:x.type.rank]
        out = letters.replace(letters[axis], "Z")
        y = b.einsum(x, array(b, w.astype(dtype)), spec=f"{letters},Z{letters[axis]}->{out}")
    if outside.any():
        mask = outside.reshape([-1 if i == axis else 1 for i in range(x.type.rank)])
        fill = np.where(mask, spec.extrapolation, 0.0).astype(np.float32 if x.type.dtype == "f32" else np.float64)
        y = b.add(y, array(b, fill))
    return y


# ---- grid sampling ---------------------------------------------------------------------------------

def _reflect(b, v: Atom, lo: float, hi: float) -> Atom:
    """v reflected off the borders lo and hi until it lies between them."""
    from ._util import scalar_lit
    from .math import trunc
    k = lambda c: scalar_lit(c, v.type.dtype)  # noqa: E731
    rng = hi - lo
    below, above = b.lt(v, k(lo)), b.gt(v, k(hi))
    dx = b.select(below, b.sub(k(lo), v), b.sub(v, k(hi)))
    n = trunc(b, b.div(dx, k(rng)))
    r = b.sub(dx, b.mul(n, k(rng)))
    even = b.eq(b.mod(n, k(2)), k(0))
    low_side = b.select(even, b.add(k(lo), r), b.sub(k(hi), r))
    high_side = b.select(even, b.sub(k(hi), r), b.add(k(lo), r))
    return b.select(below, low_side, b.select(above, high_side, v))


def grid_sample(b, x: Atom, grid: Atom, mode: str, padding: str, align_corners: bool) -> Atom:
    """ONNX GridSample: x [N, C, *S] sampled at the normalized points grid [N, *O, k] ([-1, 1],
    the last entry of a point for the first spatial axis), with nearest, linear or cubic taps and
    zeros, border or reflection padding. Each tap is a gather of rows of x."""
    import itertools

    from ..ir.types import Type
    from ._util import dim_atom, numel, scalar_lit
    from .math import logical_and, round_half_even
    n, c = x.type.shape[:2]
    sizes = x.type.shape[2:]
    k = len(sizes)
    if not all(isinstance(s, int) for s in sizes):
        raise error(b, "GridSample needs static spatial sizes")
    dt = x.type.dtype
    lit = lambda v: scalar_lit(v, dt)  # noqa: E731
    out_shape = grid.type.shape[:-1]
    lo = [0.0 if align_corners else -0.5 for _ in sizes]
    hi = [s - 1.0 if align_corners else s - 0.5 for s in sizes]
    coords = []
    for d, s in enumerate(sizes):
        g = b.reshape(b.slice(grid, axis=grid.type.rank - 1, start=k - 1 - d, stop=k - d), shape=out_shape)
        g = g if g.type.dtype == dt else b.convert(g, dtype=dt)
        p = b.mul(b.add(g, lit(1)), lit((s - 1) / 2)) if align_corners else \
            b.div(b.sub(b.mul(b.add(g, lit(1)), lit(s)), lit(1)), lit(2))
        if mode == "nearest":
            p = round_half_even(b, p)
        if padding == "border" and mode != "cubic":  # (cubic: each tap clamped below, as torch and onnxruntime do)
            p = b.max(b.min(p, lit(s - 1)), lit(0))
        elif padding == "reflection":
            p = _reflect(b, p, lo[d], hi[d])
        coords.append(p)
    channels_last = b.transpose(x, perm=(0,) + tuple(range(2, 2 + k)) + (1,))
    rows = b.reshape(channels_last, shape=(numel(x.type.shape[:1] + sizes), c))
    batch = b.mul(b.iota(shape=out_shape, axis=0, dtype="i64"), dim_atom(b, numel(sizes)))
    taps = []
    for p in coords:
        base = b.floor(p)
        f = b.sub(p, base)
        if mode == "nearest":
            taps.append([(base, lit(1.0))])
        elif mode == "linear":
            taps.append([(base, b.sub(lit(1), f)), (b.add(base, lit(1)), f)])
        else:
            cs = [_keys(b, b.add(f, lit(1))), _keys(b, f), _keys(b, b.sub(lit(1), f)), _keys(b, b.sub(lit(2), f))]
            taps.append([(b.add(base, lit(o)), cc) for o, cc in zip((-1, 0, 1, 2), cs)])
    total = None
    for combo in itertools.product(*taps):
        weight, flat, ok = None, batch, None
        for d, (pos, w) in enumerate(combo):
            s = sizes[d]
            if padding == "reflection":
                pos = _reflect(b, pos, lo[d], hi[d])
            inside = logical_and(b, b.ge(pos, lit(0)), b.le(pos, lit(s - 1)))
            ok = inside if ok is None else logical_and(b, ok, inside)
            idx = b.convert(b.max(b.min(pos, lit(s - 1)), lit(0)), dtype="i64")
            stride = numel(sizes[d + 1:])
            flat = b.add(flat, idx if stride == 1 else b.mul(idx, Lit(stride, Type("i64"))))
            weight = w if weight is None else b.mul(weight, w)
        if padding == "zeros":
            weight = b.select(ok, weight, lit(0))
        vals = b.gather(rows, flat, axis=0)
        if weight.type.rank == 0:  # (nearest without zeros padding: the one tap's weight is the literal 1)
            term = vals
        else:
            term = b.mul(vals, b.reshape(weight, shape=out_shape + (1,)))
        total = term if total is None else b.add(total, term)
    r = total.type.rank
    return b.transpose(total, perm=(0, r - 1) + tuple(range(1, r - 1)))


def _keys(b, t: Atom) -> Atom:
    """Keys' cubic kernel (a = -0.75) at distance |t| < 2, as IR."""
    from ._util import scalar_lit
    a = -0.75
    k = lambda v: scalar_lit(v, t.type.dtype)  # noqa: E731
    t = b.abs(t)
    near = b.add(b.mul(b.mul(b.sub(b.mul(k(a + 2), t), k(a + 3)), t), t), k(1))
    far = b.sub(b.mul(b.add(b.mul(b.sub(b.mul(k(a), t), k(5 * a)), t), k(8 * a)), t), k(4 * a))
    return b.select(b.le(t, k(1)), near, far)


# ---- resizing an axis of symbolic size ---------------------------------------------------------------

DYNAMIC_COORDINATES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")


def dynamic_supported(spec: ResizeSpec) -> bool:
    """Whether resize_axis_dynamic computes this spec (the modes torch's interpolate exports)."""
    return spec.mode in ("nearest", "linear") and not spec.antialias and not spec.exclude_outside \
        and spec.coordinates in DYNAMIC_COORDINATES


def resize_axis_dynamic(b, x: Atom, axis: int, n_out, scale: float | None, spec: ResizeSpec) -> Atom:
    """x with one axis resized to n_out (a dim) when a size is symbolic: the source coordinate of each
    output position is computed at run time with the ONNX coordinate rules (the same formulas as
    source_coords), then nearest picks one clamped tap and linear blends the two around it.
    scale None means n_out / n_in (ONNX Resize given sizes)."""
    from ._util import dim_atom
    from .math import ceil
    ft = x.type.dtype if x.type.is_float else "f32"
    k = lambda c: Lit(float(c), Type(ft))  # noqa: E731
    n_in = x.type.shape[axis]
    fin, fout = (b.convert(dim_atom(b, d), dtype=ft) for d in (n_in, n_out))
    s = b.div(fout, fin) if scale is None else k(scale)
    coord = _dynamic_coords(b, spec, b.convert(b.iota(shape=(n_out,), axis=0, dtype="i64"), dtype=ft), s, fin, fout, k)
    last = b.sub(fin, k(1))
    clamp = lambda v: b.max(b.min(v, last), k(0))  # noqa: E731
    take = lambda v: b.gather(x, b.convert(clamp(v), dtype="i64"), axis=axis)  # noqa: E731
    if spec.mode == "nearest":
        pick = {"floor": lambda: b.floor(coord), "ceil": lambda: ceil(b, coord),
                "round_prefer_floor": lambda: ceil(b, b.sub(coord, k(0.5))),
                "round_prefer_ceil": lambda: b.floor(b.add(coord, k(0.5)))}[spec.nearest_mode]()
        return take(pick)
    left = b.floor(coord)
    ratio = b.reshape(b.sub(coord, left), shape=tuple(n_out if i == axis else 1 for i in range(x.type.rank)))
    lo, hi = take(left), take(b.add(left, k(1)))
    return b.add(b.mul(lo, b.sub(k(1), ratio)), b.mul(hi, ratio))


def _dynamic_coords(b, spec: ResizeSpec, y: Atom, s: Atom, fin: Atom, fout: Atom, k) -> Atom:
    """The input coordinate of output positions y (floats) at run time; see source_coords (fout: the
    output's length, the `length_resized` of the formulas)."""
    if spec.coordinates == "asymmetric":
        return b.div(y, s)
    if spec.coordinates == "align_corners":
        length = b.mul(fin, s) if spec.scaled_length else fout
        return b.div(b.mul(y, b.sub(fin, k(1))), b.select(b.eq(length, k(1)), k(1), b.sub(length, k(1))))
    shifted = b.sub(b.div(b.add(y, k(0.5)), s), k(0.5))
    if spec.coordinates == "pytorch_half_pixel":
        return b.select(b.eq(fout, k(1)), k(0), shifted)  # one output: y is 0
    return shifted


TORCH_MODES = {"nearest": ("nearest", "asymmetric"), "nearest-exact": ("nearest", "half_pixel"),
               "linear": ("linear", None), "bilinear": ("linear", None), "trilinear": ("linear", None),
               "bicubic": ("cubic", None)}
"""torch's interpolate modes as ONNX Resize specs: nearest is floor(out·in/out_size), nearest-exact rounds
half-pixel centres; (bi/tri)linear and bicubic follow align_corners."""


def torch_interpolate(b, x: Atom, out_sizes, scales, mode: str, align_corners: bool) -> Atom:
    """torch's interpolate (F.interpolate, aten.upsample_*) of x [N, C, *S] to out_sizes along the spatial
    axes; scales are the coordinate scales (torch passes the scale_factor when one is given, else the sizes'
    ratio: None)."""
    kind, coords = TORCH_MODES[mode]
    if coords is None:
        # (torch's half-pixel formula has no special case for an output of length 1, unlike ONNX's pytorch_half_pixel)
        coords = "align_corners" if align_corners else "half_pixel"
    spec = ResizeSpec(mode=kind, coordinates=coords, nearest_mode="floor" if coords == "asymmetric"
                      else "round_prefer_ceil", cubic_a=-0.75)
    for i, n_out in enumerate(out_sizes):
        axis = 2 + i
        n_in = x.type.shape[axis]
        if not isinstance(n_in, int) or not isinstance(n_out, int):
            raise error(b, "resizing a symbolic spatial axis is not supported",
                        hint="give the image sizes as literals in the annotation")
        scale = float(scales[i]) if scales else n_out / n_in
        w, outside = weights(spec, n_in, n_out, scale)
        x = resize_axis(b, x, axis, w, outside, spec)
    return x
