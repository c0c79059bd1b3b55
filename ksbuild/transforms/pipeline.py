"""The pass pipeline applied to every export before codegen, as one readable list.

Set KSBUILD_DUMP_IR=1 to print the IR after each pass.
"""
from __future__ import annotations

import os
import sys

from ..ir.core import Func
from .expand import expand
from .simplify import simplify

PASSES = [
    ("expand", expand),  # decompositions: a per-lane if (lane_cond) becomes both branches and selects
    ("simplify", simplify),  # algebraic identities, constant folding, dead code
]


def lower(f: Func, after: str | None = None) -> Func:
    """Run the passes in order (stopping after `after` if given)."""
    for name, run in PASSES:
        f = run(f)
        if os.environ.get("KSBUILD_DUMP_IR"):
            from ..ir.printer import print_func
            print(f"// after {name}\n{print_func(f)}", file=sys.stderr)
        if name == after:
            break
    return f
