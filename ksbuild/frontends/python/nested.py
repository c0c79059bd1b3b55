"""Derivatives inside a kernel (nested AD): `torch.func.grad(helper, argnums=...)(args)` and
`torch.func.jvp(helper, (primals...), (tangents...))`, where helper is a function of the kernel's file.

The helper is compiled for the arguments' types as any call of it is, then transformed as the manifest's
`grad` and `jvp` transform a kernel (transforms/vjp.py grad_func, transforms/jvp.py jvp_func), and the kernel
calls the result. A derivative of that kernel differentiates the call like any other (second order: the
particle and saddle evals of GradBench optimise functions whose values are found by gradient descent).
"""
from __future__ import annotations

import ast

from ...errors import KsbuildError
from ...ir.builder import Builder

TRANSFORMS = ("grad", "jvp")


def func_transform(fc, f: ast.expr) -> str | None:
    """'grad' or 'jvp' if f names torch.func.grad or torch.func.jvp, else None."""
    if isinstance(f, ast.Attribute) and f.attr in TRANSFORMS and isinstance(f.value, ast.Attribute) \
            and f.value.attr == "func" and fc.module_of(f.value.value) == "torch":
        return f.attr
    return None


def helper_name(fc, e: ast.Call, kind: str) -> str:
    """The name of the function a torch.func transform is applied to (a function of the kernel's file)."""
    if not e.args or not isinstance(e.args[0], ast.Name) or e.args[0].id not in fc.src.functions:
        raise fc.src.error(e, f"torch.func.{kind} of something other than a function of this file",
                           hint=f"torch.func.{kind}(helper, ...) with `def helper(...)` in {fc.src.path.name}")
    return e.args[0].id


def argnums_of(fc, e: ast.Call) -> int | tuple[int, ...]:
    """torch.func.grad's argnums (0 by default): an int or a tuple of ints, written as literals."""
    nodes = e.args[1:2] + [k.value for k in e.keywords if k.arg == "argnums"]
    others = [k for k in e.keywords if k.arg != "argnums"] + e.args[2:]
    if others:
        raise fc.src.error(others[0], "torch.func.grad takes the function and argnums (has_aux is not supported)")
    if not nodes:
        return 0
    try:
        value = ast.literal_eval(nodes[0])
    except ValueError:
        value = None
    ints = (value,) if type(value) is int else value
    if not isinstance(ints, tuple) or not ints or any(type(i) is not int or i < 0 for i in ints):
        raise fc.src.error(nodes[0], "argnums must be a literal int >= 0 or a tuple of them")
    return value


def compiled_helper(fc, b: Builder, name: str, args: list, node: ast.AST) -> tuple:
    """(the helper's Func for these arguments, the arguments as atoms)."""
    fn = fc.src.functions[name]
    if len(args) != len(fn.args.args):
        raise fc.src.error(node, f"'{name}' takes {len(fn.args.args)} arguments, {len(args)} given")
    types = [fc.arg_type(a, p, node) for a, p in zip(args, fn.args.args)]
    return fc.compile(name, types), [fc.as_atom(b, a, t, node) for a, t in zip(args, types)]


def bind_transformed(b: Builder, func, atoms: list) -> list:
    """The call of a transformed helper."""
    from ...prims.control import call_params
    from .expressions import _prim
    return list(b.bind(_prim("call"), atoms, call_params(func)))


def call_grad(fc, b: Builder, scope, e: ast.Call) -> object:
    """torch.func.grad(helper, argnums)(args): the gradient (a tuple of them for a tuple argnums)."""
    from ...transforms.vjp import grad_func
    inner = e.func
    name, argnums = helper_name(fc, inner, "grad"), argnums_of(fc, inner)
    if e.keywords or any(isinstance(a, ast.Starred) for a in e.args):
        raise fc.src.error(e, "call the gradient with positional arguments")
    func, atoms = compiled_helper(fc, b, name, [fc.arg(b, scope, a) for a in e.args], e)
    try:
        grad = grad_func(func, argnums=(argnums,) if type(argnums) is int else argnums)
    except KsbuildError as err:
        raise err.at(fc.src.loc(e)) from None
    outs = bind_transformed(b, grad, atoms)
    return outs[0] if type(argnums) is int else tuple(outs)


def call_jvp(fc, b: Builder, scope, e: ast.Call) -> tuple:
    """torch.func.jvp(helper, (primals...), (tangents...)): (helper's result, its tangent), every primal a float."""
    from ...transforms.jvp import jvp_func
    name = helper_name(fc, e, "jvp")
    if len(e.args) != 3 or e.keywords or not all(isinstance(a, ast.Tuple) for a in e.args[1:]) \
            or len(e.args[1].elts) != len(e.args[2].elts):
        raise fc.src.error(e, "torch.func.jvp(helper, (primals...), (tangents...)): two tuples of one length")
    primals = [fc.arg(b, scope, a) for a in e.args[1].elts]
    func, atoms = compiled_helper(fc, b, name, primals, e)
    if not all(p.type.is_float for p in func.params):
        raise fc.src.error(e.args[1], "torch.func.jvp differentiates every primal: each must be a float")
    tangents = [fc.as_atom(b, fc.arg(b, scope, a), p.type, a) for a, p in zip(e.args[2].elts, func.params)]
    outs = bind_transformed(b, jvp_func(func), atoms + tangents)
    n = len(outs) // 2
    return (outs[0], outs[1]) if n == 1 else (tuple(outs[:n]), tuple(outs[n:]))
