"""step_projections: on a target without a vector unit, a recurrent loop projects each step's input inside the loop.

Requires: a Func after select_backend. Guarantees: the same values; a top-level `loop` whose one scanned input is
the projection of a sequence computed for every step before it (ops/rnn.py: the rows of src [T, B, I] times a
weight w [G, I], `contract "ri,gi->rg"`, reshaped to [T, B, G], plus a bias that does not depend on the step) scans
src instead, takes w and the bias as loop constants, and computes the step's projection in its body; a bias computed
from constants alone and read nowhere else (an LSTM's input and recurrent biases added: a float LSTM's sum Wb + Rb
comes as a constant of the loop, ops/rnn.py, and is folded the same way) becomes one constant. Run only
for such targets (pipeline Options.vectors false: Cortex-M), whose RAM the projection of all steps filled (an LSTM of
20 steps and 4 × 32 gates: 10 KB of its 11 KB workspace; emx-onnx-cgen projects step by step, issue 36). With
vectors the projection of all steps at once is one larger matrix product, faster, and stays. A step of one row
(batch 1) projects as dot_convs' products of one row do (impl "dense": ks::tiles::dense_row, with the bias as its
epilogue), not by ks::packed_gemm's panels (whose dot kernels and epilogue code were 2 KB of the benchmark's GRU's
flash at -O3).
"""
from __future__ import annotations

import numpy as np

from ..ir.builder import Builder, inline
from ..ir.core import Atom, Eqn, Func, Var
from ..ir.dense import Dense
from ..ir.interp import eval_func
from ..ir.types import Type
from .dce import dce
from .dot_convs import dense_applies, dense_params
from .rewrite import rewrite, use_counts

FLOAT = ("f32", "f64")


def step_projections(f: Func, size: bool = False) -> Func:
    """f with its recurrent loops' input projections computed step by step (`size`: optimize = "size", for
    dot_convs.dense_params)."""
    defs = {v: e for e in f.eqns for v in e.outs}
    uses = use_counts(f)
    top = {e.outs[0] for e in f.eqns if e.outs}  # (a loop's equation is rebuilt around its body: known by its outputs)

    def rule(b, eqn, ins):
        if eqn.prim.name != "loop" or not eqn.outs or eqn.outs[0] not in top:
            return None
        found = _projection(eqn, defs, uses)
        if found is None:
            return None
        src, w, bias, product = found
        want = eqn.ins[-1].type.shape[:-1] + src.type.shape[-1:]
        src = src if src.type.shape == want else b.reshape(src, shape=want)
        value = _constant(bias, defs, uses) if isinstance(bias, Var) else None
        ins = list(ins)
        for k in range(1, 1 + eqn.params["n_consts"]):  # (a float LSTM's Wb + Rb, a vector over the gates that
            a = eqn.ins[k]                               # ops/rnn.py makes a loop constant: one constant too)
            if isinstance(a, Var) and a.type.shape == eqn.ins[-1].type.shape[-1:] and uses.get(a) == 1:
                folded = _constant(a, defs, uses)
                ins[k] = ins[k] if folded is None else b.constant(value=Dense.of(folded))
        return _per_step(b, eqn, ins, src, w, bias if value is None else b.constant(value=Dense.of(value)), product,
                         size)
    g = rewrite(f, rule)
    return dce(g) if g is not f else f


def _constant(v: Var, defs, uses) -> np.ndarray | None:
    """v's value when it is computed from constants alone by equations read only by one another (dead once v is a
    constant of its own), else None."""
    chain, reads, todo = {}, {}, [v]
    while todo:
        u = todo.pop()
        e = defs.get(u)
        if e is None or len(e.outs) != 1 or any(isinstance(x, Func) for x in e.params.values()):
            return None  # (a parameter of the function, or control flow)
        if id(e) not in chain:
            chain[id(e)] = e
            for a in e.ins:
                if isinstance(a, Var):
                    reads[a] = reads.get(a, 0) + 1
                    todo.append(a)
    if any(uses.get(u, 0) != n for u, n in reads.items()):
        return None
    order = sorted(chain.values(), key=lambda e: _position(e, defs))
    g = Func("bias", (), tuple(order), (v,))
    return np.asarray(eval_func(g, [])[0])


