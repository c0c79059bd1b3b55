"""Core ATen shape, indexing and creation ops, and the graph's size and tuple plumbing."""
from __future__ import annotations

import operator

import numpy as np

from ...ir.core import Lit, Var
from ...ir.types import Dim, Type, dim_add, numel
from ...ops import create, nn
from ...ops import index as ix
from ...ops import shape as sh
from ...ops._util import norm_axis
from .node import Node, handler

BIG = 2**62  # slice ends beyond this mean "to the end" (torch writes sys.maxsize)


# ---- plumbing ------------------------------------------------------------------------------------------

@handler(operator.getitem)
def getitem(n: Node):
    """An element of a multi-result op (e.g. batch norm's output, max's values)."""
    seq, i = n.args
    v = seq[i]
    if v is None:
        raise n.error(f"result {i} of '{n.node.args[0].name}' is not supported (only its other results are)")
    return v


@handler("sym_size.int")
def sym_size(n: Node):
    x = n.x()
    return x.type.shape[norm_axis(n.b, n.a("dim"), x.type.rank)]


@handler("clone.default", "alias.default", "lift_fresh_copy.default", "detach.default", "contiguous.default",
         "dropout.default", "native_dropout.default")
def identity(n: Node):
    """x itself; a detach (which run_decompositions turns into an alias, its node still naming aten.detach) as a
    stop_gradient: torch does not differentiate through it, and neither may vjp and jvp."""
    if n.op.endswith("dropout.default") and n.a("train", False):
        raise n.unsupported("dropout in training mode")
    x = n.x("input") if "dropout" in n.op else n.x()
    if n.op == "detach.default" or str(n.node.meta.get("original_aten")) == "aten.detach.default":
        return n.b.stop_gradient(x)
    return (x, None) if n.op.endswith("native_dropout.default") else x


@handler("_to_copy.default", "to.dtype")
def to_copy(n: Node):
    """A conversion to the dtype torch records (devices and layouts are ignored)."""
    x = n.x()
    return x if x.type.dtype == n.dtype else n.b.convert(x, dtype=n.dtype)


@handler("copy.default")
def copy(n: Node):
    """src broadcast into self's shape and dtype."""
    want = n.out_type
    src = n.operand(n.x("src"), want.dtype)
    return sh.expand(n.b, src, want.shape)


# ---- shapes ---------------------------------------------------------------------------------------------

@handler("view.default", "_unsafe_view.default", "reshape.default", "view_copy.default")
def view(n: Node):
    return sh.reshape(n.b, n.x(), list(n.a("size") if "size" in n._named else n.a("shape")))


@handler("permute.default")
def permute(n: Node):
    return sh.permute(n.b, n.x(), n.a("dims"))


@handler("transpose.int")
def transpose(n: Node):
    return sh.swap_axes(n.b, n.x(), n.a("dim0"), n.a("dim1"))


@handler("t.default")
def t(n: Node):
    x = n.x()
    return sh.swap_axes(n.b, x, 0, 1) if x.type.rank == 2 else x


@handler("expand.default")
def expand(n: Node):
    """x broadcast to size; -1 keeps x's size (sizes align from the right)."""
    x, size = n.x(), list(n.a("size"))
    lead = len(size) - x.type.rank
    dims = [x.type.shape[i - lead] if d == -1 else d for i, d in enumerate(size)]
    return sh.expand(n.b, x, dims)


@handler("unsqueeze.default")
def unsqueeze(n: Node):
    return sh.unsqueeze(n.b, n.x(), n.a("dim"))


@handler("as_strided.default", "as_strided_copy.default")
def as_strided(n: Node):
    """torch.as_strided of a value the graph computed (torch records it row-major): when the view is that layout
    read at another shape (a size of 1 may take any stride: what decompositions write around unit axes), a reshape;
    else, for fixed sizes, a gather of each element's storage position from the flat value."""
    x, size, stride = n.x(), list(n.a("size")), list(n.a("stride"))
    offset = n.a("storage_offset", None) or 0
    val = n.meta("self")
    if not val.is_contiguous():
        raise n.unsupported("as_strided of a tensor not held row-major (a view of a view)")
    dense = [numel(size[k + 1:]) for k in range(len(size))]
    if offset == 0 and numel(size) == numel(x.type.shape) and all(
            d == 1 or s == want for d, s, want in zip(size, stride, dense)):
        return sh.reshape(n.b, x, size)
    if not all(isinstance(v, int) for v in size + stride + [offset] + list(x.type.shape)):
        raise n.unsupported("as_strided other than a reshape with run-time sizes or strides")
    at = offset + sum(np.arange(d).reshape([-1 if i == k else 1 for i in range(len(size))]) * st
                      for k, (d, st) in enumerate(zip(size, stride)))
    if at.size and (at.min() < 0 or at.max() >= numel(x.type.shape)):
        raise n.error(f"as_strided of {x.type} with size {size}, stride {stride}, offset {offset} reads outside it")
    flat = sh.reshape(n.b, x, [numel(x.type.shape)])
    return n.b.gather(flat, create.array(n.b, np.asarray(at, dtype=np.int64)), axis=0)


