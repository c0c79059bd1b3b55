"""QDQ folding: a quantized model's DequantizeLinear → op → QuantizeLinear patterns as integer operators.

Quantizers (onnxruntime's quantize_static in its QDQ format, torch's PT2E export, TFLite converters) write an int8
model as float operators between DequantizeLinear and QuantizeLinear nodes. As onnxruntime's graph optimizer does,
`fold_qdq` rewrites the node list before import (a pure function of the nodes and initializers):

- DQ(x), DQ(w) [, DQ(bias int32)] → Conv → [Relu | Clip] → Q  becomes QLinearConv;
- DQ(a), DQ(b) → MatMul → [Relu | Clip] → Q (b per tensor, or constant [K, N] per column)  becomes QLinearMatMul;
- DQ(a), DQ(b) [, DQ(bias)] → Gemm (alpha = beta = 1, no transA) → [Relu | Clip] → Q  becomes com.microsoft QGemm;
- DQ(x) → MaxPool, Reshape, Flatten, Transpose, Squeeze, Unsqueeze → Q of the same scale and zero point becomes the
  op on the 8-bit tensor (choosing a maximum or moving elements commutes with a monotone quantization);
- DQ(a), DQ(b) → Mul | Add → Q (per tensor, one 8-bit type) becomes com.microsoft QLinearMul | QLinearAdd, and
  DQ(x) → GlobalAveragePool → Q com.microsoft QLinearGlobalAveragePool, and DQ(x) → Softmax (axis -1) → Q
  com.microsoft QLinearSoftmax, with onnxruntime's rounding (its optimizer folds them).

A Relu or Clip between the op and Q is folded into the integer operator's output bounds, exactly: quantization
is monotone, so Q(relu(v)) = max(Q(v), Q(0)) = max(Q(v), y_zero), and Clip's bounds quantize alike. They travel as
the private attributes ksbuild_lo and ksbuild_hi of the rewritten node (ops_quant.py reads them). The op's output
must feed that Q alone (and not be a graph output); the DequantizeLinear nodes stay (their outputs may have other
readers; unread ones cost nothing). Everything else (ReduceMean, Sigmoid, ...) keeps its float form between
DQ and Q, which computes the operator's definition exactly (a region of it that reads one 8-bit tensor becomes a
table: transforms/tabulate.py).
"""
from __future__ import annotations

import numpy as np

PASS_THROUGH = frozenset({"MaxPool", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze"})
EIGHT_BIT = {2: (0, 255), 3: (-128, 127)}  # TensorProto.UINT8, INT8: the saturation range


class _Graph:
    """Who makes and who reads each value of a node list, and the values known from initializers and Constants."""

    def __init__(self, nodes, inits: dict, outputs: set[str]):
        from .node import tensor_array
        self.nodes, self.outputs = list(nodes), outputs
        self.producer = {o: n for n in self.nodes for o in n.output if o}
        self.readers: dict[str, list] = {}
        for n in self.nodes:
            for i in n.input:
                if i:
                    self.readers.setdefault(i, []).append(n)
        self.known = {name: tensor_array(t) for name, t in inits.items()}
        for n in self.nodes:
            if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and len(n.attribute) == 1 and \
                    n.attribute[0].name == "value":
                self.known[n.output[0]] = tensor_array(n.attribute[0].t)

    def made_by(self, name: str, op: str):
        n = self.producer.get(name)
        return n if n is not None and n.op_type == op and n.domain in ("", "ai.onnx") else None

    def only_reader(self, name: str, ops: tuple[str, ...]):
        """The one node reading `name` if it is one of ops (and `name` is not a graph output), else None."""
        readers = self.readers.get(name, [])
        if name in self.outputs or len(readers) != 1 or readers[0].op_type not in ops or \
                readers[0].domain not in ("", "ai.onnx"):
            return None
        return readers[0]

    def value(self, node, i: int):
        return self.known.get(node.input[i]) if i < len(node.input) and node.input[i] else None


def _attrs(node) -> dict:
    from onnx import helper
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _dq_parts(g: _Graph, dq, per_axis: int | None = None):
    """(input, scale, zero point or None) of a DequantizeLinear with known scale and zero point: per tensor, or per
    slice along `per_axis`; None when it is something else."""
    if dq is None or len(dq.input) < 2:
        return None
    scale, zero = g.value(dq, 1), g.value(dq, 2)
    if scale is None or (len(dq.input) > 2 and dq.input[2] and zero is None):
        return None
    if scale.size != 1:
        axis = _attrs(dq).get("axis", 1)
        if per_axis is None or axis != per_axis or scale.ndim != 1:
            return None
    return dq.input[0], dq.input[1], dq.input[2] if len(dq.input) > 2 and dq.input[2] else None


def _quantize_bound(v: float, scale: float, zero: int, lo: int, hi: int) -> int:
    q = int(np.rint(np.float32(v) / np.float32(scale))) + zero
    return min(max(q, lo), hi)


def _tail(g: _Graph, out: str):
    """The Q after `out`, through an optional Relu or Clip: (q node, lo, hi) with the bounds those fold into, or
    None."""
    act = g.only_reader(out, ("Relu", "Clip"))
    q = g.only_reader(act.output[0] if act is not None else out, ("QuantizeLinear",))
    if q is None or len(q.input) < 3 or g.value(q, 1) is None or g.value(q, 2) is None:
        return None
    scale, zero = g.value(q, 1), g.value(q, 2)
    if scale.size != 1 or zero.size != 1 or zero.dtype not in (np.uint8, np.int8):
        return None
    lo, hi = (0, 255) if zero.dtype == np.uint8 else (-128, 127)
    z = int(zero.reshape(-1)[0])
    if act is not None and act.op_type == "Relu":
        lo = max(lo, z)
    elif act is not None:
        bounds = [g.value(act, i) if i < len(act.input) and act.input[i] else None for i in (1, 2)]
        if any(act.input[i] and bounds[i - 1] is None for i in (1, 2) if i < len(act.input)):
            return None
        s = float(scale.reshape(-1)[0])
        if bounds[0] is not None:
            lo = max(lo, _quantize_bound(float(bounds[0]), s, z, lo, hi))
        if bounds[1] is not None:
            hi = min(hi, _quantize_bound(float(bounds[1]), s, z, lo, hi))
    return q, lo, hi


def _zero_constant(name: str, like: np.ndarray | None, dtype):
    """A Constant node of one zero (a DequantizeLinear without a zero point: 0 of its input's type)."""
    from onnx import helper, numpy_helper
    value = np.zeros((), dtype=dtype if like is None else like.dtype)
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name))


