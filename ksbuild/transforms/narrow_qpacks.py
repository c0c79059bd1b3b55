"""narrow_qpacks: on a target without a vector unit, an integer product's weights are packed 4 columns wide, and
constant ones without their columns' sums; every packed weights' parts are padded to 8 bytes, not 64.

Requires: a Func after select_backend. Guarantees: the same values; every `qpack` of layout "columns" and every
packed `qmatmul` has param width = 4 (prims/qlinear.py), the column tiles ks::qtile::product_cols of an M-profile
core (prelude/ks/qconv.h) read. Run only for such targets (pipeline Options.vectors false: Cortex-M), where the
tiles are SMLAD or scalar loops over as many columns as there are: the tiles of 32 columns that AVX-512 fills padded
a classifier's 10 columns with 22 of zeros (1.4 KB of flash for 64 inputs, issue 35). The generated code checks
that the C++ agrees (a static_assert beside each qpack_columns and qmatmul call).

Every qpack, and every qconv and qmatmul reading packed weights, gets param align = 8: the tiles, the sums and each
group's weights are padded to 8 bytes (ks::qtile::pack_align on an M-profile core, whose tiles read words), where
the 64 of the vector units' left up to 60 B of zeros after each part in flash (the int8 CNN of benchmarks/cortex_m4:
64 B, its first convolution's 8 channels of 27 taps).

A qmatmul whose weights (a qpack read by it alone) and bias are constants (or views of constants) gets the
activations' zero point folded into its bias when the package is compiled: bias' = bias - (x_zero - z)·Σ_k w[k, j],
x_zero' = z, where z is the zero point at which the tiles' own is 0 (u8: 0; i8: -128, the tiles multiplying an int8
activation's byte + 128), so Σ (x - x_zero)·w + bias = Σ (x - z)·w + bias'. Its qpack then has param sums = False:
the packed weights lack the columns' int32 sums, which ks::qmatmul reads for x_zero·Σw only, and on an M-profile
core (ks::qtile::bias_offsets) it takes such a product's bias as its offsets (the int8 MLP of benchmarks/cortex_m4:
0.6 KB of sums, and the offsets' computation, fewer). Skipped when a folded bias would not fit int32.
"""
from __future__ import annotations

import numpy as np

from ..ir.core import Func, Var
from ..ir.dense import Dense
from ..prims.qlinear import NARROW_ALIGN, NARROW_COLS, unsigned_zero
from .layout_constants import _constant_views
from .rewrite import bind_like, rewrite, use_counts


def narrow_qpacks(f: Func) -> Func:
    """f with its products' packed weights (and the products reading them) 4 columns wide, and constant ones
    without their sums (see the module doc)."""
    folds = _folds(f)

    def rule(b, eqn, ins):
        if eqn.prim.name == "qpack" and eqn.params["layout"] == "columns":
            params = dict(eqn.params, width=NARROW_COLS, align=NARROW_ALIGN)
            if eqn.outs[0] in folds:
                params["sums"] = False
        elif eqn.prim.name == "qpack" or eqn.params.get("packed") and eqn.prim.name == "qconv":  # (rows, by ks::qconv)
            params = dict(eqn.params, align=NARROW_ALIGN)
        elif eqn.prim.name == "qmatmul" and eqn.params.get("packed"):
            params = dict(eqn.params, width=NARROW_COLS, align=NARROW_ALIGN)
            fold = folds.get(eqn.ins[1])
            if fold is not None and fold[0] is eqn:
                bias, x_zero = fold[1:]
                params.update(sums=False, x_zero=x_zero)
                ins = [ins[0], ins[1], b.constant(value=Dense.of(bias)), ins[3]]
        else:
            return None
        if params == eqn.params:
            return None
        return bind_like(b, eqn, eqn.prim, ins, params)
    return rewrite(f, rule)


def _folds(f: Func) -> dict:
    """{packed weights: (the qmatmul reading them, its folded bias, its new x_zero)} for the products of f's own
    equations whose constant weights are packed for them alone and whose bias is a constant."""
    kernels = {e.outs[0]: e.params["value"] for e in f.eqns if e.prim.name == "constant"}
    values = _constant_views(f, kernels)
    uses = use_counts(f)
    packs = {e.outs[0]: e for e in f.eqns if e.prim.name == "qpack" and e.params["layout"] == "columns"}
    folds = {}
    for e in f.eqns:
        if e.prim.name != "qmatmul" or not e.params.get("packed") or e.params.get("sums", True) is False:
            continue
        a, packed, bias = e.ins[:3]
        pack = packs.get(packed)
        if pack is None or uses.get(packed) != 1 or not isinstance(pack.ins[0], Var) or pack.ins[0] not in values \
                or not isinstance(bias, Var) or bias not in values:
            continue
        zero = unsigned_zero(a.type.dtype)
        w = values[pack.ins[0]].array().astype(np.int64)  # [K, N]
        folded = values[bias].array().astype(np.int64) - (e.params["x_zero"] - zero) * w.sum(0)
        if folded.min(initial=0) < -2**31 or folded.max(initial=0) >= 2**31:
            continue
        folds[packed] = (e, folded.astype(np.int32), zero)
    return folds
