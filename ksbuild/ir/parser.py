"""Parse the canonical text form of the IR back into a `Func` (the inverse of `print_func`).

Equations are rebuilt with `Builder.bind`, so every output type is inferred again by the
primitive's type rule and checked against the printed one. Errors are `KsbuildError`s
located in the text (file "<ir>", line, column).

    func    := 'func' name '(' [var ':' type, ...] ')' '->' '(' [[name ':'] type, ...] ')'
               '{' eqn* 'return' [atom, ...] '}'
    eqn     := (var ':' type, ... | '(' ')') '=' prim ['[' key '=' value, ... ']'] '(' [atom, ...] ')'
               (key '=' func)*
    atom    := var | scalar ':' type
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

from ..errors import KsbuildError, Location
from .builder import Builder
from .core import Atom, Eqn, Func, Lit, Var
from .dense import Dense
from .printer import format_type
from .types import DTYPES, Dim, Type
from .verify import lit_problem

_TOKEN = re.compile(r"""
    (?P<space>[ \t\r]+) | (?P<newline>\n) | (?P<comment>\#[^\n]*)
  | (?P<var>%[A-Za-z0-9_]+)
  | (?P<num>-?(?:inf|nan)\b|-?\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)
  | (?P<str>'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<punct>->|[()\[\]{},:=])
""", re.VERBOSE)


@dataclass(frozen=True)
class _Tok:
    kind: str  # var, num, str, ident, punct, eof
    text: str
    loc: Location


def parse_func(text: str) -> Func:
    """The Func printed as `text` by `print_func`; a located KsbuildError if it is malformed."""
    from ..prims import PRIMS  # registers every primitive; imported here to avoid an import cycle

    p = _Parser(tokenize(text), PRIMS)
    f = p.func()
    p.expect("eof")
    return f


def tokenize(text: str) -> list[_Tok]:
    """The tokens of IR text, ending with an `eof` token; a KsbuildError at a bad character."""
    lines = text.split("\n")
    toks: list[_Tok] = []
    line, start, pos = 1, 0, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        loc = Location("<ir>", line, pos - start, source_line=lines[line - 1])
        if m is None:
            raise KsbuildError(f"unexpected character {text[pos]!r}", loc)
        if m.lastgroup == "newline":
            line, start = line + 1, m.end()
        elif m.lastgroup not in ("space", "comment"):
            toks.append(_Tok(m.lastgroup, m.group(), loc))
        pos = m.end()
    toks.append(_Tok("eof", "", Location("<ir>", line, pos - start, source_line=lines[line - 1])))
    return toks


class _Parser:
    """Recursive descent over the tokens; one scope of names per (closed) function."""

    def __init__(self, toks: list[_Tok], prims: dict[str, Any]):
        self.toks = toks
        self.prims = prims
        self.pos = 0

    # ---- token helpers ---------------------------------------------------------------------

    def peek(self, ahead: int = 0) -> _Tok:
        return self.toks[min(self.pos + ahead, len(self.toks) - 1)]

    def next(self) -> _Tok:
        tok = self.peek()
        self.pos += 1
        return tok

    def at(self, text: str, ahead: int = 0) -> bool:
        tok = self.peek(ahead)
        return tok.kind in ("punct", "ident") and tok.text == text

    def skip(self, text: str) -> bool:
        """Consume the punctuation or keyword `text` if it comes next."""
        if self.at(text):
            self.next()
            return True
        return False

    def expect(self, kind: str, text: str | None = None) -> _Tok:
        tok = self.peek()
        if tok.kind != kind or (text is not None and tok.text != text):
            raise self.error(f"expected {text or kind}, got {tok.text or 'end of input'!r}", tok)
        return self.next()

    def error(self, message: str, tok: _Tok | None = None) -> KsbuildError:
        return KsbuildError(message, (tok or self.peek()).loc)

    def comma_list(self, close: str, item) -> list:
        """Items separated by commas up to the closing punctuation (consumed)."""
        items = []
        while not self.at(close):
            items.append(item())
            if not self.at(close):
                self.expect("punct", ",")
        self.next()
        return items

    # ---- functions -------------------------------------------------------------------------

    def func(self) -> Func:
        """`func name(params) -> (result types) { eqns return results }`."""
        self.expect("ident", "func")
        name = self.name()
        scope: dict[str, Var] = {}
        self.expect("punct", "(")
        params = self.comma_list(")", lambda: self.define(scope, self.expect("var"), self.colon_type()))
        self.expect("punct", "->")
        self.expect("punct", "(")
        named_types = self.comma_list(")", self.result_type)
        self.expect("punct", "{")
        b = Builder()
        while not self.at("return"):
            self.eqn(b, scope)
        results = self.results(name, scope, [t for _, t in named_types])
        names = [n for n, _ in named_types]
        result_names = tuple(n or "" for n in names) if any(n is not None for n in names) else ()
        return b.func(name, params, results, result_names)

    def results(self, name: str, scope: dict[str, Var], declared: list[Type]) -> list[Atom]:
        """`return atoms }`, checked against the declared result types."""
        ret = self.expect("ident", "return")
        results = self.comma_list("}", lambda: self.atom(scope))
        if declared != [r.type for r in results]:
            raise self.error(f"'{name}' declares results ({_types(declared)}) "
                             f"but returns ({_types(r.type for r in results)})", ret)
        return results

    def result_type(self) -> tuple[str | None, Type]:
        """A result type, optionally named: `f32` or `dx: f32`."""
        name = None
        if self.peek().kind in ("ident", "str") and self.at(":", 1):
            name = self.name()
            self.next()
        return name, self.type()

    def name(self) -> str:
        tok = self.peek()
        if tok.kind == "str":
            return ast.literal_eval(self.next().text)
        return self.expect("ident").text

    def define(self, scope: dict[str, Var], tok: _Tok, t: Type) -> Var:
        """A new var named by `tok` (its hint unless the name is a number)."""
        if tok.text in scope:
            raise self.error(f"{tok.text} is defined twice", tok)
        scope[tok.text] = Var(t, _hint(tok))
        return scope[tok.text]

    # ---- equations -------------------------------------------------------------------------

    def eqn(self, b: Builder, scope: dict[str, Var]) -> None:
        """One equation and the sub-function blocks that follow it."""
        first = self.peek()
        outs = self.eqn_outs(scope)
        self.expect("punct", "=")
        prim_tok = self.expect("ident")
        from ..prims.base import FORMS, lookup
        if prim_tok.text not in self.prims and prim_tok.text not in FORMS:
            raise self.error(f"unknown primitive '{prim_tok.text}'", prim_tok)
        prim, fixed = lookup(prim_tok.text)
        params = dict(self.comma_list("]", self.key_value)) if self.skip("[") else {}
        params.update(fixed)  # (a form's name, lt(x, y), fixes its prim's params: compare[op="lt"])
        self.expect("punct", "(")
        ins = self.comma_list(")", lambda: self.atom(scope))
        while self.peek().kind == "ident" and self.at("=", 1):
            key = self.next().text
            self.next()
            params[key] = self.func()
        got = self.bind(b, first.loc, prim, ins, params, outs)
        scope.update((tok.text, v) for (tok, _), v in zip(outs, got))

    def eqn_outs(self, scope: dict[str, Var]) -> list[tuple[_Tok, Type]]:
        """`%a: t, %b: u` (names new in this function), or `()` for no outputs."""
        if self.skip("("):
            self.expect("punct", ")")
            return []
        outs = [(self.expect("var"), self.colon_type())]
        while self.skip(","):
            outs.append((self.expect("var"), self.colon_type()))
        names = [tok.text for tok, _ in outs]
        for i, (tok, _) in enumerate(outs):
            if tok.text in scope or tok.text in names[:i]:
                raise self.error(f"{tok.text} is defined twice", tok)
        return outs

    def bind(self, b: Builder, loc: Location, prim, ins, params, outs) -> tuple[Var, ...]:
        """Bind the equation (re-inferring types), check them against the text, hint the outs."""
        b.loc = loc
        try:
            got = b.bind(prim, ins, params)
        except KsbuildError:
            raise
        except Exception as e:  # a type rule given the wrong operands or params
            raise KsbuildError(f"bad operands or parameters for '{prim.name}': {e!r}", loc) from None
        want = [t for _, t in outs]
        if [v.type for v in got] != want:
            raise KsbuildError(f"'{prim.name}' gives ({_types(v.type for v in got)}) but the text says "
                               f"({_types(want)})", loc)
        hinted = tuple(Var(v.type, _hint(tok)) for v, (tok, _) in zip(got, outs))
        last = b.eqns[-1]
        b.eqns[-1] = Eqn(last.prim, last.ins, hinted, last.params, last.loc)
        return hinted

    def key_value(self) -> tuple[str, Any]:
        key = self.expect("ident").text
        self.expect("punct", "=")
        return key, self.value()

    def value(self) -> Any:
        """A Python literal: a scalar, a string, None, or a tuple or list of values."""
        tok = self.peek()
        if tok.kind == "str":
            return ast.literal_eval(self.next().text)
        if self.skip("None"):
            return None
        if self.at("dense") and self.at("(", 1):
            return self.dense()
        if self.at("(") or self.at("["):
            self.next()
            items = self.comma_list(")" if tok.text == "(" else "]", self.value)
            return tuple(items) if tok.text == "(" else items
        return self.scalar()

    def dense(self) -> Dense:
        """`dense(type, 'base64')`: a dense constant."""
        start = self.next()
        self.expect("punct", "(")
        t = self.type()
        self.expect("punct", ",")
        text = ast.literal_eval(self.expect("str").text)
        self.expect("punct", ")")
        try:
            return Dense.from_text(t, text)
        except ValueError as e:
            raise self.error(f"bad dense constant: {e}", start) from None

    # ---- atoms and types -------------------------------------------------------------------

    def atom(self, scope: dict[str, Var]) -> Atom:
        tok = self.peek()
        if tok.kind == "var":
            self.next()
            if tok.text not in scope:
                raise self.error(f"{tok.text} is not defined in this function", tok)
            return scope[tok.text]
        lit = Lit(self.scalar(), self.colon_type())
        problem = lit_problem(lit)
        if problem:
            raise self.error(problem, tok)
        return lit

    def scalar(self) -> bool | int | float | str:
        tok = self.next()
        if tok.kind == "ident" and tok.text in ("True", "False"):
            return tok.text == "True"
        if tok.kind == "str":
            return ast.literal_eval(tok.text)
        if tok.kind != "num":
            raise self.error(f"expected a value, got {tok.text or 'end of input'!r}", tok)
        if any(c in tok.text for c in ".eEn"):
            return float(tok.text)
        return int(tok.text)

    def colon_type(self) -> Type:
        self.expect("punct", ":")
        return self.type()

    def type(self) -> Type:
        tok = self.expect("ident")
        if tok.text not in DTYPES:
            raise self.error(f"unknown dtype '{tok.text}'", tok)
        shape: list[Dim] = []
        if self.skip("["):
            shape = self.comma_list("]", self.dim)
        return Type(tok.text, tuple(shape))

    def dim(self) -> Dim:
        tok = self.peek()
        if tok.kind == "num" and tok.text.lstrip("-").isdigit():
            return int(self.next().text)
        return self.name()


def _hint(tok: _Tok) -> str:
    name = tok.text[1:]
    return "" if name[0].isdigit() else name


def _types(types) -> str:
    return ", ".join(format_type(t) for t in types)
