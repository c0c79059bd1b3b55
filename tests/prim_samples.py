"""One table of op samples that drives the primitive tests.

Each entry: prim name -> (input types, params, sampler, reference). The reference is an
independent formula (Python math / numpy written out), not the prim's own eval rule.
"""
from __future__ import annotations

import math
import struct
from pathlib import Path

import numpy as np

from ksbuild.ir.types import Type

F = Type("f64")
V = Type("f64", (4,))
M = Type("f64", (3, 4))
B = Type("bool")
I = Type("i64")  # noqa: E741
HERE = Path(__file__).resolve().parent


def normal(rng, shape):
    return rng.standard_normal(shape)


def positive(rng, shape):
    return rng.uniform(0.5, 2.0, shape)


def unit(rng, shape):
    return rng.uniform(-0.9, 0.9, shape)


def both(rng, shape):
    """Booleans holding both values (once there are two): a one-element predicate tests half a select."""
    n = int(np.prod(shape, dtype=np.int64))
    return (rng.permutation(n) % 2 == 0).reshape(shape)


def index_below(n):
    return lambda rng, shape: rng.integers(0, n, shape)


def index_between(lo, hi):
    return lambda rng, shape: rng.integers(lo, hi, shape)


def _index_set_ref(x, i, v):
    out = x.copy()
    out[:, i] = v
    return out



def _wrap_clamp(i, n: int) -> int:
    """A computed index as ksbuild defines it: negative counts from the end, then clamped into range."""
    i = int(i)
    return min(max(i + n if i < 0 else i, 0), n - 1)

def _index_add_ref(x, i, v):
    out = x.copy()
    out[:, i] += v
    return out


def _element_add_ref(x, i, j, v):
    out = x.copy()
    out[_wrap_clamp(i, x.shape[0]), _wrap_clamp(j, x.shape[1])] += v
    return out


def ties_nan(rng, shape):
    """Whole numbers in {-1, 0, 1} (rows with equal extrema) and a NaN in about one element of 8."""
    x = rng.integers(-1, 2, shape).astype(np.float64)
    x[rng.uniform(size=shape) < 0.125] = np.nan
    return x


def _first_extremum(values, largest: bool) -> int:
    """The position of the first NaN, else of the first largest (smallest) value."""
    values = [float(v) for v in values]
    nans = [j for j, v in enumerate(values) if v != v]
    return nans[0] if nans else values.index(max(values) if largest else min(values))


def _arg_ref(axes, largest: bool):
    def ref(x):
        kept = [a for a in range(x.ndim) if a not in axes]
        rows = np.transpose(x, kept + list(axes)).reshape([x.shape[a] for a in kept] + [-1])
        return np.array([_first_extremum(r, largest) for r in rows.reshape(-1, rows.shape[-1])],
                        np.int64).reshape(rows.shape[:-1])
    return ref


def _digamma_ref(x, shift=30):
    # ψ(x) = ψ(x + N) - Σ_{k<N} 1/(x + k), with ψ(y) ≈ ln y - 1/(2y) - 1/(12y²) + 1/(120y⁴) - 1/(252y⁶) at y = x + N
    y = x + shift
    tail = math.log(y) - 1 / (2 * y) - 1 / (12 * y**2) + 1 / (120 * y**4) - 1 / (252 * y**6)
    return tail - sum(1 / (x + k) for k in range(shift))


# Two trees for tree_walk, as (feature, mode, NaN goes true, threshold, true, false) per state; a leaf is
# (None, its number). Tree 0: x0 <= 0.1 ? leaf 0 : (x1 < -0.2 (NaN: true) ? leaf 1 : leaf 2);
# tree 1: x2 != 0.3 ? leaf 3 : leaf 4.
TREE_STATES = [(0, 0, False, 0.1, 1, 2), (None, 0), (1, 1, True, -0.2, 3, 4), (None, 1), (None, 2),
               (2, 5, False, 0.3, 6, 7), (None, 3), (None, 4)]


def _tree_table(rng, shape):
    rows = []
    for st in TREE_STATES:
        if st[0] is None:
            rows.append([1 << 28, 0, st[1], 0])
        else:
            f, mode, nan_true, th, t, e = st
            bits = struct.unpack("<q", struct.pack("<d", th))[0]
            rows.append([f | (mode << 24) | (int(nan_true) << 27), bits, t, e])
    return np.broadcast_to(np.array(rows, dtype=np.int64).reshape(-1), shape).copy()


def _tree_ref(x, packed, roots):
    """The walks written out with Python comparisons."""
    out = np.zeros((x.shape[0], len(roots)), dtype=np.int64)
    for r in range(x.shape[0]):
        for t, root in enumerate(roots):
            st = TREE_STATES[root]
            while st[0] is not None:
                f, mode, nan_true, th, yes, no = st
                v = x[r, f]
                go = [v <= th, v < th, v >= th, v > th, v == th, v != th][mode] or (nan_true and math.isnan(v))
                st = TREE_STATES[yes if go else no]
            out[r, t] = st[1]
    return out


