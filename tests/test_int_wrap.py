"""Integer arithmetic wraps around on overflow as numpy's does (sanitizer pass: INT64_MAX * 3 and, through
C++'s promotion of uint16 to int, 65535 * 65535 are undefined behaviour in C++; the library is compiled with
-fwrapv). The compiled kernels agree with numpy for every integer type ONNX's Add, Sub and Mul take."""
from __future__ import annotations

import numpy as np
import pytest

import ksbuild

onnx = pytest.importorskip("onnx")

DTYPES = ["int64", "int32", "int16", "int8", "uint64", "uint32", "uint16", "uint8"]


def _arith_model(path, dtype: str) -> None:
    """An ONNX model of inputs a, b [n] and their sum, difference and product."""
    from onnx import helper
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    ops = {"s": "Add", "d": "Sub", "p": "Mul"}
    nodes = [helper.make_node(op, ["a", "b"], [name]) for name, op in ops.items()]
    graph = helper.make_graph(nodes, "arith", [helper.make_tensor_value_info(v, elem, ["n"]) for v in "ab"],
                              [helper.make_tensor_value_info(name, elem, ["n"]) for name in ops])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.mark.parametrize("dtype", DTYPES)
def test_integer_overflow_wraps_as_numpy(tmp_path, dtype):
    info = np.iinfo(dtype)
    a = np.array([info.max, info.max, info.min, info.min, info.max // 2 + 7, 3, 0], dtype=dtype)
    b = np.array([3, info.max, info.max, 2, info.max - 1, info.min, info.min], dtype=dtype)
    _arith_model(tmp_path / "arith.onnx", dtype)
    (tmp_path / "manifest.toml").write_text(f'[package]\nname = "wrap_{dtype}"\n[kernels.arith]\n'
                                            'onnx = "arith.onnx"\n[exports]\narith = "arith"\n')
    s, d, p = ksbuild.build(tmp_path / "manifest.toml").arith(a, b)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(s, a + b)
        np.testing.assert_array_equal(d, a - b)
        np.testing.assert_array_equal(p, a * b)
