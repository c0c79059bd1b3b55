"""The mutation audit of the prim records (docs/architecture.md, issue 33): a pytest plugin that breaks one rule or
fact of each prim record and keeps what fails.

Each prim's mutants, in order (mutants_of): its type rule raising, its eval + 1, a doubled tangent (jvp: a zero tangent
of a float result, None, becomes exp(result), which is never zero) and batched result, its emitted C++ value + 1 (a rule
that assigns nothing through ctx.assign, a view, a kernel call, a loop: its result's element 0 + 1 after it, in a copy
for a view) and a line that does not compile, a doubled cotangent (transpose), partial_eval and prune raising, a wrong
simplification, a doubled expansion, fusible flipped, sign made > 0, nonfinite made finite, masked removed,
implies flipped, a rows or along rule slicing the wrong operand, bounds narrowed, int_value + 1, select_backend and
inplace removed, parallel flipped, scratch halved, and each fact the record states removed (a reduction made another
kind).

A prim whose forms differ by a record of their own (Prim.table: math's MathFn per function) is audited per form too:
the unit `math` holds the record's mutants, active in every test naming math or one of its forms (math:exp, ...), and
each unit `math:<fn>` the mutants of that function's record (its value + 1, its derivative doubled, its C++ + 1 and
not compiling, singular flipped if it has a derivative, an opt-out removed, its sign made > 0, finite_on made ANY:
mutants_of_form), active only in the tests naming that form; they come after the record's in the run order (runs
k, k + 1, ... for a record with k mutants), so that no run has two of one prim active at once.

Run i (MUT_RUN=i) breaks the i-th mutant of every prim (of every unit) at once, each active only while a test whose
`name` parameter is a sample of that prim (or the prim) runs, or while test_prims_compiled lowers and renders that
prim's samples: one run of the prim tests checks one mutant of every prim (14 runs for all of them):

    cd <repo>; for i in $(seq 0 13); do MUT_RUN=$i MUT_OUT=/tmp/m/A$i.json PYTHONPATH=.:scripts nice -n 10 \
        python -m pytest -q -p no:cacheprovider --tb=line -p mutate_prims tests/test_prims.py tests/test_prim_facts.py \
        tests/test_prims_compiled.py; done

A prim only the passes make (prim_samples.LOWERING: contract, convolve, fusion, join, qpack, winograd_kernel) has no
sample: in these runs its mutants are active in the tests named after it in test_prims and test_prim_facts only, and
test_plain_lowering_prim[<prim>], which checks other prims' samples (under their own mutants), does not count.
MUT_LOWER=prim:i runs one such mutant alone, active everywhere, on the samples that test reads:

    MUT_LOWER=contract:2 MUT_OUT=/tmp/m/L_contract_2.json PYTHONPATH=.:scripts python -m pytest -q -p mutate_prims \
        tests/test_prims.py tests/test_prim_facts.py tests/test_prims_compiled.py

MUT_SKIP_CAUGHT=<an earlier run's json> leaves out the mutants it caught (test_prims_compiled then builds only the
samples of the prims left); MUT_SPEC=prim:i,... picks one mutant per prim; MUT_ONLY=prim:i,... makes them active
everywhere (to find the other tests that catch them). MUT_OUT gets {"mut": prim -> [rule, kind], "failed": test ->
message, "prim_of": test -> the prim it names}. A mutant is caught by a prim-named test when a test naming its prim
fails. (A sample whose exports will not render under its prim's mutant fails its tests, naming the error; it is lowered
again without the mutant, so that the package still builds for the others.)
"""
from __future__ import annotations

import json
import os

import numpy as np

from ksbuild.ir.core import Lit, Var
from ksbuild.prims import PRIMS
from ksbuild.prims.base import ANY, POSITIVE, Prim, finite

ACTIVE = [None]          # prim name active now (per-prim mode), or "*" (global mode)
MUT: dict[str, tuple[str, str, object]] = {}   # prim -> (field, kind, value)
GLOBAL = [False]


