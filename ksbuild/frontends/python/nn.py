"""More of torch for the Python frontend: elementwise math, activations, losses, statistics,
indexing with tensors, cumulative ops. Each entry parses torch's calling convention and calls the
op library (ksbuild/ops), like tensors.py; `@torch_function` (registry.py) registers each under its names.
"""
from __future__ import annotations

import math

from ...ir.core import Atom, Lit
from ...ir.types import Type
from ...ops import activations, create, index, linalg, nn, reduce
from ...ops import math as math_ops
from ...ops import shape as shape_ops
from .mathlib import refuse_tensor_in_math
from .registry import torch_function
from .scope import Const
from .tensors import (
    _arg,
    _two_floats,
    axes_arg,
    float_tensor,
    int_const,
    norm_axis,
    tensor,
)


def _c(x: Atom, v: float) -> Lit:
    return Lit(float(v), Type(x.type.dtype))


def _float_kw(fc, args, kw, pos, name, node, default: float) -> float:
    v = _arg(fc, args, kw, pos, name, node, Const(default))
    if not isinstance(v, Const):
        raise fc.src.error(node, f"'{name}' must be a number literal here")
    return float(v.value)


# ---- elementwise -------------------------------------------------------------------------------

def _unary(op):
    """torch.f(x) for an op of ops/math or ops/activations taking (b, x); any other argument is an error
    (F.hardtanh(x, -2.0, 2.0) or torch.round(x, decimals=2) must not quietly compute something else)."""
    def fn(fc, b, args, kw, node):
        _only_input(fc, args, kw, node)
        return op(b, float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node))
    return fn


def _only_input(fc, args, kw, node) -> None:
    """The call passes its input and at most inplace=False."""
    extra = [k for k in kw if k not in ("input", "inplace")]
    inplace = args[1] if len(args) == 2 and not kw else kw.get("inplace", Const(False))
    if len(args) > 2 or (len(args) == 2 and kw) or extra or not (isinstance(inplace, Const) and inplace.value is False):
        what = f"argument '{extra[0]}'" if extra else "inplace=True" if len(args) <= 2 else "extra arguments"
        raise fc.src.error(node, f"{what} not supported here", hint="pass the input only (kernels never update "
                                                                     "a tensor in place)")


def _prim_unary(name: str):
    def fn(fc, b, args, kw, node):
        return getattr(b, name)(float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node))
    return fn


def _log_base(base: float):
    def op(b, x):
        return b.mul(b.log(x), _c(x, 1.0 / math.log(base)))
    return op


def _rsqrt(b, x):
    return b.div(_c(x, 1.0), b.sqrt(x))


def _logsigmoid(b, x):
    return b.neg(activations.softplus(b, b.neg(x)))


def _hardtanh(lo: float, hi: float, bounds: bool):
    """F.hardtanh(x, min_val=-1, max_val=1) (bounds=True) and F.relu6(x): as torch's, the derivative is 0 at
    the bounds (a clamp's is 1 there) and a NaN stays NaN."""
    def fn(fc, b, args, kw, node):
        x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
        low, high = lo, hi
        if bounds:
            low = _float_kw(fc, args, kw, 1, "min_val", node, lo)
            high = _float_kw(fc, args, kw, 2, "max_val", node, hi)
            args, kw = args[:1] + args[3:], {k: v for k, v in kw.items() if k not in ("min_val", "max_val")}
        _only_input(fc, args, kw, node)
        low_c, high_c = _c(x, low), _c(x, high)
        return b.select(b.le(x, low_c), low_c, b.select(b.ge(x, high_c), high_c, x))
    return fn


@torch_function("torch.hypot")
def _hypot(fc, b, args, kw, node):
    """sqrt(x² + y²), neither overflowing (1e300) nor underflowing (1e-200) (the hypot prim: C's hypot)."""
    x, y = _two_floats(fc, b, args[:2], node, "hypot")
    return b.hypot(*fc.unify(b, x, y, node))


@torch_function("torch.logaddexp")
def _logaddexp(fc, b, args, kw, node):
    """log(e^x + e^y) = hi + log1p(e^(lo - hi)) with hi, lo = x, y where x > y, else y, x: at a tie this is
    y + log1p(e^(x - y)), whose derivatives are torch's (σ(0) = ½ for each, ¼ for the second); equal
    infinities give themselves (inf - inf would be NaN)."""
    x, y = _two_floats(fc, b, args[:2], node, "logaddexp")
    first = b.gt(x, y)
    hi, lo = b.select(first, x, y), b.select(first, y, x)
    same_inf = math_ops.logical_and(b, b.eq(x, y), b.eq(b.abs(x), _c(x, math.inf)))
    return b.select(same_inf, x, b.add(hi, b.log1p(b.exp(b.select(same_inf, _c(x, 0), b.sub(lo, hi))))))


def _predicate(op):
    def fn(fc, b, args, kw, node):
        return op(b, float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node))
    return fn


def _isfinite(b, x):
    return math_ops.logical_not(b, math_ops.logical_or(b, math_ops.isnan(b, x), math_ops.isinf(b, x)))


# ---- activations (torch.nn.functional) -----------------------------------------------------------

@torch_function("torch.nn.functional.gelu")
def _gelu(fc, b, args, kw, node):
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    return activations.gelu(b, x, _arg(fc, args, kw, 1, "approximate", node, "none"))


def _with_alpha(op, name: str, default: float):
    def fn(fc, b, args, kw, node):
        x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
        return op(b, x, _float_kw(fc, args, kw, 1, name, node, default))
    return fn


def _selu(b, x):
    # torch's constants (Klambauer et al. 2017)
    return activations.selu(b, x, 1.6732632423543772, 1.0507009873554805)


@torch_function("torch.nn.functional.softplus")
def _softplus(fc, b, args, kw, node):
    """F.softplus(x, beta=1, threshold=20): x itself where beta·x > threshold, as torch's."""
    from ...ops import aten
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    beta = _float_kw(fc, args, kw, 1, "beta", node, 1.0)
    threshold = _float_kw(fc, args, kw, 2, "threshold", node, 20.0)
    return aten.softplus(b, x, beta, threshold)


