"""Every export of a built package as a torch.library custom op, with autograd through its vjp.

Standalone like runtime.py (imports torch, numpy and the standard library only; nothing from
ksbuild), so it ships in a wheel next to it. For an export E with expression X, the package's
other exports give the derivatives, found by their expressions:
- `fwd(X)` and `bwd(X)`: when both are there, a call that needs a gradient runs fwd(X), which
  returns E's results plus residuals, and the backward pass runs bwd(X) on the saved inputs and
  those residuals (the forward pass is not run again);
- `vjp(X)`: otherwise the backward pass runs vjp(X) on the saved inputs (recomputing the
  forward inside). It is also used under create_graph=True, so that double backward works
  through vjp(X)'s own autograd (which needs `vjp(vjp(X))`).
Every op has a fake (meta) implementation from the export's signature, so torch.compile
(fullgraph=True) and torch.export trace through it. Inputs are tensors (Python numbers become
0-d tensors of the argument's dtype); an export whose dims do not all show in its inputs' shapes
takes them as a trailing `SymInt[] dims`.
"""
from __future__ import annotations

import hashlib
import keyword

import torch

TORCH_DTYPES = {"f32": torch.float32, "f64": torch.float64, "i32": torch.int32, "i64": torch.int64,
                "bool": torch.bool, "f16": torch.float16, "bf16": torch.bfloat16, "i8": torch.int8,
                "i16": torch.int16, "u8": torch.uint8}
# the types whose torch dtype holds the C ABI's bits as they are (older torch lacks some of them)
TORCH_DTYPES.update({k: getattr(torch, name) for k, name in (
    ("u16", "uint16"), ("u32", "uint32"), ("u64", "uint64"), ("f8e4m3fn", "float8_e4m3fn"), ("f8e5m2", "float8_e5m2"),
    ("f8e4m3fnuz", "float8_e4m3fnuz"), ("f8e5m2fnuz", "float8_e5m2fnuz")) if hasattr(torch, name)})
_PACKAGES: dict[str, "PackageOps"] = {}  # namespace -> its ops: a package's ops are defined once per process


def package_ops(package) -> "PackageOps":
    """The custom ops of a loaded package (a runtime.Package), defined on first use."""
    namespace = _namespace(package)
    if namespace not in _PACKAGES:
        _PACKAGES[namespace] = PackageOps(package, namespace)
    return _PACKAGES[namespace]


class PackageOps:
    """The custom ops of one loaded package and the derivative exports each one's autograd uses."""

    def __init__(self, package, namespace: str):
        self.package, self.namespace = package, namespace
        by_expr = {_norm(d["expression"]): n for n, d in package.desc["exports"].items()}
        # none for an export without results, with strings (torch tensors cannot hold them), or with more arguments
        # than a custom op takes (such an export runs eagerly only: `invoke` says so)
        self.ops = {n: _define(self.namespace, e) for n, e in package.exports.items()
                    if e.outs and not e._strings and _op_arguments(e) <= MAX_OP_ARGUMENTS}
        self.vjp_of = {n: by_expr.get(f"vjp({_norm(e.desc['expression'])})") for n, e in package.exports.items()}
        self.split_of = {n: _split(by_expr, e) for n, e in package.exports.items()}
        self.backward = {n: _Backward(self, n, self.split_of[n]) for n in package.exports}
        self._register_autograd()

    def call(self, export, args, dims: dict | None = None):
        """Call export on torch tensors (and Python numbers): results as tensors, one or a tuple."""
        export = self.package.exports[export.name]  # the objects the ops were defined with (one per process)
        if not dims and _plain_call(export, args):
            return _unpack(run(export, args, {}))
        tensors = [_tensor(x, a, export) for x, a in zip(args, export.ins)]
        _no_forward_mode(export.name, tensors)
        need_grad = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
        eager = _plain_eager(tensors)
        if not need_grad and eager:
            return _unpack(run(export, tensors, dims or {}))
        if eager:  # the same computation as the ops below, without the custom-op dispatch overhead
            return _unpack(list(_EagerGrad.apply(self.backward[export.name], dims or {}, *tensors)))
        split = self.split_of[export.name]
        if need_grad and split is not None and not torch.compiler.is_exporting():
            outs = self.invoke(split[0], tensors, dims or {})
            return _unpack(_as_list(outs)[:len(export.outs)])
        return _unpack(_as_list(self.invoke(export.name, tensors, dims or {})))

    def invoke(self, name: str, tensors, dims: dict):
        """Call the op of export `name`, adding its free dims (taken from `dims`) when it has any."""
        export = self.package.exports[name]
        if name not in self.ops and _op_arguments(export) > MAX_OP_ARGUMENTS:
            raise RuntimeError(f"ksbuild: export '{name}' takes {_op_arguments(export)} arguments and a torch custom "
                               f"op at most {MAX_OP_ARGUMENTS}, so it runs on plain CPU tensors only: not under "
                               "torch.compile or torch.export, and not in a backward pass that is itself "
                               "differentiated (create_graph=True)")
        extra = [[dims[d] for d in export.free_dims]] if export.free_dims else []
        return self.ops[name](*tensors, *extra)

    def _register_autograd(self) -> None:
        """Autograd for every op: an export's own op through vjp(X); the op of fwd(X) through bwd(X)."""
        owner_of_fwd = {split[0]: n for n, split in self.split_of.items() if split is not None}
        for name, export in self.package.exports.items():
            if name not in self.ops:
                continue
            owner = owner_of_fwd.get(name)
            if owner is None:
                backward, setup = _Backward(self, name, None), _setup(export, 0)
            else:
                owner_export = self.package.exports[owner]
                backward = _Backward(self, owner, self.split_of[owner])
                setup = _setup(owner_export, len(owner_export.outs))
            torch.library.register_autograd(self.ops[name], backward, setup_context=setup)


