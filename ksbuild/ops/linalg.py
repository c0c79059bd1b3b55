"""Contractions: einsum, matmul (numpy semantics, batch dims broadcast), dot, outer."""
from __future__ import annotations

from ..ir.core import Atom
from ..ir.types import broadcast_shapes, numel
from ._util import error

LETTERS = "abcdefghijklmnopqrstuvwxyz"


def einsum(b, spec: str, x: Atom, y: Atom) -> Atom:
    """A two-operand einsum with an explicit output, e.g. 'bij,bjk->bik'."""
    text = spec.replace(" ", "")
    lhs, arrow, out = text.partition("->")
    parts = lhs.split(",")
    if len(parts) != 2 or not arrow or "..." in text:
        raise error(b, f"einsum '{spec}': two operands and an explicit '->' output are supported")
    a, c = parts
    for letters, t in ((a, x.type), (c, y.type)):
        if len(letters) != t.rank:
            raise error(b, f"einsum '{spec}': '{letters}' does not match an operand of type {t}")
    x, y = _broadcast_unit_axes(b, a, x, c, y)
    return b.einsum(x, y, spec=f"{a},{c}->{out}")


def _broadcast_unit_axes(b, a: str, x: Atom, c: str, y: Atom):
    """Size-1 axes broadcast against the other operand's size for the same letter (as torch does)."""
    sizes = {}
    for letters, t in ((a, x.type), (c, y.type)):
        for ch, d in zip(letters, t.shape):
            if d != 1:
                sizes.setdefault(ch, d)

    def fix(letters: str, v: Atom) -> Atom:
        shape = tuple(sizes.get(ch, 1) if d == 1 else d for ch, d in zip(letters, v.type.shape))
        return v if shape == v.type.shape else b.broadcast_to(v, shape=shape)

    return fix(a, x), fix(c, y)


def matmul(b, x: Atom, y: Atom) -> Atom:
    """numpy/torch matmul: vectors are promoted and the added axis removed; batch dims broadcast."""
    rx, ry = x.type.rank, y.type.rank
    if rx == 0 or ry == 0:
        raise error(b, f"matmul needs tensors of rank >= 1, got {x.type} and {y.type}")
    if x.type.dtype != y.type.dtype:
        raise error(b, f"matmul needs operands of one dtype, got {x.type} and {y.type}")
    bx, by = x.type.shape[:-2], y.type.shape[:-2]
    batch = broadcast_shapes(bx, by)
    if batch is None:
        raise error(b, f"matmul of {x.type} and {y.type}: the batch dims do not broadcast")
    k1, k2 = x.type.shape[-1], (y.type.shape[-2] if ry > 1 else y.type.shape[0])
    if k1 != k2:
        raise error(b, f"matmul of {x.type} and {y.type}: the contracted dims differ ({k1} and {k2})")
    if ry == 2 and rx > 2:  # [..., m, k] · [k, n]: one matrix product of the rows of every batch (a Linear
        # layer on [batch, time, features]), not a batched one the register tiles do not take
        rows = b.reshape(x, shape=(numel(x.type.shape[:-1]), k1))
        out2 = b.einsum(rows, y, spec="xy,yz->xz")
        return b.reshape(out2, shape=tuple(x.type.shape[:-1]) + (y.type.shape[1],))
    nb = len(batch)
    bl = LETTERS[:nb]
    m, k, n = "x", "y", "z"
    sx = bl[nb - len(bx):] + (m if rx > 1 else "") + k
    sy = bl[nb - len(by):] + k + (n if ry > 1 else "")
    out = bl + (m if rx > 1 else "") + (n if ry > 1 else "")
    x = _expand_batch(b, x, bx, batch)
    y = _expand_batch(b, y, by, batch)
    return b.einsum(x, y, spec=f"{sx},{sy}->{out}")


def _expand_batch(b, v: Atom, own, batch) -> Atom:
    """v's batch dims that are 1 where the broadcast batch is larger, broadcast (a free view)."""
    lead = len(batch) - len(own)
    want = tuple(batch[lead + i] if d == 1 else d for i, d in enumerate(own))
    if want == tuple(own):
        return v
    return b.broadcast_to(v, shape=want + v.type.shape[len(own):])


def dot(b, x: Atom, y: Atom) -> Atom:
    """Σ x·y of two vectors."""
    if x.type.rank != 1 or y.type.rank != 1:
        raise error(b, f"dot needs two vectors, got {x.type} and {y.type}")
    return einsum(b, "i,i->", x, y)


def outer(b, x: Atom, y: Atom) -> Atom:
    """x[i]·y[j] of two vectors."""
    if x.type.rank != 1 or y.type.rank != 1:
        raise error(b, f"outer needs two vectors, got {x.type} and {y.type}")
    return einsum(b, "i,j->ij", x, y)


