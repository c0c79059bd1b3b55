"""Functions of a kernel file with derivative rules the user wrote, as in JAX (ksbuild.custom_jvp / custom_vjp).

    @ksbuild.custom_jvp                      @ksbuild.custom_vjp
    def f(x: float) -> float: ...            def g(x: float) -> float: ...
    @f.defjvp                                def g_fwd(x: float): return g(x), r      # results, then residuals
    def f_jvp(x: float, dx: float):          def g_bwd(r: float, ct: float): return ct * r
        return f(x), dx * ...                g.defvjp(g_fwd, g_bwd)

The arguments are flat (ksbuild's jvp and vjp exports take them so): a jvp rule takes f's arguments then one
tangent per float argument and returns f's results then one tangent per float result; fwd takes f's arguments
and returns f's results then any residuals; bwd takes the residuals then one cotangent per float result and
returns one cotangent per float argument. A call of f becomes a custom_jvp / custom_vjp equation carrying f's
body and its rules (prims/custom.py); inside its own rules, f is its plain body.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

from ...errors import KsbuildError
from ...ir.builder import Builder
from ...ir.core import Func, Var
from .decorators import CUSTOM, EXTERN, dev_decorator

ATTACH = {"defjvp": "custom_jvp", "defvjp": "custom_vjp"}  # the method that gives a custom function its rules
SHAPES = {"custom_jvp": "f's arguments, then one tangent per float argument",
          "fwd": "f's arguments", "bwd": "the residuals fwd returns, then one cotangent per float result of f"}


@dataclass(frozen=True)
class Rule:
    """The rules of one custom function: its kind (custom_jvp or custom_vjp) and the rule functions' names."""

    kind: str
    fns: tuple[str, ...]
    where: ast.AST  # the decorator or statement that attached them


def collect_rules(src) -> dict[str, Rule]:
    """name -> Rule for the custom functions of a parsed file; located errors for rules that do not fit."""
    kinds = {name: (k, d) for name, fn in src.functions.items() for d in fn.decorator_list
             if (k := dev_decorator(src, d)) in CUSTOM | EXTERN}
    rules: dict[str, Rule] = {}
    for name, fn in src.functions.items():
        for d in fn.decorator_list:
            if rule_decorator(src, d) is not None:
                _attach(src, kinds, rules, d, (name,))
    for node in src.tree.body:
        call = node.value if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) else None
        if call is not None and rule_decorator(src, call.func) is not None:
            _attach(src, kinds, rules, call.func, _rule_names(src, call))
    for name, (kind, d) in kinds.items():
        if name not in rules and kind in CUSTOM:  # (an extern's rule is optional)
            how = f"@{name}.defjvp on its jvp rule" if kind == "custom_jvp" else f"{name}.defvjp({name}_fwd, " \
                                                                               f"{name}_bwd) after the rules"
            raise src.error(d, f"'{name}' is declared {kind} but given no rule", hint=f"add {how}")
    return rules


def rule_decorator(src, d: ast.expr) -> str | None:
    """'defjvp' or 'defvjp' for `f.defjvp` / `f.defvjp` with f a function of the file, else None."""
    if isinstance(d, ast.Attribute) and d.attr in ATTACH and isinstance(d.value, ast.Name) \
            and d.value.id in src.functions:
        return d.attr
    return None


def _rule_names(src, call: ast.Call) -> tuple[str, ...]:
    """The function names passed to f.defjvp(...) / f.defvjp(...)."""
    want = 1 if call.func.attr == "defjvp" else 2
    names = [a.id for a in call.args if isinstance(a, ast.Name) and a.id in src.functions]
    if len(call.args) != want or len(names) != want or call.keywords:
        shown = "f.defjvp(f_jvp)" if want == 1 else "f.defvjp(f_fwd, f_bwd)"
        raise src.error(call, f"{call.func.attr} takes {want} function(s) of this file by name: {shown}")
    return tuple(names)


