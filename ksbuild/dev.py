"""The Knossos-style dev loop: compile plain Python functions from inside a PyTorch program.

    vrelu3 = ksbuild.vmap(relu3)          # relu3(x: float) -> float with if/elif/else
    vrelu3(x)                             # compiled on first call per dtype, cached on disk
    vrelu3.vjp(x, ct); vrelu3.jvp(x, dx)  # derivatives, compiled with it
    ksbuild.jacfwd(f, argnums=(0, 1))(x, y)  # whole Jacobians (also jacrev, jacobian, hessian)
    nn.Sequential(..., vrelu3.nnModule(), ...)   # or vrelu3.nnModule, as Knossos writes it

A Kernel is a transformation expression over one module-level function. On first use with a
float dtype it writes a manifest (the function's source file, the expression X and its
derivative exports fwd(X), bwd(X), vjp(X), vjp(vjp(X)), jvp(X)) into the build cache, with
[build] dtype set to that dtype, and builds it with ksbuild.build (content-hash cached). Torch
tensors go through the package's custom ops (ksbuild/packaging/torch_ops.py), so autograd,
torch.compile and torch.export work. Derivative exports that cannot be built are left out; using
them raises the error that stopped them.
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from .call_signature import call_signature, needs_call_signature
from .errors import KsbuildError

DTYPES = ("float32", "float64")
_SHORT = {"float32": "f32", "float64": "f64"}  # in package names
ROLES = {  # export name -> expression over X; "fn" must build, the others are dropped if they cannot
    "fn": "{X}", "fn_fwd": "fwd({X})", "fn_bwd": "bwd({X})", "fn_vjp": "vjp({X})",
    "fn_vjp_vjp": "vjp(vjp({X}))", "fn_jvp": "jvp({X})",
}
_TORCH_FLOATS = {"torch.float32": "float32", "torch.float64": "float64"}


class Kernel:
    """A Python function under a transformation (vmap, ...), compiled on first call per dtype."""

    def __init__(self, fn: Callable, expression: str, batched: tuple | None = None):
        self.fn, self.expression = fn, expression
        self.batched = batched  # an outer vmap: which arguments it maps ((True,) * n for "all"); else None
        self.__name__ = getattr(fn, "__name__", "kernel")
        self.__doc__ = getattr(fn, "__doc__", None)
        self._packages: dict[str, Any] = {}
        self._dropped: dict[str, dict[str, KsbuildError]] = {}
        _mark_for_dynamo()
        _expect_in_torch(self)

    def __repr__(self) -> str:
        return f"<ksbuild kernel {self.expression}>"

    def __deepcopy__(self, memo) -> "Kernel":
        """The kernel itself: it holds no state a copy could change (copy.deepcopy of a model with nnModule())."""
        return self

    def __getstate__(self) -> dict:
        """Pickled without its loaded packages (ctypes handles): they are loaded again on the first call."""
        state = dict(self.__dict__)
        state["_packages"], state["_dropped"] = {}, {}
        return state

    def __call__(self, *args):
        """The compiled function (torch tensors in: tensors out, differentiable).

        Under an outer vmap, mapped arguments may have extra leading axes (a [batch, features]
        activation for vmap of a scalar function): they are flattened into the mapped axis."""
        export = self._export("fn", args)
        lead = _extra_lead(export, args, self.batched)
        if lead is None:
            return export(*args)
        flat = [_flatten(x, len(lead)) if b else x for x, b in zip(args, _mask(self.batched, args))]
        out = export(*flat)
        if isinstance(out, tuple):
            return tuple(o.reshape(*lead, *o.shape[1:]) for o in out)
        return out.reshape(*lead, *out.shape[1:])

    def vjp(self, *args):
        """vjp: the primal arguments, then one cotangent per float result -> one cotangent per float argument."""
        return self._export("fn_vjp", args)(*args)

    def jvp(self, *args):
        """jvp: the primal arguments, then one tangent per float argument -> the tangents of the float results."""
        return self._export("fn_jvp", args)(*args)

    def grad(self, *args):
        """The gradient of a function with one float scalar result: one derivative per float argument."""
        export = self._export("fn_vjp", args)
        n_ct = len(export.ins) - len(args)
        if n_ct != 1 or export.ins[-1]["shape"]:
            raise KsbuildError(f"grad of {self.expression} needs exactly one float scalar result",
                               hint="use .vjp(*args, cotangent) for tensor or several results")
        return export(*args, 1.0)

    @property
    def nnModule(self):  # noqa: N802 - the name of the Knossos API
        """A torch.nn.Module whose forward is this kernel (prepared for torch's default dtype). Knossos writes
        `vrelu3.nnModule` (the module), ksbuild `vrelu3.nnModule()`: both work, since calling the module with no
        arguments returns it."""
        import torch

        if not needs_call_signature(self.fn):  # (torch.Tensor annotations: typed by the first call's arguments)
            self.build(str(torch.get_default_dtype()).removeprefix("torch."))
        return _module_class()(self)

    def build(self, dtype: str = "float32", signature: str | None = None):
        """Compile (or load from the cache) the package for `dtype` now; returns it (a runtime Package).
        `signature`: the kernel's parameter types, for a kernel annotated with torch.Tensor (see call_signature)."""
        if dtype not in DTYPES:
            raise KsbuildError(f"ksbuild kernels are built for {' or '.join(DTYPES)}, not {dtype}")
        key = _key(dtype, signature)
        if key not in self._packages:
            pkg = self._packages[key] = self._build(dtype, signature)
            for role, export in pkg.exports.items():  # (messages name the kernel: relu3(), relu3.vjp())
                export.title = self.__name__ + role[2:].replace("_", ".") if role.startswith("fn") else role
        return self._packages[key]

    def package_name(self, dtype: str = "float32", signature: str | None = None) -> str:
        """The name of the package built for `dtype`: its torch ops are torch.ops.ksbuild_<name>.fn, .fn_vjp, ...
        (the kernel's name, the dtype and a hash of its source file's path, the expression and the signature)."""
        fn_path, name = _source(self.fn)
        h = hashlib.sha256(f"{fn_path}\0{self.expression}{_key('', signature)}".encode()).hexdigest()[:8]
        return f"{name}_{_SHORT[dtype]}_{h}"

    def manifest(self, dtype: str = "float32", signature: str | None = None) -> Path:
        """Where the manifest of this kernel for `dtype` is written (see ksbuild.build)."""
        fn_path, _ = _source(self.fn)
        key = hashlib.sha256(f"{fn_path}\0{self.expression}\0{_key(dtype, signature)}".encode()).hexdigest()[:16]
        return _cache_root() / "dev" / f"{self.__name__}-{dtype}-{key}" / "manifest.toml"

    def _export(self, role: str, args):
        dtype = _dtype_of(args)
        signature = call_signature(self.fn, args, dtype, _mask(self.batched, args) if self.batched is not None
                                   else (False,) * len(args))
        _build_outside_trace(self, dtype, signature)  # first, so that a torch.compile trace reads _packages after it
        pkg = self._packages[_key(dtype, signature)]
        if role not in pkg.exports:
            raise self._dropped[_key(dtype, signature)][role]
        return pkg.exports[role]

    def _build(self, dtype: str, signature: str | None):
        from .packaging.loader import build

        path, key = self.manifest(dtype, signature), _key(dtype, signature)
        roles = dict(ROLES)
        _write(path, self._manifest_text(dtype, roles, signature))
        self._dropped[key] = {}
        try:
            return build(path)
        except KsbuildError:
            self._dropped[key] = dropped = _failing_exports(path)
            if "fn" in dropped:
                raise dropped["fn"] from None
            _write(path, self._manifest_text(dtype, {r: e for r, e in roles.items() if r not in dropped}, signature))
            return build(path)

    def _manifest_text(self, dtype: str, roles: dict[str, str], signature: str | None) -> str:
        fn_path, name = _source(self.fn)
        source = json.dumps(f"{fn_path}:{name}")
        package = self.package_name(dtype, signature)
        typed = [f"signature = {json.dumps(signature)}"] if signature else []
        lines = ["# written by ksbuild's dev loop (ksbuild/dev.py)", "[package]", f'name = "{package}"', "",
                 "[build]", f'dtype = "{dtype}"', "", f"[kernels.{name}]", f"python = {source}", *typed, "",
                 "[exports]"]
        lines += [f"{role} = {json.dumps(expr.format(X=self.expression))}" for role, expr in roles.items()]
        return "\n".join(lines) + "\n"


def _key(dtype: str, signature: str | None) -> str:
    """What the packages of a kernel are keyed by: the dtype, and a torch.Tensor-annotated call's signature."""
    return dtype if signature is None else f"{dtype} {signature}"


def _build_outside_trace(k: Kernel, dtype: str, signature: str | None = None) -> bool:
    """k.build(dtype, signature); torch.compile runs it as plain Python while tracing (see _mark_for_dynamo)."""
    k.build(dtype, signature)
    return True


def _expect_in_torch(k: Kernel) -> None:
    """Once torch is imported: a lookup of one of k's torch ops that are not defined yet (torch.export.load of a
    program that calls them, in a new process) builds k for that dtype first (from the cache if it was built)."""
    if sys.modules.get("torch") is None or needs_call_signature(k.fn):
        return
    try:
        names = {dtype: k.package_name(dtype) for dtype in DTYPES}
    except KsbuildError:  # not a module-level function: kernel() and vmap() say so
        return
    from .packaging import torch_ops

    for dtype, name in names.items():
        torch_ops.expect_package(name, functools.partial(k.build, dtype))


def _mark_for_dynamo() -> None:
    """Once torch is imported: let a first call inside torch.compile build the package instead of tracing the build."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and not getattr(_build_outside_trace, "_dynamo_marked_constant", False):
        torch.compiler.assume_constant_result(_build_outside_trace)


def kernel(fn: Callable) -> Kernel:
    """fn compiled as it is (a decorator too): `ksbuild.kernel(relu3)(0.5)`."""
    if isinstance(fn, Kernel):
        return fn
    _, name = _source(fn)
    return Kernel(fn, name)


def register(fn: Callable) -> Kernel:
    """Knossos's name for ksbuild.kernel: `@knossos.register` keeps working after `import ksbuild as knossos`."""
    return kernel(fn)


def elementwise(fn: Callable | Kernel) -> Kernel:
    """Knossos's `@knossos.elementwise`: a scalar function applied to every element of tensors of any shape, which
    is ksbuild.vmap(fn) (extra leading axes are flattened into the mapped one)."""
    return vmap(fn)


def vmap(fn: Callable | Kernel, in_axes: tuple | None = None) -> Kernel:
    """fn mapped over the leading axis of its arguments (in_axes: 0 or None per argument)."""
    k = kernel(fn)
    if in_axes is None:
        return Kernel(k.fn, f"vmap({k.expression})", ())
    axes = tuple(in_axes) if isinstance(in_axes, (tuple, list)) else (in_axes,)
    if not axes or any(a not in (0, None) or type(a) is bool for a in axes) or all(a is None for a in axes):
        raise KsbuildError(f"vmap in_axes must be 0 or None per argument with at least one 0, got {in_axes!r}")
    text = "(" + ", ".join(map(str, axes)) + ("," if len(axes) == 1 else "") + ")"
    return Kernel(k.fn, f"vmap({k.expression}, in_axes={text})", tuple(a == 0 for a in axes))


def jacfwd(fn: Callable | Kernel, argnums: int | tuple = 0) -> Kernel:
    """The Jacobian of fn by forward mode (torch.func.jacfwd): one block out.shape + x.shape per float result
    and argnum, flattened into one tuple (results outer, argnums inner)."""
    return _jacobian("jacfwd", fn, argnums)


def jacrev(fn: Callable | Kernel, argnums: int | tuple = 0) -> Kernel:
    """The Jacobian of fn by reverse mode (torch.func.jacrev); blocks as jacfwd's."""
    return _jacobian("jacrev", fn, argnums)


def jacobian(fn: Callable | Kernel, argnums: int | tuple = 0) -> Kernel:
    """The Jacobian of fn by the cheaper mode: forward when the argnums have fewer elements than the float results."""
    return _jacobian("jacobian", fn, argnums)


def hessian(fn: Callable | Kernel, argnums: int | tuple = 0) -> Kernel:
    """jacfwd(jacrev(fn, argnums), argnums), as torch.func.hessian: blocks out.shape + x.shape + y.shape."""
    return _jacobian("hessian", fn, argnums)


def _jacobian(kind: str, fn: Callable | Kernel, argnums) -> Kernel:
    k = kernel(fn)
    nums = argnums if isinstance(argnums, tuple) else (argnums,)
    if not nums or any(type(i) is not int or i < 0 for i in nums) or len(set(nums)) != len(nums):
        raise KsbuildError(f"{kind} argnums must be an integer >= 0 or a tuple of distinct ones, got {argnums!r}")
    text = "(" + ", ".join(map(str, nums)) + ("," if len(nums) == 1 else "") + ")"
    return Kernel(k.fn, f"{kind}({k.expression}, argnums={text})")


def _mask(batched: tuple, args) -> tuple:
    """Which arguments an outer vmap maps (() means all of them)."""
    return batched or (True,) * len(args)


def _extra_lead(export, args, batched) -> tuple | None:
    """The leading shape that mapped arguments have beyond the mapped axis (None if there is none)."""
    if batched is None or export.desc["kind"] != "tensor":
        return None
    leads = []  # a list, not a set: under torch.export the sizes are SymInts, which do not hash
    for x, a, b in zip(args, export.ins, _mask(batched, args)):
        extra = getattr(x, "ndim", 0) - len(a["shape"])
        if b:
            leads.append(tuple(x.shape[:extra + 1]) if extra > 0 else None)
    first = leads[0] if leads else None
    return first if first is not None and all(lead == first for lead in leads) else None


def _flatten(x, k: int):
    return x.reshape(-1, *x.shape[k:])


def _source(fn: Callable) -> tuple[Path, str]:
    """(source file, name) of a module-level Python function (custom_jvp, custom_vjp, extern: the one decorated)."""
    from .custom import Extern, custom_jvp, custom_vjp
    fn = fn.fun if isinstance(fn, (custom_jvp, custom_vjp, Extern)) else fn
    name = getattr(fn, "__name__", None)
    if not inspect.isfunction(fn) or name is None or fn.__qualname__ != name:
        raise KsbuildError(f"ksbuild compiles module-level Python functions (def at the top of a file), got {fn!r}")
    try:
        return Path(inspect.getsourcefile(fn) or "").resolve(strict=True), name
    except (TypeError, OSError):
        raise KsbuildError(f"cannot find the source file of '{name}' (defined interactively?)",
                           hint="put the kernel in a .py file and import it") from None


def _dtype_of(args) -> str:
    """The float dtype the arguments ask for: the one of every float tensor/array; float64 for Python numbers."""
    import numpy as np
    torch = sys.modules.get("torch")  # (isinstance, not a test of the type's module name: torch.compile traces it)
    found = set()
    for x in args:
        if torch is not None and isinstance(x, torch.Tensor):
            if x.is_floating_point():
                found.add(_TORCH_FLOATS.get(str(x.dtype), str(x.dtype)))
        elif isinstance(x, (np.ndarray, np.generic)) and x.dtype.kind == "f":
            found.add(x.dtype.name)
    if len(found) > 1:
        raise KsbuildError(f"arguments mix float dtypes {sorted(found)}; ksbuild does not cast silently")
    dtype = found.pop() if found else "float64"
    if dtype not in DTYPES:
        raise KsbuildError(f"ksbuild kernels are built for {' or '.join(DTYPES)}, got {dtype} arguments")
    return dtype


def _failing_exports(path: Path) -> dict[str, KsbuildError]:
    """The exports of a manifest whose transformation fails, with their errors (kernel errors raise)."""
    from .exports import apply_transform, compile_kernel
    from .manifest import load_manifest
    from .transforms.pipeline import lower

    m = load_manifest(path)
    kernels = {name: compile_kernel(m, spec) for name, spec in m.kernels.items()}
    failing = {}
    for spec in m.exports.values():
        try:
            lower(apply_transform(spec.expr, kernels, spec.loc))
        except KsbuildError as e:
            failing[spec.name] = e
    return failing


def _write(path: Path, text: str) -> None:
    """Write text to path atomically, leaving it untouched if it already holds text."""
    if path.is_file() and path.read_text() == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".manifest-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _cache_root() -> Path:
    from .packaging.package import cache_root

    return cache_root()


_MODULE_CLASS: list = []


def _module_class():
    """KernelModule, an nn.Module calling a Kernel (defined on first use, so that torch stays optional)."""
    if not _MODULE_CLASS:
        import torch

        class KernelModule(torch.nn.Module):
            """A ksbuild kernel as a layer: forward(*args) = kernel(*args), with autograd through its vjp.
            (Pickled as ksbuild.dev.KernelModule, which the module's __getattr__ defines: torch.save(model).)"""

            def __init__(self, kernel: Kernel):
                super().__init__()
                self.kernel = kernel

            def __call__(self, *args, **kwargs):
                """The kernel's results; with no arguments, the module itself (`k.nnModule()` as `k.nnModule`)."""
                return super().__call__(*args, **kwargs) if args or kwargs else self

            def forward(self, *args):
                return self.kernel(*args)

            def extra_repr(self) -> str:
                return self.kernel.expression

        KernelModule.__module__, KernelModule.__qualname__ = __name__, "KernelModule"
        _MODULE_CLASS.append(KernelModule)
    return _MODULE_CLASS[0]


def __getattr__(name: str):
    """ksbuild.dev.KernelModule, defined on first use (torch stays optional): how pickle finds the class."""
    if name == "KernelModule":
        return _module_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
