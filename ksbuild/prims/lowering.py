"""Lowering primitives: what the codegen passes rewrite core equations into, after every
transformation has run. They have a type rule, a numpy eval (so the reference interpreter
checks each pass) and C++ emission, and no derivative or batching rules: AD and vmap never
see them.

fusion[body, threads?](*ins) -> outs
    one loop nest over the shape of body's elementwise equations; body's results are the
    values read after the nest. Trailing reductions over a suffix of that shape are
    accumulated in the same nest (see transforms/fuse.py).
contract[spec, impl, acc, threads?, epilogue?](acc?, a, b, *extra) -> out
    an einsum; impl "loops" is a loop nest (a dot product when the innermost axis is summed),
    "gemm" is loops over the batch letters around ks::gemm (backend blas: ks/blas.h; aten: ks/aten.h), "tiles"
    the same around ks::tiled_gemm (backend plain: ks/gemm.h, portable register tiles), "panels" one
    ks::packed_gemm call whose b, a [k, n] matrix (spec letters in that order, n = param cols), is a
    constant stored as panels: [ceil(n / P), k, P] with P = 64 bytes of columns, zero-padded
    (transforms/layout_constants.py; without a vector unit, the last n % P columns as panels of DOT_PANEL:
    to_panels). With acc, the first operand is an accumulator the product is added to (out = acc + a·b).
convolve[strides, pads, dilations, groups, impl, epilogue?](x, w, *extra) -> y
    a conv as one prelude call (prims/convolve.py).
Both contract and convolve may carry an `epilogue` (transforms/fuse_epilogue.py): a body of elementwise
equations whose first parameter is the product's value and the rest the equation's extra operands; the
result is epilogue(product, *extra), stored as the product is computed (codegen/epilogue.py).
With threads = N (transforms/parallelize.py) the outermost loop runs in N parts on ks/pool.h's threads, a "tiles" or
"panels" product as N parts of its call (ks/parts.h).
"""
from __future__ import annotations

import math

import numpy as np

from ..codegen import epilogue as epilogues
from ..codegen.cpp import Writer
from ..codegen.fusion import emit_fusion
from ..codegen.storage import Storage, dim_expr, product
from ..errors import KsbuildError
from ..ir.core import Eqn, Func, Var
from ..ir.types import Type, dim_add, dtype_of, element_bytes, numpy_dtype
from . import scratch as scratch_sizes
from .base import Prim, finite, from_bodies, unsigned
from .tensor import einsum as _einsum_prim
from .tensor import parse_spec

# With threads = N a matrix product or convolution of fewer multiply-adds (about 10 µs on one core) runs on the
# calling thread alone: waking the others and waiting for them costs a few µs (a squeeze-excite block's 1 × 1
# convolutions). (ks/parts.h splits the larger ones.)
PARALLEL_MIN_MACS = 1 << 18


# the reductions a fusion body may end with (over the last axes of the nest)

OPT_OUTS = ("jvp: lowering only (transformations run before it)", "batch: lowering only",
            "transpose: lowering only")


# ---- fusion ----------------------------------------------------------------------------------

def _fusion_rule(in_types, body: Func, threads: int = 0):
    if list(in_types) != list(body.in_types):
        raise KsbuildError("internal: fusion operands do not match its body")
    return body.out_types


def _fusion_eval(*args, body: Func, env, threads: int = 0):
    from ..ir.interp import eval_func
    return tuple(eval_func(body, list(args), env))


def _fusion_parallel(eqn: Eqn) -> bool:
    """A fusion's outer loop is parallel when an axis is left after its reductions."""
    body = eqn.params["body"]
    reductions = [e for e in body.eqns if e.prim.reduction]
    shape = (reductions[0].ins[0] if reductions else body.eqns[0].outs[0]).type.shape
    return len(shape) - (len(reductions[0].params["axes"]) if reductions else 0) > 0


fusion = Prim(
    name="fusion",
    sign=unsigned,
    nonfinite=from_bodies,
    strings=True,
    type_rule=_fusion_rule,
    eval=_fusion_eval,
    jvp=None,  # (lowering only: OPT_OUTS)
    batch=None,
    emit=emit_fusion,
    parallel=_fusion_parallel,
    doc="elementwise equations (and trailing reductions) emitted as one loop nest",
    opt_outs=OPT_OUTS,
    lowering=True,
    runs="body",
)


# ---- contract ----------------------------------------------------------------------------------

def panel_width(dtype: str) -> int:
    """Columns per panel of a panel-stored matrix (ks::panel_width: 64 bytes)."""
    return 64 // np.dtype(numpy_dtype(dtype)).itemsize


