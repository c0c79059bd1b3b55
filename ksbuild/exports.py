"""From a manifest to typed, transformed, simplified IR functions: one per export."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import prims  # noqa: F401  (registers the primitives)
from .errors import KsbuildError, Location
from .ir.core import Func
from .manifest import JACOBIANS, ExportSpec, KernelSpec, Manifest, TExpr, locate, parse_signature
from .transforms.jacobian import JACOBIAN_FUNCS
from .transforms.jvp import jvp_func
from .transforms.pipeline import Options, lower
from .transforms.vjp import bwd_func, diff_mask, fwd_func, grad_func, vjp_func
from .transforms.vmap import fresh_dim, vmap_func


@dataclass(frozen=True)
class Export:
    """One exported function: its C name suffix, the IR, and where it came from."""

    name: str
    func: Func
    spec: ExportSpec
    kernel: KernelSpec
    notes: tuple[str, ...] = ()  # the kernel's words on its C ABI (Func.notes), for the header
    defaults: tuple[tuple[int, object], ...] = ()  # (input position, value): the kernel's defaults, for the Python API


def compile_kernel(m: Manifest, k: KernelSpec) -> Func:
    """The IR of one kernel from its Python source (typed by annotations or the signature), its
    ONNX model (graph inputs, then external weights, as parameters; graph outputs as results) or
    its torch model captured by torch.export (user inputs, then external parameters and buffers)."""
    if k.torch is not None:
        from .frontends.torch_export import compile_torch_kernel
        file, make = k.torch.rsplit(":", 1)
        return compile_torch_kernel(file, m.root, make, k.name, k.weights or m.build.weights, k.loc,
                                    compile_export=package_export)
    if k.onnx is not None:
        from .frontends.onnx import compile_onnx_kernel
        return compile_onnx_kernel((m.root / k.onnx).resolve(), k.name, m.float_dtype(), k.weights or m.build.weights,
                                   semantics=k.onnx_semantics or "onnxruntime")
    from .frontends.python.source import compile_python_kernel

    file, func = k.python.rsplit(":", 1)
    path = _source_path(m, file, k)
    params = results = None
    if k.signature:
        sig_params, results = parse_signature(k.signature, k.loc)
        params = [t for _, t in sig_params]
    where = locate(m.text, ("kernels", k.name), "python", file=str(m.path))
    sig_where = locate(m.text, ("kernels", k.name), "signature", file=str(m.path)) if k.signature else None
    return compile_python_kernel(path, func, m.float_dtype(), params, results, where, sig_where)


def package_export(package, export: str, used_by: str, loc: Location) -> Func:
    """The IR of an export of a ksbuild package loaded in this process (a ksbuild op inside a torch model),
    compiled again from the manifest the package installs."""
    from .manifest import load_manifest
    name = package.desc["package"]
    try:
        m = load_manifest(package.root / "share" / name / "manifest.toml")
    except KsbuildError as e:
        raise KsbuildError(f"cannot read the manifest of ksbuild package '{name}' (used by {used_by}): {e.message}",
                           loc, hint="the kernels of a package used inside a model must be found from its installed "
                                     "manifest (absolute paths, as the dev loop writes)") from None
    spec = m.exports[export]
    kernels = {k: compile_kernel(m, m.kernels[k]) for k in _kernel_names(spec.expr)}
    return apply_transform(spec.expr, kernels, spec.loc)


def _source_path(m: Manifest, file: str, k: KernelSpec) -> Path:
    if file.endswith(".py"):
        return (m.root / file).resolve()
    import importlib.util

    try:
        spec = importlib.util.find_spec(file)
    except (ImportError, ValueError) as e:  # a parent package that is missing or fails to import
        raise KsbuildError(f"kernel '{k.name}': cannot find module '{file}': {e}", k.loc) from None
    if spec is None or spec.origin is None:
        raise KsbuildError(f"kernel '{k.name}': cannot find module '{file}'", k.loc)
    if not spec.origin.endswith(".py") or not Path(spec.origin).is_file():
        raise KsbuildError(f"kernel '{k.name}': module '{file}' has no Python source file ({spec.origin})", k.loc,
                           hint="kernels are read from .py source")
    return Path(spec.origin)


def apply_transform(e: TExpr, kernels: dict[str, Func], loc: Location) -> Func:
    """The function a transformation expression denotes."""
    if e.kind == "kernel":
        return kernels[e.name]
    f = apply_transform(e.arg, kernels, loc)
    if e.kind in ("jvp", "vjp", "grad", "fwd", "bwd") and getattr(e, "argnums", None) is None \
            and not any(p.type.is_float for p in f.params):
        shown = ", ".join(str(p.type) for p in f.params) or "none"
        raise KsbuildError(f"{e.kind}({_shown(e.arg)}): nothing to differentiate: its inputs are not float "
                           f"({shown})", loc,
                           hint="derivatives are taken with respect to float inputs; a model's built-in weights "
                                "become inputs with weights = \"external\"")
    try:
        if e.kind == "vmap":
            return _vmap(f, e.in_axes)
        if e.kind == "jvp":
            jf = jvp_func(f, diff_mask(f, e.argnums))  # (tangents for the argnums only: the others are zero)
            if e.primals:
                return jf
            return Func(jf.name, jf.params, jf.eqns, jf.results[len(f.results):],
                        jf.result_names[len(f.results):] if jf.result_names else ())
        if e.kind == "vjp":
            return vjp_func(f, argnums=e.argnums)
        if e.kind == "grad":
            return grad_func(f, argnums=e.argnums)
        if e.kind in ("fwd", "bwd"):
            return (fwd_func if e.kind == "fwd" else bwd_func)(f, argnums=e.argnums)
        if e.kind in JACOBIANS:
            return _jacobian(e, f)
    except KsbuildError as err:
        raise err.at(loc) from None
    raise KsbuildError(f"unknown transformation {e.kind}", loc)


def _jacobian(e: TExpr, f: Func) -> Func:
    """jacfwd/jacrev/jacobian/hessian of f, the function e.arg denotes; argnums defaults to (0,) as in torch.func."""
    if e.argnums is None and f.params and not f.params[0].type.is_float:
        shown = f"{e.kind}({_shown(e.arg)})"
        raise KsbuildError(f"{shown} differentiates argument 0 by default (as torch.func does), and "
                           f"'{f.params[0].hint or 0}' is {f.params[0].type}, not a float",
                           hint=f"name the float arguments: {e.kind}({_shown(e.arg)}, argnums=(1,))")
    return JACOBIAN_FUNCS[e.kind](f, e.argnums)


def _shown(e: TExpr) -> str:
    """The manifest's spelling of a transformation expression (without its options)."""
    return e.name if e.kind == "kernel" else f"{e.kind}({_shown(e.arg)})"


