"""The Python-subset frontend: kernels written in a subset of Python/PyTorch, compiled to the IR.

source.py reads a kernel's file and its imports; compiler.py is the AST visitor over the listed syntax, with
tensors.py, loops.py, branches.py, scope.py and mathlib.py (operators and math.* as prims); torch functions
are handlers registered with `@torch_function` (registry.py) in tensors.py, torch_basics.py, torch_more.py,
torch_extra.py, losses.py and search.py, looked up through namespaces.py.
"""
from __future__ import annotations


def __getattr__(name: str):
    """compile_python_kernel and imported_files (source.py), imported on first use (no import cycle)."""
    if name in ("compile_python_kernel", "imported_files"):
        from . import source
        return getattr(source, name)
    raise AttributeError(name)
