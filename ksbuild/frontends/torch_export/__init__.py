"""The torch.export frontend: an `nn.Module` as a kernel (`[kernels.X] torch = "model.py:make"`).

`make()` (a function of the user's file or module) returns `(module, example_args)` or
`(module, example_args, dynamic_shapes)`. The module is captured with `torch.export.export`
in eval mode and decomposed to core ATen (`capture.py`; recurrent layers stay whole so they
become loops). The importer (`importer.py`) walks the FX graph: user inputs become the IR
function's parameters, parameters and buffers become weights (embedded constants, or further
parameters with weights = "external"), and every `aten.*` call is mapped through one table
(`aten_*.py`) onto the shared op library (`ksbuild/ops`). Calls to ksbuild's own custom ops (a
dev-loop kernel inside the model) are replaced by the kernel's IR (`custom.py`). The Python loops torch.export
unrolled are rolled back into `loop`s (`transforms/reroll.py`); a loop written with torch's scan, or a counted
while_loop, is read as one `loop` without unrolling (`hop.py`).

torch stays optional: nothing here is imported unless a manifest has a `torch =` kernel.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from ...errors import KsbuildError, Location
from ...ir.core import Func


def require_torch(loc: Location | None):
    """The torch module, or a KsbuildError saying how to install it."""
    try:
        import torch
    except ImportError:
        raise KsbuildError("a `torch =` kernel needs PyTorch, which is not installed", loc,
                           hint="pip install torch (the CPU build is enough), or ksbuild[torch]") from None
    return torch


def compile_torch_kernel(source: str, root: Path, make: str, name: str, weights: str = "embed",
                         loc: Location | None = None, compile_export: Callable | None = None) -> Func:
    """The IR function of the module that `make` in `source` (a .py file relative to root, or a
    module name) returns, captured by torch.export. A ksbuild op inside the model is compiled by
    compile_export(package, export, used_by, loc) (exports.package_export)."""
    require_torch(loc)
    from ...transforms.reroll import reroll
    from .capture import capture
    from .importer import Importer

    captured = capture(source, root, make, loc)
    return reroll(Importer(captured, weights, compile_export).run(name))


def fingerprint(source: str, root: Path, make: str, loc: Location | None = None) -> bytes:
    """What the compiled kernel depends on beyond the model file: the module's structure, its
    classes' source files, its parameters and buffers and the example inputs (for the build cache)."""
    require_torch(loc)
    from .capture import load_model, model_fingerprint

    return model_fingerprint(load_model(source, root, make, loc))
