"""The view model: plain data describing every generated C function, ready for templates."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.core import Func, Lit, Var
from ..ir.printer import walk_vars
from ..ir.types import C_TYPES, dim_names, dim_sub
from . import steps as steps_
from .aliasing import in_place_inputs
from .body import emit_body
from .cpp import Namer, Workspace, Writer, is_macro_like
from .helpers import Helpers, code_text
from .steps import scope_steps
from .storage import Storage, dim_expr

C_KEYWORDS = {"int", "float", "double", "char", "void", "return", "if", "else", "for", "while", "do", "long",
              "short", "signed", "unsigned", "const", "static", "auto", "bool", "true", "false", "case",
              "default", "switch", "break", "continue", "goto", "sizeof", "struct", "union", "enum", "new",
              "delete", "this", "class", "public", "private", "template", "typename", "namespace", "using",
              "operator", "register", "volatile", "extern", "inline", "workspace", "ks", "std",
              # the rest of C++17's keywords, and the type names the generated code spells
              "alignas", "alignof", "and", "and_eq", "asm", "bitand", "bitor", "catch", "char16_t", "char32_t",
              "compl", "const_cast", "constexpr", "decltype", "dynamic_cast", "explicit", "export", "friend",
              "mutable", "noexcept", "not", "not_eq", "nullptr", "or", "or_eq", "protected", "reinterpret_cast",
              "static_assert", "static_cast", "thread_local", "throw", "try", "typedef", "typeid", "virtual",
              "wchar_t", "xor", "xor_eq", "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t",
              "uint32_t", "uint64_t", "size_t", "NULL", "main",
              # C++20's, for consumers that compile the header as C++20, and C's own (_Bool, restrict)
              "char8_t", "concept", "consteval", "constinit", "co_await", "co_return", "co_yield", "requires",
              "restrict", "_Bool", "_Complex", "_Alignas", "_Alignof", "_Atomic", "_Generic", "_Noreturn",
              "_Static_assert", "_Thread_local"}


def reserved_dim_name(name: str) -> str | None:
    """Why a symbolic dim cannot be named `name` (it is spelled verbatim as an int64_t parameter of the
    generated C functions), or None when it can."""
    if name in C_KEYWORDS:
        return f"the dim name '{name}' is a C/C++ keyword or a name the generated C++ uses"
    if is_macro_like(name):
        return f"the dim name '{name}' may be a macro of the C/C++ headers (all capitals, or a reserved spelling)"
    return None


@dataclass
class ArgView:
    """One C parameter: its declaration and what it carries."""

    name: str
    decl: str
    role: str      # dim | in | out | workspace
    dtype: str = ""
    shape: list = field(default_factory=list)
    param: str = ""  # an input's name in the kernel's source (the C name may differ: n -> n1)


@dataclass
class ExportView:
    """Everything a template needs to write one export."""

    c_name: str
    name: str
    kind: str                      # scalar | tensor
    ret: str
    args: list[ArgView]
    body: list[str]
    doc: list[str]
    dims: list[str]
    workspace: str = "0"
    needs_workspace: bool = False
    in_place: list[str] = field(default_factory=list)  # the inputs the one output may be (codegen/aliasing.py)

    @property
    def params(self) -> str:
        return ", ".join(a.decl for a in self.args) or "void"

    @property
    def workspace_unused_dims(self) -> list[str]:
        """Dims the workspace size expression does not mention (voided in the size function)."""
        import re
        return [d for d in self.dims if not re.search(rf"\b{re.escape(d)}\b", self.workspace)]

    @property
    def aliasing(self) -> str:
        """The header's rule on which of a tensor export's buffers may share memory."""
        outs = [a.name for a in self.args if a.role == "out"]
        rule = "no output may overlap an input" + (" or another output" if len(outs) > 1 else "")
        if not self.in_place:
            return rule
        return f"{rule}, except that {outs[0]} may be {' or '.join(self.in_place)} itself (the same pointer: in place)"

    @property
    def dim_params(self) -> str:
        return ", ".join(f"int64_t {d}" for d in self.dims) or "void"

    @property
    def dim_args(self) -> str:
        return ", ".join(self.dims)

    @property
    def call_args(self) -> str:
        return ", ".join(a.name for a in self.args)


def _dims(f: Func) -> list[str]:
    dims: list[str] = []
    for t in list(f.in_types) + list(f.out_types):
        for d in t.shape:
            for name in dim_names(d):
                if name not in dims:
                    dims.append(name)
    return dims


def c_identifier(hint: str, namer: Namer, fallback: str) -> str:
    """A parameter's C name: its hint where that is a free identifier, else `fallback` (numbered if taken)."""
    base = hint if hint and hint.isidentifier() and hint not in C_KEYWORDS else fallback
    taken = base in namer.used or is_macro_like(base) or base.startswith("ks_")
    return namer.fresh(base) if taken else (namer.used.add(base) or base)


