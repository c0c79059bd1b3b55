"""transformers' GPT-2 and BERT through the torch.export frontend (small configs from their constructors,
random weights, no downloads), the ops they need (torch.cat's empty 1-D operands, bitwise ops on masks and
integers) and errors that name the line that made a node: a helper's or a library's, called from the
user's forward; a failure inside run_decompositions() named as that stage, at the node it was lowering.
Oracles: the eager torch modules."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import DEBUG, ROOT, captures_once

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
import torch_export_transformers_models as models  # noqa: E402

from ksbuild.errors import KsbuildError  # noqa: E402

MODELS_FILE = ROOT / "tests" / "torch_export_transformers_models.py"
HELPERS_FILE = ROOT / "tests" / "torch_export_helpers.py"
TOL = dict(rtol=1e-4, atol=2e-5)


def _manifest(folder, kernels: dict[str, str]):
    lines = ["[package]", 'name = "tfm"', ""]
    for k, make in kernels.items():
        lines += [f"[kernels.{k}]", f'torch = "{MODELS_FILE}:{make}"', ""]
    lines += ["[exports]"] + [f'{k} = "{k}"' for k in kernels]
    path = folder / "manifest.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def captures():
    """torch.export's capture of each make function of MODELS_FILE made once in this module: the package's build
    (ksbuild.build, in this process) and test_library_nodes_name_the_library_line take the same capture of
    GPT-2."""
    yield from captures_once(MODELS_FILE)


@pytest.fixture(scope="module")
def pkg(tmp_path_factory, captures):
    """GPT-2 (without and with its cache), BERT and the op modules, compiled once."""
    import ksbuild
    kernels = {k: make.__name__ for k, make in {**models.TRANSFORMERS, **models.OPS, **models.BATCHED}.items()}
    return ksbuild.build(_manifest(tmp_path_factory.mktemp("tfm"), kernels), optimize=DEBUG)


def _eager(make) -> tuple[list, list]:
    """The example inputs and the leaves of the module's eager output (the kernel's outputs, in order)."""
    module, args = make()
    with torch.no_grad():
        out = module.eval()(*args)
    return [a.numpy() for a in args], [t.numpy() for t in torch.utils._pytree.tree_leaves(out)]


def _check(got, want) -> None:
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, **TOL)
        else:
            assert g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("name", list(models.TRANSFORMERS))
def test_transformers_match_torch(pkg, name):
    """GPT2Model (use_cache=False), GPT2LMHeadModel (logits, then the cache's keys and values of each layer)
    and BertModel with a padding mask, against their eager outputs."""
    args, want = _eager(models.TRANSFORMERS[name])
    _check(pkg.exports[name](*args), want)
    assert len(want) == {"gpt2": 1, "gpt2_lm": 5, "bert": 2}[name]


def _batch_of(make, batch: int) -> list:
    """make()'s example inputs grown or cut to `batch` rows (token ids drawn anew; masks' first row repeated)."""
    _, args, _ = make()
    ids = torch.randint(0, models.VOCAB, (batch, models.SEQ), generator=torch.Generator().manual_seed(batch))
    return [ids] + [a[:1].expand(batch, -1).contiguous() for a in args[1:]]


@pytest.mark.parametrize("name", list(models.BATCHED))
def test_a_symbolic_batch_matches_torch_at_batch_1_and_8(pkg, name):
    """GPT2Model and BertModel (with its padding mask) with the batch a dim of the export (torch.export.Dim),
    one build for both sizes: scaled_dot_product_attention kept whole (with torch's decomposition GPT-2's .view
    of the attention output fails inside run_decompositions())."""
    module, _, _ = models.BATCHED[name]()
    for batch in (1, 8):
        args = _batch_of(models.BATCHED[name], batch)
        with torch.no_grad():
            want = [t.numpy() for t in torch.utils._pytree.tree_leaves(module.eval()(*args))]
        _check(pkg.exports[name](*[a.numpy() for a in args]), want)


@pytest.mark.parametrize("name", list(models.SDPA))
def test_scaled_dot_product_attention_matches_torch(name):
    """F.scaled_dot_product_attention kept whole (its own handler, ops/nn.py's attention) against torch: no
    mask, a boolean mask with a row that attends to nothing, an additive float mask with a scale, is_causal with
    more keys than queries, enable_gqa (reference interpreter)."""
    from ksbuild.frontends.torch_export.capture import capture
    from ksbuild.frontends.torch_export.importer import Importer
    from ksbuild.ir.interp import eval_func
    captured = capture(MODELS_FILE.name, MODELS_FILE.parent, models.SDPA[name].__name__, None)
    assert [str(n.target) for n in captured.program.graph.nodes if n.op == "call_function"] == \
        ["aten.scaled_dot_product_attention.default"]
    f = Importer(captured).run(name)
    args, want = _eager(models.SDPA[name])
    _check(tuple(eval_func(f, args)), want)


@pytest.mark.parametrize("name", list(models.OPS))
def test_ops_match_torch(pkg, name):
    args, want = _eager(models.OPS[name])
    _check(pkg.exports[name](*args), want)


@pytest.mark.parametrize("name", list(models.OPS))
def test_ops_through_the_interpreter(name):
    """The same ops' IR through the reference interpreter (no C++ build)."""
    from ksbuild.frontends.torch_export import compile_torch_kernel
    from ksbuild.ir.interp import eval_func
    f = compile_torch_kernel(MODELS_FILE.name, MODELS_FILE.parent, models.OPS[name].__name__, name)
    args, want = _eager(models.OPS[name])
    _check(tuple(eval_func(f, args)), want)


# ---- errors ----------------------------------------------------------------------------------------------

def _compile(tmp_path, make: str):
    from ksbuild.exports import build_exports
    from ksbuild.manifest import load_manifest
    return build_exports(load_manifest(_manifest(tmp_path, {"m": make})))


def _line_of(file, text: str) -> int:
    return next(i for i, line in enumerate(file.read_text().splitlines(), 1) if text in line)


def test_unsupported_op_names_the_helper_line_and_the_caller(tmp_path):
    """The node's line is the helper's, in its own file; the forward that called it follows."""
    with pytest.raises(KsbuildError) as e:
        _compile(tmp_path, "make_helper")
    loc = e.value.loc
    assert "aten.cummax" in e.value.message and "cummax" in loc.node
    assert (loc.file, loc.line) == (str(HELPERS_FILE), _line_of(HELPERS_FILE, "torch.cummax"))
    assert [(c.file, c.line) for c in loc.called_from] == [(str(MODELS_FILE), _line_of(MODELS_FILE, "caller's line"))]
    text = str(e.value)
    assert "torch.cummax(x, dim=1)" in text and "called from" in text and "running_max(x) * 2" in text


def test_library_nodes_name_the_library_line(tmp_path, captures):
    """A node transformers made names transformers' line, called from ... the user's forward (here the
    make file has no forward: the model is transformers' own, so the chain ends in transformers)."""
    from ksbuild.frontends.torch_export import capture as capture_module
    from ksbuild.frontends.torch_export.importer import Importer
    captured = capture_module.capture(MODELS_FILE.name, MODELS_FILE.parent, "make_gpt2", None)
    imp = Importer(captured)
    node = next(n for n in captured.program.graph.nodes if n.op == "call_function" and "addmm" in str(n.target))
    loc = imp.node_loc(node)
    assert loc.file.endswith("transformers/pytorch_utils.py") and "torch.addmm" in loc.source_line
    assert loc.called_from and loc.called_from[0].file.endswith("modeling_gpt2.py")


def test_a_failure_in_run_decompositions_names_the_stage_and_the_node(tmp_path):
    with pytest.raises(KsbuildError) as e:
        _compile(tmp_path, "make_boom")
    err = e.value
    assert err.message.startswith("run_decompositions()") and "ValueError: boom cannot be lowered" in err.message
    assert "torch.export.export raised" not in err.message and "While executing" not in err.message
    assert "kstest.boom" in err.loc.node
    assert (err.loc.file, err.loc.line) == (str(MODELS_FILE), _line_of(MODELS_FILE, "boom's line"))


def test_an_output_pytree_cannot_flatten_is_named(tmp_path):
    with pytest.raises(KsbuildError, match="output contains a value of type Opaque") as e:
        _compile(tmp_path, "make_opaque")
    assert "register_pytree_node" in e.value.hint and e.value.loc.file == str(MODELS_FILE)
