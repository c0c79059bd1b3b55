"""Pictures of the IR: `to_dot` (Graphviz text) and `to_html` (one self-contained page), for `ksbuild ir --dot`.

A picture holds one cluster per export. Parameters are ellipses, equations boxes labelled with
their text form (the same names as `ksbuild ir` prints), and edges run from the equation that
makes a value to each one that reads it. A `fusion` equation is drawn as a cluster of the
equations of its body (its loop nest): the body's parameters are the values the fusion reads, its
results the values it makes. Other sub-functions (if-branches, loop bodies, callees) are clusters
of their own, with a dashed edge from their `return` to the equation that runs them. When the
function carries a memory plan, each value's place (output argument, workspace slot, reused
buffer) is in its label, and a note lists the workspace slots with their sizes.
Both functions are pure: text in, text out; `run_dot` is the one that runs Graphviz.
"""
from __future__ import annotations

import html
import shutil
import subprocess
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import KsbuildError
from .core import Eqn, Func, Var
from .printer import _ELIDE, _eqn_line, _Namer, _placement, format_type, print_func
from .types import dim_mul, numel, numpy_dtype

LABEL_WIDTH = 72  # characters per label line; longer lines wrap
LABEL_LINES = 4   # lines per wrapped line at most; the rest is cut with "..."
ELIDE_OVER = 8    # dense constants of more elements are labelled by digest


@dataclass(frozen=True)
class Drawn:
    """One export to draw: its C name suffix, the manifest's expression, its IR, and optionally the C++
    expression of its workspace size in bytes (from the codegen)."""

    name: str
    expr: str
    func: Func
    workspace: str | None = None


def to_dot(exports: list[Drawn]) -> str:
    """The Graphviz text of one digraph with a cluster per export."""
    g = _Graph()
    g.lines += ["digraph ksbuild_ir {", '  graph [rankdir=TB, fontname="monospace", fontsize=10, compound=true];',
                '  node [fontname="monospace", fontsize=9];', '  edge [fontname="monospace", fontsize=8];']
    token = _ELIDE.set(ELIDE_OVER)
    try:
        for d in exports:
            _export(g, d)
    finally:
        _ELIDE.reset(token)
    g.lines.append("}")
    return "\n".join(g.lines) + "\n"


@dataclass
class _Graph:
    """The lines written so far and a counter for node and cluster ids."""

    lines: list[str] = field(default_factory=list)
    count: int = 0

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def node(self, pad: str, label: str, shape: str, extra: str = "") -> str:
        nid = self.fresh("n")
        self.lines.append(f'{pad}{nid} [label="{label}", shape={shape}{extra}];')
        return nid

    def open(self, pad: str, label: str, style: str) -> None:
        self.lines.append(f"{pad}subgraph {self.fresh('cluster_')} {{")
        self.lines.append(f'{pad}  label="{label}"; labeljust=l; {style}')

    def edge(self, pad: str, src: str, dst: str, attrs: str = "") -> None:
        self.lines.append(f"{pad}{src} -> {dst}{f' [{attrs}]' if attrs else ''};")


@dataclass
class _Scope:
    """One function being drawn: its var names (as `ksbuild ir` prints them) and the node making each var."""

    namer: _Namer
    names: dict = field(default_factory=dict)   # Var -> printed name
    made_by: dict = field(default_factory=dict)  # Var -> node id
    every: dict = field(default_factory=dict)    # Var -> printed name, of every scope (shared with nested ones)
    via: dict = field(default_factory=dict)      # a fusion's output -> its name (its node defines the body's value)

    def inner(self) -> "_Scope":
        """The scope of a nested body: the outer names stay known (a body's result may be placed in the buffer
        of its equation's output)."""
        return _Scope(self.namer, dict(self.names), {}, self.every)

    def define(self, v: Var) -> str:
        self.every[v] = self.namer.define(self.names, v)
        return self.every[v]


def _export(g: _Graph, d: Drawn) -> None:
    f = d.func
    g.open("  ", label_text(f"{d.name} = {d.expr}"), 'style="rounded"; color=gray40;')
    scope = _Scope(_Namer(f))
    _func_nodes(g, f, scope, "    ")
    if f.plan is not None:
        note = label_lines(memory_lines(f, scope.every, d.workspace))
        g.node("    ", note, "note", ', style=filled, fillcolor="#fff8dc"')
    g.lines.append("  }")


def _func_nodes(g: _Graph, f: Func, scope: _Scope, pad: str) -> str:
    """Draw f's parameters, equations and return; the id of the return node."""
    for p in f.params:
        name = scope.define(p)
        scope.made_by[p] = g.node(pad, label_text(f"{name}: {format_type(p.type)}"), "ellipse")
    for eqn in f.eqns:
        _eqn(g, eqn, scope, pad)
    return _return(g, f.results, scope, pad)