def _vmap(f: Func, in_axes) -> Func:
    axes = list(in_axes) if in_axes is not None else [0] * len(f.params)
    if len(axes) != len(f.params):
        raise KsbuildError(f"in_axes has {len(axes)} entries but '{f.name}' takes {len(f.params)} arguments")
    if any(a not in (0, None) for a in axes):
        raise KsbuildError("in_axes entries other than 0 and None are not supported yet")
    batched = [a == 0 for a in axes]
    if not any(batched):
        raise KsbuildError("vmap needs at least one batched argument (an in_axes entry of 0)")
    vf, _ = vmap_func(f, batched, fresh_dim(f), [True] * len(f.results), name=f"vmap_{f.name}")
    return vf


def build_exports(m: Manifest, after: str | None = None, target: str | None = None) -> list[Export]:
    """Compile every kernel the exports use, apply each export's transformations, then the pass
    pipeline (up to and including pass `after`, if given) for `target` (by default [build] target)."""
    from .deep import deeply
    return deeply(_build_exports, m, after, target)


def _build_exports(m: Manifest, after: str | None, target: str | None) -> list[Export]:
    from .compile.backends import get_backend
    from .compile.targets import get_target
    from .prims.scratch import target_tiles
    from .transforms.plan_memory import arena_align
    t = get_target(target or m.build.target)
    several = m.build.optimize == "speed" and get_backend(m.build.backend).cpu_variants  # (render.py: variants)
    options = Options(backend=m.build.backend, threads=m.build.threads, vectors=t.vectors,
                      tiles=target_tiles(t, m.build.cpu, several), arena_align=arena_align(t.vectors),
                      size=m.build.optimize == "size")
    kernels: dict[str, Func] = {}
    out = []
    for spec in m.exports.values():
        for name in _kernel_names(spec.expr):
            if name not in kernels:
                kernels[name] = compile_kernel(m, m.kernels[name])
        f = apply_transform(spec.expr, kernels, spec.loc)
        lowered = lower(f.renamed(spec.name), options, after)
        kernel = _kernel_names(spec.expr)[0]
        out.append(Export(spec.name, lowered, spec, m.kernels[kernel], kernels[kernel].notes,
                          input_defaults(f, kernels[kernel])))
    return out


def input_defaults(f: Func, kernel: Func) -> tuple[tuple[int, object], ...]:
    """The kernel's parameter defaults at the export's inputs: the export's first inputs are the kernel's
    parameters (a vmap, jvp, vjp, grad or fwd keeps them first), a default applies where one is still the scalar
    it was (not batched by vmap)."""
    n = len(kernel.params)
    if not kernel.defaults or len(f.params) < n or \
            any(p.hint != q.hint for p, q in zip(f.params, kernel.params)):
        return ()
    given = dict(kernel.defaults)
    return tuple((i, given[p.hint]) for i, (p, q) in enumerate(zip(f.params, kernel.params))
                 if p.hint in given and p.type == q.type and p.type.rank == 0)


def _kernel_names(e: TExpr) -> list[str]:
    return [e.name] if e.kind == "kernel" else _kernel_names(e.arg)
