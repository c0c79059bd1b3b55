"""Run the user's `make()` and capture its module with torch.export.

`make()` returns `(module, example_args)` or `(module, example_args, dynamic_shapes)`:
`example_args` is a tuple of tensors (one tensor is taken as a 1-tuple) and `dynamic_shapes`
is what `torch.export.export` takes, with `torch.export.Dim("batch")` objects whose names
become the kernel's symbolic dims (the C ABI takes them first). Any dim it does not name
is fixed at its example size.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.util
import inspect
import linecache
import re
import sys
import traceback
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ...errors import KsbuildError, Location

KEEP_WHOLE = ("gru.input", "lstm.input", "rnn_tanh.input", "rnn_relu.input", "upsample_nearest1d.vec",
              "upsample_nearest2d.vec", "upsample_nearest3d.vec", "_upsample_nearest_exact1d.vec",
              "_upsample_nearest_exact2d.vec", "_upsample_nearest_exact3d.vec", "upsample_linear1d.vec",
              "upsample_bilinear2d.vec", "upsample_trilinear3d.vec", "upsample_bicubic2d.vec",
              "_safe_softmax.default", "index_add.default", "scaled_dot_product_attention.default",
              "hardswish.default", "hardsigmoid.default")
"""ATen ops left undecomposed: recurrent layers become one IR loop each, not one copy per time step;
resizing becomes one constant linear map per axis (ops/resize.py), not index arithmetic; attention's
_safe_softmax keeps rows that attend to nothing free of NaN in the backward pass too (ops/reduce.py);
index_add is a scatter-add along its axis (its decomposition is a general index_put);
scaled_dot_product_attention is ops/nn.py's attention (torch's decomposition of it, with a symbolic batch,
returns strides under which transformers' GPT-2 then fails to .view its output: pytorch/pytorch#136543);
hardswish and hardsigmoid are ops/activations.py's, as ONNX's HardSwish and HardSigmoid are (torch decomposes
them into clamps, additions and a division: other IR for the same network from the two frontends)."""


@dataclass
class Model:
    """What make() returned, checked."""

    module: Any
    args: tuple
    dynamic_shapes: Any
    file: Path  # the file make() is defined in: errors without a better place point here
    make: str


@dataclass
class Captured:
    """A module captured by torch.export: the decomposed program and the names of its symbolic dims."""

    program: Any  # torch.export.ExportedProgram
    dim_names: dict  # sympy Symbol -> the dim's name
    model: Model
    no_grad: bool = False  # whether the program has no-grad regions (no_grad_regions)

    @property
    def file(self) -> Path:
        return self.model.file


def capture(source: str, root: Path, make: str, loc: Location | None) -> Captured:
    """Call make(), export its module in eval mode and decompose it to core ATen."""
    model = load_model(source, root, make, loc)
    program, no_grad = _export(model)
    return Captured(program, dim_names(program, model), model, no_grad)


def load_model(source: str, root: Path, make: str, loc: Location | None) -> Model:
    """Import the model's file or module and call its make()."""
    module = _import(source, root, loc)
    fn = getattr(module, make, None)
    file = Path(getattr(module, "__file__", None) or source)
    if not callable(fn):
        raise KsbuildError(f"'{source}' has no function '{make}'", loc,
                           hint="define make() returning (module, example_args[, dynamic_shapes])")
    with _user_code(file, f"{make}()", _with_parent(file)):
        result = fn()
    return _check_result(result, file, make, _return_line(fn, file))


def _return_line(fn, file: Path) -> Location:
    """Where make() returns (its last return statement; its def line, or the file, when unknown)."""
    try:
        lines, start = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return Location(str(file))
    returns = [i for i, text in enumerate(lines) if text.strip().startswith("return")]
    i = returns[-1] if returns else 0
    text = lines[i].rstrip("\n")
    col = len(text) - len(text.lstrip())
    return Location(str(file), start + i, col, len(text), text)


