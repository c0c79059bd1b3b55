"""Random nestings of ksbuild's transformations over one kernel, with their shapes, inputs and torch oracle.

A nesting is a tuple tree: ("kernel",), ("vmap", inner, in_axes), ("jvp", inner), ("vjp", inner, argnums),
("grad", inner, argnums), ("jacfwd" | "jacrev" | "hessian", inner, argnums); argnums None means ksbuild's
default (every float input for vjp and grad). Its signature is (input shapes, result shapes), concrete.
The torch oracle composes torch.func's jvp and vjp over the same Python source; vmap is a Python loop over
lanes (torch's own vmap cannot run a kernel's data-dependent `if`), Jacobians are rows of vjps.
"""
from __future__ import annotations

import math

import numpy as np
import torch

Shape = tuple[int, ...]
MAX_ELEMS = 600  # the most elements an export's inputs or results may have (keeps Jacobians small)


def text(t: tuple, kernel: str) -> str:
    """The manifest's expression of nesting t over the kernel named `kernel`."""
    if t[0] == "kernel":
        return kernel
    inner = text(t[1], kernel)
    if t[0] == "vmap":
        return f"vmap({inner})" if all(a == 0 for a in t[2]) else f"vmap({inner}, in_axes={_tuple(t[2])})"
    if t[0] == "jvp" or t[2] is None:
        return f"{t[0]}({inner})"
    return f"{t[0]}({inner}, argnums={_tuple(t[2])})"


def _tuple(items) -> str:
    return "(" + ", ".join(str(a) for a in items) + ("," if len(items) == 1 else "") + ")"


def signature(t: tuple, base: tuple[list[Shape], list[Shape]], lanes: dict) -> tuple[list[Shape], list[Shape]]:
    """(input shapes, result shapes) of nesting t; base is the kernel's; lanes[id(vmap node)] its batch size."""
    if t[0] == "kernel":
        return base
    ins, outs = signature(t[1], base, lanes)
    kind = t[0]
    if kind == "vmap":
        b = lanes[id(t)]
        return [(b, *s) if a == 0 else s for s, a in zip(ins, t[2])], [(b, *s) for s in outs]
    if kind == "jvp":
        return ins + ins, outs
    if kind == "vjp":
        return ins + outs, [ins[k] for k in _args(t[2], ins)]
    if kind == "grad":
        return ins, [ins[k] for k in _args(t[2], ins)]
    if kind in ("jacfwd", "jacrev"):
        return ins, [o + ins[k] for o in outs for k in t[2]]
    return ins, [o + ins[j] + ins[k] for o in outs for j in t[2] for k in t[2]]  # hessian


def _args(argnums, ins) -> list[int]:
    return list(range(len(ins))) if argnums is None else list(argnums)


def _size(shapes) -> int:
    return sum(math.prod(s) for s in shapes)


def random_nesting(rng: np.random.Generator, base, depth: int, lanes: dict) -> tuple | None:
    """A random nesting of at most `depth` transformations valid for a kernel of signature base, or None."""
    t: tuple = ("kernel",)
    for _ in range(int(rng.integers(1, depth + 1))):
        ins, outs = signature(t, base, lanes)
        options = _options(rng, t, ins, outs, lanes)
        if not options:
            break
        t = options[int(rng.integers(len(options)))]
    ins, outs = signature(t, base, lanes)
    return t if t[0] != "kernel" and _size(ins) <= MAX_ELEMS and _size(outs) <= MAX_ELEMS else None


def _options(rng, t, ins, outs, lanes) -> list[tuple]:
    """The transformations that may wrap t (ins, outs: its signature)."""
    some = _some_argnums(rng, len(ins))
    out = [("jvp", t), ("vjp", t, None), ("vjp", t, some), ("jacfwd", t, some), ("jacrev", t, some),
           ("jacfwd", t, (0,)), ("jacrev", t, (0,))]
    axes = tuple(0 if rng.random() < 0.75 else None for _ in ins)
    v = ("vmap", t, axes if 0 in axes else (0,) * len(ins))
    lanes[id(v)] = int(rng.integers(2, 4))
    out += [v, v]
    if len(outs) == 1 and outs[0] == ():
        out += [("grad", t, None), ("grad", t, None), ("grad", t, some), ("hessian", t, some)]
    return out


def _some_argnums(rng, n: int) -> tuple[int, ...]:
    k = int(rng.integers(1, n + 1))
    return tuple(sorted(int(i) for i in rng.choice(n, size=k, replace=False)))


