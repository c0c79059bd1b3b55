"""ksbuild's own custom ops inside an exported model: a dev-loop kernel used as a layer
(`ksbuild.vmap(relu3).nnModule()`) appears in the graph as `ksbuild_<package>.<export>`.

The op's package (loaded in this process) names the export's transformation expression and
ships its manifest; the kernel is compiled again from it, the expression applied, its dims
renamed to the ones at the call site, and its body inlined into the model's function, so the
model's derivatives go through the kernel's code like through any other op.
"""
from __future__ import annotations

from typing import Any

from ...ir.builder import inline
from ...ir.core import Atom, Eqn, Func, Lit, Var, freeze
from ...ir.types import Dim, Type, dim_add, dim_floordiv, dim_mul, dim_sub
from .node import Node

DIM_PARAMS = ("shape", "start", "stop", "lo", "hi", "n", "dim", "length")
"""Equation params that may hold dims (broadcast_to/reshape/iota shape, slice bounds, pad widths,
fold's n, dim_size's dim, loop's length): the ones a dim renaming rewrites."""


def is_ksbuild_op(target) -> bool:
    """True for the custom ops ksbuild defines for a loaded package's exports."""
    return str(getattr(target, "namespace", "")).startswith("ksbuild_")


def ksbuild_op(n: Node):
    """The kernel behind a ksbuild custom op, inlined with the call site's dims."""
    package, export = _package_export(n)
    f = _export_func(n, package, export)
    tensors = [a for a in n.args if isinstance(a, (Var, Lit))]
    free = next((a for a in n.args if isinstance(a, (list, tuple))), [])
    mapping = _bind(n, f, tensors, dict(zip(package.exports[export].free_dims, free)))
    outs = inline(n.b, rename_dims(f, mapping), tensors)
    return outs[0] if len(outs) == 1 else tuple(outs)


def _package_export(n: Node):
    from ...packaging import torch_ops
    target = n.node.target
    ops = torch_ops._PACKAGES.get(target.namespace)
    if ops is None:
        raise n.error(f"the ksbuild op {target.namespace}.{target._opname} belongs to a package that is not loaded "
                      "in this process")
    return ops.package, target._opname


def _export_func(n: Node, package, export: str) -> Func:
    """The IR of the export's expression, compiled from the package's installed manifest (by the caller's
    compile_export: exports.package_export)."""
    if n.imp.compile_export is None:
        raise n.error(f"{n.op}: a ksbuild op inside a model is compiled from its package's manifest, which this "
                      "import was not given", hint="compile the model through a manifest (ksbuild package)")
    return n.imp.compile_export(package, export, n.op, n.loc)


def _bind(n: Node, f: Func, args: list[Atom], given: dict[str, Any]) -> dict[str, Dim]:
    """The callee's dim names -> the call site's dims, from its parameters' shapes."""
    if len(args) != len(f.params):
        raise n.error(f"{n.op} takes {len(f.params)} tensors, got {len(args)}")
    mapping: dict[str, Dim] = {k: v for k, v in given.items()}
    for p, a in zip(f.params, args):
        if p.type.dtype != a.type.dtype or p.type.rank != a.type.rank:
            raise n.error(f"{n.op}: argument '{p.hint}' is {p.type}, got {a.type}")
        for mine, theirs in zip(p.type.shape, a.type.shape):
            if isinstance(mine, str) and mine.isidentifier():
                mapping.setdefault(mine, theirs)
    for p, a in zip(f.params, args):
        if rename_type(p.type, mapping) != a.type:
            raise n.error(f"{n.op}: argument '{p.hint}' must be {rename_type(p.type, mapping)}, got {a.type}")
    return mapping


# ---- renaming dims ---------------------------------------------------------------------------------------

def rename_dim(d: Dim, mapping: dict[str, Dim]) -> Dim:
    """A dim expression with its names replaced by dims (evaluated with the dim arithmetic)."""
    if isinstance(d, int):
        return d
    import ast
    return _eval(ast.parse(d, mode="eval").body, mapping)


def _eval(e, mapping: dict[str, Dim]) -> Dim:
    import ast
    if isinstance(e, ast.Constant):
        return int(e.value)
    if isinstance(e, ast.Name):
        return mapping.get(e.id, e.id)
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        return dim_sub(0, _eval(e.operand, mapping))
    ops = {ast.Add: dim_add, ast.Sub: dim_sub, ast.Mult: dim_mul, ast.FloorDiv: dim_floordiv}
    if isinstance(e, ast.BinOp) and type(e.op) in ops:
        return ops[type(e.op)](_eval(e.left, mapping), _eval(e.right, mapping))
    raise ValueError(f"bad dim expression {ast.unparse(e)}")


def rename_type(t: Type, mapping: dict[str, Dim]) -> Type:
    return Type(t.dtype, tuple(rename_dim(d, mapping) for d in t.shape))


def rename_dims(f: Func, mapping: dict[str, Dim]) -> Func:
    """f with every symbolic dim renamed through mapping (types, literals, dim params, sub-functions)."""
    env: dict[Var, Var] = {}

    def var(v: Var) -> Var:
        if v not in env:
            env[v] = Var(rename_type(v.type, mapping), v.hint)
        return env[v]

    def atom(a: Atom) -> Atom:
        return var(a) if isinstance(a, Var) else Lit(a.value, rename_type(a.type, mapping))

    eqns = tuple(Eqn(e.prim, tuple(atom(a) for a in e.ins), tuple(var(v) for v in e.outs),
                     freeze({k: _param(k, v, mapping) for k, v in e.params.items()}), e.loc) for e in f.eqns)
    return Func(f.name, tuple(var(p) for p in f.params), eqns, tuple(atom(r) for r in f.results), f.result_names)


def _param(key: str, value, mapping: dict[str, Dim]):
    if isinstance(value, Func):
        return rename_dims(value, mapping)
    if key not in DIM_PARAMS:
        return value
    if isinstance(value, tuple):
        return tuple(rename_dim(d, mapping) if isinstance(d, (int, str)) else d for d in value)
    return rename_dim(value, mapping) if isinstance(value, str) else value
