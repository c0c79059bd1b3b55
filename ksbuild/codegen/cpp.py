"""Write the C++ body of one IR function: the context that primitives' emit rules call.

Scalars are C++ locals. Tensors have a Storage: a buffer, or a view (new strides) of one.
Nothing here decides what to fuse or where values live: a `fusion` equation is one loop nest
(codegen/fusion.py), and the memory plan (transforms/plan_memory.py) says where each value is
written. Buffers come from the workspace (or the stack, for small fixed sizes in scalar-ABI
functions).
"""
from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from typing import Sequence, Union

import numpy as np

from ..errors import KsbuildError
from ..ir.core import Atom, Eqn, Func, Lit, Var
from ..ir.types import C_TYPES, INT_DTYPES, STORAGE_DTYPES, Type, numpy_dtype
from .int_signs import IntSigns
from .naming import derived_names
from .storage import Storage, dim_expr, product
from .trace import continued, source_comment

Handle = Union[str, Storage]


def c_literal(value, t: Type) -> str:
    """A C++ literal of dtype t (a storage dtype's literal is its bit pattern)."""
    if t.dtype == "bool":
        return "true" if value else "false"
    if t.dtype == "str":
        return string_literal(value if isinstance(value, (str, bytes)) else "")  # the zero of strings is ""
    if t.dtype in INT_DTYPES:
        return _int_literal(int(value), t.dtype)
    if t.dtype in STORAGE_DTYPES:
        bits = np.asarray(value, dtype=np.float64).astype(np.float32).astype(numpy_dtype(t.dtype))
        raw = bits.reshape(1).view(np.uint16 if bits.dtype.itemsize == 2 else np.int8 if C_TYPES[t.dtype] ==
                                   "int8_t" else np.uint8)[0]
        return f"static_cast<{C_TYPES[t.dtype]}>({int(raw)})"
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


def string_literal(value) -> str:
    """A C string literal of a str (UTF-8) or bytes value: printable ASCII as itself, every other
    byte as a 3-digit octal escape (which, unlike \\x, cannot run into the next character)."""
    raw = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else bytes(value)
    out = []
    for byte in raw:
        ch = chr(byte)
        if ch in '"\\?':  # ? too: no trigraphs in C
            out.append("\\" + ch)
        elif 32 <= byte < 127:
            out.append(ch)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def _int_literal(v: int, dtype: str) -> str:
    if dtype == "i64":
        return f"int64_t{{{v}}}" if v > -2**63 else "(-int64_t{9223372036854775807} - 1)"
    if dtype == "u64":
        return f"uint64_t{{{v}u}}"
    if dtype == "i32":
        return str(v) if v > -2**31 else "(-2147483647 - 1)"
    return f"static_cast<{C_TYPES[dtype]}>({v})"


def _read_names(line: str) -> list[str]:
    """The identifiers a line of C++ reads as variables: not in a comment or string, after `.`, `->` or `::` (a
    member, a namespace's name) or before `::` (a namespace, a class)."""
    code = re.sub(r'"(?:[^"\\]|\\.)*"', "", line.split("//")[0])
    return re.findall(r"(?<![\w.])(?<!->)(?<!::)([A-Za-z_]\w*)\b(?!\s*::)", code)


def simd_pragma(clauses: str) -> str:
    """The `omp simd` line before a loop (ks/prelude.h's macros): KS_OMP_SIMD_EXTREMA where a clause reduces a max
    or min, which clang's vectorizer refuses without -ffinite-math-only (-Wpass-failed, an error under -Werror),
    so that clang gets no pragma there; KS_OMP_SIMD otherwise."""
    extrema = re.search(r"reduction\((max|min):", clauses)
    return f"KS_OMP_SIMD{'_EXTREMA' if extrema else ''}({clauses})"


@dataclass
class Slot:
    """One region of the workspace: a typed pointer declared in the prologue, at a byte offset of the arena
    (plan_memory placed it there) or laid out after it."""

    name: str
    ctype: str
    size: str        # bytes, a C++ expression of the dims
    offset: int | None = None
    alias: str = ""  # another slot's name: this pointer is that slot's (its space reused by a later value)


@dataclass
class Workspace:
    """The one workspace buffer (tensor ABI) or the stack (scalar ABI): the arena of the planned buffers whose
    sizes are static, then the other slots one after the other.

    Which value goes into which slot is decided by the plan_memory pass; the Writer declares
    one slot per planned slot (plus one per buffer of its own, such as a packed copy)."""

    on_stack: bool
    slots: list[Slot] = field(default_factory=list)
    arena: int = 0   # bytes
    scoped: bool = False  # the slots' pointers are declared in each step that uses them (codegen/steps.py)

    @property
    def offsets(self) -> list[str]:
        """The sizes of the workspace's parts, in bytes (C++ expressions)."""
        return ([str(self.arena)] if self.arena else []) + [s.size for s in self._laid_out()]

    def _laid_out(self) -> list[Slot]:
        """The slots after the arena, one after the other."""
        return [s for s in self.slots if s.offset is None and not s.alias]

    def address(self, slot: Slot, base: str) -> str:
        """The C++ expression of a slot's first byte, from `base` (an `unsigned char*` to the workspace)."""
        if slot.alias:
            return self.address(next(s for s in self.slots if s.name == slot.alias), base)
        if slot.offset is not None:
            return f"{base} + {slot.offset}" if slot.offset else base
        before = [str(self.arena)] if self.arena else []
        before += [s.size for s in itertools.takewhile(lambda s: s is not slot, self._laid_out())]
        return f"{base} + {' + '.join(before)}" if before else base

    def size_expr(self) -> str:
        return " + ".join(self.offsets) if self.offsets else "0"

    def prologue(self) -> list[str]:
        """The slot pointers: into the arena at their offsets, then laid out one after the other (none when each
        step declares its own)."""
        if self.scoped:
            return []
        lines = []
        for s in self.slots:
            if s.offset is not None and not s.alias:
                at = f" + {s.offset}" if s.offset else ""
                lines.append(f"    {s.ctype}* const {s.name} = reinterpret_cast<{s.ctype}*>(static_cast<unsigned char*>"
                             f"(workspace){at});")
        past = f" + {self.arena}" if self.arena else ""
        lines.append(f"    unsigned char* next_slot = static_cast<unsigned char*>(workspace){past};")
        for s in self._laid_out():
            lines.append(f"    {s.ctype}* const {s.name} = reinterpret_cast<{s.ctype}*>(next_slot);")
            lines.append(f"    next_slot += {s.size};")
        lines.append("    (void)next_slot;")
        return lines + [f"    {s.ctype}* const {s.name} = {s.alias};  // reuses a dead buffer's space"
                        for s in self.slots if s.alias]


