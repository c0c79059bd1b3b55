"""The view of one ONNX node that op handlers see: inputs as atoms or known arrays, attributes.

Handlers read every attribute they accept through `attr`; an attribute left unread is an
error naming it, so a model never silently loses a setting. Errors are located at the node.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ...errors import KsbuildError, Location
from ...ir.core import Atom, Var
from ...ir.types import Dim, Type
from .values import Val, atom_of_array, atom_of_shape, compute_dtype, dims_of, is_symbolic

REQUIRED = object()
TAKES_SEQUENCES = {"Identity", "SequenceAt", "SequenceLength", "SequenceInsert", "SequenceErase", "ConcatFromSequence",
                   "Optional", "OptionalHasElement", "OptionalGetElement"}
"""The ops whose inputs may be sequences or optional values (ops_sequence.py)."""


STATIC_HINT = "give it as an initializer or a Constant (shapes must be static)"


class NeedsConstant(KsbuildError):
    """An input that must be known at import time (a shape, axes, pads) is computed at run time."""

    def __init__(self, message: str, loc: Location | None, value: str, sources: list[str] | None = None,
                 hint: str = STATIC_HINT):
        super().__init__(message, loc, hint=hint)
        self.value = value
        self.sources = sources if sources is not None else [value]  # model values it is computed from


def tensor_array(t, base_dir: str = "") -> np.ndarray:
    """A TensorProto's values; strings exactly as stored (onnx's numpy_helper drops their trailing NULs)."""
    from onnx import TensorProto, numpy_helper
    if t.data_type == TensorProto.STRING:
        items = [v.decode("utf-8", "surrogateescape") for v in t.string_data]
        arr = np.empty(len(items), dtype=object)
        arr[:] = items
        return arr.reshape(tuple(t.dims))
    return numpy_helper.to_array(t, base_dir=base_dir)


def attribute_value(a) -> Any:
    """The Python value of an AttributeProto."""
    from onnx import AttributeProto
    kind = a.type
    if kind == AttributeProto.FLOAT:
        return float(a.f)
    if kind == AttributeProto.INT:
        return int(a.i)
    if kind == AttributeProto.STRING:
        return a.s.decode("utf-8", "replace")
    if kind == AttributeProto.TENSOR:
        return tensor_array(a.t)
    if kind == AttributeProto.GRAPH:
        return a.g
    if kind == AttributeProto.FLOATS:
        return [float(v) for v in a.floats]
    if kind == AttributeProto.INTS:
        return [int(v) for v in a.ints]
    if kind == AttributeProto.STRINGS:
        return [s.decode("utf-8", "replace") for s in a.strings]
    if kind == AttributeProto.GRAPHS:
        return list(a.graphs)
    if kind == AttributeProto.TENSORS:
        return [tensor_array(t) for t in a.tensors]
    return a  # sparse tensors, type protos: handlers that accept them check


class Node:
    """One node being imported: the builder, its inputs, attributes and a location for errors."""

    def __init__(self, imp, frame, proto, loc: Location, opset: int, b=None, fold: bool = False):
        self.imp, self.frame, self.proto, self.loc, self.opset = imp, frame, proto, loc, opset
        self.b = b if b is not None else frame.b
        self.attrs = {a.name: a for a in proto.attribute}
        self.read: set[str] = set()
        self.fold = fold
        self.fold_params: list[tuple[Var, np.ndarray]] = []

    @property
    def op(self) -> str:
        return self.proto.op_type

    @property
    def float_dtype(self) -> str:
        return self.imp.float_dtype

    def error(self, message: str, hint: str | None = None) -> KsbuildError:
        return KsbuildError(message, self.loc, hint)

    def unsupported(self, what: str, hint: str | None = None) -> KsbuildError:
        return KsbuildError(f"{self.op}: {what} is not supported", self.loc, hint)

    # ---- inputs -----------------------------------------------------------------------------------

    @property
    def n_in(self) -> int:
        return len(self.proto.input)

    @property
    def n_out(self) -> int:
        return len(self.proto.output)

    def has(self, i: int) -> bool:
        """True if optional input i is given."""
        return i < len(self.proto.input) and self.proto.input[i] != ""

    def out_used(self, i: int) -> bool:
        """True if output i is requested."""
        return i < len(self.proto.output) and self.proto.output[i] != ""

    def val(self, i: int) -> Val:
        if not self.has(i):
            raise self.error(f"{self.op} needs input {i}")
        return self.frame.lookup(self.proto.input[i], self)

    def x(self, i: int) -> Atom:
        """Input i as an atom (required); a sequence or an optional only for the ops that take them."""
        if self.fold:
            return self._fold_param(i)
        name = self.proto.input[i] if self.has(i) else self._missing(i)
        v = self.frame.lookup(name, self)
        if (v.seq or v.present is not None) and self.op not in TAKES_SEQUENCES:
            kind = "an optional value" if v.present is not None else "a sequence"
            raise self.error(f"{self.op}: input {i} ('{name}') is {kind}; {self.op} takes tensors",
                             hint="OptionalGetElement, SequenceAt or ConcatFromSequence make tensors of them")
        return self.frame.atom(name, self)

    def opt(self, i: int) -> Atom | None:
        """Optional input i as an atom, or None when it is not given."""
        return self.x(i) if self.has(i) else None

    def xs(self) -> list[Atom]:
        """All given inputs as atoms."""
        return [self.x(i) for i in range(self.n_in) if self.has(i)]

    def _missing(self, i: int):
        raise self.error(f"{self.op} needs input {i}")

    def _fold_param(self, i: int) -> Atom:
        arr = self.val(i).known
        t = Type(compute_dtype(self.val(i).dtype), tuple(int(d) for d in arr.shape))
        v = Var(t, f"in{i}")
        self.fold_params.append((v, arr))
        return v

    def known(self, i: int) -> np.ndarray | None:
        """Input i's value if it is known at import time (else None)."""
        return self.val(i).known if self.has(i) else None

    def const(self, i: int, what: str, hint: str = STATIC_HINT) -> np.ndarray:
        """Input i's value, which must be known at import time (a shape, axes, ...)."""
        v = self.val(i)
        if v.known is None:
            name = self.proto.input[i]
            raise NeedsConstant(f"{self.op}: {what} (input {i}, '{name}') must be known when the model is "
                                "compiled, but it is computed at run time", self.loc, name, hint=hint)
        return v.known

    def ints(self, i: int, what: str) -> list[int]:
        """A known integer input as a list of Python ints (no symbolic dims allowed)."""
        arr = self.const(i, what)
        if is_symbolic(arr):
            raise self.error(f"{self.op}: {what} depends on a symbolic dim: it must be a number")
        return [int(v) for v in np.asarray(arr).reshape(-1)]

    def dims(self, i: int, what: str) -> list[Dim]:
        """A known 1-D shape input as dims (symbolic dims allowed)."""
        return dims_of(self.const(i, what))

    def dtype(self, i: int) -> str:
        """The ONNX element type of input i (an IR dtype; f16 stays f16)."""
        return self.val(i).dtype

    # ---- attributes -------------------------------------------------------------------------------

    def attr(self, name: str, default: Any = REQUIRED) -> Any:
        """Attribute `name` (marked as read); a missing required attribute is an error."""
        self.read.add(name)
        if name not in self.attrs:
            if default is REQUIRED:
                raise self.error(f"{self.op} needs the attribute '{name}'")
            return default
        value = attribute_value(self.attrs[name])
        return self._checked(name, value, default)

    def _checked(self, name: str, value: Any, default: Any) -> Any:
        """The value, if it has the kind of its default (an int where a float is expected is fine)."""
        kinds = {bool: int, int: int, float: (int, float), str: str, list: list}
        want = kinds.get(type(default))
        if want is None or isinstance(value, want):
            return float(value) if isinstance(default, float) else value
        shown = {int: "an int", str: "a string", list: "a list", (int, float): "a number"}[want]
        raise self.error(f"{self.op}: attribute '{name}' must be {shown}, got {type(value).__name__} {value!r}")

    def attr_in(self, name: str, choices: Sequence, default: Any = REQUIRED) -> Any:
        v = self.attr(name, default)
        if v not in choices:
            raise self.error(f"{self.op}: attribute {name}={v!r} is not supported (supported: "
                             f"{', '.join(map(repr, choices))})")
        return v

    def check_attrs(self) -> None:
        """Every attribute of the node was read by its handler; else name the first one left."""
        extra = [a for a in self.attrs if a not in self.read]
        if extra:
            raise self.error(f"{self.op}: unknown or unsupported attribute '{extra[0]}'")

    # ---- outputs -------------------------------------------------------------------------------------

    def lit_atom(self, arr: np.ndarray) -> Atom:
        """A numpy array made into an atom in this node's builder."""
        return atom_of_shape(self.b, arr) if is_symbolic(arr) else atom_of_array(self.b, arr)
