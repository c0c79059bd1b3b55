"""ONNX Resize and Upsample: attributes and scales/sizes parsed here, the maps are ops/resize.py."""
from __future__ import annotations

import numpy as np

from ...ops import resize as rs
from ...ops._util import scalar_lit
from ...ops.math import round_half_even
from .graph import handler
from .node import Node

COORDINATES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
               "tf_crop_and_resize", "tf_half_pixel_for_nn")  # (the last: Resize-11, TensorFlow converters)


def _spec(n: Node) -> rs.ResizeSpec:
    return rs.ResizeSpec(
        mode=n.attr_in("mode", ("nearest", "linear", "cubic"), "nearest"),
        coordinates=n.attr_in("coordinate_transformation_mode", COORDINATES, "half_pixel"),
        nearest_mode=n.attr_in("nearest_mode", ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"),
                               "round_prefer_floor"),
        cubic_a=n.attr("cubic_coeff_a", -0.75),
        exclude_outside=bool(n.attr("exclude_outside", 0)),
        antialias=bool(n.attr("antialias", 0)),
        extrapolation=n.attr("extrapolation_value", 0.0))


def _floats(n: Node, i: int, what: str) -> list[float] | None:
    if not n.has(i):
        return None
    v = np.asarray(n.const(i, what), dtype=np.float64).reshape(-1)
    return list(v) if v.size else None


def _plan(n: Node, shape, axes, scales, sizes, policy: str):
    """(scale, output size) per axis of the input, as ONNX defines them."""
    r = len(shape)
    scale = [1.0] * r
    out = list(shape)
    if sizes is not None:
        for a, s in zip(axes, sizes):
            if s != shape[a]:  # (an axis kept at its size may be a symbolic dim: the batch)
                scale[a] = s / shape[a]
                out[a] = int(s)
        if policy != "stretch":
            pick = min if policy == "not_larger" else max
            k = pick(scale[a] for a in axes)
            for a in axes:
                scale[a], out[a] = k, int(k * shape[a] + 0.5)
    else:
        for a, s in zip(axes, scales):
            if not np.isclose(s, 1.0):  # an axis kept at scale 1 may be a symbolic dim (the batch)
                scale[a], out[a] = s, int(s * shape[a])
    return scale, out


def resize(n: Node, x, spec: rs.ResizeSpec, scales, sizes, roi, axes, policy: str = "stretch"):
    shape = x.type.shape
    r = len(shape)
    axes = [a + r if a < 0 else a for a in (axes or range(r))]
    if scales is None and sizes is None:
        raise n.error("Resize needs scales or sizes")
    resized = [a for i, a in enumerate(axes)
               if (sizes is not None and sizes[i] != shape[a]) or (sizes is None and not np.isclose(scales[i], 1.0))]
    if not all(isinstance(shape[a], int) for a in resized) or (sizes is not None and not all(
            isinstance(sizes[i], int) for i, a in enumerate(axes) if a in resized or policy != "stretch")):
        return _resize_dynamic(n, x, spec, scales, sizes, roi, axes, policy)
    scale, out = _plan(n, shape, axes, scales, sizes, policy)
    rois = {}
    if roi is not None and len(roi) == 2 * len(axes):
        rois = {a: (roi[i], roi[len(axes) + i]) for i, a in enumerate(axes)}
    elif roi is not None and len(roi) == 2 * r:
        rois = {a: (roi[a], roi[r + a]) for a in range(r)}
    src = x
    if not x.type.is_float and spec.mode != "nearest":
        x = n.b.convert(x, dtype="f32")
    for a in axes:
        lo_hi = rois.get(a, (0.0, 1.0))
        if np.isclose(scale[a], 1.0) and out[a] == shape[a] and np.allclose(lo_hi, (0.0, 1.0)):
            continue
        w, outside = rs.weights(spec, shape[a], out[a], scale[a], lo_hi)
        x = rs.resize_axis(n.b, x, a, w, outside, spec)
    if x.type.dtype != src.type.dtype:  # integer images: round and saturate, as ONNX does
        from ...ir.types import numpy_dtype
        info = np.iinfo(numpy_dtype(src.type.dtype))
        x = round_half_even(n.b, x)
        x = n.b.max(n.b.min(x, scalar_lit(float(info.max), "f32")), scalar_lit(float(info.min), "f32"))
        x = n.b.convert(x, dtype=src.type.dtype)
    return x