class _Backward:
    """The backward formula of export `name`: bwd(X) on residuals, or vjp(X) on the saved inputs."""

    def __init__(self, ops: PackageOps, name: str, split):
        self.ops, self.name, self.split = ops, name, split
        self.export = ops.package.exports[name]

    def __call__(self, ctx, *grads):
        """The op's backward: one gradient per op input (None for a trailing dims list)."""
        grads_in = self.grads(ctx, grads)
        return (*grads_in, None) if self.export.free_dims else tuple(grads_in)

    def grads(self, ctx, grads) -> list:
        """The cotangent of every input (None for non-float ones) from those of the float results."""
        e = self.export
        cts = [g if g is not None else torch.zeros(shape, dtype=dtype, device=device)
               for g, (shape, dtype, device), a in zip(grads, ctx.out_meta, e.outs) if a["dtype"] in ("f32", "f64")]
        inputs = ctx.saved_tensors
        vjp = self.ops.vjp_of[self.name]
        if self.split is not None and not (torch.is_grad_enabled() and vjp is not None):
            res = self._apply(self.split[1], [*inputs, *ctx.residuals, *cts], ctx.dims)
        elif vjp is not None:
            res = self._apply(vjp, [*inputs, *cts], ctx.dims)
        else:
            expr = e.desc["expression"]
            raise RuntimeError(f"ksbuild: export '{self.name}' ({expr}) has no vjp in its package; add an export "
                               f"such as {self.name}_vjp = \"vjp({expr})\" to the manifest")
        it = iter(_as_list(res))
        return [next(it) if a["dtype"] in ("f32", "f64") else None for a in e.ins]

    def _apply(self, name: str, tensors, dims: dict):
        """Export `name` on tensors: a direct call when nothing needs to see it, else its (differentiable) op."""
        if not torch.is_grad_enabled() and _plain_eager(tensors):
            return _unpack(run(self.ops.package.exports[name], tensors, dims))
        return self.ops.invoke(name, tensors, dims)

    def forward(self, tensors, dims: dict) -> tuple[list, list]:
        """(results, residuals): fwd(X) when there is a split, else X itself and no residuals."""
        if self.split is None:
            return run(self.export, tensors, dims), []
        outs = run(self.ops.package.exports[self.split[0]], tensors, dims)
        return outs[:len(self.export.outs)], outs[len(self.export.outs):]


class _EagerGrad(torch.autograd.Function):
    """Eager autograd for an export on plain CPU tensors: what its custom op's autograd does, with less overhead."""

    @staticmethod
    def forward(ctx, backward: _Backward, dims: dict, *tensors):
        e = backward.export
        results, ctx.residuals = backward.forward(tensors, dims)
        ctx.backward = backward
        ctx.dims = e.bind_dims([t.shape for t in tensors], dims)
        ctx.out_meta = [(o.shape, o.dtype, o.device) for o in results]
        ctx.mark_non_differentiable(*[o for o, a in zip(results, e.outs) if a["dtype"] not in ("f32", "f64")])
        ctx.save_for_backward(*tensors)
        return tuple(results)

    @staticmethod
    def backward(ctx, *grads):
        return (None, None, *ctx.backward.grads(ctx, grads))


