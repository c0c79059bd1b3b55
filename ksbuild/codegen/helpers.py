"""The kernels' helper functions: a `call` whose callee keeps its own C++ function.

A call of a function whose values are all scalars (prims/control.py `keeps_call`) is emitted as
`detail::<name>(dims..., args...)`, and its callee once per package as a `static` function in
`namespace detail` of the source file (not in the header: internal linkage; the C++ compiler still
inlines it where that pays). Its parameters are the package's dims it reads, then its inputs; one
result is returned, several are written through trailing pointers. Callees with the same text share
one function, so a helper called from several places, or from several exports, is written once.

A kept call whose callee has tensors (vmap of a helper: `vmap_softplus`, and its jvp_, fwd_, lin_, bwd_ forms)
calls a `static void` function whose tensor arguments are pointers to dense row-major elements (`const double*`
inputs, then `double*` outputs, scalar results through pointers too; bool tensors as uint8_t, the type of the
buffers of a function's own) and whose last argument, when it needs one,
is its workspace: the callee has a memory plan of its own (transforms/plan_memory.py), laid out in that workspace
as an export's is in its own; `Helper.workspace` is its size in bytes, a C++ expression of the dims it takes,
which the caller reserves as one part of its workspace shared by all its helper calls.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..ir.core import Func, Lit
from ..ir.printer import format_scalar, format_type, format_value, print_func, walk_vars
from ..ir.types import C_TYPES


def code_text(lines: list[str]) -> str:
    """The C++ of lines without comments and string literals: what a search for a name's uses reads (a
    static_assert's message "the kernel's" is no use of a parameter `s`)."""
    return "\n".join(re.sub(r'"(?:[^"\\]|\\.)*"', '""', re.sub(r"//.*", "", line)) for line in lines)

@dataclass
class Helper:
    """One generated helper function: its C++ name, the dims it takes first, its text."""

    name: str
    dims: list[str]
    lines: list[str]
    results: int
    workspace: str = "0"  # (a callee with tensors) the bytes of its workspace, a C++ expression of its dims


@dataclass
class Helpers:
    """The package's helper functions, in the order they must be defined (a callee before its callers)."""

    by_text: dict[str, Helper] = field(default_factory=dict)
    names: set[str] = field(default_factory=set)
    keys: dict[int, tuple[Func, str]] = field(default_factory=dict)  # id(fn) -> (fn, its key): see `key`
    tokens: dict[str, str] = field(default_factory=dict)  # a sub-function's key -> its short stand-in

    def get(self, fn: Func, dims: list[str], writer, strided: tuple = ()) -> Helper:
        """The helper of callee fn (written on first use; `writer` is the caller's, for the package's
        constants, epilogue forms and source root; `dims` the caller's dims; `strided`: the tensor arguments it
        takes as a pointer and a stride per axis, (position, whether the last axis's stride is 1 and so not passed),
        one function per such set)."""
        key = self.key(fn) + (f"\nstrided {strided}" if strided else "")
        if key not in self.by_text:
            from ..prims.control import keeps_call
            if keeps_call(fn):
                self.by_text[key] = _write(fn, dims, writer, self._name(fn.name))
            else:
                self.by_text[key] = _write_tensor(fn, dims, writer, self._name(fn.name), strided)
        return self.by_text[key]

    def text(self, base: str, lines: list[str]) -> str:
        """The name of a helper function of these lines ({name} for its name): one per distinct text (a generated
        loop nest of a package, prims/conv_loops.py), named after `base`."""
        key = "text\n" + "\n".join(lines)
        if key not in self.by_text:
            name = self._name(base)
            self.by_text[key] = Helper(name, [], [line.replace("{name}", name) for line in lines], 0)
        return self.by_text[key].name

    def key(self, fn: Func) -> str:
        """What tells callees apart: equal keys, equal texts (print_func). Without a memory plan, fn's own
        equations with each sub-function as a token of its key (made once per function object), so that a chain of
        helpers nested 300 deep is keyed in time linear in its depth, not printed whole at every level; with a
        plan (whose placements the text shows for nested equations too), its text."""
        if fn.plan is not None:
            return print_func(fn)
        if id(fn) not in self.keys:
            self.keys[id(fn)] = (fn, _shallow_text(fn, self._token))
        return self.keys[id(fn)][1]

    def _token(self, sub: Func) -> str:
        return self.tokens.setdefault(self.key(sub), f"@{len(self.tokens)}")

    def _name(self, base: str) -> str:
        from .viewmodel import C_KEYWORDS
        base = base if base.isidentifier() else "helper"
        base = f"{base}_fn" if base in C_KEYWORDS else base  # (a Python helper may be called `long`, `int`, `new`)
        name, k = base, 1
        while name in self.names:
            k += 1
            name = f"{base}_{k}"
        self.names.add(name)
        return name

    def declarations(self) -> list[str]:
        """The `namespace detail` block of the source file (empty without helpers)."""
        if not self.by_text:
            return []
        lines = ["namespace detail {  // the kernels' helper functions (codegen/helpers.py), called from the "
                 "exports below", ""]
        for h in self.by_text.values():
            lines += h.lines + [""]
        return lines + ["}  // namespace detail"]


