"""The Python frontend: an AST visitor that accepts only the syntax it lists.

Supported in kernels: annotated `def`, assignment and augmented assignment (also tuple
unpacking), `+ - * / // % **`, unary minus, comparisons (also chained), `and or not`,
`if/elif/else` with `return` anywhere, conditional expressions, `math.*`/`torch.*` scalar
functions, `float()/int()` casts, literals and module-level constants, calls to other
functions of the same module, `for i in range(...)` with loop-carried values, tuple results.
Anything else is a KsbuildError at the user's line with a caret and what to use instead.

This module compiles functions and statements; the expressions and calls are expressions.py's
ExpressionCompiler, which KernelCompiler mixes in.
"""
from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ...errors import KsbuildError, Location
from ...ir.builder import Builder
from ...ir.core import Atom, Func, Lit, Var
from ...ir.types import DTYPES, Type, dim_names
from .branches import FallThrough, always_returns, compile_early_returns, packed
from .expressions import ExpressionCompiler, _is_tensor_class, _out_of_place
from .scope import Const, Returned, Scope, SymDim, Value, assigned_names, const_lit, const_type

STATIC_NESTING = 8  # frames of one function with different static arguments (a recursion they end)
SCALAR_ANNOTATIONS = {"bool": "bool", "int": "i64"}


@dataclass
class Source:
    """A parsed user file: its text lines, top-level functions and constants."""

    path: Path
    lines: list[str]
    tree: ast.Module
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)
    constants: dict[str, Const] = field(default_factory=dict)
    modules: dict[str, str] = field(default_factory=dict)  # alias -> "math" | "torch"
    imported: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (module, attr)
    globals: set[str] = field(default_factory=set)  # other module-level names (not usable in kernels)
    foreign: dict[str, str] = field(default_factory=dict)  # alias -> a module kernels cannot use (np -> numpy)
    borrowed: dict[str, str] = field(default_factory=dict)  # name -> the other module it is imported from
    const_modules: dict[str, dict] = field(default_factory=dict)  # alias -> constants of a module next to it
    files: list[Path] = field(default_factory=list)  # the files of those modules (and of their imports)
    custom: dict = field(default_factory=dict)  # name -> custom_rules.Rule: functions with derivative rules
    externs: dict = field(default_factory=dict)  # name -> externs.Extern: external C functions (ksbuild.extern)

    def loc(self, node: ast.AST) -> Location:
        line = getattr(node, "lineno", 0)
        end = getattr(node, "end_col_offset", None) if getattr(node, "end_lineno", line) == line else None
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else None
        return Location(str(self.path), line, getattr(node, "col_offset", 0), end, text)

    def error(self, node: ast.AST, message: str, hint: str | None = None) -> KsbuildError:
        return KsbuildError(message, self.loc(node), hint)


