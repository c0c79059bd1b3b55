"""float_products: an integer product whose int32 sums are converted to float and scaled becomes one qmatmul with
float results.

Requires: a Func before select_backend (its qmatmuls not packed yet). Guarantees: the same values; the chain

    y = qmatmul[out=i32](a, w, bias, _)  [; y = sub(y, v)]  ; c = convert[f32](y) ; m = mul(c, s)  (or mul(s, c))

with v an int32 scalar or [N] (DynamicQuantizeLinear's zero point times the weights' column sums:
frontends/onnx/ops_quant.py, integer_sums), s an f32 scalar, [1] or [N] (a_scale · w_scale) and m of y's shape,
each intermediate read by the next alone, becomes

    m = qmatmul[out=f32](a, w, bias - v, s as [1] or [N])

whose kernel (ks::qmatmul<TX, float>) converts each register tile's sums to float times the scales while they are
in its scratch, as onnxruntime's MatMulIntegerToFloat and its quantized LSTM do (float(sum) · scale), instead of
storing the int32 sums and converting them in a loop of their own (bert_small's dynamic model at batch 8: 21 M sums
written and read again). The sums are the same integers and each conversion and product the same f32 operation, so
the results are the chain's exactly. Bodies (a recurrent loop's step: DynamicQuantizeLSTM) are rewritten too. Only
on targets with a vector unit (pipeline.py): a microcontroller's kernel layer keeps int32 results alone.
"""
from __future__ import annotations

from ..ir.builder import Builder
from ..ir.core import Eqn, Func, Var, freeze
from .dce import dce
from .rewrite import use_counts


def float_products(f: Func) -> Func:
    """f (and the bodies in it) with its integer products converted to float merged into them (module doc)."""
    g = _body(f, {})
    return dce(g) if g is not f else f


def _body(f: Func, memo: dict) -> Func:
    if id(f) in memo:
        return memo[id(f)]
    eqns, nested = [], False
    for e in f.eqns:
        if any(isinstance(v, Func) for v in e.params.values()):
            params = {k: _body(v, memo) if isinstance(v, Func) else v for k, v in e.params.items()}
            if any(params[k] is not v for k, v in e.params.items()):
                e, nested = Eqn(e.prim, e.ins, e.outs, freeze(params), e.loc), True
        eqns.append(e)
    uses = use_counts(f)
    defs = {v: e for e in eqns for v in e.outs}
    out, changed = [], False
    for e in eqns:
        new = _merged(e, defs, uses) if e.prim.name == "mul" else None
        if new is None:
            out.append(e)
        else:
            out.extend(new)
            changed = True
    g = f if not (changed or nested) else dce(Func(f.name, f.params, tuple(out), f.results, f.result_names))
    memo[id(f)] = g
    return g


def _merged(mul: Eqn, defs: dict, uses: dict) -> list[Eqn] | None:
    """The equations computing mul's result as one qmatmul with float results, or None if mul ends no chain."""
    for c, s in (mul.ins, mul.ins[::-1]):
        chain = _chain(c, defs, uses)
        if chain is None or s.type.dtype != "f32":
            continue
        q, v = chain
        y = q.outs[0]
        n = y.type.shape[-1]
        if mul.outs[0].type.shape != y.type.shape or s.type.shape not in ((), (1,), (n,)):
            continue
        if v is not None and (v.type.dtype != "i32" or v.type.shape not in ((), (n,))):
            continue
        a, w, bias = q.ins[:3]
        b = Builder(mul.loc)
        if v is not None:
            bias = b.sub(bias, v)
        scale = b.reshape(s, shape=(1,)) if s.type.shape == () else s
        params = dict(q.params, out="f32")
        (t,) = q.prim.type_rule([a.type, w.type, bias.type, scale.type], **params)
        if t != mul.outs[0].type:
            continue
        return b.eqns + [Eqn(q.prim, (a, w, bias, scale), mul.outs, freeze(params), q.loc)]
    return None


def _chain(c, defs: dict, uses: dict):
    """(the qmatmul, the int32 v subtracted from its sums or None) when c = convert[f32](qmatmul [- v]) and each
    intermediate is read once, else None."""
    conv = defs.get(c) if isinstance(c, Var) else None
    if conv is None or conv.prim.name != "convert" or conv.params.get("dtype") != "f32" or uses.get(c) != 1:
        return None
    y = conv.ins[0]
    if not isinstance(y, Var) or y.type.dtype != "i32" or uses.get(y) != 1 or y not in defs:
        return None
    v = None
    if defs[y].prim.name == "sub":
        y, v = defs[y].ins
        if not isinstance(y, Var) or uses.get(y) != 1 or y not in defs:
            return None
    q = defs[y]
    if q.prim.name != "qmatmul" or q.params.get("out") != "i32" or q.params.get("packed"):
        return None
    return q, v
