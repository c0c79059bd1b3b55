"""parallelize: run big loop nests and kernel-layer calls on several threads (ks/pool.h).

Requires: a fused, lowered Func. Guarantees: with threads > 1, every fusion and contraction whose
outermost loop writes disjoint parts of its outputs (a fusion with at least one axis left after its
reductions, a contraction with an output) gets the param `threads = N`; its C++ runs its outer loops in parts
on ks/pool.h's threads (a fusion: its first two outer axes, when it has 2^15 elements, codegen Writer.open_loops;
a convolution or kernel-layer product: N to 4N parts of the call, ks/parts.h; its record's parallel rule says
which are worth it). That holds at the top level and in the bodies of equations that run sequentially (a
recurrent network's loop over time steps: each step's matrix-vector product of the recurrent weights is split
over the threads, mostly each thread the same share of the weights every step, in its core's cache). The body of
a marked equation (a product's epilogue) stays as it is: one parallel region per nest, none nested.
With threads <= 1 the function is unchanged (and runtime-free).
"""
from __future__ import annotations

from dataclasses import replace

from ..ir.core import Eqn, Func, freeze


def parallelize(f: Func, threads: int) -> Func:
    """f with its loop nests marked to run on `threads` threads (at the top level and in sequential bodies)."""
    if threads <= 1:
        return f
    return replace(f, eqns=tuple(_marked(e, threads) for e in f.eqns))


def _marked(e: Eqn, threads: int) -> Eqn:
    """e marked when its nest is parallel, else with the bodies it runs in sequence marked."""
    if _parallel_outer(e):
        return Eqn(e.prim, e.ins, e.outs, freeze(dict(e.params, threads=threads)), e.loc)
    if e.prim.parallel is not None or not any(isinstance(v, Func) for v in e.params.values()):
        return e  # (a nest of a parallel kind kept on one thread: its body, an epilogue, runs inside it)
    params = {k: parallelize(v, threads) if isinstance(v, Func) else v for k, v in e.params.items()}
    return Eqn(e.prim, e.ins, e.outs, freeze(params), e.loc)


def _parallel_outer(e: Eqn) -> bool:
    """Whether the outermost loop of e's nest writes each output element from one iteration only (its record's
    parallel rule: Prim.parallel)."""
    return e.prim.parallel is not None and e.prim.parallel(e)
