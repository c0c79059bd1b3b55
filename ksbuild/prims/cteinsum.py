"""The derivative contraction: what einsum's transpose and jvp make (einsum's analogue of ctmul, prims/elementwise.py).

cteinsum[spec, ct](a, b)   einsum[spec](a, b) where operand `ct` is a derivative: a cotangent (einsum's transpose)
                           or a tangent (einsum's jvp). The same value and, after the expand pass, the same einsum in
                           C++; its jvp masks the products of that operand with the other's tangent (mulzz), so a zero
                           (co)tangent stays zero against an infinite one in a second derivative
                           (docs/ad-correctness.md)
"""
from __future__ import annotations

from .base import Prim, finite, unsigned
from .common import add_cts
from .elementwise import masked_both
from .tensor import _einsum_rule, _einsum_transpose, batched_spec, einsum, parse_spec


def masked_contraction(b, x, y, spec: str):
    """Σ mulzz(x, y) over the summed letters of `spec`: einsum[spec](x, y) with every product 0 where either factor
    is 0 (an infinite or nan other included). Written as a product of the operands broadcast to every letter, then
    a sum: the loop nest fuses it, and it exists only in second-derivative code."""
    a, bl, out = parse_spec(spec)
    letters = out + "".join(dict.fromkeys(c for c in a + bl if c not in out))
    sizes = dict(zip(a, x.type.shape)) | dict(zip(bl, y.type.shape))
    full = tuple(sizes[c] for c in letters)
    terms = masked_both(b, _spread(b, x, a, letters, full), _spread(b, y, bl, letters, full))
    summed = tuple(range(len(out), len(letters)))
    return b.reduce_sum(terms, axes=summed) if summed else terms


def _spread(b, x, mine: str, letters: str, full: tuple):
    """x (axes named by `mine`) broadcast to the axes `letters` of sizes `full`."""
    order = sorted(range(len(mine)), key=lambda i: letters.index(mine[i]))
    if order != list(range(len(mine))):
        x = b.transpose(x, perm=tuple(order))
    shape = tuple(d if c in mine else 1 for c, d in zip(letters, full))
    if shape != x.type.shape:
        x = b.reshape(x, shape=shape)
    return x if shape == full else b.broadcast_to(x, shape=full)


def _cteinsum_jvp(b, primals, tangents, spec, ct):
    # z = Σ c·y for a derivative c (operand `ct`): dz = Σ dc·y + Σ c ⊙⊙ dy, the first again a contraction of a
    # derivative (third derivatives keep the rule), the second masked by both factors, product by product (ctmul's
    # rule, summed)
    z = b.cteinsum(*primals, spec=spec, ct=ct)
    terms = [None, None]
    for i, t in enumerate(tangents):
        if t is None:
            continue
        ins = list(primals)
        ins[i] = t
        terms[i] = b.cteinsum(*ins, spec=spec, ct=ct) if i == ct else masked_contraction(b, *ins, spec)
    return [z], [add_cts(b, *terms)]


def _cteinsum_type(in_types, spec, ct):
    return _einsum_rule(in_types, spec)


cteinsum = Prim(
    name="cteinsum",
    sign=unsigned,
    nonfinite=finite,
    type_rule=_cteinsum_type,
    eval=lambda x, y, spec, ct, env: einsum.eval(x, y, spec=spec, env=env),
    jvp=_cteinsum_jvp,
    # linear in one operand: its cotangent is Σ z̄·(the other), einsum's transpose (a cteinsum of z̄ again)
    transpose=lambda b, cts, ins, linear, spec, ct: _einsum_transpose(b, cts, ins, linear, spec),
    batch=lambda b, ins, batched, size, spec, ct: ([b.cteinsum(*ins, spec=batched_spec(spec, batched), ct=ct)],
                                                   [True]),
    emit=None,
    expand=lambda b, ins, spec, ct: [b.einsum(*ins, spec=spec)],
    opt_outs=("emit: expanded into an einsum first",),
    doc="einsum[spec](a, b) where operand `ct` is a derivative (a cotangent: einsum's transpose; a tangent: its "
        "jvp): an einsum whose own jvp masks the products of that operand with the other's tangent",
)
