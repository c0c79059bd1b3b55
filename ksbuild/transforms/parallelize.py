"""parallelize: run big loop nests and kernel-layer calls on several threads (ks/pool.h).

Requires: a fused, lowered Func. Guarantees: with threads > 1, every top-level fusion and
contraction whose outermost loop writes disjoint parts of its outputs (a fusion with at least
one axis left after its reductions, a contraction with an output) gets the param
`threads = N`; its C++ runs its outer loops in parts on ks/pool.h's threads (a fusion: its first two outer axes,
when it has 2^15 elements, codegen Writer.open_loops; a convolution or kernel-layer product: N to 4N parts of the
call, ks/parts.h; its record's parallel rule says which are worth it). Loops
inside a loop or an if body stay sequential (one parallel region per nest, none nested).
With threads <= 1 the function is unchanged (and runtime-free).
"""
from __future__ import annotations

from ..ir.core import Eqn, Func


def parallelize(f: Func, threads: int) -> Func:
    """f with its top-level loop nests marked to run on `threads` threads."""
    if threads <= 1:
        return f
    eqns = tuple(_marked(e, threads) if _parallel_outer(e) else e for e in f.eqns)
    return Func(f.name, f.params, eqns, f.results, f.result_names, f.plan)


def _marked(e: Eqn, threads: int) -> Eqn:
    from ..ir.core import freeze
    return Eqn(e.prim, e.ins, e.outs, freeze(dict(e.params, threads=threads)), e.loc)


def _parallel_outer(e: Eqn) -> bool:
    """Whether the outermost loop of e's nest writes each output element from one iteration only (its record's
    parallel rule: Prim.parallel)."""
    return e.prim.parallel is not None and e.prim.parallel(e)
