"""ONNX training ops (domain ai.onnx.preview.training): Adagrad, Momentum, Adam updates."""
from __future__ import annotations

from ...ir.core import Lit
from ...ir.types import Type
from ...ops._util import scalar_lit
from .graph import handler
from .node import Node


def _groups(n: Node, count: int):
    """The inputs after R and T split into `count` equal lists (X..., G..., and the states)."""
    rest = [n.x(i) for i in range(2, n.n_in)]
    k = len(rest) // count
    return [rest[i * k:(i + 1) * k] for i in range(count)]


def _t_positive(n: Node):
    t = n.x(1)
    t = n.b.reshape(t, shape=()) if t.type.rank else t
    return t, n.b.gt(t, Lit(0, Type(t.type.dtype)))


@handler("Adagrad")
def adagrad(n: Node):
    b = n.b
    decay, eps, norm = n.attr("decay_factor", 0.0), n.attr("epsilon", 0.0), n.attr("norm_coefficient", 0.0)
    xs, gs, hs = _groups(n, 3)
    r, (t, _) = n.x(0), _t_positive(n)
    r = b.reshape(r, shape=()) if r.type.rank else r
    dt = xs[0].type.dtype
    k = lambda v: scalar_lit(v, dt)  # noqa: E731
    rate = b.div(r, b.add(k(1), b.mul(b.convert(t, dtype=dt), k(decay))))
    new_x, new_h = [], []
    for x, g, h in zip(xs, gs, hs):
        g = b.add(b.mul(k(norm), x), g)
        h2 = b.add(h, b.mul(g, g))
        new_x.append(b.sub(x, b.div(b.mul(rate, g), b.add(b.sqrt(h2), k(eps)))))
        new_h.append(h2)
    return new_x + new_h


@handler("Momentum")
def momentum(n: Node):
    b = n.b
    alpha, beta = n.attr("alpha"), n.attr("beta")
    mode = n.attr_in("mode", ("standard", "nesterov"))
    norm = n.attr("norm_coefficient")
    xs, gs, vs = _groups(n, 3)
    r, (_, positive) = n.x(0), _t_positive(n)
    r = b.reshape(r, shape=()) if r.type.rank else r
    dt = xs[0].type.dtype
    k = lambda v: scalar_lit(v, dt)  # noqa: E731
    beta_t = b.select(positive, k(beta), k(1))  # the first step takes the whole gradient
    new_x, new_v = [], []
    for x, g, v in zip(xs, gs, vs):
        g = b.add(b.mul(k(norm), x), g)
        v2 = b.add(b.mul(k(alpha), v), b.mul(beta_t, g))
        step = v2 if mode == "standard" else b.add(g, b.mul(k(alpha), v2))
        new_x.append(b.sub(x, b.mul(r, step)))
        new_v.append(v2)
    return new_x + new_v


@handler("Adam")
def adam(n: Node):
    b = n.b
    alpha, beta = n.attr("alpha", 0.9), n.attr("beta", 0.999)
    eps, norm, post = n.attr("epsilon", 1e-6), n.attr("norm_coefficient", 0.0), n.attr("norm_coefficient_post", 0.0)
    xs, gs, vs, hs = _groups(n, 4)
    r, (t, positive) = n.x(0), _t_positive(n)
    r = b.reshape(r, shape=()) if r.type.rank else r
    dt = xs[0].type.dtype
    k = lambda v: scalar_lit(v, dt)  # noqa: E731
    tf = b.convert(t, dtype=dt)
    corrected = b.div(b.mul(r, b.sqrt(b.sub(k(1), b.pow(k(beta), tf)))), b.sub(k(1), b.pow(k(alpha), tf)))
    rate = b.select(positive, corrected, r)
    new_x, new_v, new_h = [], [], []
    for x, g, v, h in zip(xs, gs, vs, hs):
        g = b.add(b.mul(k(norm), x), g)
        v2 = b.add(b.mul(k(alpha), v), b.mul(k(1 - alpha), g))
        h2 = b.add(b.mul(k(beta), h), b.mul(k(1 - beta), b.mul(g, g)))
        x2 = b.sub(x, b.div(b.mul(rate, v2), b.add(b.sqrt(h2), k(eps))))
        new_x.append(b.mul(k(1 - post), x2))
        new_v.append(v2)
        new_h.append(h2)
    return new_x + new_v + new_h