def _attach(src, kinds, rules, d: ast.Attribute, fns: tuple[str, ...]) -> None:
    """Record the rules `fns` of the function d.value names (f.defjvp / f.defvjp)."""
    name, kind = d.value.id, ATTACH[d.attr]
    if name not in kinds or kinds[name][0] not in (kind, "extern"):
        raise src.error(d, f"'{d.attr}' gives a {kind} rule, but '{name}' is not decorated with @ksbuild.{kind}",
                        hint=f"decorate '{name}' with @ksbuild.{kind}")
    if name in rules:
        raise src.error(d, f"'{name}' already has its rules (from line {rules[name].where.lineno})")
    rules[name] = Rule(kind, fns, d)


# ---- building the equation ---------------------------------------------------------------------

def bind_custom(kc, b: Builder, name: str, fn: Func, atoms, node: ast.AST) -> tuple[Var, ...]:
    """Bind a call of the custom function `name` (body fn) with its rules compiled for fn's types."""
    from ...prims import PRIMS

    rule = kc.src.custom[name]
    kc.rule_of.append(name)  # (inside its rules, `name` is its plain body)
    try:
        params = _jvp_params(kc, rule, fn) if rule.kind == "custom_jvp" else _vjp_params(kc, rule, fn)
    finally:
        kc.rule_of.pop()
    return b.bind(PRIMS[rule.kind], atoms, params)


def wrap_entry(kc, name: str, fn: Func) -> Func:
    """The kernel `name` itself, if it has rules: one custom equation over its body (so transformations of the
    export use them)."""
    if name not in kc.src.custom:
        return fn
    b = Builder(kc.src.loc(kc.src.functions[name]))
    params = [Var(p.type, p.hint) for p in fn.params]
    outs = bind_custom(kc, b, name, fn, params, kc.src.functions[name])
    return b.func(fn.name, params, list(outs), fn.result_names)


def _floats(types) -> list:
    return [t for t in types if t.is_float]


def _jvp_params(kc, rule: Rule, fn: Func) -> dict:
    want_out = list(fn.out_types) + _floats(fn.out_types)
    jvp = _compile_rule(kc, rule.fns[0], fn, list(fn.in_types) + _floats(fn.in_types), "custom_jvp")
    _check_results(kc, rule.fns[0], jvp, want_out, "f's results, then one tangent per float result")
    return {"fn": fn, "rule": jvp}


def _vjp_params(kc, rule: Rule, fn: Func) -> dict:
    fwd = _compile_rule(kc, rule.fns[0], fn, list(fn.in_types), "fwd")
    n = len(fn.results)
    _check_results(kc, rule.fns[0], fwd, list(fn.out_types) + list(fwd.out_types[n:]),
                   "f's results, then the residuals bwd reads")
    bwd = _compile_rule(kc, rule.fns[1], fn, list(fwd.out_types[n:]) + _floats(fn.out_types), "bwd")
    _check_results(kc, rule.fns[1], bwd, _floats(fn.in_types), "one cotangent per float argument of f")
    return {"fn": fn, "fwd": fwd, "bwd": bwd}


def _compile_rule(kc, rule_name: str, fn: Func, types: list, role: str) -> Func:
    """The rule function compiled for the types it must take; its arity is checked first."""
    node = kc.src.functions[rule_name]
    got = len(node.args.args)
    if got != len(types):
        raise kc.src.error(node, f"the {_role(role)} '{rule_name}' of '{fn.name}' takes {got} argument(s), but it "
                                 f"must take {len(types)}: {SHAPES[role]} ({_shown(types)})")
    return kc.compile(rule_name, types)


def _check_results(kc, rule_name: str, rule: Func, want: list, what: str) -> None:
    if list(rule.out_types) != want:
        node = kc.src.functions[rule_name]
        raise kc.src.error(node.returns or node, f"'{rule_name}' returns ({_shown(rule.out_types)}), but this rule "
                                                 f"must return {what}: ({_shown(want)})")


def _role(role: str) -> str:
    return {"custom_jvp": "jvp rule", "fwd": "forward rule", "bwd": "backward rule"}[role]


def _shown(types) -> str:
    return ", ".join(map(str, types))


def no_static_args(kc, name: str, node: ast.AST) -> KsbuildError:
    """The error for a custom function called with dims or unannotated constants (its rules take values)."""
    return kc.src.error(node, f"'{name}' has a custom derivative and is called with a dim or a constant for an "
                              "unannotated parameter", hint=f"annotate the parameters of '{name}' and its rules")