def _torch_alpha(op, name: str, default: float):
    """F.leaky_relu / F.celu with torch's derivative at 0 (ops/aten.py: the slope for leaky_relu, 1 for celu)."""
    def fn(fc, b, args, kw, node):
        from ...ops import aten
        x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
        alpha = _float_kw(fc, args, kw, 1, name, node, default)
        if op == "leaky_relu":
            return aten.leaky_relu(b, x, alpha)
        return aten.elu(b, x, alpha, 1.0, 1.0 / alpha)  # celu(x, α) = elu with input scale 1/α
    return fn


# ---- reductions and statistics --------------------------------------------------------------------

def _var_std(std: bool):
    """x.var(dim=None, unbiased=True, keepdim=False) (also correction=): Σ(x - mean)² / (N - correction)."""
    def fn(fc, b, args, kw, node):
        x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
        axes = axes_arg(fc, _arg(fc, args, kw, 1, "dim", node, None), x.type.rank, node)
        unbiased = _arg(fc, args, kw, 2, "unbiased", node, Const(True))
        correction = kw.get("correction", Const(1 if unbiased.value else 0))
        keep = _arg(fc, args, kw, 3, "keepdim", node, Const(False))
        mu = reduce.mean(b, x, axes, keepdim=True)
        ss = reduce.sum(b, b.ipow(b.sub(x, mu), n=2), axes, keepdim=keep.value)
        from ...ops._util import numel
        count = numel([x.type.shape[a] for a in axes])
        denom = b.sub(_count(b, count, x.type.dtype), _c(x, correction.value))
        v = b.div(ss, denom)
        return math_ops.norm_root(b, v) if std else v  # the std of equal values has gradient 0, as torch's
    return fn


def _count(b, n, dtype: str) -> Atom:
    if isinstance(n, int):
        return Lit(float(n), Type(dtype))
    return b.convert(b.dim_size(dim=n), dtype=dtype)


@torch_function("torch.norm", "torch.linalg.vector_norm", "Tensor.norm")
def _norm(fc, b, args, kw, node):
    """torch.norm / torch.linalg.norm / x.norm(p=2, dim=None, keepdim=False) for vector p-norms."""
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    p = _arg(fc, args, kw, 1, "p", node, kw.get("ord", Const(2)))
    axes = axes_arg(fc, _arg(fc, args, kw, 2, "dim", node, None), x.type.rank, node)
    keep = _arg(fc, args, kw, 3, "keepdim", node, Const(False)).value
    if not isinstance(p, Const) or isinstance(p.value, bool):
        raise fc.src.error(node, "the norm order must be a number literal (p=2, p=1, p=float('inf'))")
    from ...ops.aten import vector_norm
    return vector_norm(b, x, float(p.value), axes, keep)


@torch_function("torch.linalg.norm")
def _linalg_norm(fc, b, args, kw, node):
    """torch.linalg.norm(A, ord=None, dim=None, keepdim=False): with an ord, over a matrix (a 2-d input, or dim
    two axes) the matrix norm (ord 1 / -1: the largest / smallest column sum of |A|, inf / -inf: of row sums;
    2, -2 and 'nuc' need singular values: an error); otherwise the vector norm, as torch.norm."""
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    order = _arg(fc, args, kw, 1, "ord", node, None)
    dim = _arg(fc, args, kw, 2, "dim", node, None)
    axes = axes_arg(fc, dim, x.type.rank, node) if dim is not None else None
    matrix = order is not None and ((dim is None and x.type.rank == 2) or (axes is not None and len(axes) == 2))
    if not matrix:
        return _norm(fc, b, args, kw, node)
    if not isinstance(order, Const) or float(order.value) not in (1.0, -1.0, math.inf, -math.inf):
        shown = order.value if isinstance(order, Const) else "this"
        raise fc.src.error(node, f"the matrix norm of order {shown!r} is not supported (it needs singular values)",
                           hint="matrix norms of order 1, -1, inf and -inf are; for the Frobenius norm leave ord "
                                "out; for a vector norm of all entries use torch.linalg.vector_norm")
    rows, cols = axes if axes is not None else (0, 1)
    keep = _arg(fc, args, kw, 3, "keepdim", node, Const(False)).value
    o = float(order.value)
    summed, over = (rows, cols) if abs(o) == 1.0 else (cols, rows)  # ord ±1: sums down columns, then over them
    sums = reduce.sum(b, b.abs(x), [summed], keepdim=True)
    out = (reduce.amax if o > 0 else reduce.amin)(b, sums, [over], keepdim=True)
    kept = tuple(d for i, d in enumerate(x.type.shape) if i not in (rows, cols))
    return out if keep else shape_ops.reshape(b, out, kept)


@torch_function("torch.prod", "Tensor.prod")
def _prod(fc, b, args, kw, node):
    x = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    axes = axes_arg(fc, _arg(fc, args, kw, 1, "dim", node, None), x.type.rank, node)
    return reduce.prod(b, x, axes, _arg(fc, args, kw, 2, "keepdim", node, Const(False)).value)


def _cumulative(op):
    def fn(fc, b, args, kw, node):
        x = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
        axis = int_const(fc, _arg(fc, args, kw, 1, "dim", node), node, "dim")
        return op(b, x, norm_axis(fc, axis, x.type.rank, node))
    return fn


def _arg_ext(largest: bool):
    """torch.argmax(x, dim=None, keepdim=False): the first position of the maximum (flattened without dim)."""
    def fn(fc, b, args, kw, node):
        x = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
        dim = _arg(fc, args, kw, 1, "dim", node, None)
        keep = _arg(fc, args, kw, 2, "keepdim", node, Const(False)).value
        if dim is None:
            flat = shape_ops.reshape(b, x, (-1,)) if x.type.rank != 1 else x
            return index.arg_extremum(b, flat, 0, False, largest)
        return index.arg_extremum(b, x, int_const(fc, dim, node, "dim"), keep, largest)
    return fn


# ---- indexing with tensors -------------------------------------------------------------------------

@torch_function("torch.gather", "Tensor.gather")
def _gather(fc, b, args, kw, node):
    """torch.gather(x, dim, index): out[i][j] = x[i][index[i][j]] along dim."""
    x = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    axis = int_const(fc, _arg(fc, args, kw, 1, "dim", node), node, "dim")
    idx = tensor(fc, b, _arg(fc, args, kw, 2, "index", node), node)
    return index.gather_elements(b, x, _i64(b, idx), axis)


