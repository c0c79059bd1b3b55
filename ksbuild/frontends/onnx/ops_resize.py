"""ONNX Resize and Upsample: attributes and scales/sizes parsed here, the maps are ops/resize.py."""
from __future__ import annotations

import dataclasses

import numpy as np

from ...errors import warn
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
                scale[a], out[a] = s, _scaled_size(n, shape[a], s)
    return scale, out


def _scaled_size(n: Node, d: int, s: float) -> int:
    """floor(d · s), the output length of an axis given a scale (a float32 of the model). onnxruntime multiplies
    in float32 (and torch, which computes in double from the exact scale, agrees: 10 · 0.7 is 7);
    onnx.reference multiplies the float32 scale in double (10 · 0.699999988 is 6)."""
    if n.imp.semantics == "reference":
        return int(np.floor(float(s) * d))
    return int(np.floor(np.float32(s) * np.float32(d)))


def resize(n: Node, x, spec: rs.ResizeSpec, scales, sizes, roi, axes, policy: str = "stretch"):
    shape = x.type.shape
    r = len(shape)
    axes = [a + r if a < 0 else a for a in (axes or range(r))]
    if scales is None and sizes is None:
        raise n.error("Resize needs scales or sizes")
    spec = _corner_length(n, spec, shape, scales if sizes is None else None, axes)
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


def _corner_length(n: Node, spec: rs.ResizeSpec, shape, scales, axes) -> rs.ResizeSpec:
    """spec with align_corners' `length_resized` as the kernel's onnx_semantics says when the Resize is given
    scales: the output's length (onnxruntime, torch) or input length · scale (onnx.reference). The two differ
    where that product is not a whole number; with onnxruntime's rule that is a warning naming the node."""
    if spec.coordinates != "align_corners" or scales is None:
        return spec
    if n.imp.semantics == "reference":
        return dataclasses.replace(spec, scaled_length=True)
    for a, s in zip(axes, scales):
        d = shape[a]
        if np.isclose(s, 1.0) or float(s).is_integer():
            continue
        if isinstance(d, int) and abs(d * s - round(d * s)) <= 1e-6 * d * s:  # whole up to float32 rounding
            continue
        length = f"{d * s:g}" if isinstance(d, int) else f"{d} · {s:g}"
        count = _scaled_size(n, d, s) if isinstance(d, int) else f"floor({length})"
        warn(f"Resize with align_corners scales axis {a} (length {d}) by {s:g}: its output has {count} "
             f"positions, spaced as onnxruntime and torch space them; onnx.reference spaces them as if the axis "
             f"were {length} long and gives other values", n.loc,
             hint='onnx_semantics = "reference" in the kernel\'s table follows onnx.reference; a model resized '
                  'to sizes instead of scales (F.interpolate(size=...)) means the same in both')
        break
    return spec


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
    """floor(d · scale) as a dim (see _scaled_size), for a scale that is a simple fraction p/q up to float32
    rounding: (p·d) // q; with onnx.reference's double product, one less at multiples of q where the float32
    scale lies below p/q."""
    from fractions import Fraction

    from ...ir.types import dim_add, dim_floordiv, dim_mul
    f = Fraction(float(scale)).limit_denominator(64)
    if not np.isclose(float(f), scale, rtol=1e-6, atol=1e-9):
        raise n.error(f"Resize of an axis of symbolic size {d} by the scale {scale:.9g}, which is not a simple "
                      f"fraction", hint="export the model with a fixed size for this axis, or resize to sizes")
    scaled = dim_mul(d, f.numerator)
    if n.imp.semantics == "reference" and float(scale) < float(f):
        scaled = dim_add(scaled, -1)
    return dim_floordiv(scaled, f.denominator)


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