@handler("squeeze.dims", "squeeze.dim", "squeeze.default")
def squeeze(n: Node):
    x = n.x()
    dims = n.a("dim", None)
    return sh.squeeze(n.b, x, None if dims is None else [dims] if isinstance(dims, int) else dims)


@handler("cat.default")
def cat(n: Node):
    """Concatenation; as torch.cat, operands of shape (0,) are skipped whatever their rank (a key/value
    cache starts from torch.tensor([]))."""
    dtype = n.dtype
    xs = [n.operand(x, dtype) for x in n.a("tensors")]
    kept = [x for x in xs if x.type.shape != (0,)]
    if not kept:
        return xs[0]
    return sh.concatenate(n.b, kept, n.a("dim", 0))


@handler("split_with_sizes.default", "split.Tensor", "split_with_sizes_copy.default")
def split(n: Node):
    x = n.x()
    axis = norm_axis(n.b, n.a("dim", 0), x.type.rank)
    total = x.type.shape[axis]
    if "split_sizes" in n._named:
        sizes = list(n.a("split_sizes"))
    else:
        step = n.a("split_size")
        if not isinstance(total, int) or not isinstance(step, int):
            raise n.unsupported("split of a symbolic axis into equal parts")
        sizes = [min(step, total - s) for s in range(0, total, step)]
    return sh.split(n.b, x, axis, sizes)


@handler("unbind.int")
def unbind(n: Node):
    x = n.x()
    axis = norm_axis(n.b, n.a("dim", 0), x.type.rank)
    size = x.type.shape[axis]
    if not isinstance(size, int):
        raise n.unsupported("unbind along a symbolic axis")
    return [n.b.index(x, Lit(i, Type("i64")), axis=axis) for i in range(size)]


@handler("select.int")
def select(n: Node):
    """x[..., index, ...] along dim (a negative index counts from the end)."""
    x = n.x()
    axis = norm_axis(n.b, n.a("dim"), x.type.rank)
    i = n.a("index")
    size = x.type.shape[axis]
    if isinstance(i, int) and i < 0:
        i = dim_add(size, i)
    return n.b.index(x, ix.dim_atom(n.b, i), axis=axis)


@handler("slice.Tensor", "slice_copy.Tensor")
def slice_(n: Node):
    """x[start:end:step] along dim, with torch's clamping of out-of-range bounds."""
    x = n.x()
    axis = norm_axis(n.b, n.a("dim", 0), x.type.rank)
    size = x.type.shape[axis]
    start, end, step = _bound(n, n.a("start", None), 0, size), _bound(n, n.a("end", None), size, size), n.a("step", 1)
    if not isinstance(step, int) or step < 1:
        raise n.unsupported(f"a slice step of {step}")
    return sh.strided_slice(n.b, x, axis, start, end, step)


def _bound(n: Node, v, default: Dim, size: Dim) -> Dim:
    """A slice bound as a dim in [0, size]: None is the default, negatives count from the end."""
    if v is None:
        return default
    if isinstance(v, int):
        if v >= BIG or (isinstance(size, int) and v >= size):
            return size
        if v < 0:
            return max(size + v, 0) if isinstance(size, int) else dim_add(size, v)
        return v
    return v  # a dim expression (a symbolic size)


