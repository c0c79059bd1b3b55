"""Random scalar kernels: if/elif/else, early returns, if-expressions, loops, helper calls and math functions,
singular ones (sqrt, log, pow, division) included, guarded and not.

Every expression that is not a lone literal reads a variable, so that in the torch oracle (where the
arguments are 0-d tensors) it is a tensor: Python would raise on 1.0 / 0.0 where a tensor gives inf.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

CONSTS = (0.5, 1.0, 2.0, -1.0, 1.5, 0.25, 3.0, -0.5)
EDGE_CONSTS = (0.0, 0.5, 1.0, -1.0, 2.0)
UNARY = ("math.exp", "math.log", "math.sqrt", "math.log1p", "math.expm1", "math.tanh", "math.sin", "math.cos",
         "math.atan", "math.fabs", "abs", "math.floor", "torch.sigmoid", "torch.relu", "math.erf")
BINARY_FN = ("math.atan2", "math.pow", "math.hypot", "min", "max", "torch.maximum", "torch.minimum")
CMP = (">", ">=", "<", "<=", "!=")


@dataclass
class ScalarKernel:
    """A generated scalar kernel: its source (with helper functions), parameter names and edge points."""

    name: str
    source: str
    params: list[str]
    edges: list[float] = field(default_factory=list)

    @property
    def base(self):
        return [() for _ in self.params], [()]

    def point(self, rng: np.random.Generator) -> list[float]:
        """One input: each argument an edge value (branch thresholds, singular points) or a random number."""
        return [float(rng.choice(self.edges)) if rng.random() < 0.45 else float(rng.normal(0.0, 1.5))
                for _ in self.params]


class _Gen:
    def __init__(self, rng: np.random.Generator, name: str):
        self.rng, self.name = rng, name
        self.lines: list[str] = []
        self.edges: set[float] = set(EDGE_CONSTS)
        self.helpers: list[str] = []
        self.count = 0

    def pick(self, items):
        return items[int(self.rng.integers(len(items)))]

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def const(self) -> str:
        return repr(self.pick(CONSTS))

    def fresh(self) -> str:
        self.count += 1
        return f"t{self.count}"

    def expr(self, names: list[str], depth: int) -> str:
        """An expression reading at least one of `names`."""
        if depth <= 0 or self.chance(0.2):
            return self.pick(names)
        kinds = ("bin", "bin", "unary", "unary", "fn2", "pow", "guard", "ifexp", "clamp", "call")
        kind = self.pick(kinds if names[0] != "a" else kinds[:-1])  # (no calls inside a helper)
        return getattr(self, "_" + kind)(names, depth - 1)

    def operand(self, names, depth) -> str:
        return self.const() if self.chance(0.3) else self.expr(names, depth)

    def _bin(self, names, depth) -> str:
        op = self.pick(("+", "-", "*", "/", "*"))
        a = self.expr(names, depth)
        b = self.operand(names, depth)
        return f"({b} {op} {a})" if self.chance(0.5) and op != "/" else f"({a} {op} {b})"

    def _unary(self, names, depth) -> str:
        fn = self.pick(UNARY)
        if fn == "math.exp" and self.chance(0.5):
            return f"math.exp(-{self.expr(names, depth)} ** 2)"
        return f"{fn}({self.expr(names, depth)})" if not self.chance(0.15) else f"-{fn}({self.expr(names, depth)})"

    def _fn2(self, names, depth) -> str:
        fn = self.pick(BINARY_FN)
        a, b = self.expr(names, depth), self.expr(names, depth)
        return f"{fn}({a}, {b})" if self.chance(0.7) or fn.startswith("torch") else f"{fn}({a}, {self.const()})"

    def _pow(self, names, depth) -> str:
        e = self.pick(("2", "3", "-1", "0.5", "1.5", "-2", "2.5"))
        return f"({self.expr(names, depth)}) ** {e}"

    def _guard(self, names, depth) -> str:
        """A singular function guarded by an if-expression: sqrt and log where positive, a quotient where nonzero."""
        a, b = self.expr(names, depth), self.expr(names, depth)
        form = self.pick(("math.sqrt({a}) if {a} > 0.0 else {b}", "math.log({a}) if {a} > 0.0 else {b}",
                          "{b} / {a} if {a} != 0.0 else {b}", "math.pow({a}, 1.5) if {a} >= 0.0 else {b}",
                          "torch.rsqrt({a}) if {a} > 0.0 else {b}"))
        return "(" + form.format(a=a, b=b) + ")"

    def _ifexp(self, names, depth) -> str:
        return f"({self.expr(names, depth)} if {self.cond(names, depth)} else {self.expr(names, depth)})"

    def _clamp(self, names, depth) -> str:
        lo = self.pick((-1.0, 0.0, -0.5))
        return f"torch.clamp({self.expr(names, depth)}, {lo}, {lo + self.pick((1.0, 2.0))})"

    def _call(self, names, depth) -> str:
        """A call of a helper function of this file (made here), sometimes with its default argument."""
        h = f"{self.name}_h{len(self.helpers)}"
        body = self.expr(["a", "b"], 2)
        self.helpers.append(f"def {h}(a: float, b: float = {self.const()}) -> float:\n    return {body}\n")
        a = self.expr(names, depth)
        return f"{h}({a})" if self.chance(0.4) else f"{h}({a}, {self.expr(names, depth)})"

    def cond(self, names, depth) -> str:
        """A comparison; one on a parameter records its threshold as an edge point."""
        c = self.pick(CONSTS + (0.0, 0.0))
        params = self.params if names[0] != "a" else ["a", "b"]
        if self.chance(0.6):
            x = self.pick(params)
            self.edges.add(c)
            left = x
        else:
            left = self.expr(names, max(depth - 1, 0))
        out = f"{left} {self.pick(CMP)} {c}"
        if self.chance(0.15):
            out = f"{out} and {self.pick(params)} {self.pick(CMP)} {self.pick(CONSTS)}"
        return out

    # ---- statements ----

    def body(self, names: list[str], indent: str, depth: int, returns_left: int) -> list[str]:
        out = []
        for _ in range(int(self.rng.integers(1, 4))):
            kind = self.pick(("assign", "assign", "if", "loop", "early") if depth > 0 else ("assign",))
            out += getattr(self, "_s_" + kind)(names, indent, depth)
        return out

    def _s_assign(self, names, indent, depth) -> list[str]:
        t = self.fresh()
        line = f"{indent}{t} = {self.expr(names, 3)}"
        names.append(t)
        return [line]

    def _s_if(self, names, indent, depth) -> list[str]:
        t = self.fresh()
        out = [f"{indent}if {self.cond(names, 2)}:", f"{indent}    {t} = {self.expr(names, 3)}"]
        for _ in range(int(self.rng.integers(0, 2))):
            out += [f"{indent}elif {self.cond(names, 2)}:", f"{indent}    {t} = {self.expr(names, 3)}"]
        out += [f"{indent}else:", f"{indent}    {t} = {self.expr(names, 3)}"]
        names.append(t)
        return out

    def _s_early(self, names, indent, depth) -> list[str]:
        return [f"{indent}if {self.cond(names, 2)}:", f"{indent}    return {self.expr(names, 3)}"]

    def _s_loop(self, names, indent, depth) -> list[str]:
        acc = self.fresh()
        start, stop = self.pick(((0, 3), (1, 4), (0, 2), (3, 0)))
        rng = f"range({start}, {stop}, -1)" if start > stop else f"range({start}, {stop})"
        out = [f"{indent}{acc} = {self.pick(names)}", f"{indent}for i in {rng}:"]
        inner = names + [acc]
        step = self.expr(inner, 2)
        decay = self.pick(("0.5", "0.25", "0.75"))
        out.append(f"{indent}    {acc} = {decay} * {acc} + {step} * i" if self.chance(0.5)
                   else f"{indent}    {acc} = {decay} * {acc} + math.tanh({step})")
        if self.chance(0.3):
            out += [f"{indent}    if {acc} > {self.const()}:", f"{indent}        {acc} = {acc} * 0.5"]
        names.append(acc)
        return out


def scalar_kernel(rng: np.random.Generator, name: str) -> ScalarKernel:
    """A random scalar kernel named `name` with 1 to 3 float parameters and one float result."""
    g = _Gen(rng, name)
    g.params = [f"x{k}" for k in range(int(rng.integers(1, 4)))]
    names = list(g.params)
    lines = g.body(names, "    ", 1, 1)
    lines.append(f"    return {g.expr(names, 3)}")
    sig = ", ".join(f"{p}: float" for p in g.params)
    source = "".join(h + "\n\n" for h in g.helpers) + f"def {name}({sig}) -> float:\n" + "\n".join(lines) + "\n"
    return ScalarKernel(name, source, g.params, sorted(g.edges))