def _tree_rows(rng, shape):
    x = rng.standard_normal(shape)
    x[..., 0, 1], x[..., 1, 2] = math.nan, 0.3
    return x


def _scatter_ref(x, i, v):
    out = x.copy()
    for a in range(i.shape[0]):
        for c in range(i.shape[1]):
            out[:, i[a, c]] += v[:, a, c]
    return out


def _window_ref(stride, dilation, size=3):
    def ref(x):
        m = (x.shape[1] - dilation * (size - 1) - 1) // stride + 1
        return np.stack([x[:, o * stride:o * stride + dilation * (size - 1) + 1:dilation] for o in range(m)], axis=1)
    return ref


def _fold_ref(stride, dilation, n):
    def ref(y):
        out = np.zeros((y.shape[0], n))
        for o in range(y.shape[1]):
            for k in range(y.shape[2]):
                out[:, o * stride + k * dilation] += y[:, o, k]
        return out
    return ref


def _softmax_table(x_scale, n):
    """onnxruntime's QLinearSoftmax table of that scale for rows of n (ops/quant.py: softmax_table)."""
    from ksbuild.ops.quant import softmax_table
    return lambda rng, shape: np.broadcast_to(softmax_table(x_scale, n), shape).copy()


def _qsoftmax_ref(table, x, ratio, y_zero, lo, hi):
    """QLinearSoftmax in numpy, written apart from the prim's eval: each row's sum left to right in f32, the
    quotient in double."""
    out = np.empty(x.shape, x.dtype)
    for r in np.ndindex(*x.shape[:-1]):
        row = x[r].astype(np.int64)
        e = table[row - row.max() + 255].astype(np.float32)
        s = np.float32(0)
        for v in e:
            s = np.float32(s + v)
        q = np.minimum(e.astype(np.float64) * ratio / np.float64(s), hi - y_zero)
        out[r] = np.clip(np.rint(q) + y_zero, lo, hi)
    return out


_QSOFTMAX = {"ratio": 256.0, "y_zero": 0, "lo": 0, "hi": 255}
_QSOFTMAX_I8 = {"ratio": 200.0, "y_zero": -100, "lo": -128, "hi": 120}


def _scales(rng, shape):
    return rng.uniform(0.0005, 0.02, shape).astype(np.float32)


def _requant_ref(acc, bias, scale, y_zero, lo, hi, dtype):
    """qconv/qmatmul's requantization element by element (the channel: the last axis): the f32 product, Python's
    round (half to even), clamped."""
    out = np.empty(acc.shape, dtype)
    for idx in np.ndindex(*acc.shape):
        channel = idx[-1]
        s = scale[0] if scale.shape[0] == 1 else scale[channel]
        v = float(np.float32(acc[idx] + bias[channel]) * np.float32(s))
        out[idx] = min(max(round(v) + y_zero, lo), hi)
    return out


def _qconv_ref(strides, pads, dilations, groups, x_zero, y_zero, lo, hi, dtype):
    """qconv: the convolution of x - x_zero (zero outside x) with w in integers, then requantized per channel."""
    def ref(x, w, bias, scale):
        acc = np.rint(_conv_ref(strides, pads, dilations, groups)(x.astype(np.int64) - x_zero, w)).astype(np.int64)
        moved = np.moveaxis(acc, 1, -1)  # (channels last: _requant_ref's channel is the last axis)
        return np.moveaxis(_requant_ref(moved, bias, scale, y_zero, lo, hi, dtype), -1, 1)
    return ref


def _max_pool_ref(window, strides, pads, dilations):
    """max_pool written out: y[n, c, o] = max over taps t of x[n, c, o·s + t·d - lo] inside x."""
    def ref(x):
        k = x.ndim - 2
        outs = [(x.shape[2 + i] + pads[i] + pads[k + i] - dilations[i] * (window[i] - 1) - 1) // strides[i] + 1
                for i in range(k)]
        y = np.full(x.shape[:2] + tuple(outs), -np.inf)
        for idx in np.ndindex(*y.shape):
            for t in np.ndindex(*window):
                pos = [idx[2 + i] * strides[i] + t[i] * dilations[i] - pads[i] for i in range(k)]
                if all(0 <= pos[i] < x.shape[2 + i] for i in range(k)):
                    y[idx] = max(y[idx], x[idx[:2] + tuple(pos)])
        return y
    return ref


def _conv_ref(strides, pads, dilations, groups):
    """conv written out: y[n, m, o] = Σ_{c, t} x[n, g·C/G + c, o·s + t·d - lo] · w[m, c, t], zero outside x."""
    def ref(x, w):
        n, cin = x.shape[:2]
        m, cg = w.shape[:2]
        k = x.ndim - 2
        taps = w.shape[2:]
        outs = [(x.shape[2 + i] + pads[i] + pads[k + i] - dilations[i] * (taps[i] - 1) - 1) // strides[i] + 1
                for i in range(k)]
        y = np.zeros((n, m) + tuple(outs))
        for idx in np.ndindex(*y.shape):
            b, oc, o = idx[0], idx[1], idx[2:]
            g = oc // (m // groups)
            for c in range(cg):
                for t in np.ndindex(*taps):
                    pos = [o[i] * strides[i] + t[i] * dilations[i] - pads[i] for i in range(k)]
                    if all(0 <= pos[i] < x.shape[2 + i] for i in range(k)):
                        y[idx] += x[(b, g * cg + c) + tuple(pos)] * w[(oc, c) + t]
        return y
    return ref


