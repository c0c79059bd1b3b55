"""Emit the epilogue of a contract or convolve (transforms/fuse_epilogue.py): the elementwise equations
that follow a product, applied to each element as the product stores it.

The prelude's kernels (ks::tiled_gemm, ks::packed_gemm, ks::conv) take the epilogue as a C++ lambda,
`epi(index..., value) -> value`, called for every element of the result: its body is the epilogue's
equations emitted at one index of the result, as inside a fusion loop nest. Where a kernel takes no
lambda (a BLAS call, a loop nest) or an operand cannot be read at that index, the product is stored
first and the epilogue runs over it in place, as the fusion it came from.

Each lambda type instantiates the kernel it is passed to anew (its tiles for every shape: about 200 KB
of machine code and seconds of compile time per call site of ks::conv). So an epilogue is also written
as a *form* where it can be: a function at namespace scope returning the lambda, with the pointers of the
buffers it reads, their outer strides and run-time scalars as arguments. An innermost stride of 1 or 0
stays in the text (the loads still vectorize), and so do the package's constants (ks_data_*: GCC knows
they are not written, so a bias is loaded once per row; through a pointer argument it may alias the
output, which made a small CNN 15% slower) unless the package has many epilogues (EpilogueForms). Call
sites of a form used more than once (the relu6 after each convolution of a network, the residual adds,
the masks of a backward pass) share one lambda type and one instantiation; the others keep their
lambda, as does an epilogue whose text would read anything else of its function.
"""
from __future__ import annotations

import collections
import math
import re
from typing import Sequence

import numpy as np

from ..errors import rule
from ..ir.core import Eqn, Func, Lit
from ..ir.types import numel
from .cpp import Namer, Writer
from .storage import Storage


def extras(eqn: Eqn) -> list:
    """The operands of an equation's epilogue (its last operands)."""
    body: Func = eqn.params["epilogue"]
    n = len(body.params) - 1
    return list(eqn.ins[len(eqn.ins) - n:]) if n else []


def declare(w: Writer, eqn: Eqn, index: Sequence[str], shape, params: Sequence[str], views=None) -> str | None:
    """Declare `const auto <name> = [&](int64_t p..., T v) {...};` computing the epilogue of the element at
    `index` (one C++ expression per axis of `shape`, the region the epilogue runs over) from the lambda's
    parameters `params` (index names) and the product's value; the lambda's name, or None when an operand
    cannot be read in `shape` (views(storage) maps an operand's storage, broadcast to the result's shape,
    to `shape`, or returns None). With the package's EpilogueForms, the lambda's first line is marked as a
    site, which EpilogueForms.resolve keeps or replaces by a call of the epilogue's shared form."""
    body: Func = eqn.params["epilogue"]
    bound = _bind(w, body, extras(eqn), eqn.outs[0].type.shape, views)
    if bound is None:
        return None
    forms = None
    if w.forms is not None:  # (the form reading the package's constants in place, and with them as arguments)
        in_place = _form(w, eqn, bound, index, shape, params, True)
        constants = any(isinstance(s, Storage) and s.root.startswith("ks_data_") for s in bound.values())
        forms = (in_place, _form(w, eqn, bound, index, shape, params, False) if constants else in_place)
    c = w.ctype(eqn.outs[0].type)
    name, value = w.namer.fresh("epilogue"), w.namer.fresh("v")
    header = len(w.lines)
    w.line(f"const auto {name} = [&]({', '.join(f'int64_t {p}' for p in params)}, {c} {value}) {{")
    saved = (dict(w.env), dict(w.local), w.region, w.escaping)
    w.env.update(bound)
    w.local = {body.params[0]: value}
    w.region, w.escaping = (list(index), tuple(shape)), {}
    w.depth += 1
    for e in body.eqns:
        rule(e.prim, "emit")(w, e)
    w.line(f"return {w.scalar(body.results[0])};")
    w.depth -= 1
    w.line("};")
    w.env, w.local, w.region, w.escaping = saved
    _unname_unused(w, header, params)
    if forms is not None and None not in forms:
        w.lines[header] += w.forms.site(name, forms, len(w.lines) - header)
    return name


