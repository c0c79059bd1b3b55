"""torch's higher-order control flow in an exported program: `scan` becomes one IR `loop`.

torch.export unrolls a Python loop, but keeps a loop written with torch's scan
(`torch._higher_order_ops.scan.scan(step, init, xs)`) as one node, `higher_order.scan(body, init, xs,
additional_inputs)`, whose body graph (a submodule of the program) is traced once, whatever the number of
steps. Its body reads (*carries, *rows of xs, *additional_inputs) and returns (*new carries, *per-step outputs);
the node gives (*final carries, *per-step outputs stacked on a new first axis). That is the IR loop's contract
(prims/control.py `loop`: the body reads the step number, the loop constants, the carries and the rows), so the
body is imported as a function of its own (Importer.subgraph) and the scan becomes loop(length of xs).

A `while_loop(cond, body, carried, additional_inputs)` whose trip count is known when the kernel is built (a
counter: a carried integer that starts at a constant, `cond` is `i < n` or `i <= n` with a constant n and `body`
returns i + 1 for it) becomes loop(n - i0) over its carries. Any other while_loop, and any other higher-order op
(cond, map, ...), is an error at the line that made it.
"""
from __future__ import annotations

import numpy as np

from ...errors import KsbuildError, Location
from ...ir.core import Lit, Var
from ...ir.types import Type
from ...prims.control import PRIMS_LOOP

HINT = ("write the loop with torch._higher_order_ops.scan.scan (read as a loop), or as a Python loop (unrolled by "
        "torch.export, rolled back by the frontend)")


def is_hop(target) -> bool:
    """True for torch's higher-order operators (torch.ops.higher_order.*)."""
    from torch._ops import HigherOrderOperator
    return isinstance(target, HigherOrderOperator)


def visit_hop(imp, node, loc: Location):
    """The IR values of a higher-order op's node (a tuple, read by getitem nodes)."""
    name = node.target.name()
    fn = HOPS.get(name)
    if fn is None:
        raise KsbuildError(f"torch's higher-order op {name} is not supported", loc, hint=HINT)
    return fn(imp, node, loc)


def scan(imp, node, loc: Location) -> tuple:
    """higher_order.scan(body, init, xs, additional_inputs) as loop(len(xs), *consts, *init, *xs)."""
    graph, init, xs, extra = node.args[:4]
    init, xs, extra = (_tensors(imp, v, what, loc) for v, what in ((init, "init"), (xs, "xs"),
                                                                    (extra, "additional input")))
    length = _length(xs, loc)
    consts = list(dict.fromkeys(a for a in extra if isinstance(a, Var)))  # (each once)
    step = Var(Type("i64"), "t")
    carry_ps = [Var(a.type) for a in init]
    row_ps = [Var(Type(x.type.dtype, x.type.shape[1:])) for x in xs]
    const_ps = {a: Var(a.type) for a in consts}
    inner = carry_ps + row_ps + [const_ps.get(a, a) for a in extra]  # (a literal stays a literal in the body)
    bb, results = imp.subgraph(imp.submodule(graph), inner, loc)
    body = bb.func("scan_body", [step, *const_ps.values(), *carry_ps, *row_ps], results)
    trip = Lit(length, Type("i64")) if isinstance(length, int) else imp.b.dim_size(dim=length)
    imp.b.loc = loc
    init, xs = [_operand(imp, a) for a in init], [_operand(imp, a) for a in xs]
    return imp.b.bind(PRIMS_LOOP, [trip, *consts, *init, *xs],
                      dict(body=body, n_consts=len(consts), n_carry=len(init), length=length, reverse=False))