def _import(source: str, root: Path, loc: Location | None):
    if not source.endswith(".py"):
        with _user_code(Path(source), f"import {source}", None, loc):
            return importlib.import_module(source)
    path = (root / source).resolve()
    name = "ksbuild_torch_model_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise KsbuildError(f"cannot load '{path}' as a Python module", loc)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look modules up by name
    with _user_code(path, f"import {path.name}", _with_parent(path), loc):
        spec.loader.exec_module(module)
    return module


class _with_parent:
    """sys.path with the model's folder first while its code runs (so it imports its neighbours)."""

    def __init__(self, file: Path):
        self.folder = str(file.parent)

    def __enter__(self):
        sys.path.insert(0, self.folder)

    def __exit__(self, *exc):
        if sys.path and sys.path[0] == self.folder:
            sys.path.pop(0)


class _user_code:
    """Run the user's code: an exception it raises becomes a KsbuildError at its innermost line in `file`."""

    def __init__(self, file: Path, what: str, path_ctx=None, loc: Location | None = None):
        self.file, self.what, self.path_ctx, self.loc = file, what, path_ctx, loc

    def __enter__(self):
        if self.path_ctx is not None:
            self.path_ctx.__enter__()

    def __exit__(self, kind, exc, tb):
        if self.path_ctx is not None:
            self.path_ctx.__exit__(kind, exc, tb)
        if exc is None or isinstance(exc, KsbuildError) or not isinstance(exc, Exception):
            return False
        where = user_frame(traceback.extract_tb(tb), self.file) or self.loc or Location(str(self.file))
        raise KsbuildError(f"{self.what} raised {type(exc).__name__}: {_first_lines(str(exc), 6)}", where) from None


def user_frame(frames, file: Path) -> Location | None:
    """The innermost frame in `file`, else the innermost one in the user's code, as a Location."""
    own = [fr for fr in frames if Path(fr.filename) == file]
    users = own or [fr for fr in frames if not library_file(Path(fr.filename))]
    if not users:
        return None
    return _frame_loc(users[-1])


def origin_frame(frames, file: Path, limit: int = 4) -> Location | None:
    """Where a node was made: the innermost frame outside torch (a library's line, e.g. transformers'
    modeling_gpt2.py, or the user's), called from the frames outside torch up to the user's (user_frame;
    at most `limit` callers: the innermost ones and the user's)."""
    outside = [fr for fr in frames if not torch_file(Path(fr.filename))]
    if not outside:
        return None
    user = user_frame(frames, file)
    chain = [_frame_loc(fr) for fr in reversed(outside)]
    stop = next((i for i, loc in enumerate(chain) if user and (loc.file, loc.line) == (user.file, user.line)),
                len(chain) - 1)
    callers = chain[1:stop + 1]
    if len(callers) > limit:
        callers = callers[:limit - 1] + callers[-1:]
    return replace(chain[0], called_from=tuple(callers))


def _frame_loc(fr) -> Location:
    text = linecache.getline(fr.filename, fr.lineno or 0).rstrip("\n") or None
    col = len(text) - len(text.lstrip()) if text else 0
    return Location(fr.filename, fr.lineno or 0, col, source_line=text)


@functools.lru_cache(maxsize=4096)  # asked for every frame of every node's trace
def torch_file(path: Path) -> bool:
    """True for torch's, ksbuild's and Python's own files: frames that never made a node the user wrote."""
    import torch

    if path.suffix != ".py":
        return True
    roots = (_roots()[0], Path(torch.__file__).resolve().parent, _roots()[1])
    resolved = path.resolve()
    return any(resolved.is_relative_to(r) for r in roots)


@functools.lru_cache(maxsize=4096)
def library_file(path: Path) -> bool:
    """True for Python's, torch's, ksbuild's and installed packages' files (not the user's code)."""
    if path.suffix != ".py":
        return True
    resolved = path.resolve()
    return any(resolved.is_relative_to(r) for r in _roots()) or "site-packages" in resolved.parts


@functools.lru_cache(maxsize=1)
def _roots() -> tuple[Path, ...]:
    """ksbuild's folder, then Python's stdlib, purelib and platlib folders."""
    import sysconfig

    paths = sysconfig.get_paths()
    return (Path(__file__).resolve().parents[2],) + tuple(Path(paths[k]).resolve()
                                                          for k in ("stdlib", "purelib", "platlib"))


