"""The reroll pass (transforms/reroll.py): torch.export's unrolled Python loops become `loop`s again.

Models in tests/reroll_models.py. Oracles: the reference interpreter on the unrolled graph (the frontend's
function before the pass), the torch modules (values) and torch.autograd (gradients and vjps), and the
compiled C++ of a package built from the models."""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
from conftest import DEBUG, ROOT

torch = pytest.importorskip("torch")
import reroll_models as models  # noqa: E402

import ksbuild.frontends.torch_export.capture as capture_module  # noqa: E402
from ksbuild.ir.builder import Builder  # noqa: E402
from ksbuild.ir.core import Lit, Var  # noqa: E402
from ksbuild.ir.interp import eval_func  # noqa: E402
from ksbuild.ir.types import Type  # noqa: E402
from ksbuild.ir.verify import verify  # noqa: E402
from ksbuild.transforms.pipeline import lower  # noqa: E402
from ksbuild.transforms.reroll import Run, find_runs, reroll  # noqa: E402
from ksbuild.transforms.vjp import grad_func, vjp_func  # noqa: E402

MODELS_FILE = ROOT / "tests" / "reroll_models.py"
REAL_CAPTURE = capture_module.capture
TOL = dict(rtol=1e-10, atol=1e-12)


@functools.lru_cache(maxsize=None)
def captured(make: str):
    """torch.export's capture of reroll_models' make_<name>, made once in this module: unrolled() and the compiled
    package's build (ksbuild.build, in this process: the `pkg` fixture) take the same one (the capture is most of
    their time; the importer, the passes and the compile still run for each)."""
    return REAL_CAPTURE(str(MODELS_FILE), Path("."), make, None)


@functools.lru_cache(maxsize=None)
def unrolled(name: str):
    """The frontend's function of make_<name> before reroll (torch.export's unrolled steps)."""
    from ksbuild.frontends.torch_export.importer import Importer
    return Importer(captured(f"make_{name}")).run(name)


@functools.lru_cache(maxsize=None)
def rolled(name: str):
    f = reroll(unrolled(name))
    verify(f)
    return f


def example(name: str):
    module, args = getattr(models, f"make_{name}")()
    return module, args


def loops(f) -> list:
    return [e for e in f.eqns if e.prim.name == "loop"]


def assert_close(got, want) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), **TOL)


# ---- detection ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, count", [("adbench_12", 11), ("gates_12", 12), ("reducing_20", 20),
                                         ("gates_64", 64)])
def test_finds_the_steps(name, count):
    """One run per model: its steps (ADBench's last step has no state stack: its states are not used)."""
    f = unrolled(name)
    (run,) = find_runs(f)
    assert run.count == count
    assert run.period * run.count > 0.8 * len(f.eqns)
    (loop,) = loops(rolled(name))
    assert loop.params["length"] == count and loop.ins[0] == Lit(count, Type("i64"))


@pytest.mark.parametrize("name", ["gates_1", "gates_2", "adbench_1", "adbench_2", "reducing_3", "twoback_20",
                                  "window_20"])
def test_leaves_these_unrolled(name):
    """One or two steps (unroll would unroll them again), steps reading two steps back, moving slices."""
    assert find_runs(unrolled(name)) == []
    assert rolled(name) is unrolled(name)


def test_rolled_ir_is_small():
    assert len(unrolled("gates_64").eqns) > 1000
    assert len(rolled("gates_64").eqns) < 0.4 * len(unrolled("gates_64").eqns)  # (the stack of the 64 rows stays)
    assert len(rolled("adbench_12").eqns) < 200 < len(unrolled("adbench_12").eqns)


def test_nested_loops():
    """The outer steps become a loop whose body is a loop over the inner steps (5 outer steps: any count of
    three or more is a run; each outer step's capture holds its 10 inner steps, so 12 took 2.5 times as long)."""
    (outer,) = loops(rolled("nested_5"))
    assert outer.params["length"] == 5
    (inner,) = loops(outer.params["body"])
    assert inner.params["length"] == 10


# ---- values and derivatives ---------------------------------------------------------------------------

NAMES = ["adbench_1", "adbench_2", "adbench_12", "gates_1", "gates_2", "gates_12", "reducing_3", "reducing_20",
         "twoback_20", "window_20", "nested_5"]


@pytest.mark.parametrize("name", NAMES)
def test_values_match_unrolled_and_torch(name):
    module, args = example(name)
    xs = [a.numpy() for a in args]
    with torch.no_grad():
        want = module(*args)
    want = [w.numpy() for w in (want if isinstance(want, tuple) else (want,))]
    assert_close(eval_func(rolled(name), xs), eval_func(unrolled(name), xs))
    assert_close(eval_func(rolled(name), xs), want)


def _torch_vjp(module, args, cts):
    ps = [a.clone().requires_grad_(True) for a in args]
    outs = module(*ps)
    outs = outs if isinstance(outs, tuple) else (outs,)
    return [g.numpy() for g in torch.autograd.grad(outs, ps, [torch.as_tensor(c) for c in cts])]


