"""Decorators on kernels: those of ksbuild's dev loop are accepted, others are located errors.

`@ksbuild.kernel` and `@ksbuild.vmap` (and the Knossos names `@ksbuild.register`, `@ksbuild.elementwise`,
so that `import ksbuild as knossos` keeps `@knossos.elementwise` code as it was) make the function a
ksbuild.Kernel in Python; ksbuild compiles the function under them as written, and the manifest (or the dev
loop) says which transformation to apply. Another kernel of the file calling a mapped one would, in Python,
call the mapped function: that call is refused (mapped_by_decorator).
"""
from __future__ import annotations

import ast

PLAIN = {"kernel", "register"}  # the function itself
MAPPED = {"vmap", "elementwise"}  # the function mapped over tensors
CUSTOM = {"custom_jvp", "custom_vjp"}  # the function with derivative rules the user wrote (custom_rules.py)
EXTERN = {"extern"}  # an external C function: `@ksbuild.extern(sources=[...], c_name=...)` (externs.py)


def dev_decorator(src, d: ast.expr) -> str | None:
    """The name of a ksbuild dev-loop decorator (kernel, vmap, register, elementwise), or None if `d` is not one:
    `@ksbuild.vmap` or `@kb.vmap` after `import ksbuild as kb`, or `@vmap` after `from ksbuild import vmap`; the
    call `@ksbuild.extern(...)` is "extern"."""
    if isinstance(d, ast.Call):
        return "extern" if dev_decorator(src, d.func) in EXTERN else None
    if isinstance(d, ast.Attribute) and isinstance(d.value, ast.Name) and src.foreign.get(d.value.id) == "ksbuild":
        name = d.attr
    elif isinstance(d, ast.Name) and src.borrowed.get(d.id) == "ksbuild":
        name = d.id
    else:
        return None
    return name if name in PLAIN | MAPPED | CUSTOM | EXTERN else None


def check_decorators(src, fn: ast.FunctionDef) -> None:
    """A located error for a decorator that is not one of ksbuild's dev loop (or `@f.defjvp`)."""
    from .custom_rules import rule_decorator
    for d in fn.decorator_list:
        if dev_decorator(src, d) is None and rule_decorator(src, d) != "defjvp":
            raise src.error(d, f"unsupported decorator '@{ast.unparse(d)}' on the kernel '{fn.name}'",
                            hint="kernels take ksbuild's decorators only: @ksbuild.kernel, @ksbuild.vmap, "
                                 "@ksbuild.custom_jvp, @ksbuild.custom_vjp, @ksbuild.extern(...), @f.defjvp and the "
                                 "Knossos names "
                                 "@ksbuild.register, @ksbuild.elementwise (for Knossos code: import "
                                 "ksbuild as knossos); or remove it and apply the transformation in the manifest")


def mapped_by_decorator(src, fn: ast.FunctionDef) -> ast.expr | None:
    """The @ksbuild.vmap / @ksbuild.elementwise decorator of fn, if it has one."""
    return next((d for d in fn.decorator_list if dev_decorator(src, d) in MAPPED), None)
