"""Indexing (ops/index.py): the subscripts x[...] and x[...] = v (ints, slices, None, ..., integer and
bool tensors), and the torch functions that index with tensors: gather, index_select, scatter_add,
masked_fill, F.embedding and F.one_hot. The compiler calls subscript and set_subscript; each torch function is
registered with `@torch_function` (registry.py)."""
from __future__ import annotations

import ast

from ...ir.core import Atom, Lit
from ...ir.types import Dim, Type, broadcast_shapes, dim_add
from ...ops import create, index
from ...ops import shape as shape_ops
from .create import tensor_literal
from .registry import torch_function
from .scope import Const, SymDim
from .tensors import _arg, _i64, as_dim, int_const, is_dimlike, norm_axis, tensor


def subscript(fc, b, x, index_node: ast.expr, scope, node):
    """x[...] with ints, computed ints, step-1 slices and None."""
    if isinstance(x, tuple):  # x.shape[k] and friends
        k = fc.expr(b, scope, index_node)
        if not isinstance(k, Const) and x and all(isinstance(v, Const) for v in x):  # KNOTS[i]: torch.tensor(KNOTS)[i]
            return subscript(fc, b, tensor_literal(fc, b, [list(x)], {}, node), index_node, scope, node)
        i = int_const(fc, k, index_node, "a tuple index")
        if not -len(x) <= i < len(x):
            raise fc.src.error(index_node, f"index {i} out of range for a tuple of {len(x)}")
        return x[i]
    x = tensor(fc, b, x, node)
    if x.type.rank == 0:
        raise fc.src.error(node, f"cannot index a scalar value of type {x.type}")
    items = _expand_ellipsis(fc, index_items(index_node), x.type.rank, node)
    if sum(1 for it in items if not _is_none(it)) > x.type.rank:
        raise fc.src.error(node, f"too many indices for {x.type}")
    values = {k: fc.expr(b, scope, it) for k, it in enumerate(items)
              if not _is_none(it) and not isinstance(it, ast.Slice)}
    # several integer tensors (x[torch.arange(n), labels]) pick together, elementwise: index.take_many
    together = [k for k, v in values.items() if _is_index_tensor(v)]
    if len(together) > 1 and together != list(range(together[0], together[-1] + 1)):
        raise fc.src.error(node, "index tensors with other indices between them (x[i, :, j]) are not supported",
                           hint="index tensors next to one another pick elementwise: x[i, j] or x[:, i, j]")
    axis, k = 0, 0
    while k < len(items):
        it = items[k]
        if _is_none(it):
            x = b.reshape(x, shape=x.type.shape[:axis] + (1,) + x.type.shape[axis:])
            axis += 1
        elif isinstance(it, ast.Slice):
            x = _slice(fc, b, scope, x, axis, it, ast.unparse(node.value) if isinstance(node, ast.Subscript) else "x")
            axis += 1
        elif len(together) > 1 and k == together[0]:
            rank = x.type.rank - len(together)
            x = index.take_many(b, x, [values[t] for t in together], axis)
            axis += x.type.rank - rank
            k = together[-1]
        else:
            i = values[k]
            x = _take(fc, b, x, axis, i, it)
            axis += i.type.rank if isinstance(i, Atom) and not isinstance(i, Lit) else 0
        k += 1
    return x


def _is_index_tensor(v) -> bool:
    """An integer tensor used as an index (x[idx]: numpy's take, not a position)."""
    return isinstance(v, Atom) and not isinstance(v, Lit) and bool(v.type.rank) and v.type.dtype in ("i32", "i64")


def index_items(index_node: ast.expr) -> list[ast.expr]:
    return list(index_node.elts) if isinstance(index_node, ast.Tuple) else [index_node]


def _expand_ellipsis(fc, items: list, rank: int, node) -> list:
    """x[..., 0]: the `...` stands for as many full slices as the other items leave axes."""
    dots = [k for k, it in enumerate(items) if isinstance(it, ast.Constant) and it.value is Ellipsis]
    if not dots:
        return items
    if len(dots) > 1:
        raise fc.src.error(node, "an index can have only one '...'")
    k = dots[0]
    used = sum(1 for it in items if not _is_none(it)) - 1
    fill = [ast.Slice() for _ in range(max(rank - used, 0))]
    return items[:k] + fill + items[k + 1:]