class EpilogueForms:
    """The epilogue forms of a package. While its functions are written, every epilogue that can be a form
    is marked as a site (its lambda's first line); resolve() then makes the sites of a form used at least
    MIN_USES times calls of one shared factory, and leaves the other sites their own lambda (as readable,
    and no slower). The forms read the package's constants in place, unless that leaves more than
    LIFT_ABOVE lambda types in the package: then the constants become arguments too, so that the epilogues
    of a network's layers (bias + relu6, each with its own bias) share their form (MobileNetV2: 449 s to
    compile with a lambda per call, 45 s shared)."""

    MIN_USES = 2
    LIFT_ABOVE = 24

    def __init__(self):
        self.sites: list[tuple[str, tuple, int]] = []  # (lambda's name, ((text, args) in place, lifted), lines)
        self.names: dict[str, str] = {}  # form text -> the name of its factory, for the shared ones
        self.texts: list[str] = []
        self.lifted: bool | None = None  # (decided by the first resolve, for the whole package)

    def site(self, name: str, forms: tuple, lines: int) -> str:
        """The mark of a site, for the first of the `lines` lines of its lambda (resolve reads it)."""
        self.sites.append((name, forms, lines))
        return f"  {SITE_MARK}{len(self.sites) - 1}"

    def resolve(self, body: list[str]) -> list[str]:
        """The lines of a function with its sites resolved, the shared forms named on first use."""
        if self.lifted is None:
            self.lifted = len({forms[0][0] for _, forms, _ in self.sites}) > self.LIFT_ABOVE
        uses = collections.Counter(forms[self.lifted][0] for _, forms, _ in self.sites)
        out, skip = [], 0
        for line in body:
            if skip:
                skip -= 1
                continue
            head, mark, k = line.partition(f"  {SITE_MARK}")
            if not mark:
                out.append(line)
                continue
            name, forms, lines = self.sites[int(k)]
            text, args = forms[self.lifted]
            if uses[text] < self.MIN_USES:
                out.append(head)
                continue
            if text not in self.names:
                self.names[text] = f"epilogue_form{len(self.names) + 1}"
                self.texts.append(text.replace("{name}", self.names[text]))
            out.append(f"{head[:len(head) - len(head.lstrip())]}const auto {name} = {self.names[text]}({args});")
            skip = lines - 1
        return out

    def declarations(self) -> list[str]:
        return [line for text in self.texts for line in (text.splitlines() + [""])][:-1]


SITE_MARK = "// ks-epilogue-site "


class _Member:
    """One argument of a form's factory: its parameter declaration, its name and the caller's expression."""

    def __init__(self, decl: str, name: str, arg: str, template: str | None = None):
        self.decl, self.name, self.arg, self.template = decl, name, arg, template


class _FormNamer(Namer):
    """Names in a form: loads x_i, others t (not the IR's hints, which differ between call sites)."""

    def fresh(self, hint: str = "t", depth: int | None = None, source: bool = False) -> str:
        return super().fresh("x_i" if hint.endswith("_i") else "t", depth)


_NUMBER = re.compile(r"^\(?-?[0-9][0-9.e+\-]*f?\)?$")
_QUALIFIED = re.compile(r"\b(?:ks|std)::[A-Za-z_][\w:]*")
_BUILTINS = {"__builtin_huge_valf", "__builtin_huge_val", "__builtin_nanf", "__builtin_nan"}  # (c_literal's)


