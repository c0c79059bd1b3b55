"""dot_convs: on a target without a vector unit, every float convolution is computed by dot products.

Requires: a Func after select_backend. Guarantees: the same values; every float `convolve` of impl "tiles" or
"depthwise" has impl "dots" (ks::conv_dots, prelude/ks/conv.h: per output position its window, dotted with the
kernel's rows in scalar registers). Run only for such targets (pipeline Options.vectors false: Cortex-M), where the
register tiles, their packing and the padded copies of the image cost 16-28 KB of flash for a small network (issue
36) and gain nothing without vectors; winograd and library ("gemm") convolutions are left alone.

When a function has such convolutions, its matrix products a [m, k] · bᵀ with b [n, k] (impl "tiles": an ONNX
Gemm's or a Linear's weight as stored, the classifier after the convolutions) become the same kernel too, as a
1-d convolution of m images of k channels and one position by n kernels of one tap: the product then links no code
of its own (ks::packed_gemm's dot products were 1.2 KB at -O3). Without convolutions a product of one row (a batch-1
MLP's layers, a recurrent cell's step, a classifier) is not a call of ks::tiles::panel_dots: the dot kernels, the
epilogue lambdas and the by-value arguments of each call cost an MLP 2 KB of flash and a 384 B frame (issue 36).
When it is x · wᵀ with w [n, k] as stored (an ONNX Gemm's or a Linear's weight) and n >= 4 it is a call of
ks::tiles::dense_row (impl "dense": 4 columns at a time, blocked in registers, then v + bias[j] and a ReLU's clamp
at 0, by value; other bounds after the call: one function for all such layers of a package, 356 B of the MLP at -O3
where the loop nests of each layer were 732 B); any other is a loop nest in the generated code (impl "loops": the
same 4 columns at a time). Products of more rows keep the dot kernels. At optimize = "size" a dense layer of n even
takes 2 columns at a time (dense_params: `block` 2); in either build a ReLU is dense_row's flag, not two float bounds
each call loads: the benchmark's MLP at emx-onnx-cgen's flash in both builds (it was 144 B above at size, 80 at speed).

At optimize = "size" (Options.size) a network of at most LOOP_GEOMETRIES distinct float convolutions, all of literal
sizes but the batch (a symbolic batch is the nest's run-time bound), has them as impl "loops" instead, and its a · bᵀ
products as one-tap ones: a loop nest each in the generated code (prims/conv_loops.py; the layers of the same sizes
sharing one helper function), none of ks::conv_dots's code.
A network without convolutions or recurrent loops computes its products of several rows as loop nests too (impl
"loops" of contract). On the Cortex-M4 benchmark's networks (benchmarks/README.md, Cortex-M4): the CNN 8072 -> 7032 B
of flash, the keyword spotter 92712 -> 91520, the MobileNet-like net 57696 -> 57336, the transformer layer 37200 ->
35728 (emx-onnx-cgen at -Os: 7336, 91568, 57888, 36640), fewer instructions for all but the transformer and the CNN,
whose stay below emx-onnx-cgen's.
"""
from __future__ import annotations

from ..ir.core import Func
from ..prims.conv_loops import literal_sizes
from ..prims.convolve import convolve
from ..prims.lowering import DOT_BLOCK
from .rewrite import bind_like, rewrite, walk_funcs

FLOAT = ("f32", "f64")
# At optimize = "size", a network of at most this many distinct float convolutions (sizes, strides, padding, groups)
# has a loop nest for each (impl "loops", prims/conv_loops.py: 0.1-0.2 KB of a Cortex-M4's flash a distinct layer,
# layers of the same sizes sharing theirs) instead of ks::conv_dots (1.1 KB however many; issue 36 item 3): the
# benchmark's CNN has two, its keyword spotter three (of nine), its MobileNet-like net nine.
LOOP_GEOMETRIES = 12
ONE_TAP = dict(strides=(1,), pads=(0, 0), dilations=(1,), groups=1)


def dot_convs(f: Func, size: bool = False) -> Func:
    """f with its float tiles and depthwise convolutions as impl "dots", and then its a · bᵀ products as well (or,
    without convolutions, its products of one row as loop nests); with `size` (optimize = "size") and at most
    LOOP_GEOMETRIES distinct such convolutions, all of literal sizes but the batch, those as impl "loops" (and its
    a · bᵀ products as one-tap ones)."""
    convs = [e for h in walk_funcs(f) for e in h.eqns if _dots_conv(e)]
    loops = size and len({_geometry(e) for e in convs}) <= LOOP_GEOMETRIES and \
        all(literal_sizes(*_types(e)) for e in convs)
    impl = "loops" if loops else "dots"

    def conv_rule(b, eqn, ins):
        return bind_like(b, eqn, eqn.prim, ins, dict(eqn.params, impl=impl)) if _dots_conv(eqn) else None
    g = rewrite(f, conv_rule)
    if convs:
        return rewrite(g, lambda b, eqn, ins: _product_rule(b, eqn, ins, impl))
    recurrent = any(e.prim.name == "loop" for h in walk_funcs(g) for e in h.eqns)
    if size and not recurrent:
        return rewrite(g, _rows_rule)
    return rewrite(g, lambda b, eqn, ins: _row_rule(b, eqn, ins, size))