STEP_MARK = "//@ks-step"  # (the lines that mark an export's steps: codegen/steps.py)

MACRO_LIKE = re.compile(r"[A-Z][A-Z0-9_]{2,}|[A-Z]_\w*|_[A-Z_]\w*")
"""Names that may be macros of the C/C++ standard headers (and of ATen, for the aten backend).

A fixed list cannot be complete (each C library and compiler defines its own), so a pattern:
- all capitals, digits and underscores, three characters or more: NULL, EOF, NAN, EIO, INT64_MAX,
  M_PI, CHAR_BIT, ATen's C10_.../AT_... One and two characters (N, B, HW: common dim names) are
  kept: no standard header defines such a macro (glibc's, checked with `g++ -dM -E`);
- a capital and an underscore, then anything: glibc's M_PIl, M_El, L_tmpnam, P_tmpdir;
- an underscore and a capital or a second underscore: reserved for the implementation in every
  scope (__linux__, _GNU_SOURCE). A name like `_x` is kept: it is reserved at global scope only.
"""

LOWERCASE_MACROS = frozenset({"errno", "linux", "unix", "i386", "stdin", "stdout", "stderr",
                              "math_errhandling", "sched_priority"})
"""The object-like macros of glibc's headers that the pattern misses (linux, unix, i386 in GNU mode).
Function-like macros (offsetof, alloca) expand only before a '(' and never clash with a name."""


def is_macro_like(name: str) -> bool:
    """True when a standard header may define `name` as a macro (see MACRO_LIKE)."""
    return name in LOWERCASE_MACROS or MACRO_LIKE.fullmatch(name) is not None


class Namer:
    """Deterministic, readable C++ names: the IR hint when given (with a number only where it clashes), else t<N>.

    Names are scoped like C++ blocks: a name given at depth d (the Writer's brace depth) is free again once the
    writer leaves depth d, so sibling loops both count with `i`; a name never shadows one of an enclosing block."""

    def __init__(self, reserved: Sequence[str] = (), source_names: Sequence[str] = ()):
        self.used: set[str] = set(reserved) | {"workspace", "ws", "next_slot"}  # (next_slot: the prologue's)
        self.source_names = frozenset(source_names)  # the IR's hints: names a generated one leaves to them
        self.declared: set[str] = set()       # every name given, released or not
        self.depth = 0
        self.scoped: dict[str, int] = {}      # a name given inside a block -> the depth it lives at
        self.next: dict[str, int] = {}        # base -> the lowest number that may be free
        self.base_of: dict[str, str] = {}     # a numbered name -> its base

    def fresh(self, hint: str = "t", depth: int | None = None, source: bool = False) -> str:
        """A new name from hint, living at `depth` (the current depth by default; 0: the whole function). A hint
        that is not a `source` name (acc, r, tmp) gets a number where it is one of source_names: r is the user's."""
        base = hint if hint and hint.isidentifier() and not hint[0].isdigit() else "t"
        if is_macro_like(base) or base.startswith("ks_"):  # (NAN or M_PI would be <cmath>'s macro; ks_data_0 a
            base = f"v{base}" if base.startswith("_") else f"v_{base}"  # constant of the package)
        taken = base in self.used or (base == "t" and not source) or (not source and base in self.source_names) or \
            (depth == 0 and base in self.declared)  # (a workspace slot's pointer, in scope everywhere)
        name = self._numbered(base, depth == 0) if taken else base
        return self._take(name, self.depth if depth is None else depth)

    def index(self, depth: int) -> str:
        """A loop counter living at `depth`: the first free of i, j, k, l, m, then i1, i2, ..."""
        free = next((c for c in INDEX_NAMES if c not in self.used), None)
        return self._take(free or self._numbered("i"), depth)

    def enter(self, depth: int) -> None:
        """The writer is now at `depth`: names of deeper blocks are free again."""
        self.depth = depth
        for name in [n for n, d in self.scoped.items() if d > depth]:
            del self.scoped[name]
            self.used.discard(name)
            if name in self.base_of:
                base = self.base_of[name]
                self.next[base] = min(self.next[base], int(name[len(base):].lstrip("_")))

    def _numbered(self, base: str, everywhere: bool = False) -> str:
        sep = "_" if base[-1].isdigit() else ""
        k = self.next.get(base, 1)
        taken = self.used | self.declared if everywhere else self.used
        while f"{base}{sep}{k}" in taken:
            k += 1
        self.next[base] = k + 1
        self.base_of[f"{base}{sep}{k}"] = base
        return f"{base}{sep}{k}"

    def _take(self, name: str, depth: int) -> str:
        self.used.add(name)
        self.declared.add(name)
        if depth > 0:
            self.scoped[name] = depth
        return name


