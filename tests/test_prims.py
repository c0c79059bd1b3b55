"""Every primitive, from one sample table: eval, jvp, vjp, each transpose rule on its own, vmap, and rule
completeness."""
from __future__ import annotations

import numpy as np
import pytest
from prim_samples import LOOP_RESIDUALS, LOWERING, SAMPLES, STRUCTURED, UNBATCHED, prim_name

from ksbuild.ir.builder import Builder
from ksbuild.ir.core import Var
from ksbuild.ir.interp import eval_func
from ksbuild.ir.types import Type
from ksbuild.ir.verify import verify
from ksbuild.prims import PRIMS
from ksbuild.prims.base import opted_out as opted_out_of
from ksbuild.transforms import jvp, transpose, vjp, vmap

NAMES = sorted(SAMPLES)


def verified(f):
    """f after the IR verifier: a malformed function fails naming its equation and prim ("equation 2 (mul)")."""
    verify(f)
    return f


def jvp_func(f):
    return verified(jvp.jvp_func(verified(f)))


def vjp_func(f):
    return verified(vjp.vjp_func(verified(f)))


def vmap_func(f, *args):
    vf, flags = vmap.vmap_func(verified(f), *args)
    return verified(vf), flags


def one_eqn(name):
    types, params, _, _ = SAMPLES[name]
    b = Builder()
    ps = [Var(t, f"x{i}") for i, t in enumerate(types)]
    outs = b.bind(PRIMS[prim_name(name)], ps, params)
    return verified(b.func(name, ps, list(outs)))


def sample(name, rng, batch=()):
    types, _, samplers, _ = SAMPLES[name]
    args = []
    for t, s in zip(types, samplers):
        shape = batch + tuple(t.shape)
        args.append(rng.random(shape) < 0.5 if s is None else s(rng, shape))
    if not types:  # a prim without operands
        return []
    return args


RAISING_JVP = ("extern_call", "math:digamma")  # (their jvp rules raise on purpose: the tests at the end of this file)


def differentiable(name):
    """Whether the sample's derivatives are checked: an f64 result (finite differences in f32 are too coarse) of a
    prim that does not opt out of its jvp (digamma: no trigamma; stop_gradient: zero by definition)."""
    opted_out = bool(opted_out_of(PRIMS[prim_name(name)], SAMPLES[name][1], "jvp"))  # (the prim's or its form's)
    try:
        return one_eqn(name).out_types[0].dtype == "f64" and not opted_out
    except Exception:  # noqa: BLE001  (a broken rule: the sample's own tests fail, naming it, not the collection)
        return not opted_out


def _prims_in(f) -> set[str]:
    """The prims of f's equations, sub-functions' too."""
    from ksbuild.ir.core import Func
    found = set()
    for e in f.eqns:
        found.add(e.prim.name)
        found.update(n for v in e.params.values() if isinstance(v, Func) for n in _prims_in(v))
    return found


SAMPLED = {prim_name(n) for n in NAMES}
DIFFERENTIATED = {prim_name(n) for n in NAMES if differentiable(n)}


@pytest.fixture(scope="module")
def lowerings():
    """(sample, function, lowered function) for every function test_prims_compiled compiles (each sample, its jvp and
    vjp when it is differentiable) lowered with either backend, and the concatenation the join pass makes a join of."""
    from ksbuild.transforms.pipeline import Options, lower
    found = []
    for n in NAMES:
        f = one_eqn(n)
        for g in [f] + ([jvp.jvp_func(f), vjp.vjp_func(f)] if differentiable(n) else []):
            for backend in ("plain", "blas"):
                found.append((n, g, lower(g, Options(backend=backend))))
    cat = _concatenation()
    return found + [(None, cat, lower(cat))]


@pytest.fixture(scope="module")
def lowered_prims(lowerings):
    """The prims the pipeline makes from the samples (with either backend): what test_prims_compiled compiles."""
    return {p for _, _, g in lowerings for p in _prims_in(g)}


def _concatenation():
    """ops/shape.py's concatenate of three pieces (pads added), which the join pass makes one join of."""
    from ksbuild.ops.shape import concatenate
    b = Builder()
    ps = [Var(Type("f64", (2, n)), f"x{n}") for n in (1, 2, 3)]
    return verified(b.func("concatenation", ps, [concatenate(b, ps, 1)]))


