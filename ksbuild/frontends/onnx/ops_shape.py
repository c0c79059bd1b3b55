"""ONNX shape ops: Shape, Reshape, Flatten, (Un)Squeeze, Transpose, Concat, Split, Slice,
Expand, Tile, Pad, ConstantOfShape, Range, EyeLike, Trilu, DepthToSpace, Constant, Dropout."""
from __future__ import annotations

import numpy as np

from ...ir.core import Atom, Lit
from ...ir.types import Dim, Type, dim_add, dim_floordiv, dim_mul, dim_sub
from ...ops import create, nn
from ...ops import shape as sh
from ...ops._util import numel
from .graph import handler, symbolic
from .node import Node
from .values import SymDim, Val, compute_dtype, onnx_dtype, shape_array

INT_MAX = 2**62


def _axis(n: Node, axis: int, rank: int) -> int:
    a = axis + rank if axis < 0 else axis
    if not 0 <= a < rank:
        raise n.error(f"{n.op}: axis {axis} is out of range for a tensor of rank {rank}")
    return a


def _shape(n: Node, i: int) -> tuple:
    v = n.val(i)
    if v.seq or v.present is not None:
        raise n.error(f"{n.op}: input {i} is {'a sequence' if v.seq else 'an optional value'}; {n.op} takes tensors")
    return v.shape


@handler("Constant")
def constant(n: Node):
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints", "value_string", "value_strings"):
        if key in n.attrs:
            v = n.attr(key)
            dtype = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64,
                     "value_ints": np.int64, "value_string": object, "value_strings": object}.get(key)
            if dtype is object:  # (np.asarray of a list of str would make numpy str, which drops trailing NULs)
                arr = np.empty(len(v) if isinstance(v, list) else (), dtype=object)
                arr[...] = v if isinstance(v, list) else v
                return [arr]
            return [np.asarray(v, dtype=dtype) if dtype else np.asarray(v)]
    which = next(iter(n.attrs), None)
    raise n.unsupported(f"a constant given as '{which}'" if which else "a Constant without a value")


@handler("Shape")
def shape(n: Node):
    dims = list(_shape(n, 0))
    start, end = n.attr("start", 0), n.attr("end", None)
    r = len(dims)
    start = min(max(start + r if start < 0 else start, 0), r)
    end = r if end is None else min(max(end + r if end < 0 else end, 0), r)
    return [shape_array(dims[start:end])]


@handler("Size")
def size(n: Node):
    d = numel(_shape(n, 0))
    return [np.asarray(d, dtype=np.int64) if isinstance(d, int) else np.asarray(SymDim(d), dtype=object)]


def _target(n: Node, x_shape, dims: list, allowzero: bool) -> list:
    out = []
    for i, d in enumerate(dims):
        if d == 0 and not allowzero:
            if i >= len(x_shape):
                raise n.error(f"Reshape: a 0 at position {i} copies an input dim the input does not have")
            d = x_shape[i]
        out.append(d)
    return out


@handler("Reshape")
def reshape(n: Node):
    x = n.x(0)
    allowzero = bool(n.attr("allowzero", 0))
    dims = n.dims(1, "the target shape") if n.opset >= 5 else list(n.attr("shape"))
    return [sh.reshape(n.b, x, _target(n, x.type.shape, dims, allowzero))]


@symbolic("Reshape")
def symbolic_reshape(n: Node, known):
    x, s = known
    allowzero = bool(n.attr("allowzero", 0))
    dims = _target(n, x.shape, [int(v) if not isinstance(v, SymDim) else v for v in s.reshape(-1)], allowzero)
    return [x.astype(object).reshape([int(d) for d in dims])]


@handler("Flatten")
def flatten(n: Node):
    x = n.x(0)
    r = x.type.rank
    axis = n.attr("axis", 1)
    axis = axis + r if axis < 0 else axis
    if not 0 <= axis <= r:
        raise n.error(f"Flatten: axis {axis} is out of range for rank {r}")
    return [sh.reshape(n.b, x, [numel(x.type.shape[:axis]), numel(x.type.shape[axis:])])]