def _first_lines(text: str, n: int) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return "\n".join(lines[:n]) + ("\n..." if len(lines) > n else "")


def _check_result(result, file: Path, make: str, where: Location) -> Model:
    import torch

    shape = "(module, example_args) or (module, example_args, dynamic_shapes)"
    if not isinstance(result, tuple) or len(result) not in (2, 3):
        raise KsbuildError(f"{make}() must return {shape}, got {type(result).__name__}", where)
    module, args = result[0], result[1]
    if not isinstance(module, torch.nn.Module):
        raise KsbuildError(f"{make}() must return an nn.Module first, got {type(module).__name__}", where)
    args = (args,) if isinstance(args, torch.Tensor) else args
    if not isinstance(args, (tuple, list)) or not all(isinstance(a, torch.Tensor) for a in args):
        raise KsbuildError(f"{make}() must return the example inputs as a tuple of tensors", where,
                           hint="keyword and non-tensor inputs are not supported; fix them inside the module")
    return Model(module, tuple(args), result[2] if len(result) == 3 else None, file, make)


def _export(model: Model):
    """torch.export.export of the module in eval mode, decomposed to core ATen (recurrent layers kept whole)."""
    import torch

    module = model.module.eval()
    with warnings.catch_warnings(), _quiet_torch_logs():
        warnings.simplefilter("ignore")  # torch's own deprecation notes are not the user's business here
        exporting = _user_code(model.file, "torch.export.export", _with_parent(model.file))
        with exporting, _flat_outputs(module, model.file), _whole_stack_traces():
            program = torch.export.export(module, model.args, dynamic_shapes=model.dynamic_shapes)
        no_grad = no_grad_regions(program.graph_module, model.file)
        with _with_parent(model.file):
            return _decompose(program, model.file), no_grad


NO_GRAD_FN = "WrapWithSetGradEnabled.wrap_with_set_grad_enabled"
"""The "torch_fn" (its second entry) of the nodes run_decompositions inlines from a no-grad region's body."""


def no_grad_regions(module, file: Path) -> bool:
    """Whether the program (before its decomposition) has `torch.no_grad()` or `set_grad_enabled(False)` regions:
    torch.export writes each as a wrap_with_set_grad_enabled(False, body) call (an enable_grad inside one splits
    it: the inner code at the top level, between two such calls), and run_decompositions inlines the body, its
    nodes citing NO_GRAD_FN in their "torch_fn": the importer stops the gradient there, as torch's autograd does.
    A region that turns gradients on (an export run under no_grad) is refused: inlined, the two kinds could not be
    told apart. (torch.inference_mode leaves no trace in the program: its values are differentiated as any other.)"""
    import torch
    found = False
    for node in module.graph.nodes:
        if node.op == "call_function" and node.target is torch.ops.higher_order.wrap_with_set_grad_enabled:
            if node.args[0]:
                raise KsbuildError("a torch.enable_grad() (or set_grad_enabled(True)) region in the exported program "
                                   "is not supported", node_origin(node, file) or Location(str(file)),
                                   hint="export the model with gradients enabled, no_grad regions inside it")
            found = True
            no_grad_regions(getattr(module, node.args[1].target), file)
    return found


def node_origin(node, file: Path) -> Location | None:
    """The line that made an FX node (origin_frame of its recorded stack trace), or None."""
    return origin_frame(traceback.StackSummary.from_list(parse_trace(node.meta.get("stack_trace") or "")), file)


def _decompose(program, file: Path):
    """program.run_decompositions(); an exception torch raises there is reported at the node it was lowering."""
    try:
        return program.run_decompositions(_decomposition_table())
    except KsbuildError:
        raise
    except Exception as exc:  # noqa: BLE001  (any failure inside torch's lowering is the model's)
        raise _decomposition_error(exc, file) from None


