"""The FX graph visitor: an ExportedProgram becomes one IR function.

User inputs become the parameters in order (their symbolic sizes named dims), then, with
weights = "external", every float parameter and buffer (named after its state-dict key, in the
program's order: parameters, then buffers). With weights = "embed" (the default) they are
constants linked into the library, as are the tensor constants a forward creates. Only the
nodes the outputs depend on are visited (torch's runtime shape asserts are not). Each
`call_function` node goes through the table `HANDLERS` (filled by the aten_*.py modules; ksbuild's
own ops go to custom.py); its result is checked against the type torch recorded for it.
"""
from __future__ import annotations

import re
from collections import ChainMap
from dataclasses import replace
from typing import Any, Callable

from ...errors import KsbuildError, Location
from ...ir.builder import Builder
from ...ir.core import Atom, Func, Lit, Var
from ...ir.types import Type
from ...ops.create import array
from .capture import NO_GRAD_FN, Captured, origin_frame, parse_trace
from .fold import evaluate, lookup
from .hop import is_hop, visit_hop
from .node import HANDLERS, SYM_OPS, Dims, Node, ir_dtype


def c_name(name: str, prefix: str = "w") -> str:
    """A state-dict key or node name as a C identifier."""
    s = re.sub(r"\W", "_", name)
    return s if s and not s[0].isdigit() else f"{prefix}{s}"