@pytest.mark.parametrize("name", sorted(PRIMS))
def test_record_is_complete(name, lowered_prims):
    """Every prim has every rule it needs, each exercised by a test here or in test_prims_compiled: type rule,
    interpreter eval, C++ emission and a doc; a prim of the core also jvp and batching rules and a sample (or is
    one of the structured prims that carry functions, tested by their own files), and a transpose rule is checked
    by the dot-product test; a lowering prim is made from some sample, so its emission is compiled. A rule the passes
    never call is None, `opt_outs` saying why: the jvp and batching rules of a prim without operands or with no
    float result (transforms/jvp.py and vmap.py bind it as it is) and of a lowering prim, the emission of a prim the
    pipeline replaces before codegen (expand, select_backend, simplify), which no sample's lowering then holds."""
    p = PRIMS[name]
    for rule in ("type_rule", "eval"):
        assert callable(getattr(p, rule)), f"{name} lacks {rule}"
    for rule in ("jvp", "batch", "emit"):  # (None: a rule the passes never call, `opt_outs` saying why)
        why = any(o.startswith(rule + ":") for o in p.opt_outs)
        assert callable(getattr(p, rule)) or getattr(p, rule) is None and why, f"{name} lacks {rule}"
    if p.emit is None:  # never reaches codegen: made something else first, as the samples' lowerings show
        assert p.expand or p.select_backend or p.simplify, f"{name}: no emit rule, and nothing removes it"
        assert name not in lowered_prims, f"{name} has no emit rule but a sample's lowered function holds it"
    assert p.doc, f"{name} has no doc"
    assert (name in LOWERING) == p.lowering, f"{name}: lowering flag and tests/prim_samples.py LOWERING disagree"
    if p.lowering:
        assert name in lowered_prims, f"{name}: no sample lowers to it, so its C++ is never compiled in a test"
        assert p.jvp is None and p.batch is None, f"{name}: a lowering prim is never differentiated nor batched"
        return
    assert name in SAMPLED, f"{name} has no sample in prim_samples.py"
    sampled = [dict(SAMPLES[k][1]) for k in SAMPLES if prim_name(k) == name]
    for form, fixed in p.forms.items():  # (compare's lt ... ne: each form's C++ and eval are its own)
        assert any(s.items() >= fixed.items() for s in sampled), f"{name}: its form {form} has no sample"
        assert not p.table or getattr(p.table.get(form), "doc", ""), f"{name}: its form {form} has no record with a doc"
    if p.transpose is not None and name not in STRUCTURED:
        assert name in DIFFERENTIATED, f"{name} has a transpose rule but no sample the dot-product test runs"
    assert bool(p.loop_remat) == (name in LOOP_RESIDUALS), \
        f"{name}: its loop_remat fact and test_reverse_loop_recomputes' cases (prim_samples.LOOP_RESIDUALS) disagree"
    assert p.accumulates == (name in ACCUMULATING), \
        f"{name}: its accumulates fact and test_transpose_accumulates_into_the_sum_so_far's ACCUMULATING disagree"


@pytest.mark.parametrize("name", sorted(LOOP_RESIDUALS))
def test_reverse_loop_recomputes(name):
    """Prim.loop_remat: the vjp of a loop whose body's residual r (of `c = c + r * r`) the prim makes from the counter
    and a loop constant recomputes r in the reverse loop from the counter (no loop stacks a residual per iteration,
    none runs the forward loop again inside the reverse one), and is the gradient: d c_n / d xs = Σ_k 2 r_k · d r_k
    / d xs, against central differences."""
    from prim_samples import F, I, V, _fn

    def step(b, k, xs, c):
        r = LOOP_RESIDUALS[name](b, k, xs)
        return [b.add(c, b.mul(r, r))]
    body = _fn("body", (I, V, F), step)
    b = Builder()
    ps = [Var(I, "n"), Var(V, "xs"), Var(F, "c")]
    f = verified(b.func(name, ps, list(b.bind(PRIMS["loop"], ps, {"body": body, "n_consts": 1, "n_carry": 1,
                                                                   "length": None, "reverse": False}))))
    g = vjp_func(f)
    stacked = [e for e in _eqns_of(g, "loop") if len(e.outs) > e.params["n_carry"]]
    assert not stacked, f"a residual made by {name} is stacked per iteration, not recomputed"
    nested = [e for e in _eqns_of(g, "loop") if e not in g.eqns]
    assert not nested, f"the reverse loop runs the forward loop again to get a residual made by {name}"
    xs, u = np.random.default_rng(14).standard_normal(4), np.random.default_rng(15).standard_normal(4)
    grad = eval_func(g, [np.int64(3), xs, 0.5, 1.0])[0]
    h = 1e-6
    fd = (eval_func(f, [np.int64(3), xs + h * u, 0.5])[0] - eval_func(f, [np.int64(3), xs - h * u, 0.5])[0]) / (2 * h)
    assert float(np.dot(grad, u)) == pytest.approx(float(fd), rel=1e-6, abs=1e-8)