class Mutant(Exception):
    pass


def _double(b, a):
    t = a.type
    if t.dtype == "bool":
        return getattr(b, "not")(a)
    if t.dtype == "str":
        return a
    return b.add(a, a)


def _plus(x):
    x = np.asarray(x) if not isinstance(x, np.ndarray) else x
    if x.dtype == np.bool_:
        return ~x
    if x.dtype.kind in "fiuc":
        return x + x.dtype.type(1)
    return x


def _plus_after(ctx, v, p):
    """After an emit rule that wrote v without ctx.assign: v + 1 at its first element (a scalar's expression; a
    tensor's element 0, in a copy when v is a view of another value's storage)."""
    from ksbuild.codegen.storage import Storage

    def plus(e):
        return f"(!({e}))" if v.type.dtype == "bool" else f"({e} + 1)"
    if v in ctx.local:
        ctx.local[v] = plus(ctx.local[v])
        return
    h = ctx.env.get(v)
    if h is None:
        return
    if isinstance(h, str):
        ctx.env[v] = plus(h)
        return
    if h.literal is not None:
        ctx.env[v] = Storage.splat(plus(h.literal), h.shape)
        return
    first = h.at(["0"] * len(h.shape))
    if p.view or p.name in ("constant",):
        try:
            new = ctx.alloc(v.type, "mutant")
        except Exception:  # noqa: BLE001  (a size known only at run time without a workspace)
            return
        ctx.copy(h, new, v.type)
        ctx.env[v], first = new, new.at(["0"] * len(h.shape))
    ctx.line(f"{first} = {plus(first)};")