def _fold_product(g: _Graph, node, made: list):
    """The integer operator replacing Conv, MatMul or Gemm `node` and its Q, or None."""
    from onnx import helper
    attrs = _attrs(node)
    if node.op_type == "Gemm" and (attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1.0 or
                                   attrs.get("beta", 1.0) != 1.0):
        return None
    w_axis = {"Conv": 0, "MatMul": 1, "Gemm": 0 if attrs.get("transB", 0) else 1}[node.op_type]
    x = _dq_parts(g, g.made_by(node.input[0], "DequantizeLinear"))
    w = _dq_parts(g, g.made_by(node.input[1], "DequantizeLinear"), w_axis)
    tail = _tail(g, node.output[0])
    if x is None or w is None or tail is None:
        return None
    if node.op_type == "MatMul" and g.known[w[1]].size != 1 and getattr(g.known.get(w[0]), "ndim", 0) != 2:
        return None  # (a scale per column: constant weights [K, N], QLinearMatMul's b_scale [N])
    bias = None
    if len(node.input) > 2 and node.input[2]:
        b = _dq_parts(g, g.made_by(node.input[2], "DequantizeLinear"), 0)
        value = g.known.get(b[0]) if b is not None else None
        if value is None or value.dtype != np.int32 or (b[2] is not None and np.any(g.known[b[2]] != 0)):
            return None
        bias = b[0]
    q, lo, hi = tail
    ins = []
    for value, scale, zero in (x, w):
        if zero is None:
            zero = f"{node.name or node.output[0]}_ksbuild_zero_{len(made)}"
            made.append(_zero_constant(zero, None, g.known[value].dtype if value in g.known else np.uint8))
        ins += [value, scale, zero]
    ins += [q.input[1], q.input[2]] + ([bias] if bias else [])
    op, domain = {"Conv": ("QLinearConv", ""), "MatMul": ("QLinearMatMul", ""),
                  "Gemm": ("QGemm", "com.microsoft")}[node.op_type]
    if op == "QGemm":  # (its inputs: A, a_scale, a_zero, B, b_scale, b_zero, C, y_scale, y_zero)
        ins = ins[:6] + [bias or ""] + ins[6:8]
        keep = {"transB": attrs.get("transB", 0)}
    else:
        keep = attrs
    new = helper.make_node(op, ins, [q.output[0]], name=f"{node.name or node.output[0]}_qdq", domain=domain, **keep)
    range_lo, range_hi = EIGHT_BIT[2 if g.value(q, 2).dtype == np.uint8 else 3]
    if lo != range_lo:
        new.attribute.append(helper.make_attribute("ksbuild_lo", lo))
    if hi != range_hi:
        new.attribute.append(helper.make_attribute("ksbuild_hi", hi))
    return new, q


def _fold_pass_through(g: _Graph, node):
    """`node` (a PASS_THROUGH op) reading DQ(x) and read by a Q of the same scale and zero point: the op on x
    writing the Q's output, or None."""
    dq = g.made_by(node.input[0], "DequantizeLinear")
    parts = _dq_parts(g, dq)
    q = g.only_reader(node.output[0], ("QuantizeLinear",))
    if parts is None or q is None or len(q.input) < 3 or parts[2] is None or any(o for o in node.output[1:]):
        return None
    same = all(g.value(q, i) is not None and np.array_equal(g.value(q, i), g.value(dq, i)) and
               g.value(q, i).dtype == g.value(dq, i).dtype for i in (1, 2))
    if not same:
        return None
    from onnx import NodeProto
    new = NodeProto()
    new.CopyFrom(node)
    new.input[0] = parts[0]
    new.output[0] = q.output[0]
    return new, q


