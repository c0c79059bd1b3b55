"""onnxruntime as the oracle of int8 models, exact on every host.

onnxruntime's u8 x s8 products (uint8 activations, int8 weights) run on x86-64 CPUs without VNNI (AVX2 only: the
AMD EPYC Zen 3 of some CI machines, Intel before Cascade Lake) through vpmaddubsw, which adds two adjacent u8·s8
products in int16 and saturates: a MatMulInteger of 255s by 127s gives 32767 per pair instead of 64770.
onnxruntime's quantization docs say so and advise 7-bit weights (reduce_range) or uint8 weights there. ksbuild's
integer kernels compute the exact sums, as onnxruntime does on a VNNI CPU, so on such a host the tests compare with
onnxruntime running the same model with its int8 weights stored as uint8 (w + 128, zero point + 128): the same
integers w - zero point, the same requantization arithmetic, and onnxruntime's u8 x u8 kernels, which widen to
16 bits before multiplying (exact). `saturates()` probes the host's onnxruntime once.
"""
from __future__ import annotations

import functools

import numpy as np

# op_type -> its (weight input, zero point input) pairs: the operands a quantizer stores as constant int8 weights
# (input 0 is the activation: only u8 x s8 products saturate, s8 x s8 ones are exact)
WEIGHTS = {"DequantizeLinear": ((0, 2),), "QLinearConv": ((3, 5),), "QLinearMatMul": ((3, 5),),
           "MatMulInteger": ((1, 3),), "ConvInteger": ((1, 3),), "QGemm": ((3, 5),),
           "DynamicQuantizeMatMul": ((1, 3),), "DynamicQuantizeLSTM": ((1, 9), (2, 11))}


@functools.lru_cache(maxsize=None)
def saturates() -> bool:
    """Whether this host's onnxruntime saturates a u8 x s8 product's pairs (255 · 127 + 255 · 127 = 64770)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    b = numpy_helper.from_array(np.full((2, 1), 127, np.int8), "b")
    graph = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "probe",
                              [helper.make_tensor_value_info("a", TensorProto.UINT8, [1, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 1])], [b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return int(session.run(None, {"a": np.full((1, 2), 255, np.uint8)})[0][0, 0]) != 64770


def exact_model(model):
    """A copy of `model` whose constant int8 weights (and their zero points) are uint8, 128 higher."""
    from onnx import helper, numpy_helper

    model = type(model).FromString(model.SerializeToString())
    inits = {i.name: i for i in model.graph.initializer}
    unsigned = _unsigned_activations(model)
    shifted = set()
    for node in model.graph.node:
        for w, z in WEIGHTS[node.op_type] if node.op_type in WEIGHTS and unsigned(node) else ():
            if w < len(node.input) and node.input[w] in inits and \
                    numpy_helper.to_array(inits[node.input[w]]).dtype == np.int8:
                shifted.add(node.input[w])
                shifted.add(_zero_point(model, node, w, z))
    inits = {i.name: i for i in model.graph.initializer}  # (with the zero points made above)
    for name in shifted:
        values = (numpy_helper.to_array(inits[name]).astype(np.int16) + 128).astype(np.uint8)
        inits[name].CopyFrom(numpy_helper.from_array(values, name))
    return helper.make_model(model.graph, opset_imports=model.opset_import, ir_version=model.ir_version)


def _zero_point(model, node, w: int, z: int) -> str:
    """The name of the zero point input z of node (a new initializer of 0 if it has none, which is then shifted)."""
    from onnx import numpy_helper

    if z >= len(node.input) or not node.input[z]:
        node.input.extend([""] * (z + 1 - len(node.input)))
        node.input[z] = f"{node.input[w]}_zero_point"
        model.graph.initializer.append(numpy_helper.from_array(np.int8(0), node.input[z]))
    return node.input[z]


def _unsigned_activations(model):
    """node -> whether its activation operand is uint8 (a float one quantized at run time counts: onnxruntime
    quantizes it to uint8); a QDQ weight's DequantizeLinear, or an operand whose type shape inference does not
    know: whether the model's QuantizeLinear nodes all make uint8."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model).graph
    types = {v.name: v.type.tensor_type.elem_type for v in (*inferred.input, *inferred.value_info)}
    types.update({i.name: i.data_type for i in model.graph.initializer})
    qdq_u8 = all(types.get(n.input[2]) == onnx.TensorProto.UINT8 for n in model.graph.node
                 if n.op_type == "QuantizeLinear" and len(n.input) > 2)
    unknown = onnx.TensorProto.UINT8 if qdq_u8 else None  # (after a com.microsoft operator: as the model quantizes)
    return lambda node: qdq_u8 if node.op_type == "DequantizeLinear" else \
        types.get(node.input[0], unknown) in (onnx.TensorProto.UINT8, onnx.TensorProto.FLOAT)


def session(path, options=None):
    """An onnxruntime session of the model at `path`, exact on this host (above)."""
    import onnx
    import onnxruntime as ort

    source = onnx.load(str(path)).SerializeToString() if not saturates() else \
        exact_model(onnx.load(str(path))).SerializeToString()
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