def _conv_same_3x3(x, w):
    """A 3×3 convolution, stride 1, a pad of 1 each side: y[n, m] = Σ_{c,i,j} xpad[n, c, i:, j:] w[m, c, i, j]."""
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    h, v = x.shape[2:]
    return sum(np.einsum("nchw,mc->nmhw", xp[:, :, i:i + h, j:j + v], w[:, :, i, j])
               for i in range(3) for j in range(3))


def _bits_ref(op):
    def ref(x, y):
        return np.array([[op(int(a), int(c)) for a, c in zip(r, q)] for r, q in zip(x, y)])
    return ref


def _dense_sample():
    from ksbuild.ir.dense import Dense
    return Dense.of(np.arange(12, dtype=np.float64).reshape(3, 4) / 7)


def vec(fn):
    return np.vectorize(fn, otypes=[np.float64])


def _fn(name: str, types, body):
    """A sub-function of a control-flow sample: body(b, *params) -> its results."""
    from ksbuild.ir.builder import Builder
    from ksbuild.ir.core import Var
    b = Builder()
    ps = [Var(t, f"a{i}") for i, t in enumerate(types)]
    return b.func(name, ps, list(body(b, *ps)))


def _always(value):
    return lambda rng, shape: np.full(shape, value)


# cond's branches (one sample per branch taken), loop's body (k, xs, c) -> c * 0.5 + sin(xs[k]) · c over the
# trip count, call's callee x · exp(y) (inlined when transformed, and kept as a call)
_THEN = _fn("then", (V, V), lambda b, x, y: [b.mul(b.sin(x), y)])
_ELSE = _fn("else", (V, V), lambda b, x, y: [b.sub(b.mul(x, x), y)])
_BODY = _fn("body", (I, V, F), lambda b, k, xs, c: [b.add(b.mul(c, b.lit(0.5, F)),
                                                         b.mul(b.sin(b.index(xs, k, axis=0)), c))])
_CALLEE = _fn("helper", (V, V), lambda b, x, y: [b.mul(x, b.exp(y))])


def _long_chain(b, x, y):
    """200 steps of x · 0.97 + 0.1, times y: a callee large enough that vjp keeps it a call (fwd_long, bwd_long:
    call's partial_eval and transpose rules), with few residuals."""
    for _ in range(200):
        x = b.add(b.mul(x, b.lit(0.97, F)), b.lit(0.1, F))
    return [b.mul(x, y)]


def _long_ref(x, y):
    for _ in range(200):
        x = x * 0.97 + 0.1
    return x * y


_LONG = _fn("long", (V, V), _long_chain)
_THEN_LANE = _fn("then", (F, F), lambda b, x, y: [b.mul(b.sin(x), y)])  # (lane_cond's branches: one lane's scalars)
_ELSE_LANE = _fn("else", (F, F), lambda b, x, y: [b.sub(b.mul(x, x), y)])


# custom_jvp's rule and custom_vjp's fwd and bwd for x · exp(y) (the user's derivatives, written out): rule(x, y, dx,
# dy) -> (z, e·dx + z·dy); fwd(x, y) -> (z, residuals e = exp(y), z); bwd(e, z, ct) -> (ct·e, ct·z)
_RULE = _fn("rule", (V, V, V, V), lambda b, x, y, dx, dy: [
    z := b.mul(x, b.exp(y)), b.add(b.mul(b.exp(y), dx), b.mul(z, dy))])
_FWD = _fn("fwd", (V, V), lambda b, x, y: [b.mul(x, e := b.exp(y)), e, b.mul(x, e)])
_BWD = _fn("bwd", (V, V, V), lambda b, e, z, ct: [b.mul(ct, e), b.mul(ct, z)])
# custom_vjp_lin's backward rule with a bool residual p (a float residual would get a tangent in the sample tests,
# and a second derivative through a custom_vjp is an explicit error): bwd(p, ct) -> (p ? 2·ct : -ct, 3·ct), so the
# forward map is lin(p, dx, dy) = (p ? 2·dx : -dx) + 3·dy, linear in dx and dy
_BWD_LIN = _fn("bwd", (Type("bool", (4,)), V), lambda b, p, ct: [
    b.select(p, b.mul(ct, b.lit(2.0, F)), b.neg(ct)), b.mul(ct, b.lit(3.0, F))])


def _loop_ref(trip, xs, c):
    for k in range(int(trip)):
        c = c * 0.5 + math.sin(xs[k]) * c
    return c