class KernelCompiler(ExpressionCompiler):
    """Compiles the functions of one source file into IR, one Func per (function, arg types)."""

    def __init__(self, source: Source, float_dtype: str):
        from .loops import IntFacts

        self.src = source
        self.float_dtype = float_dtype
        self.int_facts = IntFacts()  # ranges of loop counters: bounds for loop counts computed at run time
        self.cache: dict[tuple, Func] = {}
        self.signature_loc: Location | None = None
        self.active: list[str] = []  # the functions being compiled, innermost last
        self.active_static: list[tuple] = []  # and the static arguments (dims, constants) of each
        self.rule_of: list[str] = []  # the custom functions whose rules are being compiled (custom_rules.py)
        self.frames: list = []  # branches.Frame: the ifs whose returns are being packed (see branches.py)
        # values that in torch are one of several tensors, not a new one (y = x if c else w, or an if whose
        # branches assign y = x and y = w): an in-place update of y would change x or w there
        self.picks: dict[Atom, tuple[Atom, ...]] = {}
        # views another name held of a tensor when it was updated in place (t = x.T; x += 1): torch's t shows
        # the update, ksbuild's the old values, so reading t afterwards is an error -> (t, x, line of the update)
        self.stale: dict[Atom, tuple[str, str, int]] = {}

    # ---- entry points ------------------------------------------------------------------------

    def compile(self, name: str, param_types: Sequence[Type] | None = None,
                result_types: Sequence[Type] | None = None, signature_loc: Location | None = None) -> Func:
        """The IR of top-level function `name`, typed by param_types or by its annotations (result_types: the
        manifest's signature at signature_loc, where a result that does not fit it is reported)."""
        self.signature_loc = signature_loc
        fn = self.src.functions.get(name)
        if fn is None:
            raise KsbuildError(f"no function '{name}' in {self.src.path.name}",
                               Location(str(self.src.path)),
                               hint=f"defined functions: {', '.join(self.src.functions) or 'none'}")
        types = list(param_types) if param_types is not None else self.annotated_params(fn)
        key = (name, tuple(types))
        if key not in self.cache:
            self.cache[key] = self.compile_def(fn, types, result_types)
        return self.cache[key]

    def compile_static(self, name: str, types: list, static: dict[int, SymDim | Const]) -> Func:
        """A helper called with dims (d = x.shape[1]) or Python constants (for unannotated parameters) as
        arguments: those stay dims and constants inside, not params."""
        fn = self.src.functions[name]
        key = (name, tuple(types), tuple((i, repr(v)) for i, v in sorted(static.items())))
        if key not in self.cache:
            self.cache[key] = self.compile_def(fn, types, None, static)
        return self.cache[key]

    def annotated_params(self, fn: ast.FunctionDef) -> list[Type]:
        self.check_args(fn)
        return [self.annotation(a.annotation, a) for a in fn.args.args]

    def check_args(self, fn: ast.FunctionDef) -> None:
        a = fn.args
        extra = a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs
        if extra:
            raise self.src.error(fn, f"'{fn.name}' uses *args, **kwargs or keyword-only arguments",
                                 hint="kernels take plain parameters (with constant defaults if you like)")
        from .decorators import check_decorators
        check_decorators(self.src, fn)

    def annotation(self, node: ast.expr | None, where: ast.AST) -> Type:
        """The IR type of a parameter or return annotation."""
        if node is None:
            raise self.src.error(where, "missing type annotation",
                                 hint="annotate it (x: float) or give `signature` in the manifest")
        if isinstance(node, ast.Name) and node.id == "float":
            return Type(self.float_dtype)
        if isinstance(node, ast.Name) and node.id in SCALAR_ANNOTATIONS:
            return Type(SCALAR_ANNOTATIONS[node.id])
        if _is_tensor_class(node):
            name = where.arg if isinstance(where, ast.arg) else "x"
            raise self.src.error(node, f"'{ast.unparse(node)}' gives no dtype and shape, which ksbuild compiles for",
                                 hint=f'annotate {name}: "float[n, d]" (a string: the file still runs as PyTorch), or '
                                      "give `signature` in the manifest, e.g. signature = \"(x: f32[n, d])\"")
        from .tensors import parse_type_text
        text = node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ast.unparse(node)
        t = parse_type_text(text, self.float_dtype)
        if t is not None:
            return self.check_dim_names(t, node)
        shown = ast.unparse(node) if isinstance(node, ast.Constant) else f"'{ast.unparse(node)}'"
        hint = 'use float, int, bool or a tensor type string such as "float[n, 3]" or "f32[n]" (or give ' \
               '`signature` in the manifest)'
        word = re.match(r"\s*([A-Za-z_]\w*)", text)
        close = difflib.get_close_matches(word[1], ["float", "int", "bool", *DTYPES], n=1) if word else []
        if close and close[0] != word[1]:
            hint = f"did you mean '{close[0]}'? " + hint[0].upper() + hint[1:]
        raise self.src.error(node, f"unsupported annotation {shown}", hint=hint)

    def check_dim_names(self, t: Type, node: ast.expr) -> Type:
        """t, unless a dim is named by a word the generated C++ cannot take as a parameter name."""
        from ...codegen.viewmodel import reserved_dim_name
        for name in (n for d in t.shape for n in dim_names(d)):
            if reserved_dim_name(name):
                raise self.src.error(node, f"{reserved_dim_name(name)}: dims become parameters of the C functions",
                                     hint=f"rename the dim, e.g. '{name.lower()}_'")
        return t

    def result_annotation(self, fn: ast.FunctionDef) -> list[Type] | None:
        r = fn.returns
        if r is None or any(_is_tensor_class(e) for e in ast.walk(r)):
            return None  # (-> torch.Tensor: what the kernel returns)
        if isinstance(r, ast.Subscript) and isinstance(r.value, ast.Name) and r.value.id in ("tuple", "Tuple"):
            elts = r.slice.elts if isinstance(r.slice, ast.Tuple) else [r.slice]
            return [self.annotation(e, e) for e in elts]
        return [self.annotation(r, r)]

    # ---- functions ---------------------------------------------------------------------------

    def check_recursion(self, fn: ast.FunctionDef, static: dict) -> None:
        """A call of a function being compiled is recursion, an error, when it has the same static arguments
        (or nests more than STATIC_NESTING deep): with other ones (a flag `outer` that an `if` decides while
        compiling) it is another function, compiled once its own `if`s have dropped the branches it does not take."""
        key = tuple((i, repr(v)) for i, v in sorted(static.items()))
        same = [k for name, k in zip(self.active, self.active_static) if name == fn.name]
        if key in same or len(same) >= STATIC_NESTING:
            raise self.src.error(fn, f"'{fn.name}' calls itself (recursion is not supported)",
                                 hint="write the recursion as a for loop")

    def compile_def(self, fn: ast.FunctionDef, types: Sequence[Type], result_types,
                    static: dict[int, SymDim] | None = None) -> Func:
        self.check_args(fn)
        if fn.name in self.src.externs:  # (its body is never compiled)
            from .externs import extern_func
            return extern_func(self, fn, types)
        static = static or {}
        self.check_recursion(fn, static)
        if len(types) + len(static) != len(fn.args.args):
            raise self.src.error(fn, f"'{fn.name}' has {len(fn.args.args)} parameters but the signature "
                                     f"gives {len(types)}")
        self.active.append(fn.name)
        self.active_static.append(tuple((i, repr(v)) for i, v in sorted(static.items())))
        frames, self.frames = self.frames, []  # (a helper's returns are its own)
        try:
            b = Builder(self.src.loc(fn))
            dynamic = [a for i, a in enumerate(fn.args.args) if i not in static]
            params = [Var(t, a.arg) for t, a in zip(types, dynamic)]
            scope = Scope({a.arg: p for a, p in zip(dynamic, params)})
            scope.names.update({fn.args.args[i].arg: d for i, d in static.items()})
            value = self.run_body(b, scope, fn.body, fn)
            want = result_types or self.result_annotation(fn)
            try:
                results = self.finish_results(b, value, want, fn.returns or fn)  # (a mismatch: at the annotation)
            except KsbuildError as e:
                if result_types is None or self.signature_loc is None:
                    raise
                raise KsbuildError(f"the signature's results do not fit what '{fn.name}' returns: {e.message}",
                                   self.signature_loc, hint=f"{fn.name} returns at {e.loc}" if e.loc else None) \
                    from None
        finally:
            self.active.pop()
            self.active_static.pop()
            self.frames = frames
        return b.func(fn.name, params, results)

    def run_body(self, b: Builder, scope: Scope, body: list[ast.stmt], where: ast.AST) -> Value:
        """Compile statements that must end in a return; the returned value."""
        try:
            self.block(b, scope, body)
        except Returned as r:
            return r.value
        raise self.src.error(where, "this function can end without returning a value",
                             hint="make every path end in `return`")

    def finish_results(self, b: Builder, value: Value, want: list[Type] | None, where) -> list[Atom]:
        values = list(value) if isinstance(value, tuple) else [value]
        if want is not None and len(want) != len(values):
            raise self.src.error(where, f"returns {len(values)} values but is annotated with {len(want)}")
        types = want or [None] * len(values)
        for v, t in zip(values, types):
            got_float = t is not None and t.is_int and (
                (isinstance(v, Const) and isinstance(v.value, float) and not v.value.is_integer()) or
                (isinstance(v, Atom) and v.type.is_float and not _whole_numbers(b, v)))
            if got_float:  # (torch would return the float: no silent truncation)
                raise self.src.error(where, f"the result is a float but the annotation says {t}",
                                     hint="annotate it as a float, or convert explicitly: int(...), "
                                          "x.long(), torch.floor(x).long()")
        return [self.as_atom(b, v, t, where) for v, t in zip(values, types)]

    def as_atom(self, b: Builder, v: Value, t: Type | None, where: ast.AST) -> Atom:
        """v as an atom of type t (weak constants take t; floats and ints convert)."""
        if isinstance(v, (tuple, list)):
            raise self.src.error(where, "a tuple or list cannot be used as a single value")
        if isinstance(v, SymDim):
            v = b.dim_size(dim=v.dim)
        if isinstance(v, Const):
            t = t or const_type(v, self.float_dtype)
            if t.is_int and not isinstance(v.value, bool) and not _int_fits(int(v.value), t.dtype):
                raise self.src.error(where, f"the integer {int(v.value)} does not fit in {t.dtype}, the type it "
                                     "takes here", hint="use a float constant (2.0 ** 63), or a smaller integer")
            return const_lit(v, t)
        if t is None or v.type == t:
            return v
        if v.type.shape != t.shape or "bool" in (v.type.dtype, t.dtype):
            raise self.src.error(where, f"expected {t}, got {v.type}")
        return b.convert(v, dtype=t.dtype)

    # ---- statements --------------------------------------------------------------------------

    def block(self, b: Builder, scope: Scope, stmts: list[ast.stmt]) -> None:
        """Compile a statement list; raises Returned at a return."""
        for i, stmt in enumerate(stmts):
            b.loc = self.src.loc(stmt)
            if isinstance(stmt, ast.If) and _returns(stmt):
                self.if_returning(b, scope, stmt, stmts[i + 1:])
            self.statement(b, scope, stmt)

    def statement(self, b: Builder, scope: Scope, s: ast.stmt) -> None:
        if isinstance(s, ast.Return):
            if s.value is None:
                raise self.src.error(s, "a kernel must return a value")
            value = self.expr(b, scope, s.value)
            raise Returned(packed(self, scope, value, s) if self.frames else value)
        if isinstance(s, FallThrough):
            raise Returned(packed(self, scope, None, s))
        if isinstance(s, ast.Assign) and isinstance(s.value, ast.List) and not s.value.elts \
                and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
            from .scope import AppendList
            scope.names[s.targets[0].id] = AppendList()  # filled by a loop's out.append(...)
        elif isinstance(s, ast.Assign):
            value = self.expr(b, scope, s.value)
            for target in s.targets:
                self.assign(b, scope, target, value)
        elif isinstance(s, ast.AnnAssign) and s.value is not None:
            self.assign(b, scope, s.target, self.as_atom(b, self.expr(b, scope, s.value),
                                                       self.annotation(s.annotation, s), s))
        elif isinstance(s, ast.AugAssign):
            if isinstance(s.target, ast.Subscript):
                current = self.expr(b, scope, s.target)  # x[i] += v is x[i] = x[i] + v
            elif isinstance(s.target, ast.Name):
                current = self.name(scope, s.target)
                self.check_not_aliased(b, scope, s.target.id, current, s)
            else:
                raise self.src.error(s.target, "augmented assignment only to a name or x[...]")
            self.assign(b, scope, s.target, self.binop(b, s.op, current, self.expr(b, scope, s.value), s))
        elif isinstance(s, ast.If):
            self.if_statement(b, scope, s)
        elif isinstance(s, ast.For):
            from .loops import for_loop
            for_loop(self, b, scope, s)
        elif isinstance(s, ast.Pass) or _is_docstring(s):
            pass
        elif isinstance(s, ast.Assert):
            self.assertion(b, scope, s)
        elif isinstance(s, ast.With) and self.is_no_grad(s):
            self.no_grad(b, scope, s)
        elif isinstance(s, ast.Expr) and isinstance(s.value, ast.Call):
            raise self.call_statement(s.value)
        else:
            raise self.unsupported(s)

    def is_no_grad(self, s: ast.With) -> bool:
        """`with torch.no_grad():` (one context manager, no `as`)."""
        if len(s.items) != 1 or s.items[0].optional_vars is not None:
            return False
        call = s.items[0].context_expr
        return isinstance(call, ast.Call) and not call.args and not call.keywords and \
            isinstance(call.func, ast.Attribute) and call.func.attr == "no_grad" and \
            self.module_of(call.func.value) == "torch"

    def no_grad(self, b: Builder, scope: Scope, s: ast.With) -> None:
        """`with torch.no_grad():` runs its body; every name it binds to a float tensor or scalar is then a constant
        for differentiation (stop_gradient), as torch computes those values without tracking them."""
        before = dict(scope.names)
        try:
            self.block(b, scope, s.body)
        except Returned:
            raise self.src.error(s, "return inside `with torch.no_grad():`",
                                 hint="assign the value in the block and return it after") from None
        for name, value in list(scope.names.items()):
            if before.get(name) is not value and isinstance(value, (Var, Lit)) and value.type.is_float:
                scope.names[name] = b.stop_gradient(value)

    def assertion(self, b: Builder, scope: Scope, s: ast.Assert) -> None:
        """An assert is checked when the kernel is compiled (shapes, constants); it cannot be checked later."""
        test = self.expr(b, scope, s.test)
        if isinstance(test, Const):
            if not test.value:
                raise self.src.error(s.test, f"assertion fails: {ast.unparse(s.test)}",
                                     hint="the values it checks are known when the kernel is compiled")
            return
        raise self.src.error(s, "this assert depends on values known only when the kernel runs (kernels cannot "
                                "raise)", hint="fix the sizes in the annotations (\"float[n, 3]\") so calls are "
                                               "checked, or check the values before calling")

    def call_statement(self, call: ast.Call) -> KsbuildError:
        """A call whose result is unused: in place methods, list.append and print do nothing a kernel can keep."""
        f = call.func
        if isinstance(f, ast.Attribute) and self.method_target(f):
            obj, args = ast.unparse(f.value), ", ".join(ast.unparse(a) for a in call.args)
            if f.attr.endswith("_") and not f.attr.startswith("_"):
                return self.src.error(call, f"in-place tensor methods such as '.{f.attr}()' are not supported",
                                      hint=f"assign the result instead: {obj} = {_out_of_place(obj, f.attr, args)}")
            if f.attr in ("append", "extend", "insert"):
                return self.src.error(call, f"lists are supported only as out = [] filled by out.append(...) as "
                                            f"the last statement of a for loop ('.{f.attr}()' here)",
                                      hint="then torch.stack(out, dim=...) or torch.cat(out, dim=...); or build "
                                           "the rows with torch.stack([... for i in range(n)])")
        return self.src.error(call, f"a call as a statement ('{ast.unparse(call)}'): its result is unused and "
                                    "kernels have no side effects", hint="assign the result to a name or remove it")

    def unsupported(self, node: ast.AST) -> KsbuildError:
        kind = type(node).__name__
        hints = {
            "While": ("while loop", "use `for i in range(n)` with a bound"),
            "Break": ("break", "loops run their full range; carry a flag and use `if`"),
            "Continue": ("continue", "wrap the rest of the loop body in `if`"),
            "With": ("with statement", None),
            "Try": ("try/except", "kernels cannot raise; check values with `if`"),
            "Raise": ("raise", "kernels cannot raise"),
            "FunctionDef": ("nested function", "define helpers at module level"),
            "Lambda": ("lambda", "define a module-level function"),
            "Assert": ("assert", None),
            "Global": ("global", None),
            "Import": ("import inside a kernel", "import at module level"),
        }
        what, hint = hints.get(kind, (f"'{kind}' statement" if isinstance(node, ast.stmt) else f"'{kind}'", None))
        return self.src.error(node, f"unsupported syntax: {what}",
                              hint=hint or "see the supported subset in the README")

    def assign(self, b: Builder, scope: Scope, target: ast.expr, value: Value) -> None:
        """Bind names to values; a value computed here takes the name (it shows in the IR and C++)."""
        if isinstance(target, ast.Name):
            b.name(value, target.id)
            scope.names[target.id] = value
        elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
            from .index import set_subscript
            x = self.name(scope, target.value)
            self.check_not_aliased(b, scope, target.value.id, x, target)
            new = set_subscript(self, b, x, target.slice, value, scope, target)
            b.name(new, target.value.id)
            scope.names[target.value.id] = new
        elif isinstance(target, ast.Tuple) and all(isinstance(t, ast.Name) for t in target.elts):
            if not isinstance(value, tuple) or len(value) != len(target.elts):
                n = len(value) if isinstance(value, tuple) else 1
                raise self.src.error(target, f"cannot unpack {n} value(s) into {len(target.elts)} names")
            for t, v in zip(target.elts, value):
                b.name(v, t.id)
                scope.names[t.id] = v
        else:
            raise self.src.error(target, f"unsupported assignment target '{ast.unparse(target)}'",
                                 hint="assign to a name, a tuple of names or x[...]")

    def check_not_aliased(self, b: Builder, scope: Scope, name: str, value: Value, node: ast.AST) -> None:
        """A located error for an in-place update (x += v, x[i] = v) of a tensor that another name also holds
        (y = x) or that is a view of another name's tensor (r = x[0]): torch would change both, ksbuild gives
        each name its own value, so the results would differ silently."""
        if not isinstance(value, Atom) or not value.type.rank:
            return
        alias = _alias_of(b, scope, name, value, self.picks)
        if alias is not None:
            how, other = alias
            raise self.src.error(node, f"in-place update of '{name}', which {how} '{other}': torch would change "
                                       f"both, ksbuild gives each name its own value",
                                 hint=f"update a copy ({name} = ....clone() where {name} is bound), or make a new "
                                      f"value ({name} = {name} + ... instead of {name} += ...)")
        for holder, view in _views_held(b, scope, name, value):
            self.stale[view] = (holder, name, self.src.loc(node).line)

    # ---- if ------------------------------------------------------------------------------------

    def if_statement(self, b: Builder, scope: Scope, s: ast.If) -> None:
        """An if without return: a cond whose results are the names either branch assigns."""
        test = self.expr(b, scope, s.test)
        if isinstance(test, Const):
            self.block(b, scope, s.body if test.value else s.orelse)
            return
        pred = self.condition(b, test, s.test)
        # (a name a loop introduces, its variable or a temporary of its body, stays inside the loop: both
        # branches looping over `i` do not make `i` a result of the if)
        names = self.names_after_if(scope, s)
        outs = self.branches(b, scope, pred, [s.body, s.orelse], names, s)
        for n, v in zip(names, outs):
            b.name(v, n)
            scope.names[n] = v

    def names_after_if(self, scope: Scope, s: ast.If) -> list[str]:
        """The names an if assigns that have a value after it: assigned in both branches, or before the if."""
        in_both = assigned_names(s.body, loops=False) & assigned_names(s.orelse, loops=False)
        names = sorted(assigned_names(s.body) | assigned_names(s.orelse))
        return [n for n in names if n in in_both or scope.lookup(n) is not None]

    def if_returning(self, b: Builder, scope: Scope, s: ast.If, rest: list[ast.stmt]) -> None:
        """An if with a return inside: both branches continue with the rest of the block."""
        test = self.expr(b, scope, s.test)
        if isinstance(test, Const):
            self.block(b, scope, (s.body if test.value else s.orelse) + rest)
            raise self.src.error(s, "this code path does not return")
        pred = self.condition(b, test, s.test)
        if rest and not always_returns(s.body) and not always_returns(s.orelse):  # rest once, not in both
            raise compile_early_returns(self, b, scope, pred, s, rest, self.names_after_if(scope, s))
        outs = self.branches(b, scope, pred, [s.body + rest, s.orelse + rest], None, s)
        raise Returned(outs[0] if len(outs) == 1 else tuple(outs))

    def condition(self, b: Builder, test: Value, node: ast.expr) -> Atom:
        if isinstance(test, tuple) or test.type.dtype != "bool" or not test.type.is_scalar:
            shown = "a tuple" if isinstance(test, tuple) else str(test.type)
            raise self.src.error(node, f"an if condition must be a bool scalar, got {shown}",
                                 hint="compare explicitly, e.g. `if x != 0:`")
        return test

    def branches(self, b: Builder, scope: Scope, pred: Atom, bodies, names, node) -> list[Value]:
        """Compile two closed branch functions and bind a cond; the values it produces."""
        from .branches import compile_branches
        return compile_branches(self, b, scope, pred, bodies, names, node)