def _rows_rule(b, eqn, ins):
    """_row_rule's, and a float product of more rows (impl "tiles", not accumulating) as a loop nest too (impl
    "loops": optimize = "size", a network without convolutions or recurrent loops, whose products' dot kernels,
    ks::packed_gemm's and ks::tiled_gemm's with their epilogue code, were 1.5 KB of a transformer layer's flash
    on a Cortex-M4 against 0.9 KB of nests; a recurrent loop's projection of every step is step_projections')."""
    y = eqn.outs[0].type if eqn.outs else None
    if not _float_tiles(eqn) or (y.rank == 2 and y.shape[0] == 1):
        return _row_rule(b, eqn, ins, True)
    return bind_like(b, eqn, eqn.prim, ins, dict(eqn.params, impl="loops"))


def _float_tiles(eqn) -> bool:
    """Whether an equation is a float contract of impl "tiles", not accumulating."""
    return eqn.prim.name == "contract" and eqn.params.get("impl") == "tiles" and not eqn.params.get("acc") and \
        eqn.outs[0].type.dtype in FLOAT


def _dots_conv(eqn) -> bool:
    """Whether an equation is a float convolve of impl "tiles" or "depthwise" (what becomes "dots" or "loops")."""
    return eqn.prim.name == "convolve" and eqn.params["impl"] in ("tiles", "depthwise") and \
        eqn.outs[0].type.dtype in FLOAT


def _geometry(eqn) -> tuple:
    """What a convolve's loop nest depends on: its types' shapes and its geometry."""
    p = eqn.params
    shapes = tuple(t.shape for t in _types(eqn))
    return shapes + tuple(tuple(p[k]) for k in ("strides", "pads", "dilations")) + (p["groups"],)


def _types(eqn) -> tuple:
    """A convolve's operand types x, w and result type y."""
    return eqn.ins[0].type, eqn.ins[1].type, eqn.outs[0].type


def _row_rule(b, eqn, ins, size: bool):
    """A float product of one row (impl "tiles", not accumulating) as a loop nest (impl "loops"), or, when it is
    x · wᵀ with w [n, k] as stored and n >= 4 columns, a call of ks::tiles::dense_row (impl "dense", dense_params)."""
    y = eqn.outs[0].type if eqn.outs else None
    if not _float_tiles(eqn) or y.rank != 2 or y.shape[0] != 1:
        return None
    if not _dense(eqn):
        return bind_like(b, eqn, eqn.prim, ins, dict(eqn.params, impl="loops"))
    return bind_like(b, eqn, eqn.prim, ins, dense_params(eqn.params, eqn.ins[1].type.shape, size))


def dense_params(params: dict, w_shape: tuple, size: bool) -> dict:
    """A product's params as impl "dense" (ks::tiles::dense_row) with a weight of shape w_shape (dense_applies): at
    optimize = "size" with n even, `block` 2 (ks::tiles::dense_row<T, 2>: 2 columns at a time, 60 B less of a
    Cortex-M4's flash at -Os than 4 with the last block overlapping; the benchmark's MLP at emx-onnx-cgen's flash)."""
    return dict(params, impl="dense", block=2) if size and w_shape[0] % 2 == 0 else dict(params, impl="dense")


def _dense(eqn) -> bool:
    """Whether a product of one row is "ik,jk->ij" with a literal n >= DOT_BLOCK (ks::tiles::dense_row)."""
    return len(eqn.ins) == 2 and dense_applies(eqn.params["spec"], eqn.ins[1].type.shape)


def dense_applies(spec: str, w_shape: tuple) -> bool:
    """Whether a product of one row with spec and a weight of shape w_shape is x · wᵀ, "ik,jk->ij", with a literal
    n >= DOT_BLOCK: impl "dense" (ks::tiles::dense_row; step_projections.py asks too)."""
    left, right = spec.split("->")
    a_axes, b_axes = left.split(",")
    if len(a_axes) != 2 or len(b_axes) != 2 or a_axes[1] != b_axes[1] or right != a_axes[0] + b_axes[0]:
        return False
    return isinstance(w_shape[0], int) and w_shape[0] >= DOT_BLOCK


def _product_rule(b, eqn, ins, impl: str):
    """A float contract "ik,jk->ij" (impl "tiles", not accumulating) as a one-tap convolve of impl `impl` ("dots" or
    "loops")."""
    if not _float_tiles(eqn) or len(ins) != 2:
        return None
    left, right = eqn.params["spec"].split("->")
    a_axes, b_axes = left.split(",")
    if len(a_axes) != 2 or len(b_axes) != 2 or len(right) != 2 or \
            a_axes[1] != b_axes[1] or right != a_axes[0] + b_axes[0]:
        return None
    (m, k), (n, _) = ins[0].type.shape, ins[1].type.shape
    x = b.reshape(ins[0], shape=(m, k, 1))
    w = b.reshape(ins[1], shape=(n, k, 1))
    (out,) = b.bind(convolve, [x, w], dict(ONE_TAP, impl=impl))
    return [b.reshape(out, shape=(m, n))]
