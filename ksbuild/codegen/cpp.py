"""Write the C++ body of one IR function: the context that primitives' emit rules call.

Scalars are C++ locals. Tensors have a Storage. A maximal run of elementwise equations of
one output shape becomes a single loop nest whose intermediates are scalar locals; only the
values read after the run are stored. Buffers come from the workspace (or the stack, for
small fixed sizes in scalar-ABI functions).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence, Union

import numpy as np

from ..errors import KsbuildError
from ..ir.core import Atom, Eqn, Lit, Var
from ..ir.types import C_TYPES, Type
from .storage import Storage, dim_expr, product

Handle = Union[str, Storage]


def c_literal(value, t: Type) -> str:
    """A C++ literal of dtype t."""
    if t.dtype == "bool":
        return "true" if value else "false"
    if t.dtype in ("i32", "i64"):
        v = int(value)
        return f"int64_t{{{v}}}" if t.dtype == "i64" else str(v)
    v = float(np.float32(value)) if t.dtype == "f32" else float(value)
    suffix = "f" if t.dtype == "f32" else ""
    if math.isinf(v):
        inf = "__builtin_huge_valf()" if suffix else "__builtin_huge_val()"
        return inf if v > 0 else f"(-{inf})"
    if math.isnan(v):
        return "__builtin_nanf(\"\")" if suffix else "__builtin_nan(\"\")"
    text = repr(v)
    if "e" not in text and "." not in text:
        text += ".0"
    return f"{text}{suffix}" if v >= 0 else f"({text}{suffix})"


@dataclass
class Slot:
    """One region of the workspace: a typed pointer declared in the prologue."""

    name: str
    ctype: str
    size: str        # bytes, a C++ expression of the dims
    free: bool = False


@dataclass
class Workspace:
    """Buffers planned into the one workspace (tensor ABI) or onto the stack (scalar ABI).

    A buffer whose value is dead frees its slot; a later buffer of the same element type and
    byte size reuses it, so the workspace is the sum of the slots, not of all temporaries."""

    on_stack: bool
    slots: list[Slot] = field(default_factory=list)

    @property
    def offsets(self) -> list[str]:
        return [s.size for s in self.slots]

    def size_expr(self) -> str:
        return " + ".join(self.offsets) if self.offsets else "0"

    def prologue(self) -> list[str]:
        """The slot pointers, laid out one after the other from the start of the workspace."""
        lines = ["    unsigned char* next_slot = static_cast<unsigned char*>(workspace);"]
        for s in self.slots:
            lines.append(f"    {s.ctype}* const {s.name} = reinterpret_cast<{s.ctype}*>(next_slot);")
            lines.append(f"    next_slot += {s.size};")
        lines.append("    (void)next_slot;")
        return lines


class Namer:
    """Deterministic, readable C++ names: the IR hint when given, else t<k>."""

    def __init__(self, reserved: Sequence[str] = ()):
        self.used: set[str] = set(reserved) | {"workspace", "ws", "k", "n"}
        self.count = 0

    def fresh(self, hint: str = "t") -> str:
        base = hint if hint and hint.isidentifier() and not hint[0].isdigit() else "t"
        if base not in self.used and base != "t":
            self.used.add(base)
            return base
        while True:
            self.count += 1
            name = f"{base}{self.count}"
            if name not in self.used:
                self.used.add(name)
                return name


class Writer:
    """The codegen context: emit rules call assign/args/view/reduce/emit_cond/emit_loop."""

    def __init__(self, namer: Namer, ws: Workspace, indent: int = 1, backend: str = "plain"):
        self.lines: list[str] = []
        self.backend = backend  # "blas": matrix-product contractions call ks::gemm (ks/blas.h)
        self.namer = namer
        self.ws = ws
        self.depth = indent
        self.env: dict[Var, Handle] = {}
        self.region: tuple[list[str], tuple] | None = None  # (index names, shape)
        self.local: dict[Var, str] = {}
        self.escaping: dict[Var, Storage] = {}
        self.helpers: dict[str, list[str]] = {}
        self.owner: dict[str, Var] = {}       # buffer name -> the var whose value it holds
        self.uses: tuple[dict, int] = ({}, 0)  # (var -> reading eqn indices, current eqn index)
        self.in_range: dict[Var, object] = {}  # loop counters -> the dim they stay below
        self.slot_of: dict[str, tuple[Slot, int]] = {}  # live workspace buffer -> (slot, body level)
        self.level = 0  # nesting depth of the body being emitted

    def release(self, live: set[str]) -> None:
        """Free the slots of buffers allocated at this level or deeper that no live value points into."""
        for name, (slot, level) in list(self.slot_of.items()):
            if level >= self.level and name not in live:
                slot.free = True
                del self.slot_of[name]

    # ---- output --------------------------------------------------------------------------------

    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def ctype(self, t: Type) -> str:
        return C_TYPES[t.dtype]

    # ---- values --------------------------------------------------------------------------------

    def scalar(self, a: Atom) -> str:
        """The C++ expression of a scalar atom (or of the current element in a loop nest)."""
        if isinstance(a, Lit):
            return c_literal(a.value, a.type)
        if a in self.local:
            return self.local[a]
        h = self.env[a]
        if isinstance(h, str):
            return h
        if not h.shape:  # a rank-0 view, e.g. one iteration's slice of stacked values
            return h.at([])
        if self.region is None:
            raise KsbuildError(f"internal: tensor {a} read as a scalar outside a loop")
        idx, shape = self.region
        # load each element once, unconditionally: a load inside `p ? a : b` blocks if-conversion
        name = self.namer.fresh((a.hint or "x") + "_i")
        self.line(f"const {self.ctype(a.type)} {name} = {h.broadcast(shape).at(idx)};")
        self.local[a] = name
        return name

    def storage(self, a: Atom) -> Storage:
        """The storage of a tensor atom (scalars and literals become splats)."""
        if isinstance(a, Lit):
            return Storage.splat(c_literal(a.value, a.type), a.type.shape)
        h = self.env[a]
        return Storage.splat(h, a.type.shape) if isinstance(h, str) else h

    def args(self, eqn: Eqn) -> list[str]:
        return [self.scalar(a) for a in eqn.ins]

    def assign(self, v: Var, expr: str) -> None:
        """Define v = expr (an element expression inside a loop nest)."""
        name = self.namer.fresh(v.hint)
        self.line(f"const {self.ctype(v.type)} {name} = {expr};")
        if self.region is not None and v.type.rank > 0:
            self.local[v] = name
            if v in self.escaping:
                self.line(f"{self.escaping[v].at(self.region[0])} = {name};")
        else:
            self.env[v] = name

    # ---- buffers -------------------------------------------------------------------------------

    def alloc(self, t: Type, hint: str = "buf", owner: Var | None = None) -> Storage:
        """A fresh contiguous buffer of type t (owned by `owner`: it may be updated in place)."""
        name = self.namer.fresh(hint)
        c = self.ctype(t)
        if self.ws.on_stack:
            if not all(isinstance(d, int) for d in t.shape):
                raise KsbuildError(f"a temporary of type {t} has a size known only at run time; a scalar "
                                   "function has no workspace to put it in")
            self.line(f"{c} {name}[{max(1, math.prod(t.shape))}];")
            if owner is not None:
                self.owner[name] = owner
            return Storage.buffer(name, t.shape)
        else:
            size = f"ks::aligned_bytes<{c}>({product(t.shape)})"
            slot = next((s for s in self.ws.slots if s.free and s.ctype == c and s.size == size), None)
            if slot is None:
                slot = Slot(name, c, size)
                self.ws.slots.append(slot)
            else:
                slot.free = False
                self.line(f"{c}* const {name} = {slot.name};  // reuses a dead buffer's space")
            self.slot_of[name] = (slot, self.level)
        if owner is not None:
            self.owner[name] = owner
        return Storage.buffer(name, t.shape)

    def copy(self, src: Storage, dst: Storage, t: Type) -> None:
        """dst[...] = src[...] elementwise."""
        idx = self.open_loops(t.shape)
        self.line(f"{dst.at(idx)} = {src.broadcast(t.shape).at(idx)};")
        self.close_loops(len(idx))

    def open_loops(self, shape, simd: str | None = None) -> list[str]:
        """Open a loop nest over shape; `simd` adds an `omp simd` clause on the innermost loop."""
        idx = []
        for j, d in enumerate(shape):
            i = self.namer.fresh("i")
            if simd and j == len(shape) - 1:
                self.line(f"KS_OMP_SIMD({simd})")  # ks/prelude.h: the pragma where -fopenmp-simd is on
            self.line(f"for (int64_t {i} = 0; {i} < {dim_expr(d)}; ++{i}) {{")
            self.depth += 1
            idx.append(i)
        return idx

    def close_loops(self, n: int) -> None:
        for _ in range(n):
            self.depth -= 1
            self.line("}")

    # ---- structured emission (called by prim emit rules) --------------------------------------

    def view(self, eqn: Eqn, transform, **_) -> None:
        """A view prim: its output is transform(storage of the input), copied first if needed."""
        x, out = eqn.ins[0], eqn.outs[0]
        s = self.storage(x)
        view = transform(s)
        if view is None:  # e.g. reshape of a non-contiguous view: pack it first
            buf = self.alloc(x.type, "packed")
            self.copy(s, buf, x.type)
            view = transform(buf)
        self.env[out] = view

    def reduce(self, eqn: Eqn, kind: str) -> None:
        """A sum, max or min over the given axes."""
        (x,), (out,) = eqn.ins, eqn.outs
        axes, c = eqn.params["axes"], self.ctype(out.type)
        src = self.storage(x)
        init = {"sum": "0", "max": f"ks::lowest<{c}>()", "min": f"ks::highest<{c}>()"}[kind]
        update = {"sum": "{a} += {x};", "max": "{a} = ks::max({x}, {a});", "min": "{a} = ks::min({x}, {a});"}[kind]
        if out.type.rank == 0:
            name = self.namer.fresh("acc")
            self.line(f"{c} {name} = {init};")
            idx = self.open_loops(x.type.shape, f"reduction(+:{name})" if kind == "sum" else None)
            self.line(update.format(a=name, x=src.at(idx)))
            self.close_loops(len(idx))
            self.env[out] = name
            return
        dst = self.escaping.get(out) or self.alloc(out.type, kind, owner=out)
        self.copy(Storage.splat(init, out.type.shape), dst, out.type)
        idx = self.open_loops(x.type.shape)
        kept = [i for j, i in enumerate(idx) if j not in axes]
        self.line(update.format(a=dst.at(kept), x=src.at(idx)))
        self.close_loops(len(idx))
        self.env[out] = dst

    # ---- tensor prims --------------------------------------------------------------------------

    def alias(self, eqn: Eqn) -> None:
        """The output is the input (stop_gradient)."""
        a = eqn.ins[0]
        self.env[eqn.outs[0]] = self.scalar(a) if a.type.rank == 0 else self.storage(a)

    def dim_size(self, eqn: Eqn) -> None:
        self.env[eqn.outs[0]] = dim_expr(eqn.params["dim"])

    def iota(self, eqn: Eqn) -> str:
        idx, _ = self.region
        return f"static_cast<{self.ctype(eqn.outs[0].type)}>({idx[eqn.params['axis']]})"

    def clamped_index(self, eqn: Eqn) -> str:
        """The index operand of index/index_add clamped into its axis."""
        x, i, axis = eqn.ins[0], eqn.ins[1], eqn.params["axis"]
        n = x.type.shape[axis]
        if isinstance(i, Lit) and isinstance(n, int):
            return str(min(max(int(i.value), 0), n - 1))
        if self.in_range.get(i) == n:
            return self.scalar(i)
        return f"ks::clamp_index({self.scalar(i)}, {dim_expr(n)})"

    def updatable(self, a: Atom) -> Storage | None:
        """a's buffer, if a owns it and nothing reads a after the current equation."""
        if not isinstance(a, Var):
            return None
        h = self.env.get(a)
        uses, here = self.uses
        if isinstance(h, Storage) and h.literal is None and self.owner.get(h.root) is a and uses.get(a) == {here}:
            return h
        return None

    def fresh_copy(self, a: Atom, out: Var, hint: str) -> Storage:
        dst = self.escaping.get(out) or self.alloc(out.type, hint, owner=out)
        self.copy(self.storage(a), dst, out.type)
        return dst

    def index_add(self, eqn: Eqn) -> None:
        """out = x with v added at i: in place when x's buffer is dead afterwards."""
        x, _, v = eqn.ins
        (out,), axis = eqn.outs, eqn.params["axis"]
        dst = self.updatable(x) or self.fresh_copy(x, out, "acc")
        slot = dst.take(axis, self.clamped_index(eqn))
        src = self.storage(v)
        idx = self.open_loops(v.type.shape)
        self.line(f"{slot.at(idx)} += {src.broadcast(v.type.shape).at(idx)};")
        self.close_loops(len(idx))
        self.env[out] = dst
        self.owner[dst.root] = out

    def pad(self, eqn: Eqn) -> None:
        (x,), (out,) = eqn.ins, eqn.outs
        p = eqn.params
        dst = self.escaping.get(out) or self.alloc(out.type, "padded", owner=out)
        self.copy(Storage.splat(c_literal(0, out.type), out.type.shape), dst, out.type)
        self.copy(self.storage(x), dst.narrow(p["axis"], p["lo"], x.type.shape[p["axis"]]), x.type)
        self.env[out] = dst

    def einsum(self, eqn: Eqn, into: Storage | None = None) -> None:
        """A contraction as a loop nest: a dot product per output element when the innermost axis
        is summed over, else accumulate into the output with its last axis innermost."""
        from ..prims.tensor import parse_spec
        x, y = eqn.ins
        (out,) = eqn.outs
        a, b, o = parse_spec(eqn.params["spec"])
        sizes = dict(zip(a, x.type.shape)) | dict(zip(b, y.type.shape))
        summed = [ch for ch in dict.fromkeys(a + b) if ch not in o]
        sa, sb = self.storage(x), self.storage(y)
        axes = gemm_axes(a, b, o) if self.backend == "blas" and out.type.dtype in ("f32", "f64") else None
        if axes and sa.literal is None and sb.literal is None:
            self.gemm(eqn, (a, b, o), sizes, axes, sa, sb, into)
            return
        c = self.ctype(out.type)
        score = lambda ch: (a[-1:] == ch) + (b[-1:] == ch) + (o[-1:] == ch)  # noqa: E731
        inner = max(list(o) + summed, key=score)
        if inner in summed or not o:
            summed.sort(key=lambda ch: ch == inner)
            dst = into or (self.escaping.get(out) or self.alloc(out.type, "prod", owner=out)) if o else None
            outer = self.open_loops([sizes[ch] for ch in o])
            acc = self.namer.fresh("dot")
            self.line(f"{c} {acc} = 0;")
            red = self.open_loops([sizes[ch] for ch in summed], f"reduction(+:{acc})")
            ix = dict(zip(o, outer)) | dict(zip(summed, red))
            self.line(f"{acc} += {sa.at([ix[ch] for ch in a])} * {sb.at([ix[ch] for ch in b])};")
            self.close_loops(len(red))
            if not o:
                self.env[out] = acc
                return
            self.line(f"{dst.at(outer)} {'+=' if into else '='} {acc};")
            self.close_loops(len(outer))
            self.env[out] = dst
            return
        dst = into or self.escaping.get(out) or self.alloc(out.type, "prod", owner=out)
        if into is None:
            self.copy(Storage.splat("0", out.type.shape), dst, out.type)
        order = [ch for ch in o if ch != inner] + summed + [inner]
        loops = self.open_loops([sizes[ch] for ch in order])
        ix = dict(zip(order, loops))
        self.line(f"{dst.at([ix[ch] for ch in o])} += {sa.at([ix[ch] for ch in a])} * {sb.at([ix[ch] for ch in b])};")
        self.close_loops(len(loops))
        self.env[out] = dst

    def gemm(self, eqn: Eqn, letters, sizes, axes, sa: Storage, sb: Storage, into: Storage | None) -> None:
        """einsum `letters` (a, b, out) as loops over the batch letters around one ks::gemm call."""
        a, b, o = letters
        batch, m, n, k = axes
        (out,) = eqn.outs
        dst = into or self.escaping.get(out) or self.alloc(out.type, "prod", owner=out)
        loops = self.open_loops([sizes[ch] for ch in batch])
        ix = dict(zip(batch, loops))
        c = self.ctype(out.type)

        def matrix(st: Storage, letters: str, rows: str, cols: str) -> str:
            for pos in sorted((letters.index(ch) for ch in batch if ch in letters), reverse=True):
                st = st.take(pos, ix[letters[pos]])
            rest = [ch for ch in letters if ch not in batch]
            return f"{{{st.base}, {st.strides[rest.index(rows)]}, {st.strides[rest.index(cols)]}}}"

        dims = ", ".join(dim_expr(sizes[ch]) for ch in (m, n, k))
        self.line(f"ks::gemm<{c}>({dims}, {matrix(sa, a, m, k)}, {matrix(sb, b, k, n)}, "
                  f"{matrix(dst, o, m, n)}, {'true' if into else 'false'});")
        self.close_loops(len(loops))
        self.env[out] = dst

    def emit_cond(self, eqn: Eqn) -> None:
        from .body import declare_outputs, emit_inline
        outs = declare_outputs(self, eqn.outs)
        self.line(f"if ({self.scalar(eqn.ins[0])}) {{")
        emit_inline(self, eqn.params["then_fn"], list(eqn.ins[1:]), outs)
        self.line("} else {")
        emit_inline(self, eqn.params["else_fn"], list(eqn.ins[1:]), outs)
        self.line("}")
        self.env.update(zip(eqn.outs, outs))

    def emit_loop(self, eqn: Eqn) -> None:
        from .body import emit_loop
        emit_loop(self, eqn)

    def emit_call(self, eqn: Eqn) -> None:
        from .body import emit_call
        emit_call(self, eqn)


def gemm_axes(a: str, b: str, o: str):
    """(batch letters, m, n, k) when einsum a,b->o is a batched matrix product c[m,n] = Σ_k a[m,k]·b[k,n]
    with one letter each for m, n and k; None otherwise."""
    if len(set(a)) != len(a) or len(set(b)) != len(b):
        return None
    batch = [ch for ch in o if ch in a and ch in b]
    m = [ch for ch in a if ch in o and ch not in b]
    n = [ch for ch in b if ch in o and ch not in a]
    k = [ch for ch in a if ch in b and ch not in o]
    if len(m) != 1 or len(n) != 1 or len(k) != 1 or len(a) + len(b) != 2 * len(batch) + 4:
        return None
    return batch, m[0], n[0], k[0]


def element_region_key(eqn: Eqn):
    """The loop-nest shape an equation fuses into, or None if it is not fusible."""
    if eqn.prim.elementwise and eqn.outs[0].type.rank > 0:
        return eqn.outs[0].type.shape
    return None