def buffer_name(root: str) -> str:
    """What an element loaded from buffer `root` is named after when its value has no name: the buffer (means_i for
    an element of the argument means, x_i when the buffer's name ends in a digit or is no identifier)."""
    return root if root.isidentifier() and not root[-1].isdigit() else "x"


FOLDED_LENGTH = 60
"""The longest expression of an unnamed float value that is written where it is read rather than into a local."""


INDEX_NAMES = ("i", "j", "k", "l", "m")
"""The names of loop counters that have no name in the source, outermost first."""


POOL_MIN_ELEMENTS = 1 << 15
"""The elements a loop nest needs (reduced axes included) to run in parts on the threads (open_loops)."""

NEST_ELEMENT_MACS = 16
"""The multiply-adds of a kernel-layer call that take about as long as one element of a fused loop nest (ks/parts.h's
part_macs, 2^17 multiply-adds, about 5 µs: 2^13 elements), for ks::parts::split's parts of a nest."""


class Writer:
    """The codegen context that primitives' emit rules call: values, buffers, loop nests."""

    def __init__(self, namer: Namer, ws: Workspace, plan=None, outputs: dict[int, Storage] | None = None,
                 indent: int = 1, data=None, forms=None, source_root=None):
        self.lines: list[str] = []
        self.source_root = source_root       # the manifest's directory: source paths in comments are relative to it
        self.data = data                     # codegen.data.DataSection: the package's constants
        self.forms = forms                   # codegen.epilogue.EpilogueForms: the package's epilogue forms
        self.namer = namer
        self.ws = ws
        self.plan = plan                     # transforms.plan_memory.Plan: where each value is written
        self.outputs = outputs or {}         # output argument k -> its storage
        self.steps = False  # (codegen/steps.py) whether emit_body marks the steps of the loop it is in
        self.slot_names: dict[int, str] = {}  # planned slot -> the name of its pointer
        self.depth = indent
        self.env: dict[Var, Handle] = {}
        self.region: tuple[list[str], tuple] | None = None  # (index names, shape) inside a fusion
        self.local: dict[Var, str] = {}
        self.escaping: dict[Var, Storage] = {}  # inside a fusion: values stored as they are computed
        self.in_range: dict[Var, object] = {}  # loop counters -> the dim they stay below
        self.trusted: dict[Var, object] = {}  # indices a test before their loop shows below a dim (body.py)
        self.int_signs = IntSigns()  # integer scalars, loop counters, params' outer values (codegen/int_signs.py)
        self.row_of: dict[Var, str] = {}  # a loop's stacked result -> the counter of the row its body writes
        self.scratch_slots: dict[str, tuple[Slot, list[str]]] = {}  # element type -> (its scratch slot, counts)
        self.helpers = None                  # codegen.helpers.Helpers: the package's helper functions
        self.foldable: set[Var] = set()      # scalars read once, by an equation of their own block (body.py)
        self.dims: list[str] = []            # the function's dims (a helper it calls takes those it reads)
        self.pool_bodies: list[int] = []     # the depths of the bodies of loops run on ks/pool.h (open_loops)
        self.pool_scopes: list[tuple[int, set[str]]] = []  # each such body's first line, the names in scope there
        self.updates: dict[Var, str] = {}    # a loop carry's new value -> the carry's local it is assigned to
        self.derived: dict[Var, str] = {}    # names of unnamed values after what computes them (codegen/naming.py)

    def name_values(self, f: Func) -> None:
        """Name f's unnamed values after what computes them (exp_icf, x_sub_means) before t<N>."""
        self.derived = derived_names(f)

    def hint(self, v: Var) -> str:
        """v's name in the source or the transformations, else one after what computes it, else ''."""
        return v.hint or self.derived.get(v, "")

    @property
    def depth(self) -> int:
        """The brace depth of the next line (its indent); leaving a depth frees the names given in it."""
        return self._depth

    @depth.setter
    def depth(self, depth: int) -> None:
        self._depth = depth
        self.namer.enter(depth)

    # ---- output --------------------------------------------------------------------------------

    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def note_source(self, start: int, locs) -> None:
        """Put a comment saying where the code comes from (codegen/trace.py) before lines[start:], if they hold a
        loop nest, a call of a kernel of the prelude (ks::conv(...);) or of a helper (detail::f), do not start with
        a comment already and do not follow code of the same place (the block's last such comment says it, unless a
        loop nest came between: then `// gmm.py:92 (continued)`, as before each later nest of these lines)."""
        kept = [j for j, line in enumerate(self.lines[start:]) if not line.strip().startswith(STEP_MARK)]
        new = [self.lines[start + j].strip() for j in kept]
        if not any(line.startswith(("for (", "KS_OMP", "ks::")) or "detail::" in line for line in new) or \
                new[0].startswith("//"):
            return
        text = source_comment(locs, self.source_root)
        first = self.lines[start + kept[0]]
        pad = first[:len(first) - len(new[0])]
        if text is None:
            return
        last = self._last_comment(start, pad)
        if last is not None and last[1] in (text, continued(text)):
            if not any(line.lstrip().startswith(("for (", "ks::")) or "detail::" in line
                       for line in self.lines[last[0] + 1:start]):
                return
            text = continued(text)  # (a second nest of the same line: the line's place again, without its text)
        inner = next((j for j, line in enumerate(new[:3]) if line == "// " + text), None)
        if inner is not None:  # the same line's comment on the first loop inside: this one says it
            del self.lines[start + kept[inner]]
        after, closed = [], False  # (a later nest of the same code: a zeroed sum, then its loop)
        for j in range(start, len(self.lines)):
            if self.lines[j].startswith(pad + "for (") and closed:
                after.append(j)
            closed = self.lines[j] == pad + "}" or closed and not self.lines[j].startswith(pad + "for (")
        for j in reversed(after):
            self.lines.insert(j, pad + "// " + continued(text))
        self.lines.insert(start, pad + "// " + text)

    def _last_comment(self, end: int, pad: str) -> tuple[int, str] | None:
        """(index, text after //) of the last comment line at indent `pad` in the block that lines[end] is in (None
        if there is none)."""
        for j in range(end - 1, -1, -1):
            line = self.lines[j]
            indent = len(line) - len(line.lstrip())
            if indent < len(pad):
                return None
            if indent == len(pad) and line.lstrip().startswith("// "):
                return j, line.strip()[3:]
        return None

    def ctype(self, t: Type) -> str:
        return C_TYPES[t.dtype]

    def buffer_ctype(self, t: Type) -> str:
        """The element type of a buffer of the function's own: bytes for bool tensors (GCC 12 vectorizes no loop
        that loads a bool, e.g. relu's backward select through its mask; one that loads a byte it does)."""
        return "uint8_t" if t.dtype == "bool" else self.ctype(t)

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
        if h.literal is not None:  # a splat of a scalar or a literal: no element to load
            return h.literal
        idx, shape = self.region
        # load each element once, unconditionally: a load inside `p ? a : b` blocks if-conversion
        name = self.namer.fresh((a.hint or buffer_name(h.root)) + "_i", source=bool(a.hint))
        self.line(f"const {self.ctype(a.type)} {name} = {h.broadcast(shape).at(idx)};")
        self.local[a] = name
        return name

    def storage(self, a: Atom) -> Storage:
        """The storage of a tensor atom (scalars and literals become splats)."""
        if isinstance(a, Lit):
            return Storage.splat(c_literal(a.value, a.type), a.type.shape)
        h = self.env[a]
        return Storage.splat(h, a.type.shape) if isinstance(h, str) else h

    def dim(self, d) -> str:
        """A C++ expression of a (symbolic) dim."""
        return dim_expr(d)

    def literal(self, value, t: Type) -> str:
        """A C++ literal of t's dtype."""
        return c_literal(value, t)

    def args(self, eqn: Eqn) -> list[str]:
        return [self.scalar(a) for a in eqn.ins]

    def assign(self, v: Var, expr: str) -> None:
        """Define v = expr (an element expression inside a loop nest). An integer or bool scalar that one equation
        of the same block reads (foldable: index arithmetic, a comparison) is no local: its expression is written
        where it is read, so `c * (2 * d - c - 1) // 2 + r` is one expression, not a chain of t5, t6, ..."""
        element = self.region is not None and v.type.rank > 0  # (one element of tensor v: v_i, as loads are named)
        if not element and v in self.updates:  # (a carry's new value, assigned where it is made: body.py)
            self.line(f"{self.updates[v]} = {expr};")
            self.env[v] = self.updates[v]
            return
        if v in self.foldable and self._folds(v, expr, element):
            (self.local if element else self.env)[v] = expr
            return
        hint = self.hint(v)
        name = self.namer.fresh(f"{hint}_i" if element and hint else hint, source=bool(v.hint))
        self.line(f"const {self.ctype(v.type)} {name} = {expr};")
        if element:
            self.local[v] = name
            if v in self.escaping:
                self.line(f"{self.escaping[v].at(self.region[0])} = {name};")
        else:
            self.env[v] = name

    def _folds(self, v: Var, expr: str, element: bool) -> bool:
        """Whether foldable v's expression is written where it is read instead of into a local: index arithmetic
        and comparisons always, a float value the source does not name when the expression stays short (a named
        one keeps its name). A load stays where it is: unconditional, once."""
        if "[" in expr or (element and v in self.escaping):
            return False
        if not element and (v.type.dtype in INT_DTYPES or v.type.dtype == "bool"):
            return True
        return v.type.is_float and not v.hint and len(expr) <= FOLDED_LENGTH

    # ---- buffers -------------------------------------------------------------------------------

    def target(self, v: Var, hint: str = "buf") -> Storage:
        """Where v's value is written, as planned: an output argument, the buffer of an enclosing
        equation's output or of the operand it updates, or a workspace slot."""
        place = self.plan.places.get(v) if self.plan is not None else None
        if place is None:
            return self.alloc(v.type, self.hint(v) or hint, bool(v.hint))
        if place.kind == "arg":  # (v may be a value the result is a reshape of: plan_memory)
            out = self.outputs[place.index]
            return out if tuple(out.shape) == tuple(v.type.shape) else Storage.buffer(out.base, v.type.shape)
        if place.kind in ("into", "reuse"):
            return self.storage(place.of)
        if place.kind == "row":
            return self.storage(place.of).slice0(self.row_of[place.of])
        return self.slot(place.index, v, hint)

    def accumulator(self, eqn: Eqn, base: Atom, hint: str) -> Storage:
        """The buffer an in-place update of `base` writes (base's own when planned so, else a copy)."""
        out = eqn.outs[0]
        place = self.plan.places.get(out) if self.plan is not None else None
        if place is not None and place.kind == "reuse":
            return self.storage(base)
        dst = self.target(out, hint)
        self.copy(self.storage(base), dst, out.type)
        return dst

    def slot(self, k: int, v: Var, hint: str) -> Storage:
        """Planned workspace slot k holding v (the slot's pointer is named after its first value)."""
        if self.ws.on_stack:
            return self.alloc(v.type, self.hint(v) or hint, bool(v.hint))
        first = k not in self.slot_names
        shared = self.ws.scoped and self.depth == 1  # (a pointer later steps may read: declared where used)
        name = self.namer.fresh(self.hint(v) or hint, depth=0 if first or shared else None, source=bool(v.hint))
        if first:
            self.slot_names[k] = name
            offset = self.plan.offset(k)
            self.ws.slots.append(Slot(name, self.buffer_ctype(v.type), self.bytes(v.type), offset))
            self.ws.arena = self.plan.arena if offset is not None else self.ws.arena
        elif shared:
            self.ws.slots.append(Slot(name, self.buffer_ctype(v.type), "0", alias=self.slot_names[k]))
        else:
            self.line(f"{self.buffer_ctype(v.type)}* const {name} = {self.slot_names[k]};  // reuses a dead buffer's "
                      "space")
        return Storage.buffer(name, v.type.shape)

    def bytes(self, t: Type) -> str:
        return f"ks::aligned_bytes<{self.buffer_ctype(t)}>({product(t.shape)})"

    def alloc(self, t: Type, hint: str = "buf", source: bool = False) -> Storage:
        """A fresh contiguous buffer of type t of the writer's own (a packed copy, a staged carry); `source`: hint
        is the name of a value."""
        name = self.namer.fresh(hint, depth=None if self.ws.on_stack else 0, source=source)
        c = self.buffer_ctype(t)
        if self.ws.on_stack:
            if not all(isinstance(d, int) for d in t.shape):
                raise KsbuildError(f"a temporary of type {t} has a size known only at run time; a scalar "
                                   "function has no workspace to put it in")
            self.line(f"{c} {name}[{max(1, math.prod(t.shape))}];")
        else:
            self.ws.slots.append(Slot(name, c, self.bytes(t)))
        return Storage.buffer(name, t.shape)

    def scratch(self, ctype: str, count: str, required: bool = False, eqn: Eqn | None = None) -> str:
        """A workspace buffer of at least `count` (a C++ expression) elements of ctype that a prelude function
        uses while equation `eqn` runs (ks::tiled_gemm packs b into it): the bytes of the arena the memory plan
        gave that call (Plan.scratch), else one buffer per element type and function after the arena, as large as
        its largest use. A function without a workspace (the scalar ABI: every size is a literal, so `count` is a
        constant expression) gets "nullptr", or an array on its stack when the prelude function needs one
        (`required`: ks::conv)."""
        planned = self.plan.scratch.get(eqn) if self.plan is not None and eqn is not None else None
        if planned is not None and not self.ws.on_stack:
            return self._planned_scratch(ctype, count, *planned)
        if self.ws.on_stack:
            if not required:
                return "nullptr"
            name = self.namer.fresh(f"scratch_{ctype.replace('_t', '')}")
            self.line(f"alignas(64) {ctype} {name}[{count} + 1];")
            return name
        if ctype not in self.scratch_slots:
            slot = Slot(self.namer.fresh(f"scratch_{ctype.replace('_t', '')}", depth=0), ctype, "")
            self.ws.slots.append(slot)
            self.scratch_slots[ctype] = (slot, [])
        slot, counts = self.scratch_slots[ctype]
        if count not in counts:
            counts.append(count)
            total = counts[0]
            for c in counts[1:]:
                total = f"ks::max<int64_t>({total}, {c})"
            slot.size = f"ks::aligned_bytes<{ctype}>({total})"
        return slot.name

    def _planned_scratch(self, ctype: str, count: str, offset: int, size: int) -> str:
        """A kernel call's scratch at its offset of the arena, with a check that the prelude's size (`count`, a
        constant expression) fits the bytes planned (prims/scratch.py computed them)."""
        name = self.namer.fresh(f"scratch_{ctype.replace('_t', '')}", depth=0)
        self.ws.slots.append(Slot(name, ctype, str(size), offset))
        self.ws.arena = self.plan.arena
        self.line(f"static_assert(({count}) * sizeof({ctype}) <= {size}, \"the planned scratch (ksbuild/prims/"
                  "scratch.py) holds the kernel's\");")
        return name

    def copy(self, src: Storage, dst: Storage, t: Type) -> None:
        """dst[...] = src[...] elementwise (one flat loop, a memset/memcpy, when both are dense)."""
        dense = dst.contiguous and dst.literal is None and (src.literal is not None or
                                                             (src.contiguous and tuple(src.shape) == tuple(t.shape)))
        if t.rank > 1 and dense:
            i = self.namer.index(self.depth + 1)
            self.line(f"for (int64_t {i} = 0; {i} < {product(t.shape)}; ++{i}) {{")
            value = src.literal if src.literal is not None else f"{src.base}[{i}]"
            self.depth += 1
            self.line(f"{dst.base}[{i}] = {value};")
            self.close_loops(1)
            return
        idx = self.open_loops(t.shape)
        self.line(f"{dst.at(idx)} = {src.broadcast(t.shape).at(idx)};")
        self.close_loops(idx)

    def fill(self, dst: Storage, expr: str, t: Type) -> None:
        """dst[...] = expr everywhere."""
        self.copy(Storage.splat(expr, t.shape), dst, t)

    def open_loops(self, shape, simd: str | None = None, threads: int = 0, work=None) -> list[str]:
        """Open a loop nest over shape; `simd` (a clause, or "" for none) puts an `omp simd` pragma on the
        innermost loop, threads > 1 runs the outermost loops in parts on that many threads (ks/pool.h; `work`, the
        whole nest's shape, says whether it is worth it: _pool_parts). An axis of size 1 gets no loop: its index is
        0. Close the nest with close_loops(the indices returned)."""
        idx = []
        innermost = simd is not None or work is None or len(work) == len(shape)  # (shape's last loop is the nest's)
        pooled = [j for j, d in enumerate(shape) if d != 1][:2] if threads > 1 else []
        for j, d in enumerate(shape):
            if d == 1:
                idx.append("0")
                continue
            if j in pooled:
                if j == pooled[0]:
                    last = innermost and pooled[-1] == len(shape) - 1  # (the nest's innermost loop is pooled)
                    idx.extend(self._pool_loop(threads, [shape[a] for a in pooled], work or shape, last, simd))
                continue
            i = self.namer.index(self.depth + 1)
            if simd is not None and j == len(shape) - 1:
                self.line(simd_pragma(simd))  # ks/prelude.h: the pragma where -fopenmp-simd is on
            self.line(f"for (int64_t {i} = 0; {i} < {dim_expr(d)}; ++{i}) {{")
            self.depth += 1
            idx.append(i)
        return idx

    def _pool_loop(self, threads: int, dims, work, innermost: bool, simd: str | None) -> list[str]:
        """Open a ks::pool::run over parts of the iterations of the loops over dims, the nest's first two axes of
        size > 1 (or its one), as one range of their flattened iterations per part; closed by close_loops; their
        indices. `innermost`: the last of dims is the nest's innermost loop (`simd`, its pragma)."""
        outer = self.namer.used & (self.namer.declared | set(self.dims))  # (what a part's body may read: no keyword)
        part, span = self.namer.fresh("part"), self.namer.fresh("span")
        unit = 16 if innermost else 1  # (parts of consecutive elements meet at a 64-byte line of floats)
        parts = self._pool_parts(threads, work, product(dims) if unit == 1 else f"({product(dims)} + 15) / 16")
        self.line(f"ks::pool::run({threads}, {parts}, [&](int {part}, int) {{")
        self.depth += 1
        self.pool_scopes.append((len(self.lines), outer))
        self.line(f"const ks::parts::range {span} = ks::parts::share({product(dims)}, {unit}, {part}, {parts});")
        if len(dims) == 1:
            first = self.namer.index(self.depth + 1)
            if innermost and simd is not None:
                self.line(simd_pragma(simd))
            self.line(f"for (int64_t {first} = {span}.begin; {first} < {span}.end; ++{first}) {{")
            self.depth += 1
            self.pool_bodies.append(self.depth)
            return [first]
        if innermost:
            return self._pool_rows(span, dim_expr(dims[1]), simd)
        flat = self.namer.fresh("flat")
        self.line(f"for (int64_t {flat} = {span}.begin; {flat} < {span}.end; ++{flat}) {{")
        self.depth += 1
        self.pool_bodies.append(self.depth)
        first = self.namer.index(self.depth)
        self.line(f"const int64_t {first} = {flat} / ({dim_expr(dims[1])});")
        self.line("{")  # (the second index's block: close_loops closes two loops)
        self.depth += 1
        second = self.namer.index(self.depth)
        self.line(f"const int64_t {second} = {flat} % ({dim_expr(dims[1])});")
        return [first, second]

    def _pool_rows(self, span: str, columns: str, simd: str | None) -> list[str]:
        """The rows of a part's range `span` of rows x `columns` flattened, each over its columns in the range: the
        innermost loop stays one loop over consecutive elements, which vectorizes (a loop over the flattened range
        divides its counter for each element's indices: a squeeze-excite scaling ran scalar so)."""
        row = self.namer.index(self.depth + 1)
        self.line(f"for (int64_t {row} = {span}.begin / {columns}; {row} * {columns} < {span}.end; ++{row}) {{")
        self.depth += 1
        self.pool_bodies.append(self.depth)
        start, begin, end = self.namer.fresh("start"), self.namer.fresh("from"), self.namer.fresh("to")
        self.line(f"const int64_t {start} = {row} * {columns};")
        self.line(f"const int64_t {begin} = {span}.begin > {start} ? {span}.begin - {start} : 0;")
        self.line(f"const int64_t {end} = {span}.end - {start} < {columns} ? {span}.end - {start} : {columns};")
        column = self.namer.index(self.depth + 1)
        if simd is not None:
            self.line(simd_pragma(simd))
        self.line(f"for (int64_t {column} = {begin}; {column} < {end}; ++{column}) {{")
        self.depth += 1
        return [row, column]

    def _pool_parts(self, threads: int, work, units: str) -> str:
        """The parts of a loop nest of shape `work` whose pooled iterations are `units` units (a C++ expression):
        with POOL_MIN_ELEMENTS elements (elementwise work of about 10 µs on one core) ks::parts::split's, as if each
        element were NEST_ELEMENT_MACS multiply-adds (N to 4N parts, a multiple of N: a worker that starts late
        still finds parts to take), else one, on the calling thread (a small nest's threads only wait for each
        other: 33 times per call of a MobileNet at batch 1 with one part per image)."""
        if all(isinstance(d, int) for d in work) and math.prod(work) < POOL_MIN_ELEMENTS:
            return "1"
        parts, elements = self.namer.fresh("parts"), product(work)
        split = f"ks::parts::split({threads}, {units}, {elements} * {NEST_ELEMENT_MACS})"
        if all(isinstance(d, int) for d in work):
            self.line(f"const int {parts} = {split};")
        else:
            self.line(f"const int {parts} = {elements} >= {POOL_MIN_ELEMENTS} ? {split} : 1;")
        return parts

    def run_parts(self, threads: int, when: str, call, count: str = "") -> None:
        """The C++ statement call(part, parts, slot) for each part of a layer (ks/parts.h), run by the calling
        thread and ks/pool.h's workers (slot: which of the `threads`); `count`, a C++ expression of the number of
        parts (else `threads`); `when` (a C++ condition, or "") says whether to split at all (else one part, on
        the calling thread)."""
        part, slot, parts = self.namer.fresh("part"), self.namer.fresh("slot"), count or str(threads)
        if when or count:
            parts = self.namer.fresh("parts")
            self.line(f"const int {parts} = {f'({when}) ? {count or threads} : 1' if when else count};")
        self.line(f"ks::pool::run({threads}, {parts}, [&](int {part}, int {slot}) {{")
        self.line(f"    {call(part, parts, slot)}")
        self.line("});")

    def close_loops(self, loops) -> None:
        """Close the loops of open_loops' indices (or n loops opened by hand)."""
        n = loops if isinstance(loops, int) else sum(1 for i in loops if i != "0")
        for _ in range(n):
            body = self.depth
            self.depth -= 1
            self.line("}")
            if self.pool_bodies and self.pool_bodies[-1] == body:
                self.pool_bodies.pop()
                self._pass_captures(*self.pool_scopes.pop())
                self.depth -= 1
                self.line("});")

    def _pass_captures(self, first: int, outer: set[str]) -> None:
        """Make lines[first:], a part's body (in ks::pool::run's lambda), a lambda called at once with the values it
        reads from the function (pointers, dims) as parameters of the same names. Read through the part's closure,
        they were loads in the body's loops, which GCC neither hoists past the loops' stores nor vectorizes under
        `omp simd`: a sum such as softmax's ran scalar on the threads, added in another order than the one-thread
        build's vector lanes (the last bit of 40-60% of attention's outputs on AVX2), and slower."""
        names = list(dict.fromkeys(n for line in self.lines[first:] for n in _read_names(line) if n in outer))
        if not names:
            return
        pad = "    " * self.depth
        self.lines[first:] = [f"{pad}[&]({', '.join(f'const auto {n}' for n in names)}) {{",
                              *("    " + line for line in self.lines[first:]), f"{pad}}}({', '.join(names)});"]

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
        """A sum, max or min over axes that do not end the shape (fuse handles trailing axes)."""
        (x,), (out,) = eqn.ins, eqn.outs
        axes, c = eqn.params["axes"], self.ctype(out.type)
        src = self.storage(x)
        update = REDUCE_UPDATE[kind]
        if out.type.rank == 0:
            name = self.namer.fresh("acc")
            self.line(f"{c} {name} = {reduce_init(kind, c)};")
            idx = self.open_loops(x.type.shape, f"reduction(+:{name})" if kind == "sum" else None)
            self.line(update.format(a=name, x=src.at(idx)))
            self.close_loops(idx)
            self.env[out] = name
            return
        dst = self.target(out, kind)
        if short_window(x.type.shape, axes):
            self._reduce_unrolled(src, dst, x.type.shape, axes, kind, c)
            self.env[out] = dst
            return
        self.fill(dst, reduce_init(kind, c), out.type)
        order = reduce_loop_order(x.type.shape, axes)
        loops = self.open_loops([x.type.shape[j] for j in order])
        idx = [loops[order.index(j)] for j in range(x.type.rank)]
        kept = [i for j, i in enumerate(idx) if j not in axes]
        self.line(update.format(a=dst.at(kept), x=src.at(idx)))
        self.close_loops(idx)
        self.env[out] = dst

    def arg_reduce(self, eqn: Eqn, kind: str) -> None:
        """reduce_argmax / reduce_argmin outside a fused loop nest (a fusion accumulates trailing axes itself): for
        each kept index, a loop over the reduced axes (row-major) with the extremum so far and its position."""
        (x,), (out,) = eqn.ins, eqn.outs
        axes = tuple(eqn.params["axes"])
        src = self.storage(x)
        kept_axes = [j for j in range(x.type.rank) if j not in axes]
        dst = self.target(out, "position") if out.type.rank else None
        outer = self.open_loops([x.type.shape[j] for j in kept_axes])
        at = self.namer.fresh("at")
        self.line(f"int64_t {at} = 0;")
        best = self.namer.fresh("best")
        c = self.ctype(x.type)
        self.line(f"{c} {best} = {reduce_init(kind[3:], c)};")
        inner = self.open_loops([x.type.shape[j] for j in axes])
        where = dict(zip(kept_axes, outer)) | dict(zip(axes, inner))
        value = self.namer.fresh("value")
        self.line(f"const {c} {value} = {src.at([where[j] for j in range(x.type.rank)])};")
        for text in arg_update(self.namer.fresh("take"), best, at, value,
                               flat_position(inner, [x.type.shape[j] for j in axes]), kind, x.type.is_float):
            self.line(text)
        self.close_loops(inner)
        if dst is None:
            self.env[out] = at
        else:
            self.line(f"{dst.at(outer)} = {at};")
            self.env[out] = dst
        self.close_loops(outer)

    def _reduce_unrolled(self, src: Storage, dst: Storage, shape, axes, kind: str, c: str) -> None:
        """A reduction over a few literal taps (a pooling window): loops over the kept axes, the taps written
        out in one chain per element, so that nothing is read back from the result and the loop along
        the result's last axis vectorizes: `omp simd` on it, since GCC otherwise guards every run of that loop
        with a check that the result does not overlap the input, which costs more than the loop when the
        rows are short (8 pooled columns: 2.5x the time)."""
        kept = [j for j in range(len(shape)) if j not in axes]
        loops = self.open_loops([shape[j] for j in kept], simd="")
        acc = self.namer.fresh("acc")
        self.line(f"{c} {acc} = {reduce_init(kind, c)};")
        for tap in itertools.product(*(range(shape[j]) for j in axes)):
            at = dict(zip(kept, loops)) | dict(zip(axes, (str(t) for t in tap)))
            self.line(REDUCE_UPDATE[kind].format(a=acc, x=src.at([at[j] for j in range(len(shape))])))
        self.line(f"{dst.at(loops)} = {acc};")
        self.close_loops(loops)

    # ---- tensor prims --------------------------------------------------------------------------

    def dim_size(self, eqn: Eqn) -> None:
        self.env[eqn.outs[0]] = dim_expr(eqn.params["dim"])

    def iota(self, eqn: Eqn) -> str:
        idx, _ = self.region
        return f"static_cast<{self.ctype(eqn.outs[0].type)}>({idx[eqn.params['axis']]})"

    def clamped_index(self, eqn: Eqn, k: int = 1) -> str:
        """Index operand k of index/index_add clamped into its axis (operand k of an update at several
        indices is for axis `axis + k - 1`)."""
        x, i = eqn.ins[0], eqn.ins[k]
        n = x.type.shape[eqn.params["axis"] + k - 1]
        if isinstance(i, Lit) and isinstance(n, int):
            return str(min(max(int(i.value), 0), n - 1))
        if self.in_range.get(i) == n:
            return self.scalar(i)
        if self.int_signs.nonneg(i):  # (codegen/int_signs.py)
            if self.int_signs.below(i, n) or self.trusted.get(i) == n:
                return self.scalar(i)
            return f"ks::clamp_index_nonneg({self.scalar(i)}, {dim_expr(n)})"
        return f"ks::clamp_index({self.scalar(i)}, {dim_expr(n)})"