def _axes_input_or_attr(n: Node, i: int, since: int) -> list[int] | None:
    if n.opset >= since:
        return n.ints(i, "axes") if n.has(i) else None
    return n.attr("axes", None)


@handler("Squeeze")
def squeeze(n: Node):
    x = n.x(0)
    axes = _axes_input_or_attr(n, 1, 13)
    if axes is not None:
        for a in axes:
            if x.type.shape[_axis(n, a, x.type.rank)] != 1:
                raise n.error(f"Squeeze: axis {a} of {x.type} does not have size 1")
    return [sh.squeeze(n.b, x, axes)]


@handler("Unsqueeze")
def unsqueeze(n: Node):
    x = n.x(0)
    axes = _axes_input_or_attr(n, 1, 13)
    if axes is None:
        raise n.error("Unsqueeze needs axes")
    r = x.type.rank + len(axes)
    shape = list(x.type.shape)
    for a in sorted(_axis(n, a, r) for a in axes):
        shape.insert(a, 1)
    return [sh.reshape(n.b, x, shape)]


@symbolic("Squeeze", "Unsqueeze")
def symbolic_squeeze(n: Node, known):
    x = known[0]
    axes = [int(v) for v in known[1].reshape(-1)] if len(known) > 1 else n.attr("axes", None)
    if n.op == "Squeeze":
        return [np.squeeze(x, axis=tuple(axes)) if axes is not None else np.squeeze(x)]
    r = x.ndim + len(axes)
    return [np.expand_dims(x, tuple(sorted(a + r if a < 0 else a for a in axes)))]


@handler("Transpose")
def transpose(n: Node):
    x = n.x(0)
    perm = n.attr("perm", list(range(x.type.rank))[::-1])
    return [sh.permute(n.b, x, perm)]


@handler("Concat")
def concat(n: Node):
    xs = n.xs()
    axis = n.attr("axis")
    if xs[0].type.dtype == "bool":
        joined = sh.concatenate(n.b, [n.b.convert(x, dtype="i8") for x in xs], axis)
        return [n.b.ne(joined, Lit(0, Type("i8")))]
    return [sh.concatenate(n.b, xs, axis)]


@symbolic("Concat")
def symbolic_concat(n: Node, known):
    return [np.concatenate([k.astype(object) for k in known], axis=n.attr("axis"))]