@pytest.mark.parametrize("name", NAMES)
def test_vjp_matches_unrolled_and_autograd(name):
    module, args = example(name)
    xs = [a.numpy() for a in args]
    rng = np.random.default_rng(0)
    cts = [rng.standard_normal(np.shape(o)) for o in eval_func(unrolled(name), xs)]
    got = eval_func(vjp_func(rolled(name)), xs + cts)
    assert_close(got, eval_func(vjp_func(unrolled(name)), xs + cts))
    assert_close(got, _torch_vjp(module, args, cts))


@pytest.mark.parametrize("name", ["adbench_12", "reducing_20"])
def test_gradient_after_the_pipeline(name):
    """grad of the rolled function, lowered by every pass, against torch.autograd."""
    module, args = example(name)
    g = lower(grad_func(rolled(name)))
    verify(g)
    assert_close(eval_func(g, [a.numpy() for a in args]), _torch_vjp(module, args, [1.0]))


# ---- the checks, on hand-built functions --------------------------------------------------------------

def _steps(positions: list[int], prim: str = "index"):
    """h = tanh(h * x[p] + x[p]) for each p (index reads x[p]; with prim="pad" the step's pad width is p)."""
    b = Builder()
    x, h = Var(Type("f64", (40, 3)), "x"), Var(Type("f64", (3,)), "h")
    acc = h
    for p in positions:
        row = b.index(x, Lit(p, Type("i64")), axis=0)
        if prim == "pad":
            row = b.index(b.pad(x, axis=0, lo=p, hi=0), Lit(0, Type("i64")), axis=0)
        acc = b.tanh(b.add(b.mul(acc, row), b.mul(row, Lit(0.5, Type("f64")))))
    return b.func("steps", [x, h], [acc])


def test_index_advancing_by_a_step():
    f = _steps([3 + 2 * t for t in range(15)])
    assert find_runs(f) == [Run(0, 5, 15)]
    xs = [np.random.default_rng(1).standard_normal((40, 3)), np.ones(3)]
    assert_close(eval_func(reroll(f), xs), eval_func(f, xs))


def test_index_not_arithmetic_cuts_the_run():
    """Rows 0..9 then 20: the run ends where the positions stop advancing by one."""
    f = _steps(list(range(10)) + [20, 21])
    assert find_runs(f) == [Run(0, 5, 10)]
    xs = [np.random.default_rng(2).standard_normal((40, 3)), np.ones(3)]
    assert_close(eval_func(reroll(f), xs), eval_func(f, xs))


def test_varying_params_are_not_rolled():
    """A pad whose width changes each step differs in params: the steps stay as they are."""
    assert find_runs(_steps(list(range(12)), "pad")) == []


# ---- compiled ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    """adbench_12 and gates_12 (the steps rolled as at any length: 40 steps took 14 s more of torch.export
    capture; unrolled, these 12 steps would be 12000 lines of C++, rolled they are under 2000)."""
    import ksbuild
    folder = tmp_path_factory.mktemp("reroll")
    path = folder / "manifest.toml"
    path.write_text("\n".join([
        '[package]', 'name = "rerolled"', '',
        '[kernels.adbench]', f'torch = "{MODELS_FILE}:make_adbench_12"', '',
        '[kernels.gates]', f'torch = "{MODELS_FILE}:make_gates_12"', '',
        '[exports]', 'F = "adbench"', 'G = "grad(adbench, argnums=(0, 1))"', 'gates = "gates"',
        'gates_vjp = "vjp(gates)"', '']))

    def shared(source, root, make, loc):
        if (Path(root) / source).resolve() != MODELS_FILE.resolve():
            return REAL_CAPTURE(source, root, make, loc)
        return captured(make)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(capture_module, "capture", shared)
        return ksbuild.build(path, optimize=DEBUG)


def test_compiled_matches_torch(pkg):
    module, args = example("adbench_12")
    xs = [a.numpy() for a in args]
    np.testing.assert_allclose(pkg.F(*xs), module(*args).item(), rtol=1e-12)
    assert_close(pkg.G(*xs), _torch_vjp(module, args, [1.0])[:2])
    module, args = example("gates_12")
    xs = [a.numpy() for a in args]
    with torch.no_grad():
        assert_close(pkg.gates(*xs), [w.numpy() for w in module(*args)])
    cts = [np.random.default_rng(3).standard_normal(s) for s in [(12, 5), (5,)]]
    assert_close(pkg.gates_vjp(*xs, *cts), _torch_vjp(module, args, cts))


def test_compiled_source_has_one_loop_per_run(pkg):
    """The steps are one C++ loop: the source does not grow with the sequence (12 steps, ~90 equations each:
    12000 lines unrolled)."""
    sources = list((Path(pkg.root) / "share").rglob("*.cpp"))
    assert sources
    assert sum(len(p.read_text().splitlines()) for p in sources) < 3000
