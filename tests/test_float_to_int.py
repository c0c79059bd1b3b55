"""Float to integer conversions are defined for every float (sanitizer pass: `static_cast` of NaN, an infinity
or 1e30 is undefined behaviour in C++): truncated toward zero through int32 (for integer types of up to 32
bits) or int64, NaN, the infinities and values outside that range giving its lowest value (x86's answer,
now on every target), then the low bits. The compiled kernels and the reference interpreter agree."""
from __future__ import annotations

import numpy as np
import pytest

import ksbuild
from ksbuild.prims.elementwise import _convert_np

onnx = pytest.importorskip("onnx")

X = np.array([0.0, -2.7, 2.7, 300.0, -1.5, 3e9, -3e9, 1e30, -1e30, np.inf, -np.inf, np.nan, 2.0 ** 31, -2.0 ** 31])
I64_MIN, I32_MIN = -2 ** 63, -2 ** 31
WANT = {
    "i64": [0, -2, 2, 300, -1, 3_000_000_000, -3_000_000_000] + [I64_MIN] * 5 + [2 ** 31, -2 ** 31],
    "i32": [0, -2, 2, 300, -1] + [I32_MIN] * 8 + [-2 ** 31],
    "i8": [0, -2, 2, 44, -1] + [0] * 9,  # 300 keeps its low byte; INT32_MIN's low byte is 0
    "u8": [0, 254, 2, 44, 255] + [0] * 9,
}


def _cast_model(path, elem: int) -> None:
    """An ONNX model of one input x [n] and its Cast to int64, int32, int8 and uint8."""
    from onnx import TensorProto, helper
    to = {"i64": TensorProto.INT64, "i32": TensorProto.INT32, "i8": TensorProto.INT8, "u8": TensorProto.UINT8}
    nodes = [helper.make_node("Cast", ["x"], [name], to=code) for name, code in to.items()]
    outs = [helper.make_tensor_value_info(name, code, ["n"]) for name, code in to.items()]
    graph = helper.make_graph(nodes, "casts", [helper.make_tensor_value_info("x", elem, ["n"])], outs)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_float_converts_to_the_defined_integer(tmp_path, dtype):
    from onnx import TensorProto
    _cast_model(tmp_path / "casts.onnx", TensorProto.FLOAT if dtype == "float32" else TensorProto.DOUBLE)
    (tmp_path / "manifest.toml").write_text(f'[package]\nname = "casts_{dtype}"\n[kernels.casts]\n'
                                            'onnx = "casts.onnx"\n[exports]\ncasts = "casts"\n')
    x = X.astype(dtype)
    got = ksbuild.build(tmp_path / "manifest.toml").casts(x)
    for (name, want), out in zip(WANT.items(), got):
        np.testing.assert_array_equal(out.astype(np.int64), want, err_msg=name)
        np.testing.assert_array_equal(_convert_np(x, name), out, err_msg=f"{name}: the interpreter")