def _int_fits(v: int, dtype: str) -> bool:
    """Whether v is in the range of the integer dtype (i8 ... u64)."""
    bits = int(dtype[1:])
    lo, hi = (0, 2 ** bits) if dtype.startswith("u") else (-2 ** (bits - 1), 2 ** (bits - 1))
    return lo <= v < hi


def _returns(s: ast.stmt) -> bool:
    return any(isinstance(n, ast.Return) for n in ast.walk(s))


def _is_docstring(s: ast.stmt) -> bool:
    return isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str)


def _alias_of(b: Builder, scope: Scope, name: str, value: Atom, picks: dict) -> tuple[str, str] | None:
    """How another name shares value's tensor: ("is also", y) (the same value under two names, in this scope or
    an enclosing one), ("is a view of", x) (made by a view primitive, x[0], x.T, x.reshape(...), of a value
    another name holds) or ("may be", x) (one of the values a conditional picks from, see picks); None when no
    other name does."""
    def names_of(v: Atom) -> list[str]:
        found, s = [], scope
        while s is not None:
            found += [n for n, val in s.names.items() if val is v and n != name]
            outer = next((o for o, var in s.captured.values() if var is v), None)
            if outer is None:
                break
            s, v = s.parent, outer
        return found
    same = names_of(value)
    if same:
        return "is also", same[0]
    for base in _view_bases(b, value):
        holders = names_of(base)
        if holders:
            return "is a view of", holders[0]
    for option in picks.get(value, ()):
        shared = _alias_of(b, scope, name, option, picks) if isinstance(option, Atom) else None
        if shared is not None:
            return ("may be", shared[1]) if shared[0] != "is a view of" else shared
    return None