def is_scalar_abi(f: Func) -> bool:
    return all(t.rank == 0 for t in list(f.in_types) + list(f.out_types))


def export_view(package: str, name: str, f: Func, doc: list[str], data=None, forms=None,
                source_root=None, helpers=None, vectors: bool = True) -> ExportView:
    """Lay out the C signature of f (lowered and planned by the pass pipeline) and write its body;
    `data` (a codegen.data.DataSection) collects the constants it reads, `forms` (codegen.epilogue.EpilogueForms)
    the epilogue forms it applies, `helpers` (codegen.helpers.Helpers) the helper functions its calls call;
    source_root (the manifest's directory) is what source paths in comments are relative to; `vectors`: the target
    has a vector unit (codegen/steps.py: when a long function's steps become functions of their own)."""
    dims = _dims(f)
    namer = Namer(dims + list(C_KEYWORDS), [v.hint for v in walk_vars(f) if v.hint])
    scalar_abi = is_scalar_abi(f)
    w = Writer(namer, Workspace(on_stack=scalar_abi), plan=f.plan, data=data, forms=forms, source_root=source_root)
    w.name_values(f)
    w.helpers, w.dims = helpers if helpers is not None else Helpers(), dims
    args = [ArgView(d, f"int64_t {d}", "dim") for d in dims]
    python_names: set[str] = set()
    for i, p in enumerate(f.params):
        cname = c_identifier(p.hint, namer, f"x{i}")
        args.append(_input_arg(w, p, cname, python_names))
    outs = _output_names(f, namer)
    if scalar_abi:
        return _scalar_export(package, name, f, w, args, outs, doc, dims)
    return _tensor_export(package, name, f, w, args, outs, doc, dims, vectors)


def _input_arg(w: Writer, p: Var, cname: str, python_names: set[str]) -> ArgView:
    """An input's C parameter; its Python keyword is its name in the source, or its C name where that name is
    taken by an earlier input (the cotangents of a vjp of a tuple-returning kernel are all 'ct')."""
    c = C_TYPES[p.type.dtype]
    param = p.hint if p.hint and p.hint not in python_names else cname
    while param in python_names:
        param += "_"
    python_names.add(param)
    if p.type.rank == 0:
        w.env[p] = cname
        return ArgView(cname, f"{c} {cname}", "in", p.type.dtype, [], param)
    w.env[p] = Storage.buffer(cname, p.type.shape)
    return ArgView(cname, f"const {c}* {cname}", "in", p.type.dtype, list(p.type.shape), param)


def _output_names(f: Func, namer: Namer) -> list[str]:
    if len(f.results) == 1:
        return [namer.fresh("out")]
    names = f.result_names or tuple(str(i) for i in range(len(f.results)))
    return [namer.fresh(f"out_{n}" if n.isidentifier() or n.isdigit() else "out") for n in names]


def _rank0(h):
    """A rank-0 result as a C++ expression: a view of one element (x[i]) reads that element."""
    return h.at([]) if isinstance(h, Storage) and not h.shape else h


def _scalar_export(package, name, f, w, args, outs, doc, dims) -> ExportView:
    results = [_rank0(h) for h in emit_body(w, f)]
    body = list(w.lines)
    if len(f.results) == 1:
        ret = C_TYPES[f.results[0].type.dtype]
        body.append(f"    return {results[0]};")
    else:
        ret = "void"
        for o, r, t in zip(outs, results, f.out_types):
            args.append(ArgView(o, f"{C_TYPES[t.dtype]}* {o}", "out", t.dtype, []))
            body.append(f"    *{o} = {r};")
    return ExportView(f"{package}_{name}", name, "scalar", ret, args, _void_unused(args, body), doc, dims)


