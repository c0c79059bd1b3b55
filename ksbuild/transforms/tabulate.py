"""tabulate: a float region from one 8-bit tensor to an 8-bit result becomes a 256-entry table and a lookup.

Requires: a Func. Guarantees: the same values, bit for bit. In an int8 model, the float operators between a
DequantizeLinear and a QuantizeLinear that stay float (a sigmoid, a SiLU, a hardswish: frontends/onnx/qdq.py) often
compute each 8-bit result from one 8-bit value of one tensor. Such a region is a set of elementwise equations of the
result's shape whose inputs are that tensor, scalars and the region's own values, ending in a convert to u8 or i8
(the QuantizeLinear); it may pass through 8-bit values of its own (SiLU: x times the quantized sigmoid of x). The
region is computed once per call on the 256 values a byte takes (a constant [256] in place of the tensor: the same
equations, so the same float code in the C++, on every byte) and the result becomes a qlookup of the tensor's bytes
in that table (prims/qlinear.py; ks::qlookup). onnxruntime builds such tables for its unary quantized operators
(QLinearSigmoid, QLinearLeakyRelu). A region reading a second tensor (squeeze-excite's x · sigmoid(s): a scale per
channel) is not a function of one byte and stays float. Results of fewer than MIN_ELEMENTS elements are left alone
(the table would cost as much). Top-level equations only (a model's graph).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.builder import Builder
from ..ir.core import Eqn, Func, Lit, Var
from ..ir.dense import Dense
from ..prims.qlinear import qlookup
from .dce import dce
from .rewrite import bind_like, keep

EIGHT_BIT = ("u8", "i8")
MIN_ELEMENTS = 1024
MAX_ROUNDS = 4  # (how many times a region grows through its own 8-bit values)


@dataclass(frozen=True)
class Region:
    """The equations (in program order, the root's convert last) computing a root from one 8-bit source."""

    source: Var
    eqns: tuple[Eqn, ...]


def _elementwise(e: Eqn | None, shape) -> bool:
    """An elementwise equation of the result's shape whose value depends on its operands alone (not an iota)."""
    return e is not None and e.prim.elementwise and not e.prim.positional and len(e.outs) == 1 and \
        e.outs[0].type.shape == shape


def _cone(root: Eqn, made: dict, through: set) -> tuple[set, set] | None:
    """The elementwise equations computing root back to 8-bit values (passing `through` those), and the 8-bit
    values they read; None when they read another tensor."""
    shape = root.outs[0].type.shape
    eqns, leaves, stack = {root}, set(), list(root.ins)
    while stack:
        a = stack.pop()
        if isinstance(a, Lit) or a.type.rank == 0:
            continue
        if a.type.dtype in EIGHT_BIT and a not in through:
            leaves.add(a)
            continue
        e = made.get(a)
        if not _elementwise(e, shape):
            return None
        if e not in eqns:
            eqns.add(e)
            stack.extend(e.ins)
    return eqns, leaves


def _region(root: Eqn, made: dict, order: dict) -> Region | None:
    """root's region (see the module doc), or None."""
    shape, through = root.outs[0].type.shape, set()
    for _ in range(MAX_ROUNDS):
        cone = _cone(root, made, through)
        if cone is None:
            return None
        eqns, leaves = cone
        if len(leaves) == 1:
            (source,) = leaves
            return Region(source, tuple(sorted(eqns, key=order.get))) if source.type.shape == shape else None
        inner = {v for v in leaves if _elementwise(made.get(v), shape)}
        if not inner:
            return None
        through |= inner
    return None


def _is_root(e: Eqn) -> bool:
    """A convert of floats to 8 bits, of enough elements."""
    if e.prim.name != "convert" or e.outs[0].type.dtype not in EIGHT_BIT or e.ins[0].type.dtype not in ("f32", "f64"):
        return False
    n = 1
    for d in e.outs[0].type.shape:
        if not isinstance(d, int):
            return True
        n *= d
    return n >= MIN_ELEMENTS


def regions(f: Func) -> dict[Var, Region]:
    """The tabulable regions of f's top-level equations, by their results."""
    made = {v: e for e in f.eqns for v in e.outs}
    order = {e: i for i, e in enumerate(f.eqns)}
    found = {}
    for e in f.eqns:
        region = _region(e, made, order) if _is_root(e) else None
        if region is not None:
            found[e.outs[0]] = region
    return found


def _table(b: Builder, region: Region, outer: dict) -> Var:
    """The region computed on every byte: entry j is its result for the source value whose byte is j (outer: the
    new names of values the rewrite renamed)."""
    dtype = np.int8 if region.source.type.dtype == "i8" else np.uint8
    env = dict(outer)
    env[region.source] = b.constant(value=Dense.of(np.arange(256, dtype=np.uint8).view(dtype)))
    for e in region.eqns:
        outs = b.bind(e.prim, [env.get(a, a) if isinstance(a, Var) else a for a in e.ins], dict(e.params))
        env.update(zip(e.outs, outs))
    return env[region.eqns[-1].outs[0]]


def tabulate(f: Func) -> Func:
    """f with its tabulable regions as table lookups (see the module doc)."""
    found = regions(f)
    if not found:
        return f
    b, env = Builder(), {}
    for eqn in f.eqns:
        b.loc = eqn.loc
        region = found.get(eqn.outs[0]) if eqn.outs else None
        if region is None:
            env.update(zip(eqn.outs, keep(b, eqn, [env.get(a, a) if isinstance(a, Var) else a for a in eqn.ins])))
            continue
        table = _table(b, region, env)
        env.update(zip(eqn.outs, bind_like(b, eqn, qlookup, [table, env.get(region.source, region.source)], {})))
    return dce(b.func(f.name, list(f.params), [env.get(r, r) if isinstance(r, Var) else r for r in f.results],
                      f.result_names))