@handler("constant_pad_nd.default")
def constant_pad(n: Node):
    """Pads (lo, hi) per axis from the last one; negative pads crop."""
    x, pad, value = n.x(), list(n.a("pad")), n.a("value", 0)
    for k in range(len(pad) // 2):
        axis = x.type.rank - 1 - k
        x = nn.pad_axis(n.b, x, axis, pad[2 * k], pad[2 * k + 1], value)
    return x


@handler("reflection_pad1d.default", "reflection_pad2d.default", "reflection_pad3d.default",
         "replication_pad1d.default", "replication_pad2d.default", "replication_pad3d.default")
def mode_pad(n: Node):
    x, pad = n.x(), list(n.a("padding"))
    mode = "reflect" if n.op.startswith("aten.reflection") else "edge"
    for k in range(len(pad) // 2):
        x = sh.pad_mode(n.b, x, x.type.rank - 1 - k, pad[2 * k], pad[2 * k + 1], mode)
    return x


@handler("flip.default")
def flip(n: Node):
    x = n.x()
    for d in n.a("dims"):
        x = sh.flip(n.b, x, d)
    return x


@handler("repeat.default")
def repeat(n: Node):
    x, reps = n.x(), list(n.a("repeats"))
    if len(reps) > x.type.rank:
        x = n.b.reshape(x, shape=(1,) * (len(reps) - x.type.rank) + x.type.shape)
    return sh.tile(n.b, x, reps)


# ---- indexing -------------------------------------------------------------------------------------------

@handler("index_select.default")
def index_select(n: Node):
    return ix.gather(n.b, n.x(), n.x("index"), n.a("dim"))


@handler("embedding.default")
def embedding(n: Node):
    """Rows of the weight table (padding_idx only matters to training)."""
    return ix.gather(n.b, n.x("weight"), n.x("indices"), 0)


@handler("gather.default")
def gather(n: Node):
    return ix.gather_elements(n.b, n.x(), n.x("index"), n.a("dim"))


def _scatter_src(n: Node):
    """scatter's src: its leading block of index's shape (torch reads no more of a larger src), or the scalar
    `value` broadcast to that shape."""
    index = n.x("index")
    if n.a("value", None) is not None:
        return n.b.broadcast_to(n.operand(n.a("value"), n.x().type.dtype), shape=index.type.shape)
    src = n.x("src")
    for axis, (have, want) in enumerate(zip(src.type.shape, index.type.shape)):
        if have != want:
            src = sh.strided_slice(n.b, src, axis, 0, want, 1)
    return src


SCATTER_REDUCE = {"sum": "add", "add": "add", "prod": "mul", "multiply": "mul", "amax": "max", "amin": "min"}


@handler("scatter_add.default")
def scatter_add(n: Node):
    """x with src added at index along dim (repeats add up)."""
    return ix.scatter_elements(n.b, n.x(), n.x("index"), _scatter_src(n), n.a("dim"), "add")


@handler("scatter.src", "scatter.value", "scatter.reduce", "scatter.value_reduce")
def scatter(n: Node):
    """x with src (or value) put at index along dim; with reduce= "add" or "multiply", combined."""
    reduce = n.a("reduce", None)
    if reduce is not None and reduce not in SCATTER_REDUCE:
        raise n.unsupported(f"scatter with reduce={reduce!r}")
    return ix.scatter_elements(n.b, n.x(), n.x("index"), _scatter_src(n), n.a("dim"),
                               SCATTER_REDUCE[reduce] if reduce else "none")


@handler("scatter_reduce.two")
def scatter_reduce(n: Node):
    """x with src combined at index along dim by sum, prod, amax or amin (include_self=True, torch's default)."""
    reduce = n.a("reduce")
    if reduce not in SCATTER_REDUCE:
        raise n.unsupported(f"scatter_reduce with reduce={reduce!r}", hint="sum, prod, amax and amin are")
    if not n.a("include_self", True):
        raise n.unsupported("scatter_reduce with include_self=False", hint="leave include_self at its default, True")
    return ix.scatter_elements(n.b, n.x(), n.x("index"), _scatter_src(n), n.a("dim"), SCATTER_REDUCE[reduce])


@handler("index_add.default")
def index_add(n: Node):
    """x with alpha·source added at the positions index along dim."""
    source, alpha = n.x("source"), n.a("alpha", 1)
    if alpha != 1:
        source = n.b.mul(source, n.operand(alpha, source.type.dtype))
    return ix.index_add(n.b, n.x(), n.a("dim"), n.x("index"), source)


@handler("index.Tensor")
def index(n: Node):
    """x[..., i, j, ...] with integer index tensors on consecutive axes (None: a whole axis)."""
    x, idx = n.x(), list(n.a("indices"))
    given = [k for k, i in enumerate(idx) if i is not None]
    if not given:
        return x
    if given != list(range(given[0], given[-1] + 1)):
        raise n.unsupported("index tensors separated by a whole axis", hint="index one axis at a time")
    tensors = [idx[k] for k in given]
    if any(not isinstance(i, (Var, Lit)) or i.type.dtype == "bool" for i in tensors):
        raise n.unsupported("indexing with a boolean mask (its result has a data-dependent size)")
    if len(tensors) == 1:
        return ix.gather(n.b, x, tensors[0], given[0])
    return ix.take_many(n.b, x, tensors, given[0])


@handler("topk.default")
def topk(n: Node):
    k = n.a("k")
    if not isinstance(k, int):
        raise n.unsupported("top-k with a symbolic k")
    return ix.topk(n.b, n.x(), k, n.a("dim", -1), bool(n.a("largest", True)))


# ---- creation -------------------------------------------------------------------------------------------

@handler("full.default", "full_like.default", "zeros.default", "ones.default", "zeros_like.default",
         "ones_like.default", "empty.memory_format", "empty_like.default", "new_zeros.default", "new_ones.default",
         "new_full.default", "scalar_tensor.default", "new_empty.default")
def full(n: Node):
    """A tensor of torch's recorded type filled with one value (empty tensors are zeros)."""
    t = n.out_type
    name = n.op.split(".")[1]
    value = n.a("fill_value") if "fill_value" in n._named else n.a("s") if name == "scalar_tensor" else \
        1 if "ones" in name else 0
    if isinstance(value, (int, float, bool)):
        return create.full(t.shape, value, t.dtype)
    return create.fill(n.b, t.shape, n.operand(value, t.dtype))


@handler("arange.default", "arange.start", "arange.start_step")
def arange(n: Node):
    t = n.out_type
    start, end, step = n.a("start", 0), n.a("end"), n.a("step", 1)
    if all(isinstance(v, (int, float)) for v in (start, end, step)):
        from ...ir.types import numpy_dtype
        return create.array(n.b, np.arange(start, end, step).astype(numpy_dtype(t.dtype)))
    if step != 1 or not isinstance(start, (int, str)):
        raise n.unsupported("arange with a symbolic bound and a step")
    return create.arange(n.b, start, end, t.dtype)