@handler("Split")
def split(n: Node):
    x = n.x(0)
    axis = _axis(n, n.attr("axis", 0), x.type.rank)
    length = x.type.shape[axis]
    sizes = n.ints(1, "split") if n.opset >= 13 and n.has(1) else n.attr("split", None) if n.opset < 13 else None
    count = n.attr("num_outputs", None) if n.opset >= 18 else None
    if sizes is None:
        parts = count or n.n_out
        if not isinstance(length, int):
            raise n.error("Split into equal parts needs a static axis size")
        each = -(-length // parts)
        sizes = [each] * (length // each) + ([length % each] if length % each else [])
        if len(sizes) != parts:
            raise n.error(f"Split: an axis of {length} does not split into {parts} parts")
    return sh.split(n.b, x, axis, sizes)


def _slice_params(n: Node, symbolic: bool = False):
    """starts, ends, axes, steps; with `symbolic`, starts and ends may hold symbolic dims (read off a shape)."""
    if n.opset >= 10:
        bounds = n.dims if symbolic else n.ints
        starts, ends = bounds(1, "starts"), bounds(2, "ends")
        axes = n.ints(3, "axes") if n.has(3) else None
        steps = n.ints(4, "steps") if n.has(4) else None
    else:
        starts, ends, axes, steps = n.attr("starts"), n.attr("ends"), n.attr("axes", None), None
    axes = axes if axes is not None else list(range(len(starts)))
    steps = steps if steps is not None else [1] * len(starts)
    return starts, ends, axes, steps


def clamp_bounds(n: Node, dim: Dim, start: Dim, end: Dim, step: int) -> tuple[Dim, Dim]:
    """ONNX Slice bounds on an axis of size dim (negative counts from the end; out of range clamps). Bounds that
    are symbolic dims (pos[:, :T] of a table, x[:, 1:T - 1]) stay as they are: not clamped as ONNX does (the
    exporter's shapes say they fit), they must lie in the axis, in order, which the export checks when it is
    called (status 1)."""
    if step == 0:
        raise n.error("Slice: a step of 0")
    if step > 0:
        return _bound_in(dim, start), _bound_in(dim, end)
    if not isinstance(start, int) or not isinstance(end, int):
        if start not in (0, dim) or end != dim:
            raise n.error(f"Slice: the bounds {start}:{end} by a negative step on an axis of size {dim}: a bound that "
                          "is a symbolic dim must be the axis' own size (the whole axis)")
        return start, end
    if not isinstance(dim, int):  # torch.flip exports starts=-1, ends=-INT64_MAX, steps=-1: the whole axis reversed
        s = dim_add(dim, -1) if start >= INT_MAX // 4 else start if start >= 0 else dim_add(dim, start)
        return s, (-1 if end <= -INT_MAX // 4 else end if end >= 0 else dim_add(dim, end))
    s = start + dim if start < 0 else start
    e = end + dim if end < 0 else end
    return min(max(s, 0), dim - 1), min(max(e, -1), dim - 1)


def _bound_in(dim: Dim, v: Dim) -> Dim:
    """A slice bound (step > 0) on an axis of size dim: a symbolic bound as it is, a number counted from the end
    when negative and clamped into the axis (past the end: the end)."""
    if not isinstance(v, int):
        return v
    if v >= INT_MAX // 4:
        return dim
    if v < 0:
        return max(v + dim, 0) if isinstance(dim, int) else dim_add(dim, v)
    return min(v, dim) if isinstance(dim, int) else v


@handler("Slice")
def slice_(n: Node):
    x = n.x(0)
    starts, ends, axes, steps = _slice_params(n, symbolic=True)
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis = _axis(n, axis, x.type.rank)
        s, e = clamp_bounds(n, x.type.shape[axis], start, end, step)
        x = sh.strided_slice(n.b, x, axis, s, e, step)
    return [x]


@symbolic("Slice")
def symbolic_slice(n: Node, known):
    x = known[0]
    bounds = _slice_params(n, symbolic=True)
    if any(not isinstance(v, int) for v in [*bounds[0], *bounds[1]]):  # pos[:, :T] of a table: computed
        return [Val(y) for y in slice_(n)]
    starts, ends, axes, steps = _slice_params(n)
    idx = [slice(None)] * x.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps):
        idx[axis % x.ndim] = slice(start, end, step)
    return [x[tuple(idx)]]


@handler("Expand")
def expand(n: Node):
    return [sh.expand(n.b, n.x(0), n.dims(1, "the shape"))]


@handler("Tile")
def tile(n: Node):
    return [sh.tile(n.b, n.x(0), n.dims(1, "repeats"))]  # (queries.repeat(batch, 1, 1): a symbolic count)


@handler("Pad")
def pad(n: Node):
    x = n.x(0)
    if x.type.is_str:
        raise n.error("Pad does not take strings (its operator is defined for numbers)")
    mode = n.attr_in("mode", ("constant", "reflect", "edge", "wrap"), "constant")
    if n.opset >= 11:
        pads = n.ints(1, "pads")
        value = n.known(2) if n.has(2) else None
        if n.has(2) and value is None:
            value = n.b.reshape(n.x(2), shape=())
        axes = n.ints(3, "axes") if n.has(3) else list(range(x.type.rank))
    else:
        pads, value, axes = n.attr("pads"), n.attr("value", 0.0), list(range(x.type.rank))
    if value is None or isinstance(value, np.ndarray):
        value = 0 if value is None else np.asarray(value).reshape(-1)[0].item()
    k = len(axes)
    if len(pads) != 2 * k:
        raise n.error(f"Pad: {len(pads)} pads for {k} axes")
    for i, a in enumerate(axes):
        a = _axis(n, a, x.type.rank)
        if mode == "constant":
            x = nn.pad_axis(n.b, x, a, pads[i], pads[k + i], value)
        else:
            x = sh.pad_mode(n.b, x, a, pads[i], pads[k + i], mode)
    return [x]


@handler("ConstantOfShape")
def constant_of_shape(n: Node):
    dims = n.dims(0, "the shape")
    value = n.attr("value", np.zeros(1, np.float32))
    v = np.asarray(value).reshape(-1)
    if all(isinstance(d, int) for d in dims) and int(np.prod(dims)) <= 1 << 16:
        return [np.full(dims, v[0], dtype=v.dtype)]
    from .values import atom_of_array
    scalar = atom_of_array(n.b, v.reshape(()))
    return [Lit(scalar.value, Type(scalar.type.dtype, tuple(dims)))]


@handler("Range")
def range_(n: Node):
    if any(n.val(i).known is None and n.val(i).dims is not None for i in range(3)):
        return [_range_of_cast_dims(n)]
    start, limit, delta = (n.const(i, "a bound (the length must be static)") for i in range(3))
    if any(v.dtype == object for v in (start, limit, delta)):
        s, lim, d = (SymDim.unwrap(np.asarray(v).reshape(-1)[0]) for v in (start, limit, delta))
        return [_int_range(n, s, lim, d)]
    s, lim, d = (np.asarray(v).reshape(-1)[0] for v in (start, limit, delta))
    return [np.arange(s, lim, d, dtype=start.dtype)]


def _range_of_cast_dims(n: Node) -> Atom:
    """Range(0.0, Cast(T, float), 1.0), torch.arange(x.shape[1], dtype=torch.float32) as dynamo exports it: the
    float bounds that are dims cast, whole numbers otherwise, give an integer range, converted."""
    bounds = []
    for i in range(3):
        v = n.val(i)
        if v.known is None:
            bounds.append(SymDim.unwrap(np.asarray(v.dims).reshape(-1)[0]))
            continue
        x = float(np.asarray(v.known).reshape(-1)[0])
        if not x.is_integer():
            raise n.unsupported(f"Range with a bound that is a symbolic dim and a fractional bound {x}")
        bounds.append(int(x))
    s, lim, d = bounds
    if not isinstance(d, int):
        raise n.unsupported("Range whose step is a symbolic dim, with a float bound that is a dim")
    return n.b.convert(_int_range(n, s, lim, d), dtype=compute_dtype(n.dtype(0)))


def _int_range(n: Node, start, limit, step) -> Atom:
    """start, start + step, ... short of limit as i64, some of them symbolic dims."""
    if step == 0:
        raise n.error("Range with a step of 0")
    if step == 1 and isinstance(start, int):
        return create.arange(n.b, start, limit, "i64")
    return _symbolic_steps(n, start, limit, step)


def _symbolic_steps(n: Node, start, limit, step: int):
    """start, start + step, ... short of limit, some of them symbolic dims: ceil((limit - start) / step)
    values (torch.arange(0, x.numel(), x.shape[1]) with a dynamic batch: batch values). A symbolic step
    (a dim, so positive) must divide the span visibly."""
    span = dim_sub(limit, start) if not isinstance(step, int) or step > 0 else dim_sub(start, limit)
    size = abs(step) if isinstance(step, int) else step
    count = dim_floordiv(span, size)
    if dim_mul(count, size) != span:  # (not a visible multiple: rounded up)
        if not isinstance(size, int):
            raise n.unsupported(f"Range from {start} to {limit} by a symbolic step {step} that does not divide "
                                "the span visibly")
        count = dim_floordiv(dim_add(span, size - 1), size)
    stride = Lit(step, Type("i64")) if isinstance(step, int) else n.b.dim_size(dim=step)
    steps = n.b.mul(n.b.iota(shape=(count,), axis=0, dtype="i64"), stride)
    if start == 0:
        return steps
    return n.b.add(steps, Lit(start, Type("i64")) if isinstance(start, int) else n.b.dim_size(dim=start))


@symbolic("Range")
def symbolic_range(n: Node, known):
    """Range to a symbolic dim (torch.arange(x.shape[1])) is an iota computed at run time, not a known array."""
    return [r if isinstance(r, np.ndarray) else Val(r) for r in range_(n)]


@handler("EyeLike")
def eye_like(n: Node):
    dtype = onnx_dtype(n.attr("dtype"), "EyeLike's dtype", n.loc) if "dtype" in n.attrs else n.dtype(0)
    k = n.attr("k", 0)
    rows, cols = n.val(0).shape
    i = n.b.iota(shape=(rows, cols), axis=0, dtype="i64")
    j = n.b.iota(shape=(rows, cols), axis=1, dtype="i64")
    on = n.b.eq(n.b.add(i, Lit(k, Type("i64"))), j)
    from .values import compute_dtype
    return [Val(n.b.convert(on, dtype=compute_dtype(dtype)), None, dtype)]


@handler("Trilu")
def trilu(n: Node):
    k = n.ints(1, "k")[0] if n.has(1) else 0
    return [create.triangle(n.b, n.x(0), k, lower=not n.attr("upper", 1))]


@handler("DepthToSpace")
def depth_to_space(n: Node):
    return [sh.depth_to_space(n.b, n.x(0), n.attr("blocksize"), n.attr_in("mode", ("DCR", "CRD"), "DCR"))]


@handler("SpaceToDepth")
def space_to_depth(n: Node):
    return [sh.space_to_depth(n.b, n.x(0), n.attr("blocksize"), n.attr_in("mode", ("DCR", "CRD"), "DCR"))]


@handler("Dropout")
def dropout(n: Node):
    x = n.x(0)
    seed = n.attr("seed", 0)
    if n.opset < 7:
        n.attr("is_test", 0)
    ratio = n.attr("ratio", 0.5) if n.opset < 12 else (n.const(1, "the ratio") if n.has(1) else 0.5)
    training = n.opset >= 12 and n.has(2) and bool(np.asarray(n.const(2, "training_mode")).reshape(-1)[0])
    ratio = np.asarray(ratio).reshape(-1)[0]
    if not training or float(ratio) == 0:
        return [n.val(0), Lit(True, Type("bool", x.type.shape))]
    return _seeded_dropout(n, x, seed, ratio)


def _seeded_dropout(n: Node, x, seed: int, ratio):
    """Dropout in training mode with a `seed`: the mask is drawn when the model is compiled, as the onnx
    reference draws it (numpy's RandomState(seed).uniform(0, 1, shape) >= ratio), so every call uses
    the same mask: a pure function of its inputs, which vjp and grad can follow."""
    if "seed" not in n.attrs:
        raise n.unsupported("Dropout in training mode without a 'seed' attribute (ksbuild draws the mask "
                            "when it compiles the model, from numpy's RandomState(seed))")
    if not all(isinstance(d, int) for d in x.type.shape):
        raise n.unsupported(f"Dropout in training mode of a tensor with symbolic dims {x.type.shape} "
                            "(the mask is drawn when the model is compiled)")
    if not 0 <= float(ratio) < 1:
        raise n.error(f"Dropout: the ratio must be in [0, 1), got {float(ratio)}")
    keep = np.random.RandomState(seed).uniform(0, 1.0, x.type.shape) >= ratio
    scale = 1.0 / (1.0 - float(ratio))
    mask = create.array(n.b, keep)
    kept = n.b.select(mask, x, Lit(0, x.type))
    return [n.b.mul(kept, Lit(scale, x.type)), keep]