def core_nestings(base, lanes: dict) -> list[tuple]:
    """The transformations every kernel gets: itself, vmap, jvp, vjp, grad, vmap(grad), grad of grad,
    jacfwd, jacrev, vjp(vmap), jvp(vmap)."""
    ins, outs = base
    k = ("kernel",)
    vm = ("vmap", k, (0,) * len(ins))
    lanes[id(vm)] = 3
    out = [k, vm, ("jvp", k), ("vjp", k, None), ("jacfwd", k, (0,)), ("jacrev", k, (0,)),
           ("vjp", vm, None), ("jvp", vm)]
    if len(outs) == 1 and outs[0] == ():
        g = ("grad", k, None)
        vg = ("vmap", g, (0,) * len(ins))
        lanes[id(vg)] = 3
        out += [g, vg, ("jvp", g)]
        if len(ins) == 1 and ins[0] == ():
            out.append(("grad", g, None))
        else:
            out.append(("grad", ("grad", k, (0,)), None) if ins[0] == () else ("hessian", k, (0,)))
    return out


# ---- inputs ---------------------------------------------------------------------------------------------


def make_inputs(t: tuple, base, lanes: dict, point, rng) -> list[np.ndarray]:
    """Inputs for nesting t: the kernel's points (point(rng): edge-biased) at the primal slots, lane by lane
    under vmap; standard normal tangents and cotangents (sometimes exactly zero)."""
    if t[0] == "kernel":
        return [np.asarray(a, dtype=np.float64) for a in point(rng)]
    ins, outs = signature(t[1], base, lanes)
    if t[0] == "vmap":
        rows = [make_inputs(t[1], base, lanes, point, rng) for _ in range(lanes[id(t)])]
        return [np.stack([r[k] for r in rows]) if a == 0 else rows[0][k] for k, a in enumerate(t[2])]
    primals = make_inputs(t[1], base, lanes, point, rng)
    if t[0] == "jvp":
        return primals + [_direction(rng, s) for s in ins]
    if t[0] == "vjp":
        return primals + [_direction(rng, s) for s in outs]
    return primals


def _direction(rng, shape: Shape) -> np.ndarray:
    if rng.random() < 0.1:
        return np.zeros(shape)
    return rng.standard_normal(shape)


# ---- the torch oracle -----------------------------------------------------------------------------------


def oracle(t: tuple, kernel, base, lanes: dict, watch=None):
    """A function of float64 tensors returning a tuple of tensors: nesting t of the Python `kernel`, in torch.
    watch: a torch function mode entered around each call of the kernel itself."""
    if t[0] == "kernel":
        return lambda *xs: _watched(kernel, xs, watch)
    f = oracle(t[1], kernel, base, lanes, watch)
    kind = t[0]
    n = len(signature(t[1], base, lanes)[0])
    if kind == "vmap":
        return _vmap(f, t[2], lanes[id(t)])
    if kind == "jvp":
        return lambda *xs: tuple(torch.func.jvp(f, xs[:n], xs[n:])[1])
    if kind in ("vjp", "grad"):
        return _vjp(f, n, t[2], ones=kind == "grad")
    if kind in ("jacfwd", "jacrev"):
        return _jacobian(f, t[2])
    return _jacobian(_jacobian(f, t[2]), t[2])  # hessian: d/dx_j (d out / dx_k), blocks (out, j, k)


def _watched(kernel, xs, watch) -> tuple:
    if watch is None:
        return _as_tuple(kernel(*xs), xs)
    with watch:
        outs = _as_tuple(kernel(*xs), xs)
    if not all(bool(torch.isfinite(o).all()) for o in outs):
        watch.result_nonfinite = True
    return outs


def _as_tuple(out, xs) -> tuple:
    outs = out if isinstance(out, tuple) else (out,)
    zero = sum(x.sum() for x in xs) * 0.0
    return tuple(o if isinstance(o, torch.Tensor) else zero + o for o in outs)


def _vmap(f, axes, lanes: int):
    def call(*xs):
        rows = [f(*[x[b] if a == 0 else x for x, a in zip(xs, axes)]) for b in range(lanes)]
        return tuple(torch.stack(col) for col in zip(*rows))
    return call


def _vjp(f, n: int, argnums, ones: bool):
    def call(*xs):
        outs, back = torch.func.vjp(f, *xs[:n])
        cts = tuple(torch.ones_like(o) for o in outs) if ones else tuple(xs[n:])
        grads = back(cts)
        return tuple(grads[k] for k in _args(argnums, xs[:n]))
    return call


def _jacobian(f, argnums):
    def call(*xs):
        outs, back = torch.func.vjp(f, *xs)
        blocks = []
        for k, o in enumerate(outs):
            rows = []
            for e in range(o.numel()):
                basis = tuple(torch.zeros_like(p) for p in outs)
                basis[k].view(-1)[e] = 1.0
                g = back(basis)
                rows.append([g[j] for j in argnums])
            for col, j in enumerate(argnums):
                stacked = torch.stack([r[col] for r in rows]) if rows else xs[j].new_zeros((0, *xs[j].shape))
                blocks.append(stacked.reshape((*o.shape, *xs[j].shape)))
        return tuple(blocks)
    return call