def _decomposition_error(exc: Exception, file: Path) -> KsbuildError:
    """The error of a failed run_decompositions(): its stage, and the node being lowered (its op, and the line
    that made it) when torch's interpreter frames name one."""
    text = str(exc).split("\n\nWhile executing")[0]  # torch appends the node and its trace; named below
    message = (f"run_decompositions() (torch.export's lowering to core ATen, after torch.export.export "
               f"succeeded) raised {type(exc).__name__}: {_first_lines(text, 6)}")
    node = _node_being_run(exc.__traceback__)
    if node is None:
        return KsbuildError(message, user_frame(traceback.extract_tb(exc.__traceback__), file) or Location(str(file)))
    label = f"{node.name} ({node.target})"
    loc = node_origin(node, file)
    return KsbuildError(message, replace(loc, node=label) if loc else Location(str(file), node=label))


def _node_being_run(tb):
    """The innermost FX node an fx.Interpreter was running (run_node's `n`) in a traceback, or None."""
    import torch

    node = None
    while tb is not None:
        n = tb.tb_frame.f_locals.get("n") if tb.tb_frame.f_code.co_name == "run_node" else None
        if isinstance(n, torch.fx.Node):
            node = n
        tb = tb.tb_next
    return node


_FRAME = re.compile(r'\s*File "([^"]+)", line (\d+), in (\S+)')


def parse_trace(text: str) -> list[tuple[str, int, str, str]]:
    """(file, line, function, code) for each frame of an FX node's recorded stack trace."""
    frames = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = _FRAME.match(line)
        if m:
            code = lines[i + 1].strip() if i + 1 < len(lines) and not _FRAME.match(lines[i + 1]) else ""
            frames.append((m[1], int(m[2]), m[3], code))
    return frames


def _unflattened_output(leaf, file: Path) -> KsbuildError:
    """The error for an output torch's pytree cannot split into tensors (a transformers cache, say)."""
    name = type(leaf).__name__
    return KsbuildError(f"the model's output contains a value of type {name}, which torch.export cannot "
                        "flatten into tensors",
                        Location(str(file)),
                        hint=f"register {name} as a pytree node (torch.utils._pytree.register_pytree_node; for "
                             "transformers' DynamicCache: transformers.integrations.executorch."
                             "register_dynamic_cache_export_support() in make()), or leave it out of the "
                             "outputs (use_cache=False)")


def _decomposition_table() -> dict:
    """torch.export's core ATen decompositions without those of KEEP_WHOLE."""
    import torch

    table = torch.export.default_decompositions()
    for name in KEEP_WHOLE:
        op, overload = name.split(".")
        packet = getattr(torch.ops.aten, op, None)
        if packet is not None and hasattr(packet, overload):
            table.pop(getattr(packet, overload), None)
    return table


@contextlib.contextmanager
def _flat_outputs(module, file: Path):
    """module.forward returning the leaves of its output pytree (a tuple of tensors) while it is exported.

    The importer flattens the outputs anyway; flattening inside the trace keeps container types out of the
    program. run_decompositions() traces the program again and rebuilds its outputs: a transformers
    DynamicCache, rebuilt, runs its update() (a new torch.tensor([]) and cat) and torch loses those constants
    ("Constant tensor lifted_tensor_0 is not in the constants dictionary")."""
    import functools

    import torch

    own = module.__dict__.get("forward")  # a forward set on the instance comes back afterwards
    forward = module.forward

    @functools.wraps(forward)  # the signature stays forward's (dynamic_shapes may name its parameters)
    def flat(*args, **kwargs):
        leaves = torch.utils._pytree.tree_leaves(forward(*args, **kwargs))
        for leaf in leaves:
            if not isinstance(leaf, (torch.Tensor, int, float, bool)):
                raise _unflattened_output(leaf, file)
        return tuple(leaves)

    module.forward = flat
    try:
        yield
    finally:
        del module.forward
        if own is not None:
            module.forward = own