SHORT_TAIL = 16  # reduced trailing axes of at most this many elements go outside the last kept axis


def short_window(shape, axes) -> bool:
    """Whether a reduction is over a few taps of literal size (at most SHORT_TAIL) and keeps some axes."""
    sizes = [shape[j] for j in axes]
    return len(axes) < len(shape) and all(isinstance(d, int) for d in sizes) and math.prod(sizes) <= SHORT_TAIL


def reduce_loop_order(shape, axes) -> list[int]:
    """The loop order of a reduction over `axes` of `shape`: the axes in order, except that when reduced
    axes end the shape and are short (the taps of a pooling window), the last kept axis moves inside them,
    so the innermost loop runs along the result's rows and vectorizes."""
    kept = [j for j in range(len(shape)) if j not in axes]
    if not kept or kept[-1] == len(shape) - 1:
        return list(range(len(shape)))
    tail = shape[kept[-1] + 1:]
    if not all(isinstance(d, int) for d in tail) or math.prod(tail) > SHORT_TAIL:
        return list(range(len(shape)))
    return [j for j in range(len(shape)) if j != kept[-1]] + [kept[-1]]


REDUCE_UPDATE = {"sum": "{a} += {x};", "max": "{a} = ks::running_max({a}, {x});",
                 "min": "{a} = ks::running_min({a}, {x});"}


