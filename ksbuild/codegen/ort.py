"""The view of src/P_ort.cpp (backend = "ort"): each export as an ONNX Runtime custom op.

For each export: its ONNX element types in and out, where each dim is read (the first input axis
whose size is that dim), the shape every input must have, the output shapes, and the call of the
export's C function. An export the custom ops cannot express is listed with the reason instead.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.types import C_TYPES
from .storage import dim_expr
from .viewmodel import ArgView, ExportView

ONNX_TYPES = {"f32": "FLOAT", "f64": "DOUBLE", "i8": "INT8", "i16": "INT16", "i32": "INT32", "i64": "INT64",
              "u8": "UINT8", "u16": "UINT16", "u32": "UINT32", "u64": "UINT64", "bool": "BOOL"}
"""ksbuild dtypes as ONNX Runtime's ONNXTensorElementDataType names (ONNX_TENSOR_ELEMENT_DATA_TYPE_<name>)."""

_DTYPE_OF_C = {C_TYPES[d]: d for d in ONNX_TYPES}


@dataclass
class OrtOp:
    """One export as a custom op: what src/P_ort.cpp prints for it."""

    name: str
    ins: list[str]                       # ONNX element type names of the inputs
    outs: list[str]                      # ... and of the outputs
    dims: list[tuple[str, int, int]]     # (dim, input, axis): where each dim is read
    shapes: list[tuple[int, str]]        # (input, C++ initializer list): the shape each tensor input must have
    lines: list[str] = field(default_factory=list)  # the body after the checks: outputs, workspace, call


def ort_ops(views: list[ExportView]) -> tuple[list[OrtOp], list[tuple[str, str]]]:
    """The custom ops of a package's exports, and (export, reason) for the exports left out."""
    ops, skipped = [], []
    for v in views:
        reason = _unsupported(v)
        if reason:
            skipped.append((v.name, reason))
        else:
            ops.append(_op(v))
    return ops, skipped


def _unsupported(v: ExportView) -> str:
    dtypes = [a.dtype for a in v.args if a.role in ("in", "out")]
    dtypes += [_DTYPE_OF_C.get(v.ret, v.ret)] if _returns(v) else []
    bad = [d for d in dtypes if d not in ONNX_TYPES]
    if bad:
        return f"element type {bad[0]} has no custom-op form"
    ins = [a for a in v.args if a.role == "in"]
    if not ins or not dtypes[len(ins):]:
        return "a custom op needs an input and an output"
    unread = [d for d in v.dims if _where(d, ins) is None]
    return f"dim {unread[0]} is the size of no input axis" if unread else ""


def _returns(v: ExportView) -> bool:
    return v.kind == "scalar" and v.ret != "void"


def _where(dim: str, ins: list[ArgView]) -> tuple[int, int] | None:
    return next(((i, axis) for i, a in enumerate(ins) for axis, d in enumerate(a.shape) if d == dim), None)


def _shape(shape: list) -> str:
    return "{" + ", ".join(dim_expr(d) for d in shape) + "}"


def _op(v: ExportView) -> OrtOp:
    ins = [a for a in v.args if a.role == "in"]
    outs = [a for a in v.args if a.role == "out"]
    out_types = ([_DTYPE_OF_C[v.ret]] if _returns(v) else []) + [a.dtype for a in outs]
    dims = [(d, *_where(d, ins)) for d in v.dims]
    shapes = [(i, _shape(a.shape)) for i, a in enumerate(ins)]
    return OrtOp(v.name, [ONNX_TYPES[a.dtype] for a in ins], [ONNX_TYPES[d] for d in out_types], dims, shapes,
                 _call_lines(v, ins, outs))


def _call_lines(v: ExportView, ins: list[ArgView], outs: list[ArgView]) -> list[str]:
    """Inputs, outputs (from ONNX Runtime) and workspace as locals named like the C parameters, then the call."""
    lines = [_input_line(a, i) for i, a in enumerate(ins)]
    k0 = 1 if _returns(v) else 0
    lines += [f"{C_TYPES[a.dtype]}* {a.name} = c.output<{C_TYPES[a.dtype]}>({k0 + k}, {_shape(a.shape)});"
              for k, a in enumerate(outs)]
    if _returns(v):
        lines.append(f"{v.ret}* result = c.output<{v.ret}>(0, {{}});")
    if v.kind == "tensor":
        lines.append(f"void* workspace = c.workspace({v.c_name}_workspace_size({v.dim_args}));")
    call = f"{v.c_name}({v.call_args})"
    lines.append("if (c.failed()) return c.status();")
    if v.kind == "tensor":
        return lines + [f"return c.finish({call});"]
    return lines + [f"*result = {call};" if _returns(v) else f"{call};", "return c.finish(0);"]


def _input_line(a: ArgView, i: int) -> str:
    c = C_TYPES[a.dtype]
    return f"const {c}* {a.name} = c.input<{c}>({i});" if a.shape else f"const {c} {a.name} = c.scalar<{c}>({i});"