@torch_function("torch.index_select", "Tensor.index_select")
def _index_select(fc, b, args, kw, node):
    """torch.index_select(x, dim, index): whole slices of x picked along dim."""
    x = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    axis = int_const(fc, _arg(fc, args, kw, 1, "dim", node), node, "dim")
    return index.gather(b, x, _i64(b, tensor(fc, b, _arg(fc, args, kw, 2, "index", node), node)), axis)


def _i64(b, idx: Atom) -> Atom:
    return idx if idx.type.dtype == "i64" else b.convert(idx, dtype="i64")


@torch_function("torch.nn.functional.embedding")
def _embedding(fc, b, args, kw, node):
    idx = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    weight = tensor(fc, b, _arg(fc, args, kw, 1, "weight", node), node)
    return index.gather(b, weight, _i64(b, idx), 0)


@torch_function("torch.nn.functional.one_hot")
def _one_hot(fc, b, args, kw, node):
    """F.one_hot(i, num_classes) with num_classes a literal or a dim (x.shape[1]); torch's -1 (infer it from the
    data) is not possible for a size known before the kernel runs."""
    from .tensors import as_dim
    idx = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    num = _arg(fc, args, kw, 1, "num_classes", node, Const(-1))
    if isinstance(num, Const) and num.value == -1:
        raise fc.src.error(node, "F.one_hot needs num_classes (its size must be known when the kernel is called)",
                           hint="pass a literal or a dim, e.g. F.one_hot(i, x.shape[1])")
    n = as_dim(fc, num, node)
    return index.one_hot(b, _i64(b, idx), n, Lit(0, Type("i64")), Lit(1, Type("i64")))


def _main_diagonal_only(fc, args, kw, node, name: str) -> None:
    """A located error for the offset (and axis) arguments of diag/diagonal other than the main diagonal."""
    offset = _arg(fc, args, kw, 1, "diagonal" if name == "diag" else "offset", node, Const(0))
    extra = len(args) > 2 or any(k not in ("input", "offset", "diagonal") for k in kw)
    if extra or not (isinstance(offset, Const) and offset.value == 0):
        raise fc.src.error(node, f"torch.{name}: the main diagonal only (offset 0, the last two axes of a matrix)")


@torch_function("torch.diagonal", "Tensor.diagonal")
def _diagonal(fc, b, args, kw, node):
    _main_diagonal_only(fc, args, kw, node, "diagonal")
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    if x.type.rank != 2:
        raise fc.src.error(node, f"diagonal of {x.type}: matrices only")
    return linalg.einsum_many(b, "ii->i", [x])


@torch_function("torch.diag")
def _diag(fc, b, args, kw, node):
    """torch.diag: the diagonal of a matrix, or the diagonal matrix of a vector."""
    _main_diagonal_only(fc, args, kw, node, "diag")
    v = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    if v.type.rank != 1:
        return _diagonal(fc, b, args[:1], {}, node)
    n = v.type.shape[0]
    return linalg.einsum_many(b, "j,ij->ij", [v, create.eye(b, n, n, v.type.dtype)])


@torch_function("torch.trace", "Tensor.trace")
def _trace(fc, b, args, kw, node):
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    return linalg.einsum_many(b, "ii->", [x])


@torch_function("torch.einsum")
def _einsum(fc, b, args, kw, node):
    """torch.einsum(spec, *operands) with any number of operands (and ... / repeated letters)."""
    if not args or not isinstance(args[0], str):
        raise fc.src.error(node, "torch.einsum takes a spec string and its operands")
    ops = args[1] if len(args) == 2 and isinstance(args[1], (list, tuple)) else args[1:]
    xs = [float_tensor(fc, b, a, node) for a in ops]
    if len(xs) == 2 and "..." not in args[0]:
        x, y = fc.unify(b, xs[0], xs[1], node)
        spec = args[0].replace(" ", "")
        lhs = spec.split("->")[0].split(",")
        if "->" in spec and all(len(set(t)) == len(t) for t in lhs):
            return linalg.einsum(b, args[0], x, y)
    return linalg.einsum_many(b, args[0], xs)


@torch_function("torch.cdist")
def _cdist(fc, b, args, kw, node):
    """torch.cdist(x1, x2) for p = 2: Euclidean distances between rows."""
    x, y = _two_floats(fc, b, args[:2], node, "cdist")
    return linalg.cdist(b, x, y)


# ---- torch.nn.functional extras ----------------------------------------------------------------

@torch_function("torch.nn.functional.normalize")
def _normalize(fc, b, args, kw, node):
    """F.normalize(x, p=2, dim=1, eps=1e-12): x / max(‖x‖_p, eps) along dim."""
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    p = _float_kw(fc, args, kw, 1, "p", node, 2.0)
    axis = int_const(fc, _arg(fc, args, kw, 2, "dim", node, Const(1)), node, "dim")
    eps = _float_kw(fc, args, kw, 3, "eps", node, 1e-12)
    norm = _norm(fc, b, [x, Const(p), Const(axis), Const(True)], {}, node)
    return b.div(x, math_ops.clamp(b, norm, _c(x, eps)))  # (a NaN norm stays NaN, as torch's clamp_min)


@torch_function("torch.cosine_similarity", "torch.nn.functional.cosine_similarity")
def _cosine_similarity(fc, b, args, kw, node):
    x, y = _two_floats(fc, b, args[:2], node, "cosine_similarity")
    axis = int_const(fc, _arg(fc, args, kw, 2, "dim", node, Const(1)), node, "dim")
    eps = _float_kw(fc, args, kw, 3, "eps", node, 1e-8)
    # torch's: each vector divided by max(its norm, eps), then the dot product (a zero vector has a finite
    # gradient; a norm's derivative at 0 is 0, ops.math.norm_root)
    nx = math_ops.norm_root(b, reduce.sum(b, b.ipow(x, n=2), [axis], keepdim=True))
    ny = math_ops.norm_root(b, reduce.sum(b, b.ipow(y, n=2), [axis], keepdim=True))
    xn = b.div(x, math_ops.clamp(b, nx, _c(x, eps)))
    yn = b.div(y, math_ops.clamp(b, ny, _c(y, eps)))
    return reduce.sum(b, b.mul(xn, yn), [axis])