def _whole_numbers(b: Builder, v: Atom) -> bool:
    """Whether v is a float that holds whole numbers: made by a prim whose results always do (floor; ceil, round
    and trunc are built from it: math.floor(x) is an int in Python), or by one whose results do when its operands
    do (sums, differences, products, extrema, picks, conversions: its `whole` fact) from such values, integers
    and whole literals (walked with a stack: a sum of 5000 terms is 5000 deep)."""
    made = {o: e for e in b.eqns for o in e.outs}
    todo, seen = [v], set()
    while todo:
        a = todo.pop()
        if not a.type.is_float:  # (an integer or a bool: a select's condition, a conversion's operand)
            continue
        if isinstance(a, Lit):
            if not float(a.value).is_integer():
                return False
            continue
        if a in seen:
            continue
        seen.add(a)
        source = made.get(a)
        if source is None or not source.prim.whole:
            return False
        if source.prim.whole == "if_operands":
            todo += source.ins
    return True


def _view_bases(b: Builder, v: Atom):
    """The values v is a view of (made by view primitives: x[0], x.T, x.reshape(...)), nearest first."""
    source = next((e for e in b.eqns if v in e.outs), None)
    while source is not None and source.prim.view and source.ins and isinstance(source.ins[0], Var):
        yield source.ins[0]
        source = next((e for e in b.eqns if source.ins[0] in e.outs), None)


def _views_held(b: Builder, scope: Scope, name: str, value: Atom) -> list[tuple[str, Atom]]:
    """(name, view) for every other name of this scope that holds a view of value."""
    return [(n, v) for n, v in scope.names.items()
            if n != name and isinstance(v, Atom) and v is not value and any(x is value for x in _view_bases(b, v))]
