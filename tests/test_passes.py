"""The pass pipeline (ksbuild/transforms/pipeline.py) on the tensor and scalar corpora.

Oracle: the reference interpreter. After every pass the IR verifies and computes the same
values as before the first pass, for each kernel, its vjp and its vmap. Each pass's
guarantee is checked on its output: no elementwise tensor equation outside a fusion, einsums
lowered to contractions (gemm only for matrix products with backend blas), products folded
into their accumulators, a memory plan that places every value needing memory.
"""
from __future__ import annotations

import numpy as np
import pytest
from test_tensor_corpus import CASES, KERNELS_FILE, lanes, stacked

from ksbuild.cli import main as cli_main
from ksbuild.frontends.python.source import compile_python_kernel
from ksbuild.ir.core import Func
from ksbuild.ir.interp import eval_func
from ksbuild.ir.printer import print_func
from ksbuild.ir.verify import verify
from ksbuild.prims.base import form_name
from ksbuild.prims.lowering import contract
from ksbuild.transforms.pipeline import PASSES, Options
from ksbuild.transforms.rewrite import walk_funcs
from ksbuild.transforms.vjp import vjp_func
from ksbuild.transforms.vmap import fresh_dim, vmap_func

KINDS = ("plain", "vjp", "vmap")


def transformed(case, kind: str) -> tuple[Func, list]:
    """The kernel of a corpus case under one transformation, and arguments for it."""
    f = compile_python_kernel(KERNELS_FILE, case.kernel, "f64")
    args = list(case.args())
    if kind == "vjp":
        g = vjp_func(f)
        outs = eval_func(f, args)
        rng = case.rng("passes")
        cts = [rng.standard_normal(np.shape(o)) for o, t in zip(outs, f.out_types) if t.is_float]
        return g, args + cts
    if kind == "vmap":
        g, _ = vmap_func(f, case.mask, fresh_dim(f), [True] * len(f.results))
        return g, stacked(case, lanes(case))
    return f, args


def run_pipeline(f: Func, backend: str = "plain") -> list[tuple[str, Func]]:
    out = []
    for p in PASSES:
        f = p.run(f, Options(backend=backend))
        out.append((p.name, f))
    return out


