"""Constants a kernel file imports from a Python module next to it.

`from consts import EPS`, `from .consts import EPS as eps`, `import consts` (then `consts.EPS`) and
`from . import consts` read the module-level constants of `consts.py` in the kernel file's folder (a dotted
`a.b` is `a/b.py` or `a/b/__init__.py` there; each leading dot of a relative import goes one folder up
after the first; a module those import is found next to it or next to the kernel file). A constant is what
a kernel file's own module-level constants may be: numbers, bools, tuples and lists of numbers, arithmetic
on them. Functions of that module are not compiled: a kernel that
calls one gets a located error.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable


def module_file(importer: Path, module: str, level: int, kernel_file: Path | None = None) -> Path | None:
    """The file of `module` imported by `importer` (level: the leading dots of a relative import): next to it,
    or (an absolute import) next to the kernel file, where Python running the kernel finds it; None otherwise
    (an installed package, a module that is not there)."""
    folder = importer.resolve().parent
    for _ in range(max(level - 1, 0)):
        folder = folder.parent
    folders = [folder] if level or kernel_file is None else [folder, kernel_file.resolve().parent]
    for base in (f.joinpath(*module.split(".")) for f in folders):
        for f in (base.with_name(base.name + ".py"), base / "__init__.py"):
            if f.is_file():
                return f
    return None


def sibling_module(kernel_file: Path, module: str | None, level: int, loading: tuple[Path, ...], load: Callable):
    """The parsed module (a Source: its .constants, .path, .files) `module` imported by `kernel_file` (see
    module_file; loading[0] is the kernel file the imports started from), or None if there is no such file or
    it is being loaded (an import cycle). `load(path, loading)` is load_source."""
    f = module_file(kernel_file, module, level, loading[0] if loading else None) if module else None
    if f is None or f.resolve() in loading:
        return None
    return load(f, loading)
