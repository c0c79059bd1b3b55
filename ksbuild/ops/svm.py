"""Support vector machines as libsvm trains them (scikit-learn's SVC, NuSVC, SVR, NuSVR, OneClassSVM): the
kernel between the input rows and the support vectors, one-versus-one decision values of a multi-class
classifier as one product with a constant [V, P] matrix, their votes, and libsvm's probabilities (Platt's
sigmoid per pair, coupled into class probabilities by Wu, Lin and Weng's method, "Probability estimates
for multi-class classification by pairwise coupling", JMLR 5, 2004, as libsvm's multiclass_probability
iterates it: at most 100 sweeps, stopping when the optimality error is below 0.005 / k).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from ..ir.core import Atom, Lit
from ..ir.types import Type
from ._util import scalar_lit
from .create import array
from .index import arg_extremum
from .shape import concatenate

KERNELS = ("LINEAR", "POLY", "RBF", "SIGMOID")


@dataclass(frozen=True)
class Kernel:
    kind: str  # one of KERNELS
    gamma: float = 0.0
    coef0: float = 0.0
    degree: float = 0.0


def kernel(b, x: Atom, vectors: np.ndarray, k: Kernel) -> Atom:
    """K(x_n, v_m) [N, V] of float32 rows x [N, F] and constant vectors [V, F]: x·v (LINEAR),
    (γ x·v + c)^d (POLY), exp(-γ |x - v|²) (RBF, the squared distance summed from the differences, not
    expanded, so rows near a vector keep their precision) or tanh(γ x·v + c) (SIGMOID)."""
    f32 = lambda v: scalar_lit(float(v), "f32")  # noqa: E731
    vs = array(b, vectors.astype(np.float32))
    if k.kind == "RBF":
        n, f = x.type.shape
        d = b.sub(b.reshape(x, shape=(n, 1, f)), b.reshape(vs, shape=(1,) + vectors.shape))
        return b.exp(b.mul(f32(-k.gamma), b.reduce_sum(b.mul(d, d), axes=(2,))))
    dot = b.einsum(x, vs, spec="nf,vf->nv")
    if k.kind == "LINEAR":
        return dot
    z = b.add(b.mul(f32(k.gamma), dot), f32(k.coef0))
    if k.kind == "SIGMOID":
        return b.tanh(z)
    if float(k.degree).is_integer() and 0 <= k.degree <= 16:
        return b.ipow(z, n=int(k.degree))
    return b.pow(z, f32(k.degree))


def pairs(c: int) -> list[tuple[int, int]]:
    """The one-versus-one classifiers (i, j), i < j, in libsvm's order."""
    return list(itertools.combinations(range(c), 2))


def pair_weights(coefficients: np.ndarray, vectors_per_class: np.ndarray) -> np.ndarray:
    """The [V, P] matrix whose column p gives the decision value of pair p = (i, j) from the kernel row:
    libsvm's dual coefficients [C - 1, V] hold, for a vector of class i, its coefficient against class j in
    row j - 1 (j > i) or row j (j < i)."""
    c = len(vectors_per_class)
    start = np.concatenate([[0], np.cumsum(vectors_per_class)])
    w = np.zeros((int(start[-1]), len(pairs(c))), dtype=np.float32)
    for p, (i, j) in enumerate(pairs(c)):
        w[start[i]:start[i + 1], p] = coefficients[j - 1, start[i]:start[i + 1]]
        w[start[j]:start[j + 1], p] = coefficients[i, start[j]:start[j + 1]]
    return w


def votes(b, decision: Atom, c: int) -> Atom:
    """The class each row gets most votes for (the first at a tie): pair (i, j) votes i where its decision
    value is > 0, else j."""
    ps = pairs(c)
    to_i = np.zeros((len(ps), c), dtype=np.float32)
    to_j = np.zeros((len(ps), c), dtype=np.float32)
    for p, (i, j) in enumerate(ps):
        to_i[p, i], to_j[p, j] = 1, 1
    won = b.convert(b.gt(decision, scalar_lit(0.0, "f32")), dtype="f32")
    lost = b.sub(scalar_lit(1.0, "f32"), won)
    count = b.add(b.einsum(won, array(b, to_i), spec="np,pc->nc"), b.einsum(lost, array(b, to_j), spec="np,pc->nc"))
    return arg_extremum(b, count, 1, keepdims=False, largest=True)


def platt(b, decision: Atom, prob_a: np.ndarray, prob_b: np.ndarray) -> Atom:
    """Each pair's P(i over j) = 1 / (1 + e^(A f + B)), kept within [1e-7, 1 - 1e-7] (libsvm)."""
    f32 = lambda v: scalar_lit(float(v), "f32")  # noqa: E731
    val = b.add(b.mul(decision, array(b, prob_a.astype(np.float32))), array(b, prob_b.astype(np.float32)))
    p = b.logistic(b.neg(val))
    return b.select(b.lt(p, f32(1e-7)), f32(1e-7), b.select(b.gt(p, f32(1 - 1e-7)), f32(1 - 1e-7), p))


