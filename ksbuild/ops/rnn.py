"""Recurrent layers (ONNX RNN, GRU, LSTM; torch.nn exports them as these) as `loop`s.

The input projection of every time step is one contraction before the loop; the loop body is
the cell: the recurrent projection, the gates, the new state. A reverse direction is the
same loop run backwards (its outputs stay in time order); a bidirectional layer runs both.
Layouts are ONNX's layout 0: x [seq, batch, input], weights [dirs, gates*hidden, ...],
outputs y [seq, dirs, batch, hidden] and the final states [dirs, batch, hidden].
Sequence lengths, when given, mask the steps past each batch entry's length: its state
stops changing and its outputs are zero.

`Products` replaces the two float products (onnxruntime's DynamicQuantizeLSTM: integer products of the input and
of each step's hidden state quantized at run time, frontends/onnx/ops_rnn.py); then the weights w and r are what
its functions read (per direction), and an LSTM's bias is added after the two products, as onnxruntime adds it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from ..ir.core import Atom, Lit, Var
from ..ir.types import Dim, Type, numel
from ._util import error, scalar_lit

Act = Callable[[object, Atom], Atom]


def activation(b, name: str, alpha: float | None, beta: float | None) -> Act:
    """An ONNX RNN activation by name (alpha and beta as the ONNX spec defines them)."""
    from . import activations as act

    def c(x, v):
        return scalar_lit(v, x.type.dtype)

    table = {
        "Sigmoid": lambda bb, x: bb.logistic(x),
        "Tanh": lambda bb, x: bb.tanh(x),
        "Relu": lambda bb, x: bb.max(x, c(x, 0)),
        "Affine": lambda bb, x: bb.add(bb.mul(x, c(x, alpha)), c(x, beta)),
        "LeakyRelu": lambda bb, x: act.leaky_relu(bb, x, alpha),
        "ThresholdedRelu": lambda bb, x: act.thresholded_relu(bb, x, alpha),
        "ScaledTanh": lambda bb, x: bb.mul(c(x, alpha), bb.tanh(bb.mul(x, c(x, beta)))),
        "HardSigmoid": lambda bb, x: act.hard_sigmoid(bb, x, alpha, beta),
        "Elu": lambda bb, x: act.elu(bb, x, alpha),
        "Softsign": lambda bb, x: act.softsign(bb, x),
        "Softplus": lambda bb, x: act.softplus(bb, x),
    }
    if name not in table:
        raise error(b, f"unknown RNN activation '{name}'")
    return table[name]


@dataclass(frozen=True)
class Products:
    """The products of a layer other than x·Wᵀ and h·Rᵀ in float: `input(b, rows, w, d)` -> [rows, gates·hidden]
    of the input rows [rows, input] and direction d's w; `recurrent(b, h, r, d)` -> [batch, gates·hidden] of the
    state h [batch, hidden] and direction d's r (inside the step: r is the loop's constant)."""

    input: Callable
    recurrent: Callable


def _direction(b, w: Atom, d: int) -> Atom:
    """Direction d of a per-direction tensor [dirs, ...]."""
    return b.index(w, Lit(d, Type("i64")), axis=0)


def _clip(b, x: Atom, clip: float | None) -> Atom:
    if clip is None:
        return x
    return b.max(b.min(x, scalar_lit(clip, x.type.dtype)), scalar_lit(-clip, x.type.dtype))


def _gate(b, z: Atom, k: int, hidden: Dim) -> Atom:
    """Gate k of a [batch, gates*hidden] pre-activation."""
    return b.slice(z, axis=1, start=k * hidden, stop=(k + 1) * hidden)


def run_layer(b, kind: str, x: Atom, w: Atom, r: Atom, bias: Atom | None, init: Sequence[Atom | None],
              extra: Atom | None, hidden: int, direction: str, acts: Sequence[Act], clip: float | None,
              lens: Atom | None, flag: bool, products: Products | None = None) -> list[Atom]:
    """One RNN/GRU/LSTM layer: [y, y_h] (+ [y_c] for LSTM) in ONNX layout 0.

    `extra` is the LSTM peephole vector P; `flag` is LSTM's input_forget or GRU's linear_before_reset; `products`
    (an LSTM's) computes the input and recurrent products from w and r instead of the float einsums."""
    from .shape import concatenate
    dirs = ["forward", "reverse"] if direction == "bidirectional" else [direction]
    n_gates = {"rnn": 1, "gru": 3, "lstm": 4}[kind]
    per_dir = len(acts) // len(dirs)
    results = []
    for d, way in enumerate(dirs):
        fs = acts[d * per_dir:(d + 1) * per_dir]
        cell = Cell(kind, hidden, n_gates, fs, clip, flag, products, d)
        results.append(_one_direction(b, cell, x, _direction(b, w, d), _direction(b, r, d),
                                      _direction(b, bias, d) if bias is not None else None,
                                      [_direction(b, s, d) if s is not None else None for s in init],
                                      _direction(b, extra, d) if extra is not None else None, way == "reverse", lens))
    outs = []
    for k in range(len(results[0])):
        parts = [b.reshape(res[k], shape=res[k].type.shape[:1] + (1,) + res[k].type.shape[1:]) if k == 0 else
                 b.reshape(res[k], shape=(1,) + res[k].type.shape) for res in results]
        outs.append(concatenate(b, parts, 1 if k == 0 else 0))
    return outs


class Cell:
    """The step function of one direction: (pre-activation of the input, state) -> new state."""

    def __init__(self, kind: str, hidden: int, n_gates: int, acts: Sequence[Act], clip, flag: bool,
                 products: Products | None = None, direction: int = 0):
        self.kind, self.hidden, self.n_gates, self.acts, self.clip, self.flag = kind, hidden, n_gates, acts, clip, flag
        self.products, self.direction = products, direction

    def step(self, b, xw: Atom, state: list[Atom], r: Atom, rb: Atom | None, p: Atom | None) -> list[Atom]:
        h = state[0]
        if self.products is not None:
            hr = self.products.recurrent(b, h, r, self.direction)
        else:
            hr = b.einsum(h, r, spec="bh,gh->bg")
        if self.kind == "rnn":
            return [self.acts[0](b, _clip(b, b.add(b.add(xw, hr), rb) if rb is not None else b.add(xw, hr),
                                          self.clip))]
        if self.kind == "gru":
            return [self._gru(b, xw, h, hr, r, rb)]
        return self._lstm(b, xw, h, state[1], hr, rb, p)

    def _gru(self, b, xw, h, hr, r, rb):
        f, g = self.acts[0], self.acts[1]
        H = self.hidden
        if rb is not None:
            hr = b.add(hr, rb)
        z = f(b, _clip(b, b.add(_gate(b, xw, 0, H), _gate(b, hr, 0, H)), self.clip))
        rr = f(b, _clip(b, b.add(_gate(b, xw, 1, H), _gate(b, hr, 1, H)), self.clip))
        if self.flag:  # linear_before_reset: r ⊙ (h Rhᵀ + Rbh)
            cand = b.add(_gate(b, xw, 2, H), b.mul(rr, _gate(b, hr, 2, H)))
        else:  # (r ⊙ h) Rhᵀ + Rbh
            rh = b.slice(r, axis=0, start=2 * H, stop=3 * H)
            cand = b.add(_gate(b, xw, 2, H), b.einsum(b.mul(rr, h), rh, spec="bh,gh->bg"))
            if rb is not None:
                cand = b.add(cand, b.slice(rb, axis=0, start=2 * H, stop=3 * H))
        hc = g(b, _clip(b, cand, self.clip))
        one = scalar_lit(1, h.type.dtype)
        return b.add(b.mul(b.sub(one, z), hc), b.mul(z, h))

    def _lstm(self, b, xw, h, c, hr, rb, p):
        f, g, hf = self.acts[0], self.acts[1], self.acts[2]
        H = self.hidden
        if rb is not None and self.products is None:  # (_one_direction: the bias before h·R, as before the loop)
            z = b.add(b.add(xw, rb), hr)
        else:
            z = b.add(xw, hr) if rb is None else b.add(b.add(xw, hr), rb)
        peep = [b.slice(p, axis=0, start=k * H, stop=(k + 1) * H) for k in range(3)] if p is not None else None
        pre_i, pre_o, pre_f, pre_c = (_gate(b, z, k, H) for k in range(4))
        if peep:
            pre_i, pre_f = b.add(pre_i, b.mul(peep[0], c)), b.add(pre_f, b.mul(peep[2], c))
        i = f(b, _clip(b, pre_i, self.clip))
        fg = b.sub(scalar_lit(1, c.type.dtype), i) if self.flag else f(b, _clip(b, pre_f, self.clip))
        cc = g(b, _clip(b, pre_c, self.clip))
        c_new = b.add(b.mul(fg, c), b.mul(i, cc))
        if peep:
            pre_o = b.add(pre_o, b.mul(peep[1], c_new))
        o = f(b, _clip(b, pre_o, self.clip))
        return [b.mul(o, hf(b, c_new)), c_new]


def _one_direction(b, cell: Cell, x: Atom, w: Atom, r: Atom, bias: Atom | None, init, p, reverse: bool,
                   lens: Atom | None) -> list[Atom]:
    from ..prims.control import PRIMS_LOOP, wrap
    seq, batch = x.type.shape[0], x.type.shape[1]
    gh = cell.n_gates * cell.hidden
    # the input's part of every step at once: one matrix product of the (time · batch) rows
    rows = b.reshape(x, shape=(numel((seq, batch)), x.type.shape[2]))
    if cell.products is not None:
        xw = b.reshape(cell.products.input(b, rows, w, cell.direction), shape=(seq, batch, gh))
    else:
        xw = b.reshape(b.einsum(rows, w, spec="ri,gi->rg"), shape=(seq, batch, gh))
    rb = None
    if bias is not None:
        wb = b.slice(bias, axis=0, start=0, stop=gh)
        rb = b.slice(bias, axis=0, start=gh, stop=2 * gh)
        if cell.kind == "gru":  # the reset gate multiplies (part of) the recurrent term, Rbh included or not
            xw = b.add(xw, wb)
        elif cell.products is not None:  # (x·W + h·R) + (Wb + Rb) in each step, as onnxruntime adds them
            rb = b.add(wb, rb)
        elif cell.kind == "lstm":  # (x·W + (Wb + Rb)) + h·R in each step: the same sums as adding the bias to all
            rb = b.add(wb, rb)     # steps' x·W first, without that pass over them (one pass per step copies x·W)
        else:
            xw = b.add(xw, b.add(wb, rb))
            rb = None
    n_state = 2 if cell.kind == "lstm" else 1
    st_t = Type(x.type.dtype, (batch, cell.hidden))
    state0 = [s if s is not None else Lit(0.0, st_t) for s in (list(init) + [None] * n_state)[:n_state]]
    consts = [r] + ([rb] if rb is not None else []) + ([p] if p is not None else []) + \
        ([lens] if lens is not None else [])

    def body(bb, ps):
        k, cs = ps[0], ps[1:1 + len(consts)]
        state = list(ps[1 + len(consts):1 + len(consts) + n_state])
        xk = ps[-1]
        rr = cs[0]
        rbb = cs[1] if rb is not None else None
        pp = cs[1 + (rb is not None)] if p is not None else None
        new = cell.step(bb, xk, state, rr, rbb, pp)
        y = new[0]
        if lens is not None:
            live = bb.reshape(bb.lt(k, cs[-1]), shape=(batch, 1))
            new = [bb.select(live, nv, ov) for nv, ov in zip(new, state)]
            y = bb.select(live, y, scalar_lit(0, y.type.dtype))
        return new + [y]

    types = [Type("i64")] + [a.type for a in consts] + [s.type for s in state0] + \
        [Type(xw.type.dtype, xw.type.shape[1:])]
    f = wrap(f"{cell.kind}_step", types, body)
    trip = Lit(seq, Type("i64")) if isinstance(seq, int) else b.dim_size(dim=seq)
    state0 = [s if isinstance(s, Var) or s.type.shape == st_t.shape else b.broadcast_to(s, shape=st_t.shape)
              for s in state0]
    outs = b.bind(PRIMS_LOOP, [trip, *consts, *state0, xw],
                  dict(body=f, n_consts=len(consts), n_carry=n_state, length=seq, reverse=reverse))
    final, y = list(outs[:n_state]), outs[n_state]
    return [y] + final