ACCUMULATING = ("loop",)  # the prims whose transpose adds into the cotangent so far (Prim.accumulates)


@pytest.mark.parametrize("name", [n for n in NAMES if prim_name(n) in ACCUMULATING])
def test_transpose_accumulates_into_the_sum_so_far(name):
    """Prim.accumulates: in the vjp of g = sample + Σ x² over its float tensor operands x (read again after it, so
    each has a cotangent before the prim's transpose runs), the prim's transposed equation starts from that cotangent
    and returns the whole gradient of x (no add after it: a loop nested in a loop adds into one gradient); and the
    gradient is right (the dot product with a jvp)."""
    from ksbuild.ir.builder import inline
    f = one_eqn(name)
    b = Builder()
    ps = [Var(p.type, p.hint) for p in f.params]
    out = inline(b, f, ps)[0]
    summed = [k for k, p in enumerate(ps) if p.type.is_float and p.type.rank]
    for k in summed:
        out = b.add(out, b.reduce_sum(b.mul(ps[k], ps[k]), axes=tuple(range(ps[k].type.rank))))
    g = verified(b.func(name, ps, [out]))
    vg = vjp_func(g)
    made = {v: e for e in vg.eqns for v in e.outs}
    floats = [k for k, p in enumerate(ps) if p.type.is_float]
    for k in summed:
        e = made.get(vg.results[floats.index(k)])
        assert e is not None and e.prim.name == prim_name(name), \
            f"the gradient of operand {k} is {e.prim.name if e else 'no equation'}'s, not {name}'s transpose's"
    rng = np.random.default_rng(16)
    args = sample(name, rng)
    v = [rng.standard_normal(np.shape(args[k])) for k in floats]
    jv = eval_func(jvp_func(g), args + v)[1]
    jtu = eval_func(vg, args + [np.float64(1.0)])
    assert float(np.sum(jv)) == pytest.approx(sum(float(np.sum(a * c)) for a, c in zip(jtu, v)), rel=1e-10)


@pytest.mark.parametrize("name", NAMES)
def test_eval_matches_reference(name):
    rng = np.random.default_rng(0)
    args = sample(name, rng)
    got = eval_func(one_eqn(name), args)[0]
    np.testing.assert_allclose(got, SAMPLES[name][3](*args), rtol=1e-6 if name == "convert" else 1e-13, atol=1e-13)


