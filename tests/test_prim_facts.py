"""The facts a prim record states for the passes (reduction, remat, strings, whole, takes, inplace, parallel,
precompute, select_backend, sign, nonfinite, masked, implies), read where the passes once tested prim names: each is
checked through the pass that reads it, or against the interpreter."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from prim_samples import SAMPLES

from ksbuild.errors import KsbuildError
from ksbuild.frontends.python.source import compile_python_kernel
from ksbuild.ir.builder import Builder
from ksbuild.ir.core import Lit, Var
from ksbuild.ir.interp import eval_func
from ksbuild.ir.types import Type
from ksbuild.prims import PRIMS
from ksbuild.prims.base import ANY, NONNEG, POSITIVE, form_name, literal_sign

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
    assert b.eq(s, s).type.dtype == "bool" and PRIMS["compare"].strings
    with pytest.raises(KsbuildError, match=r"strings are only compared for equality and moved: 'lt' does not take"):
        b.lt(s, s)
    with pytest.raises(KsbuildError, match="'add' does not take them"):
        b.add(s, s)


def test_architecture_md_counts_the_prims():
    """The prim recipe states how many prims there are (the design aimed at 30-40; merges make the core smaller)."""
    from conftest import ROOT
    doc = (ROOT / "docs/architecture.md").read_text()
    assert re.search(rf"\*\*{len(PRIMS)} prims at this commit\*\*", doc), len(PRIMS)


def test_a_form_binds_its_prim_and_prints_by_its_name():
    """b.lt(x, y) is compare[op="lt"]; the IR text prints it lt(...) and reads it back; no form hides a prim."""
    from ksbuild.ir.parser import parse_func
    from ksbuild.ir.printer import print_func
    from ksbuild.prims.base import FORMS, form_name
    b = Builder()
    x, p = Var(Type("f64", (3,)), "x"), Var(Type("bool", (3,)), "p")
    names = [n for n, (q, _) in FORMS.items() if q.name in ("compare", "logic")]
    outs = [getattr(b, n)(x, x) if FORMS[n][0].name == "compare" else getattr(b, n)(*[p] * (1 if n == "not" else 2))
            for n in names]
    f = b.func("f", [x, p], outs)
    assert names == ["lt", "le", "gt", "ge", "eq", "ne", "and", "or", "not"]
    assert [form_name(e.prim, e.params) for e in f.eqns] == names
    assert [(e.prim.name, e.params["op"]) for e in f.eqns][:2] == [("compare", "lt"), ("compare", "le")]
    text = print_func(f)
    assert "%0: bool[3] = lt(%x, %x)" in text and "compare" not in text
    assert print_func(parse_func(text)) == text
    assert not set(FORMS) & set(PRIMS)


def test_facts_are_well_formed():
    """A recomputed prim is elementwise; a fused reduction is not (a loop nest accumulates it)."""
    for p in PRIMS.values():
        assert not p.remat or p.elementwise, f"{p.name}: remat is for cheap elementwise prims"
        assert not (p.reduction and p.elementwise), p.name
        assert not p.lazy or (p.elementwise and min(p.lazy) >= 0), f"{p.name}: lazy operands of an elementwise prim"


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


def _lowered_prims(f, threads: int = 0) -> list:
    from ksbuild.transforms.pipeline import Options, lower
    return [(e.prim.name, dict(e.params)) for e in lower(f, Options(threads=threads)).eqns]


@pytest.mark.parametrize("name", ["fusion", "contract"])
def test_parallel_rule_marks_the_outer_loop_for_threads(name):
    """Prim.parallel: a fusion with an axis left after its reductions, a contraction as loops with an output, runs its
    outer loop on the threads (param threads); a full reduction does not."""
    b = Builder()
    x, y = Var(Type("f64", (64, 32)), "x"), Var(Type("f64", (64, 32)), "y")
    rows = b.reduce_sum(b.exp(x), axes=(1,))  # a fusion keeping axis 0
    total = b.reduce_sum(b.exp(y), axes=(0, 1))  # a fusion reducing everything: sequential
    product = b.einsum(x, y, spec="ij,ij->i")  # (not a matrix product: a contract of impl "loops")
    from ksbuild.transforms.pipeline import Options, lower
    eqns = lower(b.func("f", [x, y], [b.add(rows, product), total]), Options(threads=2)).eqns
    marked = {e.outs[0].type.rank: e.params.get("threads") for e in eqns if e.prim.name == name}
    assert marked.get(1) == 2, [(e.prim.name, e.params.get("threads")) for e in eqns]
    if name == "fusion":
        assert marked.get(0, "none") is None, "a fusion reducing every axis has no parallel outer loop"


@pytest.mark.parametrize("name", ["convolve"])
def test_parallel_rule_splits_a_convolution_with_work_enough(name):
    """Prim.parallel of a convolve: a convolution of the plain kernels with at least PARALLEL_MIN_MACS multiply-adds
    runs in parts on the threads; a small one does not."""
    from ksbuild.prims.convolve import PARALLEL_MIN_MACS
    from ksbuild.transforms.pipeline import Options, lower
    b = Builder()
    big, small = Var(Type("f32", (1, 32, 32, 32)), "big"), Var(Type("f32", (1, 2, 4, 4)), "small")
    wb, ws = Var(Type("f32", (32, 32, 3, 3)), "wb"), Var(Type("f32", (2, 2, 3, 3)), "ws")
    conv = dict(strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1), groups=1)
    ys = [b.conv(big, wb, **conv), b.conv(small, ws, **conv)]
    assert 32 * 32 * 32 * 32 * 9 >= PARALLEL_MIN_MACS > 2 * 2 * 4 * 4 * 9
    eqns = [e for e in lower(b.func("f", [big, wb, small, ws], ys), Options(threads=2)).eqns if e.prim.name == name]
    assert [e.params.get("threads") for e in eqns] == [2, None], [(e.params.get("impl"), e.params) for e in eqns]


PRECOMPUTED = ("qpack", "winograd_kernel")  # (each needs a case below)


def test_the_precomputed_prims_are_tested():
    assert sorted(n for n, p in PRIMS.items() if p.precompute) == sorted(PRECOMPUTED)


@pytest.mark.parametrize("name", PRECOMPUTED)
def test_precompute_folds_a_transform_of_constant_weights(name):
    """Prim.precompute: layout_constants computes a weight transform of a constant when the package is compiled (its
    eval), so no equation of it is left."""
    import numpy as np

    from ksbuild.ir.dense import Dense
    rng = np.random.default_rng(0)
    if name == "qpack":
        a = Var(Type("u8", (4, 8)), "a")
        b = Builder()
        w = b.constant(value=Dense.of(rng.integers(-128, 128, (8, 6)).astype(np.int8)))
        bias = b.constant(value=Dense.of(np.zeros(6, np.int32)))
        scale = b.constant(value=Dense.of(np.ones(6, np.float32)))
        y = b.qmatmul(a, w, bias, scale, x_zero=0, y_zero=0, lo=0, hi=255, out="u8")
        params = [a]
    else:
        params = [Var(Type("f32", (1, 32, 6, 6)), "x")]
        b = Builder()
        w = b.constant(value=Dense.of(rng.standard_normal((64, 32, 3, 3)).astype(np.float32)))
        y = b.conv(params[0], w, strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1), groups=1)
    names = [n for n, _ in _lowered_prims(b.func("f", params, [y]))]
    assert name not in names and names, names


BOUNDED = {"add": 2, "sub": 2, "mul": 1, "floordiv": 1, "convert": 1, "dim_size": 0}  # prim: its variable operands
"""The prims with a bounds rule (interval arithmetic of an integer result); mul and floordiv by the literal 3."""


def test_the_bounded_prims_are_tested():
    assert sorted(n for n, p in PRIMS.items() if p.bounds is not None) == sorted(BOUNDED)


@pytest.mark.parametrize("name", sorted(BOUNDED))
def test_bounds_rule_is_the_exact_range(name):
    """Prim.bounds: the range [lo, hi) it gives for operands in [-4, 7) is what the interpreter's results span (the
    Python frontend sizes loops and indices by it)."""
    import itertools

    from ksbuild.ir.core import Lit
    i64 = Type("i64")
    xs = [Var(i64, f"x{k}") for k in range(BOUNDED[name])]
    ins = xs + ([Lit(3, i64)] if name in ("mul", "floordiv") else [])
    params = {"dtype": "i32"} if name == "convert" else {"dim": 7} if name == "dim_size" else {}
    b = Builder()
    f = b.func("f", xs, list(b.bind(PRIMS[name], ins, params)))
    lo, hi = PRIMS[name].bounds(f.eqns[0], lambda a: (a.value, a.value + 1) if isinstance(a, Lit) else (-4, 7))
    got = [int(eval_func(f, list(v))[0]) for v in itertools.product(range(-4, 7), repeat=len(xs))]
    assert (min(got), max(got) + 1) == (lo, hi)


INT_VALUED = ("max",)
"""The prims with an int_value rule (the exact value of a signed integer scalar), each binary: one operand a variable,
the other a literal."""


def test_the_int_valued_prims_are_tested():
    assert sorted(n for n, p in PRIMS.items() if p.int_value is not None) == sorted(INT_VALUED)


def _integer_cases(name: str, literals):
    """(f, v, case) for the binary integer prim `name`: f(x) = name(x, c) and name(c, x) for each literal c, each at
    x = v for v in -4..6 (the cases of the int_value and nonneg rules' tests)."""
    from ksbuild.ir.core import Lit
    i64 = Type("i64")
    for c in literals:
        for x_first in (True, False):
            x = Var(i64, "x")
            b = Builder()
            ins = [x, Lit(c, i64)] if x_first else [Lit(c, i64), x]
            f = b.func("f", [x], list(b.bind(PRIMS[name], ins, {})))
            for v in range(-4, 7):
                yield f, v, (c, x_first, v)


@pytest.mark.parametrize("name", INT_VALUED)
def test_int_value_rule_is_the_value(name):
    """Prim.int_value: wherever it gives a value (x of -4..6 against the literals -3, 0, 2 on either side, its sign
    known), that is what the interpreter computes (codegen/int_signs.py drops an index's clamp by it: max(n, 0) is n
    for n >= 0); and it gives one somewhere."""
    from ksbuild.ir.core import Lit
    given = 0
    for f, v, case in _integer_cases(name, (-3, 0, 2)):
        def value_of(a):
            return int(a.value) if isinstance(a, Lit) else v

        got = PRIMS[name].int_value(f.eqns[0], value_of, lambda a: value_of(a) >= 0)
        if got is not None:
            given += 1
            assert got == int(eval_func(f, [v])[0]), case
    assert given, f"the int_value rule of {name} gives no value on any case"


def _gather_in_a_call(b, t, idx):
    """exp(t[idx]) in a helper the kernel calls."""
    inner = Builder()
    ps = [Var(t.type, "t"), Var(idx.type, "idx")]
    fn = inner.func("helper", ps, [inner.exp(inner.gather(ps[0], ps[1], axis=0))])
    return b.bind(PRIMS["call"], [t, idx], {"fn": fn})[0]


def _gather_in_a_fusion(b, t, idx):
    """exp(t[idx]), which lowering makes one fusion holding the gather."""
    return b.exp(b.gather(t, idx, axis=0))


RUNS = {"call": _gather_in_a_call, "fusion": _gather_in_a_fusion}
"""The prims whose record names the sub-function they run (Prim.runs): a gather from t[m] at idx[k] inside it."""


def test_the_prims_that_run_a_body_are_tested():
    assert sorted(n for n, p in PRIMS.items() if p.runs) == sorted(RUNS)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_shape_checks_look_inside_the_body_a_prim_runs(name):
    """Prim.runs: the export's checks of its arguments (codegen/viewmodel.py: status 1 when an element is taken
    from an empty axis) include those of the gather inside the sub-function the prim's equation runs."""
    from ksbuild.codegen.viewmodel import _taken
    from ksbuild.transforms.pipeline import lower
    t, idx = Var(Type("f64", ("m",)), "t"), Var(Type("i64", ("k",)), "idx")
    b = Builder()
    f = lower(b.func("f", [t, idx], [RUNS[name](b, t, idx)]))
    assert [e.prim.name for e in f.eqns] == [name], [e.prim.name for e in f.eqns]
    assert _taken(f, ["m", "k"]) == ["(m < 1 && k > 0)"]


UNMASKED = ("mulz", "mulzz")
"""The masked products (0 against an inf or nan is 0), whose record names the product they are otherwise."""


def test_the_masked_products_are_tested():
    assert sorted(n for n, p in PRIMS.items() if p.unmasked is not None) == sorted(UNMASKED)


@pytest.mark.parametrize("name", UNMASKED)
def test_a_masked_product_by_a_finite_literal_is_the_unmasked_product(name):
    """Prim.unmasked: simplify makes x ⊙ 2.5 (either side) the record's unmasked product, which gives the same values,
    zeros, infs and nans included; x ⊙ inf stays masked."""
    import numpy as np

    from ksbuild.ir.core import Lit
    from ksbuild.transforms.simplify import simplify_once
    f64 = Type("f64", (5,))
    x = np.array([0.0, np.inf, -np.nan, -3.0, 1.5])
    for c, plain in ((2.5, True), (np.inf, False)):
        for lit_first in (False, True):
            v = Var(f64, "x")
            b = Builder()
            ins = [Lit(c, Type("f64")), v] if lit_first else [v, Lit(c, Type("f64"))]
            f = b.func("f", [v], list(b.bind(PRIMS[name], ins, {})))
            g = simplify_once(f)
            want = PRIMS[name].unmasked if plain else PRIMS[name]
            assert [e.prim for e in g.eqns] == [want], (c, lit_first, [e.prim.name for e in g.eqns])
            np.testing.assert_array_equal(eval_func(g, [x])[0], eval_func(f, [x])[0])


MASKED = ("ctmul",)
"""The products a (co)tangent makes whose record names the masked product the nonfinite pass binds in their place."""


@pytest.mark.parametrize("name", MASKED)
def test_a_product_by_a_maybe_nonfinite_value_is_masked(name):
    """Prim.masked: transforms/nonfinite.py makes prim(c, log(x)) the record's masked product (log of an x not known
    > 0 may be nan), which gives 0 where c is 0 against that nan; prim(c, exp(x)) stays as it is (exp is finite)."""
    import numpy as np

    from ksbuild.transforms.nonfinite import mask_nonfinite
    f64 = Type("f64", (3,))
    x, c = np.array([-1.0, 0.0, 2.0]), np.array([0.0, 0.0, 1.5])
    for fn, masked in (("log", True), ("exp", False)):
        vx, vc = Var(f64, "x"), Var(f64, "c")
        b = Builder()
        f = b.func(name, [vx, vc], list(b.bind(PRIMS[name], [vc, getattr(b, fn)(vx)], {})))
        g = mask_nonfinite(f)
        assert g.eqns[-1].prim is (PRIMS[name].masked if masked else PRIMS[name]), (fn, g.eqns[-1].prim)
        if masked:
            assert list(eval_func(g, [x, c])[0][:2]) == [0.0, 0.0]


IMPLYING = ("compare",)
"""The prims whose bool result shows something of their operands' signs (Prim.implies)."""


@pytest.mark.parametrize("name", IMPLYING)
def test_a_condition_shows_its_operands_sign(name):
    """Prim.implies: for each form, a literal c of -1, 0, 2 on either side and x of -3..3 in halves (and nan), where
    the condition is `holds` the operand it names has the sign it says; and it says something somewhere (the
    nonfinite pass gives the branches of `if x > 0` those signs: log(x) in the then branch is finite)."""
    import numpy as np
    said = 0
    for op in PRIMS[name].forms:
        for c in (-1.0, 0.0, 2.0):
            for lit_first in (False, True):
                x = Var(Type("f64"), "x")
                b = Builder()
                ins = [Lit(c, Type("f64")), x] if lit_first else [x, Lit(c, Type("f64"))]
                f = b.func(op, [x], list(b.bind(PRIMS[name], ins, {"op": op})))
                for v in [*np.arange(-3, 3.5, 0.5), np.nan]:
                    holds = bool(eval_func(f, [v])[0])
                    for atom, sign in PRIMS[name].implies(f.eqns[0], holds):
                        said += 1
                        assert atom is x and (np.isnan(v) or (v > 0 if sign == POSITIVE else v >= 0)), (op, c, v)
    assert said, f"the implies rule of {name} says nothing on any case"


NAME_TEST = re.compile(r"prim\.name *(==|!=|in|not in) |\.prim is ")  # (docs/architecture.md's check, as grep -E)


def name_tests_outside_prims(root: Path) -> dict[str, int]:
    """File (relative to ksbuild/) -> how many of its lines test a prim's name, outside ksbuild/prims/."""
    counts: dict[str, int] = {}
    for path in sorted((root / "ksbuild").rglob("*.py")):
        rel = path.relative_to(root / "ksbuild").as_posix()
        n = sum(1 for line in path.read_text().splitlines() if NAME_TEST.search(line))
        if n and not rel.startswith("prims/"):
            counts[rel] = n
    return counts


def test_architecture_md_counts_the_name_tests_outside_prims():
    """The prim recipe of docs/architecture.md lists every file outside prims/ that tests a prim's name, with the
    number of such lines, and their total: a new one shows up here, to be made a record's fact or listed."""
    from conftest import ROOT
    doc = (ROOT / "docs/architecture.md").read_text()
    item = doc[doc.index("4. **Name tests that remain outside the record**"):doc.index("5. **A way in**")]
    listed = {m[1]: int(m[2]) for m in re.finditer(r"^ +- `([\w/]+\.py)` (\d+):", item, re.M)}
    found = name_tests_outside_prims(ROOT)
    assert listed == found, {f: (listed.get(f), found.get(f)) for f in listed.keys() | found.keys()
                             if listed.get(f) != found.get(f)}
    assert re.search(rf"\*\*: {sum(found.values())} at this commit", item), sum(found.values())


COSTLY = ("atan2", "extern_call", "fmod", "hypot", "math", "pow")
"""The prims whose record says a call of them is worth computing once rather than in every iteration of a loop."""


def by_form(names) -> list[str]:
    """names, each prim with forms as one case per form (its first sample of the form: math:exp, ..., math:tanh), so
    that a fact the prim states is checked on every form, in a test whose id names the function."""
    from prim_samples import SAMPLES, prim_name
    cases = []
    for n in names:
        forms = PRIMS[n].forms.values()
        cases += [next(k for k, s in SAMPLES.items() if prim_name(k) == n and s[1].items() >= f.items())
                  for f in forms] or [n]
    return cases


def _scalar_sample(name: str):
    """The first sample of prim `name` whose operands are all f64, taken as scalars: (its params, its arguments, drawn
    as the sample draws them)."""
    import numpy as np
    from prim_samples import SAMPLES, prim_name
    for key, (types, params, samplers, _) in SAMPLES.items():
        if name in (key, prim_name(key)) and types and all(t.dtype == "f64" for t in types):
            rng = np.random.default_rng(17)
            return params, [float(s(rng, ())) for s in samplers]
    raise AssertionError(f"no sample of {name} with f64 operands")


@pytest.mark.parametrize("name", by_form(COSTLY))
def test_hoist_computes_a_costly_loop_invariant_once(name):
    """Prim.costly: in `for k in range(n): c = c + prim(a, ...)` with a, ... the same in every iteration, the hoist
    pass computes the prim's value once, before the loop (no equation of it is left in the body), and the loop's value
    is the same."""
    from prim_samples import F, I, _fn, prim_name

    from ksbuild.transforms.hoist import hoist
    params, args = _scalar_sample(name)
    prim = prim_name(name)
    consts = [Type("f64")] * len(args)
    body = _fn("body", (I, *consts, F), lambda b, k, *rest: [b.add(rest[-1], b.bind(PRIMS[prim], rest[:-1],
                                                                                     params)[0])])
    b = Builder()
    ps = [Var(I, "n"), *[Var(t, f"a{i}") for i, t in enumerate(consts)], Var(F, "c")]
    f = b.func(prim, ps, list(b.bind(PRIMS["loop"], ps, {"body": body, "n_consts": len(args), "n_carry": 1,
                                                       "length": None, "reverse": False})))
    g = hoist(f)
    loop = next(e for e in g.eqns if e.prim.name == "loop")
    assert not [e for e in loop.params["body"].eqns if e.prim.name == prim], f"{name} is computed in every iteration"
    assert [e.prim.name for e in g.eqns].count(prim) == 1
    want = eval_func(f, [3, *args, 0.5])[0]
    assert float(eval_func(g, [3, *args, 0.5])[0]) == pytest.approx(float(want), rel=1e-15)


ELEMENTWISE = ("abs", "add", "atan2", "bitcast", "bitwise", "compare", "convert", "div", "extern_call", "floor",
               "floordiv", "fmod", "hypot", "iota", "ipow", "logic", "math", "max", "min", "mod", "mul", "mulz",
               "mulzz", "neg", "pow", "select", "sign", "sub")
"""The prims whose record says they compute each element from the same element of their operands (but ctmul and
lane_owned, which lowering expands into others)."""


def _vector_sample(name: str):
    """The first sample of prim `name` with operands, each made a vector of 5 of its dtype: (its types, its params,
    arguments drawn as the sample draws them)."""
    import numpy as np
    from prim_samples import SAMPLES, prim_name
    for key, (types, params, samplers, _) in SAMPLES.items():
        if name in (key, prim_name(key)):  # (an operandless one, iota's, as it is)
            rng = np.random.default_rng(18)
            args = [rng.random(5) < 0.5 if s is None else s(rng, (5,)) for s in samplers]
            return [Type(t.dtype, (5,)) for t in types], params, args
    raise AssertionError(f"{name} has no sample")


@pytest.mark.parametrize("name", by_form(ELEMENTWISE))
def test_an_elementwise_prim_joins_a_loop_nest(name):
    """Prim.elementwise: the prim applied to vectors is computed inside a fusion's loop nest (one element at a time)
    after lowering, and the lowered function has its value."""
    import numpy as np
    from prim_samples import prim_name

    from ksbuild.transforms.pipeline import lower
    types, params, args = _vector_sample(name)
    prim = prim_name(name)
    b = Builder()
    ps = [Var(t, f"x{i}") for i, t in enumerate(types)]
    f = b.func(prim, ps, list(b.bind(PRIMS[prim], ps, params)))
    g = lower(f)
    fused = [e for e in g.eqns if e.prim.name == "fusion" and prim in {q.prim.name for q in e.params["body"].eqns}]
    assert fused, f"{name} is not computed in a loop nest: {[e.prim.name for e in g.eqns]}"
    for got, want in zip(eval_func(g, args), eval_func(f, args)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


INT_SIGNED = ("add", "div", "floordiv", "max", "min", "mod", "mul")
"""The binary integer prims whose sign rule knows a result >= 0 from operands >= 0 (codegen/int_signs.py reads it)."""


@pytest.mark.parametrize("name", INT_SIGNED)
def test_sign_rule_of_integers_is_never_wrong(name):
    """Prim.sign on integers: wherever it says a result is >= 0 (or > 0), for x of -4..6 against the literals -3, 2
    and 5 on either side, each operand's sign known, the interpreter's value is (codegen/int_signs.py clamps a never
    negative index from above only, and divides one by a shift); and it says so somewhere."""
    said = 0
    for f, v, case in _integer_cases(name, (-3, 2, 5)):
        def sign_of(a):
            return literal_sign(a.value if isinstance(a, Lit) else v)
        known, got = PRIMS[name].sign(f.eqns[0], sign_of), int(eval_func(f, [v])[0])
        said += known >= NONNEG
        assert got >= 0 if known == NONNEG else got > 0 if known == POSITIVE else True, case
    assert said, f"the sign rule of {name} says no result is >= 0 on any case"


def _facts_stated(p) -> list[str]:
    """What prim p's record (and each of its forms' records) leaves unstated of the sign and nonfinite facts."""
    from ksbuild.prims.math_functions import NOWHERE
    missing = [f for f in ("sign", "nonfinite") if not callable(getattr(p, f))]
    for form, rec in p.table.items():
        if not callable(getattr(rec, "sign", None)):
            missing.append(f"{form}.sign")
        if getattr(rec, "finite_on", None) not in (ANY, NONNEG, POSITIVE, NOWHERE):
            missing.append(f"{form}.finite_on")
    return missing


@pytest.mark.parametrize("name", sorted(PRIMS))
def test_record_states_its_sign_and_where_it_is_finite(name):
    """Prim.sign and Prim.nonfinite (and, for math, each MathFn's sign and finite_on) are stated by every record:
    no default stands in for them, since a prim assumed finite would let transforms/nonfinite.py leave a product by
    its inf or nan unmasked (0 * nan), and a prim assumed >= 0 would drop an index's clamp."""
    assert not _facts_stated(PRIMS[name]), f"{name} does not state {_facts_stated(PRIMS[name])}"


def test_an_unstated_fact_fails_the_completeness_test():
    """A new record without the facts is refused (the test above fails for it), not taken as finite."""
    import dataclasses

    from ksbuild.prims.math_functions import FUNCTIONS
    bare = object.__new__(type(PRIMS["add"]))  # (a copy that is not registered: a record as a new prim writes it)
    for k, v in vars(PRIMS["add"]).items():
        object.__setattr__(bare, k, v)
    object.__setattr__(bare, "nonfinite", None)
    assert _facts_stated(bare) == ["nonfinite"]
    object.__setattr__(bare, "table", {"exp2": dataclasses.replace(FUNCTIONS["exp"], finite_on=None)})
    assert _facts_stated(bare) == ["nonfinite", "exp2.finite_on"]


def _sign_of_array(a) -> int:
    import numpy as np
    a = np.asarray(a)
    if a.dtype.kind not in "fiu" or not a.size:
        return ANY
    return POSITIVE if np.all(a > 0) else NONNEG if np.all(a >= 0) else ANY


def _signed(args, r: int) -> list:
    """The sample's arguments with float operand k as drawn, made < 0, made >= 0 or made > 0 by bits 2k, 2k + 1 of r
    (the first two operands: every pair of those once in 16 r); >= 0 has the elements [::2] 0, -0.0 when bit 4 of r
    is set; bit 5 makes them a thousand times larger (exp(-1000) underflows to 0)."""
    import numpy as np

    def signed(a, kind):
        a = a * 1000 if r >> 5 & 1 else a
        if kind in (0, 1, 3):
            return (a, -np.abs(a) - 0.25, None, np.abs(a) + 0.25)[kind]
        a = np.array(np.abs(a), dtype=a.dtype)
        a.reshape(-1)[::2] = -0.0 if r >> 4 & 1 else 0.0
        return a
    with np.errstate(over="ignore"):
        return [signed(a, (r >> 2 * k if k < 2 else r + k) & 3) if a.dtype.kind == "f" else a
                for k, a in enumerate(args)]


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_sign_and_nonfinite_rules_hold_on_the_sample(name):
    """Prim.sign and Prim.nonfinite against the interpreter, on 64 draws of the prim's sample with its float operands
    as drawn, made < 0, made >= 0 (zeros and -0.0 among them) or made > 0, half of them large (`_signed`), each
    operand's sign that of its values (an integer operand's as drawn): where the rule says the result is >= 0 (> 0),
    its finite elements are; where the nonfinite rule says finite operands give finite results, they do but for
    overflow (transforms/nonfinite.py masks no product by such a value; codegen/int_signs.py drops an index's
    clamp)."""
    import numpy as np
    from prim_samples import prim_name
    from test_prims import sample
    types, params, _, _ = SAMPLES[name]
    prim = PRIMS[prim_name(name)]
    b = Builder()
    ps = [Var(t, f"x{i}") for i, t in enumerate(types)]
    f = b.func(name, ps, list(b.bind(prim, ps, params)))
    e = f.eqns[-1]
    rng = np.random.default_rng(31)
    for r in range(64):
        drawn = [np.asarray(a) for a in sample(name, rng)]
        args = drawn if r == 0 else _signed(drawn, r)
        signs = {p: _sign_of_array(a) for p, a in zip(ps, args)}
        sign, nonfinite = prim.sign(e, signs.get), prim.nonfinite(e, signs.get)
        with np.errstate(all="ignore"):
            outs = [np.asarray(o) for o in eval_func(f, args)]
        assert sign == ANY or len(outs) == 1, f"{name}: a sign rule of a prim with several results says {sign}"
        y = outs[0]
        if sign > ANY and y.dtype.kind in "fiub":  # (a bool's: False is 0)
            ok = np.isfinite(y) if y.dtype.kind == "f" else np.ones(y.shape, bool)
            assert np.all(y[ok] > 0 if sign == POSITIVE else y[ok] >= 0), (r, sign, signs, args, y)
        finite_in = all(np.all(np.isfinite(a)) for a in args if a.dtype.kind == "f")
        if not nonfinite and finite_in and r < 32:  # (overflow aside: not on the large operands)
            assert all(np.all(np.isfinite(o)) for o in outs if o.dtype.kind == "f"), (r, signs, args, outs)


def _with_strings(name: str):
    """The samples of prim `name` with each float operand made a string tensor (their values formatted): (types,
    params, the params on strings, float arguments, string arguments); compare only in the forms strings take."""
    import numpy as np
    from prim_samples import SAMPLES, prim_name
    rng = np.random.default_rng(19)
    for key, (types, params, samplers, _) in SAMPLES.items():
        if prim_name(key) != name or not any(t.is_float for t in types) or params.get("op") in ("lt", "le", "gt", "ge"):
            continue
        args = [rng.random(t.shape) < 0.5 if s is None else s(rng, tuple(t.shape)) for t, s in zip(types, samplers)]
        words = [np.vectorize(_word, otypes=[object])(a) if t.is_float else a for t, a in zip(types, args)]
        as_words = dict(params, dtype="str") if name == "convert" else params  # (str to str only)
        yield [Type("str", t.shape) if t.is_float else t for t in types], params, as_words, args, words


def _word(v) -> str:
    return f"w{float(v):.6f}"


MOVERS = ("broadcast_to", "compare", "convert", "gather", "index", "index_set", "pad", "reshape", "select", "slice",
          "stop_gradient", "transpose", "window")
"""The prims whose record says they take strings (they move them, or compare them for equality), but the prims that
carry functions (CARRIERS below)."""


@pytest.mark.parametrize("name", MOVERS)
def test_a_prim_that_takes_strings_moves_them(name):
    """Prim.strings: the prim binds on string operands (others refuse them: test_only_string_prims_take_strings), and
    moves them as it moves numbers (or compares them as it compares numbers): its result on the formatted values is
    its result on the values, formatted (a literal it writes aside: pad's fill)."""
    import numpy as np
    cases = list(_with_strings(name))
    assert cases, f"no sample of {name} has a float operand"
    for types, params, as_words, args, words in cases:
        b = Builder()
        ps = [Var(t, f"x{i}") for i, t in enumerate(types)]
        f = b.func(name, ps, list(b.bind(PRIMS[name], ps, as_words)))
        got = np.asarray(eval_func(f, words)[0])
        b = Builder()
        qs = [Var(Type("f64", t.shape) if t.dtype == "str" else t, f"x{i}") for i, t in enumerate(types)]
        want = np.asarray(eval_func(b.func(name, qs, list(b.bind(PRIMS[name], qs, params))), args)[0])
        if f.out_types[0].dtype == "str":
            want = np.vectorize(_word, otypes=[object])(np.asarray(want, np.float64))
            moved = want != _word(0.0) if name == "pad" else np.ones(want.shape, bool)
            np.testing.assert_array_equal(got[moved], want[moved])
        else:
            np.testing.assert_array_equal(got, want)


def test_a_constant_holds_strings():
    """A constant string tensor (an ONNX string initializer) binds and evaluates (constant states no `strings`: that
    fact is about operands, which a constant has none of)."""
    import numpy as np

    from ksbuild.ir.dense import Dense
    b = Builder()
    c = b.constant(value=Dense.of(np.array(["a", "bc"], dtype=object)))
    assert c.type == Type("str", (2,))
    assert list(eval_func(b.func("constant", [], [c]), [])[0]) == ["a", "bc"]


REMAT = ("add", "compare", "ctmul", "div", "ipow", "lane_owned", "mul", "neg", "sub")
"""The cheap elementwise prims that a partial evaluation recomputes rather than stores."""


@pytest.mark.parametrize("name", REMAT)
def test_partial_eval_recomputes_a_cheap_prim(name):
    """Prim.remat: in f(x, y) = g(prim(x, c)) · y split with x known and y not (a derivative's split: the unknown
    part is the linear one), the unknown part computes prim(x, c) again from x instead of reading its stored value
    (one residual, x; no residual of the prim's result), and the parts compose to f."""
    import numpy as np
    from prim_samples import SAMPLES, prim_name

    from ksbuild.ir.core import Lit
    from ksbuild.transforms.partial_eval import partial_eval
    types, params, _, _ = next(s for k, s in SAMPLES.items() if prim_name(k) == name)
    v = Type("f64", (2,) + tuple(types[0].shape[1:]) if types[0].rank else (2,))
    b = Builder()
    x, y = Var(v, "x"), Var(v, "y")
    ins = []
    for t in types:  # x itself where the sample has a float, a literal or x < 0 elsewhere
        if t.is_float and x not in ins:
            ins.append(x)
        elif t.dtype == "bool":
            ins.append(b.lt(x, Lit(0.0, Type("f64"))))
        else:
            ins.append(Lit(2.0 if t.is_float else 2, Type(t.dtype)))
    r = b.bind(PRIMS[name], ins, params)[0]
    out = b.mul(b.select(r, y, b.neg(y)) if r.type.dtype == "bool" else r, y)
    f = b.func(name, [x, y], [out])
    known, unknown, _, n_res = partial_eval(f, [True, False])
    assert n_res == 1 and known.results[-1] is known.params[0], f"{name}'s result is stored, not recomputed"
    assert name in [e.prim.name for e in unknown.eqns]
    xs = np.linspace(-1, 1, int(np.prod(v.shape))).reshape(v.shape)
    ys = np.linspace(0.5, 2, int(np.prod(v.shape))).reshape(v.shape)
    res = eval_func(known, [xs])
    np.testing.assert_allclose(eval_func(unknown, res[len(res) - n_res:] + [ys])[0], eval_func(f, [xs, ys])[0],
                               rtol=1e-15)


WHOLE_PRIMS = ("add", "convert", "ctmul", "floor", "max", "min", "mul", "neg", "select", "sub")
"""The prims whose record says their float results hold whole numbers (always, or when their operands do)."""


@pytest.mark.parametrize("name", WHOLE_PRIMS)
def test_whole_numbers_made_of_whole_numbers(name):
    """Prim.whole: the Python frontend takes the prim's float result, made from whole numbers (floor(x) for each float
    operand), for one an `-> int` kernel may return; from operands that are not, only a prim whose results are
    always whole (floor)."""
    from prim_samples import SAMPLES, prim_name

    from ksbuild.frontends.python.compiler import _whole_numbers
    types, params, _, _ = next(s for k, s in SAMPLES.items() if prim_name(k) == name)
    for floored in (True, False):
        b = Builder()
        ins = [b.floor(Var(t, f"x{i}")) if t.is_float and floored else Var(t, f"x{i}") for i, t in enumerate(types)]
        out = b.bind(PRIMS[name], ins, params)[0]
        assert _whole_numbers(b, out) == (floored or name == "floor"), floored


IN_PLACE = ("index_add", "index_set", "scatter_add")
"""The prims whose record names an operand they may update in place (contract's, with acc, which the passes make,
has a test of its own below)."""


@pytest.mark.parametrize("name", IN_PLACE)
def test_an_update_writes_into_its_operands_buffer(name):
    """Prim.inplace: the prim's sample with its first operand a buffer of the function's own (exp(x), read by nothing
    after) writes its result into that buffer (the memory plan's place `reuse`), not a copy; the lowered function has
    the sample's value."""
    import numpy as np
    from prim_samples import SAMPLES, prim_name
    from test_prims import sample

    from ksbuild.transforms.pipeline import lower
    key = next(k for k in SAMPLES if prim_name(k) == name and SAMPLES[k][0][0].rank == 2)
    types, params, _, _ = SAMPLES[key]
    b = Builder()
    ps = [Var(t, f"x{i}") for i, t in enumerate(types)]
    out = b.bind(PRIMS[name], [b.exp(ps[0])] + ps[1:], params)[0]
    f = b.func(name, ps, [b.mul(out, out)])
    g = lower(f)
    e = next(e for e in g.eqns if e.prim.name == name)
    place = g.plan.places.get(e.outs[0])
    assert place is not None and place.kind == "reuse" and place.of is e.ins[0], place
    args = sample(key, np.random.default_rng(20))
    np.testing.assert_allclose(eval_func(g, args)[0], eval_func(f, args)[0], rtol=1e-15)


RECOMPUTED = ("ctmul", "lane_owned")
"""The elementwise prims the expand pass removes before any loop nest is made (so that
test_an_elementwise_prim_joins_a_loop_nest cannot see them): their fact is read by vjp's split into fwd and bwd, which
recomputes elementwise residuals."""


@pytest.mark.parametrize("name", RECOMPUTED)
def test_bwd_recomputes_an_elementwise_residual(name):
    """Prim.elementwise read by transforms/vjp.py: in f = sin(prim(...x...)), the residual cos(prim(x)) is made of x by
    elementwise prims, so fwd(f) stores no float residual (bwd(f) computes it again from x), and bwd(f) with what
    fwd(f) stores is the gradient vjp(f) gives."""
    import numpy as np

    from ksbuild.transforms.vjp import bwd_func, fwd_func, vjp_func
    v = Type("f64", (3,))
    x, c, p = Var(v, "x"), Var(v, "c"), Var(Type("bool", (3,)), "p")
    b = Builder()
    r = b.bind(PRIMS[name], [c, x] if name == "ctmul" else [p, x], {} if name == "ctmul" else {"then": True})[0]
    f = b.func(name, [c if name == "ctmul" else p, x], [b.sin(r)])
    fwd = fwd_func(f)
    assert not [t for t in fwd.out_types[1:] if t.is_float], f"fwd({name}) stores {fwd.out_types[1:]}"
    first = np.array([0.5, -1.0, 2.0]) if name == "ctmul" else np.array([True, False, True])
    args, ct = [first, np.array([0.3, 0.7, -1.1])], np.array([1.0, -2.0, 0.5])
    stored = list(eval_func(fwd, args))[1:]
    want = eval_func(vjp_func(f), args + [ct])[-1]
    np.testing.assert_allclose(eval_func(bwd_func(f), args + stored + [ct])[-1], want, rtol=1e-15)


@pytest.mark.parametrize("name", ["contract"])
def test_a_product_adds_into_its_accumulators_buffer(name):
    """Prim.inplace of contract: exp(x) + a @ c, the sum read by nothing after, is one contract[acc=True] (the
    accumulate pass) whose result the memory plan places in exp(x)'s buffer (`reuse`), not in a copy; the lowered
    function has the function's value."""
    import numpy as np

    from ksbuild.transforms.pipeline import lower
    m = Type("f64", (4, 4))
    x, a, c = Var(m, "x"), Var(m, "a"), Var(m, "c")
    b = Builder()
    y = b.add(b.exp(x), b.einsum(a, c, spec="ij,jk->ik"))
    f = b.func(name, [x, a, c], [b.mul(y, y)])
    g = lower(f)
    e = next(e for e in g.eqns if e.prim.name == name)
    place = g.plan.places.get(e.outs[0])
    assert e.params["acc"] and place is not None and place.kind == "reuse" and place.of is e.ins[0], place
    args = list(np.random.default_rng(21).standard_normal((3, 4, 4)))
    np.testing.assert_allclose(eval_func(g, args)[0], eval_func(f, args)[0], rtol=1e-14)


VIEWS = ("broadcast_to", "constant", "index", "reshape", "slice", "transpose", "window")
"""The prims whose record says their result is a view of their first operand's storage (or of static data)."""


@pytest.mark.parametrize("name", VIEWS)
def test_a_view_takes_no_buffer_of_its_own(name):
    """Prim.view: the prim's sample, applied to a buffer of the function's own (exp(x)), is left an equation of its own
    by lowering and the memory plan gives its result no place (it reads its operand's buffer); the lowered function
    has the sample's value."""
    import numpy as np
    from prim_samples import SAMPLES, prim_name
    from test_prims import sample

    from ksbuild.transforms.pipeline import lower
    key = next(k for k in SAMPLES if prim_name(k) == name)
    types, params, _, _ = SAMPLES[key]
    b = Builder()
    ps = [Var(t, f"x{i}") for i, t in enumerate(types)]
    out = b.bind(PRIMS[name], [b.exp(ps[0])] + ps[1:] if ps else [], params)[0]
    f = b.func(name, ps, [b.mul(out, out), b.neg(out)])
    g = lower(f)
    views = [e for e in g.eqns if e.prim.name == name]
    assert views and not [e for e in views if e.outs[0] in g.plan.places], [(e.prim.name, e.outs) for e in g.eqns]
    args = sample(key, np.random.default_rng(21))
    for got, want in zip(eval_func(g, args), eval_func(f, args)):
        np.testing.assert_allclose(got, want, rtol=1e-15)


TAKES = ("gather", "index", "index_add", "index_set", "scatter_add")
"""The prims whose record says they take (or write) elements at positions along an axis of their first operand."""


@pytest.mark.parametrize("name", TAKES)
def test_taking_from_an_empty_axis_is_checked(name):
    """Prim.takes: the prim's sample with the axis it takes from m long (a dim) makes the export check `m < 1` before
    anything is read (codegen/viewmodel.py: status 1; there is no element to take)."""
    from prim_samples import SAMPLES, prim_name

    from ksbuild.codegen.viewmodel import _taken
    types, params, _, _ = next(s for k, s in SAMPLES.items() if prim_name(k) == name)
    axis = params["axis"]
    shape = list(types[0].shape)
    shape[axis] = "m"
    b = Builder()
    ps = [Var(Type(types[0].dtype, tuple(shape)), "x")] + [Var(t, f"x{i}") for i, t in enumerate(types[1:], 1)]
    f = b.func(name, ps, list(b.bind(PRIMS[name], ps, params)))
    assert _taken(f, ["m"]) == ["m < 1"], _taken(f, ["m"])


def _product_then_relu(b, name: str, rng):
    """relu(p + bias) after a product p (a matrix product for contract, a convolution for convolve): (params, args)."""
    from ksbuild.ir.core import Lit
    f32 = Type("f32")
    if name == "contract":
        x, w = Var(Type("f32", (16, 32)), "x"), Var(Type("f32", (32, 24)), "w")
        bias = Var(Type("f32", (24,)), "bias")
        p = b.einsum(x, w, spec="ij,jk->ik")
    else:
        x, w = Var(Type("f32", (1, 8, 6, 6)), "x"), Var(Type("f32", (8, 8, 3, 3)), "w")
        bias = Var(Type("f32", (8, 1, 1)), "bias")
        p = b.conv(x, w, strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1), groups=1)
    y = b.max(b.add(p, bias), Lit(0.0, f32))
    params = [x, w, bias]
    return params, [rng.standard_normal(tuple(v.type.shape)).astype("float32") for v in params], y


@pytest.mark.parametrize("name", ["contract", "convolve"])
def test_an_elementwise_epilogue_runs_as_the_product_stores(name):
    """Prim.epilogue_impls: relu(p + bias) after a matrix product or a convolution p whose kernel applies epilogues
    becomes the product with the bias and relu as its epilogue (transforms/fuse_epilogue.py), no fusion after it;
    the lowered function has the same values."""
    import numpy as np

    from ksbuild.transforms.pipeline import lower
    b = Builder()
    params, args, y = _product_then_relu(b, name, np.random.default_rng(22))
    f = b.func(name, params, [y])
    g = lower(f)
    assert [e.prim.name for e in g.eqns if e.prim.name in (name, "fusion")] == [name], [e.prim.name for e in g.eqns]
    assert next(e for e in g.eqns if e.prim.name == name).params.get("epilogue") is not None
    np.testing.assert_allclose(eval_func(g, args)[0], eval_func(f, args)[0], rtol=1e-5, atol=1e-5)


SINKS = ("cond", "cond_select")
"""The ifs whose operands are their branches' params: a value only one branch reads may be computed in it."""


@pytest.mark.parametrize("name", SINKS)
def test_a_value_one_branch_reads_is_computed_in_it(name):
    """Prim.sinks: in `t = sin(x); r = t * y if p else y`, transforms/sink.py moves sin into the branch that reads it
    (nothing computes it before the if), and the function keeps its value both ways."""
    import numpy as np
    from prim_samples import _fn

    from ksbuild.transforms.sink import sink
    v = Type("f64", (4,))
    b = Builder()
    p, x, y = Var(Type("bool"), "p"), Var(v, "x"), Var(v, "y")
    t = b.sin(x)
    then_fn = _fn("then", (v, v), lambda c, t, y: [c.mul(t, y)])
    else_fn = _fn("else", (v, v), lambda c, t, y: [y])
    out = b.bind(PRIMS[name], [p, t, y], {"then_fn": then_fn, "else_fn": else_fn})
    f = b.func(name, [p, x, y], list(out))
    g = sink(f)
    assert [e.prim.name for e in g.eqns] == [name], [e.prim.name for e in g.eqns]
    assert "sin" in [form_name(e.prim, e.params) for e in g.eqns[0].params["then_fn"].eqns]
    xs, ys = np.linspace(-1, 1, 4), np.linspace(1, 2, 4)
    for pv in (True, False):
        np.testing.assert_array_equal(eval_func(g, [pv, xs, ys])[0], eval_func(f, [pv, xs, ys])[0])


BRANCHES = ("cond", "cond_select", "lane_cond")
"""The ifs whose sub-functions are alternatives, each run only where its condition holds."""


@pytest.mark.parametrize("name", BRANCHES)
def test_a_size_inside_a_branch_is_left_to_its_condition(name):
    """Prim.branches: a size n - 2 met only inside a branch (x[:n - 2], taken where n > 2) is not one of the sizes the
    export checks before it runs (codegen/viewmodel.py: status err_shape when one is negative); the same size met
    outside the if is."""
    from prim_samples import SAMPLES, _fn

    from ksbuild.codegen.viewmodel import _differences
    x = Var(Type("f64", ("n",)), "x")
    p = Var(SAMPLES[next(k for k in SAMPLES if k.split(":")[0] == name)][0][0], "p")
    v = Type("f64", ("n",))

    def head(c, x):
        return c.reduce_sum(c.slice(x, axis=0, start=0, stop="n - 2"), axes=(0,))
    then_fn = _fn("then", (v,), lambda c, x: [c.add(x, head(c, x))])
    else_fn = _fn("else", (v,), lambda c, x: [x])
    params = dict(next(s[1] for k, s in SAMPLES.items() if k.split(":")[0] == name), then_fn=then_fn, else_fn=else_fn)
    if "lanes" in params:  # (a per-lane if: x read whole by every lane)
        params["lanes"] = (False,)
    b = Builder()
    f = b.func(name, [p, x], list(b.bind(PRIMS[name], [p, x], params)))
    assert _differences(f, ["n"]) == []
    b = Builder()
    assert _differences(b.func("outside", [x], [head(b, x)]), ["n"]) == ["n - 2"]


FUSIBLE = {"gather": lambda types, params: params["axis"] == 0 and types[0].rank == 1}
"""The prims with a fusible rule (not elementwise, but an element of theirs may be computed in a loop nest) and when
it holds: a gather from a 1-D table."""


def test_the_fusible_prims_are_tested():
    assert sorted(n for n, p in PRIMS.items() if p.fusible is not None) == sorted(FUSIBLE)


@pytest.mark.parametrize("name", sorted(FUSIBLE))
def test_a_fusible_prim_joins_the_loop_nest_of_what_reads_it(name):
    """Prim.fusible: exp(prim(...)) of each of the prim's samples is one fusion holding the prim where the rule holds
    (a gather from a 1-D table: gather:table), and the prim before a fusion of exp elsewhere; the same values."""
    import numpy as np
    from prim_samples import SAMPLES, prim_name
    from test_prims import sample

    from ksbuild.transforms.pipeline import lower
    for key in [k for k in SAMPLES if prim_name(k) == name]:
        types, params, _, _ = SAMPLES[key]
        b = Builder()
        ps = [Var(t, f"x{i}") for i, t in enumerate(types)]
        f = b.func(key, ps, [b.exp(b.bind(PRIMS[name], ps, params)[0])])
        g = lower(f)
        inside = any(e.prim.name == "fusion" and name in [q.prim.name for q in e.params["body"].eqns] for e in g.eqns)
        assert inside == FUSIBLE[name](types, params), (key, [e.prim.name for e in g.eqns])
        args = sample(key, np.random.default_rng(23))
        np.testing.assert_allclose(eval_func(g, args)[0], eval_func(f, args)[0], rtol=1e-15)


def _strings_through(b, name: str, s, t, p, q):
    """prim `name` passing string tensors s, t through its sub-functions (p: one condition per lane, q: one for all):
    the value it gives, and what that should be, of the values of s, t, p and q."""
    import numpy as np
    from prim_samples import _fn
    st, one = s.type, Type("str")
    if name == "call":
        return b.bind(PRIMS[name], [s], {"fn": _fn("helper", (st,), lambda c, x: [x])})[0], lambda s, t, p, q: s
    if name == "loop":
        body = _fn("body", (Type("i64"), st, st), lambda c, k, x, acc: [x])
        out = b.bind(PRIMS[name], [Lit(3, Type("i64")), t, s], {"body": body, "n_consts": 1, "n_carry": 1,
                                                                "length": None, "reverse": False})
        return out[0], lambda s, t, p, q: t
    if name == "lane_cond":
        params = {"then_fn": _fn("then", (one, one), lambda c, x, y: [x]),
                  "else_fn": _fn("else", (one, one), lambda c, x, y: [y]), "lanes": (True, True)}
        return b.bind(PRIMS[name], [p, s, t], params)[0], lambda s, t, p, q: np.where(p, s, t)
    params = {"then_fn": _fn("then", (st, st), lambda c, x, y: [x]),
              "else_fn": _fn("else", (st, st), lambda c, x, y: [y])}
    return b.bind(PRIMS[name], [q, s, t], params)[0], lambda s, t, p, q: s if q else t


CARRIERS = ("call", "cond", "cond_select", "lane_cond", "loop")
"""The prims that carry functions and pass the strings their operands hold to them (fusion, which the fuse pass
makes, has a test of its own below)."""


@pytest.mark.parametrize("name", CARRIERS)
def test_a_prim_carrying_functions_passes_strings_through(name):
    """Prim.strings of a prim with sub-functions: string operands bind and reach its functions, which return them."""
    import numpy as np
    st = Type("str", (3,))
    s, t, p, q = Var(st, "s"), Var(st, "t"), Var(Type("bool", (3,)), "p"), Var(Type("bool"), "q")
    b = Builder()
    out, want = _strings_through(b, name, s, t, p, q)
    f = b.func(name, [s, t, p, q], [out])
    sv, tv = np.array(["a", "b", "c"], dtype=object), np.array(["x", "y", "z"], dtype=object)
    pv = np.array([True, False, True])
    for qv in (True, False):
        np.testing.assert_array_equal(eval_func(f, [sv, tv, pv, qv])[0], want(sv, tv, pv, qv))


@pytest.mark.parametrize("name", ["fusion"])
def test_a_loop_nest_moves_strings(name):
    """Prim.strings of fusion: the fuse pass makes a loop nest of a choice between string tensors (a select of a
    transposed one and another), which binds with its string operands, and the lowered function picks the same
    strings."""
    import numpy as np

    from ksbuild.transforms.pipeline import lower
    st, bt = Type("str", (2, 3)), Type("bool", (2, 3))
    s, t, p = Var(Type("str", (3, 2)), "s"), Var(st, "t"), Var(bt, "p")
    b = Builder()
    f = b.func(name, [s, t, p], [b.select(p, b.transpose(s, perm=(1, 0)), t)])
    g = lower(f)
    assert name in [e.prim.name for e in g.eqns], g
    sv = np.array([["a", "b"], ["c", "d"], ["e", "f"]], dtype=object)
    tv = np.array([["u", "v", "w"], ["x", "y", "z"]], dtype=object)
    pv = np.array([[True, False, True], [False, False, True]])
    np.testing.assert_array_equal(eval_func(g, [sv, tv, pv])[0], np.where(pv, sv.T, tv))


FACT_TESTS = {  # fact -> (whether a record states it, the prims its test above checks, the prims it leaves to others)
    "costly": (lambda p: p.costly, COSTLY, ()),
    "elementwise": (lambda p: p.elementwise, ELEMENTWISE + RECOMPUTED, ()),
    "masked": (lambda p: p.masked is not None, MASKED, ()),
    "implies": (lambda p: p.implies is not None, IMPLYING, ()),
    "strings": (lambda p: p.strings, MOVERS + CARRIERS + ("fusion",), ()),
    "remat": (lambda p: p.remat, REMAT, ()),
    "whole": (lambda p: bool(p.whole), WHOLE_PRIMS, ()),
    "inplace": (lambda p: p.inplace is not None, IN_PLACE + ("contract",), ()),
    "view": (lambda p: p.view, VIEWS, ()),
    "takes": (lambda p: p.takes is not None, TAKES, ()),
    "sinks": (lambda p: p.sinks, SINKS, ()),
    "branches": (lambda p: p.branches, BRANCHES, ()),
    "lazy": (lambda p: bool(p.lazy), ("select",), ()),
    "epilogue_impls": (lambda p: bool(p.epilogue_impls), ("contract", "convolve"), ()),
}
"""The lists of prims the fact tests above are parametrized by, written out: a fact removed from a record (or added
to one) fails the test below as well as the prim's own (a list computed from the records would drop its test)."""


@pytest.mark.parametrize("fact", sorted(FACT_TESTS))
def test_the_prims_stating_a_fact_are_the_tested_ones(fact):
    states, tested, left = FACT_TESTS[fact]
    assert sorted(n for n, p in PRIMS.items() if states(p)) == sorted(tested + left)


@pytest.mark.parametrize("name", ["select"])
def test_a_lazy_operand_is_computed_before_the_choice(name):
    """Prim.lazy: the C++ of select(x < y, exp(x), log(y)) computes exp(x) and log(y) before the choice, each into a
    local, and the choice picks between the two locals (a branch-free select; an operand written into `p ? a : b`
    would be computed only on its side, a branch)."""
    import re

    from ksbuild.codegen.viewmodel import export_view
    from ksbuild.transforms.pipeline import lower
    f64 = Type("f64")
    b = Builder()
    x, y = Var(f64, "x"), Var(f64, "y")
    f = b.func(name, [x, y], [b.bind(PRIMS[name], [b.lt(x, y), b.exp(x), b.log(y)])[0]])
    body = "\n".join(export_view("p", name, lower(f), []).body)
    choice = next(line for line in body.splitlines() if "?" in line)
    assert re.search(r"\? \w+ : \w+\)?;", choice) and "ks::exp" not in choice and "ks::log" not in choice, body
