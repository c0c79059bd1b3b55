"""ATen-specific decompositions: the ops whose torch definition differs from the shared ones
(relu's and leaky_relu's gradient at 0, elu's scales, softplus's threshold, var's correction),
adaptive pooling, and torch's recurrent layers (gate order, layer stacking) over `ops/rnn.py`.
Formulas are torch's (torch/_refs, torch/_decomp/decompositions.py, the nn module docs)."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..ir.core import Atom, Lit
from ..ir.types import Dim, Type
from . import activations
from ._util import error, numel, scalar_lit, size_as


def _c(x: Atom, v: float) -> Lit:
    return scalar_lit(v, x.type.dtype)


def relu(b, x: Atom) -> Atom:
    """torch.relu: ops.math.relu (derivative 0 at 0, NaN kept)."""
    from . import math as m
    return m.relu(b, x)


def leaky_relu(b, x: Atom, slope: float) -> Atom:
    """x if x > 0 else slope·x (activations.leaky_relu)."""
    return activations.leaky_relu(b, x, slope)


def elu(b, x: Atom, alpha: float, scale: float = 1.0, input_scale: float = 1.0) -> Atom:
    """scale·alpha·(e^(input_scale·x) - 1) if x <= 0 else scale·x (a NaN stays NaN: activations.elu)."""
    neg = b.mul(_c(x, scale * alpha), activations.elu_below(b, x, input_scale))
    return b.select(b.le(x, _c(x, 0)), neg, b.mul(x, _c(x, scale)) if scale != 1 else x)


def softplus(b, x: Atom, beta: float, threshold: float) -> Atom:
    """x where beta·x > threshold, else log(1 + e^(beta·x)) / beta (computed without overflow)."""
    from .activations import softplus as plain
    bx = b.mul(x, _c(x, beta)) if beta != 1 else x
    soft = plain(b, bx)
    soft = b.div(soft, _c(x, beta)) if beta != 1 else soft
    return b.select(b.gt(bx, _c(x, threshold)), x, soft)


def log_base(b, x: Atom, base: float) -> Atom:
    """log(x) / log(base)."""
    return b.mul(b.log(x), _c(x, 1 / math.log(base)))


def numel_of(x: Atom) -> Dim:
    """The number of elements of x (a dim)."""
    return numel(x.type.shape)


def var(b, x: Atom, axes: Sequence[int], correction: float, keepdim: bool) -> tuple[Atom, Atom]:
    """(Σ (x - mean)² / (N - correction), mean) over axes, N the number of reduced elements."""
    from .reduce import mean, sum
    mu = mean(b, x, axes, keepdim=True)
    sq = b.ipow(b.sub(x, mu), n=2)
    count = size_as(b, [x.type.shape[a] for a in axes], x.type.dtype)
    denom = b.sub(count, _c(x, correction)) if correction else count
    v = b.div(sum(b, sq, axes, keepdim), denom)
    return v, mu if keepdim else b.reshape(mu, shape=v.type.shape)


def vector_norm(b, x: Atom, p: float, axes: Sequence[int], keepdim: bool) -> Atom:
    """(Σ |x|^p)^(1/p) over axes; max |x| for p = inf, min |x| for -inf, the count of non-zeros for 0."""
    from .reduce import amax, amin, sum
    if math.isinf(p):
        return (amax if p > 0 else amin)(b, b.abs(x), axes, keepdim)
    if p == 0:
        return sum(b, b.convert(b.ne(x, _c(x, 0)), dtype=x.type.dtype), axes, keepdim)
    if p == 1:
        return sum(b, b.abs(x), axes, keepdim)
    from .math import norm_root
    if p == 2:
        return norm_root(b, sum(b, b.ipow(x, n=2), axes, keepdim))
    return norm_root(b, sum(b, b.pow(b.abs(x), _c(x, p)), axes, keepdim), p)


def any_all(b, x: Atom, axes: Sequence[int], keepdim: bool, is_any: bool) -> Atom:
    """Whether any (or all) of x along axes is true."""
    from .reduce import amax, amin
    ints = b.convert(x, dtype="i32")
    r = (amax if is_any else amin)(b, ints, axes, keepdim)
    return b.ne(r, Lit(0, Type("i32")))


def adaptive_avg_pool(b, x: Atom, out_sizes: Sequence[int]) -> Atom:
    """torch's adaptive average pooling: output o of an axis of n averages inputs
    floor(o·n/k) .. ceil((o+1)·n/k) - 1 (k outputs); one contraction with an averaging matrix per axis."""
    from ..ir.types import numpy_dtype
    from .create import array
    first = x.type.rank - len(out_sizes)
    for i, k in enumerate(out_sizes):
        axis = first + i
        n = x.type.shape[axis]
        if not isinstance(n, int):
            raise error(b, "adaptive pooling needs static spatial sizes")
        weights = np.zeros((k, n))
        for o in range(k):
            start, end = (o * n) // k, -(-((o + 1) * n) // k)
            weights[o, start:end] = 1.0 / (end - start)
        letters = "abcdefgh"[:x.type.rank]
        out = letters[:axis] + "z" + letters[axis + 1:]
        w = array(b, weights.astype(numpy_dtype(x.type.dtype)))
        x = b.einsum(x, w, spec=f"{letters},z{letters[axis]}->{out}")
    return x


# ---- recurrent layers ------------------------------------------------------------------------------------

GATES = {"gru": (1, 0, 2), "lstm": (0, 3, 1, 2), "rnn_tanh": (0,), "rnn_relu": (0,)}
"""torch's gate blocks in ONNX's order: GRU (r, z, n) -> (z, r, n); LSTM (i, f, g, o) -> (i, o, f, g)."""
ACTIVATIONS = {"gru": ("Sigmoid", "Tanh"), "lstm": ("Sigmoid", "Tanh", "Tanh"), "rnn_tanh": ("Tanh",),
               "rnn_relu": ("Relu",)}


def _reorder(b, w: Atom, kind: str) -> Atom:
    """A torch weight or bias [gates·H, ...] with its gate blocks in ONNX's order."""
    from .shape import concatenate
    order = GATES[kind]
    if order == tuple(range(len(order))):
        return w
    h = w.type.shape[0] // len(order)
    return concatenate(b, [b.slice(w, axis=0, start=g * h, stop=(g + 1) * h) for g in order], 0)