@pytest.mark.parametrize("name", [n for n in NAMES if differentiable(n)])
def test_jvp_matches_finite_differences(name):
    """jvp against central differences along a random direction (float64)."""
    rng = np.random.default_rng(1)
    f = one_eqn(name)
    args = sample(name, rng)
    floats = [i for i, p in enumerate(f.params) if p.type.is_float]
    dirs = [rng.standard_normal(np.shape(args[i])) for i in floats]
    h = 1e-6

    def at(s):
        moved = list(args)
        for i, d in zip(floats, dirs):
            moved[i] = args[i] + s * d
        return eval_func(f, moved)[0]

    fd = (at(h) - at(-h)) / (2 * h)
    got = eval_func(jvp_func(f), args + dirs)[1]
    np.testing.assert_allclose(got, fd, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", [n for n in NAMES if not differentiable(n) and n not in RAISING_JVP])
def test_jvp_without_a_checked_derivative_runs(name):
    """The jvp rule of a sample whose derivative is not checked (an integer or bool result, f32, stop_gradient) still
    runs whenever a function holding it is differentiated: its jvp is a verified function (digamma's raises on
    purpose: test_digamma_derivative_is_an_explicit_error, test_extern_call_derivative_is_an_explicit_error)."""
    f = one_eqn(name)
    args = sample(name, np.random.default_rng(8))
    dirs = [np.zeros(np.shape(a)) for a, p in zip(args, f.params) if p.type.is_float]
    assert len(eval_func(jvp_func(f), args + dirs)) >= len(f.results)


@pytest.mark.parametrize("name", [n for n in NAMES if differentiable(n)])
def test_vjp_dot_product(name):
    """<u, J v> == <Jᵀ u, v> with J v from jvp and Jᵀ u from vjp."""
    rng = np.random.default_rng(2)
    f = one_eqn(name)
    args = sample(name, rng)
    floats = [i for i, p in enumerate(f.params) if p.type.is_float]
    v = [rng.standard_normal(np.shape(args[i])) for i in floats]
    u = rng.standard_normal(np.shape(eval_func(f, args)[0]))
    jv = eval_func(jvp_func(f), args + v)[1]
    jtu = eval_func(vjp_func(f), args + [u])
    lhs = float(np.sum(u * jv))
    rhs = sum(float(np.sum(a * b)) for a, b in zip(jtu, v))
    assert lhs == pytest.approx(rhs, rel=1e-10, abs=1e-12)


def _linear_in(f, args, ks, rng, tol: float) -> bool:
    """Whether f is linear in the operands ks, the others fixed: f(a·x + z) = a·f(x) + f(z) at random x, z."""
    z = [rng.standard_normal(np.shape(args[k])) for k in ks]

    def at(values):
        moved = list(args)
        for k, v in zip(ks, values):
            moved[k] = v
        return np.asarray(eval_func(f, moved)[0], dtype=np.float64)
    lhs = at([1.7 * np.asarray(args[k]) + zk for k, zk in zip(ks, z)])
    return np.allclose(lhs, 1.7 * at([args[k] for k in ks]) + at(z), rtol=tol, atol=tol)


TRANSPOSED = [n for n in NAMES if PRIMS[prim_name(n)].transpose is not None and prim_name(n) not in STRUCTURED]


@pytest.mark.parametrize("name", TRANSPOSED)
def test_transpose_rule_dot_product(name):
    """Each transpose rule on its own, not only where the prim's own jvp reaches it (div's is reached from other
    prims' jvps): for each operand the prim is linear in (or all its float operands together), the others fixed,
    <u, f(x)> == <fᵀ(u), x>."""
    rng = np.random.default_rng(5)
    f = one_eqn(name)
    args = sample(name, rng)
    floats = [k for k, p in enumerate(f.params) if p.type.is_float]
    tol = 1e-5 if f.out_types[0].dtype == "f32" else 1e-10
    sets = [ks for ks in [(k,) for k in floats] + [tuple(floats)] if ks and _linear_in(f, args, ks, rng, tol)]
    assert sets, f"{name} has a transpose rule but the sample is linear in none of its operands"
    for ks in dict.fromkeys(sets):
        ft = verified(transpose.transpose_func(verified(f), [k in ks for k in range(len(args))]))
        u = rng.standard_normal(np.shape(eval_func(f, args)[0]))
        cts = eval_func(ft, [a for k, a in enumerate(args) if k not in ks] + [u])
        lhs = float(np.sum(u * np.asarray(eval_func(f, args)[0], dtype=np.float64)))
        rhs = sum(float(np.sum(np.asarray(c, dtype=np.float64) * args[k])) for c, k in zip(cts, ks))
        assert lhs == pytest.approx(rhs, rel=tol, abs=tol), f"linear in operands {ks}"


@pytest.mark.parametrize("name", [n for n in NAMES if PRIMS[prim_name(n)].rows is not None])
def test_rows_rule(name):
    """Prim.rows: where the rule says that row i of the output depends only on row i of the operands it slices, the
    equation with the rule's params on those rows gives that row (the per_row pass runs chains one row at a time)."""
    rng = np.random.default_rng(6)
    if not _rows_hold(one_eqn(name), sample(name, rng)):
        pytest.skip(f"the rows rule refuses sample {name} (its row i reads other rows)")


def _rows_hold(f, args) -> bool:
    """Whether the rows rule of f's one equation applies; if it does, each row computed alone is that row of f."""
    eqn = f.eqns[0]
    n = eqn.outs[0].type.shape[0] if eqn.outs[0].type.rank else None
    rule = eqn.prim.rows(eqn, n) if isinstance(n, int) else None
    if rule is None:
        return False
    params, sliced = rule
    full = eval_func(f, args)[0]
    for i in range(n):
        ins = [np.asarray(a)[i:i + 1] if s else a for a, s in zip(args, sliced)]
        b = Builder()
        ps = [Var(Type(p.type.dtype, np.shape(a)), p.hint) for p, a in zip(f.params, ins)]
        row = b.func("row", ps, list(b.bind(eqn.prim, ps, params)))
        np.testing.assert_allclose(eval_func(verified(row), ins)[0], full[i:i + 1], rtol=1e-12, atol=1e-12,
                                   err_msg=f"row {i}")
    return True


@pytest.mark.parametrize("name", sorted(n for n in LOWERING if PRIMS[n].rows is not None))
def test_rows_rule_of_a_lowering_prim(name, lowerings):
    """Prim.rows of a prim the passes make (convolve, join): on each equation of it in the lowered samples, alone
    with random operands, each row it allows computed alone is that row of the whole; and it allows one somewhere."""
    from ksbuild.ir.core import Lit
    rng = np.random.default_rng(13)
    held = 0
    for _, _, g in lowerings:
        for e in _eqns_of(g, name):
            if any(isinstance(a, Lit) for a in e.ins) or not all(p.type.is_float for p in e.ins):
                continue
            ps = [Var(a.type, f"x{k}") for k, a in enumerate(e.ins)]
            b = Builder()
            f = b.func("one", ps, list(b.bind(e.prim, ps, dict(e.params))))
            if all(isinstance(d, int) for p in ps for d in p.type.shape):
                args = [rng.standard_normal(tuple(p.type.shape)).astype(p.type.dtype.replace("f", "float"))
                        for p in ps]
                held += _rows_hold(f, args)
    assert held, f"no equation of {name} in the lowered samples that its rows rule allows"


@pytest.mark.parametrize("name", [n for n in NAMES if PRIMS[prim_name(n)].along is not None])
def test_along_rule(name):
    """Prim.along: where the rule says that position i along an output axis depends only on position i along the
    operand axes it names (the others read whole), the equation with the rule's params on two positions taken there
    (the last and the first) gives those positions of the output (the gather_early pass takes rows this way)."""
    rng = np.random.default_rng(11)
    f = one_eqn(name)
    eqn, args = f.eqns[0], sample(name, rng)
    full = np.asarray(eval_func(f, args)[0])
    checked = 0
    for axis, size in enumerate(eqn.outs[0].type.shape):
        rule = eqn.prim.along(eqn, axis, 2) if isinstance(size, int) and size > 1 else None
        if rule is None:
            continue
        params, axes = rule
        at = [size - 1, 0]
        ins = [np.take(np.asarray(a), at, axis=k) if k is not None else a for a, k in zip(args, axes)]
        b = Builder()
        ps = [Var(Type(p.type.dtype, np.shape(a)), p.hint) for p, a in zip(f.params, ins)]
        part = b.func("part", ps, list(b.bind(eqn.prim, ps, params)))
        np.testing.assert_allclose(eval_func(verified(part), ins)[0], np.take(full, at, axis=axis), rtol=1e-13,
                                   err_msg=f"along axis {axis}")
        checked += 1
    if not checked:
        pytest.skip(f"the along rule refuses every axis of sample {name}")


def _simplify_cases(name):
    """Equations of the sample's prim with one operand a literal (0, 1, -1, 2) or two operands one var: where local
    identities (x + 0, x · 1, x - x, select(p, x, x), ...) apply."""
    from ksbuild.ir.core import Lit
    types = SAMPLES[name][0]
    for k, t in enumerate(types):
        for v in (0, 1, -1, 2):
            yield {k: Lit(bool(v) if t.dtype == "bool" else float(v) if t.is_float else v, t)}
    for k, t in enumerate(types):
        for j in range(k):
            if types[j] == t:
                yield {k: j}


@pytest.mark.parametrize("name", sorted({prim_name(n) for n in NAMES if PRIMS[prim_name(n)].simplify is not None}))
def test_simplify_rule_keeps_the_value(name):
    """Prim.simplify: wherever the rule replaces an equation of one of the prim's samples with an operand made a
    literal or two operands made one, the replacement has the equation's value; and it applies somewhere (so that a
    wrong rule cannot pass unnoticed)."""
    from ksbuild.ir.core import Lit
    from ksbuild.prims.common import np_value
    rng = np.random.default_rng(12)
    prim, fired = PRIMS[name], 0
    for n in [n for n in NAMES if prim_name(n) == name]:
        types, params, _, _ = SAMPLES[n]
        values = sample(n, rng)
        for case in _simplify_cases(n):
            kept = [k for k in range(len(types)) if k not in case]
            ps = {k: Var(types[k], f"x{k}") for k in kept}
            ins = [case[k] if isinstance(case.get(k), Lit) else ps[case.get(k, k)] for k in range(len(types))]
            b = Builder()
            f = b.func(n, [ps[k] for k in kept], list(b.bind(prim, ins, params)))
            eqn = f.eqns[0]
            with np.errstate(all="ignore"):
                new = prim.simplify(list(eqn.ins), eqn.outs[0], **eqn.params)
                if new is None:
                    continue
                fired += 1
                args = [values[k] for k in kept]
                want = np.asarray(eval_func(f, args)[0])
                got = np_value(new, {}) if isinstance(new, Lit) else args[[ps[k] for k in kept].index(new)]
            np.testing.assert_allclose(np.broadcast_to(np.asarray(got, want.dtype), want.shape), want, rtol=1e-13,
                                       err_msg=f"{n} with {case}: {new}")
    assert fired, f"the simplify rule of {name} applies to none of its samples' cases: give a sample it simplifies"


@pytest.mark.parametrize("name", [n for n in NAMES if SAMPLES[n][0]])
def test_vmap_matches_loop(name):
    """vmap over every argument (but the opted-out ones) equals a Python loop of the function."""
    rng = np.random.default_rng(3)
    f = one_eqn(name)
    mask = [i not in UNBATCHED.get(name, ()) for i in range(len(f.params))]
    args = sample(name, rng, batch=(5,))
    args = [a if m else a[0] for a, m in zip(args, mask)]
    vf, _ = vmap_func(f, mask, "b", [True])
    got = eval_func(vf, args)[0]
    want = np.stack([eval_func(f, [a[k] if m else a for a, m in zip(args, mask)])[0] for k in range(5)])
    np.testing.assert_allclose(got, want, rtol=1e-13)


@pytest.mark.parametrize("name", [n for n in NAMES if not SAMPLES[n][0]])
def test_operandless_prims_stay_unbatched(name):
    """A prim without operands is never batched: vmap leaves it as it is."""
    b = Builder()
    x = Var(SAMPLES["add"][0][0], "x")
    out = b.bind(PRIMS[prim_name(name)], [], SAMPLES[name][1])[0]
    f = b.func("f", [x], [x, out])
    vf, flags = vmap_func(f, [True], "b", [True, False])
    assert flags[1] is False or flags == [True, True]
    np.testing.assert_allclose(eval_func(vf, [np.arange(3.0)])[1], SAMPLES[name][3]())


@pytest.mark.parametrize("name", [n for n in NAMES if len(SAMPLES[n][0]) == 2 and n not in UNBATCHED])
def test_vmap_one_argument(name):
    """vmap with the second argument unbatched (in_axes=(0, None))."""
    rng = np.random.default_rng(4)
    f = one_eqn(name)
    batched = sample(name, rng, batch=(5,))
    fixed = sample(name, rng)
    vf, _ = vmap_func(f, [True, False], "b", [True])
    got = eval_func(vf, [batched[0], fixed[1]])[0]
    want = np.stack([eval_func(f, [batched[0][k], fixed[1]])[0] for k in range(5)])
    np.testing.assert_allclose(got, want, rtol=1e-13)


def _inputs(name, f, rng):
    """Values of f's params: the sample's inputs, then random normals (a jvp's tangents, a vjp's cotangents)."""
    args = sample(name, rng) if name is not None else []
    return args + [rng.standard_normal(tuple(p.type.shape)) for p in f.params[len(args):]]


def _eqns_of(f, name: str):
    """The equations of prim `name` in f, its bodies' too."""
    from ksbuild.ir.core import sub_funcs
    for e in f.eqns:
        if e.prim.name == name:
            yield e
        for body in sub_funcs(e):
            yield from _eqns_of(body, name)


@pytest.mark.parametrize("name", sorted(LOWERING))
def test_lowering_prim_evaluates_as_what_it_replaces(name, lowerings):
    """A prim only the passes make (fusion, contract, convolve, join, qpack, winograd_kernel) has no sample of its own:
    its eval (the reference interpreter on lowered IR, which tests/test_passes.py reads after every pass) gives, on each
    sample function the pipeline lowers to it, what the function gave before it was lowered."""
    rng = np.random.default_rng(9)
    checked = 0
    for sample_name, f, g in lowerings:
        if any(True for _ in _eqns_of(g, name)):
            args = _inputs(sample_name, f, rng)
            for got, want in zip(eval_func(g, args), eval_func(f, args)):
                np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=1e-9,
                                           atol=1e-9, err_msg=f"{name} in the lowered {f.name} of {sample_name}")
            checked += 1
    assert checked, f"no sample lowers to {name}"