def _is_none(e) -> bool:
    return isinstance(e, ast.Constant) and e.value is None


def set_subscript(fc, b, x, index_node: ast.expr, value, scope, node):
    """x with x[...] = value (ints, computed ints and step-1 slices); a new value, x is unchanged.
    A position is replaced exactly (index_set), a range by joining slices around it."""
    if not isinstance(x, Atom) or not x.type.rank:
        raise fc.src.error(node, "only a tensor's elements can be assigned (x[i] = v)")
    items = _expand_ellipsis(fc, index_items(index_node), x.type.rank, node)
    if any(_is_none(it) for it in items) or len(items) > x.type.rank:
        raise fc.src.error(node, f"unsupported index in an assignment to {x.type}",
                           hint="use integers and slices a:b, one per axis")
    x_text = ast.unparse(node.value) if isinstance(node, ast.Subscript) else "x"
    keys = [_set_key(fc, b, scope, x, axis, it, x_text) for axis, it in enumerate(items)]
    keys += [("all",)] * (x.type.rank - len(keys))
    v = tensor(fc, b, value, node)
    if v.type.dtype != x.type.dtype:
        v = b.convert(v, dtype=x.type.dtype)
    return _set_items(fc, b, x, keys, v, node)


def _set_key(fc, b, scope, x: Atom, axis: int, it, x_text: str = "x"):
    """One index item of an assignment: ("int", index atom), ("range", start, stop), ("window", start atom,
    literal length) for x[j:j + m] with a computed start, or ("all",)."""
    n = x.type.shape[axis]
    if isinstance(it, ast.Slice):
        if it.step is not None:
            raise fc.src.error(it, "assignment to a slice with a step is not supported")
        window = _window_bounds(fc, b, scope, it)
        if window is not None:
            start, m = window
            if not isinstance(m, int):
                raise fc.src.error(it, "an assignment to x[j:j + m] with a computed start needs a literal length m")
            return ("window", _window_start(b, start, n, m), m)
        def instead():
            return _masked_instead(x_text, axis, x.type.rank, it, assign=True)
        start, stop = _bound(fc, b, scope, it.lower, n, 0, instead), _bound(fc, b, scope, it.upper, n, n, instead)
        return ("all",) if (start, stop) == (0, n) else ("range", start, stop)
    return ("int", _index_atom(fc, b, x, axis, fc.expr(b, scope, it), it))


def _set_items(fc, b, x: Atom, keys: list, v: Atom, node) -> Atom:
    """x with the part the keys select replaced by v (broadcast to that part's shape)."""
    k = next((j for j, key in enumerate(keys) if key[0] != "all"), None)
    if k is None:
        if v.type.shape != x.type.shape and broadcast_shapes(v.type.shape, x.type.shape) != x.type.shape:
            raise fc.src.error(node, f"cannot assign a value of type {v.type} to a part of type {x.type}")
        return v if v.type.shape == x.type.shape else b.broadcast_to(v, shape=x.type.shape)
    key = keys[k]
    if key[0] == "window":  # m positions from a computed start (moved so that they fit, as for reads), one by one
        _, start, m = key
        if any(key[0] != "all" for key in keys[k + 1:]):
            raise fc.src.error(node, "an assignment to x[j:j + m] with a computed start must take whole axes after it")
        shape = x.type.shape[:k] + (m,) + x.type.shape[k + 1:]
        if broadcast_shapes(v.type.shape, shape) != shape:
            raise fc.src.error(node, f"cannot assign a value of type {v.type} to a part of shape {list(shape)}")
        v = v if v.type.shape == shape else b.broadcast_to(v, shape=shape)
        for t in range(m):
            i = b.add(start, Lit(t, Type("i64"))) if t else start
            x = b.index_set(x, i, b.index(v, Lit(t, Type("i64")), axis=k), axis=k)
        return x
    if key[0] == "int":
        part = b.index(x, key[1], axis=k)
        new = _set_items(fc, b, part, keys[:k] + keys[k + 1:], v, node)
        return b.index_set(x, key[1], new, axis=k)
    _, start, stop = key
    n = x.type.shape[k]
    part = b.slice(x, axis=k, start=start, stop=stop)
    new = _set_items(fc, b, part, keys[:k] + [("all",)] + keys[k + 1:], v, node)
    pieces = [b.slice(x, axis=k, start=0, stop=start)] if start != 0 else []
    pieces.append(new)
    if stop != n:
        pieces.append(b.slice(x, axis=k, start=stop, stop=n))
    return shape_ops.concatenate(b, pieces, k)