DOT_PANEL = 4  # columns of the last panels without a vector unit (ks::tiles::dot_block, ks::tiles::panel_dots)


def to_panels(b: np.ndarray, vectors: bool = True) -> np.ndarray:
    """A [k, n] matrix as panels [ceil(n / P), k, P], the last one zero-padded (ks::panels). For a target without a
    vector unit (ks::tiles::panel_dots) the same P-column panels for all but the last n % P columns, which follow as
    panels of DOT_PANEL columns (the last one zero-padded), all stored as [ceil(n / DOT_PANEL), k, DOT_PANEL]."""
    k, n = b.shape
    p = panel_width(dtype_of(b))
    if vectors:
        return _panels(b, p)
    wide = n - n % p
    flat = np.concatenate([_panels(b[:, :wide], p).ravel(), _panels(b[:, wide:], DOT_PANEL).ravel()])
    return flat.reshape(-1, k, DOT_PANEL)


def _panels(b: np.ndarray, p: int) -> np.ndarray:
    """[k, n] as [ceil(n / p), k, p], the last panel zero-padded."""
    k, n = b.shape
    j = -(-n // p)
    padded = np.zeros((k, j * p), dtype=b.dtype)
    padded[:, :n] = b
    return np.ascontiguousarray(padded.reshape(k, j, p).transpose(1, 0, 2))


def from_panels(panels: np.ndarray, n: int) -> np.ndarray:
    """The [k, n] matrix that `to_panels` stored."""
    j, k, p = panels.shape
    width = panel_width(dtype_of(panels))
    if p == width:
        return panels.transpose(1, 0, 2).reshape(k, j * p)[:, :n]
    wide = n - n % width
    head = panels.ravel()[:wide * k].reshape(wide // width, k, width)
    tail = panels.ravel()[wide * k:].reshape(j - wide // p, k, p)
    return np.concatenate([from_panels(head, wide), tail.transpose(1, 0, 2).reshape(k, tail.size // max(k, 1))
                           [:, :n - wide]], axis=1)


def _logical_b(t: Type, cols) -> Type:
    """The [k, n] type of a panel-stored operand."""
    if t.rank != 3 or not isinstance(cols, int) or t.shape[2] not in (panel_width(t.dtype), DOT_PANEL) or \
            t.shape[0] != -(-cols // t.shape[2]):
        raise KsbuildError(f"internal: {t} is not a panel-stored matrix of {cols} columns")
    return Type(t.dtype, (t.shape[1], cols))


def extra_count(eqn_or_params) -> int:
    """How many operands at the end of a contract or convolve belong to its epilogue."""
    params = getattr(eqn_or_params, "params", eqn_or_params)
    epilogue = params.get("epilogue")
    return len(epilogue.params) - 1 if epilogue is not None else 0


def operands(eqn: Eqn):
    """A contract's two factors (after its accumulator, before its epilogue's operands)."""
    main = eqn.ins[:len(eqn.ins) - extra_count(eqn)]
    return main[-2], main[-1]


def epilogue_type(product: Type, extra_types, epilogue: Func | None) -> Type:
    """The type an epilogue makes of a product (the product's when there is none)."""
    if epilogue is None:
        return product
    if list(epilogue.in_types) != [product, *extra_types] or list(epilogue.out_types) != [product]:
        raise KsbuildError(f"internal: epilogue {epilogue.in_types} -> {epilogue.out_types} does not fit a product "
                           f"{product} and operands {list(extra_types)}")
    return product


def apply_epilogue(value, extra, epilogue: Func | None, env):
    """The epilogue evaluated on a product's value (the reference interpreter)."""
    if epilogue is None:
        return value
    from ..ir.interp import eval_func
    return eval_func(epilogue, [value, *extra], env)[0]


def _contract_rule(in_types, spec, impl, acc, threads: int = 0, cols=None, block: int = 4, epilogue=None):
    if impl not in ("loops", "dense", "gemm", "tiles", "panels"):
        raise KsbuildError(f"internal: unknown contraction implementation '{impl}'")
    n_extra = len(epilogue.params) - 1 if epilogue is not None else 0
    main, extra = list(in_types[:len(in_types) - n_extra]), list(in_types[len(in_types) - n_extra:])
    ops = main[1:] if acc else main
    if impl == "panels":
        ops[-1] = _logical_b(ops[-1], cols)
    (out,) = _einsum_prim.type_rule(ops, spec=spec)
    if acc and main[0] != out:
        raise KsbuildError(f"internal: accumulator {main[0]} does not match the product {out}")
    return (epilogue_type(out, extra, epilogue),)


def _contract_eval(*args, spec, impl, acc, env, threads: int = 0, cols=None, block: int = 4, epilogue=None):
    n_extra = len(epilogue.params) - 1 if epilogue is not None else 0
    main, extra = args[:len(args) - n_extra], args[len(args) - n_extra:]
    x, y = main[-2:]
    if impl == "panels":
        y = from_panels(y, cols)
    (prod,) = _einsum_prim.eval(x, y, spec=spec, env=env)
    value = (main[0] + prod).astype(prod.dtype) if acc else prod
    return (apply_epilogue(value, extra, epilogue, env),)


def gemm_axes(spec: str):
    """(batch letters, m, n, k) when einsum spec a,b->o is a batched matrix product
    c[m,n] = Σ_k a[m,k]·b[k,n] with one summed letter k: m is a's last letter kept in o and not in b, n is
    b's last such letter, and every other letter of o is a batch letter, in a, b or both (vmap of x @ W
    batches one operand only: a product per batch index, the other operand shared)."""
    a, b, o = parse_spec(spec)
    if len(set(a)) != len(a) or len(set(b)) != len(b) or len(set(o)) != len(o):
        return None
    k = [ch for ch in a if ch in b and ch not in o]
    m = [ch for ch in a if ch in o and ch not in b]
    n = [ch for ch in b if ch in o and ch not in a]
    if len(k) != 1 or not m or not n or not set(a + b) <= set(o + k[0]) or not set(o) <= set(a + b):
        return None
    batch = [ch for ch in o if ch not in (m[-1], n[-1])]
    return batch, m[-1], n[-1], k[0]


def _emit_contract(ctx, eqn: Eqn) -> None:
    """out (+)= Σ a·b: the product is written into the planned buffer of out (acc's, when in place)."""
    p = eqn.params
    x, y = operands(eqn)
    (out,) = eqn.outs
    dst, into = _contract_target(ctx, eqn)
    sa, sb = ctx.storage(x), ctx.storage(y)
    fused = False
    if p["impl"] == "panels":
        fused = _emit_packed_gemm(ctx, eqn, sa, sb, dst, into)
    elif p["impl"] in ("gemm", "tiles") and sa.literal is None and sb.literal is None:
        fused = _emit_gemm(ctx, eqn, sa, sb, dst, into)
    elif p["impl"] == "dense" and _dense_operands(ctx, eqn, sa, sb, dst, into):
        fused = _emit_dense(ctx, eqn, sa, sb, dst)
    else:
        _emit_loops(ctx, eqn, sa, sb, dst, into)
    if p.get("epilogue") is not None and not fused:
        apply_in_place(ctx, eqn, dst)
    if out.type.rank:
        ctx.env[out] = dst


def _lambda(ctx, eqn: Eqn, out_letters: str, ix: dict, m: str, n: str) -> str | None:
    """The epilogue as a lambda of the product's (row, column), inside the loops over its batch letters."""
    if eqn.params.get("epilogue") is None:
        return None
    i, j = ctx.namer.fresh("row"), ctx.namer.fresh("col")
    index = [ix[ch] if ch in ix else i if ch == m else j for ch in out_letters]
    return epilogues.declare(ctx, eqn, index, eqn.outs[0].type.shape, [i, j])


def _contract_target(ctx, eqn: Eqn):
    """(destination storage or None for a scalar result, whether it already holds the accumulator)."""
    out = eqn.outs[0]
    if not out.type.rank:
        return None, False
    if not eqn.params["acc"]:
        return ctx.target(out, "prod"), False
    return ctx.accumulator(eqn, eqn.ins[0], "acc"), True


def _emit_loops(ctx, eqn: Eqn, sa, sb, dst, into: bool) -> None:
    """A loop nest: a dot product per output element when the innermost axis is summed, else
    accumulate into the output with its last axis innermost."""
    a, b, o = parse_spec(eqn.params["spec"])
    x, y = operands(eqn)
    out = eqn.outs[0]
    sizes = dict(zip(a, x.type.shape)) | dict(zip(b, y.type.shape))
    summed = [ch for ch in dict.fromkeys(a + b) if ch not in o]
    c = ctx.ctype(out.type)
    score = lambda ch: (a[-1:] == ch) + (b[-1:] == ch) + (o[-1:] == ch)  # noqa: E731
    inner = max(list(o) + summed, key=score)
    threads = eqn.params.get("threads", 0)
    if inner in summed and o and _blocks(sizes[o[-1]]) and (threads <= 1 or len(o) > 1):
        summed.sort(key=lambda ch: ch == inner)
        _emit_dot_block(ctx, eqn, sa, sb, dst, into, sizes, summed)
        return
    if inner in summed or not o:
        summed.sort(key=lambda ch: ch == inner)
        outer = ctx.open_loops([sizes[ch] for ch in o], threads=threads)
        acc = ctx.namer.fresh("dot")
        init = ctx.scalar(eqn.ins[0]) if (eqn.params["acc"] and not o) else "0"
        ctx.line(f"{c} {acc} = {init};")
        red = ctx.open_loops([sizes[ch] for ch in summed], f"reduction(+:{acc})")
        ix = dict(zip(o, outer)) | dict(zip(summed, red))
        ctx.line(f"{acc} += {sa.at([ix[ch] for ch in a])} * {sb.at([ix[ch] for ch in b])};")
        ctx.close_loops(red)
        if not o:
            ctx.env[out] = acc
            return
        ctx.line(f"{dst.at(outer)} {'+=' if into else '='} {acc};")
        ctx.close_loops(outer)
        return
    if not into:
        ctx.fill(dst, "0", out.type)
    order = [ch for ch in o if ch != inner] + summed + [inner]
    loops = ctx.open_loops([sizes[ch] for ch in order], threads=threads if order[0] in o else 0)
    ix = dict(zip(order, loops))
    ctx.line(f"{dst.at([ix[ch] for ch in o])} += {sa.at([ix[ch] for ch in a])} * {sb.at([ix[ch] for ch in b])};")
    ctx.close_loops(loops)


DOT_BLOCK = 4  # dot products computed together along the result's last axis


def _blocks(last) -> bool:
    """Whether a result axis of this size is worth (and safe: a static size below the block would index
    past a small stack array in a dead loop, which GCC rejects) computing DOT_BLOCK dots at a time."""
    return not isinstance(last, int) or last >= DOT_BLOCK


def _emit_dot_block(ctx, eqn: Eqn, sa, sb, dst, into: bool, sizes: dict, summed: list) -> None:
    """Dot products, DOT_BLOCK of them at a time along the result's last axis (then one at a time for the
    rest): independent accumulators keep the adds from waiting on each other, and an operand that does
    not depend on that axis (a row of x in x·Wᵀ) is loaded once for all of them."""
    a, b, o = parse_spec(eqn.params["spec"])
    c = ctx.ctype(eqn.outs[0].type)
    threads = eqn.params.get("threads", 0)
    outer = ctx.open_loops([sizes[ch] for ch in o[:-1]], threads=threads)
    j = ctx.namer.fresh("j")
    block = [f"({j} + {q})" if q else j for q in range(DOT_BLOCK)]
    for header, blocked in _dot_loops(j, sizes[o[-1]]):
        if not blocked:
            ctx.line(header)
            continue
        ctx.line(header + " {")
        ctx.depth += 1
        _emit_dots(ctx, (a, b, o), sa, sb, dst, into, sizes, summed, outer, block if blocked == "block" else [j], c)
        ctx.close_loops(1)
    ctx.close_loops(outer)


def _dot_loops(j: str, size) -> list[tuple[str, str]]:
    """(C++ line, "block" for a loop over blocks of dots | "single" for a loop over single dots | "" for a
    plain line) along the result's last axis. A literal size gets literal bounds, so that GCC sees every
    index in range (an unknown start past a small stack array is an error under -Werror)."""
    if isinstance(size, int):
        whole = size - size % DOT_BLOCK
        rest = [(f"for (int64_t {j} = {whole}; {j} < {size}; ++{j})", "single")] if whole < size else []
        return [(f"for (int64_t {j} = 0; {j} < {whole}; {j} += {DOT_BLOCK})", "block")] + rest
    n = dim_expr(size)
    return [(f"int64_t {j} = 0;", ""), (f"for (; {j} + {DOT_BLOCK} <= {n}; {j} += {DOT_BLOCK})", "block"),
            (f"for (; {j} < {n}; ++{j})", "single")]


def _emit_dots(ctx, letters, sa, sb, dst, into: bool, sizes: dict, summed: list, outer: list, lasts: list,
               c: str) -> None:
    """One accumulator per index expression in `lasts` (the result's last axis), summed over `summed`."""
    a, b, o = letters
    accs = [ctx.namer.fresh("dot") for _ in lasts]
    ctx.line(" ".join(f"{c} {acc} = 0;" for acc in accs))
    red = ctx.open_loops([sizes[ch] for ch in summed], f"reduction(+:{', '.join(accs)})")
    for acc, last in zip(accs, lasts):
        ix = dict(zip(o, outer + [last])) | dict(zip(summed, red))
        ctx.line(f"{acc} += {sa.at([ix[ch] for ch in a])} * {sb.at([ix[ch] for ch in b])};")
    ctx.close_loops(red)
    for acc, last in zip(accs, lasts):
        ctx.line(f"{dst.at(outer + [last])} {'+=' if into else '='} {acc};")


def _emit_gemm(ctx, eqn: Eqn, sa, sb, dst, into: bool) -> bool:
    """Loops over the batch letters around one ks::gemm call (ks/blas.h maps strides to CBLAS) or, for impl
    "tiles", one ks::tiled_gemm call (ks/gemm.h: portable register tiles); whether it applies the epilogue."""
    a, b, o = parse_spec(eqn.params["spec"])
    x, y = operands(eqn)
    sizes = dict(zip(a, x.type.shape)) | dict(zip(b, y.type.shape))
    batch, m, n, k = gemm_axes(eqn.params["spec"])
    threads = eqn.params.get("threads", 0)
    items = threads > 1 and eqn.params["impl"] == "tiles" and \
        _by_items([sizes[ch] for ch in batch], threads)
    if items:  # whole products per part, one parallel region for all of them
        slot, loops = _open_items(ctx, threads, [sizes[ch] for ch in batch], [sizes[ch] for ch in (m, n, k)])
    else:
        loops = ctx.open_loops([sizes[ch] for ch in batch])
    ix = dict(zip(batch, loops))

    def matrix(st, letters: str, rows: str, cols: str) -> str:
        for pos in sorted((letters.index(ch) for ch in batch if ch in letters), reverse=True):
            st = st.take(pos, ix[letters[pos]])
        rest = [ch for ch in letters if ch not in batch]
        return f"{{{st.base}, {st.strides[rest.index(rows)]}, {st.strides[rest.index(cols)]}}}"

    dims = ", ".join(ctx.dim(sizes[ch]) for ch in (m, n, k))
    c = ctx.ctype(eqn.outs[0].type)
    extra, epi = "", None
    if eqn.params["impl"] == "tiles":  # room to pack b into panels (ks/gemm.h), and the epilogue
        room = f"ks::tiled_gemm_scratch<{c}>({dims})"
        extra = ", " + ctx.scratch(c, f"ks::parts::room({threads}, {room})" if threads > 1 else room, eqn=eqn)
        epi = _lambda(ctx, eqn, o, ix, m, n)
        extra += f", ks::product_epilogue<{c}>({epi})" if epi else ""
    fn = "ks::gemm" if eqn.params["impl"] == "gemm" else "ks::tiled_gemm"
    call = f"({dims}, {matrix(sa, a, m, k)}, {matrix(sb, b, k, n)}, {matrix(dst, o, m, n)}, " \
           f"{'true' if into else 'false'}{extra});"
    if items:  # (part 0 of 1: the whole product, on the scratch of the thread that runs it)
        ctx.line(f"ks::parts::tiled_gemm<{c}>(0, 1, {slot}, {call[1:]}")
        _close_items(ctx)
    elif threads > 1:
        _emit_product_parts(ctx, eqn, "ks::parts::tiled_gemm", c, [sizes[ch] for ch in (m, n, k)], call)
        ctx.close_loops(loops)
    else:
        ctx.line(f"{fn}<{c}>{call}")
        ctx.close_loops(loops)
    return epi is not None


def _by_items(batch: list, threads: int) -> bool:
    """Whether a batched product (attention's scores and weighted values: [batch, heads] products of 128 x 128 x 64)
    runs as parts of whole products, one parallel region for them all, instead of each product split in parts (a
    region per product: 8 per layer at batch 1, 64 at batch 8, each waiting for every thread): when the products
    divide evenly among the threads (the literal factor of their count does) or there are at least 4 per thread."""
    literal = math.prod(d for d in batch if isinstance(d, int))
    return bool(batch) and (literal % threads == 0 or literal >= 4 * threads)


def _open_items(ctx, threads: int, batch: list, mnk: list) -> tuple[str, list[str]]:
    """Open a ks::pool::run over parts of the products of a batched product (ks::parts::split's N to 4N parts of
    whole products, as many multiply-adds as they have; one part, on the calling thread, below PARALLEL_MIN_MACS) and
    a loop over each part's products, with the batch letters' indices; (the slot's name, the indices)."""
    count, macs = product(batch), product(batch + mnk)
    parts, part, slot, span, flat = (ctx.namer.fresh(h) for h in ("parts", "part", "slot", "span", "flat"))
    split = f"ks::parts::split({threads}, {count}, {macs})"
    if all(isinstance(d, int) for d in batch + mnk):
        ctx.line(f"const int {parts} = {split if math.prod(batch + mnk) >= PARALLEL_MIN_MACS else 1};")
    else:
        ctx.line(f"const int {parts} = {macs} >= {PARALLEL_MIN_MACS} ? {split} : 1;")
    ctx.line(f"ks::pool::run({threads}, {parts}, [&](int {part}, int {slot}) {{")
    ctx.depth += 1
    ctx.line(f"const ks::parts::range {span} = ks::parts::share({count}, 1, {part}, {parts});")
    ctx.line(f"for (int64_t {flat} = {span}.begin; {flat} < {span}.end; ++{flat}) {{")
    ctx.depth += 1
    loops = []
    for q, d in enumerate(batch):
        if d == 1:
            loops.append("0")
            continue
        i = ctx.namer.index(ctx.depth)
        inner = product(batch[q + 1:])
        quotient = flat if inner == "1" else f"{flat} / ({inner})"
        kept = quotient if q == 0 else f"{f'({quotient})' if inner != '1' else quotient} % {dim_expr(d)}"
        ctx.line(f"const int64_t {i} = {kept};")
        loops.append(i)
    return slot, loops


def _close_items(ctx) -> None:
    """Close _open_items' loop and region."""
    ctx.depth -= 1
    ctx.line("}")
    ctx.depth -= 1
    ctx.line("});")


def _contract_scratch(eqn: Eqn, tiles) -> int | None:
    """The bytes ks::tiled_gemm packs b into (impl "tiles", prims/scratch.py) on the levels of `tiles`; None for
    other impls, symbolic sizes or no packing."""
    if eqn.params["impl"] != "tiles" or gemm_axes(eqn.params["spec"]) is None:
        return None
    a, b, _ = parse_spec(eqn.params["spec"])
    x, y = operands(eqn)
    sizes = dict(zip(a, x.type.shape)) | dict(zip(b, y.type.shape))
    _, m, n, k = gemm_axes(eqn.params["spec"])
    mnk = [sizes[ch] for ch in (m, n, k)]
    if not all(isinstance(d, int) for d in mnk):
        return None
    size, threads = element_bytes(eqn.outs[0].type.dtype), eqn.params.get("threads", 0)

    def elements(t) -> int:
        n = scratch_sizes.tiled_gemm_scratch(*mnk, size, t)
        return scratch_sizes.parts_room(threads, n) if threads > 1 else n
    return scratch_sizes.most_bytes(elements, size, tiles) or None


def _emit_product_parts(ctx, eqn: Eqn, fn: str, c: str, mnk: list, call: str) -> None:
    """A matrix product as `threads` parts on as many threads (ks/parts.h: ranges of its columns or rows; ks/pool.h
    runs them); with symbolic sizes, split only when it has PARALLEL_MIN_MACS multiply-adds."""
    when = "" if all(isinstance(d, int) for d in mnk) else \
        f"{' * '.join(f'({ctx.dim(d)})' for d in mnk)} >= {PARALLEL_MIN_MACS}"
    threads = eqn.params["threads"]
    count = f"ks::parts::product_parts<{c}>({threads}, {', '.join(ctx.dim(d) for d in mnk)})"
    ctx.run_parts(threads, when, lambda part, parts, slot: f"{fn}<{c}>({part}, {parts}, {slot}, {call[1:]}", count)


def _contract_parallel(eqn: Eqn) -> bool:
    """Whether a contract's loop nest (impl "loops") or its kernel-layer call (impl "tiles", "panels": ks/parts.h,
    at least PARALLEL_MIN_MACS multiply-adds when the sizes are known) runs on the threads."""
    impl = eqn.params["impl"]
    if impl == "loops":
        return eqn.outs[0].type.rank > 0
    if impl not in ("tiles", "panels") or eqn.outs[0].type.rank < 2:
        return False
    _, m, n, k = gemm_axes(eqn.params["spec"])
    x, y = operands(eqn)
    a, b, _ = parse_spec(eqn.params["spec"])
    sizes = dict(zip(a, x.type.shape)) | dict(zip(b, y.type.shape))
    if impl == "panels":
        sizes |= {n: eqn.params["cols"], k: y.type.shape[1]}
    mnk = [sizes[ch] for ch in (m, n, k)]
    return not all(isinstance(d, int) for d in mnk) or math.prod(mnk) >= PARALLEL_MIN_MACS


def _column_views(out_letters: str, m: str, n: str):
    """The views that read a product's [m, n] result (or an epilogue operand of its shape) by column, as
    epilogues.affine reads a channel's: [1, n, m]."""
    at_m, at_n = out_letters.index(m), out_letters.index(n)

    def columns(s: Storage) -> Storage | None:
        shape = (1, s.shape[at_n], s.shape[at_m])
        if s.literal is not None:
            return Storage.splat(s.literal, shape)
        return Storage(s.base, shape, ("0", s.strides[at_n], s.strides[at_m]), False, into=s.root, origin=s.origin,
                       offset=s.offset)
    return columns


def _column_affine(ctx, eqn: Eqn, out_letters: str, m: str, n: str) -> str | None:
    """The name of a ks::affine for the epilogue when it is v + bias[column] then clamps (a dense layer's
    relu(x·W + b): ks::column_affine_epilogue, which ks::packed_gemm's tiles apply to their accumulators as they
    store), else None. Float results of a product without batch letters alone (in the tiles for float only:
    ks::tiles::columns_in_tiles)."""
    if eqn.params.get("epilogue") is None or len(out_letters) != 2 or eqn.outs[0].type.dtype != "f32":
        return None
    simple = epilogues.affine(ctx, eqn, _column_views(out_letters, m, n))
    if simple is None:
        return None
    name = ctx.namer.fresh("epilogue")
    ctx.line(f"const auto {name} = {simple};")
    return name


def _dense_operands(ctx, eqn: Eqn, sa, sb, dst, into: bool) -> bool:
    """Whether a contract of impl "dense" (one row x [1, k] times a weight w [n, k], n >= DOT_BLOCK: dot_convs.py)
    has the operands ks::tiles::dense_row reads: x and each row of w contiguous, w's rows k apart, the result's row
    contiguous, not accumulated into, k literal and at least 1 (else its loop nest computes it)."""
    axes = gemm_axes(eqn.params["spec"])
    if into or dst is None or axes is None or axes[0] or sa.literal is not None or sb.literal is not None:
        return False
    _, m, n, k = axes
    a, b, o = parse_spec(eqn.params["spec"])
    x, y = operands(eqn)
    sizes = dict(zip(a, x.type.shape)) | dict(zip(b, y.type.shape))
    if len(a) != 2 or len(b) != 2 or sizes[m] != 1 or not isinstance(sizes[n], int) or sizes[n] < DOT_BLOCK or \
            not isinstance(sizes[k], int) or sizes[k] < 1:
        return False
    return sa.strides[a.index(k)] == "1" and sb.strides[b.index(k)] == "1" and \
        sb.strides[b.index(n)] == ctx.dim(sizes[k]) and dst.strides[o.index(n)] == "1"


def _emit_dense(ctx, eqn: Eqn, sa, sb, dst) -> bool:
    """One ks::tiles::dense_row call (prelude/ks/gemm.h) for a contract of impl "dense" with _dense_operands, the
    epilogue applied by it when it is v + bias[column], then perhaps a clamp below at 0 (a ReLU: its `relu` flag)
    and no other bound (epilogues.affine_parts); whether it was."""
    a, b, o = parse_spec(eqn.params["spec"])
    _, m, n, k = gemm_axes(eqn.params["spec"])
    x, y = operands(eqn)
    sizes = dict(zip(a, x.type.shape)) | dict(zip(b, y.type.shape))
    c = ctx.ctype(eqn.outs[0].type)
    parts = None
    if eqn.params.get("epilogue") is not None and eqn.outs[0].type.dtype == "f32":
        parts = epilogues.affine_parts(ctx, eqn, _column_views(o, m, n))
    if parts and not (parts[2] == 0 or (parts[2] == 1 and parts[3] == ctx.literal(0.0, eqn.outs[0].type))):
        parts = None  # (another bound: the epilogue's own loop after the call)
    bias, bits = parts[1:3] if parts else ("nullptr", 0)
    c = c if eqn.params.get("block", 4) == 4 else f"{c}, {eqn.params['block']}"  # (dot_convs.dense_params)
    ctx.line(f"ks::tiles::dense_row<{c}>({sa.base}, {sb.base}, {dst.base}, {ctx.dim(sizes[n])}, "
             f"{ctx.dim(sizes[k])}, {bias}, {'true' if bits else 'false'});")
    return parts is not None


def _emit_packed_gemm(ctx, eqn: Eqn, sa, sb, dst, into: bool) -> bool:
    """One ks::packed_gemm call: b is a constant stored as panels (ks/gemm.h); whether it applies the epilogue."""
    a, b, o = parse_spec(eqn.params["spec"])
    _, m, n, k = gemm_axes(eqn.params["spec"])
    x, y = operands(eqn)
    sizes = dict(zip(a, x.type.shape)) | {n: eqn.params["cols"], k: y.type.shape[1]}
    dims = ", ".join(ctx.dim(sizes[ch]) for ch in (m, n, k))
    am = f"{{{sa.base}, {sa.strides[a.index(m)]}, {sa.strides[a.index(k)]}}}"
    cm = f"{{{dst.base}, {dst.strides[o.index(m)]}, {dst.strides[o.index(n)]}}}"
    c = ctx.ctype(eqn.outs[0].type)
    by_column = _column_affine(ctx, eqn, o, m, n)
    epi = f"ks::column_affine_epilogue<{c}>({by_column})" if by_column else _lambda(ctx, eqn, o, {}, m, n)
    epi = f"ks::product_epilogue<{c}>({epi})" if epi and not by_column else epi
    call = f"({dims}, {am}, {{{sb.base}, {ctx.dim(sizes[k])}}}, {cm}, " \
           f"{'true' if into else 'false'}{f', {epi}' if epi else ''});"
    if eqn.params.get("threads", 0) > 1:
        _emit_product_parts(ctx, eqn, "ks::parts::packed_gemm", c, [sizes[ch] for ch in (m, n, k)], call)
    else:
        ctx.line(f"ks::packed_gemm<{c}>{call}")
    return epi is not None


contract = Prim(
    name="contract",
    sign=unsigned,
    nonfinite=finite,
    epilogue_impls=("tiles", "panels", "gemm", "dense"),
    inplace=lambda eqn: 0 if eqn.params["acc"] else None,  # (acc: adds the product into its first operand)
    type_rule=_contract_rule,
    eval=_contract_eval,
    jvp=None,  # (lowering only: OPT_OUTS)
    batch=None,
    emit=_emit_contract,
    parallel=_contract_parallel,
    scratch=_contract_scratch,
    doc="an einsum as loops or a gemm call, optionally added to an accumulator",
    opt_outs=OPT_OUTS,
    lowering=True,
)


def apply_in_place(w: Writer, eqn: Eqn, dst: Storage) -> None:
    """The epilogue of a contract or convolve (codegen/epilogue.py) as a loop nest over the stored product dst,
    writing the result over it."""
    body: Func = eqn.params["epilogue"]
    product = Var(eqn.outs[0].type, "prod")
    w.env[product] = dst
    emit_fusion(w, Eqn(fusion, (product, *epilogues.extras(eqn)), eqn.outs, {"body": body}, eqn.loc),
                dests={eqn.outs[0]: dst})


# ---- join ---------------------------------------------------------------------------------------

def _join_rule(in_types, axis: int):
    first = in_types[0]
    total = 0
    for t in in_types:
        same = t.rank == first.rank and t.dtype == first.dtype and \
            all(d == e for i, (d, e) in enumerate(zip(t.shape, first.shape)) if i != axis)
        if not same:
            raise KsbuildError(f"internal: join along axis {axis} of {first} and {t}")
        total = dim_add(total, t.shape[axis])
    return [Type(first.dtype, first.shape[:axis] + (total,) + first.shape[axis + 1:])]


def _join_emit(ctx: Writer, eqn: Eqn) -> None:
    # each piece copied once into its range of the result (a memcpy-like loop when the range is dense)
    (out,), axis = eqn.outs, eqn.params["axis"]
    dst = ctx.target(out, "joined")
    lo = 0
    for x in eqn.ins:
        n = x.type.shape[axis]
        ctx.copy(ctx.storage(x), dst.narrow(axis, lo, n), x.type)
        lo = dim_add(lo, n)
    ctx.env[out] = dst


def _join_rows(eqn: Eqn, n):
    """Row i of a join along another axis than 0 is the join of the pieces' rows i."""
    if eqn.params["axis"] == 0 or not all(a.type.rank > 0 and a.type.shape[0] == n for a in (*eqn.ins, *eqn.outs)):
        return None
    return dict(eqn.params), (True,) * len(eqn.ins)


join = Prim(
    name="join",  # (no `strings`: the join pass makes it of pads added, and add takes no strings)
    sign=unsigned,
    nonfinite=finite,
    type_rule=_join_rule,
    eval=lambda *xs, axis, env=None: (np.concatenate(xs, axis=axis),),
    jvp=None,  # (lowering only: OPT_OUTS)
    batch=None,
    emit=_join_emit,
    rows=_join_rows,
    doc="tensors joined along an axis (a concatenation, which the transformations see as pads added: "
        "transforms/join.py)",
    opt_outs=OPT_OUTS,
    lowering=True,
)