def _form(w: Writer, eqn: Eqn, bound: dict, index: Sequence[str], shape, params: Sequence[str], in_place: bool):
    """(the text of the epilogue's form, with {name} for its factory's name; the arguments of this call), see the
    module's text; None when the text would read something of the function other than its arguments."""
    from .viewmodel import C_KEYWORDS
    body: Func = eqn.params["epilogue"]
    members: list[_Member] = []
    form_env = {}
    count = {"s": 0, "a": 0}

    def fresh(kind: str) -> str:
        count[kind] += 1
        return f"{kind}{count[kind] - 1}"
    for p, a in zip(body.params[1:], extras(eqn)):
        b = bound[p]
        if isinstance(b, str) or b.literal is not None:
            text = b if isinstance(b, str) else b.literal
            if isinstance(a, Lit) or _NUMBER.match(text):
                form_env[p] = b
                continue
            name = fresh("s")
            members.append(_Member(f"{w.ctype(a.type)} {name}", name, text))
            form_env[p] = name if isinstance(b, str) else Storage.splat(name, b.shape)
            continue
        if in_place and b.root.startswith("ks_data_"):  # a constant of the package (see the module's text)
            form_env[p] = b
            continue
        ptr = fresh("a")
        members.append(_Member(f"const T{ptr[1:]}* {ptr}", ptr, b.base, f"T{ptr[1:]}"))
        strides = []
        for j, s in enumerate(b.strides):
            if s in ("0", "1"):
                strides.append(s)
            else:
                members.append(_Member(f"int64_t {ptr}_s{j}", f"{ptr}_s{j}", s))
                strides.append(f"{ptr}_s{j}")
        form_env[p] = Storage(ptr, b.shape, tuple(strides), False)
    names = {q: f"i{j}" for j, q in enumerate(params)}
    form_index = []
    for e in index:
        if e not in names:
            names[e] = f"k{len(names) - len(params)}"
            members.append(_Member(f"int64_t {names[e]}", names[e], e))
        form_index.append(names[e])
    c = w.ctype(eqn.outs[0].type)
    own = {m.name for m in members} | {f"i{j}" for j in range(len(params))} | {"v"}
    saved = (w.lines, w.namer, w.depth, w.env, w.local, w.region, w.escaping, w.derived)
    namer = _FormNamer(sorted(C_KEYWORDS | own))
    reserved = set(namer.used)
    w.lines, w.namer, w.depth = [], namer, 2
    w.env, w.local = dict(form_env), {body.params[0]: "v"}
    w.region, w.escaping, w.derived = (form_index, tuple(shape)), {}, {}  # (no names of one call site's values)
    try:
        for e in body.eqns:
            rule(e.prim, "emit")(w, e)
        w.line(f"return {w.scalar(body.results[0])};")
        lines, declared = w.lines, namer.declared - reserved
    except Exception:  # noqa: BLE001  an emit rule that needs its function: a local lambda instead
        return None
    finally:
        w.lines, w.namer, w.depth, w.env, w.local, w.region, w.escaping, w.derived = saved
    text = "\n".join(lines)
    words = set(re.findall(r"\b[A-Za-z_]\w*", _QUALIFIED.sub(" ", re.sub(r'"[^"]*"', " ", text))))
    if any(not x.startswith("ks_data_") for x in words - (own | declared | C_KEYWORDS | _BUILTINS)):
        return None  # (a dim of the function, a variable of an enclosing loop, ...)
    used = [m for m in members if re.search(rf"\b{m.name}\b", text)]
    lam = [f"int64_t i{j}" if re.search(rf"\bi{j}\b", text) else "int64_t" for j in range(len(params))]
    templates = [m.template for m in used if m.template]
    form = "\n".join(
        ([f"template <{', '.join(f'class {x}' for x in templates)}>"] if templates else [])
        + [f"static auto {{name}}({', '.join(m.decl for m in used)}) {{",
           f"    return [=]({', '.join(lam)}, {c} v) {{", text, "    };", "}"])
    return form, ", ".join(m.arg for m in used)


def _bind(w: Writer, body: Func, operands, out_shape, views) -> dict | None:
    """The epilogue's operand parameters bound to storages (or scalar expressions) readable in the region."""
    bound = {}
    for p, a in zip(body.params[1:], operands):
        if not a.type.rank:
            bound[p] = w.scalar(a)
            continue
        s = w.storage(a).broadcast(out_shape)
        s = views(s) if views is not None else s
        if s is None:
            return None
        bound[p] = s
    return bound


def _unname_unused(w: Writer, header: int, params: Sequence[str]) -> None:
    """Drop the names of the lambda's index parameters its body does not read (-Wunused-parameter)."""
    text = "\n".join(w.lines[header + 1:])
    line = w.lines[header]
    for p in params:
        if not re.search(rf"\b{re.escape(p)}\b", text):
            line = line.replace(f"int64_t {p},", "int64_t,", 1)
    w.lines[header] = line


def merge_tail(s: Storage, keep: int) -> Storage | None:
    """The view s with its axes from `keep` on merged into one (a broadcast or a row-major run of them), or
    None when they are laid out otherwise."""
    tail = s.shape[keep:]
    if s.literal is not None:
        return Storage.splat(s.literal, s.shape[:keep] + (numel(tail),))
    strides = s.strides[keep:]
    if all(t == "0" for t in strides):
        merged = "0"
    elif Storage.buffer("", tail).strides == tuple(strides):
        merged = "1"
    else:
        return None
    return Storage(s.base, s.shape[:keep] + (numel(tail),), s.strides[:keep] + (merged,), False, into=s.root)