def _bound(fc, b, scope, e, n: Dim, default: Dim, instead=None) -> Dim:
    """A slice bound as a dim (clamped into the axis when static); `instead()`: what to write when the bound is
    computed at run time (a loop counter), which would make the slice's size change from run to run."""
    if e is None:
        return default
    v = fc.expr(b, scope, e)
    if instead is not None and isinstance(v, Atom) and not v.type.rank and v.type.is_int:
        raise fc.src.error(e, f"the slice bound '{ast.unparse(e)}' is computed when the kernel runs (a loop counter "
                              "or a value), so the slice's size would change with it; a kernel's tensors have sizes "
                              "fixed when it is called", hint=instead())
    d = as_dim(fc, v, e)
    if isinstance(d, int) and d < 0:
        d = dim_add(n, d)
    if isinstance(d, int) and isinstance(n, int):
        d = min(max(d, 0), n)
    return d


def _masked_instead(x_text: str, axis: int, rank: int, s: ast.Slice, assign: bool) -> str:
    """What to write instead of a slice with computed bounds: the whole axis and a mask of the positions the
    slice takes (torch.arange along that axis, broadcast against the others)."""
    pos = f"torch.arange({x_text}.shape[{axis}])" + (f"[:{', None' * (rank - 1 - axis)}]" if axis < rank - 1 else "")
    conds = ([f"{pos} >= {ast.unparse(s.lower)}"] if s.lower is not None else []) + \
            ([f"{pos} < {ast.unparse(s.upper)}"] if s.upper is not None else [])
    mask = " & ".join(f"({c})" for c in conds) if len(conds) > 1 else conds[0]
    if assign:
        return (f"keep the whole axis and select the positions along axis {axis}: "
                f"{x_text} = torch.where({mask}, value, {x_text})")
    return (f"keep the whole axis and zero what the slice leaves out: torch.where({mask}, {x_text}, 0.0) (a sum of "
            f"it is the slice's sum; use 1.0 for a product), or loop over the elements: for j in range(...): "
            f"... {x_text}[j] ...")


def _slice(fc, b, scope, x: Atom, axis: int, s: ast.Slice, x_text: str = "x") -> Atom:
    step = 1
    if s.step is not None:
        v = fc.expr(b, scope, s.step)
        if not (isinstance(v, Const) and type(v.value) is int and v.value > 0):
            raise fc.src.error(s.step, "a slice's step must be a positive integer literal (as torch's)")
        step = v.value
    n = x.type.shape[axis]
    if step != 1:  # x[a:b:k]: static bounds
        start, stop = _bound(fc, b, scope, s.lower, n, 0), _bound(fc, b, scope, s.upper, n, n)
        if not (isinstance(start, int) and isinstance(stop, int)):
            raise fc.src.error(s, f"a slice with a step needs static bounds on an axis of size {n}")
        if stop <= start:
            raise fc.src.error(s, "an empty slice is not supported")
        return shape_ops.strided_slice(b, x, axis, start, stop, step)
    window = _dynamic_window(fc, b, scope, s)
    if window is not None:
        return window(x, axis)
    def instead():
        return _masked_instead(x_text, axis, x.type.rank, s, assign=False)
    start, stop = _bound(fc, b, scope, s.lower, n, 0, instead), _bound(fc, b, scope, s.upper, n, n, instead)
    if start == 0 and stop == n:
        return x
    return b.slice(x, axis=axis, start=start, stop=stop)


