"""Test helper: compile kernels from a Python source string written to a temporary file."""
from __future__ import annotations

from ksbuild.frontends.python.source import compile_python_kernel


def ir_getter(tmp_path_factory, source: str, stem: str):
    """get(name) -> the f64 IR of kernel `name` of `source` (saved as <stem>.py), compiled once."""
    path = tmp_path_factory.mktemp(stem) / f"{stem}.py"
    path.write_text(source)
    cache: dict = {}

    def get(name: str):
        if name not in cache:
            cache[name] = compile_python_kernel(path, name, "f64")
        return cache[name]
    return get


def source_module(tmp_path_factory, source: str, stem: str):
    """`source` saved as <stem>.py and imported: the kernel file run by PyTorch, or the dev loop's module."""
    import importlib.util

    path = tmp_path_factory.mktemp(stem) / f"{stem}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_source(tmp_path_factory, source: str, stem: str, exports: dict[str, str], optimize: str | None = None):
    """ksbuild.build (float64) of a package `stem` whose kernels are all the functions `exports` names (optimize:
    ksbuild.build's, e.g. conftest.DEBUG where a test checks values alone)."""
    import ksbuild

    folder = tmp_path_factory.mktemp(stem + "_build")
    (folder / f"{stem}.py").write_text(source)
    lines = ["[package]", f'name = "{stem}"', 'version = "0.1.0"', "", "[build]", 'dtype = "float64"', ""]
    kernels = sorted({n for expr in exports.values() for n in _kernel_names(expr)})
    for name in kernels:
        lines += [f"[kernels.{name}]", f'python = "{stem}.py:{name}"', ""]
    lines += ["[exports]"] + [f'{k} = "{v}"' for k, v in exports.items()]
    (folder / "manifest.toml").write_text("\n".join(lines) + "\n")
    return ksbuild.build(folder / "manifest.toml", out=folder / "dist", optimize=optimize)


def _kernel_names(expr: str) -> list[str]:
    """The kernel names in a transformation expression such as vjp(vmap(f, in_axes=(0, None)))."""
    import re

    words = re.findall(r"[A-Za-z_]\w*", expr)
    return [w for w in words if w not in ("vmap", "vjp", "jvp", "grad", "in_axes", "argnums", "None")]
