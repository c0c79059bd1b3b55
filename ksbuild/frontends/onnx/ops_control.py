"""ONNX control flow: If becomes `cond`, Loop and Scan become `loop` (a counted scan).

A subgraph becomes a sub-function; values of the enclosing graph it reads are captured as
extra operands (IR functions are closed). An If whose condition is known is inlined.
"""
from __future__ import annotations

import numpy as np

from ...ir.builder import Builder
from ...ir.core import Func, Lit, Var
from ...ir.types import Type
from ...ops import shape as sh
from ...prims.control import PRIMS_COND, PRIMS_LOOP
from .graph import Frame, c_name, handler
from .node import Node, tensor_array
from .values import Val, onnx_dtype


class Body:
    """A subgraph imported as a function body: its frame, params and results."""

    def __init__(self, n: Node, graph, params: list[tuple[str, Type, str]], inline: bool = False):
        self.graph = graph
        self.b = n.b if inline else Builder(n.loc)
        self.frame = Frame(self.b, n.frame)
        self.frame.inline = inline
        self.params = []
        for name, t, dtype in params:
            p = Var(t, c_name(name))
            self.params.append(p)
            self.frame.vals[name] = Val(p, None, dtype)
        for t in graph.initializer:  # a subgraph's own initializers: known values (always embedded)
            self.frame.vals[t.name] = Val(None, tensor_array(t, str(n.imp.path.parent)),
                                          onnx_dtype(t.data_type, f"initializer '{t.name}'", n.loc))
        n.imp.run_nodes(self.frame, graph.node, n.imp.opsets)
        probe = Node(n.imp, self.frame, n.proto, n.loc, n.opset, b=self.b)
        self.vals = [self.frame.lookup(o.name, probe) for o in graph.output]
        self.dtypes = [v.dtype for v in self.vals]
        self.results = [] if inline else [self.frame.atom(o.name, probe) for o in graph.output]

    def func(self, name: str, captures: list[str], outer_types: dict[str, Type], lead: list[Var] | None = None) -> Func:
        """The body as a Func taking (lead params, captured values in `captures` order, own params)."""
        caps = [self.frame.captured.get(c) or Var(outer_types[c], c_name(c)) for c in captures]
        params = list(lead or []) + caps + self.params
        return Func(name, tuple(params), tuple(self.b.eqns), tuple(self.results))


def _captures(bodies: list[Body]) -> list[str]:
    names: list[str] = []
    for body in bodies:
        for name in body.frame.captured:
            if name not in names:
                names.append(name)
    return names


def _scalar_bool(n: Node, i: int):
    c = n.x(i)
    if c.type.rank:
        c = n.b.reshape(c, shape=())
    return c if c.type.dtype == "bool" else n.b.ne(c, Lit(0, c.type.scalar()))


@handler("If")
def if_(n: Node):
    then_g, else_g = n.attr("then_branch"), n.attr("else_branch")
    known = n.known(0)
    if known is not None:
        body = Body(n, then_g if bool(np.asarray(known).reshape(-1)[0]) else else_g, [], inline=True)
        return body.vals
    pred = _scalar_bool(n, 0)
    bodies = [Body(n, g, []) for g in (then_g, else_g)]
    for k, (t, e) in enumerate(zip(*(body.vals for body in bodies))):
        if t.seq != e.seq or t.present is not None or e.present is not None:
            raise n.unsupported(f"output {k} of the branches being " + (
                "an optional value" if t.present is not None or e.present is not None else
                "a sequence in one branch and a tensor in the other"))
    t_types = [r.type for r in bodies[0].results]
    e_types = [r.type for r in bodies[1].results]
    if t_types != e_types:
        shown = lambda ts: ", ".join(map(str, ts))  # noqa: E731
        raise n.error(f"If: the branches give different types ({shown(t_types)}) and ({shown(e_types)})",
                      hint="both branches must produce the same shapes")
    caps = _captures(bodies)
    outer = {c: n.frame.atom(c, n).type for c in caps}
    fns = [body.func(f"{kind}_branch", caps, outer) for body, kind in zip(bodies, ("then", "else"))]
    outs = n.b.bind(PRIMS_COND, [pred, *[n.frame.atom(c, n) for c in caps]], {"then_fn": fns[0], "else_fn": fns[1]})
    return [Val(o, None, d, seq=v.seq) for o, d, v in zip(outs, bodies[0].dtypes, bodies[0].vals)]


def _trip(n: Node) -> int:
    if not n.has(0):
        raise n.unsupported("a Loop without a trip count", hint="loops must be counted")
    m = n.const(0, "the trip count")
    return int(np.asarray(m).reshape(-1)[0])


