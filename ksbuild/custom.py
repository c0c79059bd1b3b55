"""ksbuild.custom_jvp / ksbuild.custom_vjp in Python: what the decorators do when the kernel file runs as Python.

ksbuild reads the decorators from the source (frontends/python/custom_rules.py); when the same file runs as Python the
decorated function is called as written, and torch's autograd uses the rule too: a custom_vjp function through
its fwd and bwd, a custom_jvp function through the rule's tangent map, which is linear, transposed by torch.
"""
from __future__ import annotations

import functools
from typing import Callable


class custom_jvp:  # noqa: N801 - the name of the decorator, as in JAX
    """A function whose jvp rule the user writes: `@f.defjvp def f_jvp(*args, *tangents) -> (*outs, *douts)`."""

    def __init__(self, fun: Callable):
        self.fun, self.jvp = fun, None
        functools.update_wrapper(self, fun)

    def defjvp(self, jvp: Callable) -> Callable:
        """Set the jvp rule: f's arguments then one tangent per float argument -> f's results then their tangents."""
        self.jvp = jvp
        return jvp

    def __call__(self, *args):
        if self.jvp is None or not _needs_grad(args):
            return self.fun(*args)
        return _apply(self.fun, _backward_of_jvp(self.jvp), args)


class custom_vjp:  # noqa: N801 - the name of the decorator, as in JAX
    """A function whose vjp the user writes: `f.defvjp(f_fwd, f_bwd)`."""

    def __init__(self, fun: Callable):
        self.fun, self.fwd, self.bwd = fun, None, None
        functools.update_wrapper(self, fun)

    def defvjp(self, fwd: Callable, bwd: Callable) -> None:
        """fwd(*args) -> (*outs, *residuals); bwd(*residuals, *cotangents) -> one cotangent per float argument."""
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, *args):
        if self.fwd is None or not _needs_grad(args):
            return self.fun(*args)
        return _apply_vjp(self, args)


def _needs_grad(args) -> bool:
    return any(getattr(a, "requires_grad", False) for a in args)


def _tuple(x) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _backward_of_jvp(jvp: Callable) -> Callable:
    """bwd(args, cts) of a jvp rule: the vjp of its tangent map t -> jvp(args, t)[tangents], which is linear."""
    import torch

    def bwd(args, cts):
        floats = [a for a in args if torch.is_tensor(a) and a.is_floating_point()]
        ts = [torch.zeros_like(a, requires_grad=True) for a in floats]
        with torch.enable_grad():
            outs = _tuple(jvp(*[a.detach() if torch.is_tensor(a) else a for a in args], *ts))
            touts = outs[len(outs) - len(cts):]
            return torch.autograd.grad(touts, ts, cts, allow_unused=True)
    return bwd


def _apply(fun: Callable, bwd: Callable, args):
    """fun(*args) under autograd with bwd(args, cts) -> cotangents of the float tensor arguments."""
    import torch

    class Rule(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *xs):
            ctx.xs = xs
            return fun(*xs)

        @staticmethod
        def backward(ctx, *cts):
            it = iter(bwd(ctx.xs, cts))
            return tuple(next(it) if torch.is_tensor(x) and x.is_floating_point() else None for x in ctx.xs)

    return Rule.apply(*args)


def _apply_vjp(f: custom_vjp, args):
    n_out = len(_tuple(f.fun(*[a.detach() if hasattr(a, "detach") else a for a in args])))

    def bwd(xs, cts):
        res = _tuple(f.fwd(*[x.detach() if hasattr(x, "detach") else x for x in xs]))[n_out:]
        return _tuple(f.bwd(*res, *cts))
    return _apply(f.fun, bwd, args)


def extern(sources=(), c_name: str | None = None):
    """`@ksbuild.extern(sources=["bessel.c"], c_name="j0")`: an external C function (Knossos's edef). ksbuild compiles
    a call of it into a call of the C function `c_name` (default: the Python name) defined in `sources` (files next
    to the kernel file; none: the app links it); run as Python, the function's own body runs. Derivatives: an
    optional rule, `@f.defjvp` or `f.defvjp(fwd, bwd)`, as for custom_jvp / custom_vjp. (`@ksbuild.extern` without
    a call: no sources.)"""
    if callable(sources):
        return Extern(sources, (), None)
    return lambda fun: Extern(fun, tuple(sources), c_name)


class Extern:
    """An external C function run as Python: its body, with the rule a custom_jvp / custom_vjp has once one is given."""

    def __init__(self, fun: Callable, sources: tuple, c_name: str | None):
        self.fun, self.rule = fun, None
        self.sources, self.c_name = sources, c_name or fun.__name__
        functools.update_wrapper(self, fun)

    def defjvp(self, jvp: Callable) -> Callable:
        """Set the jvp rule (as custom_jvp.defjvp)."""
        self.rule = custom_jvp(self.fun)
        return self.rule.defjvp(jvp)

    def defvjp(self, fwd: Callable, bwd: Callable) -> None:
        """Set the forward and backward rules (as custom_vjp.defvjp)."""
        self.rule = custom_vjp(self.fun)
        self.rule.defvjp(fwd, bwd)

    def __call__(self, *args):
        return (self.rule or self.fun)(*args)