def test_extern_call_derivative_is_an_explicit_error():
    """extern_call's jvp (an external C function without the user's rule) names the function and how to give one."""
    from ksbuild.errors import KsbuildError
    with pytest.raises(KsbuildError, match="'sample_extern' is an external C function with no derivative rule"):
        jvp_func(one_eqn("extern_call"))


def test_digamma_derivative_is_an_explicit_error():
    """digamma's jvp is an opt-out: differentiating lgamma twice says so instead of guessing."""
    from ksbuild.errors import KsbuildError
    with pytest.raises(KsbuildError, match="trigamma"):
        jvp_func(one_eqn("math:digamma"))


@pytest.mark.parametrize("name", [n for n in NAMES if prim_name(n) == "lane_owned"])
def test_a_lane_owned_tangent_is_the_tangent_on_its_own_lanes(name):
    """lane_owned opts out of the finite-difference check (its jvp is zero on the other branch's lanes on purpose):
    its tangent is the operand's on the lanes where the condition is `then`, zero on the others."""
    rng = np.random.default_rng(17)
    f = one_eqn(name)
    pred, x = sample(name, rng)
    dx = rng.standard_normal(np.shape(x))
    got = eval_func(jvp_func(f), [pred, x, dx])[1]
    mine = (pred == SAMPLES[name][1]["then"]).reshape(pred.shape + (1,) * (x.ndim - pred.ndim))
    np.testing.assert_array_equal(got, np.where(mine, dx, 0.0))
    assert mine.any() and not mine.all()