# The clamps an affine epilogue applies, by the equations that write them: (prim, the literal's place) -> bit of
# ks::affine's bounds. select(lt(x, lo), lo, x) and select(gt(x, hi), hi, x) are how Clip arrives;
# select(le(x, 0), 0, x) is ReLU's (ONNX Relu, torch.relu), and le / ge give the kernels' lt / gt results
# wherever x == the literal means the same bits (see _same_as_strict).
_BOUNDS = {"lt": 1, "gt": 2, "le": 1, "ge": 2}


def _same_as_strict(w: Writer, lit: Lit, bias: Storage | None) -> bool:
    """Whether select(le(x, lit), lit, x) (or ge) equals select(lt(x, lit), lit, x) (gt) for every x the epilogue
    sees: they differ only where x == lit with other bits, i.e. ±0 against a zero literal. A nonzero literal is
    safe; +0 is when x = v + bias with a constant bias holding no -0.0 (in IEEE rounding to nearest a sum is -0
    only when both terms are), so that x is never -0. ReLU after a convolution with its bias (BatchNorm folded)
    is then ks::affine's clamp at 0, bit for bit."""
    value = float(lit.value)
    if value != 0.0:
        return True
    if math.copysign(1.0, value) < 0 or bias is None:
        return False
    names = {name: key for key, name in w.data.names.items()} if w.data is not None else {}
    dense = w.data.values.get(names.get(bias.base, "")) if names else None
    if dense is None:
        return False
    values = dense.array().reshape(-1)
    return not bool(np.any((values == 0) & np.signbit(values)))


def affine(w: Writer, eqn: Eqn, views) -> str | None:
    """The epilogue as a ks::make_affine call (ks/kernels.h), which the kernels apply as they store,
    when it is v + bias[channel] then clamps (each optional, in that order), or None. The bias must read one
    element per output channel (axis 1 of the result, with `views` merging the rest), the bounds be literals."""
    parts = affine_parts(w, eqn, views)
    if parts is None:
        return None
    c, bias, bits, lo, hi = parts
    return f"ks::make_affine<{c}>({bias}, {bits}, {lo}, {hi})"


def affine_parts(w: Writer, eqn: Eqn, views) -> tuple[str, str, int, str, str] | None:
    """affine's epilogue as (C++ element type, bias pointer or "nullptr", bounds bits (1: lo, 2: hi), lo, hi;
    "0" for a bound not set), or None."""
    body: Func = eqn.params["epilogue"]
    bound = _bind(w, body, extras(eqn), eqn.outs[0].type.shape, views)
    if bound is None or eqn.outs[0].type.dtype not in ("f32", "f64"):
        return None
    from ..prims.base import form_name
    x, bias, bits, limits, compares, read = body.params[0], "nullptr", 0, {}, {}, None
    for e in body.eqns:
        name, ins = form_name(e.prim, e.params), list(e.ins)  # (lt for compare[op="lt"])
        if name == "add" and bias == "nullptr" and not bits and x in ins and len(ins) == 2:
            other = ins[1 - ins.index(x)]
            s = bound.get(other)
            if not isinstance(s, Storage) or s.literal is not None or s.strides[0] != "0" or s.strides[2:] != ("0",):
                return None
            bias, read = (s.base, s) if s.strides[1] == "1" and not s.offset else (None, None)
            if bias is None:
                return None
        elif name in _BOUNDS and ins[0] is x and isinstance(ins[1], Lit):
            if name in ("le", "ge") and not _same_as_strict(w, ins[1], read):
                return None
            compares[e.outs[0]] = (_BOUNDS[name], ins[1])
            continue
        elif name == "select" and ins[0] in compares and ins[2] is x and isinstance(ins[1], Lit):
            bit, lit = compares.pop(ins[0])
            if bits & bit or lit.value != ins[1].value or (bit == 1 and bits & 2):
                return None
            bits |= bit
            limits[bit] = w.scalar(lit)
        else:
            return None
        x = e.outs[0]
    if compares or body.results[0] is not x or (bias == "nullptr" and not bits):
        return None
    return w.ctype(eqn.outs[0].type), bias, bits, limits.get(1, "0"), limits.get(2, "0")
