"""simplify's one-form rules (ksbuild/transforms/one_form.py, and f32_literal and last_step in simplify.py): what
torch.export and torch.onnx.export write differently becomes one form. Each case builds the two spellings by hand,
checks that simplify gives both the same equations, and that the values are the reference interpreter's on the
unsimplified function (NaN and infinities included where a rule could mishandle them)."""
from __future__ import annotations

import numpy as np

from ksbuild.ir.builder import Builder
from ksbuild.ir.core import Lit, Var
from ksbuild.ir.interp import eval_func
from ksbuild.ir.types import Type
from ksbuild.ir.verify import verify
from ksbuild.prims.base import form_name
from ksbuild.transforms.simplify import simplify


def _func(shape, body, dtype="f32"):
    b = Builder()
    x = Var(Type(dtype, shape), "x")
    return b.func("f", [x], [body(b, x)])


def _prims(f) -> list[str]:
    return [form_name(e.prim, e.params) for e in f.eqns]  # (lt for compare[op="lt"])


def _same_values(f, x):
    g = simplify(f)
    verify(g)
    np.testing.assert_array_equal(eval_func(g, [x])[0], eval_func(f, [x])[0])
    return g


def _x(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_a_transpose_of_unit_axes_is_a_reshape_and_reshapes_compose():
    """torch.export's LSTM: reshape [T, 1, B, H] -> transpose (0, 2, 1, 3) -> reshape [T, B, H]; ONNX's: two reshapes.
    Both are the identity on [T, B, H] after simplify."""
    torch_form = _func((5, 3, 4), lambda b, x: b.reshape(b.transpose(b.reshape(x, shape=(5, 1, 3, 4)),
                                                                     perm=(0, 2, 1, 3)), shape=(5, 3, 4)))
    onnx_form = _func((5, 3, 4), lambda b, x: b.reshape(b.reshape(x, shape=(5, 1, 3, 4)), shape=(5, 3, 4)))
    for f in (torch_form, onnx_form):
        g = _same_values(f, _x((5, 3, 4)))
        assert _prims(g) == [] and g.results[0] is g.params[0]


def test_a_transpose_of_axes_over_one_is_kept():
    f = _func((2, 1, 3), lambda b, x: b.transpose(x, perm=(2, 1, 0)))
    assert _prims(_same_values(f, _x((2, 1, 3)))) == ["transpose"]


def test_a_transpose_between_a_merge_and_a_split_of_leading_axes_is_one_transpose():
    """kᵀ of [B, H, L, E]: ONNX (dynamo) reshapes to [B·H, L, E], transposes (0, 2, 1) and reshapes to [B, H, E, L];
    torch.export transposes (0, 1, 3, 2). With the transpose before (0, 2, 1, 3) both compose into one."""
    def onnx_kt(b, x):
        t = b.transpose(x, perm=(0, 2, 1, 3))  # [B, L, H, E] -> [B, H, L, E]
        m = b.transpose(b.reshape(t, shape=(6, 5, 4)), perm=(0, 2, 1))
        return b.reshape(m, shape=(2, 3, 4, 5))
    f = _func((2, 5, 3, 4), onnx_kt)
    g = _same_values(f, _x((2, 5, 3, 4)))
    assert _prims(g) == ["transpose"] and g.eqns[0].params["perm"] == (0, 2, 3, 1)


def test_a_transpose_between_a_merge_and_a_split_into_other_leading_axes_is_a_reshape_and_a_transpose():
    """Llama's repeated keys [B, Hkv, r, L, E]: merged to [B·Hkv·r, L, E], transposed, split to [B, H, E, L]."""
    def onnx_kt(b, x):
        m = b.transpose(b.reshape(x, shape=(8, 5, 3)), perm=(0, 2, 1))
        return b.reshape(m, shape=(2, 4, 3, 5))
    g = _same_values(_func((2, 2, 2, 5, 3), onnx_kt), _x((2, 2, 2, 5, 3)))
    assert _prims(g) == ["reshape", "transpose"] and g.eqns[1].params["perm"] == (0, 1, 3, 2)


def test_a_transpose_that_moves_the_merged_axis_is_kept():
    def moved(b, x):
        m = b.transpose(b.reshape(x, shape=(6, 5, 4)), perm=(1, 0, 2))
        return b.reshape(m, shape=(5, 2, 3, 4))
    g = _same_values(_func((2, 3, 5, 4), moved), _x((2, 3, 5, 4)))
    assert _prims(g) == ["reshape", "transpose", "reshape"]


def test_not_equal_is_one_comparison_nan_included():
    def onnx_ne(b, x):
        return b.convert(b.__getattr__("not")(b.eq(x, Lit(1.0, Type("f32")))), dtype="f32")

    def torch_ne(b, x):
        return b.convert(b.ne(x, Lit(1.0, Type("f32"))), dtype="f32")
    x = np.array([1.0, 2.0, np.nan, np.inf, -1.0], np.float32)
    a, c = _same_values(_func((5,), onnx_ne), x), _same_values(_func((5,), torch_ne), x)
    assert _prims(a) == _prims(c) == ["ne", "convert"]


def test_not_less_than_is_not_greater_or_equal():
    """not(x < y) is not x >= y for NaN: no rule."""
    f = _func((3,), lambda b, x: b.convert(b.__getattr__("not")(b.lt(x, Lit(0.0, Type("f32")))), dtype="f32"))
    assert _prims(_same_values(f, np.array([np.nan, 1.0, -1.0], np.float32))) == ["lt", "not", "convert"]


def test_a_select_on_a_literal_condition_is_its_side_broadcast():
    """T5: where(True over the batch, bias [1, H, L, L], min) is the bias broadcast (a view)."""
    def mask(b, x):
        cond = Lit(True, Type("bool", (3, 1, 4, 4)))
        return b.select(cond, x, Lit(-3.4e38, Type("f32")))
    f = _func((1, 2, 4, 4), mask)
    assert _prims(_same_values(f, _x((1, 2, 4, 4)))) == ["broadcast_to"]


def test_float32_literals_hold_float32_values():
    """0.044715 (a Python float, torch.export's GELU) and 0.044714998 (ONNX's float32) are one literal."""
    c32 = float(np.float32(0.044715))
    forms = [_func((4,), lambda b, x, c=c: b.mul(x, Lit(c, Type("f32")))) for c in (0.044715, c32)]
    lits = [simplify(f).eqns[0].ins[1].value for f in forms]
    assert lits == [c32, c32]
    _same_values(forms[0], _x((4,)))