def _eqn(g: _Graph, eqn: Eqn, scope: _Scope, pad: str) -> None:
    text = _eqn_line(eqn, scope.namer, scope.names) + _placement(eqn, scope.namer, scope.names)
    scope.every.update((v, scope.names[v]) for v in eqn.outs)
    if eqn.prim.name == "fusion":
        _fusion(g, eqn, scope, pad, text)
        return
    tip = f', tooltip="{_source(eqn)}"' if eqn.loc is not None else ""
    nid = g.node(pad, label_text(text), "box", tip + (", style=bold" if _subs(eqn) else ""))
    _edges_in(g, eqn.ins, scope, nid, pad)
    for v in eqn.outs:
        scope.made_by[v] = nid
    for key, sub in _subs(eqn):
        g.open(pad, label_text(f"{key} = func {sub.name}"), "style=dashed; color=gray50;")
        ret = _func_nodes(g, sub, scope.inner(), pad + "  ")
        g.lines.append(f"{pad}}}")
        g.edge(pad, ret, nid, f'style=dashed, label="{label_text(key)}"')


def _fusion(g: _Graph, eqn: Eqn, scope: _Scope, pad: str, text: str) -> None:
    """A fusion equation as a cluster of its body's equations, wired straight to the values it reads."""
    body = eqn.params["body"]
    shape = format_type(body.results[0].type) if body.results else ""
    g.open(pad, label_text(f"fusion: one loop nest over {shape}\n{text}"), 'style=filled; fillcolor="#eef4ff"; '
           "color=steelblue;")
    inner = scope.inner()
    for p, a in zip(body.params, eqn.ins):
        inner.made_by[p] = g.node(pad + "  ", label_text(f"{inner.define(p)}: {format_type(p.type)}"), "ellipse",
                                  ", style=dashed")
        if isinstance(a, Var) and a in scope.made_by:
            g.edge(pad + "  ", scope.made_by[a], inner.made_by[p])
    for e in body.eqns:
        _eqn(g, e, inner, pad + "  ")
    g.lines.append(f"{pad}}}")
    for v, r in zip(eqn.outs, body.results):
        if isinstance(r, Var) and r in inner.made_by:
            scope.made_by[v] = inner.made_by[r]
            scope.via[v] = scope.names[v]


def _edges_in(g: _Graph, ins, scope: _Scope, nid: str, pad: str) -> None:
    for a in dict.fromkeys(a for a in ins if isinstance(a, Var)):
        if a in scope.made_by:
            g.edge(pad, scope.made_by[a], nid, f'label="{label_text(scope.via[a])}"' if a in scope.via else "")


def _return(g: _Graph, results, scope: _Scope, pad: str) -> str:
    shown = ", ".join(scope.names.get(r, "?") if isinstance(r, Var) else f"{r.value!r}" for r in results)
    nid = g.node(pad, label_text(f"return {shown}"), "house", ", style=filled, fillcolor=gray90")
    _edges_in(g, results, scope, nid, pad)
    return nid


def _source(eqn: Eqn) -> str:
    """Where an equation comes from, for its tooltip: file name and line, or the ONNX node."""
    loc = eqn.loc
    where = f"{Path(loc.file).name}:{loc.line}" if loc.line else Path(loc.file).name
    return label_lines([f"{where} node {loc.node}" if loc.node else where]).removesuffix("\\l")


def _subs(eqn: Eqn) -> list[tuple[str, Func]]:
    return [(k, v) for k, v in sorted(eqn.params.items()) if isinstance(v, Func)]


def memory_lines(f: Func, names: dict, workspace: str | None) -> list[str]:
    """The memory plan as lines: every workspace slot with its type and bytes, the values placed in it, and
    the workspace size the generated C++ computes (when known)."""
    lines = ["memory plan"]
    held: dict[int, list[str]] = {}
    for v, place in f.plan.places.items():
        if place.kind == "slot":
            held.setdefault(place.index, []).append(names.get(v, "?"))
    for k, t in enumerate(f.plan.slots):
        at = f" at arena byte {f.plan.offset(k)}" if f.plan.offset(k) is not None else ""
        lines.append(f"slot {k}: {format_type(t)}, {slot_bytes(t)} bytes{at}: {', '.join(held.get(k, []))}")
    for eqn, (offset, size) in f.plan.scratch.items():
        impl = f" {eqn.params['impl']}" if "impl" in eqn.params else ""
        lines.append(f"scratch of a {eqn.prim.name}{impl} call: {size} bytes at arena byte {offset}")
    if f.plan.arena:
        lines.append(f"arena: {f.plan.arena} bytes (slots of static size and kernel calls' scratch; those live at "
                     "once never overlap)")
    if not f.plan.slots:
        lines.append("no workspace slots")
    if workspace is not None:  # the sum of the slots the generated C++ lays out (it may add buffers of its own)
        terms = workspace.split(" + ")
        lines += [f"workspace bytes (C++): {terms[0]}"] + [f"  + {t}" for t in terms[1:]]
    return lines