@torch_function("torch.nn.functional.layer_norm")
def _layer_norm(fc, b, args, kw, node):
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    shape = _arg(fc, args, kw, 1, "normalized_shape", node)
    count = len(shape) if isinstance(shape, (tuple, list)) else 1
    w = _arg(fc, args, kw, 2, "weight", node, None)
    bias = _arg(fc, args, kw, 3, "bias", node, None)
    eps = _float_kw(fc, args, kw, 4, "eps", node, 1e-5)
    w = None if w is None else tensor(fc, b, w, node)
    bias = None if bias is None else tensor(fc, b, bias, node)
    return nn.layer_norm(b, x, w, bias, x.type.rank - count, eps)[0]


def _conv_operands(fc, b, args, kw, node, what: str, k: int):
    """(input, weight, bias or None) of a k-d convolution call, both of rank k + 2."""
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    w = float_tensor(fc, b, _arg(fc, args, kw, 1, "weight", node), node)
    bias = _arg(fc, args, kw, 2, "bias", node, None)
    bias = None if bias is None or (isinstance(bias, Const) and bias.value is None) else \
        float_tensor(fc, b, bias, node)
    if x.type.rank != k + 2 or w.type.rank != k + 2:
        raise fc.src.error(node, f"{what} takes an input and a weight of rank {k + 2}, got {x.type} and {w.type}")
    return x, w, bias


def _conv_transpose(k: int):
    """F.conv_transpose1d/2d/3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
    dilation=1): the weight is [C_in, C_out / groups, *kernel]."""
    def fn(fc, b, args, kw, node):
        x, w, bias = _conv_operands(fc, b, args, kw, node, f"F.conv_transpose{k}d", k)
        if not all(isinstance(d, int) for d in w.type.shape):
            raise fc.src.error(node, f"F.conv_transpose{k}d needs a weight of literal sizes, got {w.type}")
        strides = _ints(fc, _arg(fc, args, kw, 3, "stride", node, Const(1)), k, node, "stride")
        lo = _ints(fc, _arg(fc, args, kw, 4, "padding", node, Const(0)), k, node, "padding")
        extra = _ints(fc, _arg(fc, args, kw, 5, "output_padding", node, Const(0)), k, node, "output_padding")
        groups = int_const(fc, _arg(fc, args, kw, 6, "groups", node, Const(1)), node, "groups")
        dilations = _ints(fc, _arg(fc, args, kw, 7, "dilation", node, Const(1)), k, node, "dilation")
        return nn.conv_transpose(b, x, w, bias, strides, lo + lo, dilations, groups, extra)
    return fn


@torch_function("torch.scatter_add", "Tensor.scatter_add")
def _scatter_add(fc, b, args, kw, node):
    """torch.scatter_add(input, dim, index, src) / x.scatter_add(dim, index, src): src added at index along dim
    (repeated indices add up)."""
    x = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    axis = norm_axis(fc, int_const(fc, _arg(fc, args, kw, 1, "dim", node), node, "dim"), x.type.rank, node)
    idx = tensor(fc, b, _arg(fc, args, kw, 2, "index", node), node)
    src = tensor(fc, b, _arg(fc, args, kw, 3, "src", node), node)
    if src.type.dtype != x.type.dtype:
        src = b.convert(src, dtype=x.type.dtype)
    return index.scatter_elements(b, x, idx, src, axis, "add")


@torch_function("torch.nn.functional.interpolate")
def _interpolate(fc, b, args, kw, node):
    """F.interpolate(input, size=None, scale_factor=None, mode='nearest', align_corners=None,
    recompute_scale_factor=None, antialias=False) over literal image sizes (ops.resize.torch_interpolate)."""
    from ...ops import resize
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    k = x.type.rank - 2
    size, factor = _arg(fc, args, kw, 1, "size", node, None), _arg(fc, args, kw, 2, "scale_factor", node, None)
    mode = _arg(fc, args, kw, 3, "mode", node, "nearest")
    corners = _arg(fc, args, kw, 4, "align_corners", node, None)
    recompute = _arg(fc, args, kw, 5, "recompute_scale_factor", node, None)
    antialias = _arg(fc, args, kw, 6, "antialias", node, Const(False))
    mode = mode.value if isinstance(mode, Const) else mode
    if k < 1 or mode not in resize.TORCH_MODES:
        raise fc.src.error(node, f"F.interpolate of {x.type} with mode {mode!r} is not supported",
                           hint=f"modes: {', '.join(resize.TORCH_MODES)} of [N, C, *spatial] inputs")
    if isinstance(antialias, Const) and antialias.value:
        raise fc.src.error(node, "F.interpolate with antialias=True is not supported")
    if (size is None) == (factor is None):
        raise fc.src.error(node, "F.interpolate takes one of size and scale_factor")
    if not all(isinstance(d, int) for d in x.type.shape[2:]):
        raise fc.src.error(node, f"F.interpolate needs literal image sizes, got {x.type}",
                           hint='annotate the input with literal sizes, e.g. "float[n, c, 16, 16]"')
    if size is not None:
        out = _ints(fc, size, k, node, "size")
        scales = None
    else:
        factors = [float(f.value) if isinstance(f, Const) else f for f in
                   (factor if isinstance(factor, (tuple, list)) else [factor] * k)]
        if not all(isinstance(f, float) for f in factors) or len(factors) != k:
            raise fc.src.error(node, "scale_factor must be a number or one literal per spatial axis")
        out = [int(math.floor(n * f)) for n, f in zip(x.type.shape[2:], factors)]
        scales = None if isinstance(recompute, Const) and recompute.value else factors
    corners = bool(corners.value) if isinstance(corners, Const) and corners.value is not None else False
    return resize.torch_interpolate(b, x, out, scales, mode, corners)