def _resize_dynamic(n: Node, x, spec: rs.ResizeSpec, scales, sizes, roi, axes, policy: str):
    """Resize where an axis it resizes, or a target size, is a symbolic dim: source coordinates at run time."""
    if not rs.dynamic_supported(spec) or policy != "stretch" or not x.type.is_float:
        raise n.error(f"Resize of an axis of symbolic size (input {x.type}) supports nearest and linear modes "
                      f"with {', '.join(rs.DYNAMIC_COORDINATES)} coordinates only")
    for i, a in enumerate(axes):
        d = x.type.shape[a]
        if sizes is not None and sizes[i] != d:
            x = _resize_axis(n, x, a, sizes[i], None, spec)
        elif sizes is None and not np.isclose(scales[i], 1.0):
            x = _resize_axis(n, x, a, _scaled_dim(n, d, scales[i]), scales[i], spec)
    return x


def _resize_axis(n: Node, x, axis: int, out, scale: float | None, spec: rs.ResizeSpec):
    """One axis to size `out`: constant weights when both sizes are numbers, else computed at run time."""
    d = x.type.shape[axis]
    if isinstance(d, int) and isinstance(out, int):
        w, outside = rs.weights(spec, d, out, out / d if scale is None else scale)
        return rs.resize_axis(n.b, x, axis, w, outside, spec)
    return rs.resize_axis_dynamic(n.b, x, axis, out, scale, spec)


def _scaled_dim(n: Node, d, scale: float):
    """floor(d * scale) as a dim, for a scale that is a simple fraction p/q: (p*d) // q."""
    from fractions import Fraction

    from ...ir.types import dim_floordiv, dim_mul
    f = Fraction(scale).limit_denominator(64)
    if not np.isclose(float(f), scale, rtol=0, atol=1e-9):
        raise n.error(f"Resize of an axis of symbolic size {d} by the scale {scale}, which is not a simple fraction")
    return dim_floordiv(dim_mul(d, f.numerator), f.denominator)


@handler("Resize")
def resize_op(n: Node):
    x = n.x(0)
    if n.opset < 11:
        return [resize(n, x, _spec_v10(n), _floats(n, 1, "scales"), None, None, None)]
    spec = _spec(n)
    roi = _floats(n, 1, "roi")
    scales = _floats(n, 2, "scales")
    sizes = n.dims(3, "sizes") if n.has(3) else None
    axes = n.attr("axes", None)
    policy = n.attr_in("keep_aspect_ratio_policy", ("stretch", "not_larger", "not_smaller"), "stretch")
    return [resize(n, x, spec, scales, sizes or None, roi, axes, policy)]


def _spec_v10(n: Node) -> rs.ResizeSpec:
    mode = n.attr_in("mode", ("nearest", "linear"), "nearest")
    return rs.ResizeSpec(mode=mode, coordinates="asymmetric", nearest_mode="floor")


@handler("Upsample")
def upsample(n: Node):
    x = n.x(0)
    scales = _floats(n, 1, "scales") if n.opset >= 9 else n.attr("scales")
    return [resize(n, x, _spec_v10(n), scales, None, None, None)]


@handler("GridSample")
def grid_sample(n: Node):
    modes = {"bilinear": "linear", "bicubic": "cubic", "linear": "linear", "cubic": "cubic", "nearest": "nearest"}
    mode = modes[n.attr_in("mode", tuple(modes), "linear" if n.opset >= 20 else "bilinear")]
    padding = n.attr_in("padding_mode", ("zeros", "border", "reflection"), "zeros")
    return [rs.grid_sample(n.b, n.x(0), n.x(1), mode, padding, bool(n.attr("align_corners", 0)))]
