"""The runtime half of the Python API: call a built package's compiled exports from Python.

This module is standalone (it imports only the standard library and numpy; torch only when a
torch tensor is passed), so it can be shipped inside a wheel of compiled kernels without
ksbuild. It binds each export of `share/P/P.json` through ctypes.
"""
from __future__ import annotations

import ctypes
import json
import threading
from pathlib import Path
from typing import Any

import numpy as np

NUMPY_DTYPES = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64, "bool": np.bool_,
                "i8": np.int8, "i16": np.int16, "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64,
                # ONNX's narrow types travel as their bits (float16 is numpy's own)
                "f16": np.float16, "bf16": np.uint16, "f8e4m3fn": np.uint8, "f8e4m3fnuz": np.uint8,
                "f8e5m2": np.uint8, "f8e5m2fnuz": np.uint8, "f8e8m0": np.uint8, "f4e2m1": np.uint8,
                "i4": np.uint8, "u4": np.uint8, "i2": np.uint8, "u2": np.uint8}
CTYPES = {"f32": ctypes.c_float, "f64": ctypes.c_double, "i32": ctypes.c_int32, "i64": ctypes.c_int64,
          "bool": ctypes.c_bool, "i8": ctypes.c_int8, "i16": ctypes.c_int16, "u8": ctypes.c_uint8,
          "u16": ctypes.c_uint16, "u32": ctypes.c_uint32, "u64": ctypes.c_uint64, "f16": ctypes.c_uint16}
RET = {"float": ctypes.c_float, "double": ctypes.c_double, "int32_t": ctypes.c_int32, "int64_t": ctypes.c_int64,
       "bool": ctypes.c_bool, "int": ctypes.c_int, "void": None}
STATUS = {1: "a dimension is negative or inconsistent", 2: "a required pointer (workspace) is NULL"}


class CallError(ValueError):
    """A compiled export was called with arguments that do not fit its signature."""


class Export:
    """One compiled export, callable on Python scalars, numpy arrays and torch tensors."""

    def __init__(self, lib: ctypes.CDLL, name: str, desc: dict):
        self.name, self.desc = name, desc
        self.fn = getattr(lib, desc["symbol"])
        self.fn.restype = RET[desc["returns"]]
        self.ins = [a for a in desc["args"] if a["role"] == "in"]
        self.outs = [a for a in desc["args"] if a["role"] == "out"]
        self.ws_fn = getattr(lib, desc["symbol"] + "_workspace_size") if desc["kind"] == "tensor" else None
        if self.ws_fn is not None:
            self.ws_fn.restype = ctypes.c_size_t
        self._scratch = threading.local()  # one workspace per thread: ctypes releases the GIL during calls

    def __repr__(self) -> str:
        return f"<ksbuild export {self.desc['symbol']} = {self.desc['expression']}>"

    def __call__(self, *args, out=None):
        if len(args) != len(self.ins):
            raise TypeError(f"{self.name}() takes {len(self.ins)} arguments, {len(args)} given")
        if self.desc["kind"] == "scalar":
            return self._call_scalar(args)
        return self._call_tensor(args, out)

    def _call_scalar(self, args):
        cargs = [CTYPES[a["dtype"]](_scalar(x)) for a, x in zip(self.ins, args)]
        if self.desc["returns"] != "void":
            return _py(self.fn(*cargs))
        outs = [CTYPES[a["dtype"]]() for a in self.outs]
        self.fn(*cargs, *[ctypes.byref(o) for o in outs])
        return tuple(_py(o.value) for o in outs)

    def _call_tensor(self, args, out):
        torch_in = any(type(x).__module__.startswith("torch") for x in args)
        arrays = [_as_array(x, a) for x, a in zip(args, self.ins)]
        dims = _bind_dims(self.desc["dims"], self.ins, arrays)
        outs = self._outputs(dims, out)
        cargs = [ctypes.c_int64(dims[d]) for d in self.desc["dims"]]
        for a, arr in zip(self.ins, arrays):
            scalar = arr.view(np.uint16) if a["dtype"] == "f16" else arr  # a half travels as its bits
            cargs.append(arr.ctypes.data_as(ctypes.c_void_p) if a["shape"] else CTYPES[a["dtype"]](scalar.item()))
        cargs += [o.ctypes.data_as(ctypes.c_void_p) for o in outs]
        ws = self._workspace(dims)
        status = self.fn(*cargs, ws.ctypes.data_as(ctypes.c_void_p) if ws is not None else None)
        if status != 0:
            raise CallError(f"{self.desc['symbol']} returned status {status}: {STATUS.get(status, 'unknown')}")
        return _results(outs, self.outs, torch_in)

    def _outputs(self, dims, out):
        given = out if isinstance(out, (tuple, list)) else [out] if out is not None else None
        shapes = [tuple(d if isinstance(d, int) else dims[d] for d in a["shape"]) for a in self.outs]
        if given is None:
            return [np.empty(s, NUMPY_DTYPES[a["dtype"]]) for s, a in zip(shapes, self.outs)]
        res = [_np_view(o) for o in given]
        for r, s, a in zip(res, shapes, self.outs):
            if r.shape != s or r.dtype != NUMPY_DTYPES[a["dtype"]] or not r.flags.c_contiguous:
                raise CallError(f"out= for {self.name} must be a contiguous {a['dtype']} array of shape {s}")
        return res

    def _workspace(self, dims):
        """This thread's workspace, grown when a call needs more; reused so calls do not page-fault."""
        if self.ws_fn is None:
            return None
        n = self.ws_fn(*[ctypes.c_int64(dims[d]) for d in self.desc["dims"]])
        if not n:
            return None
        buf = getattr(self._scratch, "buf", None)
        if buf is None or buf.size < n + 64:
            buf = self._scratch.buf = np.empty(n + 64, np.uint8)
        skip = -buf.ctypes.data % 64  # the C ABI wants 16-byte alignment; 64 keeps cache lines whole
        return buf[skip:skip + n]


