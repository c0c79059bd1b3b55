"""The view of one FX node that ATen handlers see: its arguments by schema name, the type torch
gives its result, and a location for errors (the user's line that made it, and the node)."""
from __future__ import annotations

import operator
from typing import Any, Callable

from ...errors import KsbuildError, Location
from ...ir.core import Atom, Lit, Var
from ...ir.types import Dim, Type, dim_add, dim_floordiv, dim_mul, dim_sub
from ...ops._util import scalar_lit

MISSING = object()
TORCH_DTYPES = {"torch.float32": "f32", "torch.float64": "f64", "torch.int64": "i64", "torch.int32": "i32",
                "torch.int16": "i16", "torch.int8": "i8", "torch.uint8": "u8", "torch.bool": "bool"}


def ir_dtype(dtype, loc: Location | None = None) -> str:
    """The IR dtype of a torch dtype (float16 and friends are not supported: no silent casts)."""
    name = str(dtype)
    if name not in TORCH_DTYPES:
        raise KsbuildError(f"tensors of {name} are not supported", loc,
                           hint="supported: float32, float64, int8..int64, uint8, bool; convert the model "
                                "with .float() or .double()")
    return TORCH_DTYPES[name]


class Dims:
    """sympy expressions of torch's symbolic sizes -> ksbuild dims (names and + - * //)."""

    def __init__(self, names: dict):
        self.names = names

    def of(self, size, loc: Location | None = None) -> Dim:
        """A dim from an int, a SymInt or a sympy expression."""
        import torch
        if isinstance(size, torch.SymInt):
            return self.of(size.node.expr, loc)
        if isinstance(size, int):
            return size
        return self._expr(size, loc)

    def _expr(self, e, loc) -> Dim:
        import sympy
        from torch.utils._sympy.functions import FloorDiv
        if e.is_Integer:
            return int(e)
        if e.is_Symbol:
            if e not in self.names:
                raise KsbuildError(f"the size '{e}' is not a dim of the inputs", loc)
            return self.names[e]
        parts = [self._expr(a, loc) for a in e.args]
        if isinstance(e, sympy.Add):
            return _fold(dim_add, parts)
        if isinstance(e, sympy.Mul):
            return _fold(dim_mul, parts)
        if isinstance(e, FloorDiv):
            return dim_floordiv(parts[0], parts[1])
        if isinstance(e, sympy.Pow) and e.exp.is_Integer and int(e.exp) > 0:
            return _fold(dim_mul, [parts[0]] * int(e.exp))
        raise KsbuildError(f"the size expression '{e}' is not supported (only + - * // of dims)", loc)

    def type_of(self, val, loc: Location | None = None) -> Type:
        """The IR type of a FakeTensor (a node's meta['val'])."""
        return Type(ir_dtype(val.dtype, loc), tuple(self.of(s, loc) for s in val.shape))


def _fold(fn, parts):
    out = parts[0]
    for p in parts[1:]:
        out = fn(out, p)
    return out


SYM_OPS = {operator.add: dim_add, operator.sub: dim_sub, operator.mul: dim_mul, operator.floordiv: dim_floordiv}
"""Python operators on SymInts in the graph (size arithmetic) and their dim versions."""


class Node:
    """One call_function node being imported."""

    def __init__(self, imp, fx_node, loc: Location):
        self.imp, self.node, self.loc = imp, fx_node, loc
        self.b = imp.b
        self.args = [imp.value(a) for a in fx_node.args]
        self.kwargs = {k: imp.value(v) for k, v in fx_node.kwargs.items()}
        self._named = self._by_name()

    @property
    def op(self) -> str:
        return self.imp.target_name(self.node)

    def _by_name(self) -> dict[str, Any]:
        schema = getattr(self.node.target, "_schema", None)
        if schema is None:
            return {}
        out = {}
        for i, a in enumerate(schema.arguments):
            if i < len(self.args):
                out[a.name] = self.args[i]
            elif a.name in self.kwargs:
                out[a.name] = self.kwargs[a.name]
            elif a.has_default_value():
                out[a.name] = a.default_value
        return out

    def a(self, name: str, default: Any = MISSING) -> Any:
        """The argument called `name` in the op's schema (positional, keyword or its default)."""
        if name in self._named:
            return self._named[name]
        if default is MISSING:
            raise self.error(f"{self.op}: missing argument '{name}'")
        return default

    def x(self, name: str = "self") -> Atom:
        """A tensor argument as an atom."""
        v = self.a(name)
        if not isinstance(v, (Var, Lit)):
            raise self.error(f"{self.op}: argument '{name}' must be a tensor, got {type(v).__name__}")
        return v

    def array(self, v: Any):
        """The numpy value of an embedded weight or tensor constant, or None (an input, a computed value, or an
        external weight)."""
        return self.imp.arrays.get(v) if isinstance(v, (Var, Lit)) else None

    def meta(self, name: str):
        """The FakeTensor (or number) torch recorded for argument `name` (for type promotion)."""
        schema = self.node.target._schema
        for i, a in enumerate(schema.arguments):
            if a.name == name:
                raw = self.node.args[i] if i < len(self.node.args) else self.node.kwargs.get(name, a.default_value)
                return raw.meta.get("val") if hasattr(raw, "meta") else raw
        raise self.error(f"{self.op}: no argument '{name}'")

    @property
    def out(self):
        """torch's result value (a FakeTensor, a tuple of them or a SymInt)."""
        return self.node.meta.get("val")

    @property
    def dtype(self) -> str:
        """The IR dtype of the (first) tensor result."""
        val = self.out[0] if isinstance(self.out, (tuple, list)) else self.out
        return ir_dtype(val.dtype, self.loc)

    @property
    def out_type(self) -> Type:
        val = self.out[0] if isinstance(self.out, (tuple, list)) else self.out
        return self.imp.dims.type_of(val, self.loc)

    def operand(self, v: Any, dtype: str) -> Atom:
        """A tensor, Python number or dim as an atom of dtype (torch computes in the promoted dtype)."""
        if isinstance(v, (Var, Lit)):
            return v if v.type.dtype == dtype else self.b.convert(v, dtype=dtype)
        if isinstance(v, str):
            size = self.b.dim_size(dim=v)
            return size if dtype == "i64" else self.b.convert(size, dtype=dtype)
        if isinstance(v, (bool, int, float)):
            return scalar_lit(v, dtype)
        raise self.error(f"{self.op}: expected a tensor or a number, got {type(v).__name__}")

    def error(self, message: str, hint: str | None = None) -> KsbuildError:
        return KsbuildError(message, self.loc, hint)

    def unsupported(self, what: str, hint: str | None = None) -> KsbuildError:
        return KsbuildError(f"{self.op}: {what} is not supported", self.loc, hint)


HANDLERS: dict[Any, Callable[["Node"], Any]] = {}
"""'aten.<op>.<overload>' (or a Python function such as operator.getitem) -> handler(node) -> value."""


def handler(*targets):
    """Register the decorated function as the handler of these ATen overloads ('add.Tensor') or callables."""
    def register(fn):
        for t in targets:
            HANDLERS["aten." + t if isinstance(t, str) else t] = fn
        return fn
    return register