def _setup(export, n_outs: int):
    """setup_context for export's op (n_outs = 0) or for its fwd op (n_outs results, then residuals)."""
    n_in = len(export.ins)

    def setup_context(ctx, inputs, output):
        outs = _as_list(output)
        tensors, given = inputs[:n_in], inputs[n_in] if len(inputs) > n_in else []
        primal = outs[:n_outs] if n_outs else outs
        residuals = outs[n_outs:] if n_outs else []
        ctx.dims = export.bind_dims([t.shape for t in tensors], dict(zip(export.free_dims, given)))
        ctx.out_meta = [(o.shape, o.dtype, o.device) for o in primal]
        if residuals:
            ctx.mark_non_differentiable(*residuals)
        ctx.residuals = residuals
        ctx.save_for_backward(*tensors)
    return setup_context


MAX_OP_ARGUMENTS = 64
"""The most arguments torch.library takes in a custom op's schema (torch's own limit)."""


def _op_arguments(export) -> int:
    """The arguments of an export's op: its inputs, and the list of its free dims when it has any."""
    return len(export.ins) + (1 if export.free_dims else 0)


def _define(namespace: str, export):
    """The custom op of one export: schema from its signature, the ctypes call, and a fake implementation."""
    qualname = f"{namespace}::{export.name}"
    n_in = len(export.ins)

    def impl(*args):
        tensors, given = args[:n_in], args[n_in] if len(args) > n_in else []
        return _unpack(run(export, tensors, dict(zip(export.free_dims, given))))

    def fake(*args):
        tensors, given = args[:n_in], args[n_in] if len(args) > n_in else []
        dims = export.bind_dims([t.shape for t in tensors], dict(zip(export.free_dims, given)))
        outs = [torch.empty(s, dtype=TORCH_DTYPES[a["dtype"]], device=_device(tensors))
                for s, a in zip(export.out_shapes(dims), export.outs)]
        return _unpack(outs)

    op = torch.library.custom_op(qualname, mutates_args=(), schema=schema(export))(impl)
    op.register_fake(fake)
    return op


def run(export, tensors, dims: dict) -> list[torch.Tensor]:
    """The C call on CPU tensors of the right dtypes (no autograd here): new output tensors."""
    if export.desc["kind"] == "scalar":
        return [torch.from_numpy(o) for o in export.call_arrays([t.item() for t in tensors])]
    tensors = [t if t.is_contiguous() else t.detach().contiguous() for t in tensors]  # (data_ptr needs no detach)
    plan = export.plan([t.shape for t in tensors], dims)  # dims, output shapes, workspace size: once per shapes
    outs = [_empty(shape, TORCH_DTYPES[a["dtype"]]) for (shape, _), a in zip(plan.outs, export.outs)]
    ins = [t.data_ptr() if a["shape"] else _scalar_arg(t, a) for t, a in zip(tensors, export.ins)]
    export.call_pointers(plan, ins, [o.data_ptr() for o in outs])
    return outs


def _empty(shape: tuple, dtype: torch.dtype) -> torch.Tensor:
    """torch.empty(shape, dtype=dtype); the sizes as separate arguments, which torch parses in half the time."""
    return torch.empty(*shape, dtype=dtype) if shape else torch.empty((), dtype=dtype)


def schema(export) -> str:
    """The op schema: every input a Tensor, then `SymInt[] dims` if the export has free dims."""
    names = [_arg_name(a["name"], i) for i, a in enumerate(export.ins)]
    params = [f"Tensor {n}" for n in names] + (["SymInt[] dims"] if export.free_dims else [])
    outs = ["Tensor"] * len(export.outs)
    ret = outs[0] if len(outs) == 1 else f"({', '.join(outs)})"
    return f"({', '.join(params)}) -> {ret}"


def _arg_name(name: str, i: int) -> str:
    if not name.isidentifier() or keyword.iskeyword(name) or name in ("self", "out", "dims"):
        return f"{name}_{i}" if name.isidentifier() else f"arg{i}"
    return name


def _split(by_expr: dict, export):
    """(fwd export, bwd export) for an export when the package has both, else None."""
    expr = _norm(export.desc["expression"])
    fwd, bwd = by_expr.get(f"fwd({expr})"), by_expr.get(f"bwd({expr})")
    return (fwd, bwd) if fwd and bwd else None


