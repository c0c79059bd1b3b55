"""Which inputs an export's output may be (the same buffer): the C ABI's in-place rule.

The rule the header states for every export with tensors: no output may overlap an input or another
output, except that an output may be the very buffer of an input (same pointer, same type) that
`in_place_inputs` lists. It lists an input only where the generated code provably reads each element of
that input in the same step that writes the same element of the output, and before writing it:
- the lowered function is one `fusion` equation (one loop nest, codegen/fusion.py) and has one result,
  that fusion's one result;
- every equation of the nest's body is elementwise (no reduction, no gather from a table), so the step at
  index i reads each operand of the nest's shape at index i only, and the output's element i is stored
  once, from the body's last equation, after every read of the step (a value read later would escape);
- the input has the output's type, dtype and shape: it is an operand of the nest's shape, read through a
  pointer to the output's element type (C++'s type-based aliasing then allows the two to meet).
Steps may run in any order or in SIMD lanes (KS_OMP_SIMD, threads): no step reads an element another
writes. Anything else is refused by this test even where it would happen to work: a transpose reads
S[j, i] for out[i, j], a matrix product a whole row, a cumsum's step the running total of earlier ones.
"""
from __future__ import annotations

from ..ir.core import Func, Var


def in_place_inputs(f: Func) -> list[int]:
    """The positions of f's tensor parameters that its one output may be, by the rule above ([] if none)."""
    if len(f.eqns) != 1 or len(f.results) != 1 or f.eqns[0].prim.name != "fusion":
        return []
    fusion = f.eqns[0]
    body = fusion.params["body"]
    if fusion.outs != (f.results[0],) or not _pointwise(body):
        return []
    out_type = f.results[0].type
    read = {a for a in fusion.ins if isinstance(a, Var)}
    return [k for k, p in enumerate(f.params) if p.type.rank and p.type == out_type and p in read]


def _pointwise(body: Func) -> bool:
    """Only elementwise equations, and the one result is the last one's one output."""
    return bool(body.eqns) and all(e.prim.elementwise for e in body.eqns) and len(body.results) == 1 \
        and body.eqns[-1].outs == (body.results[0],)
