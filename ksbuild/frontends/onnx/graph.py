"""The ONNX graph visitor: an ONNX model becomes one IR function.

Graph inputs become parameters in order (`dim_param`s symbolic dims, fixed dims literals),
graph outputs the results in order. Nodes are visited in order; each op handler (the table
`HANDLERS`, filled by the handler modules) parses the node's attributes and builds IR through
the shared op library (`ksbuild/ops`). A node whose inputs are all known at import time is
folded: its IR is evaluated by the reference interpreter and its outputs become known too.
Ops without a handler that ONNX defines as a function of other ops are expanded into it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from ...errors import KsbuildError, Location
from ...ir.builder import Builder
from ...ir.core import Atom, Func, Lit, Var
from ...ir.types import Dim, Type
from .names import ascii_name, c_name, dim_name, value_hint
from .node import NeedsConstant, Node, tensor_array
from .qdq import fold_qdq
from .values import Val, atom_of_array, atom_of_shape, compute_dtype, is_symbolic, normalize_symbolic, onnx_dtype

HANDLERS: dict[tuple[str, str], Callable[[Node], list]] = {}
"""(domain, ONNX op type) -> handler(node) -> one result per output (Atom, Val, known array or None); the
domain is "" for every domain of HANDLED_DOMAINS."""
SYMBOLIC: dict[str, Callable[[Node, list], list]] = {}
"""ONNX op type -> fold of known arrays holding symbolic dims (shape arithmetic)."""
TYPE_ONLY = {"CastLike": 1, "EyeLike": 0, "RandomUniformLike": 0, "RandomNormalLike": 0}
"""Inputs that an op reads only for their type or shape: they do not stop folding."""
NO_FOLD = {"If", "Loop", "Scan", "Shape", "Size", "Identity", "RandomNormal", "RandomUniform", "RandomNormalLike",
           "RandomUniformLike", "Bernoulli", "Multinomial", "Constant", "SequenceConstruct", "SequenceAt",
           "SequenceLength", "SequenceInsert", "SequenceErase", "SplitToSequence", "ConcatFromSequence", "Optional",
           "OptionalHasElement", "OptionalGetElement"}

HANDLED_DOMAINS = ("", "ai.onnx.preview.training", "ai.onnx.ml")
"""The ONNX domains whose ops share one namespace of handlers (registered with the default domain "")."""


def handler(*ops: str, domain: str = ""):
    """Register the decorated function as the handler of these ONNX op types of `domain` ("" for the ONNX
    domains of HANDLED_DOMAINS; e.g. "com.microsoft" for onnxruntime's contrib ops)."""
    def register(fn):
        for op in ops:
            assert (domain, op) not in HANDLERS, f"ONNX op {domain}:{op} has two handlers"
            HANDLERS[(domain, op)] = fn
        return fn
    return register


def handler_of(domain: str, op_type: str) -> Callable[[Node], list] | None:
    """The handler of an op type of a domain, if any."""
    return HANDLERS.get(("" if domain in HANDLED_DOMAINS else domain, op_type))


def symbolic(*ops: str):
    """Register the decorated function as the symbolic-shape fold of these op types."""
    def register(fn):
        for op in ops:
            SYMBOLIC[op] = fn
        return fn
    return register


class Frame:
    """The values visible while building one IR function (the main graph or a subgraph body).

    A subgraph may read values of enclosing graphs: a known one is shared, an atom is captured
    as a parameter of the subgraph's function (IR functions are closed)."""

    def __init__(self, b: Builder, parent: "Frame | None" = None):
        self.b = b
        self.parent = parent
        self.vals: dict[str, Val] = {}
        self.captured: dict[str, Var] = {}
        self.made: dict[str, Atom] = {}
        self.inline = False  # a body emitted into the parent's builder reads the parent's atoms directly

    def lookup(self, name: str, node: Node) -> Val:
        if name in self.vals:
            return self.vals[name]
        if self.parent is None:
            raise node.error(f"input '{name}' of {node.op} is not defined before this node")
        outer = self.parent.lookup(name, node)
        if outer.atom is None or self.inline:
            return outer
        if outer.present is not None:
            raise node.error(f"an optional value ('{name}') read inside a subgraph is not supported")
        p = Var(outer.atom.type, c_name(name))
        self.captured[name] = p
        self.vals[name] = Val(p, None, outer.dtype, seq=outer.seq)
        return self.vals[name]

    def atom(self, name: str, node: Node) -> Atom:
        """The atom of a value in this function (a known value is made into a literal or constant once)."""
        v = self.lookup(name, node)
        if v.atom is not None:
            return v.atom
        if name not in self.made:
            self.made[name] = atom_of_shape(self.b, v.known) if is_symbolic(v.known) else atom_of_array(self.b, v.known)
        return self.made[name]


class Importer:
    """Imports one ONNX model file into an IR function."""

    def __init__(self, path: Path, model, float_dtype: str = "f32", weights: str = "embed",
                 embedded: frozenset[str] = frozenset(), semantics: str = "onnxruntime"):
        self.path, self.model, self.float_dtype = path, model, float_dtype
        self.semantics = semantics  # whom to follow where onnxruntime and onnx.reference differ
        self.weights, self.embedded = weights, embedded
        self.file = str(path)
        self.opsets = {("" if imp.domain in ("", "ai.onnx") else imp.domain): imp.version for imp in model.opset_import}
        self.functions = {(f.domain, f.name): f for f in model.functions}
        self.dim_names: dict[str, str] = {}
        self.external: list[str] = []  # initializers passed by the caller (weights = "external")
        self.notes: list[str] = []  # how sequence and optional graph inputs and outputs are passed
        self.input_names: set[str] = set()
        self.unnamed_batch: set[str] = set()  # inputs whose unnamed first dims are one dim, `batch`

    def loc(self, node_text: str | None = None) -> Location:
        return Location(self.file, node=node_text)

    # ---- the main graph ---------------------------------------------------------------------------

    def run(self, name: str) -> Func:
        """The IR function of the model's main graph."""
        g = self.model.graph
        b = Builder(self.loc())
        frame = Frame(b)
        inits = {t.name: t for t in g.initializer}
        params = []
        inputs = [vi for vi in g.input if vi.name not in inits]
        for vi in g.input:  # (an input with an initializer: the initializer is its default, which may be overridden)
            if vi.name in inits and not self.is_external(vi.name, onnx_dtype(inits[vi.name].data_type, vi.name,
                                                                               self.loc()), None):
                self.notes.append(f"ONNX graph input '{vi.name}' has a default value (an initializer of the same "
                                  "name): it is built in, not an argument (weights = \"external\" makes it one)")
        self.reserve_names(inputs)
        for vi in inputs:
            params += self.graph_input(b, frame, vi)
        params += self.add_initializers(b, frame, g.initializer)
        nodes = fold_qdq(g.node, inits, {o.name for o in g.output})
        self.run_nodes(frame, nodes, self.opsets)
        results, names = self.outputs(b, frame, g.output)
        f = b.func(name, params, results, names)
        return Func(f.name, f.params, f.eqns, f.results, f.result_names, notes=tuple(self.notes))

    def graph_input(self, b: Builder, frame: Frame, vi) -> list[Var]:
        """The parameters of one graph input: a tensor; a sequence as its elements stacked (a length dim
        `<name>_len` first); an optional value as its value then a bool `<name>_present` (ops_sequence.py)."""
        where = f"graph input '{vi.name}'"
        t, seq, optional = unwrap_type(vi.type)
        dtype, shape = self.value_type(t, where, vi.name)
        if seq:
            shape = (self.dim_of(f"{vi.name}_len", key=("len", vi.name)),) + shape
        p = Var(Type(dtype, shape), c_name(vi.name, "x"))
        params = [p]
        present = None
        if optional:
            present = Var(Type("bool"), self.fresh_input_name(c_name(f"{vi.name}_present", "x")))
            params.append(present)
        self.note(f"input {p.hint}", seq, optional, shape, present.hint if present is not None else "")
        frame.vals[vi.name] = Val(self.compute(b, p), None, dtype, seq=seq, present=present)
        return params

    def note(self, what: str, seq: bool, optional: bool, shape, present: str) -> None:
        """A header line on how a sequence or an optional graph input or output is passed."""
        parts = []
        if seq:
            parts.append(f"a sequence: its {shape[0]} elements stacked along axis 0")
        if optional:
            value = "sequence" if seq else "value"
            parts.append(f"optional: {present} says whether it is there" + (
                f" (when it is false, the {value} is still read: pass one of its shape, zeros, with 0 for its "
                "run-time dims if it has any)" if what.startswith("input")
                else f" (when it is false, the {value} is unspecified)"))
        if parts:
            self.notes.append(f"ONNX {what} is " + "; ".join(parts))

    def value_type(self, t, where: str, name: str) -> tuple[str, tuple[Dim, ...]]:
        """The dtype and shape of a tensor type (of a graph input, or of a sequence's elements)."""
        if t.WhichOneof("value") != "tensor_type":
            raise KsbuildError(f"{where} is a {t.WhichOneof('value') or 'value of unknown type'}; only tensors, "
                               "sequences of tensors and optional tensors or sequences are supported", self.loc())
        dtype = onnx_dtype(t.tensor_type.elem_type, where, self.loc())
        if not t.tensor_type.HasField("shape"):
            raise KsbuildError(f"{where} has no shape (not even a rank)", self.loc(),
                               hint="export the model with input shapes, e.g. torch.onnx.export(..., dynamic_axes=), "
                                    "or give them with onnx.tools.update_model_dims")
        dims = t.tensor_type.shape.dim
        self.check_sizes(dims, where)
        return dtype, tuple(self.dim(d, name, k) for k, d in enumerate(dims))

    def check_sizes(self, dims, where: str) -> None:
        """A located error for a negative dim_value: ONNX sizes are >= 0 (onnx.checker lets -5 through and
        onnxruntime reads it as unknown; ksbuild would put it in the header)."""
        for k, d in enumerate(dims):
            if d.HasField("dim_value") and d.dim_value < 0:
                raise KsbuildError(f"{where} is declared with shape {_shape_text(dims)}: size {d.dim_value} along "
                                   f"axis {k} is negative (an ONNX dim is a size >= 0 or a name, dim_param)",
                                   self.loc(), hint="for a size known only at run time, name the dim: set its "
                                   "dim_param (onnx.tools.update_model_dims.update_inputs_outputs_dims does it)")

    def dim(self, d, name: str, k: int) -> Dim:
        if d.HasField("dim_value"):
            return int(d.dim_value)
        if k == 0 and name in self.unnamed_batch and not d.HasField("dim_param"):
            return self.dim_of("batch", key=("unnamed batch",))
        if d.HasField("dim_param") and not d.dim_param.isidentifier():
            expr = self.dim_expression(d.dim_param)
            if expr is not None:
                return expr
        return self.dim_of(d.dim_param if d.HasField("dim_param") else f"{name}_dim{k}")

    def dim_expression(self, text: str) -> Dim | None:
        """A dim_param that is an expression of dims with integers, + - * and // (torch.export writes `2*hh` for
        a size it knows to be even) as that expression of symbolic dims; None for any other name."""
        import ast
        try:
            tree = ast.parse(text.strip(), mode="eval").body
        except SyntaxError:
            return None
        ops = (ast.BinOp, ast.Name, ast.Constant, ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Load)
        if not all(isinstance(e, ops) for e in ast.walk(tree)) or \
                any(isinstance(e, ast.Constant) and type(e.value) is not int for e in ast.walk(tree)):
            return None
        for e in ast.walk(tree):
            if isinstance(e, ast.Name):
                e.id = self.dim_of(e.id)
        from ...ir.types import canonical_dim
        return canonical_dim(ast.unparse(tree))

    def dim_of(self, raw: str, key=None) -> str:
        """The symbolic dim of an ONNX dim name (made a C identifier, see names.py); `key` tells a dim ksbuild
        names (a sequence's length) from a model's dim of the same name."""
        key = raw if key is None else key
        if key not in self.dim_names:
            self.dim_names[key] = dim_name(raw, set(self.dim_names.values()))
        return self.dim_names[key]

    def reserve_names(self, inputs) -> None:
        """The model's own dim and input names go first, so the names ksbuild makes up (`xs_len`,
        `a_present`) never take one of them."""
        for vi in inputs:
            t = unwrap_type(vi.type)[0]
            if t.WhichOneof("value") == "tensor_type":
                for d in t.tensor_type.shape.dim:
                    if d.HasField("dim_param") and self.dim_expression(d.dim_param) is None:
                        self.dim_of(d.dim_param)
        self.input_names = {c_name(vi.name, "x") for vi in inputs}
        # skl2onnx writes a model of several inputs (a DataFrame's columns) with an unnamed first dim each: as
        # dims of their own the rows could not meet (concatenated, added); they are one, called batch
        unnamed = [vi.name for vi in inputs if _first_dim_unnamed(vi)]
        if len(unnamed) > 1:
            self.unnamed_batch = set(unnamed)

    def fresh_input_name(self, name: str) -> str:
        """name, or name2, name3, ... when an input of the model is called so."""
        base, k = name, 1
        while name in self.input_names:
            k += 1
            name = f"{base}{k}"
        self.input_names.add(name)
        return name

    def compute(self, b: Builder, p: Atom) -> Atom:
        """A parameter of a storage dtype (f16, ...) converted to the dtype it computes in."""
        cdt = compute_dtype(p.type.dtype)
        return p if cdt == p.type.dtype else b.convert(p, dtype=cdt)

    def add_initializers(self, b: Builder, frame: Frame, inits) -> list[Var]:
        """Initializers become known values, or parameters (weights = "external")."""
        params = []
        for t in inits:
            try:
                arr = tensor_array(t, base_dir=str(self.path.parent))
            except Exception as e:  # noqa: BLE001  a malformed or missing external data file
                raise KsbuildError(f"cannot read initializer '{t.name}': {e}", self.loc()) from None
            dtype = onnx_dtype(t.data_type, f"initializer '{t.name}'", self.loc())
            if self.is_external(t.name, dtype, arr):
                p = Var(Type(dtype, tuple(int(d) for d in arr.shape)), c_name(t.name, "w"))
                params.append(p)
                self.external.append(t.name)
                frame.vals[t.name] = Val(self.compute(b, p), None, dtype)
            else:
                frame.vals[t.name] = Val(None, arr, dtype)
        return params

    def is_external(self, name: str, dtype: str, arr: np.ndarray) -> bool:
        return self.weights == "external" and name not in self.embedded and compute_dtype(dtype) in ("f32", "f64")

    def outputs(self, b: Builder, frame: Frame, outs) -> tuple[list[Atom], list[str]]:
        results, names = [], []
        for vi in outs:
            node = Node(self, frame, _fake_node(vi.name), self.loc(f"output '{vi.name}'"), 0)
            v = frame.lookup(vi.name, node)
            t, seq, optional = unwrap_type(vi.type)
            _check_output_kind(node, vi.name, v, seq, optional)
            a = frame.atom(vi.name, node)
            want = v.dtype
            if t.HasField("tensor_type") and t.tensor_type.elem_type:
                want = onnx_dtype(t.tensor_type.elem_type, f"graph output '{vi.name}'", self.loc())
                if _kind(want) != _kind(v.dtype):  # (onnxruntime refuses it; a cast would truncate floats or so)
                    raise node.error(f"graph output '{vi.name}' is declared {want} but its value is {v.dtype}")
            results.append(a if a.type.dtype == want else b.convert(a, dtype=want))
            names.append(ascii_name(vi.name, "y"))  # codegen writes out_<name>: never a keyword or macro
            if optional:
                results.append(v.present if v.present is not None else Lit(True, Type("bool")))
                names.append(ascii_name(f"{vi.name}_present", "y"))
            self.note(f"output out_{names[-1 - optional]}", seq, optional, a.type.shape, f"out_{names[-1]}")
        return results, names

    # ---- nodes --------------------------------------------------------------------------------------

    def run_nodes(self, frame: Frame, nodes, opsets: dict[str, int]) -> None:
        for i, proto in enumerate(nodes):
            self.run_node(frame, proto, i, opsets)

    def node_loc(self, proto, index: int) -> Location:
        label = proto.name or f"#{index}"
        return self.loc(f"{label} ({proto.op_type})")

    def run_node(self, frame: Frame, proto, index: int, opsets: dict[str, int]) -> None:
        loc = self.node_loc(proto, index)
        frame.b.loc = loc
        domain = proto.domain if proto.domain != "ai.onnx" else ""
        if (proto.domain, proto.op_type) in self.functions:
            from .functions import inline_local_function
            return inline_local_function(self, frame, proto, loc, opsets)
        fn = handler_of(domain, proto.op_type)
        if fn is None:
            from .functions import expand_schema_function
            return expand_schema_function(self, frame, proto, loc, opsets, domain)
        node = Node(self, frame, proto, loc, opsets.get(domain, 1))
        skip = TYPE_ONLY.get(proto.op_type)
        vals = [frame.lookup(n, node) for i, n in enumerate(proto.input) if n and i != skip]
        if proto.op_type in SYMBOLIC and vals and all(v.known is not None for v in vals) \
                and any(is_symbolic(v.known) for v in vals):
            results = [normalize_symbolic(r) for r in SYMBOLIC[proto.op_type](node, [v.known for v in vals])]
        elif proto.op_type not in NO_FOLD and vals and all(v.known is not None and not is_symbolic(v.known)
                                                             for v in vals):
            results = self.fold(frame, proto, loc, opsets.get(domain, 1), fn, vals)
        else:
            results = self.call(node, fn)
        self.bind_outputs(frame, node, results, vals)

    def call(self, node: Node, fn) -> list:
        try:
            results = fn(node)
        except NeedsConstant:
            raise
        except KsbuildError as e:
            raise e.at(node.loc) from None
        node.check_attrs()
        return results

    def fold(self, frame: Frame, proto, loc: Location, opset: int, fn, vals: list[Val]) -> list:
        """Run the handler on known inputs and evaluate its IR now: the outputs are known."""
        from ...ir.interp import eval_func
        scratch = Builder(loc)
        node = Node(self, frame, proto, loc, opset, b=scratch, fold=True)
        results = self.call(node, fn)
        atoms = [r.atom if isinstance(r, Val) else r for r in results
                 if r is not None and not isinstance(r, np.ndarray) and not (isinstance(r, Val) and r.atom is None)]
        f = scratch.func("fold", [v for v, _ in node.fold_params], atoms)
        values = iter(eval_func(f, [a for _, a in node.fold_params]))
        out = []
        for r in results:
            if r is None or isinstance(r, np.ndarray) or (isinstance(r, Val) and r.atom is None):
                out.append(r)
            else:
                arr = np.asarray(next(values))
                out.append(Val(None, arr, r.dtype) if isinstance(r, Val) else arr)
        return out

    def bind_outputs(self, frame: Frame, node: Node, results: list, vals: list[Val]) -> None:
        proto = node.proto
        storage = {v.dtype for v in vals if compute_dtype(v.dtype) != v.dtype and compute_dtype(v.dtype) == "f32"}
        for i, name in enumerate(proto.output):
            if not name:
                continue
            r = results[i] if i < len(results) else None
            if r is None:
                raise node.error(f"{node.op}: output {i} ('{name}') is not supported")
            if name in frame.vals and name not in frame.captured:  # (onnx.checker and onnxruntime refuse it too)
                raise node.error(f"{node.op}: output {i} ('{name}') is already defined (by a graph input, an "
                                 "initializer or another node): an ONNX graph defines each value once")
            frame.vals[name] = _as_val(node.b, r, storage)
            node.b.name(frame.vals[name].atom, value_hint(name))  # (the tensor's name in the C++)


def _as_val(b: Builder, r, storage: set[str]) -> Val:
    """A handler's result as a Val; an f32 result of an op on f16 (or bf16...) values is an f16 value:
    rounded to f16 (and computed on in f32), as ONNX defines each op's output."""
    if isinstance(r, Val):
        return r  # a handler that returns a Val states its dtype
    v = Val(None, r) if isinstance(r, np.ndarray) else Val(r)
    if v.dtype == "f32" and len(storage) == 1:
        v.dtype = next(iter(storage))
        if v.atom is not None:
            v.atom = b.convert(b.convert(v.atom, dtype=v.dtype), dtype="f32")
        else:
            from ...ir.types import numpy_dtype
            v.known = v.known.astype(numpy_dtype(v.dtype)).astype(np.float32)
    return v


def _shape_text(dims) -> str:
    """A declared ONNX shape as the user wrote it: [-5, 3], [batch, 3] ('?' for a dim with neither field)."""
    return "[" + ", ".join(str(d.dim_value) if d.HasField("dim_value") else d.dim_param or "?" for d in dims) + "]"


def unwrap_type(t):
    """(the element's TypeProto, whether it is a sequence, whether it is optional) of optional(sequence(T)),
    optional(T), sequence(T) or T."""
    optional = t.WhichOneof("value") == "optional_type"
    t = t.optional_type.elem_type if optional else t
    seq = t.WhichOneof("value") == "sequence_type"
    return (t.sequence_type.elem_type if seq else t), seq, optional


def _check_output_kind(node: Node, name: str, v: Val, seq: bool, optional: bool) -> None:
    """A graph output's declared type and its value agree on being a sequence, and on being optional
    (a tensor declared optional is one that is there)."""
    if seq != v.seq:
        raise node.error(f"graph output '{name}' is declared a {'sequence' if seq else 'tensor'} but its value is "
                         f"a {'sequence' if v.seq else 'tensor'}")
    if v.present is not None and not optional:
        raise node.error(f"graph output '{name}' is an optional value but is not declared optional",
                         hint="OptionalGetElement makes its value a plain one")


def _fake_node(name: str):
    from onnx import helper
    return helper.make_node("Identity", [name], [name])


def _kind(dtype: str) -> str:
    """float, bool or integer: a declared output of another width of the same kind is stored rounded (an
    f16 output of a function body that computes in f32); of another kind, it is a mistake in the model."""
    return "f" if compute_dtype(dtype) in ("f32", "f64") else "b" if dtype == "bool" else "i"


def _first_dim_unnamed(vi) -> bool:
    """A tensor graph input whose first dim has neither a size nor a name."""
    t, seq, _ = unwrap_type(vi.type)
    if seq or t.WhichOneof("value") != "tensor_type" or not t.tensor_type.HasField("shape"):
        return False
    dims = t.tensor_type.shape.dim
    return bool(dims) and not dims[0].HasField("dim_value") and not dims[0].HasField("dim_param")