def _norm(expr: str) -> str:
    return "".join(expr.split())


def _namespace(package) -> str:
    """A torch.library namespace unique to the package's content: ksbuild_<name>_<hash>."""
    key = package.key or hashlib.sha256(str(package.root.resolve()).encode()).hexdigest()
    return f"ksbuild_{package.desc['package']}_{key[:12]}"


def _tensor(x, a: dict, export) -> torch.Tensor:
    """A tensor argument of the export's dtype: a Python number becomes a 0-d tensor; other dtypes are an error."""
    want = TORCH_DTYPES.get(a["dtype"])
    if want is None:
        raise export.DtypeError(f"{export.name}: argument '{_shown(a)}' is {a['dtype']}, which torch has no dtype "
                                "for: pass a numpy array (of its bits, see docs/onnx.md)")
    if not isinstance(x, torch.Tensor):
        if isinstance(x, float) and a["dtype"] not in ("f32", "f64") or isinstance(x, int) and a["dtype"] == "bool":
            raise export.DtypeError(f"{export.name}: argument '{_shown(a)}' takes {a['dtype']}, got "
                                    f"{type(x).__name__} {x!r}")
        return torch.tensor(x, dtype=want)
    if x.dtype != want:
        raise export.DtypeError(f"{export.name}: argument '{_shown(a)}' is {x.dtype} but the export takes "
                                f"{a['dtype']} ({want}); ksbuild does not cast silently: convert it yourself or build "
                                "the package for that dtype")
    if x.dim() != len(a["shape"]):
        raise export.CallError(f"{export.name}: argument '{_shown(a)}' must have {len(a['shape'])} dimension(s), "
                               f"got shape {list(x.shape)}")
    return x


def _scalar_arg(t: torch.Tensor, a: dict):
    """A 0-d tensor as a scalar argument of the C call (16-bit floats as their bits)."""
    if a["dtype"] in ("f16", "bf16"):
        return t.view(torch.int16).item() & 0xFFFF
    return t.item()


def _no_forward_mode(name: str, tensors) -> None:
    """An error when forward-mode AD is on (torch.func.jvp, jacfwd, torch.autograd.forward_ad): the ops have no
    forward derivative in torch, whose dual tensors would otherwise lose their tangents silently."""
    if torch.autograd.forward_ad._current_level < 0:
        return
    from ..errors import KsbuildError
    if any(torch.autograd.forward_ad.unpack_dual(t).tangent is not None for t in tensors):
        raise KsbuildError(f"forward-mode AD (torch.func.jvp, jacfwd, forward_ad) through the ksbuild op '{name}' is "
                           "not supported: torch would drop the tangents",
                           hint="call the kernel's own jvp export (kernel.jvp(x, dx), or jvp(...) in the manifest); "
                                "reverse mode through .backward() and torch.autograd.grad works")


def _plain_eager(tensors) -> bool:
    """True when the ctypes call can run directly: eager, plain CPU tensors, no tracing or functorch wrappers."""
    if torch.compiler.is_compiling():
        return False
    return all(type(t) is torch.Tensor and t.is_cpu and not _wrapped(t) for t in tensors)


def _plain_call(export, args) -> bool:
    """True for the common call, which `run` does as it is: eager, no forward-mode AD, plain CPU tensors of the
    export's dtypes and ranks, none needing a gradient (the full path checks, converts and explains the rest)."""
    if torch.autograd.forward_ad._current_level >= 0 or torch.compiler.is_compiling():
        return False
    grad = torch.is_grad_enabled()
    for t, a in zip(args, export.ins):
        if type(t) is not torch.Tensor or t.dtype is not TORCH_DTYPES.get(a["dtype"]) \
                or t.dim() != len(a["shape"]) or not t.is_cpu or (grad and t.requires_grad) or _wrapped(t):
            return False
    return True


_wrapped = getattr(torch._C._functorch, "is_functorch_wrapped_tensor", lambda t: False)  # (older torch lacks it)


def _device(tensors):
    return tensors[0].device if tensors else torch.device("cpu")


def _as_list(x) -> list:
    return list(x) if isinstance(x, (tuple, list)) else [x]


def _unpack(outs: list):
    return outs[0] if len(outs) == 1 else tuple(outs)


def _shown(a: dict) -> str:
    """An argument's name in messages: the parameter's name in the user's source when the C name differs."""
    return a.get("param", a["name"])