def _shallow_text(fn: Func, token) -> str:
    """fn's name, params, equations and results as print_func shows them (forms, literal params, types, hints),
    each value named by its place and its hint as it is, a sub-function by `token(sub)` (callees are closed: a
    sub-function reads its own params alone)."""
    from ..prims.base import form_name
    names: dict = {}

    def define(v) -> str:
        names[v] = f"%{len(names)}{v.hint!r}"
        return f"{names[v]}: {format_type(v.type)}"

    def atom(a) -> str:
        return f"{format_scalar(a.value)}: {format_type(a.type)}" if isinstance(a, Lit) else names[a]

    lines = [f"{fn.name!r}({', '.join(define(p) for p in fn.params)}) {fn.result_names!r}"]
    for eqn in fn.eqns:
        params = [f"{k}={token(v) if isinstance(v, Func) else format_value(v)}" for k, v in sorted(eqn.params.items())]
        args = ", ".join(atom(a) for a in eqn.ins)
        outs = ", ".join(define(v) for v in eqn.outs)
        lines.append(f"{outs} = {form_name(eqn.prim, eqn.params)}[{', '.join(params)}]({args})")
    return "\n".join(lines + [f"return {', '.join(atom(r) for r in fn.results)}"])


def _write(fn: Func, dims: list[str], caller, name: str) -> Helper:
    """Emit fn as a static C++ function with its own names; its dims are those of the caller it mentions."""
    from .body import emit_body
    from .cpp import Namer, Workspace, Writer
    from .storage import Storage
    from .viewmodel import C_KEYWORDS, c_identifier

    namer = Namer(dims + list(C_KEYWORDS), [v.hint for v in walk_vars(fn) if v.hint])
    w = Writer(namer, Workspace(on_stack=True), data=caller.data, forms=caller.forms, source_root=caller.source_root)
    w.name_values(fn)
    w.helpers, w.dims = caller.helpers, dims
    args = [c_identifier(p.hint, namer, f"x{i}") for i, p in enumerate(fn.params)]
    w.env.update(zip(fn.params, args))
    results = [h.at([]) if isinstance(h, Storage) else h for h in emit_body(w, fn)]
    body = list(w.lines)
    text = code_text(body + results)
    params = [f"{C_TYPES[p.type.dtype]} {a}" for p, a in zip(fn.params, args)]
    unused = [f"    (void){a};" for a in args if not re.search(rf"\b{re.escape(a)}\b", text)]
    if len(results) == 1:
        ret, tail = C_TYPES[fn.results[0].type.dtype], [f"    return {results[0]};"]
    else:
        outs = [namer.fresh(f"out_{n}" if n.isidentifier() or n.isdigit() else "out") for n in _names(fn)]
        params += [f"{C_TYPES[r.type.dtype]}* {o}" for o, r in zip(outs, fn.results)]
        ret, tail = "void", [f"    *{o} = {r};" for o, r in zip(outs, results)]
    used = [d for d in dims if re.search(rf"\b{re.escape(d)}\b", text)]
    signature = ", ".join([f"int64_t {d}" for d in used] + params) or "void"
    head = f"static {ret} {name}({signature}) {{  // {fn.name}({', '.join(p.hint or 'x' for p in fn.params)})"
    return Helper(name, used, [head, *unused, *body, *tail, "}"], len(fn.results))


