"""The ONNX frontend: an ONNX model file as a kernel (`[kernels.X] onnx = "model.onnx"`).

`compile_onnx_kernel` loads the model, visits its graph (`graph.py`) with the op handlers
(`ops_*.py`, each a thin parser of one family of ONNX ops over `ksbuild/ops`) and returns the
IR function: graph inputs in order, then (weights = "external") the float initializers, and
the graph outputs in order as results.
"""
from __future__ import annotations

from pathlib import Path

from ...errors import KsbuildError, Location
from ...ir.core import Func

WEIGHT_MODES = ("embed", "external")


def load_model(path: Path):
    """The ModelProto of an .onnx file (external data read from its folder)."""
    try:
        import onnx
    except ImportError:
        raise KsbuildError("ONNX kernels need the 'onnx' package", Location(str(path)),
                           hint="pip install onnx (or ksbuild[onnx])") from None
    try:
        return onnx.load(str(path))
    except Exception as e:  # noqa: BLE001  protobuf or file errors: report them as the user's
        raise KsbuildError(f"cannot read ONNX model: {e}", Location(str(path))) from None


def compile_onnx_kernel(path: Path, name: str, float_dtype: str = "f32", weights: str = "embed",
                        model=None, semantics: str = "onnxruntime") -> Func:
    """The IR function of an ONNX model's main graph."""
    return import_model(path, name, float_dtype, weights, model, semantics)[0]


def import_model(path: Path, name: str, float_dtype: str = "f32", weights: str = "embed", model=None,
                 semantics: str = "onnxruntime"):
    """(IR function, names of the initializers that became parameters) of an ONNX model. `semantics` says
    whom to follow where onnxruntime and onnx.reference compute differently ("onnxruntime" | "reference")."""
    from . import handlers  # noqa: F401  (registers every op handler)
    from .graph import Importer
    from .node import NeedsConstant
    model = model if model is not None else load_model(path)
    check_model(Path(path), model)
    embedded: set[str] = set()
    while True:
        imp = Importer(Path(path), model, float_dtype, weights, frozenset(embedded), semantics)
        try:
            return imp.run(name), list(imp.external)
        except NeedsConstant as e:
            if e.value not in imp.external or e.value in embedded:
                raise
            embedded.add(e.value)  # a weight used as a shape or axes stays embedded; import again
        except KsbuildError as e:
            raise _with_onnx_verdict(e, model) from None


def _with_onnx_verdict(e: KsbuildError, model) -> KsbuildError:
    """e, with onnx's strict shape inference's verdict added when the model itself is invalid (an exporter that wrote
    inconsistent shapes: nn.LSTM(proj_size=4) through torch's dynamo exporter), which onnxruntime refuses too."""
    import onnx
    try:
        onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
        return e
    except Exception as bad:  # noqa: BLE001  onnx's own error types vary
        verdict = str(bad).strip().splitlines()[0][:300] if str(bad).strip() else type(bad).__name__
    note = f"onnx's shape inference finds the model itself inconsistent ({verdict}): the exporter may be at fault"
    return KsbuildError(e.message, e.loc, f"{e.hint}; {note}" if e.hint else note)


def check_model(path: Path, model) -> None:
    """A KsbuildError naming the model file when it cannot be a kernel: no graph (an empty or truncated
    file parses as an empty model), a graph with no outputs, or an opset newer than the onnx package knows."""
    if not model.HasField("graph"):
        raise KsbuildError("the file holds no graph (an empty or truncated .onnx file?)", Location(str(path)),
                           hint="export the model again; onnx.checker.check_model(path) tells what is wrong")
    if not model.graph.output:
        raise KsbuildError("the graph has no outputs: the kernel would compute nothing", Location(str(path)),
                           hint="list the values it computes as graph outputs (output_names= in torch.onnx.export)")
    _check_opset(path, model)


def _check_opset(path: Path, model) -> None:
    """The default domain's and ai.onnx.ml's opsets must be ones the installed onnx package defines (its op
    schemas are how ksbuild reads the ops, and expands those defined as functions)."""
    import onnx
    newest = onnx.defs.onnx_opset_version()
    newest_ml = max((v for (domain, v) in onnx.helper.OP_SET_ID_VERSION_MAP if domain == "ai.onnx.ml"), default=0)
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx") and imp.version > newest:
            raise KsbuildError(f"the model imports opset {imp.version} of the default ONNX domain; the installed "
                               f"onnx {onnx.__version__} knows opsets up to {newest}", Location(str(path)),
                               hint=f"export with opset_version={newest} or lower, or upgrade onnx "
                                    "(pip install -U onnx)")
        if imp.domain == "ai.onnx.ml" and newest_ml and imp.version > newest_ml:
            raise KsbuildError(f"the model imports opset {imp.version} of ai.onnx.ml; the installed onnx "
                               f"{onnx.__version__} knows its opsets up to {newest_ml}", Location(str(path)),
                               hint="convert with a target opset the onnx package knows (skl2onnx: "
                                    f"target_opset={{'ai.onnx.ml': {newest_ml}}}), or upgrade onnx")