@pytest.mark.parametrize("backend", ["plain", "blas"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_every_pass_keeps_the_values(case, kind, backend):
    f, args = transformed(case, kind)
    want = eval_func(f, args)
    for name, g in run_pipeline(f, backend):
        verify(g)
        got = eval_func(g, args)
        for w, v in zip(want, got):
            np.testing.assert_allclose(v, w, rtol=1e-12, atol=1e-12, err_msg=f"after {name}")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_pass_guarantees(case, kind):
    f, _ = transformed(case, kind)
    stages = dict(run_pipeline(f, "blas"))
    for g in walk_funcs(stages["fuse"]):
        for e in g.eqns:
            assert not (e.prim.elementwise and e.outs[0].type.rank) or g.name == "fused", \
                f"{e.prim.name} with a tensor result outside a fusion"
            assert e.prim.name != "einsum", "an einsum survived select_backend"
            if e.prim is contract and e.params["impl"] == "gemm":
                assert e.outs[0].type.rank >= 2
    planned = stages["plan_memory"]
    assert planned.plan is not None
    for g in walk_funcs(planned):
        for e in g.eqns:
            if g.name in ("fused", "epilogue") or e.prim.view or e.prim.name == "call":
                continue
            for v in e.outs:
                if v.type.rank:
                    assert v in planned.plan.places, f"{e.prim.name} result {v} has no place"


def test_accumulate_folds_the_outer_product_into_the_gradient():
    """mlp2's vjp adds weight-gradient products to their accumulators: no product is stored alone."""
    f = vjp_func(compile_python_kernel(KERNELS_FILE, "elman_rnn", "f64"))
    stages = dict(run_pipeline(f))
    folded = [e for g in walk_funcs(stages["accumulate"]) for e in g.eqns if e.prim is contract and e.params["acc"]]
    assert folded, "no contraction accumulates into its gradient"


def test_plan_reuses_slots_and_updates_in_place():
    """The elman vjp's reverse loop updates its gradient rows in place and buffers share slots."""
    f = vjp_func(compile_python_kernel(KERNELS_FILE, "elman_rnn", "f64"))
    plan = dict(run_pipeline(f))["plan_memory"].plan
    kinds = [p.kind for p in plan.places.values()]
    assert "reuse" in kinds
    assert kinds.count("slot") > len(plan.slots), "no two values share a slot"


def test_fused_reduction_is_one_nest(tmp_path):
    """sum(h * h, 1) after tanh is one fusion whose body ends in the reduction."""
    src = tmp_path / "k.py"
    src.write_text("import torch\ndef k(x: 'float[n, d]') -> 'float[n]':\n    h = torch.tanh(x)\n"
                   "    return (h * h).sum(1)\n")
    f = compile_python_kernel(src, "k", "f64")
    fused = dict(run_pipeline(f))["fuse"]
    assert [e.prim.name for e in fused.eqns] == ["fusion"]
    body = fused.eqns[0].params["body"].eqns
    assert [form_name(e.prim, e.params) for e in body] == ["tanh", "mul", "reduce_sum"]  # (tanh: math[fn="tanh"])


HORNER = """
COEFFS = (1.0, -0.5, 0.25, -0.125)


def horner(x: float) -> float:
    acc = 0.0
    for c in reversed(COEFFS):
        acc = acc * x + c
    return acc


def steps(x: float) -> float:
    for _ in range(9):
        x = x * 0.5 + 1.0
    return x
"""


def test_a_short_loop_is_unrolled_and_fuses_across_its_steps(tmp_path):
    """vmap of a scalar Horner loop (4 steps) is one loop nest over the batch after the passes (unroll, then
    fuse), not a loop of four passes over memory; 9 steps stay a loop, whose carry is updated in place."""
    (tmp_path / "k.py").write_text(HORNER)
    for name, looped in (("horner", False), ("steps", True)):
        f = compile_python_kernel(tmp_path / "k.py", name, "f64")
        vf, _ = vmap_func(f, [True], fresh_dim(f), [True])
        done = dict(run_pipeline(vf))["plan_memory"]
        prims = [e.prim.name for e in done.eqns]
        assert ("loop" in prims) == looped, print_func(done)
        assert prims.count("fusion") == (0 if looped else 1)
        if looped:
            loop = next(e for e in done.eqns if e.prim.name == "loop")
            (inner,) = [e for e in loop.params["body"].eqns if e.prim.name == "fusion"]
            assert done.plan.places[inner.outs[0]].kind == "reuse"
        x = np.linspace(-2.0, 2.0, 7)
        (got,) = eval_func(done, [x])
        want = [eval_func(f, [v])[0] for v in x]
        np.testing.assert_allclose(got, want, rtol=1e-14)


def _gemm_grad_of(tmp_path, body: str, signature: str, argnums=None) -> Func:
    """vjp of a kernel written in `body`, through the passes with backend blas."""
    src = tmp_path / "k.py"
    src.write_text(f"import torch\ndef k({signature}) -> float:\n{body}")
    f = compile_python_kernel(src, "k", "f64")
    return dict(run_pipeline(vjp_func(f, argnums=argnums), "blas"))["plan_memory"]


def _contracts(f: Func) -> list[str]:
    return [e.params["impl"] + " " + e.params["spec"] for g in walk_funcs(f) for e in g.eqns if e.prim is contract]


def test_sum_first_drops_a_product(tmp_path):
    """The gradient of means in Σ (Q (x_i - μ_k))²: the sum over i of a product's result sums the
    operand first (one matrix product fewer); the values are checked by the corpus test above."""
    g = _gemm_grad_of(tmp_path, "    c = x.unsqueeze(1) - mu.unsqueeze(0)\n"
                      "    return torch.sum(torch.einsum('kab,nkb->nka', q, c) ** 2)\n",
                      "q: 'float[K, d, d]', x: 'float[n, d]', mu: 'float[K, d]'", argnums=(0, 2))
    assert sorted(_contracts(g)) == ["gemm kab,nkb->nka", "gemm nka,nkb->kab", "loops ka,kab->kb"]


def test_cheap_residuals_are_recomputed(tmp_path):
    """d(y²) = 2y dy with y = a v: the residual the forward pass hands to the backward pass is y
    itself (the reverse pass recomputes 2y), not a stored 2y next to y."""
    from ksbuild.transforms.vjp import fwd_func
    src = tmp_path / "k.py"
    src.write_text("import torch\ndef k(a: 'float[n, m]', v: 'float[m]') -> float:\n"
                   "    return torch.sum(torch.einsum('ij,j->i', a, v) ** 2)\n")
    fwd = fwd_func(compile_python_kernel(src, "k", "f64"))
    made = {o: e for e in fwd.eqns for o in e.outs}
    residuals = [made[r].prim.name for r in fwd.results[1:] if r in made]
    assert residuals == ["einsum"], print_func(fwd)


def test_ir_after_pass_cli(tmp_path, capsys):
    """`ksbuild ir --after PASS` prints the IR at that stage; an unknown pass is refused."""
    manifest = tmp_path / "manifest.toml"
    (tmp_path / "k.py").write_text("import torch\ndef k(x: 'float[n]') -> 'float[n]':\n"
                                   "    return torch.exp(x) * 2.0\n")
    manifest.write_text('[package]\nname = "p"\n[kernels.k]\npython = "k.py:k"\n[exports]\nk = "k"\n')
    assert cli_main(["ir", str(manifest), "--before-passes"]) == 0
    assert "fusion" not in capsys.readouterr().out
    assert cli_main(["ir", str(manifest), "--after", "fuse"]) == 0
    text = capsys.readouterr().out
    assert "fusion" in text and "# " not in text
    assert cli_main(["ir", str(manifest)]) == 0
    assert "in output 0" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli_main(["ir", str(manifest), "--after", "nonsense"])


def test_planned_ir_prints(case=CASES[0]):
    f, _ = transformed(case, "vjp")
    text = print_func(dict(run_pipeline(f))["plan_memory"])
    assert " in slot " in text


def _weighted(w_uses: int) -> tuple[Func, list]:
    """x[4, 6] times a constant W[5, 6] read transposed (x @ W.T, as a Linear or an ONNX Gemm with transB = 1),
    W read by `w_uses` products; arguments for it."""
    from ksbuild.ir.builder import Builder
    from ksbuild.ir.core import Var
    from ksbuild.ir.dense import Dense
    from ksbuild.ir.types import Type
    rng = np.random.default_rng(3)
    b = Builder()
    xs = [Var(Type("f64", (4, 6)), f"x{i}") for i in range(w_uses)]
    w = b.constant(value=Dense.of(rng.standard_normal((5, 6))))
    ys = [b.einsum(x, w, spec="ij,kj->ik") for x in xs]
    return b.func("linear", xs, ys), [rng.standard_normal((4, 6)) for _ in xs]


@pytest.mark.parametrize("uses", [1, 2])
def test_constants_a_gemm_reads_transposed_are_stored_transposed(uses):
    f, args = _weighted(uses)
    want = eval_func(f, args)
    stages = dict(run_pipeline(f, "blas"))
    g = stages["layout_constants"]
    verify(g)
    for w, v in zip(want, eval_func(g, args)):
        np.testing.assert_allclose(v, w, rtol=1e-12)
    consts = [e for e in g.eqns if e.prim.name == "constant"]
    specs = [e.params["spec"] for e in g.eqns if e.prim.name == "contract"]
    if uses == 1:  # stored [6, 5] and read as a plain product
        assert [c.outs[0].type.shape for c in consts] == [(6, 5)] and specs == ["ij,jk->ik"]
    else:  # shared: kept as it is (one copy of the weights)
        assert [c.outs[0].type.shape for c in consts] == [(5, 6)] and specs == ["ij,kj->ik"] * 2
    from ksbuild.transforms.pipeline import lower
    # (the plain backend on 2 threads lays it out as on one: ks/parts.h splits the same register tiles)
    plain = [lower(f, Options(backend="plain", threads=n), after="layout_constants") for n in (1, 2)]
    shapes = [[e.outs[0].type.shape for e in g.eqns if e.prim.name == "constant"] for g in plain]
    assert shapes[0] == shapes[1], shapes


def test_a_transposed_constant_read_by_a_product_is_folded():
    """torch.export's x @ weight.t(): the transpose of a single-use constant becomes the stored constant."""
    from ksbuild.ir.builder import Builder
    from ksbuild.ir.core import Var
    from ksbuild.ir.dense import Dense
    from ksbuild.ir.types import Type
    rng = np.random.default_rng(4)
    b = Builder()
    x = Var(Type("f32", (3, 6)), "x")
    wt = b.transpose(b.constant(value=Dense.of(rng.standard_normal((5, 6)).astype(np.float32))), perm=(1, 0))
    f = b.func("linear", [x], [b.einsum(x, wt, spec="ij,jk->ik")])
    args = [rng.standard_normal((3, 6)).astype(np.float32)]
    for backend in ("plain", "blas"):
        g = dict(run_pipeline(f, backend))["layout_constants"]
        verify(g)
        np.testing.assert_allclose(eval_func(g, args)[0], eval_func(f, args)[0], rtol=1e-6)
        assert [e.prim.name for e in g.eqns] == ["constant", "contract"]
        if backend == "blas":  # stored [6, 5]: read as a plain product
            assert g.eqns[0].outs[0].type.shape == (6, 5)
        else:  # stored as one panel of 16 columns (5 used) by 6 rows, for ks::packed_gemm
            assert g.eqns[0].outs[0].type.shape == (1, 6, 16) and g.eqns[1].params["impl"] == "panels"


def test_constants_a_plain_gemm_reads_are_stored_as_panels():
    """backend plain: a single-use constant b of a product is stored as panels of 64 bytes of columns, the
    last one zero-padded, and the product (and its interpreter oracle) reads it from there."""
    from ksbuild.ir.builder import Builder
    from ksbuild.ir.core import Var
    from ksbuild.ir.dense import Dense
    from ksbuild.ir.types import Type
    from ksbuild.prims.lowering import from_panels, to_panels
    rng = np.random.default_rng(5)
    for dtype, n, width in (("f32", 37, 16), ("f64", 37, 8), ("f32", 16, 16)):
        w = rng.standard_normal((9, n)).astype(dtype.replace("f", "float"))
        panels = to_panels(w)
        assert panels.shape == (-(-n // width), 9, width) and np.array_equal(from_panels(panels, n), w)
        assert not panels[-1, :, n - (panels.shape[0] - 1) * width:].any()  # zero padding
        b = Builder()
        x = Var(Type(dtype, (4, 9)), "x")
        f = b.func("linear", [x], [b.einsum(x, b.constant(value=Dense.of(w)), spec="ij,jk->ik")])
        g = dict(run_pipeline(f, "plain"))["layout_constants"]
        verify(g)
        assert [e.params.get("impl") for e in g.eqns] == [None, "panels"]
        args = [rng.standard_normal((4, 9)).astype(w.dtype)]
        np.testing.assert_allclose(eval_func(g, args)[0], args[0] @ w, rtol=1e-5)


def test_without_a_vector_unit_the_last_columns_are_panels_of_four():
    """A target without a vector unit (Target.vectors false: a Cortex-M) stores a product's constant b as panels of
    16 columns and its last n % 16 columns as panels of 4 (ks::tiles::panel_dots), at most 3 zero-padded columns
    instead of 15; the product (and its interpreter oracle) reads it from there."""
    from ksbuild.compile.targets import TARGETS
    from ksbuild.ir.builder import Builder
    from ksbuild.ir.core import Var
    from ksbuild.ir.dense import Dense
    from ksbuild.ir.types import Type
    from ksbuild.prims.lowering import from_panels, to_panels
    from ksbuild.transforms.pipeline import lower
    assert not TARGETS["cortex-m4"].vectors and TARGETS["host"].vectors
    rng = np.random.default_rng(6)
    K = 17  # (x [2, K] @ w [K, 4]: more multiply-adds than a tiny product, which becomes a loop nest instead)
    for dtype, n, width in (("f32", 10, 16), ("f32", 4, 16), ("f32", 37, 16), ("f32", 32, 16), ("f64", 37, 8)):
        w = rng.standard_normal((K, n)).astype(dtype.replace("f", "float"))
        panels = to_panels(w, vectors=False)
        assert panels.shape == (-(-n // 4), K, 4) and np.array_equal(from_panels(panels, n), w)
        wide = n // width * width  # (the whole panels of 64 bytes first, as with a vector unit)
        assert np.array_equal(panels.ravel()[:wide * K], to_panels(w[:, :wide]).ravel())
        b = Builder()
        x = Var(Type(dtype, (2, K)), "x")  # (two rows: a product of one row is a loop nest there, dot_convs.py)
        f = b.func("linear", [x], [b.einsum(x, b.constant(value=Dense.of(w)), spec="ij,jk->ik")])
        g = lower(f, Options(backend="plain", vectors=False), after="layout_constants")
        verify(g)
        assert [e.outs[0].type.shape for e in g.eqns] == [(-(-n // 4), K, 4), (2, n)]
        assert g.eqns[1].params["impl"] == "panels"
        args = [rng.standard_normal((2, K)).astype(w.dtype)]
        np.testing.assert_allclose(eval_func(g, args)[0], args[0] @ w, rtol=1e-5, atol=1e-5)


ONE_SIDE_KERNEL = 'def mm(x: "float[n, 6]", w: "float[6, 5]") -> "float[n, 5]":\n    return x @ w\n'
ONE_SIDE_MANIFEST = """[package]
name = "one_side"
[build]
dtype = "float64"
[kernels.mm]
python = "k.py:mm"
[exports]
over_x = "vmap(mm, in_axes=(0, None))"
over_w = "vmap(mm, in_axes=(None, 0))"
"""


def test_a_product_batched_on_one_side_is_a_gemm_per_batch(tmp_path):
    """vmap of x @ w over x only or over w only (jacfwd's tangents of w·x are the second) is a ks::tiled_gemm, not
    a loop nest: gemm_axes takes batch letters of one operand. Over x, one of all batches' rows (prims/tensor.py:
    _batches_as_rows); over w, one of x by every batch's 5 columns side by side (_batches_side_by_side); not one
    per batch."""
    from conftest import build_kernel_file

    from ksbuild.prims.lowering import gemm_axes

    assert gemm_axes("zvb,bk->zvk") == (["z"], "v", "k", "b")
    assert gemm_axes("vb,zbk->zvk") == (["z"], "v", "k", "b")
    assert gemm_axes("mk,k->m") is None and gemm_axes("zmk,kn->mn") is None
    pkg, _ = build_kernel_file(tmp_path, ONE_SIDE_KERNEL, ONE_SIDE_MANIFEST, "one_side_kernels")
    rng = np.random.default_rng(3)
    xs, w = rng.normal(size=(4, 7, 6)), rng.normal(size=(6, 5))
    x, ws = rng.normal(size=(7, 6)), rng.normal(size=(3, 6, 5))
    np.testing.assert_allclose(pkg.over_x(xs, w), xs @ w, rtol=1e-12)
    np.testing.assert_allclose(pkg.over_w(x, ws), x @ ws, rtol=1e-12)
    src = (pkg.root / "share" / "one_side" / "src" / "one_side.cpp").read_text()
    body = src.split("one_side_over_x(", 1)[1].split("\n}\n", 1)[0]
    assert body.count("ks::tiled_gemm<double>(") == 1 and "ks::tiled_gemm<double>(n, 5, 6" not in body, body
    body = src.split("one_side_over_w(", 1)[1].split("\n}\n", 1)[0]
    assert body.count("ks::tiled_gemm<double>(n, ") == 1 and "ks::tiled_gemm<double>(n, 5, 6" not in body, body


def test_a_tiny_product_is_a_loop_nest(tmp_path):
    """A product of literal sizes of at most 64 multiply-adds per batch index (4 × 4 by 4 × 4: ht's bone chains)
    is a loop nest, not a product kernel's call; a larger one, or one of symbolic sizes, is a call."""
    from ksbuild.transforms.select_backend import select_backend
    src = tmp_path / "k.py"
    src.write_text('import torch\n\ndef tiny(a: "float[26, 4, 4]", b: "float[26, 4, 4]") -> "float[26, 4, 4]":\n'
                   '    return a @ b\n\n\ndef small(a: "float[26, 4, 5]", b: "float[26, 5, 4]") -> "float[26, 4, 4]":\n'
                   '    return a @ b\n\n\ndef open_(a: "float[n, 4]", b: "float[4, 4]") -> "float[n, 4]":\n'
                   '    return a @ b\n')
    for name, impl in (("tiny", "loops"), ("small", "tiles"), ("open_", "tiles")):
        f = compile_python_kernel(src, name, "f64")
        g = select_backend(f)
        assert _contracts(g) == [impl + " " + next(e.params["spec"] for e in f.eqns if e.prim.name == "einsum")]
        args = [np.random.default_rng(1).normal(size=[5 if d == "n" else d for d in p.type.shape]) for p in f.params]
        np.testing.assert_allclose(eval_func(g, args)[0], eval_func(f, args)[0], rtol=1e-13)


PROJECTION = """
import torch


def k(x: "float[20, 16]", w: "float[16, 96]", b: "float[96]", v: "float[96, 4]") -> "float[20, 4]":
    p = (x @ w).reshape(20, 1, 96)
    return (torch.tanh(p + b) * 2.0).reshape(20, 96) @ v


def kept(x: "float[20, 16]", w: "float[16, 96]", b: "float[96]", v: "float[96, 4]") -> "float[20, 4]":
    p = x @ w
    return (torch.tanh(p.reshape(20, 1, 96) + b).reshape(20, 96) * p) @ v
"""


def test_an_elementwise_fusion_overwrites_a_dying_operand_through_a_reshape(tmp_path):
    """An RNN's input projection: a product, a reshape the epilogue cannot take, then a bias and an activation. The
    fusion writes into the product's buffer (the GRU of benchmarks/cortex_m4 needed a second 7.5 KB buffer), not
    when the product is still read after it; the values are the interpreter's either way."""
    (tmp_path / "k.py").write_text(PROJECTION)
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(s) for s in ((20, 16), (16, 96), (96,), (96, 4))]
    for name, in_place in (("k", True), ("kept", False)):
        f = compile_python_kernel(tmp_path / "k.py", name, "f64")
        done = dict(run_pipeline(f))["plan_memory"]
        (last,) = [e for e in done.eqns if e.prim.name == "fusion" and e.outs[0].type.rank == 3]
        assert (done.plan.places[last.outs[0]].kind == "reuse") == in_place, print_func(done)
        np.testing.assert_allclose(eval_func(done, args)[0], eval_func(f, args)[0], rtol=1e-13)


@pytest.mark.parametrize("cell", ["GRU", "LSTM", "bidirectional"])
def test_the_last_row_of_a_recurrent_output_is_read_from_the_final_carry(tmp_path, cell):
    """An ONNX GRU or LSTM whose network reads only Y[:, -1] (the last step's hidden state): simplify's last_step reads
    it from the loop's final carry, so that the loop keeps no stacked Y (steps × hidden: 2.5 KB of the Cortex-M4
    benchmark's 11 KB GRU workspace). Not for a reverse loop (a bidirectional LSTM's backward direction computes its
    row n - 1 first). The values are onnxruntime's."""
    torch = pytest.importorskip("torch")
    ort = pytest.importorskip("onnxruntime")
    from ksbuild.frontends.onnx import compile_onnx_kernel
    rnn = {"GRU": torch.nn.GRU(6, 5, batch_first=True), "LSTM": torch.nn.LSTM(6, 5, batch_first=True),
           "bidirectional": torch.nn.LSTM(6, 5, batch_first=True, bidirectional=True)}[cell]

    class Last(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = rnn

        def forward(self, x):
            return self.rnn(x)[0][:, -1]
    torch.onnx.export(Last(), (torch.zeros(1, 7, 6),), str(tmp_path / "m.onnx"), dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"])
    f = compile_onnx_kernel(tmp_path / "m.onnx", "k")
    done = dict(run_pipeline(f))["plan_memory"]
    loops = [e for g in walk_funcs(done) for e in g.eqns if e.prim.name == "loop"]
    stacked = [len(e.outs) - e.params["n_carry"] for e in loops]
    # (bidirectional: Y[:, -1] is a concat of both directions' rows, which last_step does not follow; the reverse
    # loop's stacked output must stay)
    assert stacked == ([0] if cell != "bidirectional" else [1, 1]), print_func(done)
    x = np.random.default_rng(4).standard_normal((1, 7, 6)).astype(np.float32)
    want = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(eval_func(done, [x])[0], want, rtol=1e-5, atol=1e-6)


def test_the_last_row_of_a_reverse_recurrent_output_is_not_its_final_carry(tmp_path):
    """An ONNX LSTM run in reverse computes Y's last row first: Y[n - 1] is not the final carry (simplify's last_step
    leaves it alone); the values are onnxruntime's."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    from ksbuild.frontends.onnx import compile_onnx_kernel
    rng = np.random.default_rng(5)
    w, r = (numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.4, name)
            for name, s in (("W", (1, 20, 6)), ("R", (1, 20, 5))))
    last = numpy_helper.from_array(np.array(6, dtype=np.int64), "last")
    nodes = [helper.make_node("LSTM", ["x", "W", "R"], ["Y"], hidden_size=5, direction="reverse"),
             helper.make_node("Gather", ["Y", "last"], ["y"], axis=0)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [7, 1, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 5])], [w, r, last])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "m.onnx"))
    done = dict(run_pipeline(compile_onnx_kernel(tmp_path / "m.onnx", "k")))["plan_memory"]
    loops = [e for g in walk_funcs(done) for e in g.eqns if e.prim.name == "loop"]
    assert [len(e.outs) - e.params["n_carry"] for e in loops] == [1], print_func(done)
    x = rng.standard_normal((7, 1, 6)).astype(np.float32)
    want = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(eval_func(done, [x])[0], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n, dtype", [(10, "u8"), (8, "u8"), (3, "u8"), (33, "u8"), (10, "i8")])
def test_without_a_vector_unit_an_integer_products_weights_are_packed_4_columns_wide(n, dtype):
    """On a target without a vector unit (a Cortex-M: transforms/narrow_qpacks.py) an int8 product's constant weights
    are packed in tiles of 4 columns (ks::qtile::product_cols there), not the 32 of the vector tiles: a classifier's
    10 columns take 12 columns of bytes, not 32, and without the columns' sums: x_zero·Σw is folded into the bias
    (x_zero 0 after it, -128 for int8 activations). The packed bytes hold the same weights (qlinear.unpack) and the
    product computes what it computes with a vector unit (the interpreter, on both pipelines' output: fails with the
    fold's sign or sum wrong)."""
    from ksbuild.ir.builder import Builder
    from ksbuild.ir.core import Var
    from ksbuild.ir.dense import Dense
    from ksbuild.ir.types import Type
    from ksbuild.prims.qlinear import packed_bytes, qmatmul, unpack
    from ksbuild.transforms.pipeline import lower
    rng = np.random.default_rng(7)
    k = 64
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    bias = rng.integers(-500, 500, n).astype(np.int32)
    scale = np.array([0.004], np.float32)

    def linear(b):
        x = Var(Type(dtype, (1, k)), "x")
        consts = [b.constant(value=Dense.of(v)) for v in (w, bias, scale)]
        params = dict(x_zero=7 if dtype == "u8" else -5, y_zero=3, lo=0, hi=255, out="u8")
        (y,) = b.bind(qmatmul, [x, *consts], params)
        return b.func("linear", [x], [y])
    args = [rng.integers(0, 256, (1, k)).astype(np.uint8).view(np.uint8 if dtype == "u8" else np.int8)]
    results = []
    for vectors, width in ((True, 32), (False, 4)):
        g = lower(linear(Builder()), Options(backend="plain", vectors=vectors), after="layout_constants")
        verify(g)
        (product,) = [e for e in g.eqns if e.prim.name == "qmatmul"]
        assert product.params.get("width", 32) == width and product.params["packed"]
        folded = (0 if dtype == "u8" else -128, False)
        assert (product.params["x_zero"], product.params.get("sums", True)) == \
            (((7 if dtype == "u8" else -5), True) if vectors else folded)
        packed = next(e for e in g.eqns if e.outs[0] is product.ins[1]).params["value"].array()
        assert packed.size == packed_bytes("columns", (k, n), 1, width, vectors) == \
            -(-n // width) * width * k + (-(-4 * n // 64) * 64 if vectors else 0)
        assert np.array_equal(unpack(packed, "columns", (k, n), 1, width), w)
        results.append(eval_func(g, args)[0])
    np.testing.assert_array_equal(results[0], results[1])


def test_without_a_vector_unit_packed_weights_are_padded_to_8_bytes():
    """On a Cortex-M (transforms/narrow_qpacks.py) the packed weights' tiles, sums and groups are padded to 8 bytes
    (ks::qtile::pack_align there), not 64: a grouped convolution of 2 groups of 4 output channels over 3 × 3 × 3 taps
    packs each group as 8 rows of 28 bytes (224) and 4 sums (16 -> 16), 480 B instead of 640; the packed bytes hold
    the same weights and the convolution computes what it computes with a vector unit (the interpreter reads each
    group at its own offset: fails with the groups' stride of the other padding)."""
    from ksbuild.ir.builder import Builder
    from ksbuild.ir.core import Var
    from ksbuild.ir.dense import Dense
    from ksbuild.ir.types import Type
    from ksbuild.prims.qlinear import packed_bytes, qconv, unpack
    from ksbuild.transforms.pipeline import lower
    rng = np.random.default_rng(3)
    w = rng.integers(-128, 128, (8, 3, 3, 3)).astype(np.int8)
    bias = rng.integers(-500, 500, 8).astype(np.int32)
    scale = np.array([0.003], np.float32)

    def conv(b):
        x = Var(Type("u8", (1, 6, 7, 7)), "x")
        consts = [b.constant(value=Dense.of(v)) for v in (w, bias, scale)]
        params = dict(strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1), groups=2, x_zero=9, y_zero=3, lo=0,
                      hi=255, out="u8")
        (y,) = b.bind(qconv, [x, *consts], params)
        return b.func("conv", [x], [y])
    args = [rng.integers(0, 256, (1, 6, 7, 7)).astype(np.uint8)]
    results = []
    for vectors, align, size in ((True, 64, 640), (False, 8, 480)):
        g = lower(conv(Builder()), Options(backend="plain", vectors=vectors), after="layout_constants")
        verify(g)
        (c,) = [e for e in g.eqns if e.prim.name == "qconv"]
        assert c.params["packed"] and c.params.get("align", 64) == align
        packed = next(e for e in g.eqns if e.outs[0] is c.ins[1]).params["value"].array()
        assert packed.size == packed_bytes("rows", w.shape, 2, align=align) == size
        assert np.array_equal(unpack(packed, "rows", w.shape, 2, align=align), w)
        results.append(eval_func(g, args)[0])
    np.testing.assert_array_equal(results[0], results[1])


def test_fuse_keeps_the_written_order_of_a_nest_only_the_results_read():
    """A loop nest whose values only the function's results read (a jvp's z and dz, step by step) keeps the order the
    equations were written in: z_k, dz_k, z_k+1, ..., not the whole z chain first, whose every value the dz chain
    would then keep live (1.7 times slower as a 200-step helper: docs/architecture.md "Calls")."""
    from ksbuild.ir.builder import Builder
    from ksbuild.ir.core import Lit, Var
    from ksbuild.ir.types import Type
    from ksbuild.transforms.fuse import fuse
    b, t = Builder(), Type("f64", (8,))
    x, dx = Var(t, "x"), Var(t, "dx")
    z, dz = x, dx
    for k in range(6):
        c = Lit(0.1 + k / 100, Type("f64"))
        z, dz = b.add(b.mul(z, Lit(0.5, Type("f64"))), b.mul(b.mul(z, z), c)), \
            b.add(b.mul(dz, Lit(0.25, Type("f64"))), b.mul(b.mul(z, dz), c))  # (0.25: told apart from z's step)
    f = b.func("f", [x, dx], [z, dz])
    (nest,) = [e for e in fuse(f).eqns if e.prim.name == "fusion"]

    def written(eqns):
        return [(e.prim.name, tuple(a.value for a in e.ins if isinstance(a, Lit))) for e in eqns]
    assert written(nest.params["body"].eqns) == written(f.eqns)
    args = [np.linspace(-1, 1, 8), np.linspace(0, 2, 8)]
    for got, want in zip(eval_func(fuse(f), args), eval_func(f, args)):
        np.testing.assert_array_equal(got, want)