def _tensor_export(package, name, f, w, args, outs, doc, dims, vectors: bool = True) -> ExportView:
    out_args = []
    for k, (o, r) in enumerate(zip(outs, f.results)):
        c = C_TYPES[r.type.dtype]
        out_args.append(ArgView(o, f"{c}* {o}", "out", r.type.dtype, list(r.type.shape)))
        w.outputs[k] = Storage.buffer(o, r.type.shape)
    w.ws.scoped = True
    derived = _differences(f, dims)
    w.int_signs.facts = list(derived)  # (the prologue returns err_shape when one is negative)
    results = emit_body(w, f, steps=True)
    w.line(steps_.BEGIN)  # (the copies of the results into the outputs, when they are elsewhere: one more step)
    for o, r, h in zip(out_args, f.results, results):
        if r.type.rank == 0:
            w.line(f"*{o.name} = {_rank0(h)};")
        elif not (isinstance(h, Storage) and h.base == o.name and h.contiguous):
            src = h if isinstance(h, Storage) else Storage.splat(h, r.type.shape)
            w.line(f"// the result {o.name}")  # (a loop nest of no line of the source: the copy into the output)
            w.copy(src, Storage.buffer(o.name, r.type.shape), r.type)
    w.line(steps_.end(True))
    body = scope_steps(w.lines, w.ws, vectors, tuple(a.name for a in args + out_args))  # (args: the dims first)
    lines = _prologue(dims, w.ws, f"{package}_{name}", derived, _taken(f, dims)) + body
    lines.append("    return ks::status::ok;")
    ins = [a.name for a in args if a.role == "in"]
    args = args + out_args + [ArgView("workspace", "void* workspace", "workspace")]
    return ExportView(f"{package}_{name}", name, "tensor", "int", args, _void_unused(args, lines), doc, dims,
                      w.ws.size_expr(), bool(w.ws.offsets), [ins[k] for k in in_place_inputs(f)])


def _prologue(dims: list[str], ws: Workspace, c_name: str, derived: list[str] = (),
              taken: list[str] = ()) -> list[str]:
    """Argument checks: negative dims, sizes computed from them that come out negative (x[1:-1] of one element:
    torch's slice would be empty, ksbuild's tensors have the sizes the kernel's text gives), axes of size 0 that
    an element is taken from (x[0] of an empty x), a missing workspace."""
    lines = []
    if dims:
        lines.append(f"    if ({' || '.join(f'{d} < 0' for d in dims)}) return ks::status::err_shape;")
    checks = [f"{dim_expr(d)} < 0" for d in derived] + list(taken)
    if checks:
        lines.append(f"    if ({' || '.join(checks)}) return ks::status::err_shape;")
    if ws.offsets:
        # NULL is fine when the size is 0 (a zero-sized dim), as P_E_workspace_size promises. Without dims the
        # size is spelled out: a constant, so the compiler knows the workspace is not null below (calling the
        # size function, GCC 12 warned of writes into a null object at a constant offset)
        size = f"({ws.size_expr()})" if not dims else f"{c_name}_workspace_size({', '.join(dims)})"
        lines.append(f"    if (workspace == nullptr && {size} != 0) return ks::status::err_null;")
        lines += ws.prologue()
    return lines