def einsum_many(b, equation: str, xs: list[Atom]) -> Atom:
    """numpy einsum with any number of operands, '...' and an implicit output; operands are
    contracted left to right, each pair summing out the letters nothing later needs."""
    lhs, arrow, out = equation.replace(" ", "").partition("->")
    terms = lhs.split(",")
    if len(terms) != len(xs):
        raise error(b, f"einsum '{equation}' names {len(terms)} operands but gets {len(xs)}")
    terms, ell = _expand_ellipsis(b, terms, xs, equation)
    if not arrow:
        counts = {c: sum(t.count(c) for t in terms) for c in set("".join(terms))}
        out = ell + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in ell))
    else:
        out = out.replace("...", ell)
    xs, terms = map(list, zip(*[_diagonals(b, x, t) for x, t in zip(xs, terms)]))
    if len(xs) == 1:
        return _finish(b, xs[0], terms[0], out)
    acc, acc_t = xs[0], terms[0]
    for i in range(1, len(xs)):
        later = set(out) | set("".join(terms[i + 1:]))
        keep = "".join(dict.fromkeys(c for c in acc_t + terms[i] if c in later))
        acc = einsum(b, f"{acc_t},{terms[i]}->{keep}", acc, xs[i])
        acc_t = keep
    return _finish(b, acc, acc_t, out)


def _diagonals(b, x: Atom, t: str) -> tuple[Atom, str]:
    """An operand with a repeated letter ('ii') reduced to its diagonal: x · eye summed over the copy."""
    from .create import eye
    while len(set(t)) != len(t):
        c = next(ch for ch in t if t.count(ch) > 1)
        fresh = next(ch for ch in "ZYXWVUTSRQPONMLKJIHGFEDCBA" if ch not in t)
        second = t.index(c, t.index(c) + 1)
        renamed = t[:second] + fresh + t[second + 1:]
        n = x.type.shape[t.index(c)]
        mask = eye(b, n, n, x.type.dtype)
        keep = renamed.replace(fresh, "")
        x, t = b.einsum(x, mask, spec=f"{renamed},{c}{fresh}->{keep}"), keep
    return x, t


def _finish(b, x: Atom, have: str, want: str) -> Atom:
    """x with letters `have` summed down to and permuted into `want`."""
    drop = tuple(i for i, c in enumerate(have) if c not in want)
    if drop:
        x = b.reduce_sum(x, axes=drop)
        have = "".join(c for c in have if c in want)
    perm = tuple(have.index(c) for c in want)
    return b.transpose(x, perm=perm) if perm != tuple(range(len(perm))) else x


def _expand_ellipsis(b, terms: list[str], xs: list[Atom], equation: str) -> tuple[list[str], str]:
    """Terms with '...' replaced by letters for the broadcast dims (the longest run is used)."""
    used = set("".join(terms))
    spare = [c for c in "ZYXWVUTSRQPONMLKJIHGFEDCBA" if c not in used]
    n_ell = max((x.type.rank - (len(t) - 3) for t, x in zip(terms, xs) if "..." in t), default=0)
    ell = "".join(spare[:n_ell])
    out = []
    for t, x in zip(terms, xs):
        if "..." in t:
            k = x.type.rank - (len(t) - 3)
            t = t.replace("...", ell[n_ell - k:])
        if len(t) != x.type.rank:
            raise error(b, f"einsum '{equation}': '{t}' does not match an operand of type {x.type}")
        out.append(t)
    return out, ell


def cdist(b, x: Atom, y: Atom) -> Atom:
    """Euclidean distances between the rows of x [..., P, M] and y [..., R, M] (torch.cdist, p = 2): the
    differences squared and summed (not expanded: close rows keep their digits), derivative 0 at 0."""
    from .math import norm_root
    from .shape import unsqueeze
    d = b.sub(unsqueeze(b, x, -2), unsqueeze(b, y, -3))
    return norm_root(b, b.reduce_sum(b.ipow(d, n=2), axes=(d.type.rank - 1,)))


def det(b, x: Atom) -> Atom:
    """The determinant of the trailing [n, n] matrices: Gaussian elimination with partial pivoting,
    one `loop` step per column (row swaps are gathers, so it stays differentiable)."""
    from ..ir.core import Lit
    from ..ir.types import Type
    from ..prims.control import PRIMS_LOOP, wrap
    n = x.type.shape[-1]
    if x.type.rank < 2 or x.type.shape[-2] != n or not isinstance(n, int):
        raise error(b, f"det needs square matrices of a static size, got {x.type}")
    lead = x.type.shape[:-2]
    r = x.type.rank
    dt = x.type.dtype
    i64 = lambda v: Lit(v, Type("i64"))  # noqa: E731

    def step(bb, ps):
        k, a, d = ps
        a, p, rows = pivot_rows(bb, a, k)
        piv = bb.reshape(bb.gather(bb.reshape(bb.gather(a, bb.reshape(k, shape=(1,)), axis=r - 2),
                                              shape=lead + (n,)), bb.reshape(k, shape=(1,)), axis=r - 2),
                         shape=lead)
        d = bb.mul(d, bb.select(bb.eq(p, k), piv, bb.neg(piv)))
        col = bb.reshape(bb.gather(a, bb.reshape(k, shape=(1,)), axis=r - 1), shape=lead + (n,))
        below = bb.convert(bb.gt(rows, k), dtype=dt)
        safe = bb.select(bb.eq(piv, Lit(0.0, Type(dt))), Lit(1.0, Type(dt)), piv)
        factor = bb.mul(bb.div(col, bb.reshape(safe, shape=lead + (1,))), below)
        row_k = bb.reshape(bb.gather(a, bb.reshape(k, shape=(1,)), axis=r - 2), shape=lead + (n,))
        a = bb.sub(a, bb.mul(bb.reshape(factor, shape=lead + (n, 1)), bb.reshape(row_k, shape=lead + (1, n))))
        return [a, d]

    f = wrap("det_step", [Type("i64"), x.type, Type(dt, lead)], step)
    one = Lit(1.0, Type(dt, lead))
    return b.bind(PRIMS_LOOP, [i64(n), x, one], dict(body=f, n_consts=0, n_carry=2, length=n, reverse=False))[1]