def mutants_of(p: Prim):
    """[(field, kind, value)] for every rule and set fact of p."""
    out = []
    o = p

    def add(field, kind, value):
        out.append((field, kind, value))

    def raising(name):
        def f(*a, **k):
            raise Mutant(f"mutant: {p.name}.{name} raises")
        return f
    add("type_rule", "raise", raising("type_rule"))
    ev = o.eval

    def eval_plus(*a, **k):
        r = ev(*a, **k)
        if isinstance(r, tuple):
            return tuple(_plus(x) for x in r)
        if isinstance(r, list):
            return [_plus(x) for x in r]
        return _plus(r)
    add("eval", "plus1", eval_plus)
    jv = o.jvp

    def jvp2(b, primals, tangents, **params):  # (a zero tangent of a float result, None, becomes exp(result))
        outs, tans = jv(b, primals, tangents, **params)
        return outs, [(b.exp(o) if o.type.is_float else None) if t is None else
                      (_double(b, t) if isinstance(t, (Var, Lit)) else t) for o, t in zip(outs, tans)]
    if jv is not None and not any(e.startswith("jvp:") for e in p.opt_outs):  # (a jvp rule that is the
        add("jvp", "double", jvp2)  # opted-out error, extern_call's, raises first: doubling it changes nothing)
    bt = o.batch

    def batch2(b, ins, batched, size, **params):
        outs, ob = bt(b, ins, batched, size, **params)
        return [(_double(b, x) if isinstance(x, (Var, Lit)) else x) for x in outs], ob
    if bt is not None:
        add("batch", "double", batch2)
    em = o.emit

    def emit_plus(ctx, eqn):
        orig = ctx.assign
        outs = set(map(id, eqn.outs))
        done = set()

        def assign(v, expr):
            if id(v) in outs:
                expr = f"(!({expr}))" if v.type.dtype == "bool" else f"({expr} + 1)"
                done.add(id(v))
            return orig(v, expr)
        ctx.assign = assign
        try:
            r = em(ctx, eqn)
        finally:
            del ctx.assign
        for v in eqn.outs:  # a result the rule made otherwise (a view, a kernel call, a loop): its element 0 + 1
            if id(v) not in done and v.type.dtype != "str":
                _plus_after(ctx, v, p)
        return r
    if em is not None:
        add("emit", "plus1", emit_plus)

    def emit_broken(ctx, eqn):
        r = em(ctx, eqn)
        ctx.line(f"ks_mutant_does_not_compile_{p.name};")
        return r
    if em is not None:
        add("emit", "nocompile", emit_broken)
    if o.transpose is not None:
        tr = o.transpose

        def tr2(b, cts_out, ins, linear, **params):
            cts = tr(b, cts_out, ins, linear, **params)
            return [None if c is None else (_double(b, c) if isinstance(c, (Var, Lit)) else c) for c in cts]
        add("transpose", "double", tr2)
    for fld in ("partial_eval", "prune"):
        if getattr(o, fld) is not None:
            add(fld, "raise", raising(fld))
    if o.simplify is not None:
        si = o.simplify

        def simp(ins, out, **params):
            r = si(ins, out, **params)
            if r is None or out.type.dtype == "str":
                return r
            if isinstance(r, Lit):
                v = (not r.value) if r.type.dtype == "bool" else r.value + 1
                return Lit(v, r.type)
            for a in ins:
                if a is not r and isinstance(a, Var) and a.type == out.type:
                    return a
            return Lit(True if out.type.dtype == "bool" else (1.0 if out.type.is_float else 1), out.type)
        add("simplify", "wrong", simp)
    if o.expand is not None:
        ex = o.expand

        def exp2(b, ins, **params):
            outs = ex(b, ins, **params)
            return [(_double(b, x) if isinstance(x, (Var, Lit)) and x.type.is_float else x) for x in outs]
        add("expand", "double", exp2)
    if o.fusible is not None:
        fu = o.fusible
        add("fusible", "flip", lambda eqn: not fu(eqn))
    if o.rows is not None:
        ro = o.rows

        def rows2(eqn, n):
            r = ro(eqn, n)
            if r is None:
                return r
            params, sliced = r
            return params, tuple(not s for s in sliced)
        add("rows", "wrong_operand", rows2)
    if o.along is not None:
        al = o.along

        def along2(eqn, axis, n):
            r = al(eqn, axis, n)
            if r is None:
                return r
            params, axes = r
            new = (None,) * len(axes)  # every operand read whole; one taken along `axis` if none was
            if all(k is None for k in axes) and axes:
                new = (axis,) + tuple(axes[1:])
            return params, new
        add("along", "wrong_operand", along2)
    if o.inplace is not None:
        add("inplace", "removed", lambda eqn: None)
    if o.bounds is not None:
        bo = o.bounds

        def bounds2(eqn, range_of):
            r = bo(eqn, range_of)
            if r is None:
                return r
            lo, hi = r
            try:
                return lo, hi - 1
            except Exception:  # noqa: BLE001
                return r
        add("bounds", "narrowed", bounds2)
    add("sign", "positive", lambda eqn, sign_of: POSITIVE)  # (every record states one)
    if o.nonfinite is not finite:
        add("nonfinite", "finite", finite)
    if o.masked is not None:
        add("masked", "off", None)
    if o.implies is not None:
        im = o.implies
        add("implies", "flip", lambda eqn, holds: im(eqn, not holds))
    if o.int_value is not None:
        iv = o.int_value

        def iv2(eqn, value_of, nonneg_of):
            r = iv(eqn, value_of, nonneg_of)
            return None if r is None else r + 1
        add("int_value", "plus1", iv2)
    if o.select_backend is not None:
        add("select_backend", "removed", lambda *a, **k: None)
    if o.parallel is not None:
        pa = o.parallel
        add("parallel", "flip", lambda eqn: not pa(eqn))
    if o.scratch is not None:
        sc = o.scratch

        def sc2(eqn, tiles):
            r = sc(eqn, tiles)
            return r if not r else r // 2
        add("scratch", "halved", sc2)
    for fld in ("accumulates", "elementwise", "view", "lowering", "remat", "strings", "positional", "precompute",
                "branches", "sinks", "costly"):
        if getattr(o, fld):
            add(fld, "off", False)
    other = {"sum": "max", "max": "min", "min": "max", "argmax": "argmin", "argmin": "argmax"}
    if o.reduction:
        add("reduction", "other", other[o.reduction])
    for fld in ("loop_remat", "whole", "runs"):
        if getattr(o, fld):
            add(fld, "off", "")
    if o.unmasked is not None:
        add("unmasked", "off", None)
    if o.takes is not None:
        add("takes", "off", None)
    for fld in ("lazy", "epilogue_impls"):
        if getattr(o, fld):
            add(fld, "off", ())
    return out


