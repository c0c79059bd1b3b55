"""window_pools: on a target without a vector unit, max pooling is the maximum over gathered windows, not a call.

Requires: a Func. Guarantees: the same values (ties and NaN as ks::max_pool's: the window's first maximum; a NaN
wins); no `max_pool` equation (prims/pooling.py) is left: each becomes the windows of its image padded with -inf
(ops/nn.py max_pool_windows) and a reduce_max over them, which fuse and per_row turn into one loop nest. Run only for
such targets (pipeline Options.vectors false: Cortex-M), where that nest is ~0.2 KB of flash against the kernel
layer's shape-generic ks::max_pool (prelude/ks/maxpool.h: ~1.5 KB with its row kernels), and no vectors to gain.
"""
from __future__ import annotations

from ..ir.core import Func
from ..ops.nn import max_pool_windows
from .rewrite import rewrite


def window_pools(f: Func) -> Func:
    """f with every max_pool equation written as a reduce_max over its windows."""
    def rule(b, eqn, ins):
        if eqn.prim.name != "max_pool":
            return None
        p = eqn.params
        k = len(p["window"])
        patches = max_pool_windows(b, ins[0], p["window"], p["strides"], p["dilations"], p["pads"])
        return [b.reduce_max(patches, axes=tuple(3 + 2 * i for i in range(k)), ties="first")]
    return rewrite(f, rule)
