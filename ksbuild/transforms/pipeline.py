"""The pass pipeline applied to every export after its transformations, as one readable list.

Each pass is a pure function Func -> Func (some take the build options). `ksbuild ir --after
PASS` prints the IR after a pass; KSBUILD_DUMP_IR=1 prints it after every pass.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Callable

from ..compile.backends import get_backend
from ..ir.core import Func
from ..prims.scratch import ALL_TILES
from .accumulate import accumulate
from .cse import cse
from .dot_convs import dot_convs
from .expand import expand
from .float_products import float_products
from .fuse import fuse
from .fuse_epilogue import fuse_epilogue
from .gather_early import gather_early
from .hoist import hoist
from .join import join
from .layout_constants import layout_constants
from .narrow_qpacks import narrow_qpacks
from .parallelize import parallelize
from .per_row import per_row
from .plan_memory import plan_memory
from .select_backend import select_backend
from .simplify import simplify
from .step_projections import step_projections
from .tabulate import tabulate
from .triangles import triangles
from .unroll import unroll
from .window_pools import window_pools


@dataclass(frozen=True)
class Options:
    """What the passes may depend on besides the IR."""

    backend: str = "plain"  # a name in compile/backends.py's BACKENDS
    threads: int = 0  # > 1: the parallelize pass marks batch loops and kernel calls for ks/pool.h's threads
    vectors: bool = True  # the target has a vector unit (Target.vectors); without, panels are 4 columns wide
    tiles: tuple = ALL_TILES  # the register tiles of the levels the kernels are built for (prims/scratch.py)
    arena_align: int = 64  # the bytes workspace offsets are multiples of (plan_memory.arena_align)
    size: bool = False  # [build] optimize = "size" (dot_convs: a network of few convolutions as loop nests)


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable[[Func, Options], Func]
    what: str


PASSES = [
    Pass("expand", lambda f, o: expand(f),
         "decompositions: a per-lane if (lane_cond) becomes selects, a cotangent product (ctmul) a mul"),
    Pass("window_pools", lambda f, o: f if o.vectors else window_pools(f),
         "without a vector unit, max pooling is a maximum over gathered windows (a loop nest), not ks::max_pool"),
    Pass("unroll", lambda f, o: unroll(f), "loops that run a few known times become their bodies, repeated"),
    Pass("simplify", lambda f, o: simplify(f), "algebraic identities, constant folding, dead code"),
    Pass("gather_early", lambda f, o: gather_early(f),
         "a gather of rows made by row-wise work (elementwise, products, views) takes the rows of that work's "
         "operands"),
    Pass("cse", lambda f, o: cse(f),
         "repeated equations computed once (loops, ifs and calls by their bodies' structure); two ifs of one "
         "condition joined"),
    Pass("tabulate", lambda f, o: tabulate(f),
         "an int8 model's float region from one 8-bit tensor to an 8-bit result becomes a 256-entry table lookup"),
    Pass("hoist", lambda f, o: simplify(hoist(f)),
         "costly values every iteration of a loop recomputes are computed before it (then simplify again)"),
    Pass("triangles", lambda f, o: simplify(triangles(f)),
         "a triangular sum computed row by row (for r: for c in range(r): row += ...) is running sums updated "
         "column by column; its gradient's reverse loop (adds into d_x[c] for c < r) runs column by column too"),
    Pass("join", lambda f, o: join(f), "a concatenation (pieces padded with zeros and added) copies each piece once"),
    Pass("float_products", lambda f, o: float_products(f) if o.vectors else f,
         "an integer product whose int32 sums are converted to float and scaled gives float results itself"),
    Pass("select_backend", lambda f, o: select_backend(f, get_backend(o.backend), o.threads),
         "einsums become loop nests or matrix product calls"),
    Pass("dot_convs", lambda f, o: f if o.vectors else dot_convs(f, o.size),
         "without a vector unit, float convolutions are dot products over gathered windows (ks::conv_dots)"),
    Pass("step_projections", lambda f, o: f if o.vectors else step_projections(f, o.size),
         "without a vector unit, a recurrent loop projects each step's input in its body, not all steps before it"),
    Pass("narrow_qpacks", lambda f, o: f if o.vectors else narrow_qpacks(f),
         "without a vector unit, an integer product's weights are packed 4 columns wide, not 32"),
    Pass("layout_constants", lambda f, o: layout_constants(f, o.vectors, o.threads),
         "constants a gemm reads are stored in the order its kernel reads when the package is compiled"),
    Pass("per_row", lambda f, o: per_row(f, o.threads),
         "a chain of convolutions and pooling that treats each image alone runs image by image"),
    Pass("accumulate", lambda f, o: accumulate(f), "products added to an accumulator are accumulated into it"),
    Pass("fuse", lambda f, o: fuse(f), "elementwise runs and their trailing reductions become one loop nest"),
    Pass("fuse_epilogue", lambda f, o: fuse_epilogue(f),
         "the elementwise run after a matrix product or convolution is applied as it stores"),
    Pass("parallelize", lambda f, o: parallelize(f, o.threads), "with threads > 1, outer loops run on N threads"),
    Pass("plan_memory", lambda f, o: plan_memory(f, o.tiles, o.arena_align),
         "buffers: output arguments, in-place updates, reused slots, kernel calls' scratch"),
]
PASS_NAMES = [p.name for p in PASSES]


def lower(f: Func, options: Options = Options(), after: str | None = None) -> Func:
    """Run the passes in order (stopping after `after` if given; "transforms" runs none)."""
    if after == "transforms":
        return f
    if after is not None and after not in PASS_NAMES:
        from ..errors import KsbuildError
        raise KsbuildError(f"unknown pass '{after}'", hint=f"passes: {', '.join(PASS_NAMES)}")
    for p in PASSES:
        f = p.run(f, options)
        if os.environ.get("KSBUILD_DUMP_IR"):
            from ..ir.printer import print_func
            print(f"// after {p.name}\n{print_func(f)}", file=sys.stderr)
        if p.name == after:
            break
    return f
