"""The Python frontend: an AST visitor that accepts only the syntax it lists.

Supported in kernels: annotated `def`, assignment and augmented assignment (also tuple
unpacking), `+ - * / // % **`, unary minus, comparisons (also chained), `and or not`,
`if/elif/else` with `return` anywhere, conditional expressions, `math.*`/`torch.*` scalar
functions, `float()/int()` casts, literals and module-level constants, calls to other
functions of the same module, `for i in range(...)` with loop-carried values, tuple results.
Anything else is a KsbuildError at the user's line with a caret and what to use instead.
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
from . import namespaces, tensors
from .branches import FallThrough, always_returns, compile_early_returns, packed
from .linalg import matmul
from .mathlib import BINOPS, CMPOPS, call_builtin
from .scope import Const, FInfo, Returned, Scope, SymDim, Value, assigned_names, const_lit, const_type
from .shape import transpose_2d

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

    def loc(self, node: ast.AST) -> Location:
        line = getattr(node, "lineno", 0)
        end = getattr(node, "end_col_offset", None) if getattr(node, "end_lineno", line) == line else None
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else None
        return Location(str(self.path), line, getattr(node, "col_offset", 0), end, text)

    def error(self, node: ast.AST, message: str, hint: str | None = None) -> KsbuildError:
        return KsbuildError(message, self.loc(node), hint)


class KernelCompiler:
    """Compiles the functions of one source file into IR, one Func per (function, arg types)."""

    def __init__(self, source: Source, float_dtype: str):
        from .loops import IntFacts

        self.src = source
        self.float_dtype = float_dtype
        self.int_facts = IntFacts()  # ranges of loop counters: bounds for loop counts computed at run time
        self.cache: dict[tuple, Func] = {}
        self.signature_loc: Location | None = None
        self.active: list[str] = []
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

    def compile_def(self, fn: ast.FunctionDef, types: Sequence[Type], result_types,
                    static: dict[int, SymDim] | None = None) -> Func:
        self.check_args(fn)
        if fn.name in self.active:
            raise self.src.error(fn, f"'{fn.name}' calls itself (recursion is not supported)",
                                 hint="write the recursion as a for loop")
        static = static or {}
        if len(types) + len(static) != len(fn.args.args):
            raise self.src.error(fn, f"'{fn.name}' has {len(fn.args.args)} parameters but the signature "
                                     f"gives {len(types)}")
        self.active.append(fn.name)
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

    # ---- expressions ---------------------------------------------------------------------------

    def expr(self, b: Builder, scope: Scope, e: ast.expr) -> Value:
        """The value of an expression; equations (and op errors) built for it carry its location."""
        method = getattr(self, "expr_" + type(e).__name__, None)
        if method is None:
            hint = "see the supported subset in the README"
            if isinstance(e, (ast.List, ast.ListComp)):
                hint = ("lists are only arguments of torch.stack/torch.cat/torch.tensor/sum; build rows with "
                        "torch.stack([... for i in range(n)]) or fill a tensor: out = torch.zeros(n); out[i] = ...")
            raise self.src.error(e, f"unsupported expression: {_describe(e)}", hint=hint)
        outer, b.loc = b.loc, self.src.loc(e)
        try:
            return method(b, scope, e)
        finally:
            b.loc = outer

    def expr_Constant(self, b, scope, e: ast.Constant) -> Value:
        if isinstance(e.value, (bool, int, float)):
            return Const(e.value)
        raise self.src.error(e, f"unsupported constant {e.value!r}", hint="only numbers and True/False")

    def expr_Name(self, b, scope, e: ast.Name) -> Value:
        from .scope import AppendList
        v = self.name(scope, e)
        if isinstance(v, AppendList):
            raise self.src.error(e, f"the list '{e.id}' can only be passed to torch.stack or torch.cat",
                                 hint=f"fill it in a for loop whose last statement is {e.id}.append(...), then "
                                      f"use torch.stack({e.id}, dim=...) or torch.cat({e.id}, dim=...)")
        if isinstance(v, Atom) and v in self.stale:
            view, base, line = self.stale[v]
            raise self.src.error(e, f"'{view}' is a view of '{base}', which was updated in place on line {line}: "
                                    f"torch's '{view}' shows the update, ksbuild's keeps the values from before it",
                                 hint=f"take a copy ({view} = ....clone()) if the old values are meant, or take the "
                                      f"view again after the update")
        return v

    def name(self, scope: Scope, e: ast.Name) -> Value:
        v = scope.lookup(e.id)
        if v is None:
            v = self.src.constants.get(e.id)
        if v is None and e.id in self.src.foreign:
            raise self.src.error(e, f"'{e.id}' is the module {self.src.foreign[e.id]}, which kernels cannot use: "
                                    "ksbuild compiles calls of torch, math and Python's builtins",
                                 hint="use the torch function of the same name (torch.exp, torch.where, ...)")
        if v is None and (e.id in self.src.borrowed or e.id in self.src.const_modules):
            raise self.imported_name_error(e)
        if v is None and e.id in self.src.globals:
            raise self.src.error(e, f"the module-level '{e.id}' is not a constant a kernel can use",
                                 hint="module-level constants are numbers, or tuples/lists of numbers; pass "
                                      "tensors as arguments")
        if v is None:
            raise self.src.error(e, f"name '{e.id}' is not defined here",
                                 hint="assign it before use (names assigned only in one branch of an if, "
                                      "or only inside a loop, are not visible after it)")
        return v

    def imported_name_error(self, e: ast.Name) -> KsbuildError:
        """A name bound by an import from a module that is not torch or math, used where kernels cannot use it."""
        here = self.src.path.name
        if e.id in self.src.const_modules:
            return self.src.error(e, f"'{e.id}' is a module next to {here}: kernels read its constants ({e.id}.NAME)",
                                  hint=f"define functions that kernels call in {here}")
        module = self.src.borrowed[e.id]
        return self.src.error(e, f"'{e.id}' is imported from {module}, and is not a constant of a module next to "
                                 f"{here} (kernels read numbers, bools and tuples or lists of numbers from there)",
                              hint=f"put {module.lstrip('.') or 'the module'}.py next to {here} and make {e.id} a "
                                   f"constant there, or define {e.id} in {here}")

    def module_constant(self, e: ast.Attribute) -> Value:
        """consts.EPS: a constant of a module next to the kernel file (`import consts`)."""
        constants = self.src.const_modules[e.value.id]
        if e.attr not in constants:
            raise self.src.error(e, f"'{e.attr}' is not a constant of the module {e.value.id} (kernels read numbers, "
                                    "bools and tuples or lists of numbers from it)",
                                 hint=f"constants of {e.value.id}: {', '.join(sorted(constants)) or 'none'}")
        return constants[e.attr]

    def expr_Tuple(self, b, scope, e: ast.Tuple) -> Value:
        return tuple(self.expr(b, scope, x) for x in e.elts)

    def expr_BinOp(self, b, scope, e: ast.BinOp) -> Value:
        """a + b + c + ... is a chain down the left operands: walked in a loop, not by recursion (a sum of
        5000 terms nests 5000 deep)."""
        chain = [e]
        while isinstance(chain[-1].left, ast.BinOp):
            chain.append(chain[-1].left)
        value = self.expr(b, scope, chain[-1].left)
        for node in reversed(chain):
            outer, b.loc = b.loc, self.src.loc(node)
            try:
                value = self.binop(b, node.op, value, self.expr(b, scope, node.right), node)
            finally:
                b.loc = outer
        return value

    def binop(self, b: Builder, op: ast.operator, x: Value, y: Value, node: ast.AST) -> Value:
        if tensors.is_dimlike(x) and tensors.is_dimlike(y) and (isinstance(x, SymDim) or isinstance(y, SymDim)):
            d = tensors.dim_binop(op, x, y)
            if d is not None:
                return d
        x, y = self.plain(b, x), self.plain(b, y)
        if isinstance(op, ast.MatMult):
            return matmul(self, b, *self.unify(b, tensors.tensor(self, b, x, node),
                                               tensors.tensor(self, b, y, node), node), node)
        rule = BINOPS.get(type(op))
        if rule is None:
            raise self.src.error(node, f"unsupported operator '{_op_symbol(op)}'")
        return rule(self, b, x, y, node)

    def expr_UnaryOp(self, b, scope, e: ast.UnaryOp) -> Value:
        x = self.plain(b, self.expr(b, scope, e.operand))
        if isinstance(e.op, ast.UAdd):
            return x
        if isinstance(e.op, ast.USub):
            return Const(-x.value) if isinstance(x, Const) else b.neg(self.numeric(x, e))
        if isinstance(e.op, ast.Not) or (isinstance(e.op, ast.Invert) and not isinstance(x, Const)
                                         and not isinstance(x, tuple) and x.type.dtype == "bool"):
            return Const(not x.value) if isinstance(x, Const) else b.bind(_prim("not"), [self.boolean(x, e)])[0]
        raise self.src.error(e, "unsupported unary operator '~' on a number", hint="use ~ or `not` on bool values")

    def expr_BoolOp(self, b, scope, e: ast.BoolOp) -> Value:
        vals = [self.expr(b, scope, v) for v in e.values]
        name = "and" if isinstance(e.op, ast.And) else "or"
        out = vals[0]
        for v in vals[1:]:
            out = self.logic(b, name, out, v, e)
        return out

    def logic(self, b: Builder, name: str, x: Value, y: Value, node) -> Value:
        if isinstance(x, Const) and isinstance(y, Const):
            return Const(bool(x.value and y.value) if name == "and" else bool(x.value or y.value))
        xs = [self.as_atom(b, self.boolean(v, node), Type("bool"), node) for v in (x, y)]
        return b.bind(_prim(name), xs)[0]

    def expr_Compare(self, b, scope, e: ast.Compare) -> Value:
        left = self.expr(b, scope, e.left)
        out: Value | None = None
        for op, right_node in zip(e.ops, e.comparators):
            right = self.expr(b, scope, right_node)
            if isinstance(op, (ast.Eq, ast.NotEq)) and isinstance(left, SymDim) and left == right:
                c = Const(isinstance(op, ast.Eq))  # the same dim (x.shape[0] == y.shape[0] with both n)
            else:
                right, left = self.plain(b, right), self.plain(b, left)
                rule = CMPOPS.get(type(op))
                if rule is None:
                    raise self.src.error(e, f"unsupported comparison '{_op_symbol(op)}'")
                c = rule(self, b, left, right, e)
            out = c if out is None else self.logic(b, "and", out, c, e)
            left = right
        return out

    def expr_IfExp(self, b, scope, e: ast.IfExp) -> Value:
        """`x if p else y`: a cond_select, whose two sides are closed functions as an if statement's branches.
        It computes both sides and selects (branch-free), and only the side taken has a derivative (a plain
        select would differentiate both: 0 * d sqrt(0) = nan)."""
        from .branches import compile_branches
        test = self.expr(b, scope, e.test)
        if isinstance(test, Const):
            return self.expr(b, scope, e.body if test.value else e.orelse)
        pred = self.condition(b, test, e.test)
        bodies = [[ast.copy_location(ast.Return(value=side), side)] for side in (e.body, e.orelse)]
        outs = compile_branches(self, b, scope, pred, bodies, None, e, "cond_select")
        return outs[0] if len(outs) == 1 else tuple(outs)

    def expr_Call(self, b, scope, e: ast.Call) -> Value:
        from .loops import builtin_sum, comprehension
        method = self.method_target(e.func)
        target = None if method else self.callee(e.func)
        if target == ("builtin", "sum"):
            return builtin_sum(self, b, scope, e)
        if target == ("torch", "stack") and len(e.args) == 1 and \
                isinstance(e.args[0], (ast.ListComp, ast.GeneratorExp)):
            return comprehension(self, b, scope, e, target[1])
        if any(isinstance(a, ast.Starred) for a in e.args) or any(k.arg is None for k in e.keywords):
            raise self.src.error(e, "*args and **kwargs are not supported in calls")
        args = [self.arg(b, scope, a) for a in e.args]
        kw = {k.arg: self.arg(b, scope, k.value) for k in e.keywords}
        self.check_lists(e, target, [*args, *kw.values()])
        if method:
            return self.call_method(b, scope, e, method, args, kw)
        table = namespaces.functions(target[0])
        shown = {"F": "torch.nn.functional", "linalg": "torch.linalg", "nn": "torch.nn",
                 "special": "torch.special"}.get(target[0], target[0])
        if target[1] in table:
            return self.checked_keywords(table[target[1]], b, args, kw, e, f"{shown}.{target[1]}")
        if target[0] in ("F", "linalg", "nn", "special"):
            raise self.src.error(e.func, f"unsupported function '{shown}.{target[1]}'",
                                 hint=f"supported: {', '.join(sorted(table)) or 'none'}")
        if target == ("builtin", "len") and len(args) == 1:
            if isinstance(args[0], (tuple, list)):  # len(COEFFS) of a module-level tuple
                return Const(len(args[0]))
            x = tensors.tensor(self, b, args[0], e)
            if not x.type.rank:
                raise self.src.error(e, "len() of a scalar")
            return tensors.dim_value(x.type.shape[0])
        if any(isinstance(a, list) for a in args):
            raise self.src.error(e, "a list argument is only supported in torch.stack, torch.cat and sum")
        if target[0] == "kernel":
            return self.call_kernel(b, target[1], self.bind_args(target[1], args, kw, e), e)
        if kw:
            if target[0] in ("torch", "math") and target[1] not in namespaces.supported_names(target[0]):
                call_builtin(self, b, target[0], target[1], [], e)  # (says: unsupported function)
            raise self.src.error(e.keywords[0].value, "keyword arguments are not supported in this call")
        return call_builtin(self, b, target[0], target[1], [self.plain(b, a) for a in args], e)

    def checked_keywords(self, handler, b, args, kw: dict, e: ast.Call, shown: str) -> Value:
        """handler(self, b, args, kw, e), and an error for a keyword argument it never read (it would be
        ignored, silently giving another function's values)."""
        from .scope import Keywords
        kw = Keywords(kw)
        out = handler(self, b, args, kw, e)
        for name in kw.unread():
            node = next(k.value for k in e.keywords if k.arg == name)
            if name == "inplace" and shown.startswith("torch.nn.functional."):
                flag = kw[name]
                if isinstance(flag, Const) and flag.value is False:
                    continue  # (F.relu(x, inplace=False) and friends: the result is a new value anyway)
                raise self.src.error(node, f"{shown}(inplace=True) updates its input; kernels never update in place",
                                     hint="drop inplace=True (the result is a new value)")
            raise self.src.error(node, f"{shown}'s keyword argument '{name}' is not supported",
                                 hint="ksbuild would compute the function without it; remove it or write the "
                                      "computation out")
        return out

    def method_target(self, f: ast.expr) -> str | None:
        """The method name of `x.method(...)` on a value (not a module function)."""
        if isinstance(f, ast.Attribute) and self.module_of(f.value) is None:
            return f.attr
        return None

    def module_of(self, e: ast.expr) -> str | None:
        """The namespace an expression names (math, torch, nn, F, linalg), or None if it is a value."""
        if isinstance(e, ast.Name):
            return self.src.modules.get(e.id) if e.id not in self.src.functions else None
        if isinstance(e, ast.Attribute):
            return SUBMODULES.get((self.module_of(e.value), e.attr))
        return None

    def call_method(self, b, scope, e: ast.Call, name: str, args, kw) -> Value:
        obj = self.expr(b, scope, e.func.value)
        handler = namespaces.functions("Tensor").get(name)
        if handler is None and name.endswith("_") and not name.startswith("_"):
            args_text = ", ".join(ast.unparse(a) for a in e.args)
            raise self.src.error(e.func, f"in-place tensor methods such as '.{name}()' are not supported",
                                 hint=f"use the value: {_out_of_place(ast.unparse(e.func.value), name, args_text)}")
        if handler is None:
            known = sorted(namespaces.functions("Tensor"))
            raise self.src.error(e.func, f"unsupported tensor method '.{name}()'",
                                 hint=f"supported: {', '.join(known)}")
        return self.checked_keywords(handler, b, [obj, *args], kw, e, f".{name}()")

    def check_lists(self, e: ast.Call, target, values) -> None:
        """A list filled by .append goes only to torch.stack and torch.cat."""
        from .scope import AppendList
        if target not in (("torch", "stack"), ("torch", "cat")) and any(isinstance(v, AppendList) for v in values):
            raise self.src.error(e, "a list filled by .append can only be passed to torch.stack or torch.cat",
                                 hint="torch.stack(out, dim=...) or torch.cat(out, dim=...)")

    def arg(self, b, scope, e: ast.expr) -> Value:
        """A call argument: a list literal (for torch.stack, torch.cat, sum), or a list a loop filled
        with .append (for torch.stack, torch.cat), is allowed here only."""
        from .scope import AppendList
        if isinstance(e, ast.Name) and isinstance(scope.lookup(e.id), AppendList):
            return scope.lookup(e.id)
        if isinstance(e, ast.List):
            return [self.expr(b, scope, x) for x in e.elts]
        if isinstance(e, ast.Constant) and isinstance(e.value, str):
            return e.value  # an einsum spec
        if isinstance(e, ast.Constant) and e.value is None:
            return Const(None)  # an optional argument left out (F.conv2d(x, w, None, ...), dim=None)
        return self.expr(b, scope, e)

    def expr_Subscript(self, b, scope, e: ast.Subscript) -> Value:
        from .index import subscript
        return subscript(self, b, self.expr(b, scope, e.value), e.slice, scope, e)

    def expr_Attribute(self, b, scope, e: ast.Attribute) -> Value:
        from .mathlib import MATH_CONSTANTS
        if isinstance(e.value, ast.Name) and e.value.id in self.src.const_modules and scope.lookup(e.value.id) is None:
            return self.module_constant(e)
        if isinstance(e.value, ast.Name) and self.src.modules.get(e.value.id) == "math" and e.attr in MATH_CONSTANTS:
            return Const(MATH_CONSTANTS[e.attr])
        if self.module_of(e.value) == "torch":
            from .scope import TORCH_DTYPES, DtypeValue
            if e.attr in TORCH_DTYPES:
                return DtypeValue(TORCH_DTYPES[e.attr])
            if e.attr in MATH_CONSTANTS:  # torch.inf, torch.nan, torch.pi, torch.e
                return Const(MATH_CONSTANTS[e.attr])
            raise self.src.error(e, f"unsupported torch attribute 'torch.{e.attr}'",
                                 hint="call torch functions; torch dtypes such as torch.float64 are values")
        x = self.expr(b, scope, e.value)
        if isinstance(x, tuple) and e.attr in getattr(x, "_fields", ()):  # torch.max(x, 1).values
            return getattr(x, e.attr)
        if e.attr == "shape" and isinstance(x, Var):
            return tuple(tensors.dim_value(d) for d in x.type.shape)
        if e.attr == "T":
            return transpose_2d(self, b, x, e)
        if e.attr == "ndim" and isinstance(x, Var):
            return Const(x.type.rank)
        if e.attr == "dtype" and isinstance(x, Var):  # x.to(y.dtype), torch.zeros(n, dtype=x.dtype)
            from .scope import DtypeValue
            return DtypeValue(x.type.dtype)
        if e.attr in ("mT", "mH") and isinstance(x, Var):  # the last two axes swapped (real: mH is mT)
            from ...ops.shape import swap_axes
            if x.type.rank < 2:
                raise self.src.error(e, f".{e.attr} of a tensor of rank {x.type.rank} (it needs two axes)")
            return swap_axes(b, x, -1, -2)
        if e.attr == "device" and isinstance(x, Var):  # torch.zeros(n, device=x.device): kernels have no devices
            return Const(None)
        if isinstance(x, FInfo) and e.attr in FInfo.FIELDS:
            return Const(x.value(e.attr))
        raise self.src.error(e, f"unsupported attribute '.{e.attr}'",
                             hint="supported: .shape, .T, .mT, .ndim, .dtype, .device")

    def callee(self, f: ast.expr) -> tuple[str, str]:
        """('math'|'torch'|'builtin'|'kernel', name) of a called function."""
        if isinstance(f, ast.Attribute) and self.module_of(f.value) is not None:
            return self.module_of(f.value), f.attr
        if isinstance(f, ast.Name):
            if f.id in self.src.functions:
                return "kernel", f.id
            if f.id in self.src.imported:
                return self.src.imported[f.id]
            if f.id in self.src.borrowed:
                raise self.src.error(f, f"'{f.id}' is imported from {self.src.borrowed[f.id]}: a kernel calls "
                                        "functions defined in its own file (and torch, math and builtins)",
                                     hint=f"define {f.id} in {self.src.path.name} (copy it here)")
            return "builtin", f.id
        raise self.src.error(f, f"unsupported call target '{ast.unparse(f)}'",
                             hint="call math.*, torch.*, builtins or functions of this module")

    def bind_args(self, name: str, args: list[Value], kw: dict[str, Value], node: ast.Call) -> list[Value]:
        """The arguments of a call to a function of this module, one per parameter: positional, then
        keyword, then the parameter's default."""
        params = [p.arg for p in self.src.functions[name].args.args]
        if len(args) > len(params):
            raise self.src.error(node, f"'{name}' takes {len(params)} arguments, {len(args)} given")
        bound = dict(enumerate(args))
        for key, v in kw.items():
            if key not in params:
                raise self.src.error(node, f"'{name}' has no parameter '{key}'",
                                     hint=f"its parameters: {', '.join(params)}")
            if params.index(key) in bound:
                raise self.src.error(node, f"'{name}' got two values for parameter '{key}'")
            bound[params.index(key)] = v
        defaults = self.defaults(self.src.functions[name])
        missing = [p for i, p in enumerate(params) if i not in bound and i not in defaults]
        if missing:
            raise self.src.error(node, f"'{name}' is missing the argument(s) {', '.join(repr(p) for p in missing)}",
                                 hint=f"'{name}' takes {len(params)} arguments ({', '.join(params)}), "
                                      f"with defaults for: {', '.join(params[i] for i in defaults) or 'none'}")
        return [bound[i] if i in bound else defaults[i] for i in range(len(params))]

    def defaults(self, fn: ast.FunctionDef) -> dict[int, Const]:
        """Parameter index -> default value; a default must be a constant."""
        n = len(fn.args.args)
        out = {}
        for j, d in enumerate(fn.args.defaults):
            try:
                v = self.expr(Builder(self.src.loc(d)), Scope(), d)
            except KsbuildError:
                v = None
            if not isinstance(v, Const):
                raise self.src.error(d, "a default value must be a constant (a number, True/False or a "
                                        "module-level constant)")
            out[n - len(fn.args.defaults) + j] = v
        return out

    def call_kernel(self, b: Builder, name: str, args: list[Value], node: ast.AST) -> Value:
        from .decorators import mapped_by_decorator
        fn = self.src.functions[name]
        if mapped_by_decorator(self.src, fn) is not None:
            raise self.src.error(node, f"'{name}' is decorated with @{ast.unparse(mapped_by_decorator(self.src, fn))}"
                                       ": in Python this call maps it over tensors, which a kernel's call does not",
                                 hint=f"call a function without the decorator (def {name}_scalar(...), then "
                                      f"{name} = ksbuild.vmap({name}_scalar)), or map it in the manifest")
        static = {i: a for i, a in enumerate(args) if isinstance(a, SymDim) or
                  (isinstance(a, Const) and fn.args.args[i].annotation is None)}
        args = [a for i, a in enumerate(args) if i not in static]
        params = [p for i, p in enumerate(fn.args.args) if i not in static]
        types = [self.arg_type(a, p, node) for a, p in zip(args, params)]
        callee = self.compile_static(name, types, static) if static else self.compile(name, types)
        atoms = [self.as_atom(b, a, t, node) for a, t in zip(args, types)]
        if name in self.src.custom and name not in self.rule_of:
            from .custom_rules import bind_custom, no_static_args
            if static:
                raise no_static_args(self, name, node)
            outs = bind_custom(self, b, name, callee, atoms, node)
        else:
            outs = b.bind(_prim("call"), atoms, {"fn": callee})
        return outs[0] if len(outs) == 1 else tuple(outs)

    def arg_type(self, a: Value, p: ast.arg, node) -> Type:
        if p.annotation is not None:
            return self.annotation(p.annotation, p)
        if isinstance(a, tuple):
            raise self.src.error(node, "tuples cannot be passed to kernels")
        return const_type(a, self.float_dtype) if isinstance(a, Const) else a.type

    # ---- typing helpers ------------------------------------------------------------------------

    def supported_names(self, module: str) -> list[str]:
        """The functions a kernel can call in a namespace (for an error's hint)."""
        return namespaces.supported_names(module)

    def plain(self, b: Builder, v: Value) -> Value:
        """A symbolic dim used as a number becomes an i64 value."""
        return b.dim_size(dim=v.dim) if isinstance(v, SymDim) else v

    def prim(self, name: str):
        return _prim(name)

    def numeric(self, x: Value, node) -> Value:
        if isinstance(x, tuple):
            raise self.src.error(node, "expected a number here, got a tuple")
        if not isinstance(x, Const) and x.type.dtype == "bool":
            raise self.src.error(node, "a bool (a comparison's result) is not a number here",
                                 hint="convert it, float(c) or c.float(), or choose with `a if c else b` / "
                                      "torch.where(c, a, b)")
        return x

    def boolean(self, x: Value, node) -> Value:
        if isinstance(x, tuple) or (isinstance(x, Const) and not isinstance(x.value, bool)) or \
                (not isinstance(x, Const) and x.type.dtype != "bool"):
            raise self.src.error(node, "`and`, `or` and `not` need bool operands (comparisons)",
                                 hint="compare explicitly, e.g. `x > 0 and y > 0`")
        return x

    def unify(self, b: Builder, x: Value, y: Value, node) -> tuple[Atom, Atom]:
        """Two values as atoms of one dtype (torch promotion; weak constants adapt)."""
        from .mathlib import common_type
        t = common_type(self, x, y, node)
        return self.as_atom(b, x, t.with_shape(_shape(x)), node), self.as_atom(b, y, t.with_shape(_shape(y)), node)


SUBMODULES = {("torch", "nn"): "nn", ("torch", "linalg"): "linalg", ("nn", "functional"): "F",
              ("torch", "special"): "special"}


def _int_fits(v: int, dtype: str) -> bool:
    """Whether v is in the range of the integer dtype (i8 ... u64)."""
    bits = int(dtype[1:])
    lo, hi = (0, 2 ** bits) if dtype.startswith("u") else (-2 ** (bits - 1), 2 ** (bits - 1))
    return lo <= v < hi


def _shape(v: Value):
    return () if isinstance(v, Const) else v.type.shape


def _prim(name: str):
    from ...prims import PRIMS
    return PRIMS[name]


def _is_tensor_class(node: ast.expr) -> bool:
    """torch.Tensor or Tensor as an annotation (no dtype, no shape)."""
    text = node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ast.unparse(node)
    return text.strip() in ("torch.Tensor", "Tensor")


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


_INPLACE_OPS = {"add_": "+", "sub_": "-", "mul_": "*", "div_": "/", "pow_": "**"}


def _out_of_place(obj: str, method: str, args: str) -> str:
    """The assignment that replaces x.mul_(2.0): x * 2.0 (an operator) or x.exp() (the method without _)."""
    if method in _INPLACE_OPS and args and "," not in args:
        return f"{obj} {_INPLACE_OPS[method]} {args}"
    return f"{obj}.{method[:-1]}({args})"


def _describe(e: ast.expr) -> str:
    names = {"List": "list", "Dict": "dict", "Set": "set", "ListComp": "list comprehension",
             "GeneratorExp": "generator expression", "Lambda": "lambda", "Subscript": "indexing",
             "Attribute": f"attribute '{ast.unparse(e)}'", "JoinedStr": "f-string", "Starred": "*unpacking"}
    return names.get(type(e).__name__, f"'{ast.unparse(e)}'")


def _op_symbol(op) -> str:
    return {"BitAnd": "&", "BitOr": "|", "BitXor": "^", "LShift": "<<", "RShift": ">>", "MatMult": "@",
            "In": "in", "NotIn": "not in", "Is": "is", "IsNot": "is not"}.get(type(op).__name__, type(op).__name__)

