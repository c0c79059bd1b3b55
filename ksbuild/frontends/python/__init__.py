"""The Python-subset frontend: kernels written in a subset of Python/PyTorch, compiled to the IR.

source.py reads a kernel's file and its imports; compiler.py and expressions.py are the AST visitor over the
listed syntax, with index.py (subscripts), loops.py, branches.py, scope.py and mathlib.py (operators and math.*
as prims); torch functions are handlers registered with `@torch_function` (registry.py) in the modules named by
domain, like ksbuild/ops: shape.py, create.py, casts.py, math.py, activations.py, reduce.py, linalg.py,
index.py, nn.py, search.py and losses.py, which namespaces.py imports and looks names up in; tensors.py holds
annotations and the helpers that read a torch call's arguments.
"""
from __future__ import annotations


def __getattr__(name: str):
    """compile_python_kernel and imported_files (source.py), imported on first use (no import cycle)."""
    if name in ("compile_python_kernel", "imported_files"):
        from . import source
        return getattr(source, name)
    raise AttributeError(name)