def solve(b, a: Atom, rhs: Atom) -> Atom:
    """X with a · X = rhs for the trailing [n, n] matrices a and rhs [n] or [n, m] (the same leading dims):
    Gauss-Jordan elimination with partial pivoting on [a | rhs], one `loop` step per column, as det's (row
    swaps are gathers, so it stays differentiable). A singular matrix gives infinities or NaN, as torch's
    LU does not check either."""
    from ..ir.core import Lit
    from ..ir.types import Type
    from ..prims.control import PRIMS_LOOP, wrap
    from .shape import concatenate
    n = a.type.shape[-1]
    if a.type.rank < 2 or a.type.shape[-2] != n or not isinstance(n, int):
        raise error(b, f"solve needs square matrices of a static size, got {a.type} (annotate it with a literal "
                       "size such as \"float[3, 3]\"; the elimination is unrolled per column)")
    vector = rhs.type.rank == a.type.rank - 1
    if vector:
        rhs = b.reshape(rhs, shape=rhs.type.shape + (1,))
    lead, r, dt = a.type.shape[:-2], a.type.rank, a.type.dtype
    if rhs.type.rank != r or rhs.type.shape[:-1] != a.type.shape[:-1]:
        raise error(b, f"solve: the right-hand side {rhs.type} does not fit the matrices {a.type}")
    aug = concatenate(b, [a, rhs], r - 1)
    w = aug.type.shape[-1]
    i64 = lambda v: Lit(v, Type("i64"))  # noqa: E731

    def step(bb, ps):
        k, g = ps
        kk = bb.reshape(k, shape=(1,))
        g, _, rows = pivot_rows(bb, g, k)
        row_k = bb.reshape(bb.gather(g, kk, axis=r - 2), shape=lead + (w,))
        piv = bb.reshape(bb.gather(row_k, kk, axis=r - 2), shape=lead + (1,))
        row_k = bb.div(row_k, piv)
        col = bb.reshape(bb.gather(g, kk, axis=r - 1), shape=lead + (n,))
        factor = bb.mul(col, bb.convert(bb.ne(rows, k), dtype=dt))  # every other row loses its column k
        g = bb.sub(g, bb.mul(bb.reshape(factor, shape=lead + (n, 1)), bb.reshape(row_k, shape=lead + (1, w))))
        is_k = bb.reshape(bb.eq(rows, k), shape=(n, 1))
        return [bb.select(is_k, bb.reshape(row_k, shape=lead + (1, w)), g)]

    f = wrap("solve_step", [Type("i64"), aug.type], step)
    g = b.bind(PRIMS_LOOP, [i64(n), aug], dict(body=f, n_consts=0, n_carry=1, length=n, reverse=False))[0]
    x = b.slice(g, axis=r - 1, start=n, stop=w)
    return b.reshape(x, shape=x.type.shape[:-1]) if vector else x


def pivot_rows(b, a: Atom, k: Atom) -> tuple[Atom, Atom, Atom]:
    """Partial pivoting at column k of the trailing [n, ...] matrices (n rows): row k swapped with the row at or
    below it whose column-k entry is largest in size. (a with rows swapped, the pivot row of each matrix,
    iota(n))."""
    from ..ir.core import Lit
    from ..ir.types import Type
    from .index import arg_extremum
    r, n, lead = a.type.rank, a.type.shape[-2], a.type.shape[:-2]
    rows = b.iota(shape=(n,), axis=0, dtype="i64")
    col = b.reshape(b.gather(a, b.reshape(k, shape=(1,)), axis=r - 1), shape=lead + (n,))
    cand = b.select(b.ge(rows, k), b.abs(col), Lit(-1.0, Type(a.type.dtype)))
    p = arg_extremum(b, cand, r - 2, False, True)
    pe = b.reshape(p, shape=lead + (1,))
    return gather_rows(b, a, b.select(b.eq(rows, k), pe, b.select(b.eq(rows, pe), k, rows)), r), p, rows


def gather_rows(b, a: Atom, perm: Atom, r: int) -> Atom:
    """a[..., perm[..., i], :]: the rows of each matrix in a per-matrix order."""
    from .index import gather_elements
    idx = b.broadcast_to(b.reshape(perm, shape=perm.type.shape + (1,)), shape=a.type.shape)
    return gather_elements(b, a, idx, r - 2)