def mutants_of_form(p: Prim, form: str):
    """[("table", kind, the table with form's record broken)] for each part of the record of one form of p (a
    MathFn: numpy, deriv, cpp, singular, opt_outs)."""
    from dataclasses import replace
    r = p.table[form]
    out = []

    def add(kind, **changed):
        out.append(("table", kind, {**p.table, form: replace(r, **changed)}))
    value = r.numpy
    add("numpy:plus1", numpy=lambda x: _plus(np.asarray(value(x))))
    if r.deriv is not None:
        d = r.deriv
        add("deriv:double", deriv=lambda b, x, y: _double(b, d(b, x, y)))
    add("cpp:plus1", cpp=f"({r.cpp} + 1)")
    add("cpp:nocompile", cpp=f"{r.cpp} ks_mutant_does_not_compile_{form}")
    if r.deriv is not None:  # (without a derivative, singular says nothing)
        add("singular:flip", singular=not r.singular)
    if r.opt_outs:
        add("opt_outs:off", opt_outs=())
    add("sign:positive", sign=lambda s: POSITIVE)
    if r.finite_on != ANY:
        add("finite_on:any", finite_on=ANY)
    return out


def units():
    """unit -> its mutants in run order (None: none in that run): a prim's, and for a prim with a table of form
    records each form's, after the prim's."""
    out = {}
    for n, p in PRIMS.items():
        out[n] = mutants_of(p)
        for form in p.table:
            out[f"{n}:{form}"] = [None] * len(out[n]) + mutants_of_form(p, form)
    return out


ALL = units()


def prim_of_unit(unit: str) -> str:
    return unit.split(":")[0]


def _active(name: str):
    """The mutants of prim `name` active now: every one of its units' in global mode; else the active unit's and,
    for a form's unit (math:exp), its prim's."""
    if GLOBAL[0]:
        return [m for u, m in MUT.items() if prim_of_unit(u) == name]
    unit = ACTIVE[0]
    if unit is None or prim_of_unit(unit) != name:
        return []
    return [MUT[u] for u in dict.fromkeys((unit, name)) if u in MUT]


class MutPrim(Prim):
    def __getattribute__(self, attr):
        if attr.startswith("__"):
            return object.__getattribute__(self, attr)
        for m in _active(object.__getattribute__(self, "name")):
            if m[0] == attr:
                return m[2]
        return object.__getattribute__(self, attr)


def install():
    for p in PRIMS.values():
        object.__setattr__(p, "__class__", MutPrim)


def unit_of(sample: str) -> str:
    """The unit a sample exercises: its prim, or for a prim with a table of form records its form (math:exp)."""
    from prim_samples import SAMPLES, prim_name

    from ksbuild.prims.base import form_name
    p = PRIMS[prim_name(sample)]
    return f"{p.name}:{form_name(p, SAMPLES[sample][1])}" if p.table else p.name


