"""One table of op samples that drives the primitive tests.

Each entry: prim name -> (input types, params, sampler, reference). The reference is an
independent formula (Python math / numpy written out), not the prim's own eval rule.
"""
from __future__ import annotations

import math

import numpy as np

from ksbuild.ir.types import Type

F = Type("f64")
V = Type("f64", (4,))
M = Type("f64", (3, 4))
B = Type("bool")


def normal(rng, shape):
    return rng.standard_normal(shape)


def positive(rng, shape):
    return rng.uniform(0.5, 2.0, shape)


def unit(rng, shape):
    return rng.uniform(-0.9, 0.9, shape)


def vec(fn):
    return np.vectorize(fn, otypes=[np.float64])


# name: (types, params, samplers per input, reference)
SAMPLES = {
    "add": ((F, F), {}, (normal, normal), lambda x, y: x + y),
    "sub": ((F, F), {}, (normal, normal), lambda x, y: x - y),
    "mul": ((F, F), {}, (normal, normal), lambda x, y: x * y),
    "div": ((F, F), {}, (normal, positive), lambda x, y: x / y),
    "neg": ((F,), {}, (normal,), lambda x: -x),
    "exp": ((F,), {}, (normal,), vec(math.exp)),
    "log": ((F,), {}, (positive,), vec(math.log)),
    "log1p": ((F,), {}, (positive,), vec(math.log1p)),
    "expm1": ((F,), {}, (normal,), vec(math.expm1)),
    "sqrt": ((F,), {}, (positive,), vec(math.sqrt)),
    "tanh": ((F,), {}, (normal,), vec(math.tanh)),
    "sin": ((F,), {}, (normal,), vec(math.sin)),
    "cos": ((F,), {}, (normal,), vec(math.cos)),
    "atan": ((F,), {}, (normal,), vec(math.atan)),
    "abs": ((F,), {}, (positive,), vec(abs)),
    "sign": ((F,), {}, (normal,), vec(lambda x: math.copysign(1.0, x) if x else 0.0)),
    "floor": ((F,), {}, (normal,), vec(math.floor)),
    "logistic": ((F,), {}, (normal,), vec(lambda x: 1 / (1 + math.exp(-x)))),
    "ipow": ((F,), {"n": 3}, (normal,), lambda x: x * x * x),
    "pow": ((F, F), {}, (positive, normal), vec(math.pow)),
    "atan2": ((F, F), {}, (normal, positive), vec(math.atan2)),
    "max": ((F, F), {}, (normal, normal), vec(max)),
    "min": ((F, F), {}, (normal, normal), vec(min)),
    "floordiv": ((F, F), {}, (normal, positive), vec(lambda x, y: float(x // y))),
    "mod": ((F, F), {}, (normal, positive), vec(lambda x, y: x % y)),
    "lt": ((F, F), {}, (normal, normal), lambda x, y: x < y),
    "le": ((F, F), {}, (normal, normal), lambda x, y: x <= y),
    "gt": ((F, F), {}, (normal, normal), lambda x, y: x > y),
    "ge": ((F, F), {}, (normal, normal), lambda x, y: x >= y),
    "eq": ((F, F), {}, (normal, normal), lambda x, y: x == y),
    "ne": ((F, F), {}, (normal, normal), lambda x, y: x != y),
    "and": ((B, B), {}, (None, None), lambda x, y: x & y),
    "or": ((B, B), {}, (None, None), lambda x, y: x | y),
    "not": ((B,), {}, (None,), lambda x: ~x),
    "select": ((B, F, F), {}, (None, normal, normal), lambda p, x, y: np.where(p, x, y)),
    "convert": ((F,), {"dtype": "f32"}, (normal,), lambda x: x.astype(np.float32)),
    "broadcast_to": ((V,), {"shape": (3, 4)}, (normal,), lambda x: np.broadcast_to(x, (3, 4))),
    "reshape": ((M,), {"shape": (4, 3)}, (normal,), lambda x: x.reshape(4, 3)),
    "reduce_sum": ((M,), {"axes": (1,)}, (normal,), lambda x: x.sum(axis=1)),
    "transpose": ((M,), {"perm": (1, 0)}, (normal,), lambda x: x.T),
}

# control flow is exercised through kernels (tests/test_kernels_corpus.py, tests/test_transforms.py)
STRUCTURED = {"cond", "loop", "call"}