@handler("Loop")
def loop(n: Node):
    g = n.attr("body")
    trip = _trip(n)
    if n.has(1):
        c = n.const(1, "the initial condition")
        if not bool(np.asarray(c).reshape(-1)[0]):
            raise n.unsupported("a Loop whose initial condition is not known to be true")
    init = [n.x(i) for i in range(2, n.n_in)]
    ins = list(g.input)
    params = [(ins[0].name, Type("i64"), "i64"), (ins[1].name, Type("bool"), "bool")]
    params += [(vi.name, a.type, n.dtype(i + 2)) for i, (vi, a) in enumerate(zip(ins[2:], init))]
    body = Body(n, g, params)
    cond_out = body.results[0]
    if not (isinstance(cond_out, Lit) and cond_out.value) and cond_out is not body.params[1]:
        raise n.unsupported("a Loop whose condition is computed in the body (a while loop)")
    caps = _captures([body])
    outer = {c: n.frame.atom(c, n).type for c in caps}
    f = _loop_func(body, caps, outer)
    outs = n.b.bind(PRIMS_LOOP, [Lit(trip, Type("i64")), *[n.frame.atom(c, n) for c in caps], *init],
                    dict(body=f, n_consts=len(caps), n_carry=len(init), length=trip, reverse=False))
    return [Val(o, None, d) for o, d in zip(outs, body.dtypes[1:])]


def _loop_func(body: Body, caps: list[str], outer: dict[str, Type]) -> Func:
    """The loop body (k, captured..., carried...) -> (carried..., scan outputs...), its condition true."""
    env = {body.params[1]: Lit(True, Type("bool"))}
    caps_v = [body.frame.captured.get(c) or Var(outer[c], c_name(c)) for c in caps]
    results = [env.get(r, r) if isinstance(r, Var) else r for r in body.results[1:]]
    eqns = [_subst(e, env) for e in body.b.eqns]
    return Func("loop_body", tuple([body.params[0]] + caps_v + body.params[2:]), tuple(eqns), tuple(results))


def _subst(eqn, env):
    from ...ir.core import Eqn
    if not any(isinstance(a, Var) and a in env for a in eqn.ins):
        return eqn
    return Eqn(eqn.prim, tuple(env.get(a, a) if isinstance(a, Var) else a for a in eqn.ins), eqn.outs, eqn.params,
               eqn.loc)


@handler("Scan")
def scan(n: Node):
    if n.opset < 9:
        raise n.unsupported("Scan before opset 9 (with sequence_lens)")
    g = n.attr("body")
    m = n.attr("num_scan_inputs")
    states = [n.x(i) for i in range(n.n_in - m)]
    xs = [n.x(i) for i in range(n.n_in - m, n.n_in)]
    in_axes = n.attr("scan_input_axes", None) or [0] * m
    in_dirs = n.attr("scan_input_directions", None) or [0] * m
    n_out = len(g.output) - len(states)
    out_axes = n.attr("scan_output_axes", None) or [0] * n_out
    out_dirs = n.attr("scan_output_directions", None) or [0] * n_out
    xs = [_to_front(n, x, a, d) for x, a, d in zip(xs, in_axes, in_dirs)]
    length = xs[0].type.shape[0]
    if any(x.type.shape[0] != length for x in xs):
        raise n.error("Scan: the scan inputs have different lengths")
    ins = list(g.input)
    params = [(vi.name, s.type, n.dtype(i)) for i, (vi, s) in enumerate(zip(ins, states))]
    params += [(vi.name, Type(x.type.dtype, x.type.shape[1:]), x.type.dtype) for vi, x in zip(ins[len(states):], xs)]
    body = Body(n, g, params)
    caps = _captures([body])
    outer = {c: n.frame.atom(c, n).type for c in caps}
    k = Var(Type("i64"), "k")
    ns = len(states)
    f = _scan_func(body, caps, outer, k, ns)
    trip = Lit(length, Type("i64")) if isinstance(length, int) else n.b.dim_size(dim=length)
    outs = n.b.bind(PRIMS_LOOP, [trip, *[n.frame.atom(c, n) for c in caps], *states, *xs],
                    dict(body=f, n_consts=len(caps), n_carry=ns, length=length, reverse=False))
    res = list(outs[:ns]) + [_from_front(n, y, a, d) for y, a, d in zip(outs[ns:], out_axes, out_dirs)]
    return [Val(r, None, dt) for r, dt in zip(res, body.dtypes)]


def _scan_func(body: Body, caps, outer, k: Var, ns: int) -> Func:
    caps_v = [body.frame.captured.get(c) or Var(outer[c], c_name(c)) for c in caps]
    params = [k] + caps_v + body.params
    return Func("scan_body", tuple(params), tuple(body.b.eqns), tuple(body.results))


def _to_front(n: Node, x, axis: int, reverse: int):
    axis = axis + x.type.rank if axis < 0 else axis
    if reverse:
        x = sh.flip(n.b, x, axis)
    if axis:
        perm = (axis,) + tuple(i for i in range(x.type.rank) if i != axis)
        x = n.b.transpose(x, perm=perm)
    return x


def _from_front(n: Node, y, axis: int, reverse: int):
    axis = axis + y.type.rank if axis < 0 else axis
    if axis:
        perm = tuple(range(1, axis + 1)) + (0,) + tuple(range(axis + 1, y.type.rank))
        y = n.b.transpose(y, perm=perm)
    if reverse:
        y = sh.flip(n.b, y, axis)
    return y