def prim_of(item):
    """The unit a test names: its `name` param's (a sample, a prim), or a prim named in the test's name."""
    from prim_samples import SAMPLES
    cs = getattr(item, "callspec", None)
    n = cs.params.get("name") if cs is not None else None
    if isinstance(n, str):
        if n in SAMPLES:
            return unit_of(n)
        if n in PRIMS or n in ALL:
            return n
    fn = item.originalname if hasattr(item, "originalname") else item.name
    toks = set(fn.split("_"))
    for p in PRIMS:
        if "_" not in p and p in toks:
            return p
    return None


RESULTS = {"failed": {}, "passed": {}}
RAISED: dict[str, str] = {}   # sample -> what raised while building its exports under the mutant


def pytest_configure(config):
    install()
    if os.environ.get("MUT_LOWER"):  # one mutant of a prim only the passes make, active everywhere
        p, i = os.environ["MUT_LOWER"].rsplit(":", 1)
        GLOBAL[0] = True
        MUT[p] = ALL[p][int(i)]
        RESULTS.setdefault("idx", {})[p] = int(i)
    elif os.environ.get("MUT_ONLY"):
        GLOBAL[0] = True
        for spec in os.environ["MUT_ONLY"].split(","):
            p, i = spec.rsplit(":", 1)
            MUT[p] = ALL[p][int(i)]
    elif os.environ.get("MUT_SPEC"):  # per-prim mode, one chosen mutant of each prim named
        for spec in os.environ["MUT_SPEC"].split(","):
            p, i = spec.rsplit(":", 1)
            MUT[p] = ALL[p][int(i)]
            RESULTS.setdefault("idx", {})[p] = int(i)
    else:
        i = int(os.environ["MUT_RUN"])
        skip = set()
        if os.environ.get("MUT_SKIP_CAUGHT"):  # a phase-A result: leave out the mutants it caught
            d = json.load(open(os.environ["MUT_SKIP_CAUGHT"]))
            failed = {d["prim_of"].get(n) for n in d["failed"]} - {None}
            skip = failed | {prim_of_unit(u) for u in failed}  # (a form's failure: its mutant's or its prim's)
        for p, ms in ALL.items():
            if i < len(ms) and ms[i] is not None and p not in skip:
                MUT[p] = ms[i]


def pytest_collection_finish(session):
    """Activate per sample while test_prims_compiled lowers and renders its exports."""
    import sys
    for item in session.items:
        RESULTS.setdefault("prim_of", {})[item.nodeid] = prim_of(item)
    mod = sys.modules.get("test_prims_compiled")
    if mod is not None and os.environ.get("MUT_LOWER"):  # only the samples test_plain_lowering_prim checks
        held = []
        (p,) = MUT
        saved, GLOBAL[0] = GLOBAL[0], False  # (lowered without the mutant)
        for n in mod.NAMES:
            for e, f in mod.funcs(n).items():
                if p in _prims_in(mod.lowered(f, "plain")):
                    held.append((e, n))
        GLOBAL[0] = saved
        keep = {n for _, n in sorted(held)[:6]}
        mod.NAMES = [n for n in mod.NAMES if n in keep]
        mod.BLAS_NAMES = []
    if mod is None or GLOBAL[0]:
        return
    from prim_samples import SAMPLES, prim_name
    if os.environ.get("MUT_SKIP_CAUGHT") or os.environ.get("MUT_SPEC"):  # only the samples of prims with a mutant
        mod.NAMES = [n for n in mod.NAMES if {unit_of(n), prim_name(n)} & set(MUT)]
        mod.BLAS_NAMES = [n for n in mod.BLAS_NAMES if {unit_of(n), prim_name(n)} & set(MUT)]
    by_export = {}
    for s in SAMPLES:
        e = mod.export_name(s)
        for suffix in ("", "_jvp", "_vjp"):
            by_export[e + suffix] = s
    orig_funcs, orig_lowered, orig_check = mod.funcs, mod.lowered, mod.check

    memo = {}

    def funcs(name):  # (memoized: build() asks again for every export of every broken sample)
        if name not in memo:
            memo[name] = _funcs(name)
        return memo[name]

    def _funcs(name):
        ACTIVE[0] = unit_of(name)
        try:
            return orig_funcs(name)
        except Exception as e:  # noqa: BLE001
            RAISED.setdefault(name, f"funcs: {e!r}")
            ACTIVE[0] = None
            return orig_funcs(name)
        finally:
            ACTIVE[0] = None

    inputs = {}  # export -> (its function before lowering, backend): lowered again without the mutant if need be

    def lowered(f, backend):
        s = by_export.get(f.name)
        inputs[f.name] = (f, backend)
        ACTIVE[0] = unit_of(s) if s else None
        try:
            return orig_lowered(f, backend)
        except Exception as e:  # noqa: BLE001
            RAISED.setdefault(s, f"lowered: {e!r}")
            ACTIVE[0] = None
            return orig_lowered(f, backend)
        finally:
            ACTIVE[0] = None

    import ksbuild.packaging.render as render
    orig_view = render.export_view

    def export_view(package, name, f, *a, **k):
        s = by_export.get(name)
        ACTIVE[0] = unit_of(s) if s else None
        try:
            return orig_view(package, name, f, *a, **k)
        except Exception as e:  # noqa: BLE001
            RAISED.setdefault(s, f"render: {e!r}")
            ACTIVE[0] = None
            if name in inputs:  # (lowered under the mutant: lowered again without it)
                f = orig_lowered(*inputs[name])
            return orig_view(package, name, f, *a, **k)
        finally:
            ACTIVE[0] = None

    def check(package, name):
        if name in RAISED:
            raise AssertionError(f"building {name} raised under the mutant: {RAISED[name]}")
        return orig_check(package, name)
    mod.funcs, mod.lowered, mod.check = funcs, lowered, check
    render.export_view = export_view


