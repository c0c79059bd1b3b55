"""The op library: every frontend operation as a decomposition into core primitives.

The Python/torch frontend, the ONNX importer and the torch.export importer all build IR
through these functions; a frontend only parses its syntax and maps names and attributes to
ops. An op takes the Builder, IR atoms and static attributes (ints, dims, dtypes) and returns
atoms. It checks its operands and raises a KsbuildError located at `b.loc`, which the frontend
points at the user's line (or the ONNX node) before calling.

Modules: `math` (elementwise functions), `reduce` (reductions, softmax), `linalg` (einsum,
matmul), `shape` (reshape, concat, slicing, ...), `create` (constants, arange, eye, masks).
"""
from . import create, linalg, math, reduce, shape  # noqa: F401