def _window_bounds(fc, b, scope, s: ast.Slice):
    """(start atom, static length m) of a slice j:j + m with a computed start j (m a literal or a dim), or
    None when the start is static."""
    if s.lower is None or s.upper is None or not isinstance(s.upper, ast.BinOp) \
            or not isinstance(s.upper.op, ast.Add):
        return None
    same = ast.dump(s.lower)
    if ast.dump(s.upper.left) == same:
        length_node = s.upper.right
    elif ast.dump(s.upper.right) == same:
        length_node = s.upper.left
    else:
        return None
    start = fc.expr(b, scope, s.lower)
    if is_dimlike(start) or not isinstance(start, Atom) or start.type.rank or not start.type.is_int:
        return None
    return start, as_dim(fc, fc.expr(b, scope, length_node), length_node)


def _dynamic_window(fc, b, scope, s: ast.Slice):
    """x[j:j + m] with a computed start j and a static length m (a literal or a dim): m elements from j
    (see _window_start), as a gather. A function (x, axis) -> the window, or None when the start is static."""
    bounds = _window_bounds(fc, b, scope, s)
    if bounds is None:
        return None
    start, m = bounds

    def take(x: Atom, axis: int) -> Atom:
        positions = b.add(create.arange(b, 0, m), _window_start(b, start, x.type.shape[axis], m))
        return index.gather(b, x, positions, axis)
    return take


def _window_start(b, start: Atom, n: Dim, m: Dim) -> Atom:
    """Where a window of m elements from a computed start j begins on an axis of n, as JAX's dynamic_slice
    has it: a negative j counts from the end, then the start moves into [0, n - m] so that the whole window
    lies inside the axis (torch would return a shorter window, which a fixed-size tensor cannot be)."""
    i64 = Type("i64")
    j = start if start.type.dtype == "i64" else b.convert(start, dtype="i64")
    size = Lit(n, i64) if isinstance(n, int) else b.dim_size(dim=n)
    j = b.select(b.lt(j, Lit(0, i64)), b.add(j, size), j)
    last = b.sub(size, Lit(m, i64) if isinstance(m, int) else b.dim_size(dim=m))
    return b.max(b.min(j, last), Lit(0, i64))


def _take(fc, b, x: Atom, axis: int, i, node) -> Atom:
    if _is_index_tensor(i):  # x[idx] with an integer tensor: numpy's take (negative indices wrap)
        return index.gather(b, x, i, axis)  # (i32 indices become i64 in index.wrap)
    return b.index(x, _index_atom(fc, b, x, axis, i, node), axis=axis)


def _index_atom(fc, b, x: Atom, axis: int, i, node) -> Atom:
    """An integer index into `axis` of x as an i64 atom (a literal negative index counts from the end)."""
    n = x.type.shape[axis]
    if isinstance(i, Const) and type(i.value) is int:
        v = i.value
        if v < 0:
            i = Lit(v + n, Type("i64")) if isinstance(n, int) else b.dim_size(dim=dim_add(n, v))
        else:
            if isinstance(n, int) and v >= n:
                raise fc.src.error(node, f"index {v} is out of range for an axis of size {n}")
            i = Lit(v, Type("i64"))
    elif isinstance(i, SymDim):
        i = b.dim_size(dim=i.dim)
    elif not isinstance(i, (tuple, list, Const)) and i.type.dtype == "bool":
        raise fc.src.error(node, "indexing with a bool mask is not supported: the result's size would depend on "
                                 "the values", hint="keep the shape and choose instead: torch.where(mask, x, 0), "
                                                    "or x * mask; integer index tensors (x[idx]) are supported")
    elif isinstance(i, (tuple, list)) or isinstance(i, Const) or i.type.dtype not in ("i32", "i64") or i.type.rank:
        raise fc.src.error(node, "an index must be an integer scalar (tensor indexing is not supported)",
                           hint="use int(...) for a computed index; slices use a:b")
    return i


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