@pytest.mark.parametrize("name", ["stop_gradient"])
def test_a_stopped_gradient_is_zero(name):
    """stop_gradient opts out of the finite-difference check (its derivative is zero by definition, not its value's):
    in f(x) = x * sg(x), the tangent is sg(x) * dx (the stopped factor's own tangent zero) and the gradient sg(x)."""
    b = Builder()
    x = Var(Type("f64", (3,)), "x")
    f = verified(b.func(name, [x], [b.mul(x, b.bind(PRIMS[name], [x], {})[0])]))
    xs, dx = np.array([0.5, -2.0, 3.0]), np.array([1.0, 0.25, -1.0])
    np.testing.assert_array_equal(eval_func(jvp.jvp_func(f), [xs, dx])[1], xs * dx)
    np.testing.assert_array_equal(eval_func(vjp.vjp_func(f), [xs, np.ones(3)])[0], xs)


SINGULAR_CANDIDATES = (0.0, -1.0, 1e300)  # (log, sqrt and lgamma at 0, log1p at -1, exp, exp2, expm1 past overflow)


@pytest.mark.parametrize("name", [n for n in NAMES if PRIMS[prim_name(n)].table and differentiable(n)])
def test_a_form_is_singular_where_its_derivative_is_infinite(name):
    """A form record's `singular` (math's MathFn: dy/dx may be inf or nan at a finite x, so the tangent multiplies it
    with mulz): the form says so exactly when its derivative is inf or nan at one of a few finite points, and there a
    zero tangent stays 0 (a plain product would give 0 · inf = nan)."""
    from ksbuild.prims.base import form_record
    types, params, _, _ = SAMPLES[name]
    b = Builder()
    x = Var(Type("f64"), "x")
    f = jvp_func(b.func(name.replace(":", "_"), [x], list(b.bind(PRIMS[prim_name(name)], [x], params))))
    with np.errstate(all="ignore"):
        slopes = {v: float(eval_func(f, [np.float64(v), np.float64(1.0)])[1]) for v in SINGULAR_CANDIDATES}
        zeros = {v: float(eval_func(f, [np.float64(v), np.float64(0.0)])[1]) for v in SINGULAR_CANDIDATES}
    infinite = [v for v, d in slopes.items() if not np.isfinite(d)]
    assert form_record(PRIMS[prim_name(name)], params).singular == bool(infinite), slopes
    assert all(zeros[v] == 0 for v in infinite), zeros