@torch_function("torch.nn.functional.scaled_dot_product_attention")
def _sdpa(fc, b, args, kw, node):
    """F.scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
    scale=None, enable_gqa=False): ops.nn.attention (a query that attends to nothing gets 0)."""
    q = float_tensor(fc, b, _arg(fc, args, kw, 0, "query", node), node)
    k = float_tensor(fc, b, _arg(fc, args, kw, 1, "key", node), node)
    v = float_tensor(fc, b, _arg(fc, args, kw, 2, "value", node), node)
    mask = _arg(fc, args, kw, 3, "attn_mask", node, None)
    if _float_kw(fc, args, kw, 4, "dropout_p", node, 0.0) != 0.0:
        raise fc.src.error(node, "scaled_dot_product_attention with dropout_p > 0 draws random numbers",
                           hint="pass dropout_p=0.0 (no dropout at inference)")
    causal = _arg(fc, args, kw, 5, "is_causal", node, Const(False))
    scale = _arg(fc, args, kw, 6, "scale", node, None)
    gqa = _arg(fc, args, kw, 7, "enable_gqa", node, Const(False))
    if not isinstance(causal, Const) or not isinstance(gqa, Const) or (scale is not None and
                                                                       not isinstance(scale, Const)):
        raise fc.src.error(node, "is_causal, scale and enable_gqa must be literals")
    if gqa.value:
        raise fc.src.error(node, "scaled_dot_product_attention with enable_gqa=True is not supported",
                           hint="repeat the key/value heads (k.repeat_interleave) before the call")
    if mask is not None:
        mask = tensor(fc, b, mask, node)
        if mask.type.dtype != "bool" and mask.type.dtype != q.type.dtype:
            mask = b.convert(mask, dtype=q.type.dtype)
    return nn.attention(b, q, k, v, mask, bool(causal.value), None if scale is None else float(scale.value))


def channel_affine(fc, b, x, w, bias, node):
    """A normalization's per-channel weight and bias (dim 1 of x): ones and zeros where not given."""
    c = x.type.shape[1]
    w = b.broadcast_to(_c(x, 1.0), shape=(c,)) if w is None else tensor(fc, b, w, node)
    bias = b.broadcast_to(_c(x, 0.0), shape=(c,)) if bias is None else tensor(fc, b, bias, node)
    return w, bias


@torch_function("torch.nn.functional.group_norm")
def _group_norm(fc, b, args, kw, node):
    """F.group_norm(input, num_groups, weight=None, bias=None, eps=1e-5)."""
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    groups = int_const(fc, _arg(fc, args, kw, 1, "num_groups", node), node, "num_groups")
    w, bias = channel_affine(fc, b, x, _arg(fc, args, kw, 2, "weight", node, None),
                             _arg(fc, args, kw, 3, "bias", node, None), node)
    return nn.group_norm(b, x, w, bias, groups, _float_kw(fc, args, kw, 4, "eps", node, 1e-5))


@torch_function("torch.nn.functional.glu")
def _glu(fc, b, args, kw, node):
    """F.glu(input, dim=-1): the first half times the sigmoid of the second."""
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    return activations.glu(b, x, int_const(fc, _arg(fc, args, kw, 1, "dim", node, Const(-1)), node, "dim"))