def _position(e: Eqn, defs) -> int:
    """e's place in its function (defs keeps the equations' order)."""
    return list(defs.values()).index(e)


def _one_use(v, defs, uses, prim: str) -> Eqn | None:
    """The equation of prim that defines v, if v is read once (by the equation being matched)."""
    e = defs.get(v) if isinstance(v, Var) else None
    return e if e is not None and e.prim.name == prim and uses.get(v, 0) == 1 else None


def _projection(loop: Eqn, defs, uses):
    """(src, w, bias or None, contract spec) when the loop's one scanned input is reshape(rows(src) · wᵀ) [+ bias]."""
    p = loop.params
    if len(loop.ins) != 2 + p["n_consts"] + p["n_carry"]:
        return None
    xs = loop.ins[-1]
    bias = None
    added = _one_use(xs, defs, uses, "add")
    if added is not None:  # (the bias: a vector over the gates, or a scalar, the same at every step)
        proj, bias = added.ins if _one_use(added.ins[0], defs, uses, "reshape") is not None else added.ins[::-1]
        if bias.type.dtype != xs.type.dtype or bias.type.shape not in ((), (xs.type.shape[-1],)):
            return None
    else:
        proj = xs
    shaped = _one_use(proj, defs, uses, "reshape")
    product = _one_use(shaped.ins[0], defs, uses, "contract") if shaped is not None else None
    if product is None or product.params.get("impl") != "tiles" or product.params.get("acc") or \
            len(product.ins) != 2 or xs.type.dtype not in FLOAT or proj.type != xs.type:
        return None
    left, right = product.params["spec"].split("->")
    a, w_axes = left.split(",")
    rows = defs.get(product.ins[0]) if isinstance(product.ins[0], Var) else None  # (a view: may be shared)
    rows = rows if rows is not None and rows.prim.name == "reshape" else None
    if len(a) != 2 or len(w_axes) != 2 or a[1] != w_axes[1] or right != a[0] + w_axes[0] or rows is None:
        return None
    src = rows.ins[0]
    t, gates = xs.type.shape[0], xs.type.shape[-1]
    want = xs.type.shape[:-1] + src.type.shape[-1:]  # (the steps [T, B, I]; a batch of 1 may come as [1, T, I])
    if not _same_order(src.type.shape, want) or product.ins[1].type.shape != (gates, src.type.shape[-1]) or \
            t != p["length"] and p["length"] is not None:
        return None
    return src, product.ins[1], bias, product.params


def _same_order(shape: tuple, want: tuple) -> bool:
    """Whether an array of shape holds the elements of one of shape want in the same order (size-1 axes apart)."""
    return [d for d in shape if d != 1] == [d for d in want if d != 1] and shape[-1:] == want[-1:]


def _per_step(b: Builder, loop: Eqn, ins: list, src: Atom, w: Atom, bias, product: dict, size: bool) -> list:
    """The loop scanning src, with w (and the bias) as its last constants and each step's projection in its body."""
    p = loop.params
    body: Func = p["body"]
    n_consts = p["n_consts"]
    extra = [w] + ([bias] if bias is not None else [])
    step = Type(src.type.dtype, src.type.shape[1:])
    nb = Builder()
    params = [Var(v.type, v.hint) for v in body.params[:1 + n_consts]] + [Var(a.type, "") for a in extra] + \
        [Var(v.type, v.hint) for v in body.params[1 + n_consts:-1]] + [Var(step, "step")]
    wv = params[1 + n_consts]
    if step.shape[:1] == (1,) and dense_applies(product["spec"], w.type.shape):  # (one row: as dot_convs' own)
        product = dense_params(product, w.type.shape, size)
    (x,) = nb.bind(_contract(), [params[-1], wv], dict(product))
    if bias is not None:
        x = nb.add(x, params[2 + n_consts])
    old_args = params[:1 + n_consts] + params[1 + n_consts + len(extra):-1] + [x]
    results = inline(nb, body, old_args)
    new_body = nb.func(body.name, params, results, body.result_names)
    trip, consts, rest = ins[0], ins[1:1 + n_consts], ins[1 + n_consts:-1]
    outs = b.bind(loop.prim, [trip, *consts, *extra, *rest, src],
                  dict(p, body=new_body, n_consts=n_consts + len(extra)))
    return list(outs)


def _contract():
    from ..prims.lowering import contract
    return contract