def _prims_in(f) -> set:
    from ksbuild.ir.core import Func
    found = set()
    for e in f.eqns:
        found.add(e.prim.name)
        found.update(n for v in e.params.values() if isinstance(v, Func) for n in _prims_in(v))
    return found


def _named(item) -> bool:
    """Whether the test names a unit with a mutant (or a form of a prim with one)."""
    unit = prim_of(item)
    return unit is not None and (unit in MUT or prim_of_unit(unit) in MUT)


def pytest_collection_modifyitems(session, config, items):
    if os.environ.get("MUT_LOWER"):  # only the tests named after the lowering prim
        keep = [it for it in items if _named(it)]
        config.hook.pytest_deselected(items=[it for it in items if it not in keep])
        items[:] = keep
        return
    if (os.environ.get("MUT_SKIP_CAUGHT") or os.environ.get("MUT_SPEC")) and not GLOBAL[0]:
        keep = [it for it in items if _named(it) or "test_prims_compiled" not in it.nodeid]
        config.hook.pytest_deselected(items=[it for it in items if it not in keep])
        items[:] = keep


def pytest_runtest_call(item):
    if not GLOBAL[0]:
        ACTIVE[0] = prim_of(item)


def pytest_runtest_teardown(item):
    if not GLOBAL[0]:
        ACTIVE[0] = None


def pytest_runtest_logreport(report):
    if report.failed:
        RESULTS["failed"][report.nodeid] = (report.longreprtext or "")[-600:]
    elif report.when == "call" and report.passed:
        RESULTS["passed"][report.nodeid] = 1


def pytest_sessionfinish(session, exitstatus):
    out = os.environ.get("MUT_OUT")
    if out:
        RESULTS["mut"] = {p: [m[0], m[1]] for p, m in MUT.items()}
        named = [RESULTS["prim_of"].get(t) or "" for t in RESULTS["failed"]]
        RESULTS["caught"] = sorted(u for u in MUT if any(n == u or prim_of_unit(n) == u for n in named))
        RESULTS["raised"] = RAISED
        with open(out, "w") as fh:
            json.dump(RESULTS, fh)
