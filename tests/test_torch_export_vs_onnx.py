"""One network, one code: a recurrent text model through the torch.export frontend and through
torch.onnx.export + the ONNX frontend gives the same IR after the pipeline (up to views), and the torch.export
one matches torch. The torch.export frontend used to reorder the LSTM's gate blocks at run time (slices, pads,
adds of the weights), so the recurrent matrix product read an unpacked weight ('tiles') where the ONNX
model's reads a prepacked constant ('panels'): 2x slower."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from conftest import ROOT

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")
import torch_export_transformers_models as models  # noqa: E402

MODELS_FILE = ROOT / "tests" / "torch_export_transformers_models.py"
VIEWS = {"reshape", "transpose", "slice", "index", "gather"}


def _prims(f) -> Counter:
    """Prim name (and a contraction's impl) of every equation, sub-functions included, views left out."""
    from ksbuild.ir.core import Func
    out: Counter = Counter()
    for eqn in f.eqns:
        if eqn.prim.name not in VIEWS:
            out[(eqn.prim.name, eqn.params.get("impl"))] += 1
        for v in eqn.params.values():
            if isinstance(v, Func):
                out += _prims(v)
    return out


@pytest.fixture(scope="module")
def lowered(tmp_path_factory):
    """name -> (torch.export IR, ONNX IR), both after the whole pipeline."""
    from ksbuild.frontends.onnx import compile_onnx_kernel
    from ksbuild.frontends.torch_export import compile_torch_kernel
    from ksbuild.transforms.pipeline import lower
    out = {}
    for name, make in models.RECURRENT.items():
        module, args = make()
        path = tmp_path_factory.mktemp("onnx") / f"{name}.onnx"
        torch.onnx.export(module.eval(), args, str(path), dynamo=False)
        te = compile_torch_kernel(MODELS_FILE.name, MODELS_FILE.parent, make.__name__, name)
        out[name] = (te, lower(te), lower(compile_onnx_kernel(path, name)))
    return out


@pytest.mark.parametrize("name", list(models.RECURRENT))
def test_same_ir_as_from_onnx(lowered, name):
    _, te, onnx = lowered[name]
    assert _prims(te) == _prims(onnx)


@pytest.mark.parametrize("name", list(models.RECURRENT))
def test_recurrent_models_match_torch(lowered, name):
    from ksbuild.ir.interp import eval_func
    module, args = models.RECURRENT[name]()
    with torch.no_grad():
        want = torch.utils._pytree.tree_leaves(module.eval()(*args))
    got = eval_func(lowered[name][0], [a.numpy() for a in args])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-4, atol=1e-5)


def test_values_independent_of_the_inputs_are_constants():
    """The causal mask (arange, comparisons, and, not) is computed by torch when the kernel is built, as
    torch.onnx.export's optimizer folds it into an initializer; the weight used transposed stays one weight."""
    from ksbuild.frontends.torch_export import compile_torch_kernel
    from ksbuild.ir.interp import eval_func
    f = compile_torch_kernel(MODELS_FILE.name, MODELS_FILE.parent, "make_causal_scores", "scores")
    names = [e.prim.name for e in f.eqns]
    assert not {"iota", "le", "ge", "and", "not"} & set(names), names
    floats = [e for e in f.eqns if e.prim.name == "constant" and e.outs[0].type.dtype == "f32"]
    assert len(floats) == 1 and any(e.prim.name == "transpose" for e in f.eqns)  # w, and w.t() computed
    module, (x,) = models.make_causal_scores()
    with torch.no_grad():
        want = module(x).numpy()
    np.testing.assert_allclose(eval_func(f, [x.numpy()])[0], want, rtol=1e-5, atol=1e-6)