def slot_bytes(t) -> str:
    """A slot's size in bytes as text (before the generated code rounds each slot up to 16 bytes)."""
    try:
        size = numpy_dtype(t.dtype)().itemsize
    except (KeyError, TypeError, ValueError):
        return "?"
    return str(dim_mul(numel(t.shape), size))


def label_text(text: str) -> str:
    """Text as the inside of a DOT string: quotes and backslashes escaped, each line left-aligned and wrapped at
    LABEL_WIDTH characters (continuation lines indented by four spaces; past LABEL_LINES lines cut with "...")."""
    return label_lines(text.split("\n"))


def label_lines(lines: list[str]) -> str:
    out = []
    for line in lines:
        wrapped = textwrap.wrap(line, LABEL_WIDTH, subsequent_indent="    ", break_on_hyphens=False,
                                break_long_words=True) or [""]
        if len(wrapped) > LABEL_LINES:
            wrapped = wrapped[:LABEL_LINES - 1] + [wrapped[LABEL_LINES - 1][:LABEL_WIDTH - 3] + "..."]
        out += [w.replace("\\", "\\\\").replace('"', '\\"') + "\\l" for w in wrapped]
    return "".join(out)


def run_dot(text: str, fmt: str = "svg") -> str:
    """Graphviz's rendering of DOT text (`dot -T<fmt>`); a KsbuildError when `dot` is not installed."""
    exe = shutil.which("dot")
    if exe is None:
        raise KsbuildError("Graphviz's `dot` program is not installed (it is not on PATH), so no SVG can be drawn",
                           hint="install Graphviz (the `graphviz` package of your system), or use `ksbuild ir --dot` "
                           "for the text, or --html for a page that needs no Graphviz")
    done = subprocess.run([exe, f"-T{fmt}"], input=text, capture_output=True, text=True)
    if done.returncode != 0:
        raise KsbuildError(f"internal: Graphviz's dot rejected the picture: {done.stderr.strip()}")
    return done.stdout


def to_html(exports: list[Drawn], svg: str | None) -> str:
    """One self-contained HTML page: the picture (inline SVG) when given, otherwise a note; then per export its
    fusion groups, its memory plan and its IR text."""
    parts = ["<!DOCTYPE html>", '<html><head><meta charset="utf-8"><title>ksbuild IR</title>', f"<style>{_CSS}</style>",
             "</head><body>", "<h1>ksbuild IR</h1>"]
    if svg is not None:
        parts.append('<div class="picture">' + svg[svg.find("<svg"):] + "</div>")
    else:
        parts.append("<p><em>No picture: Graphviz's <code>dot</code> is not installed. The tables and the IR text "
                     "below say the same.</em></p>")
    for d in exports:
        parts += _export_html(d)
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


_CSS = ("body{font-family:sans-serif;margin:2em}pre{background:#f6f6f6;padding:1em;overflow:auto}"
        "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:2px 8px;"
        "font-family:monospace;text-align:left}.picture svg{max-width:100%;height:auto}")


def _export_html(d: Drawn) -> list[str]:
    esc = html.escape
    out = [f"<h2>{esc(d.name)} = {esc(d.expr)}</h2>"]
    groups = fusion_groups(d.func)
    if groups:
        out.append("<table><tr><th>fusion</th><th>loop nest over</th><th>equations</th><th>prims</th></tr>")
        out += [f"<tr><td>{k}</td><td>{esc(s)}</td><td>{n}</td><td>{esc(p)}</td></tr>" for k, (s, n, p) in
                enumerate(groups)]
        out.append("</table>")
    if d.func.plan is not None:
        head, *rows = memory_lines(d.func, value_names(d.func), d.workspace)
        out.append(f"<table><tr><th>{esc(head)}</th></tr>" + "".join(f"<tr><td>{esc(r)}</td></tr>" for r in rows) +
                   "</table>")
    out.append(f"<pre>{esc(print_func(d.func, elide_over=ELIDE_OVER))}</pre>")
    return out


def value_names(f: Func) -> dict:
    """Every var of f with the name `ksbuild ir` prints for it."""
    scope = _Scope(_Namer(f))
    token = _ELIDE.set(ELIDE_OVER)
    try:
        _func_nodes(_Graph(), f, scope, "")
    finally:
        _ELIDE.reset(token)
    return scope.every


def fusion_groups(f: Func) -> list[tuple[str, int, str]]:
    """Every fusion equation of f (nested bodies included): (loop-nest type, number of equations, prims)."""
    from ..prims.base import form_name
    out = []
    for eqn in f.eqns:
        if eqn.prim.name == "fusion":
            body = eqn.params["body"]
            shape = format_type(body.results[0].type) if body.results else ""
            names = (form_name(e.prim, e.params) for e in body.eqns)  # (lt, not: compare's and logic's forms)
            out.append((shape, len(body.eqns), " ".join(dict.fromkeys(names))))
        for _, sub in _subs(eqn):
            if eqn.prim.name != "fusion":
                out += fusion_groups(sub)
    return out