_EXTERN = {"c_name": "ks_sample_extern", "name": "sample_extern", "file": str(HERE / "extern_sample.py"),
           "sources": (str(HERE / "extern_sample.c"),), "result": "f64"}  # (x * y + sin(x), in C and in Python)

# name: (types, params, samplers per input, reference)
SAMPLES = {
    "add": ((F, F), {}, (normal, normal), lambda x, y: x + y),
    "sub": ((F, F), {}, (normal, normal), lambda x, y: x - y),
    "mul": ((F, F), {}, (normal, normal), lambda x, y: x * y),
    "mulz": ((V, V), {}, (normal, normal), lambda x, y: x * y),  # (0 ⊙ inf = 0: tests/test_singular_ad.py)
    "mulzz": ((V, V), {}, (normal, normal), lambda x, y: x * y),  # (0 ⊙⊙ inf = inf ⊙⊙ 0 = 0: test_fuzz_regressions)
    "ctmul": ((F, F), {}, (normal, normal), lambda x, y: x * y),  # (its masked jvp: tests/test_fuzz_regressions.py)
    "div": ((F, F), {}, (normal, positive), lambda x, y: x / y),
    "neg": ((F,), {}, (normal,), lambda x: -x),
    "math:exp": ((F,), {"fn": "exp"}, (normal,), vec(math.exp)),
    "math:log": ((F,), {"fn": "log"}, (positive,), vec(math.log)),
    "math:log1p": ((F,), {"fn": "log1p"}, (positive,), vec(math.log1p)),
    "math:expm1": ((F,), {"fn": "expm1"}, (normal,), vec(math.expm1)),
    "math:sqrt": ((F,), {"fn": "sqrt"}, (positive,), vec(math.sqrt)),
    "math:tanh": ((F,), {"fn": "tanh"}, (normal,), vec(math.tanh)),
    "math:sin": ((F,), {"fn": "sin"}, (normal,), vec(math.sin)),
    "math:cos": ((F,), {"fn": "cos"}, (normal,), vec(math.cos)),
    "math:atan": ((F,), {"fn": "atan"}, (normal,), vec(math.atan)),
    "abs": ((F,), {}, (positive,), vec(abs)),
    "sign": ((F,), {}, (normal,), vec(lambda x: math.copysign(1.0, x) if x else 0.0)),
    "floor": ((F,), {}, (normal,), vec(math.floor)),
    "math:logistic": ((F,), {"fn": "logistic"}, (normal,), vec(lambda x: 1 / (1 + math.exp(-x)))),
    "ipow": ((F,), {"n": 3}, (normal,), lambda x: x * x * x),
    "ipow:one": ((V,), {"n": 1}, (normal,), lambda x: x.copy()),  # (its simplify rule: x^1 = x)
    "pow": ((F, F), {}, (positive, normal), vec(math.pow)),
    "atan2": ((F, F), {}, (normal, positive), vec(math.atan2)),
    "max": ((F, F), {}, (normal, normal), vec(max)),
    "min": ((F, F), {}, (normal, normal), vec(min)),
    "floordiv": ((F, F), {}, (normal, positive), vec(lambda x, y: float(x // y))),
    "floordiv:int": ((Type("i64", (4,)), Type("i64", (4,))), {}, (index_between(-20, 20),
                     lambda rng, shape: rng.choice([-3, -2, -1, 1, 2, 4], shape)), lambda x, y: x // y),
    "mod": ((F, F), {}, (normal, positive), vec(lambda x, y: x % y)),
    "compare:lt": ((F, F), {"op": "lt"}, (normal, normal), lambda x, y: x < y),
    "compare:le": ((F, F), {"op": "le"}, (normal, normal), lambda x, y: x <= y),
    "compare:gt": ((F, F), {"op": "gt"}, (normal, normal), lambda x, y: x > y),
    "compare:ge": ((F, F), {"op": "ge"}, (normal, normal), lambda x, y: x >= y),
    "compare:eq": ((F, F), {"op": "eq"}, (normal, normal), lambda x, y: x == y),
    "compare:ne": ((F, F), {"op": "ne"}, (normal, normal), lambda x, y: x != y),
    "logic:and": ((B, B), {"op": "and"}, (None, None), lambda x, y: x & y),
    "logic:or": ((B, B), {"op": "or"}, (None, None), lambda x, y: x | y),
    "logic:not": ((B,), {"op": "not"}, (None,), lambda x: ~x),
    "select": ((Type("bool", (4,)), V, V), {}, (both, normal, normal), lambda p, x, y: np.where(p, x, y)),
    "lane_owned": ((Type("bool", (3,)), M), {"then": False}, (both, normal), lambda p, x: x),
    "convert": ((F,), {"dtype": "f32"}, (normal,), lambda x: x.astype(np.float32)),
    "convert:same": ((V,), {"dtype": "f64"}, (normal,), lambda x: x.copy()),  # (its transpose, by the dot product)
    "broadcast_to": ((V,), {"shape": (3, 4)}, (normal,), lambda x: np.broadcast_to(x, (3, 4))),
    "reshape": ((M,), {"shape": (4, 3)}, (normal,), lambda x: x.reshape(4, 3)),
    # (keeping axis 0: the rows rule applies, test_rows_rule)
    "reshape:rows": ((Type("f64", (3, 4, 2)),), {"shape": (3, 8)}, (normal,), lambda x: x.reshape(3, 8)),
    "reduce_sum": ((M,), {"axes": (1,)}, (normal,), lambda x: x.sum(axis=1)),
    # (a reduction over trailing axes joins a loop nest; over others its own emit rule writes the loops: these)
    "reduce_sum:leading": ((M,), {"axes": (0,)}, (normal,), lambda x: x.sum(axis=0)),
    "reduce_sum:middle": ((Type("f64", (2, 9, 3)),), {"axes": (1,)}, (normal,), lambda x: x.sum(axis=1)),
    "transpose": ((M,), {"perm": (1, 0)}, (normal,), lambda x: x.T),
    "transpose:rows": ((Type("f64", (3, 4, 2)),), {"perm": (0, 2, 1)}, (normal,), lambda x: x.transpose(0, 2, 1)),
    "index": ((M, I), {"axis": 1}, (normal, index_below(4)), lambda x, i: x[:, i]),
    "index:clamped": ((M, I), {"axis": 0}, (normal, index_between(-5, 6)), lambda x, i: x[_wrap_clamp(i, 3)]),
    "index_add": ((M, I, Type("f64", (3,))), {"axis": 1}, (normal, index_below(4), normal), _index_add_ref),
    "index_add:element": ((M, I, I, F), {"axis": 0}, (normal, index_between(-5, 6), index_below(4), normal),
                          _element_add_ref),
    "index_set": ((M, I, Type("f64", (3,))), {"axis": 1}, (normal, index_below(4), normal), _index_set_ref),
    "slice": ((M,), {"axis": 1, "start": 1, "stop": 3}, (normal,), lambda x: x[:, 1:3]),
    "pad": ((M,), {"axis": 0, "lo": 1, "hi": 2}, (normal,), lambda x: np.concatenate([0 * x[:1], x, 0 * x[:2]])),
    "reduce_max": ((M,), {"axes": (1,)}, (normal,), lambda x: np.array([max(r) for r in x])),
    "reduce_max:leading": ((M,), {"axes": (0,)}, (normal,), lambda x: np.array([max(c) for c in x.T])),
    "reduce_min": ((M,), {"axes": (0, 1)}, (normal,), lambda x: np.array(min(x.ravel()))),
    "reduce_min:middle": ((Type("f64", (2, 9, 3)),), {"axes": (1,)}, (normal,), lambda x: x.min(axis=1)),
    # (over trailing axes in a loop nest: the first NaN, else the first extremum; over others its own loops)
    "reduce_argmin": ((M,), {"axes": (1,)}, (ties_nan,), _arg_ref((1,), False)),
    "reduce_argmin:leading": ((M,), {"axes": (0,)}, (ties_nan,), _arg_ref((0,), False)),
    "reduce_argmax": ((Type("f64", (2, 9, 3)),), {"axes": (1, 2)}, (ties_nan,), _arg_ref((1, 2), True)),
    "reduce_argmax:middle": ((Type("f64", (2, 9, 3)),), {"axes": (1,)}, (normal,), _arg_ref((1,), True)),
    "reduce_argmax:all": ((M,), {"axes": (0, 1)}, (normal,), _arg_ref((0, 1), True)),
    "stop_gradient": ((M,), {}, (normal,), lambda x: x),
    "einsum": ((M, Type("f64", (4, 2))), {"spec": "ij,jk->ik"}, (normal, normal), lambda x, y: x @ y),
    "einsum:dot": ((V, V), {"spec": "i,i->"}, (normal, normal), lambda x, y: np.array(sum(x * y))),
    "einsum:outer": ((V, Type("f64", (3,))), {"spec": "i,j->ij"}, (normal, normal), lambda x, y: x[:, None] * y),
    "einsum:batched": ((Type("f64", (2, 3, 4)), Type("f64", (2, 4))), {"spec": "kab,kb->ka"}, (normal, normal),
                       lambda q, x: np.stack([q[k] @ x[k] for k in range(2)])),
    "einsum:summed": ((M, V), {"spec": "ij,j->"}, (normal, normal), lambda x, y: np.array((x @ y).sum())),
    "cteinsum": ((M, Type("f64", (4, 2))), {"spec": "ij,jk->ik", "ct": 0}, (normal, normal), lambda x, y: x @ y),
    "cteinsum:tangent": ((V, M), {"spec": "j,ij->i", "ct": 1}, (normal, normal), lambda x, y: y @ x),
    "iota": ((), {"shape": (3, 4), "axis": 1, "dtype": "i64"}, (), lambda: np.tile(np.arange(4), (3, 1))),
    "dim_size": ((), {"dim": 7}, (), lambda: np.array(7)),
    "math:lgamma": ((V,), {"fn": "lgamma"}, (positive,), vec(math.lgamma)),
    "math:erf": ((V,), {"fn": "erf"}, (normal,), vec(math.erf)),
    "math:erfc": ((V,), {"fn": "erfc"}, (normal,), vec(math.erfc)),
    "fmod": ((V, V), {}, (normal, positive), lambda x, y: np.array([math.fmod(a, c) for a, c in zip(x, y)])),
    "hypot": ((V, V), {}, (normal, normal), vec(math.hypot)),
    "tree_walk": ((Type("f64", (6, 3)), Type("i64", (32,)), Type("i64", (2,))), {"depth": 2, "mode": -1, "nan": True},
                  (_tree_rows, _tree_table, lambda rng, shape: np.broadcast_to([0, 5], shape).copy()), _tree_ref),
    "gather": ((M, Type("i64", (2, 5))), {"axis": 1}, (normal, index_below(4)), lambda x, i: np.take(x, i, axis=1)),
    "gather:clamped": ((M, Type("i64", (5,))), {"axis": 0}, (normal, index_between(-5, 5)),
                       lambda x, i: x[[_wrap_clamp(k, 3) for k in i]]),
    # (a 1-D table: fusible, one element at the index's position in a loop nest; clamped as gather:clamped)
    "gather:table": ((V, Type("i64", (2, 5))), {"axis": 0}, (normal, index_between(-6, 6)),
                     lambda x, i: np.vectorize(lambda k: x[_wrap_clamp(k, 4)])(i)),
    "scatter_add": ((M, Type("i64", (2, 5)), Type("f64", (3, 2, 5))), {"axis": 1},
                    (normal, index_below(4), normal), _scatter_ref),
    "window": ((Type("f64", (3, 7)),), {"axis": 1, "size": 3, "stride": 2, "dilation": 1}, (normal,),
               _window_ref(2, 1)),
    "window:dilated": ((Type("f64", (3, 7)),), {"axis": 1, "size": 3, "stride": 1, "dilation": 2}, (normal,),
                       _window_ref(1, 2)),
    "fold": ((Type("f64", (3, 3, 3)),), {"axis": 1, "stride": 2, "dilation": 1, "n": 8}, (normal,), _fold_ref(2, 1, 8)),
    "fold:dilated": ((Type("f64", (3, 2, 3)),), {"axis": 1, "stride": 3, "dilation": 2, "n": 8}, (normal,),
                     _fold_ref(3, 2, 8)),
    "max_pool": ((Type("f64", (2, 3, 7, 6)),), {"window": (3, 2), "strides": (2, 1), "pads": (1, 0, 2, 1),
                                                "dilations": (1, 2)}, (normal,),
                 _max_pool_ref((3, 2), (2, 1), (1, 0, 2, 1), (1, 2))),
    "max_pool:1d": ((Type("f64", (2, 2, 9)),), {"window": (3,), "strides": (2,), "pads": (1, 2), "dilations": (1,)},
                    (normal,), _max_pool_ref((3,), (2,), (1, 2), (1,))),
    "conv": ((Type("f64", (2, 3, 5, 6)), Type("f64", (4, 3, 3, 2))),
             {"strides": (1, 2), "pads": (1, 0, 1, 1), "dilations": (1, 1), "groups": 1}, (normal, normal),
             _conv_ref((1, 2), (1, 0, 1, 1), (1, 1), 1)),
    "conv:grouped1d": ((Type("f64", (2, 4, 9)), Type("f64", (6, 2, 3))),
                       {"strides": (2,), "pads": (2, 1), "dilations": (2,), "groups": 2}, (normal, normal),
                       _conv_ref((2,), (2, 1), (2,), 2)),
    "conv:3d": ((Type("f64", (1, 2, 3, 4, 4)), Type("f64", (3, 2, 2, 2, 3))),
                {"strides": (1, 1, 1), "pads": (0, 1, 1, 1, 0, 1), "dilations": (1, 2, 1), "groups": 1},
                (normal, normal), _conv_ref((1, 1, 1), (0, 1, 1, 1, 0, 1), (1, 2, 1), 1)),
    # stride 1: the input gradient is a convolution with the flipped kernel (groups and a dilation here) ...
    "conv:grouped_stride1": ((Type("f64", (2, 4, 6, 5)), Type("f64", (6, 2, 3, 2))),
                             {"strides": (1, 1), "pads": (1, 0, 2, 1), "dilations": (2, 1), "groups": 2},
                             (normal, normal), _conv_ref((1, 1), (1, 0, 2, 1), (2, 1), 2)),
    # ... unless a pad is wider than the kernel's reach (then the overlap-add decomposition)
    # 3×3, stride 1, 32 × 64 channels: Winograd's F(2×2, 3×3) (prims/convolve.py: winograd_applies)
    "conv:winograd": ((Type("f64", (1, 32, 6, 6)), Type("f64", (64, 32, 3, 3))),
                      {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "groups": 1}, (normal, normal),
                      _conv_same_3x3),
    "conv:wide_pad": ((Type("f64", (1, 2, 4, 4)), Type("f64", (3, 2, 2, 2))),
                      {"strides": (1, 1), "pads": (2, 0, 0, 1), "dilations": (1, 1), "groups": 1},
                      (normal, normal), _conv_ref((1, 1), (2, 0, 0, 1), (1, 1), 1)),
    "qconv": ((Type("u8", (2, 4, 5, 6)), Type("i8", (6, 2, 3, 3)), Type("i32", (6,)), Type("f32", (6,))),
              {"strides": (1, 2), "pads": (1, 0, 1, 1), "dilations": (1, 1), "groups": 2, "x_zero": 7, "y_zero": 100,
               "lo": 100, "hi": 255, "out": "u8"},
              (index_below(256), index_between(-128, 128), index_between(-3000, 3000), _scales),
              _qconv_ref((1, 2), (1, 0, 1, 1), (1, 1), 2, 7, 100, 100, 255, np.uint8)),
    "qconv:int8_1d": ((Type("i8", (1, 3, 7)), Type("i8", (4, 3, 3)), Type("i32", (4,)), Type("f32", (1,))),
                      {"strides": (2,), "pads": (1, 1), "dilations": (1,), "groups": 1, "x_zero": -5, "y_zero": 3,
                       "lo": -128, "hi": 127, "out": "i8"},
                      (index_between(-128, 128), index_between(-128, 128), index_between(-3000, 3000), _scales),
                      _qconv_ref((2,), (1, 1), (1,), 1, -5, 3, -128, 127, np.int8)),
    "qmatmul": ((Type("u8", (3, 5, 8)), Type("i8", (8, 6)), Type("i32", (6,)), Type("f32", (6,))),
                {"x_zero": 12, "y_zero": 128, "lo": 0, "hi": 255, "out": "u8"},
                (index_below(256), index_between(-128, 128), index_between(-3000, 3000), _scales),
                lambda a, b, bias, scale: _requant_ref(np.einsum("...k,kn->...n", a.astype(np.int64) - 12, b), bias,
                                                       scale, 128, 0, 255, np.uint8)),
    "qlookup": ((Type("u8", (256,)), Type("u8", (3, 5))), {}, (index_below(256), index_below(256)),
                lambda table, x: table[x]),
    "qlookup:int8": ((Type("i8", (256,)), Type("i8", (2, 7))), {}, (index_between(-128, 128), index_between(-128, 128)),
                     lambda table, x: table[x.astype(np.int64) % 256]),
    "qsoftmax": ((Type("f32", (256,)), Type("u8", (3, 4, 9))), _QSOFTMAX, (_softmax_table(0.07, 9), index_below(256)),
                 lambda table, x: _qsoftmax_ref(table, x, **_QSOFTMAX)),
    "qsoftmax:int8": ((Type("f32", (256,)), Type("i8", (5, 6))), _QSOFTMAX_I8,
                      (_softmax_table(0.2, 6), index_between(-128, 128)),
                      lambda table, x: _qsoftmax_ref(table, x, **_QSOFTMAX_I8)),
    "bitwise:and": ((Type("i64", (3, 4)), Type("i64", (3, 4))), {"op": "and"}, (index_between(-50, 50),) * 2,
                    _bits_ref(lambda a, c: a & c)),
    "bitwise:xor": ((Type("i32", (3, 4)), Type("i32", (3, 4))), {"op": "xor"}, (index_between(-50, 50),) * 2,
                    _bits_ref(lambda a, c: a ^ c)),
    "bitwise:shl": ((Type("u8", (3, 4)), Type("u8", (3, 4))), {"op": "shl"}, (index_below(256), index_below(10)),
                    _bits_ref(lambda a, c: (a << c) & 255 if c < 8 else 0)),
    "bitwise:shr": ((Type("i64", (3, 4)), Type("i64", (3, 4))), {"op": "shr"}, (index_between(-99, 99),
                    index_below(70)), _bits_ref(lambda a, c: a >> min(c, 63))),
    "constant": ((), {"value": _dense_sample()}, (), lambda: np.arange(12).reshape(3, 4) / 7),
    "bitcast": ((Type("i64", (3, 4)),), {"dtype": "f64"}, (index_between(0, 2**40),),
                lambda x: np.array([[struct.unpack("<d", struct.pack("<q", int(v)))[0] for v in r] for r in x])),
    "cond:then": ((B, V, V), {"then_fn": _THEN, "else_fn": _ELSE}, (_always(True), normal, normal),
                  lambda p, x, y: np.sin(x) * y),
    "cond:else": ((B, V, V), {"then_fn": _THEN, "else_fn": _ELSE}, (_always(False), normal, normal),
                  lambda p, x, y: x * x - y),
    "loop": ((I, V, F), {"body": _BODY, "n_consts": 1, "n_carry": 1, "length": None, "reverse": False},
             (_always(3), normal, normal), _loop_ref),
    "cond_select:then": ((B, V, V), {"then_fn": _THEN, "else_fn": _ELSE}, (_always(True), normal, normal),
                         lambda p, x, y: np.sin(x) * y),
    "cond_select:else": ((B, V, V), {"then_fn": _THEN, "else_fn": _ELSE}, (_always(False), normal, normal),
                         lambda p, x, y: x * x - y),
    "lane_cond": ((Type("bool", (4,)), V, V), {"then_fn": _THEN_LANE, "else_fn": _ELSE_LANE, "lanes": (True, True)},
                  (both, normal, normal), lambda p, x, y: np.where(p, np.sin(x) * y, x * x - y)),
    "call": ((V, V), {"fn": _CALLEE}, (normal, normal), lambda x, y: x * np.exp(y)),
    "call:kept": ((V, V), {"fn": _CALLEE, "kept": True}, (normal, normal), lambda x, y: x * np.exp(y)),
    "call:long": ((V, V), {"fn": _LONG, "kept": True}, (normal, normal), _long_ref),
    "math:digamma": ((V,), {"fn": "digamma"}, (positive,), vec(_digamma_ref)),
    "custom_jvp": ((V, V), {"fn": _CALLEE, "rule": _RULE}, (normal, normal), lambda x, y: x * np.exp(y)),
    "custom_vjp": ((V, V), {"fn": _CALLEE, "fwd": _FWD, "bwd": _BWD}, (normal, normal), lambda x, y: x * np.exp(y)),
    "extern_call": ((V, V), _EXTERN, (normal, normal), lambda x, y: x * y + np.sin(x)),
    "custom_vjp_lin": ((Type("bool", (4,)), V, V), {"bwd": _BWD_LIN, "n_res": 1}, (both, normal, normal),
                       lambda p, dx, dy: np.where(p, 2 * dx, -dx) + 3 * dy),
}

def _at(b, xs, i):
    return b.index(xs, i, axis=0)


# prim: (b, k, xs) -> a float scalar of a loop body made by the prim from the counter k and the loop constant xs
# (f64[4]) through prims that are all recomputed: the residual r of `c = c + r * r`, which a reverse loop recomputes
# instead of stacking one per iteration when each prim's record says `loop_remat` (test_reverse_loop_recomputes)
LOOP_RESIDUALS = {
    "index": lambda b, k, xs: _at(b, xs, k),
    "slice": lambda b, k, xs: _at(b, b.slice(xs, axis=0, start=1, stop=3), k),
    "reshape": lambda b, k, xs: _at(b, _at(b, b.reshape(xs, shape=(2, 2)), k), k),
    "dim_size": lambda b, k, xs: _at(b, xs, b.sub(b.dim_size(dim=7), k)),
    "add": lambda b, k, xs: _at(b, xs, b.add(k, b.lit(1, I))),
    "sub": lambda b, k, xs: _at(b, xs, b.sub(k, b.lit(1, I))),
    "mul": lambda b, k, xs: _at(b, xs, b.mul(k, b.lit(2, I))),
    "neg": lambda b, k, xs: _at(b, xs, b.neg(k)),
    "floordiv": lambda b, k, xs: _at(b, xs, b.floordiv(k, b.lit(2, I))),
    "max": lambda b, k, xs: _at(b, xs, b.max(k, b.lit(1, I))),
    "min": lambda b, k, xs: _at(b, xs, b.min(k, b.lit(2, I))),
    "convert": lambda b, k, xs: b.mul(b.convert(k, dtype="f64"), _at(b, xs, k)),
}

# arguments a prim's batching rule refuses to batch (an explicit opt-out, tested to raise)
UNBATCHED: dict[str, tuple[int, ...]] = {"tree_walk": (1, 2),  # (a forest's tables are constants)
                                          # (int8 weights are constants)
                                          "qconv": (1, 2, 3), "qconv:int8_1d": (1, 2, 3),
                                          "qmatmul": (1, 2, 3),
                                          "qlookup": (0,), "qlookup:int8": (0,),  # (its table is a constant)
                                          "qsoftmax": (0,), "qsoftmax:int8": (0,),
                                          "loop": (0,)}  # (a trip count batched is a lane_cond's job)


def prim_name(key: str) -> str:
    """The primitive a sample exercises ('einsum:dot' -> 'einsum')."""
    return key.split(":")[0]

# prims that carry functions: cond, cond_select, lane_cond, loop, call, custom_jvp and custom_vjp have samples above
# (each branch of an if taken, a per-lane if, a loop, a call inlined and kept, the user's derivative rules; kernels
# using them: tests/test_custom_derivatives.py): test_prims runs their rules, test_prims_compiled their C++. Listed
# here, the transpose test leaves these out (their samples are not linear; custom_vjp_lin's is, and is tested).
STRUCTURED = {"cond", "cond_select", "lane_cond", "loop", "call", "custom_jvp", "custom_vjp"}
# made only by the codegen passes (no AD or batching rules); tests/test_passes.py checks them
LOWERING = {"fusion", "contract", "convolve", "winograd_kernel", "qpack", "join"}