def couple(b, pair_p: Atom, c: int) -> Atom:
    """Class probabilities [N, C] from the pairs' [N, P] (libsvm's multiclass_probability): minimise
    pᵀQp subject to Σp = 1, with Q_ii = Σ_j r_ji², Q_ij = -r_ji r_ij, by sweeps of coordinate updates; a row
    stops changing once its error max_i |(Qp)_i - pᵀQp| is below 0.005 / c, as libsvm's loop breaks."""
    from ..prims.control import PRIMS_COND, PRIMS_LOOP, wrap
    n = pair_p.type.shape[0]
    ps = pairs(c)
    # r[i][j] for i != j read from [p, 1 - p] (the pair's own probability, or its complement)
    src = np.zeros((c, c), dtype=np.int64)
    for q, (i, j) in enumerate(ps):
        src[i, j], src[j, i] = q, len(ps) + q
    both = concatenate(b, [pair_p, b.sub(scalar_lit(1.0, "f32"), pair_p)], 1)
    r = b.reshape(b.gather(both, array(b, src.reshape(-1)), axis=1), shape=(n, c, c))
    off = array(b, ~np.eye(c, dtype=bool))
    r = b.select(off, r, scalar_lit(0.0, "f32"))
    rt = b.transpose(r, perm=(0, 2, 1))
    diag = b.reduce_sum(b.mul(rt, rt), axes=(2,))  # Q_ii = Σ_j r_ji²
    q = b.add(b.neg(b.mul(rt, r)), b.mul(b.reshape(diag, shape=(n, c, 1)), array(b, np.eye(c, dtype=np.float32))))
    eps = 0.005 / c

    def sweep(bb, params):
        """A sweep, or nothing once every row has converged (a cond: libsvm needs a handful of the 100)."""
        _, qq, p, done = params
        finished = bb.ne(bb.reduce_min(bb.convert(done, dtype="i32"), axes=(0,)), Lit(0, Type("i32")))
        types = [qq.type, p.type, done.type]
        rest = wrap("couple_converged", types, lambda b2, ps: [ps[1], ps[2]])
        step = wrap("couple_step", types, lambda b2, ps: coordinate_sweep(b2, *ps))
        return bb.bind(PRIMS_COND, [finished, qq, p, done], {"then_fn": rest, "else_fn": step})

    def coordinate_sweep(bb, qq, p, done):
        f = lambda v: scalar_lit(float(v), "f32")  # noqa: E731
        col = lambda a, i: bb.reshape(bb.slice(a, axis=1, start=i, stop=i + 1), shape=(n,))  # noqa: E731
        qp = bb.einsum(qq, p, spec="nij,nj->ni")
        pqp = bb.reduce_sum(bb.mul(p, qp), axes=(1,))
        err = bb.reduce_max(bb.abs(bb.sub(qp, bb.reshape(pqp, shape=(n, 1)))), axes=(1,))
        stop = bb.select(done, done, bb.lt(err, f(eps)))
        p_new = p
        for i in range(c):
            qi = bb.reshape(bb.slice(qq, axis=1, start=i, stop=i + 1), shape=(n, c))  # row i of Q
            qii = col(qi, i)
            diff = bb.div(bb.sub(pqp, col(qp, i)), qii)
            onehot = array(bb, np.eye(c, dtype=np.float32)[i])
            p_new = bb.add(p_new, bb.mul(bb.reshape(diff, shape=(n, 1)), onehot))
            grow = bb.add(f(1), diff)
            pqp = bb.div(bb.div(bb.add(pqp, bb.mul(diff, bb.add(bb.mul(diff, qii), bb.mul(f(2), col(qp, i))))),
                                grow), grow)
            g = bb.reshape(grow, shape=(n, 1))
            qp = bb.div(bb.add(qp, bb.mul(bb.reshape(diff, shape=(n, 1)), qi)), g)
            p_new = bb.div(p_new, g)
        return [bb.select(bb.reshape(stop, shape=(n, 1)), p, p_new), stop]

    start = b.broadcast_to(scalar_lit(1.0 / c, "f32"), shape=(n, c))
    not_done = b.broadcast_to(Lit(False, Type("bool")), shape=(n,))
    body = wrap("couple_sweep", [Type("i64"), q.type, start.type, not_done.type], sweep)
    return b.bind(PRIMS_LOOP, [Lit(100, Type("i64")), q, start, not_done],
                  dict(body=body, n_consts=1, n_carry=2, length=100, reverse=False))[0]
