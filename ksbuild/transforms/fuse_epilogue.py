"""fuse_epilogue: the elementwise equations after a matrix product or a convolution run as it stores.

Requires: a fused Func (transforms/fuse.py: elementwise runs are `fusion` equations). Guarantees: the
same values; a `contract` computed by a kernel (impl tiles, panels or gemm) or a `convolve`, whose result
is read only by one fusion over exactly its shape (no reduction, one result of the product's type),
becomes, in the fusion's place, that product with the fusion's body as its `epilogue` and the fusion's
other operands as its extra operands. A bias and an
activation after a layer (relu(x·W + b), relu(conv(x, w) + b)) are then applied to each element as the
register tiles store it (codegen/epilogue.py), instead of in a second pass over the result. A fusion of
independent elementwise runs (transforms/fuse.py groups consecutive runs of one shape: the bias and ReLU of two
convolutions whose results are concatenated) is first split into one fusion per run, so each can follow its own
product.
"""
from __future__ import annotations

from ..ir.core import Eqn, Func, Var
from ..prims.lowering import fusion
from .rewrite import use_counts


def fuse_epilogue(f: Func) -> Func:
    """f (and every body nested in it) with fusions after products moved into them."""
    return _fuse(f, {})


def _fuse(f: Func, memo: dict) -> Func:
    if id(f) in memo:
        return memo[id(f)]
    eqns = [part for e in f.eqns for part in _split(_recursed(e, memo), f)]
    pairs = _pairs(eqns, f.results)
    if not pairs:
        memo[id(f)] = f if eqns == list(f.eqns) else Func(f.name, f.params, tuple(eqns), f.results,
                                                           f.result_names, plan=f.plan)
        return memo[id(f)]
    # the merged equation takes the fusion's place: every operand of both is defined there
    at_fusion = {j: i for i, j in pairs.items()}
    out = [_merged(eqns[at_fusion[k]], e) if k in at_fusion else e for k, e in enumerate(eqns) if k not in pairs]
    memo[id(f)] = Func(f.name, f.params, tuple(out), f.results, f.result_names, plan=f.plan)
    return memo[id(f)]


def _recursed(e: Eqn, memo: dict) -> Eqn:
    if not any(isinstance(v, Func) for v in e.params.values()) or e.prim is fusion:
        return e
    params = {k: _fuse(v, memo) if isinstance(v, Func) else v for k, v in e.params.items()}
    return Eqn(e.prim, e.ins, e.outs, params, e.loc)


def _split(e: Eqn, f: Func) -> list[Eqn]:
    """A fusion without reductions as one fusion per connected component of its body (in the body's order), when
    it has several; any other equation as it is."""
    body = e.params.get("body") if e.prim is fusion else None
    if body is None or e.params.get("threads") or any(q.prim.reduction for q in body.eqns):
        return [e]
    group: dict = {}  # var or equation index -> its component's first equation index

    def root(k):
        while group.get(k, k) != k:
            k = group[k]
        return k
    for i, q in enumerate(body.eqns):
        group[i] = i
        for a in q.ins:
            if isinstance(a, Var) and a in group:
                group[root(i)] = root(group[a])
        for v in q.outs:
            group[v] = i
    comps = sorted({root(i) for i in range(len(body.eqns))})
    if len(comps) < 2:
        return [e]
    outer = dict(zip(body.params, e.ins))
    named = dict(zip(body.results, e.outs))
    parts = []
    for c in comps:
        mine = [q for i, q in enumerate(body.eqns) if root(i) == c]
        made = {v for q in mine for v in q.outs}
        results = tuple(r for r in body.results if r in made)
        if not results:
            continue
        read = tuple(dict.fromkeys(a for q in mine for a in q.ins if isinstance(a, Var) and a in outer))
        fresh = {a: Var(a.type, a.hint) for a in read}  # (a parameter read by two parts is two variables)
        mine = [Eqn(q.prim, tuple(fresh.get(a, a) if isinstance(a, Var) else a for a in q.ins), q.outs, q.params,
                    q.loc) for q in mine]
        sub = Func("fused", tuple(fresh[a] for a in read), tuple(mine), results)
        parts.append(Eqn(fusion, tuple(outer[a] for a in read), tuple(named[r] for r in results), {"body": sub},
                         e.loc))
    return parts


def _pairs(eqns: list[Eqn], results) -> dict[int, int]:
    """Index of each product equation -> index of the fusion that becomes its epilogue."""
    uses = use_counts(Func("", (), tuple(eqns), tuple(results)))
    made = {v: i for i, e in enumerate(eqns) for v in e.outs}
    pairs: dict[int, int] = {}
    for j, e in enumerate(eqns):
        if e.prim is not fusion:
            continue
        for a in e.ins:
            i = made.get(a) if isinstance(a, Var) else None
            if i is not None and _host(eqns[i]) and uses[a] == 1 and _fits(e, a):
                pairs[i] = j
                break
    return pairs


def _host(e: Eqn) -> bool:
    """Whether an equation is a product whose kernel can take an epilogue."""
    return e.params.get("impl") in e.prim.epilogue_impls and e.params.get("epilogue") is None \
        and len(e.outs) == 1 and e.outs[0].type.rank >= 2


def _fits(f: Eqn, v: Var) -> bool:
    """Whether fusion f can run as the epilogue of the product v."""
    body: Func = f.params["body"]
    if list(f.ins).count(v) != 1 or len(body.results) != 1 or len(f.outs) != 1 or f.params.get("threads"):
        return False
    if any(e.prim.reduction for e in body.eqns) or f.outs[0].type != v.type:
        return False
    return all(e.prim.elementwise and e.outs[0].type.shape == v.type.shape for e in body.eqns)


def _merged(product: Eqn, f: Eqn) -> Eqn:
    """The product with f's body as its epilogue: the body's parameter for the product first."""
    body: Func = f.params["body"]
    k = next(i for i, a in enumerate(f.ins) if a is product.outs[0])
    order = [k] + [i for i in range(len(f.ins)) if i != k]
    epilogue = Func("epilogue", tuple(body.params[i] for i in order), body.eqns, body.results)
    extra = tuple(f.ins[i] for i in order[1:])
    return Eqn(product.prim, product.ins + extra, f.outs, dict(product.params, epilogue=epilogue), product.loc)
