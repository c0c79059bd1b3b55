"""narrow_qpacks: on a target without a vector unit, an integer product's weights are packed 4 columns wide.

Requires: a Func after select_backend. Guarantees: the same values; every `qpack` of layout "columns" and every
packed `qmatmul` has param width = 4 (prims/qlinear.py), the column tiles ks::qtile::product_cols of an M-profile
core (prelude/ks/qconv.h) read. Run only for such targets (pipeline Options.vectors false: Cortex-M), where the
tiles are SMLAD or scalar loops over as many columns as there are: the tiles of 32 columns that AVX-512 fills padded
a classifier's 10 columns with 22 of zeros (1.4 KB of flash for 64 inputs, issue 35). The generated code checks
that the C++ agrees (a static_assert beside each qpack_columns and qmatmul call).
"""
from __future__ import annotations

from ..ir.core import Func
from ..prims.qlinear import NARROW_COLS
from .rewrite import bind_like, rewrite


def narrow_qpacks(f: Func) -> Func:
    """f with its products' packed weights (and the products reading them) 4 columns wide."""
    def rule(b, eqn, ins):
        narrow = (eqn.prim.name == "qpack" and eqn.params["layout"] == "columns") or \
            (eqn.prim.name == "qmatmul" and eqn.params.get("packed"))
        if not narrow or eqn.params.get("width") == NARROW_COLS:
            return None
        return bind_like(b, eqn, eqn.prim, ins, dict(eqn.params, width=NARROW_COLS))
    return rewrite(f, rule)