def while_loop(imp, node, loc: Location) -> tuple:
    """higher_order.while_loop(cond, body, carried, additional_inputs) of a counted loop as loop(n - i0)."""
    cond, graph, carried, extra = node.args[:4]
    j, bound = _counter(imp.submodule(cond), imp.submodule(graph), loc)
    start = imp.known.get(carried[j]) if hasattr(carried[j], "op") else None
    if start is None or np.ndim(start) != 0 or not np.issubdtype(np.asarray(start).dtype, np.integer):
        raise KsbuildError("while_loop: the counter must start at a constant integer", loc, hint=HINT)
    trips = max(0, bound - int(start))
    carried, extra = _tensors(imp, carried, "carried input", loc), _tensors(imp, extra, "additional input", loc)
    consts = list(dict.fromkeys(a for a in extra if isinstance(a, Var)))  # (each once)
    carry_ps, const_ps = [Var(a.type) for a in carried], {a: Var(a.type) for a in consts}
    bb, results = imp.subgraph(imp.submodule(graph), carry_ps + [const_ps.get(a, a) for a in extra], loc)
    body = bb.func("while_body", [Var(Type("i64"), "t"), *const_ps.values(), *carry_ps], results)
    imp.b.loc = loc
    return imp.b.bind(PRIMS_LOOP, [Lit(trips, Type("i64")), *consts, *[_operand(imp, a) for a in carried]],
                      dict(body=body, n_consts=len(consts), n_carry=len(carried), length=trips, reverse=False))


_BOUNDS = {"aten.lt.Scalar": 0, "aten.le.Scalar": 1}  # (i <= n runs n - i0 + 1 steps)


def _counter(cond, body, loc: Location) -> tuple[int, int]:
    """(which carried value counts the steps, the value it stops at) of a counted while_loop's graphs."""
    tests = [n for n in cond.graph.nodes if n.op == "call_function"]
    holders = [n for n in cond.graph.nodes if n.op == "placeholder"]
    test = tests[0] if len(tests) == 1 else None
    if test is not None and str(test.target) in _BOUNDS and test.args[0] in holders and \
            isinstance(test.args[1], int) and not isinstance(test.args[1], bool):
        j = holders.index(test.args[0])
        if _increments(body, j):
            return j, test.args[1] + _BOUNDS[str(test.target)]
    raise KsbuildError("while_loop: only a counted loop is read (a carried integer i that starts at a constant, "
                       "the condition i < n or i <= n with a constant n, the body returning i + 1 for it)", loc,
                       hint=HINT)


def _increments(body, j: int) -> bool:
    """True if body returns its j-th input plus 1 as its j-th output."""
    holders = [n for n in body.graph.nodes if n.op == "placeholder"]
    out = next(n for n in body.graph.nodes if n.op == "output").args[0]
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    step = outs[j] if j < len(outs) else None
    return getattr(step, "op", None) == "call_function" and str(step.target) in ("aten.add.Tensor", "aten.add.Scalar") \
        and step.args[0] is holders[j] and step.args[1:] == (1,) and not step.kwargs


def _tensors(imp, values, what: str, loc: Location) -> list:
    out = []
    for v in values:
        a = imp.value(v)
        if not isinstance(a, (Var, Lit)):
            raise KsbuildError(f"each {what} of a higher-order op must be a tensor, got {type(a).__name__}", loc)
        out.append(a)
    return out


def _length(xs: list, loc: Location):
    """The number of steps: the first axis of xs (the same for all of them)."""
    if not xs or any(x.type.rank == 0 for x in xs):
        raise KsbuildError("scan: xs must be tensors of at least one axis (the steps)", loc)
    length = xs[0].type.shape[0]
    if any(x.type.shape[0] != length for x in xs):
        raise KsbuildError("scan: the tensors of xs have different lengths", loc)
    return length


def _operand(imp, a):
    """A loop operand: a tensor literal becomes a value (a splat literal is no loop operand)."""
    if isinstance(a, Lit) and not a.type.is_scalar:
        return imp.b.broadcast_to(a, shape=a.type.shape)
    return a


HOPS = {"scan": scan, "while_loop": while_loop}