def _scalar(x):
    return x.item() if hasattr(x, "item") else x


def _py(v):
    return v.value if hasattr(v, "value") else v


def _np_view(x) -> np.ndarray:
    if type(x).__module__.startswith("torch"):
        return x.detach().numpy()
    return x


def _as_array(x, a) -> np.ndarray:
    # np.asarray, not ascontiguousarray: the latter turns a 0-d value into shape [1]
    arr = np.asarray(_np_view(x), dtype=NUMPY_DTYPES[a["dtype"]])
    arr = np.ascontiguousarray(arr) if arr.ndim else arr
    if arr.ndim != len(a["shape"]):
        raise CallError(f"argument '{a['name']}' must have {len(a['shape'])} dimension(s), got shape "
                           f"{list(arr.shape)}")
    return arr


def _bind_dims(names, ins, arrays) -> dict[str, int]:
    dims: dict[str, int] = {}
    for a, arr in zip(ins, arrays):
        for d, s in zip(a["shape"], arr.shape):
            want = dims.setdefault(d, s) if isinstance(d, str) else d
            if want != s:
                raise CallError(f"argument '{a['name']}': dimension {d} is {want} elsewhere but {s} here")
    missing = [d for d in names if d not in dims]
    if missing:
        raise CallError(f"cannot infer dims {missing} from the inputs")
    return dims


def _results(outs, descs, torch_out):
    vals = []
    for o, a in zip(outs, descs):
        v = o if a["shape"] else o.reshape(()).item()
        if torch_out and a["shape"]:
            import torch
            v = torch.from_numpy(o)
        vals.append(v)
    return vals[0] if len(vals) == 1 else tuple(vals)


class Package:
    """A built package: each export is an attribute."""

    def __init__(self, root: Path, library: Path | None = None):
        self.root = root
        share = next((root / "share").iterdir())
        self.desc = json.loads((share / f"{share.name}.json").read_text())
        lib = library or next((share / "python").glob("*.so"))
        self.lib = ctypes.CDLL(str(lib))
        self.exports = {n: Export(self.lib, n, d) for n, d in self.desc["exports"].items()}

    def __getattr__(self, name: str) -> Any:
        exports = self.__dict__.get("exports", {})
        if name in exports:
            return exports[name]
        raise AttributeError(f"package has no export '{name}' (exports: {', '.join(exports)})")

    def __dir__(self):
        return list(super().__dir__()) + list(self.exports)




def load(root: str | Path, library: str | Path | None = None) -> "Package":
    """The package installed at `root` (its share/P/P.json), bound to `library` (default: share/P/python/*.so)."""
    return Package(Path(root), Path(library) if library is not None else None)