def reduce_init(kind: str, c: str) -> str:
    """The identity of a reduction as a C++ expression of element type c (of an arg reduction: its position, 0)."""
    return {"sum": "0", "max": f"ks::lowest<{c}>()", "min": f"ks::highest<{c}>()", "argmax": "0",
            "argmin": "0"}[kind]


def arg_update(take: str, best: str, at: str, x: str, j: str, kind: str, is_float: bool) -> list[str]:
    """The lines of one step of reduce_argmax / reduce_argmin: x at position j replaces the extremum so far, best,
    when it is strictly beyond it (so the first of equal ones stays) or the first NaN (a NaN is the extremum, as
    numpy's and torch's argmax take it), and j the position at. Branch free: one chain of compare and selects."""
    op = "<" if kind == "argmin" else ">"
    nan = f" || ({x} != {x} && {best} == {best})" if is_float else ""
    return [f"const bool {take} = {x} {op} {best}{nan};", f"{best} = {take} ? {x} : {best};",
            f"{at} = {take} ? {j} : {at};"]


def flat_position(indices: Sequence[str], dims: Sequence) -> str:
    """The row-major position of indices (loop index names, "0" for an axis of size 1) in an array of dims."""
    expr = ""
    for i, d in zip(indices, dims):
        if d == 1:
            continue
        expr = i if not expr else f"({expr}) * {dim_expr(d)} + {i}"
    return expr or "0"