class Importer:
    """Imports one captured module into an IR function."""

    def __init__(self, captured: Captured, weights: str = "embed", compile_export: Callable | None = None):
        from . import aten_math, aten_nn, aten_shape  # noqa: F401  (fill HANDLERS)
        self.captured, self.weights = captured, weights
        self.compile_export = compile_export  # (package, export, used_by, loc) -> Func: a ksbuild op's kernel
        self.program = captured.program
        self.file = str(captured.file)
        self.dims = Dims(captured.dim_names)
        self.b = Builder(Location(self.file))
        self.env: dict[Any, Any] = {}
        self.arrays: dict[Atom, Any] = {}  # embedded weights and constants -> their numpy values
        self.known: dict[Any, Any] = {}  # FX nodes independent of inputs and weights -> their values (fold.py)
        self.weight_values: dict[Any, Any] = {}  # FX placeholders of embedded parameters and buffers -> values
        self.buffers: dict[Any, Any] = {}  # FX placeholders of embedded buffers -> values (folded through)
        self.foldable = ChainMap(self.known, self.buffers)
        self.origins: dict[str, Location | None] = {}  # a node's stack trace -> the line that made it
        self.owner = self.program.graph_module  # the module whose graph is being read (get_attr's submodules)

    # ---- the graph ---------------------------------------------------------------------------------

    def run(self, name: str) -> Func:
        """The IR function of the program's graph."""
        graph = self.program.graph
        params = self.placeholders(graph)
        live = _live(graph)
        for node in graph.nodes:
            if node.op == "call_function" and node in live:
                self.visit(node)
        results = self.outputs(_output(graph))
        names = ["y"] if len(results) == 1 else [f"y{i}" for i in range(len(results))]
        return self.b.func(name, params, results, names)

    def subgraph(self, module, inputs: list, loc: Location) -> tuple[Builder, list]:
        """The equations (in a Builder of their own) and results of a higher-order op's body graph `module`
        (hop.py) with `inputs` for its placeholders."""
        outer_b, outer_owner = self.b, self.owner
        self.b, self.owner = Builder(loc), module
        try:
            holders = [n for n in module.graph.nodes if n.op == "placeholder"]
            if len(holders) != len(inputs):
                raise KsbuildError(f"internal error: a body graph takes {len(holders)} inputs, given "
                                   f"{len(inputs)}", loc, hint="please report this with the model")
            self.env.update(zip(holders, inputs))
            live = _live(module.graph)
            for node in module.graph.nodes:
                if node.op == "call_function" and node in live:
                    self.visit(node)
            out = _output(module.graph)
            return self.b, [self.env.get(r) if hasattr(r, "op") else r for r in _flat(out.args[0])]
        finally:
            self.b, self.owner = outer_b, outer_owner

    def submodule(self, node):
        """The module a get_attr node of the graph being read names (a higher-order op's body)."""
        module = self.owner
        for part in str(node.target).split("."):
            module = getattr(module, part)
        return module

    def placeholders(self, graph) -> list[Var]:
        """Parameters for the user inputs (and external weights); weights as constants otherwise."""
        specs = {s.arg.name: s for s in self.program.graph_signature.input_specs}
        inputs, weights = [], []
        for node in (n for n in graph.nodes if n.op == "placeholder"):
            spec = specs[node.name]
            kind = spec.kind.name
            if kind == "USER_INPUT":
                inputs.append(self.user_input(node))
            elif kind in ("PARAMETER", "BUFFER", "CONSTANT_TENSOR"):
                p = self.weight(node, spec.target, kind)
                if p is not None:
                    weights.append(p)
            else:
                raise KsbuildError(f"the exported program has an input of kind {kind} ('{node.name}'), which is "
                                   "not supported", Location(self.file))
        self.check_dim_names(inputs)
        return inputs + weights

    def user_input(self, node) -> Var:
        val = node.meta.get("val")
        loc = Location(self.file, node=f"input '{node.name}'")
        if not hasattr(val, "shape"):
            raise KsbuildError(f"input '{node.name}' is a {type(val).__name__}; only tensor inputs are supported", loc)
        p = Var(self.dims.type_of(val, loc), c_name(node.name, "x"))
        self.env[node] = p
        return p

    def weight(self, node, target: str, kind: str) -> Var | None:
        """A parameter, buffer or lifted constant: a new parameter (external weights) or a constant."""
        tensor = self.program.state_dict.get(target)
        if tensor is None:
            tensor = self.program.constants.get(target)
        loc = Location(self.file, node=f"{kind.lower()} '{target}'")
        if tensor is None or not hasattr(tensor, "detach"):
            raise KsbuildError(f"the value of {kind.lower()} '{target}' is not in the exported program", loc)
        dtype = ir_dtype(tensor.dtype, loc)
        if self.weights == "external" and kind != "CONSTANT_TENSOR" and dtype in ("f32", "f64"):
            p = Var(Type(dtype, tuple(int(d) for d in tensor.shape)), c_name(target))
            self.env[node] = p
            return p
        self.b.loc = loc
        value = tensor.detach().cpu().contiguous().numpy()
        self.env[node] = array(self.b, value)
        self.arrays[self.env[node]] = value
        if kind == "CONSTANT_TENSOR":
            self.known[node] = value
        else:
            self.weight_values[node] = value
        if kind == "BUFFER":
            self.buffers[node] = value
        return None

    def check_dim_names(self, inputs: list[Var]) -> None:
        taken = {p.hint for p in inputs}
        for name in self.captured.dim_names.values():
            if name in taken:
                raise KsbuildError(f"the dim '{name}' has the name of an input; give the Dim another name",
                                   Location(self.file))

    def outputs(self, out) -> list[Atom]:
        results = []
        for i, r in enumerate(_flat(out.args[0])):
            v = self.env.get(r) if hasattr(r, "op") else r
            if not isinstance(v, (Var, Lit)):
                raise KsbuildError(f"output {i} of the model is a {type(v).__name__}; only tensor outputs are "
                                   "supported", Location(self.file))
            results.append(v)
        for spec in self.program.graph_signature.output_specs:
            if spec.kind.name != "USER_OUTPUT":
                raise KsbuildError(f"the model's forward updates {spec.kind.name.lower()} '{spec.target}'; only "
                                   "pure forwards (eval mode) are supported", Location(self.file))
        return results

    # ---- nodes -------------------------------------------------------------------------------------

    def target_name(self, node) -> str:
        t = node.target
        return str(t) if hasattr(t, "_schema") else getattr(t, "__name__", str(t))

    def node_loc(self, node) -> Location:
        """The line that made the node (from its stack trace: a library's line, called from the user's),
        naming the node and its op."""
        label = f"{node.name} ({self.target_name(node)})"
        trace = node.meta.get("stack_trace") or ""
        if trace not in self.origins:  # (a loop's steps share their traces: each is read once)
            import traceback
            self.origins[trace] = origin_frame(traceback.StackSummary.from_list(parse_trace(trace)), self.captured.file)
        loc = self.origins[trace]
        return replace(loc, node=label) if loc else Location(self.file, node=label)

    def visit(self, node) -> None:
        loc = self.node_loc(node)
        self.b.loc = loc
        if node.target in SYM_OPS:
            self.env[node] = self.sym_op(node, loc)
            return
        if is_hop(node.target):
            self.env[node] = self.checked(node, visit_hop(self, node, loc), loc)
            return
        value = evaluate(node, self.foldable)
        if value is None:
            value = lookup(node, self.known, self.weight_values)
        if value is not None:
            self.known[node] = value
            self.env[node] = self.checked(node, array(self.b, value), loc)
            return
        fn = HANDLERS.get(self.target_name(node)) or HANDLERS.get(node.target)
        if fn is None:
            fn = _custom_handler(node)
        if fn is None:
            raise KsbuildError(f"the ATen op {self.target_name(node)} is not supported", loc,
                               hint="see docs/torch-export.md for the supported ops")
        n = Node(self, node, loc)
        try:
            result = fn(n)
        except KsbuildError as e:
            raise e.at(loc) from None
        self.env[node] = self.no_grad(node, self.checked(node, result, loc))

    def no_grad(self, node, result):
        """A node of a torch.no_grad() region (capture.no_grad_regions): its float results as stop_gradients."""
        if not self.captured.no_grad or (node.meta.get("torch_fn") or ("", ""))[1] != NO_GRAD_FN:
            return result
        stop = lambda v: self.b.stop_gradient(v) if isinstance(v, Var) and v.type.is_float else v  # noqa: E731
        return type(result)(stop(v) for v in result) if isinstance(result, (tuple, list)) else stop(result)

    def sym_op(self, node, loc: Location):
        """Size arithmetic on SymInts (x.size(0) * 4): the dim expression."""
        a, b = (self.value(v) for v in node.args)
        if not all(isinstance(v, (int, str)) for v in (a, b)):
            raise KsbuildError(f"{self.target_name(node)} of {a!r} and {b!r} is not size arithmetic", loc)
        return SYM_OPS[node.target](a, b)

    def value(self, v):
        """An FX argument as an atom, a dim, a number or a list of them."""
        if hasattr(v, "op") and hasattr(v, "meta"):
            if v not in self.env:
                raise KsbuildError(f"'{v.name}' is used before it is defined", self.b.loc)
            return self.env[v]
        if isinstance(v, (list, tuple)):
            return type(v)(self.value(e) for e in v)
        import torch
        if isinstance(v, torch.SymInt):
            return self.dims.of(v, self.b.loc)
        return v

    def checked(self, node, result, loc: Location):
        """The handler's result, checked against the dtype and shape torch gives the node."""
        val = node.meta.get("val")
        pairs = zip(result, val) if isinstance(result, (tuple, list)) and isinstance(val, (tuple, list)) else \
            [(result, val)]
        for r, v in pairs:
            if isinstance(r, (Var, Lit)) and hasattr(v, "shape"):
                want = self.dims.type_of(v, loc)
                if r.type != want:
                    raise KsbuildError(f"internal error: {self.target_name(node)} gave {r.type} where torch has "
                                       f"{want}", loc, hint="please report this with the model")
        return result


def _custom_handler(node):
    from .custom import is_ksbuild_op, ksbuild_op
    return ksbuild_op if is_ksbuild_op(node.target) else None


def _output(graph):
    return next(n for n in graph.nodes if n.op == "output")


def _live(graph) -> set:
    """The nodes the output depends on."""
    live, todo = set(), [_output(graph)]
    while todo:
        n = todo.pop()
        if n in live:
            continue
        live.add(n)
        todo.extend(n.all_input_nodes)
    return live


def _flat(v) -> list:
    if isinstance(v, (list, tuple)):
        return [x for e in v for x in _flat(e)]
    return [v]
