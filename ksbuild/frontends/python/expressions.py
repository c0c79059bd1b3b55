"""The expression half of the Python frontend's visitor: expressions, calls and the value helpers.

`ExpressionCompiler` is mixed into `KernelCompiler` (compiler.py), which compiles functions and statements and
supplies `as_atom`, `condition`, `annotation` and `compile`; here are `expr` and an `expr_<Node>` method per
accepted expression (anything else is a located error), calls of torch functions (looked up through
namespaces.py), methods and other kernels, and the helpers torch handlers use on the compiler (`plain`, `unify`,
`numeric`, `boolean`, `prim`).
"""
from __future__ import annotations

import ast

from ...errors import KsbuildError
from ...ir.builder import Builder
from ...ir.core import Atom, Var
from ...ir.types import Type
from . import namespaces, tensors
from .linalg import matmul
from .mathlib import BINOPS, CMPOPS, call_builtin
from .scope import Const, FInfo, Scope, SymDim, Value, const_type
from .shape import transpose_2d

SUBMODULES = {("torch", "nn"): "nn", ("torch", "linalg"): "linalg", ("nn", "functional"): "F",
              ("torch", "special"): "special"}


class ExpressionCompiler:
    """Expressions and calls of the kernel compiler (mixed into compiler.KernelCompiler)."""

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
            return Const(not x.value) if isinstance(x, Const) else getattr(b, "not")(self.boolean(x, e))
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
        return getattr(b, name)(*xs)

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
        from .nested import call_grad, call_jvp, func_transform
        if isinstance(e.func, ast.Call) and func_transform(self, e.func.func) == "grad":
            return call_grad(self, b, scope, e)
        if func_transform(self, e.func) == "jvp":
            return call_jvp(self, b, scope, e)
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
        if name in self.src.externs:  # (a dim passed to an int argument is its value)
            args = [self.plain(b, a) for a in args]
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
        elif name in self.src.externs:
            from .externs import bind_extern
            outs = bind_extern(self, b, name, atoms)
        else:
            from ...prims.control import call_params
            outs = b.bind(_prim("call"), atoms, call_params(callee))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def arg_type(self, a: Value, p: ast.arg, node) -> Type:
        """The type of a helper's parameter p at a call passing a: its annotation's, or the argument's when p has none
        or says only torch.Tensor (a helper's tensor takes its caller's dtype and shape, as in torch)."""
        if p.annotation is not None and not (_is_tensor_class(p.annotation) and isinstance(a, Var)):
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


def _shape(v: Value):
    return () if isinstance(v, Const) else v.type.shape


def _prim(name: str):
    from ...prims import PRIMS
    return PRIMS[name]


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


def _is_tensor_class(node: ast.expr) -> bool:
    """torch.Tensor or Tensor as an annotation (no dtype, no shape)."""
    text = node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ast.unparse(node)
    return text.strip() in ("torch.Tensor", "Tensor")