def _write_tensor(fn: Func, dims: list[str], caller, name: str, strided: tuple = ()) -> Helper:
    """Emit fn (planned: fn.plan) as a static void C++ function: dims, inputs, outputs, then its workspace. An
    input in `strided` is a pointer and its strides in elements (`const double* qs, int64_t qs_s0`: rows of a wider
    matrix, its last stride 1 known to the C++ compiler; a column takes its last stride too): the caller passes its
    view as it is instead of a packed copy."""
    from .body import emit_body, store
    from .cpp import Namer, Workspace, Writer
    from .storage import Storage
    from .viewmodel import C_KEYWORDS, c_identifier

    namer = Namer(dims + list(C_KEYWORDS), [v.hint for v in walk_vars(fn) if v.hint])
    w = Writer(namer, Workspace(on_stack=False), plan=fn.plan, data=caller.data, forms=caller.forms,
               source_root=caller.source_root)
    w.name_values(fn)
    w.helpers, w.dims = caller.helpers, dims
    params = []
    for i, p in enumerate(fn.params):
        arg = c_identifier(p.hint, namer, f"x{i}")
        w.env[p] = Storage.buffer(arg, p.type.shape) if p.type.rank else arg
        params.append(f"const {w.buffer_ctype(p.type)}* {arg}" if p.type.rank else f"{C_TYPES[p.type.dtype]} {arg}")
        if (i, True) in strided or (i, False) in strided:  # (True: its last axis has stride 1, known here)
            unit = (i, True) in strided
            given = tuple(namer.fresh(f"{arg}_s{k}") for k in range(p.type.rank - unit))
            w.env[p] = Storage(arg, tuple(p.type.shape), given + ("1",) * unit, contiguous=False)
            params += [f"int64_t {s}" for s in given]
    outs = [namer.fresh(f"out_{n}" if n.isidentifier() or n.isdigit() else "out") for n in _names(fn)]
    for k, (o, r) in enumerate(zip(outs, fn.results)):
        params.append(f"{w.buffer_ctype(r.type) if r.type.rank else C_TYPES[r.type.dtype]}* {o}")
        w.outputs[k] = Storage.buffer(o, r.type.shape)
    results = emit_body(w, fn)
    body, w.lines = list(w.lines), []
    for o, r, h in zip(outs, fn.results, results):
        dst = Storage.buffer(o, r.type.shape)
        if r.type.rank == 0:
            w.line(f"*{o} = {h.at([]) if isinstance(h, Storage) else h};")
        elif not (isinstance(h, Storage) and h.base == o and h.contiguous):
            store(w, h, dst, r.type)
    lines = (w.ws.prologue() if w.ws.offsets else []) + body + w.lines
    params += ["void* workspace"] if w.ws.offsets else []
    text = code_text(lines)
    used = [d for d in dims if re.search(rf"\b{re.escape(d)}\b", text + w.ws.size_expr())]
    unused = [f"    (void){a.split()[-1]};" for a in params if not re.search(rf"\b{re.escape(a.split()[-1])}\b", text)]
    head = f"static void {name}({', '.join([f'int64_t {d}' for d in used] + params)}) {{  // {fn.name}"
    return Helper(name, used, [head, *unused, *lines, "}"], len(fn.results), w.ws.size_expr())


def _names(fn: Func) -> list[str]:
    """A name per result: the kernel's, else the hint of the value returned, else its position."""
    if len(fn.result_names) == len(fn.results):
        return list(fn.result_names)
    return [getattr(r, "hint", "") or str(i) for i, r in enumerate(fn.results)]