def _fold_binary(g: _Graph, node):
    """Mul or Add of two per-tensor DQs of one 8-bit type, read by a Q of that type alone: onnxruntime's
    com.microsoft QLinearMul or QLinearAdd of the 8-bit tensors (its rounding: ops_quant_contrib.py), or None."""
    from onnx import helper
    parts = [_dq_parts(g, g.made_by(i, "DequantizeLinear")) for i in node.input[:2]]
    q = g.only_reader(node.output[0], ("QuantizeLinear",))
    if len(node.input) != 2 or any(p is None or p[2] is None for p in parts) or q is None or len(q.input) < 3:
        return None
    scales = [g.known[p[1]] for p in parts] + [g.value(q, 1)]
    zeros = [g.known[p[2]] for p in parts] + [g.value(q, 2)]
    if any(v is None or v.size != 1 for v in scales + zeros) or any(s.dtype != np.float32 for s in scales) or \
            len({z.dtype for z in zeros}) != 1 or zeros[0].dtype not in (np.uint8, np.int8):
        return None
    ins = [*parts[0], *parts[1], q.input[1], q.input[2]]
    return helper.make_node(f"QLinear{node.op_type}", ins, [q.output[0]], name=f"{node.name or node.output[0]}_qdq",
                            domain="com.microsoft"), q


def _fold_unary(g: _Graph, node, op: str, **attrs):
    """node of a per-tensor DQ, read by a Q of the same 8-bit type alone (constant f32 scales), as onnxruntime's
    com.microsoft operator op of the DQ's input and the Q's scale and zero point; or None."""
    from onnx import helper
    parts = _dq_parts(g, g.made_by(node.input[0], "DequantizeLinear"))
    q = g.only_reader(node.output[0], ("QuantizeLinear",))
    if parts is None or parts[2] is None or q is None or len(q.input) < 3:
        return None
    scales, zeros = [g.known[parts[1]], g.value(q, 1)], [g.known[parts[2]], g.value(q, 2)]
    if any(v is None or v.size != 1 for v in scales + zeros) or any(s.dtype != np.float32 for s in scales) or \
            zeros[0].dtype != zeros[1].dtype or zeros[0].dtype not in (np.uint8, np.int8):
        return None
    return helper.make_node(op, [*parts, q.input[1], q.input[2]], [q.output[0]],
                            name=f"{node.name or node.output[0]}_qdq", domain="com.microsoft", **attrs), q


def _fold_global_average(g: _Graph, node):
    """GlobalAveragePool as QLinearGlobalAveragePool (its arithmetic: ops_quant_contrib.py), as onnxruntime's
    optimizer folds it; or None."""
    return _fold_unary(g, node, "QLinearGlobalAveragePool", channels_last=0)


def _fold_softmax(g: _Graph, node):
    """Softmax over the last axis as QLinearSoftmax (onnxruntime's table and rounding: ops_quant_contrib.py), as its
    optimizer folds it; or None. (Only an explicit axis -1: the last axis under every opset's Softmax.)"""
    if _attrs(node).get("axis") != -1:
        return None
    return _fold_unary(g, node, "QLinearSoftmax", axis=-1, opset=13)


def fold_qdq(nodes, inits: dict, outputs: set[str]) -> list:
    """The node list with the QDQ patterns above folded (the same list when there is none)."""
    if not any(n.op_type == "DequantizeLinear" for n in nodes):
        return list(nodes)
    g = _Graph(nodes, inits, outputs)
    made: list = []
    replaced, dropped = {}, set()
    for n in g.nodes:
        if n.domain not in ("", "ai.onnx"):
            continue
        folded = _fold_product(g, n, made) if n.op_type in ("Conv", "MatMul", "Gemm") else \
            _fold_pass_through(g, n) if n.op_type in PASS_THROUGH else \
            _fold_binary(g, n) if n.op_type in ("Mul", "Add") else \
            _fold_global_average(g, n) if n.op_type == "GlobalAveragePool" else \
            _fold_softmax(g, n) if n.op_type == "Softmax" else None
        if folded is None:
            continue
        new, q = folded
        replaced[id(n)] = new
        dropped.add(id(q))
        act = g.only_reader(n.output[0], ("Relu", "Clip"))
        if act is not None and n.op_type in ("Conv", "MatMul", "Gemm"):
            dropped.add(id(act))
    out = list(made)
    for n in g.nodes:
        if id(n) in dropped:
            continue
        out.append(replaced.get(id(n), n))
    return out
