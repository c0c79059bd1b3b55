"""The facts a prim record states for the passes (reduction, remat, strings, whole, takes, inplace), read where
the passes once tested prim names: each is checked through the pass that reads it."""
from __future__ import annotations

from pathlib import Path

import pytest

from ksbuild.errors import KsbuildError
from ksbuild.frontends.python.source import compile_python_kernel
from ksbuild.ir.builder import Builder
from ksbuild.ir.core import Var
from ksbuild.ir.interp import eval_func
from ksbuild.ir.types import Type
from ksbuild.prims import PRIMS

WHOLE = '''\
import math

import torch


def ceil(x: float) -> int:
    return math.ceil(x) * 2 - 1


def rounded(x: float) -> int:
    return round(x) + max(math.trunc(x), 3)


def tensor(x: "float[3]") -> "int[3]":
    return torch.where(x > 0, torch.round(x), torch.ceil(x)) + torch.trunc(x)


def half(x: float) -> int:
    return math.ceil(x) * 1.5
'''


@pytest.fixture(scope="module")
def whole_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("whole") / "k.py"
    path.write_text(WHOLE)
    return path


@pytest.mark.parametrize("name, x, want", [("ceil", 2.1, 5), ("rounded", -2.5, 1), ("rounded", 3.7, 7)])
def test_rounded_floats_return_as_ints(whole_file, name, x, want):
    """ceil, round and trunc are built from floor (whole="always") and neg, select, add (whole="if_operands"):
    a kernel annotated `-> int` may return them; the result is Python's."""
    f = compile_python_kernel(whole_file, name, "f64")
    assert int(eval_func(f, [x])[0]) == want


def test_rounded_tensor_returns_as_ints(whole_file):
    import numpy as np
    f = compile_python_kernel(whole_file, "tensor", "f64")
    x = np.array([1.5, -1.5, 2.4])
    np.testing.assert_array_equal(eval_func(f, [x])[0], np.where(x > 0, np.round(x), np.ceil(x)) + np.trunc(x))


def test_a_fraction_of_a_whole_number_is_no_int(whole_file):
    with pytest.raises(KsbuildError, match="the result is a float but the annotation says i64"):
        compile_python_kernel(whole_file, "half", "f64")


def test_only_string_prims_take_strings():
    b = Builder()
    s = Var(Type("str", (3,)), "s")
    assert b.eq(s, s).type.dtype == "bool" and PRIMS["eq"].strings
    with pytest.raises(KsbuildError, match="'lt' does not take them"):
        b.lt(s, s)


def test_facts_are_well_formed():
    """A recomputed prim is elementwise; a fused reduction is not (a loop nest accumulates it)."""
    for p in PRIMS.values():
        assert not p.remat or p.elementwise, f"{p.name}: remat is for cheap elementwise prims"
        assert not (p.reduction and p.elementwise), p.name


def test_a_rule_that_crashes_names_its_prim():
    """A bug in a rule (here a jvp rule raising KeyError) keeps its exception, with a note naming the rule and prim."""
    import dataclasses

    from ksbuild.transforms.jvp import jvp_func

    def broken(b, primals, tangents):
        raise KeyError("oops")

    prim = dataclasses.replace(PRIMS["mul"], name="mul_broken_for_a_test", jvp=broken)
    try:
        b = Builder()
        x = Var(Type("f64"), "x")
        f = b.func("f", [x], list(b.bind(prim, [x, x])))
        with pytest.raises(KeyError) as e:
            jvp_func(f)
        assert "in the jvp rule of the primitive 'mul_broken_for_a_test'" in e.value.__notes__
    finally:
        del PRIMS[prim.name]
