"""Random small tensor kernels: elementwise torch functions, broadcasting, reductions, matrix products,
indexing and slicing, `if` on a reduced scalar, loops over an axis.

Values are typed by their shape over the dims n and m: (), (n,), (m,), (m, n).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

S, N, M, MN = (), ("n",), ("m",), ("m", "n")
PARAM_SHAPES = {"x": N, "y": N, "u": M, "W": MN, "s": S}
UNARY = ("torch.exp", "torch.tanh", "torch.sin", "torch.cos", "torch.sigmoid", "torch.relu", "torch.abs",
         "torch.sqrt", "torch.log", "torch.square", "torch.log1p", "torch.expm1", "torch.atan",
         "F.softplus", "F.gelu", "F.silu", "F.elu", "torch.erf", "torch.rsqrt", "F.leaky_relu")
CONSTS = ("0.5", "1.0", "2.0", "-1.0", "0.25", "1.5")


@dataclass
class TensorKernel:
    """A generated tensor kernel: its source, parameters (name, shape over dims), result shapes, dim sizes."""

    name: str
    source: str
    params: list[tuple[str, tuple]]
    results: list[tuple]
    dims: dict[str, int]

    def shape(self, s: tuple) -> tuple[int, ...]:
        return tuple(self.dims[d] for d in s)

    @property
    def base(self):
        return [self.shape(s) for _, s in self.params], [self.shape(s) for s in self.results]

    def point(self, rng: np.random.Generator) -> list[np.ndarray]:
        """One input: random numbers, some set to the edges 0, 1, -1 (sqrt, log, relu, abs kinks)."""
        out = []
        for _, s in self.params:
            a = rng.normal(0.0, 1.0, self.shape(s))
            mask = rng.random(a.shape) < 0.2
            a = np.where(mask, rng.choice([0.0, 1.0, -1.0], a.shape), a)
            out.append(np.asarray(a, dtype=np.float64))
        return out


class _Gen:
    def __init__(self, rng: np.random.Generator, env: dict[str, tuple]):
        self.rng, self.env, self.count = rng, env, 0
        have = set(env.values())
        self.shapes = [S] + [s for s in (N, M) if s in have or MN in have] + ([MN] if MN in have else [])

    def shape(self, among=(S, N, M, MN)) -> tuple:
        return self.pick([s for s in among if s in self.shapes])

    def pick(self, items):
        return items[int(self.rng.integers(len(items)))]

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def fresh(self) -> str:
        self.count += 1
        return f"t{self.count}"

    def leaf(self, shape: tuple) -> str:
        names = [k for k, s in self.env.items() if s == shape]
        if shape == S:
            vec = [k for k, s in self.env.items() if s in (N, M)]
            names += [f"{v}[{self.pick(('0', '-1', '1'))}]" for v in vec]
            names += [f"{k}[1, 0]" for k, s in self.env.items() if s == MN]
        if shape == N:
            names += [f"{k}[{self.pick(('0', '-1'))}]" for k, s in self.env.items() if s == MN]
        if shape == M:
            names += [f"{k}[:, {self.pick(('0', '-1'))}]" for k, s in self.env.items() if s == MN]
        if not names:
            return self.pick(CONSTS)
        return self.pick(names)

    def expr(self, shape: tuple, depth: int) -> str:
        if depth <= 0 or self.chance(0.15):
            return self.leaf(shape)
        kind = self.pick(("bin", "bin", "unary", "unary", "reduce", "reduce", "where", "max", "pow", "guard"))
        return getattr(self, "_" + kind)(shape, depth - 1)

    def _bin(self, shape, depth) -> str:
        op = self.pick(("+", "-", "*", "/", "*", "+"))
        a = self.expr(shape, depth)
        small = self.shape([s for s in (S, N, M, MN) if s == shape or s == S or (shape == MN and s != S)])
        if small == S and self.chance(0.4):
            b = self.pick(CONSTS)
        else:
            b = self.expr(small, depth)
            b = f"({b})[:, None]" if shape == MN and small == M else b
        return f"({a} {op} {b})" if self.chance(0.6) or op == "/" else f"({b} {op} {a})"

    def _unary(self, shape, depth) -> str:
        fn = self.pick(UNARY)
        return f"{fn}({self.expr(shape, depth)})"

    def _pow(self, shape, depth) -> str:
        return f"({self.expr(shape, depth)}) ** {self.pick(('2', '3', '0.5', '-1', '1.5'))}"

    def _where(self, shape, depth) -> str:
        c = f"{self.expr(shape, depth)} > {self.pick(('0.0', '0.5', '-1.0'))}"
        return f"torch.where({c}, {self.expr(shape, depth)}, {self.expr(shape, depth)})"

    def _max(self, shape, depth) -> str:
        fn = self.pick(("torch.maximum", "torch.minimum"))
        if self.chance(0.3):
            return f"torch.clamp({self.expr(shape, depth)}, min={self.pick(('-1.0', '0.0'))}, max=1.0)"
        return f"{fn}({self.expr(shape, depth)}, {self.expr(shape, depth)})"

    def _guard(self, shape, depth) -> str:
        if shape != S:
            return f"torch.sqrt({self.expr(shape, depth)} ** 2 + 1.0)"
        a, b = self.expr(S, depth), self.expr(S, depth)
        return self.pick((f"(torch.sqrt({a}) if {a} > 0.0 else {b})", f"({b} / {a} if {a} != 0.0 else {b})",
                          f"(torch.log({a}) if {a} > 0.0 else {b})"))

    def _reduce(self, shape, depth) -> str:
        forms = {
            S: [("sum", N), ("mean", N), ("amax", N), ("lse", N), ("dot", N), ("sum", MN), ("norm", N),
                ("max", M), ("prod", N)],
            N: [("sum0", MN), ("mean0", MN), ("softmax", N), ("cumsum", N), ("flip", N), ("mTv", MN),
                ("lse0", MN), ("roll", N)],
            M: [("mv", MN), ("sum1", MN), ("amax1", MN), ("softmax", M), ("cumsum", M)],
            MN: [("outer", MN), ("softmax1", MN), ("log_softmax1", MN), ("rowscale", MN)],
        }[shape]
        forms = [(w, s) for w, s in forms if s in self.shapes and (w not in ("mTv", "outer") or M in self.shapes)
                 and (w not in ("dot", "mv", "rowscale", "outer") or N in self.shapes)]
        if not forms:
            return self.leaf(shape)
        what, src = self.pick(forms)
        a = self.expr(src, depth)
        return {
            "sum": f"torch.sum({a})", "mean": f"({a}).mean()", "amax": f"torch.amax({a}, dim=0)",
            "lse": f"torch.logsumexp({a}, dim=0)", "dot": f"torch.dot({a}, {self.expr(N, depth)})",
            "norm": f"torch.sqrt(torch.sum({a} ** 2))", "max": f"({a}).max()", "prod": f"torch.prod({a})",
            "sum0": f"({a}).sum(0)", "mean0": f"torch.mean({a}, dim=0)", "softmax": f"torch.softmax({a}, dim=0)",
            "cumsum": f"torch.cumsum({a}, dim=0)", "flip": f"torch.flip({a}, dims=(0,))",
            "mTv": f"(({a}).T @ {self.expr(M, depth)})", "lse0": f"torch.logsumexp({a}, dim=0)",
            "roll": f"torch.cat([({a})[1:], ({a})[:1]])", "mv": f"({a} @ {self.expr(N, depth)})",
            "sum1": f"({a}).sum(dim=1)", "amax1": f"({a}).amax(dim=1)",
            "outer": f"torch.outer({self.expr(M, depth)}, {self.expr(N, depth)})",
            "softmax1": f"torch.softmax({a}, dim=1)", "log_softmax1": f"F.log_softmax({a}, dim=1)",
            "rowscale": f"({a} * ({self.expr(N, depth)})[None, :])",
        }[what]

    # ---- statements ----

    def statement(self) -> list[str]:
        kind = self.pick(("assign", "assign", "if", "loop", "early"))
        return getattr(self, "_s_" + kind)()

    def _s_assign(self) -> list[str]:
        shape = self.shape()
        t = self.fresh()
        line = f"    {t} = {self.expr(shape, 3)}"
        self.env[t] = shape
        return [line]

    def _s_if(self) -> list[str]:
        shape, t = self.shape((S, N, M)), self.fresh()
        cond = self.expr(S, 2)
        cut = self.pick(("0.0", "0.5", "-0.5"))
        out = [f"    if {cond} > {cut}:", f"        {t} = {self.expr(shape, 2)}"]
        if self.chance(0.4):
            out += [f"    elif {self.expr(S, 2)} < 0.0:", f"        {t} = {self.expr(shape, 2)}"]
        out += ["    else:", f"        {t} = {self.expr(shape, 2)}"]
        self.env[t] = shape
        return out

    def _s_early(self) -> list[str]:
        return []  # set by the kernel: an early return needs the result shapes

    def _s_loop(self) -> list[str]:
        shape, acc = self.shape((S, N)), self.fresh()
        dim = self.pick([d for d in ("n", "m") if (d,) in self.shapes] or ["n"])
        vec = [k for k, s in self.env.items() if s == (dim,)]
        if (dim,) not in self.shapes:
            return self._s_assign()
        out = [f"    {acc} = {self.expr(shape, 1)}", f"    for i in range({dim}):"]
        self.env[acc] = shape
        inner = f"{self.pick(vec)}[i]" if vec else "1.0"
        out.append(f"        {acc} = 0.5 * {acc} + torch.tanh({self.expr(shape, 1)} * {inner})")
        return out


def tensor_kernel(rng: np.random.Generator, name: str) -> TensorKernel:
    """A random tensor kernel named `name`: 1 to 3 parameters over dims n and m, one or two results."""
    names = list(rng.choice(list(PARAM_SHAPES), size=int(rng.integers(1, 4)), replace=False))
    if all(PARAM_SHAPES[p] == S for p in names):
        names.append("x")
    params = [(str(p), PARAM_SHAPES[p]) for p in names]
    g = _Gen(rng, dict(params))
    lines = [f"    n, m = {_dims_line(params)}"] if _dims_line(params) else []
    results = [g.shape((S, S, N, M))] + ([g.shape((S, N))] if g.chance(0.2) else [])
    for _ in range(int(rng.integers(1, 4))):
        lines += g.statement() if g.chance(0.85) else _early(g, results)
    ret = ", ".join(g.expr(r, 3) for r in results)
    lines.append(f"    return {ret}")
    sig = ", ".join(f'{p}: "{_ann(s)}"' for p, s in params)
    res = _ann(results[0]) if len(results) == 1 else "tuple[" + ", ".join(f'"{_ann(r)}"' for r in results) + "]"
    res = f'"{res}"' if len(results) == 1 and results[0] != S else res
    dims = {"n": int(rng.integers(2, 5)), "m": int(rng.integers(2, 4))}
    source = f"def {name}({sig}) -> {res}:\n" + "\n".join(lines) + "\n"
    return TensorKernel(name, source, params, results, dims)


def _early(g: _Gen, results) -> list[str]:
    ret = ", ".join(g.expr(r, 2) for r in results)
    return [f"    if {g.expr(S, 2)} > 1.0:", f"        return {ret}"]


def _dims_line(params) -> str:
    """`n, m = ...` from the parameters' shapes, so that loops and factories can read the dims."""
    n = next((f"{p}.shape[{s.index('n')}]" for p, s in params if "n" in s), None)
    m = next((f"{p}.shape[0]" for p, s in params if "m" in s), None)
    if n is None and m is None:
        return ""
    return f"{n or '2'}, {m or '2'}"


def _ann(s: tuple) -> str:
    return "float" if s == () else "float[" + ", ".join(s) + "]"