def _taken(f: Func, dims: list[str]) -> list[str]:
    """Conditions under which an element would be taken from (or written into) an axis of size 0, which has none:
    x[i] and its vjp's add into x[i], a gather from an empty table, torch.max(x, dim).values (a max or min with
    ties="first") or the position of an extremum (reduce_argmax, reduce_argmin) over an empty axis. In f (its
    fused loop nests and inlined calls too) and in the bodies of its loops whose
    step counts are dims (for row in x: row[0]), which count only when they have steps; a gather counts when it
    has indices. Not in an if's branches (`if n > 0: x[0]` guards), nor in loops of run-time step counts.
    Each condition makes the call return status 1 before anything is read (ks::clamp_index has no element to
    clamp to: it gave -1, a read before the buffer)."""
    checks: list[str] = []

    def expressible(d) -> bool:
        return isinstance(d, int) or (isinstance(d, str) and set(dim_names(d)) <= set(dims))

    def check(extent, factors: tuple) -> None:
        """Status 1 when `extent` is 0 and every factor of the count of elements taken from it is not."""
        if not expressible(extent) or (isinstance(extent, int) and extent > 0) or 0 in factors or extent in factors:
            return
        terms = [] if isinstance(extent, int) else [f"{dim_expr(extent)} < 1"]
        terms += [f"{dim_expr(d)} > 0" for d in dict.fromkeys(factors) if isinstance(d, str) and expressible(d)]
        checks.append(" && ".join(terms) or "true")

    def visit(g: Func, runs: tuple) -> None:
        sizes = {e.outs[0]: e.params["dim"] for e in g.eqns if e.prim.name == "dim_size"}
        for e in g.eqns:
            if e.prim.takes is not None:
                check(e.ins[0].type.shape[e.params["axis"]],
                      runs + tuple(d for at in e.prim.takes for d in e.ins[at].type.shape))
            elif (e.prim.reduction in ("max", "min") and e.params.get("ties") == "first") or \
                    e.prim.reduction in ("argmax", "argmin"):
                # torch.max(x, dim).values: the element at the extremum's index, which an empty axis does not have
                # (torch refuses it), for every element of the result; the index itself (reduce_argmax) likewise
                for axis in e.params["axes"]:
                    check(e.ins[0].type.shape[axis], runs + tuple(e.outs[0].type.shape))
            elif e.prim.runs:  # (a call's, a fusion's: their equations run as theirs would at this level)
                visit(e.params[e.prim.runs], runs)
            elif e.prim.name == "loop":
                trip = e.ins[0]
                steps = int(trip.value) if isinstance(trip, Lit) else sizes.get(trip)
                if steps is not None and expressible(steps):
                    visit(e.params["body"], runs + (steps,))

    visit(f, ())
    return [c if " && " not in c else f"({c})" for c in dict.fromkeys(checks)]


def _differences(f: Func, dims: list[str]) -> list[str]:
    """The sizes of f's values, and the sizes in its equations' parameters (a pad's widths, a slice's bounds),
    loop bodies' too but not an if's branches, that subtract dims and so may come out negative (n - 2); and for
    a slice, what is left after its end (n - k: x[:k] must lie in x)."""
    import re
    found: set[str] = set()

    def size(d) -> bool:
        return (isinstance(d, str) and "-" in d and re.fullmatch(r"[\w\s+\-*/()]+", d) is not None
                and all(n in dims for n in re.findall(r"[A-Za-z_]\w*", d)))

    def visit_param(p) -> None:
        if isinstance(p, Func):
            visit(p)
        elif isinstance(p, (tuple, list)):
            for q in p:
                visit_param(q)
        elif size(p):
            found.add(p)

    def visit(g: Func) -> None:
        for v in [*g.params, *(o for e in g.eqns for o in e.outs)]:
            found.update(d for d in v.type.shape if size(d))
        for e in g.eqns:
            if e.prim.branches:  # (a branch's sizes: the condition may be what guards them, if n > 2)
                continue
            if e.prim.name == "slice":  # x[:k] with k another input's dim: k must not pass x's end (n - k >= 0)
                rest = dim_sub(e.ins[0].type.shape[e.params["axis"]], e.params["stop"])
                found.update(d for d in (rest, dim_sub(e.params["stop"], e.params["start"]), e.params["start"])
                             if size(d))
            for p in e.params.values():
                visit_param(p)
    visit(f)
    return sorted(found)


def _void_unused(args: list[ArgView], body: list[str]) -> list[str]:
    """Mark parameters the body never reads as used, so -Wextra stays quiet."""
    import re

    text = code_text(body)  # a comment's or a string's "a" is no use of a
    unused = [a.name for a in args if not re.search(rf"\b{re.escape(a.name)}\b", text)]
    return [f"    (void){n};" for n in unused] + body
