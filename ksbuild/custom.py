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