@torch_function("torch.nn.functional.pad")
def _pad(fc, b, args, kw, node):
    """F.pad(x, (left, right, top, bottom, ...), mode='constant', value=0): last axis first; the modes
    reflect, replicate and circular too (pad_modes)."""
    x = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    pads = _arg(fc, args, kw, 1, "pad", node)
    mode = _arg(fc, args, kw, 2, "mode", node, Const("constant"))
    mode = mode.value if isinstance(mode, Const) else mode
    value = _float_kw(fc, args, kw, 3, "value", node, 0.0)
    if mode not in ("constant", "reflect", "replicate", "circular") or not isinstance(pads, (tuple, list)) \
            or len(pads) % 2:
        raise fc.src.error(node, "F.pad takes a tuple of (low, high) pairs and mode 'constant', 'reflect', "
                                 "'replicate' or 'circular'")
    sizes = [int_const(fc, p, node, "a pad") for p in pads]
    if mode != "constant":
        return pad_modes(fc, b, x, sizes, mode, node)
    for k in range(len(sizes) // 2):
        x = nn.pad_axis(b, x, x.type.rank - 1 - k, sizes[2 * k], sizes[2 * k + 1], value)
    return x


def pad_modes(fc, b, x: Atom, sizes: list[int], mode: str, node) -> Atom:
    """F.pad's reflect, replicate and circular modes: (low, high) pairs from the last axis back."""
    ops_mode = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode]
    for k in range(len(sizes) // 2):
        axis = x.type.rank - 1 - k
        lo, hi = sizes[2 * k], sizes[2 * k + 1]
        n = x.type.shape[axis]
        if lo < 0 or hi < 0:
            raise fc.src.error(node, f"F.pad mode '{mode}' with a negative pad")
        if mode == "reflect" and isinstance(n, int) and max(lo, hi) >= n:
            raise fc.src.error(node, f"F.pad mode 'reflect': a pad of {max(lo, hi)} on an axis of {n} (it must be "
                                     "smaller than the axis)")
        x = shape_ops.pad_mode(b, x, axis, lo, hi, ops_mode)
    return x


def _ints(fc, v, k: int, node, what: str) -> list[int]:
    """An int or a tuple of k ints (torch's stride=2 / stride=(2, 1))."""
    vs = list(v) if isinstance(v, (tuple, list)) else [v] * k
    if len(vs) != k:
        raise fc.src.error(node, f"{what} needs {k} values, got {len(vs)}")
    return [int_const(fc, x, node, what) for x in vs]


def _conv(k: int):
    """F.conv1d/2d/3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1); padding may be
    'valid' or 'same' (stride 1; an odd total puts the extra zero at the end, as torch does)."""
    def fn(fc, b, args, kw, node):
        x, w, bias = _conv_operands(fc, b, args, kw, node, f"F.conv{k}d", k)
        if not all(isinstance(d, int) for d in w.type.shape[2:]):
            sizes = ", ".join(["3"] * k)
            raise fc.src.error(node, f"F.conv{k}d needs a weight whose kernel sizes are literals, got {w.type}",
                               hint=f'annotate the weight with literal sizes, e.g. "float[co, ci, {sizes}]"')
        strides = _ints(fc, _arg(fc, args, kw, 3, "stride", node, Const(1)), k, node, "stride")
        padding = _arg(fc, args, kw, 4, "padding", node, Const(0))
        dilations = _ints(fc, _arg(fc, args, kw, 5, "dilation", node, Const(1)), k, node, "dilation")
        groups = int_const(fc, _arg(fc, args, kw, 6, "groups", node, Const(1)), node, "groups")
        if padding in ("valid", "same"):
            sizes = w.type.shape[2:]
            if padding == "same" and (any(s != 1 for s in strides) or not all(isinstance(d, int) for d in sizes)):
                raise fc.src.error(node, "padding='same' needs stride 1 and literal kernel sizes")
            total = [d * (s - 1) if padding == "same" else 0 for d, s in zip(dilations, sizes)]
            pads = [t // 2 for t in total] + [t - t // 2 for t in total]
        else:
            lo = _ints(fc, padding, k, node, "padding")
            pads = lo + lo
        return nn.conv(b, x, w, bias, strides, pads, dilations, groups)
    return fn


def _pool(k: int, kind: str):
    """F.max_poolNd / F.avg_poolNd(input, kernel_size, stride=kernel_size, padding=0, ...)."""
    def fn(fc, b, args, kw, node):
        x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
        if x.type.rank != k + 2:
            raise fc.src.error(node, f"F.{kind}_pool{k}d takes an input of rank {k + 2} (batch, channels, ...), "
                                     f"got {x.type}")
        size = _ints(fc, _arg(fc, args, kw, 1, "kernel_size", node), k, node, "kernel_size")
        stride = _arg(fc, args, kw, 2, "stride", node, None)
        strides = size if stride is None or (isinstance(stride, Const) and stride.value is None) else \
            _ints(fc, stride, k, node, "stride")
        lo = _ints(fc, _arg(fc, args, kw, 3, "padding", node, Const(0)), k, node, "padding")
        if kind == "max":
            dil = _ints(fc, _arg(fc, args, kw, 4, "dilation", node, Const(1)), k, node, "dilation")
            ceil = bool(_arg(fc, args, kw, 5, "ceil_mode", node, Const(False)).value)
            return nn.max_pool(b, x, size, strides, lo + lo, dil, ceil)
        ceil = bool(_arg(fc, args, kw, 4, "ceil_mode", node, Const(False)).value)
        include = bool(_arg(fc, args, kw, 5, "count_include_pad", node, Const(True)).value)
        return nn.avg_pool(b, x, size, strides, lo + lo, None, ceil, include)
    return fn


@torch_function("Tensor.expand", receiver=True)
def _expand(fc, b, x, args, kw, node):
    """x.expand(*sizes): -1 keeps a size."""
    from .tensors import shape_args
    x = tensor(fc, b, x, node)
    dims = list(shape_args(fc, args, node))
    lead = len(dims) - x.type.rank
    dims = [x.type.shape[i - lead] if d == -1 else d for i, d in enumerate(dims)]
    return shape_ops.expand(b, x, dims)


@torch_function("Tensor.repeat", receiver=True)
def _repeat(fc, b, x, args, kw, node):
    """x.repeat(*repeats) (tile)."""
    x = tensor(fc, b, x, node)
    reps = [int_const(fc, r, node, "a repeat count") for r in
            (list(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else args)]
    lead = len(reps) - x.type.rank
    if lead < 0:
        raise fc.src.error(node, f"repeat needs at least {x.type.rank} counts")
    if lead:
        x = shape_ops.reshape(b, x, (1,) * lead + x.type.shape)
    return shape_ops.tile(b, x, reps)


@torch_function("Tensor.tile", receiver=True)
def _tile(fc, b, x, args, kw, node):
    """x.tile(*dims) / torch.tile(x, dims): repeat, with fewer counts than axes padded by leading ones."""
    x = tensor(fc, b, x, node)
    reps = list(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else list(args)
    return _repeat(fc, b, x, [Const(1)] * max(0, x.type.rank - len(reps)) + reps, kw, node)


@torch_function("torch.tile")
def _tile_function(fc, b, args, kw, node):
    """torch.tile(x, dims)."""
    return _tile(fc, b, args[0], args[1:], kw, node)


def _method(fn):
    """A torch function f(x, ...) as the method x.f(...)."""
    return lambda fc, b, x, args, kw, node: fn(fc, b, [x, *args], kw, node)


def _math_function(name: str, handler):
    """math.name(...): folded with Python's math on constants, else the torch function on values."""
    def fn(fc, b, args, kw, node):
        if all(isinstance(a, Const) for a in args) and not kw:
            try:
                v = getattr(math, name)(*[a.value for a in args])
            except (ValueError, OverflowError, ZeroDivisionError) as e:
                raise fc.src.error(node, f"constant expression fails: {e}") from None
            return Const(float(v) if not isinstance(v, bool) else v)
        refuse_tensor_in_math(fc, name, args, node)
        return handler(fc, b, [a if not isinstance(a, Const) else Const(float(a.value)) for a in args], kw, node)
    return fn


@torch_function("torch.copysign")
def _copysign(fc, b, args, kw, node):
    """|x| with the sign bit of y (-0.0 and a NaN with its sign bit set count as negative, as in C and Python):
    y's bits read as a signed integer are negative exactly then."""
    x, y = _two_floats(fc, b, args[:2], node, "copysign")
    bits = "i32" if y.type.dtype == "f32" else "i64"
    negative = b.lt(b.bitcast(y, dtype=bits), Lit(0, Type(bits)))
    return b.select(negative, b.neg(b.abs(x)), b.abs(x))


def _pieces(fc, n, size, node, what: str) -> list:
    """The sizes of consecutive pieces of `size` covering an axis of n (the last one shorter, as in torch), or
    equal pieces when both are dims and n is visibly a multiple of size."""
    from ...ir.types import dim_floordiv, dim_mul
    if isinstance(n, int) and isinstance(size, int):
        if size <= 0:
            raise fc.src.error(node, f"{what}: the piece size must be positive, got {size}")
        return [min(size, n - k) for k in range(0, n, size)]
    count = dim_floordiv(n, size) if isinstance(size, int) else \
        next((k for k in range(1, 65) if dim_mul(size, k) == n), None)  # 4*h in pieces of h
    if isinstance(count, int) and dim_mul(count, size) == n:
        return [size] * count
    raise fc.src.error(node, f"{what}: the number of pieces of an axis of size {n} must be known when the kernel "
                             f"is compiled", hint="write the dim as a multiple in the annotation, e.g. "
                                                  '"float[4 * h]" for four pieces of h')


@torch_function("torch.chunk", "Tensor.chunk")
def _chunk(fc, b, args, kw, node):
    """torch.chunk(x, chunks, dim=0): pieces of ceil(n / chunks) (for a symbolic n: n / chunks each, n must be
    a visible multiple such as 4 * h)."""
    from ...ir.types import dim_floordiv, dim_mul
    x = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    chunks = int_const(fc, _arg(fc, args, kw, 1, "chunks", node), node, "chunks")
    axis = norm_axis(fc, int_const(fc, _arg(fc, args, kw, 2, "dim", node, Const(0)), node, "dim"), x.type.rank, node)
    n = x.type.shape[axis]
    if chunks <= 0:
        raise fc.src.error(node, f"torch.chunk needs a positive number of chunks, got {chunks}")
    if isinstance(n, int):
        sizes = _pieces(fc, n, -(-n // chunks), node, "torch.chunk")
    elif dim_mul(dim_floordiv(n, chunks), chunks) == n:
        sizes = [dim_floordiv(n, chunks)] * chunks
    else:
        raise fc.src.error(node, f"torch.chunk of an axis of size {n} into {chunks}: the size must be a visible "
                                 f"multiple of {chunks}",
                           hint=f'write the dim as a multiple in the annotation, e.g. "float[{chunks} * h]"')
    return tuple(shape_ops.split(b, x, axis, sizes))


@torch_function("torch.split", "Tensor.split")
def _split(fc, b, args, kw, node):
    """torch.split(x, size_or_sizes, dim=0): pieces of one size (the last shorter) or of the listed sizes."""
    from .tensors import as_dim
    x = tensor(fc, b, _arg(fc, args, kw, 0, "tensor", node), node)
    spec = _arg(fc, args, kw, 1, "split_size_or_sections", node)
    axis = norm_axis(fc, int_const(fc, _arg(fc, args, kw, 2, "dim", node, Const(0)), node, "dim"), x.type.rank, node)
    n = x.type.shape[axis]
    if isinstance(spec, (list, tuple)):
        sizes = [as_dim(fc, v, node) for v in spec]
        from ...ir.types import dim_add
        total = 0
        for v in sizes:
            total = dim_add(total, v)
        if total != n:
            raise fc.src.error(node, f"torch.split sizes {sizes} do not add up to {n}")
    else:
        sizes = _pieces(fc, n, as_dim(fc, spec, node), node, "torch.split")
    return tuple(shape_ops.split(b, x, axis, sizes))


@torch_function("torch.masked_fill", "Tensor.masked_fill")
def _masked_fill(fc, b, args, kw, node):
    """x.masked_fill(mask, value): value where mask is True (mask broadcasts to x), x elsewhere; x's dtype."""
    from .mathlib import LIBRARY
    x = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    mask = tensor(fc, b, _arg(fc, args, kw, 1, "mask", node), node)
    value = _arg(fc, args, kw, 2, "value", node)
    if mask.type.dtype != "bool":
        raise fc.src.error(node, f"masked_fill needs a bool mask, got {mask.type}", hint="compare, e.g. m > 0")
    if not isinstance(value, Const):
        value = tensor(fc, b, value, node)
        if value.type.rank:
            raise fc.src.error(node, f"masked_fill needs a scalar value, got {value.type}", hint="use torch.where")
        value = value if value.type.dtype == x.type.dtype else b.convert(value, dtype=x.type.dtype)
    shape = x.type.shape
    if mask.type.shape != shape:
        mask = shape_ops.expand(b, mask, shape)
    out = LIBRARY["where"](fc, b, [mask, value, x], node)
    return out if out.type.dtype == x.type.dtype else b.convert(out, dtype=x.type.dtype)


def _clamp_one(name: str):
    """torch.clamp_min(x, min) / torch.clamp_max(x, max): one bound of torch.clamp (mathlib.clamp_bound)."""
    def fn(fc, b, args, kw, node):
        from .mathlib import clamp_bound
        x = _arg(fc, args, kw, 0, "input", node)
        bound = _arg(fc, args, kw, 1, "min" if name == "maximum" else "max", node)
        return clamp_bound(fc, b, fc.plain(b, x), fc.plain(b, bound), name == "minimum", node)
    return fn


@torch_function("torch.lerp", "Tensor.lerp")
def _lerp(fc, b, args, kw, node):
    """torch.lerp(start, end, weight) = start + weight * (end - start)."""
    import ast
    start, end = _arg(fc, args, kw, 0, "input", node), _arg(fc, args, kw, 1, "end", node)
    w = _arg(fc, args, kw, 2, "weight", node)
    return fc.binop(b, ast.Add(), start, fc.binop(b, ast.Mult(), w, fc.binop(b, ast.Sub(), end, start, node), node),
                    node)


@torch_function("torch.addmm", "Tensor.addmm")
def _addmm(fc, b, args, kw, node, names=("input", "mat1", "mat2")):
    """torch.addmm(input, mat1, mat2, beta=1, alpha=1) = beta * input + alpha * (mat1 @ mat2) (baddbmm: of
    batches, batch1 @ batch2)."""
    import ast
    x, m1, m2 = (_arg(fc, args, kw, k, name, node) for k, name in enumerate(names))
    beta, alpha = _arg(fc, args, kw, 3, "beta", node, Const(1)), _arg(fc, args, kw, 4, "alpha", node, Const(1))
    prod = fc.binop(b, ast.MatMult(), m1, m2, node)
    if not (isinstance(alpha, Const) and alpha.value == 1):
        prod = fc.binop(b, ast.Mult(), alpha, prod, node)
    if not (isinstance(beta, Const) and beta.value == 1):
        x = fc.binop(b, ast.Mult(), beta, x, node)
    return fc.binop(b, ast.Add(), x, prod, node)


@torch_function("torch.flip", "Tensor.flip")
def _flip(fc, b, args, kw, node):
    """torch.flip(x, dims) and x.flip(dims) or x.flip(d0, d1, ...) (a method's dims may come one by one)."""
    x = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    dims = tuple(args[1:]) if len(args) > 2 else _arg(fc, args, kw, 1, "dims", node)
    for d in dims if isinstance(dims, (tuple, list)) else [dims]:
        x = shape_ops.flip(b, x, norm_axis(fc, int_const(fc, d, node, "dim"), x.type.rank, node))
    return x


@torch_function("torch.det", "torch.linalg.det")
def _det(fc, b, args, kw, node):
    return linalg.det(b, float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node))


@torch_function("torch.linalg.solve")
def _solve(fc, b, args, kw, node):
    """torch.linalg.solve(A, B): B a batch of vectors when it has one dim less than A, else of matrices."""
    a, rhs = _two_floats(fc, b, [_arg(fc, args, kw, 0, "A", node), _arg(fc, args, kw, 1, "B", node)], node,
                         "linalg.solve")
    left = _arg(fc, args, kw, 2, "left", node, Const(True))
    if not (isinstance(left, Const) and left.value is True):
        raise fc.src.error(node, "torch.linalg.solve with left=False is not supported", hint="solve the transpose")
    return linalg.solve(b, a, rhs)


@torch_function("torch.inverse", "torch.linalg.inv")
def _inv(fc, b, args, kw, node):
    """torch.linalg.inv(A) / torch.inverse(A): A solved against the identity."""
    from ...ops import create
    a = float_tensor(fc, b, _arg(fc, args, kw, 0, "A", node), node)
    n = a.type.shape[-1]
    if not isinstance(n, int):
        raise fc.src.error(node, f"inv needs matrices of a static size, got {a.type}")
    eye = b.broadcast_to(create.eye(b, n, n, a.type.dtype), shape=a.type.shape)
    return linalg.solve(b, a, eye)


_UNARY = {"erf": _prim_unary("erf"), "erfc": _prim_unary("erfc"), "log2": _unary(_log_base(2.0)),
          "log10": _unary(_log_base(10.0)), "tan": _unary(math_ops.tan), "sinh": _unary(math_ops.sinh),
          "cosh": _unary(math_ops.cosh), "asin": _unary(math_ops.asin), "acos": _unary(math_ops.acos),
          "asinh": _unary(math_ops.asinh), "acosh": _unary(math_ops.acosh), "atanh": _unary(math_ops.atanh),
          "ceil": _unary(math_ops.ceil), "trunc": _unary(math_ops.trunc),
          "round": _unary(math_ops.round_half_even), "reciprocal": _unary(math_ops.reciprocal),
          "rsqrt": _unary(_rsqrt), "isnan": _predicate(math_ops.isnan), "isinf": _predicate(math_ops.isinf),
          "isfinite": _predicate(_isfinite), "erfinv": _unary(math_ops.erfinv)}
for _name, _fn in _UNARY.items():
    torch_function(f"torch.{_name}", f"Tensor.{_name}",
                   *[f"torch.special.{_name}"] * (_name in ("erf", "erfc", "erfinv")))(_fn)
for _name in ("erf", "erfc", "log2", "log10", "tan", "sinh", "cosh", "asin", "acos", "asinh", "acosh", "atanh",
              "ceil", "trunc", "isnan", "isinf", "isfinite"):
    torch_function(f"math.{_name}")(_math_function(_name, _UNARY[_name]))
torch_function("math.hypot")(_math_function("hypot", _hypot))
torch_function("math.copysign")(_math_function("copysign", _copysign))
torch_function("torch.var", "Tensor.var")(_var_std(False))
torch_function("torch.std", "Tensor.std")(_var_std(True))
torch_function("torch.cumsum", "Tensor.cumsum")(_cumulative(index.cumsum))
torch_function("torch.cumprod", "Tensor.cumprod")(_cumulative(index.cumprod))
torch_function("torch.argmax", "Tensor.argmax")(_arg_ext(True))
torch_function("torch.argmin", "Tensor.argmin")(_arg_ext(False))
torch_function("torch.clamp_min", "Tensor.clamp_min")(_clamp_one("maximum"))
torch_function("torch.clamp_max", "Tensor.clamp_max")(_clamp_one("minimum"))
torch_function("torch.baddbmm", "Tensor.baddbmm")(
    lambda fc, b, args, kw, node: _addmm(fc, b, args, kw, node, ("input", "batch1", "batch2")))
torch_function("torch.nn.functional.silu")(_unary(activations.swish))
torch_function("torch.nn.functional.elu")(_with_alpha(activations.elu, "alpha", 1.0))
torch_function("torch.nn.functional.celu")(_torch_alpha("celu", "alpha", 1.0))
torch_function("torch.nn.functional.leaky_relu")(_torch_alpha("leaky_relu", "negative_slope", 0.01))
torch_function("torch.nn.functional.selu")(_unary(_selu))
torch_function("torch.nn.functional.hardsigmoid")(_unary(lambda b, x: activations.hard_sigmoid(b, x, 1.0 / 6.0, 0.5)))
torch_function("torch.nn.functional.hardswish")(_unary(activations.hard_swish))
torch_function("torch.nn.functional.softsign")(_unary(activations.softsign))
torch_function("torch.nn.functional.mish")(_unary(activations.mish))
torch_function("torch.nn.functional.logsigmoid")(_unary(_logsigmoid))
torch_function("torch.nn.functional.relu6")(_hardtanh(0.0, 6.0, False))
torch_function("torch.nn.functional.hardtanh")(_hardtanh(-1.0, 1.0, True))
for _k in (1, 2, 3):
    torch_function(f"torch.nn.functional.conv{_k}d")(_conv(_k))
    torch_function(f"torch.nn.functional.conv_transpose{_k}d")(_conv_transpose(_k))
for _k in (1, 2):
    torch_function(f"torch.nn.functional.max_pool{_k}d")(_pool(_k, "max"))
    torch_function(f"torch.nn.functional.avg_pool{_k}d")(_pool(_k, "avg"))
torch_function("torch.special.expit")(_unary(lambda b, x: b.logistic(x)))
torch_function("torch.special.ndtri")(_unary(math_ops.probit))
torch_function("torch.special.log1p")(_prim_unary("log1p"))
torch_function("torch.special.expm1")(_prim_unary("expm1"))
torch_function("torch.special.logit")(_unary(lambda b, x: b.log(b.div(x, b.sub(_c(x, 1.0), x)))))
