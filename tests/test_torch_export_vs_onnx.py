"""One network, one code: a recurrent text model through the torch.export frontend and through
torch.onnx.export + the ONNX frontend gives the same IR after the pipeline (up to views), and the torch.export
one matches torch. The torch.export frontend used to reorder the LSTM's gate blocks at run time (slices, pads,
adds of the weights), so the recurrent matrix product read an unpacked weight ('tiles') where the ONNX
model's reads a prepacked constant ('panels'): 2x slower.

The image blocks (a ResNet basic block, MobileNetV2/V3 blocks, an EfficientNet MBConv;
tests/torch_export_image_models.py) give the same IR after the pipeline equation by equation (names and
constants' values aside): batch norms folded into the convolutions before them, hardswish/hardsigmoid whole,
clamps in one form. The compiled torch.export package matches torch at two batch sizes."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from conftest import ROOT, captures_once

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")
import torch_export_image_models as images  # noqa: E402
import torch_export_transformers_models as models  # noqa: E402

MODELS_FILE = ROOT / "tests" / "torch_export_transformers_models.py"
IMAGES_FILE = ROOT / "tests" / "torch_export_image_models.py"
VIEWS = {"reshape", "transpose", "slice", "index", "gather"}


def _prims(f) -> Counter:
    """Prim name (a form's: sin for math[fn="sin"]; and a contraction's impl) of every equation, sub-functions
    included, views left out."""
    from ksbuild.ir.core import Func
    from ksbuild.prims.base import form_name
    out: Counter = Counter()
    for eqn in f.eqns:
        if eqn.prim.name not in VIEWS:
            out[(form_name(eqn.prim, eqn.params), eqn.params.get("impl"))] += 1  # (math's: sin, cos, ...)
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
    from ksbuild.prims.base import form_name
    f = compile_torch_kernel(MODELS_FILE.name, MODELS_FILE.parent, "make_causal_scores", "scores")
    names = [form_name(e.prim, e.params) for e in f.eqns]  # (le for compare[op="le"])
    assert not {"iota", "le", "ge", "and", "not"} & set(names), names
    floats = [e for e in f.eqns if e.prim.name == "constant" and e.outs[0].type.dtype == "f32"]
    assert len(floats) == 1 and any(e.prim.name == "transpose" for e in f.eqns)  # w, and w.t() computed
    module, (x,) = models.make_causal_scores()
    with torch.no_grad():
        want = module(x).numpy()
    np.testing.assert_allclose(eval_func(f, [x.numpy()])[0], want, rtol=1e-5, atol=1e-6)


# ---- image blocks ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def captures():
    """torch.export's capture of each image block made once in this module: the IR tests and the package's build
    (ksbuild.build, in this process) take the same capture (torch.export and run_decompositions are most of their
    time; the frontend's importer, the pipeline and the compile still run for each)."""
    yield from captures_once(IMAGES_FILE)


def _equations(f) -> list[str]:
    """f's text form without its constants, its value names and comments: equation by equation the prims, params
    and types (constants are listed in a different order by the two frontends)."""
    import re

    from ksbuild.ir.printer import print_func
    lines = [line for line in print_func(f, elide_over=0).splitlines() if "= constant[" not in line]
    return [re.sub(r"%[\w.]+", "%", re.sub(r"\s*#.*", "", line)) for line in lines]


@pytest.fixture(scope="module")
def lowered_images(tmp_path_factory, captures):
    """name -> (torch.export IR, ONNX IR) after the whole pipeline, the batch symbolic in both."""
    from ksbuild.frontends.onnx import compile_onnx_kernel
    from ksbuild.frontends.torch_export import compile_torch_kernel
    from ksbuild.transforms.pipeline import lower
    out = {}
    for name, make in images.IMAGE.items():
        module, args, _ = make()
        path = tmp_path_factory.mktemp("onnx") / f"{name}.onnx"
        torch.onnx.export(module, args, str(path), dynamo=False, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
        te = compile_torch_kernel(IMAGES_FILE.name, IMAGES_FILE.parent, make.__name__, name)
        out[name] = (lower(te), lower(compile_onnx_kernel(path, name)))
    return out


@pytest.mark.parametrize("name", list(images.IMAGE))
def test_image_blocks_have_the_same_ir_as_from_onnx(lowered_images, name):
    te, onnx = lowered_images[name]
    assert _equations(te) == _equations(onnx)


def test_image_blocks_compiled_match_torch(tmp_path, lowered_images, captures):
    """The torch.export packages (one build) against torch at batch 1 and 3 (the example has 2)."""
    import ksbuild
    lines = ["[package]", 'name = "blocks"', ""]
    for name, make in images.IMAGE.items():
        lines += [f"[kernels.{name}]", f'torch = "{IMAGES_FILE}:{make.__name__}"', ""]
    lines += ["[exports]"] + [f'{name} = "{name}"' for name in images.IMAGE]
    (tmp_path / "manifest.toml").write_text("\n".join(lines) + "\n")
    pkg = ksbuild.build(tmp_path / "manifest.toml")
    assert len(captures) == len(images.IMAGE)  # (the IR tests' captures: none made again)
    for name, make in images.IMAGE.items():
        module, _, _ = make()
        for batch in (1, 3):
            x = torch.randn(batch, 8, images.SIDE, images.SIDE, generator=torch.Generator().manual_seed(batch))
            with torch.no_grad():
                want = module(x).numpy()
            np.testing.assert_allclose(pkg.exports[name](x.numpy()), want, rtol=1e-4, atol=1e-5, err_msg=name)


def test_bert_layers_have_the_same_ir_as_from_onnx(tmp_path):
    """BertModel (2 layers, token ids alone) from torch.export and from torch.onnx.export: the same equations after
    the pipeline (float literals to 6 digits: ONNX's attention scale is (√s in float32)², 0.12499999 for 0.125) -
    the position embeddings folded, the all-True mask and its softmax guards gone, one transpose for kᵀ, the
    scale applied once to q kᵀ."""
    import re

    from ksbuild.frontends.onnx import compile_onnx_kernel
    from ksbuild.frontends.torch_export import compile_torch_kernel
    from ksbuild.transforms.pipeline import lower
    module, args, _ = models.make_bert_layers()
    path = tmp_path / "bert.onnx"
    torch.onnx.export(module, args, str(path), dynamo=False, input_names=["ids"], output_names=["y"],
                      dynamic_axes={"ids": {0: "batch"}, "y": {0: "batch"}})
    te = lower(compile_torch_kernel(MODELS_FILE.name, MODELS_FILE.parent, "make_bert_layers", "bert"))
    onnx = lower(compile_onnx_kernel(path, "bert"))
    digits = lambda lines: [re.sub(r"\d\.\d+(e-?\d+)?", lambda m: f"{float(m.group()):.6g}", x) for x in lines]  # noqa: E731
    assert digits(_equations(te)) == digits(_equations(onnx))


def test_the_last_step_of_a_batch_first_lstm_is_its_final_state(lowered):
    """`out[:, -1]` of a batch-first LSTM reads its stacked steps through a transpose of a unit axis, a reshape and a
    transpose; the ONNX model reads the final state. After the pipeline both read the loop's final carry (no stacked
    output: the steps are not stored) and are the same equations, views included (torch.export's was 1.18x the ONNX
    build's time for benchmarks/models' lstm_text at batch 1)."""
    _, te, onnx = lowered["text_lstm"]
    for f in (te, onnx):
        (loop,) = [e for e in f.eqns if e.prim.name == "loop"]
        assert len(loop.outs) == loop.params["n_carry"]
    assert _equations(te)[1:] == _equations(onnx)[1:]  # (after the header: ONNX names the result y101)


def _without_nan_guard(lines: list[str]) -> list[str]:
    """lines without torch.onnx.export(dynamo=True)'s guard after each softmax of attention, Where(IsNaN(p), 0, p)
    (part of the ONNX file's semantics): each ne(%, %) and the select of 0.0 after it."""
    isnan = [x.endswith("= ne(%, %)") for x in lines]
    return [x for i, x in enumerate(lines) if not isnan[i] and
            not (i and isnan[i - 1] and x.endswith("= select(%, 0.0: f32, %)"))]


@pytest.fixture(scope="module")
def exported_layers():
    """name -> models.LAYERS[name]'s torch.export IR after the pipeline, and its values on the example inputs:
    computed once for both ONNX exporters (the frontend and the pipeline are deterministic)."""
    from ksbuild.frontends.torch_export import compile_torch_kernel
    from ksbuild.ir.interp import eval_func
    from ksbuild.transforms.pipeline import lower
    done = {}

    def get(name):
        if name not in done:
            make = models.LAYERS[name]
            _, args, _ = make()
            te = lower(compile_torch_kernel(MODELS_FILE.name, MODELS_FILE.parent, make.__name__, name))
            done[name] = (te, eval_func(te, [a.numpy() for a in args])[0])
        return done[name]
    return get


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("name", list(models.LAYERS))
def test_more_transformers_have_the_same_ir_as_from_onnx(tmp_path, name, dynamo, exported_layers):
    """DistilBERT and a ViT (transformers, from configs) from torch.export and from torch.onnx.export (TorchScript and
    dynamo): the same equations after the pipeline, float literals to 6 digits (ONNX's attention scale is (√s in
    float32)², one float32 step from torch's 1/√E), and from dynamo's file but for its NaN guard after each softmax
    (its kᵀ through a reshape to 3-d is one transpose, its GELU/eps float32 literals the Python floats'); the values
    of the torch.export one are torch's."""
    import re

    from ksbuild.frontends.onnx import compile_onnx_kernel
    from ksbuild.transforms.pipeline import lower
    make = models.LAYERS[name]
    module, args, dims = make()
    path = tmp_path / f"{name}.onnx"
    if dynamo:
        torch.onnx.export(module, args, str(path), dynamo=True, input_names=["x"], output_names=["y"],
                          dynamic_shapes=dims, external_data=False)
    else:
        torch.onnx.export(module, args, str(path), dynamo=False, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    te, got = exported_layers(name)
    onnx = lower(compile_onnx_kernel(path, name))
    digits = lambda lines: [re.sub(r"\d\.\d+(e-?\d+)?", lambda m: f"{float(m.group()):.6g}", x) for x in lines]  # noqa: E731
    assert digits(_equations(te)) == digits(_without_nan_guard(_equations(onnx)))
    with torch.no_grad():
        want = module(*args).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_computations_on_buffers_alone_are_constants():
    """Llama's rotary embedding: cos and sin of inv_freq (a buffer) times the positions, the same at every call, are
    computed by torch when the kernel is built (as torch.onnx.export folds them), not in the library; the values are
    torch's."""
    from ksbuild.frontends.torch_export import compile_torch_kernel
    from ksbuild.ir.interp import eval_func
    from ksbuild.transforms.pipeline import lower
    f = lower(compile_torch_kernel(MODELS_FILE.name, MODELS_FILE.parent, "make_llama_layers", "llama"))
    assert not {"cos", "sin"} & {p for p, _ in _prims(f)}
    module, args, _ = models.make_llama_layers()
    with torch.no_grad():
        want = module(*args).numpy()
    np.testing.assert_allclose(eval_func(f, [a.numpy() for a in args])[0], want, rtol=1e-4, atol=1e-5)