@contextlib.contextmanager
def _whole_stack_traces():
    """Nodes record every frame from the first forward inward, not only the frames of functions named
    `forward`: an error then names the helper function's line that made the node (a library's, or one of
    the user's in another file), not only the forward that called it. torch.export records forwards only
    (fx.proxy.TracerBase._record_forward_stack_traces_only); without that private switch, nothing changes."""
    from torch.fx.proxy import TracerBase

    keep = TracerBase.__dict__.get("_filter_traceback_frames")
    if keep is None or not hasattr(TracerBase, "_record_forward_stack_traces_only"):
        yield
        return

    def every_frame(self, summary):
        forward_only = self._record_forward_stack_traces_only
        self._record_forward_stack_traces_only = False
        try:
            return keep(self, summary)
        finally:
            self._record_forward_stack_traces_only = forward_only

    TracerBase._filter_traceback_frames = every_frame
    try:
        yield
    finally:
        TracerBase._filter_traceback_frames = keep


@contextlib.contextmanager
def _quiet_torch_logs():
    """torch's loggers muted below CRITICAL while it exports: a shape error in the user's forward otherwise
    prints torch's own 20-line traceback (fake_tensor's "failed while attempting to run meta") before the
    located error ksbuild reports from the exception itself."""
    import logging
    loggers = [logging.getLogger(name) for name in ("torch", "torch._subclasses.fake_tensor", "torch.export",
                                                    "torch._dynamo", "torch.fx.experimental.symbolic_shapes")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def dim_names(program, model: Model) -> dict:
    """sympy Symbol -> name for the symbolic dims of the user inputs: the Dim's name from
    dynamic_shapes, else '<input>_dim<k>'."""
    named = _spec_dims(model)
    names: dict = {}
    inputs = [s for s in program.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    nodes = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    for i, spec in enumerate(inputs):
        val = nodes[spec.arg.name].meta.get("val")
        for axis, size in enumerate(getattr(val, "shape", ())):
            _name_dim(names, size, named.get((i, axis)), f"{spec.arg.name}_dim{axis}")
    return names


def _name_dim(names: dict, size, dim, fallback: str) -> None:
    import torch

    if not isinstance(size, torch.SymInt):
        return
    expr = size.node.expr
    if expr.is_Symbol:
        names.setdefault(expr, getattr(dim, "__name__", None) if _named(dim) else fallback)
    elif len(expr.free_symbols) == 1 and _named(getattr(dim, "root", None)):
        names.setdefault(next(iter(expr.free_symbols)), dim.root.__name__)


def _named(dim) -> bool:
    name = getattr(dim, "__name__", None)
    return isinstance(name, str) and name.isidentifier()


def _spec_dims(model: Model) -> dict[tuple[int, int], Any]:
    """(input position, axis) -> the Dim object dynamic_shapes gives there."""
    spec = model.dynamic_shapes
    if spec is None:
        return {}
    if isinstance(spec, dict):
        params = list(inspect.signature(model.module.forward).parameters)
        spec = [spec.get(p) for p in params[:len(model.args)]]
    out = {}
    for i, per_arg in enumerate(spec if isinstance(spec, (tuple, list)) else []):
        items = per_arg.items() if isinstance(per_arg, dict) else enumerate(per_arg or ())
        for axis, dim in items:
            out[(i, axis)] = dim
    return out


def model_fingerprint(model: Model) -> bytes:
    """A digest of the module's structure, the source files of its classes, its state and the example inputs."""
    import torch

    h = hashlib.sha256()
    h.update(repr(model.module).encode())
    files = {inspect.getsourcefile(type(m)) or "" for m in model.module.modules()}
    files |= {inspect.getsourcefile(k.fn) or "" for m in model.module.modules() if (k := getattr(m, "kernel", None))
              and hasattr(k, "fn")}
    sources = [Path(f) for f in files if f and Path(f).is_file() and not library_file(Path(f))]
    for digest in sorted(hashlib.sha256(f.read_bytes()).digest() for f in sources):  # content, not where it is
        h.update(digest)
    for key, t in list(model.module.state_dict().items()):
        h.update(key.encode() + str(t.dtype).encode() + repr(tuple(t.shape)).encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes() if t.dtype != torch.bfloat16 else b"")
    for a in model.args:
        h.update(str(a.dtype).encode() + repr(tuple(a.shape)).encode())
    h.update(repr(model.dynamic_shapes).encode())
    return h.digest()