def _layer_weights(b, kind: str, params: Sequence[Atom], has_biases: bool) -> tuple[Atom, Atom, Atom | None]:
    """W [dirs, G·H, in], R [dirs, G·H, H] and the bias [dirs, 2·G·H] of one layer (ONNX layout)."""
    from .shape import concatenate, stack
    per = 4 if has_biases else 2
    dirs = len(params) // per
    groups = [params[d * per:(d + 1) * per] for d in range(dirs)]
    w = stack(b, [_reorder(b, p[0], kind) for p in groups], 0)
    r = stack(b, [_reorder(b, p[1], kind) for p in groups], 0)
    if not has_biases:
        return w, r, None
    bias = stack(b, [concatenate(b, [_reorder(b, p[2], kind), _reorder(b, p[3], kind)], 0) for p in groups], 0)
    return w, r, bias


def _known_layer_weights(b, kind: str, params: Sequence[np.ndarray], has_biases: bool) -> tuple[Atom, ...]:
    """_layer_weights of embedded weights, reordered now: W, R and the bias are constants (as an ONNX
    model's initializers are), which a matrix product reads prepacked, not gate blocks joined at run time."""
    from .create import array
    order = GATES[kind]

    def onnx_order(a: np.ndarray) -> np.ndarray:
        h = a.shape[0] // len(order)
        return np.concatenate([a[g * h:(g + 1) * h] for g in order], 0)

    per = 4 if has_biases else 2
    groups = [params[d:d + per] for d in range(0, len(params), per)]
    w = array(b, np.stack([onnx_order(p[0]) for p in groups]))
    r = array(b, np.stack([onnx_order(p[1]) for p in groups]))
    if not has_biases:
        return w, r, None
    return w, r, array(b, np.stack([np.concatenate([onnx_order(p[2]), onnx_order(p[3])]) for p in groups]))


def recurrent(b, kind: str, x: Atom, hx: Sequence[Atom], params: Sequence[Atom], has_biases: bool,
              num_layers: int, bidirectional: bool, batch_first: bool,
              known: Sequence[np.ndarray] | None = None) -> list[Atom]:
    """torch's RNN / GRU / LSTM (aten.<kind>.input): [output, h_n] (+ [c_n] for LSTM), torch layouts.
    `known`: the params' values when they are all embedded weights (their gates are reordered here)."""
    from . import rnn
    from .shape import concatenate, permute
    dirs = 2 if bidirectional else 1
    per_layer = dirs * (4 if has_biases else 2)
    if len(params) != num_layers * per_layer:
        raise error(b, f"{kind}: {len(params)} weights for {num_layers} layer(s) of {dirs} direction(s)")
    if batch_first:
        x = permute(b, x, (1, 0, 2))
    hidden = params[1].type.shape[1]
    acts = [rnn.activation(b, a, None, None) for a in ACTIVATIONS[kind]] * dirs
    onnx_kind = {"gru": "gru", "lstm": "lstm"}.get(kind, "rnn")
    finals: list[list[Atom]] = [[] for _ in hx]
    for layer in range(num_layers):
        mine = slice(layer * per_layer, (layer + 1) * per_layer)
        w, r, bias = _layer_weights(b, kind, params[mine], has_biases) if known is None else \
            _known_layer_weights(b, kind, known[mine], has_biases)
        init = [b.slice(h, axis=0, start=layer * dirs, stop=(layer + 1) * dirs) for h in hx]
        outs = rnn.run_layer(b, onnx_kind, x, w, r, bias, init + [None] * (2 - len(init)), None, hidden,
                             "bidirectional" if bidirectional else "forward", acts, None, None, kind == "gru")
        y = permute(b, outs[0], (0, 2, 1, 3))  # [seq, dirs, batch, H] -> [seq, batch, dirs, H]
        x = b.reshape(y, shape=y.type.shape[:2] + (dirs * hidden,))
        for k, state in enumerate(outs[1:1 + len(hx)]):
            finals[k].append(state)
    out = permute(b, x, (1, 0, 2)) if batch_first else x
    return [out] + [concatenate(b, parts, 0) for parts in finals]
