"""The runtime half of the Python API: call a built package's compiled exports from Python.

This module is standalone (it imports only the standard library and numpy; torch only when a
torch tensor is passed), so it can be shipped inside a wheel of compiled kernels without
ksbuild. It binds each export of `share/P/P.json` through ctypes.

Values are never cast silently: a numpy array or torch tensor must have exactly the dtype the
export was built for (build a float64 variant of the package for float64 data). Python numbers
and lists, which carry no dtype, are converted. Torch tensors go through `torch_ops.py` (a
torch.library custom op per export, with autograd through the package's vjp exports).

What a call needs from its input shapes (dims, output shapes, workspace size) is computed once per
shapes and kept (`Export.plan`). A repeated call on contiguous numpy arrays of the right dtypes
(`Export._fast_call`), or on plain CPU tensors (torch_ops.run), checks their types, dtypes and
layout, looks its plan up and calls C; anything else takes the full path, which checks, converts
and explains.

out= arrays that share memory with an input get numpy's ufunc results (as if nothing overlapped): the
C call writes a new array, copied into out= after it, unless out= is an input the export may compute in
place (its "in_place" inputs, which the header states: codegen/aliasing.py).
"""
from __future__ import annotations

import ast
import ctypes
import inspect
import json
import operator
import re
import threading
from itertools import combinations
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, NamedTuple

import numpy as np

NUMPY_DTYPES = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64, "bool": np.bool_,
                "i8": np.int8, "i16": np.int16, "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64,
                # ONNX's narrow types travel as their bits (float16 is numpy's own)
                "f16": np.float16, "bf16": np.uint16, "f8e4m3fn": np.uint8, "f8e4m3fnuz": np.uint8,
                "f8e5m2": np.uint8, "f8e5m2fnuz": np.uint8, "f8e8m0": np.uint8, "f4e2m1": np.uint8,
                "i4": np.uint8, "u4": np.uint8, "i2": np.uint8, "u2": np.uint8,
                "str": np.uintp}  # strings travel as arrays of pointers (see _strings, _decoded)
CTYPES = {"f32": ctypes.c_float, "f64": ctypes.c_double, "i32": ctypes.c_int32, "i64": ctypes.c_int64,
          "bool": ctypes.c_bool, "i8": ctypes.c_int8, "i16": ctypes.c_int16, "u8": ctypes.c_uint8,
          "u16": ctypes.c_uint16, "u32": ctypes.c_uint32, "u64": ctypes.c_uint64, "f16": ctypes.c_uint16,
          "str": ctypes.c_char_p}
RET = {"float": ctypes.c_float, "double": ctypes.c_double, "int32_t": ctypes.c_int32, "int64_t": ctypes.c_int64,
       "bool": ctypes.c_bool, "int": ctypes.c_int, "void": None, "ks_str": ctypes.c_char_p}
STATUS = {1: "a dimension is negative or inconsistent, or a size the kernel computes from the dims (a slice "
             "x[1:-1], a window) is negative: the inputs are too small for it",
          2: "a required pointer (workspace) is NULL"}
KINDS = {"f32": "f", "f64": "f", "i32": "i", "i64": "i", "bool": "b"}  # numpy dtype.kind of each dtype
KINDS.update({d: "i" for d in NUMPY_DTYPES if d not in KINDS}, f16="f")  # the narrow types' bits are integers


class CallError(ValueError):
    """A compiled export was called with arguments that do not fit its signature."""


class DtypeError(CallError, TypeError):
    """An array or tensor has another dtype than the export was built for (ksbuild never casts silently)."""


class Export:
    """One compiled export, callable on Python scalars, numpy arrays and torch tensors."""

    CallError, DtypeError = CallError, DtypeError  # for torch_ops.py, which imports nothing from here

    def __init__(self, lib: ctypes.CDLL, name: str, desc: dict, package: "Package | None" = None):
        self.name, self.desc, self.package = name, desc, package
        self.title = name  # how messages name it (the dev loop's: the kernel's name, relu3.vjp)
        self.fn = getattr(lib, desc["symbol"])
        self.fn.restype = RET[desc["returns"]]
        self.ins = [a for a in desc["args"] if a["role"] == "in"]
        self.outs = [a for a in desc["args"] if a["role"] == "out"]
        if desc["returns"] not in ("void", "int"):  # a scalar export returning its one result by value
            self.outs = [{"name": "result", "role": "out", "dtype": desc["results"][0], "shape": []}]
        self.free_dims = free_dims(desc)
        self.ws_fn = getattr(lib, desc["symbol"] + "_workspace_size") if desc["kind"] == "tensor" else None
        if self.ws_fn is not None:
            self.ws_fn.restype = ctypes.c_size_t
            self.ws_fn.argtypes = [ctypes.c_int64] * len(desc["dims"])
            self.fn.argtypes = _tensor_argtypes(desc, self.ins, self.outs)
        self._plan = _bind_plan(self.ins)
        self._option_inputs = {a["name"] for a in self.ins} & {"out", "dims"}  # inputs named like call options
        self._strings = any(a["dtype"] == "str" for a in self.ins + self.outs)
        self._scratch = threading.local()  # one workspace per thread: ctypes releases the GIL during calls
        self._fast_plans: dict[tuple, CallPlan] = {}  # input shapes -> what a call with them needs (see `plan`)
        # the fast path (`_fast_call`): a tensor export whose inputs are all arrays, named like no call option
        self._fast = desc["kind"] == "tensor" and not self._strings and not self._option_inputs and self.ins \
            and all(a["shape"] for a in self.ins)
        self._in_dtypes = [np.dtype(NUMPY_DTYPES[a["dtype"]]) for a in self.ins]
        self._in_place = {k for k, a in enumerate(self.ins) if a["name"] in desc.get("in_place", ())}
        self._one_array_out = len(self.outs) == 1 and bool(self.outs[0]["shape"])
        # per export: `pkg.f?` (IPython), pkg.f.__doc__ and inspect.signature(pkg.f) show its arguments
        self.__doc__ = f"{desc['symbol']} = {desc['expression']}\n{self.signature}\n\n{Export.__call__.__doc__}"
        self.__signature__ = self._call_signature()

    @property
    def signature(self) -> str:
        """What the export takes and gives, in the kernel's own names and dims:
        `(x: f32[batch, 16], ct_y: f32[batch, 16]) -> out: f32[batch, 16]`."""
        def shown(a: dict) -> str:
            dims = f"[{', '.join(str(d) for d in a['shape'])}]" if a["shape"] else ""
            return f"{_shown(a)}: {a['dtype']}{dims}"
        outs = ", ".join(shown(a) for a in self.outs)
        return f"({', '.join(shown(a) for a in self.ins)}) -> {outs if len(self.outs) == 1 else f'({outs})'}"

    def _call_signature(self) -> inspect.Signature:
        """The inputs as Python parameters, for inspect.signature(pkg.f) (editors' call hints)."""
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        params = [inspect.Parameter(_shown(a), kind) for a in self.ins]
        names = {p.name for p in params}
        return inspect.Signature(params + [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=None)
                                           for n in ("out", "dims") if n not in names])

    def __repr__(self) -> str:
        return f"<ksbuild export {self.desc['symbol']} = {self.desc['expression']}: {self.signature}>"

    def __call__(self, *args, out=None, dims: dict[str, int] | None = None, **kwargs):
        """Call the compiled code; inputs by position or by their names in the kernel's source;
        `dims` gives dims that no input shape shows (see `free_dims`). An input named `out` or `dims` takes
        that keyword (its export then has no out= or dims= of its own)."""
        if self._fast and dims is None and not kwargs:
            result = self._fast_call(args, out)
            if result is not _SLOW:
                return result
        if self._option_inputs and (out is not None or dims is not None):
            for key, value in (("out", out), ("dims", dims)):
                if key in self._option_inputs and value is not None:
                    kwargs[key] = value
            out = None if "out" in self._option_inputs else out
            dims = None if "dims" in self._option_inputs else dims
        if kwargs or len(args) < len(self.ins):
            args = self._by_name(args, kwargs)
        if len(args) != len(self.ins):
            raise TypeError(f"{self.title}() takes {len(self.ins)} arguments, {len(args)} given")
        if any(_is_torch(x) for x in args) and out is None and not self._strings:
            return self.package.torch_ops().call(self, args, dims)
        if self._strings and any(_is_torch(x) and x.requires_grad for x in args):
            raise CallError(f"{self.title} takes or gives strings, so it is not a torch op and autograd cannot run "
                            "through it: pass tensors that do not require grad (x.detach())")
        return self.call_numpy(args, out, dims, torch_out=any(_is_torch(x) for x in args))

    def _fast_call(self, args: tuple, out):
        """The call on contiguous numpy arrays of the right dtypes and shapes seen before (and out= arrays that fit,
        if given): a handful of operations. _SLOW when it does not apply: the full path then checks everything and
        explains what is wrong."""
        if len(args) != len(self.ins):
            return _SLOW
        if type(args[0]) is not np.ndarray and out is None and _is_torch(args[0]):
            return self.package.torch_ops().call(self, args)  # (what the full path does with a torch argument)
        for x, dtype in zip(args, self._in_dtypes):
            if type(x) is not np.ndarray or x.dtype is not dtype or not x.flags.c_contiguous:
                return _SLOW  # (`is`: numpy's dtypes of native byte order are singletons; others go the full way)
        plan = self._fast_plans.get(tuple([x.shape for x in args]))
        if plan is None:
            return _SLOW
        ins = [_address(x) for x in args]
        fitted = _fitting_outputs(plan, out, args, ins, self._in_place)
        if fitted is None:
            return _SLOW
        outs, addresses = fitted
        self.call_pointers(plan, ins, addresses)
        return outs[0] if self._one_array_out else _results(outs, self.outs, False)

    def plan(self, shapes, given: dict | None = None) -> "CallPlan":
        """What a call with inputs of these shapes (ints, not torch SymInts) needs: its dims, output shapes and
        workspace size. Remembered per shapes when no dims are `given`; a CallError (as from bind_dims) when the
        shapes do not fit."""
        key = tuple(shapes)
        plan = None if given else self._fast_plans.get(key)
        if plan is None:
            plan = self._new_plan(key, given)
            if not given:
                self._remember(key, plan)
        return plan

    def _new_plan(self, shapes: tuple, given: dict | None) -> "CallPlan":
        dims = self.bind_dims(shapes, given)
        outs = tuple((tuple(s), np.dtype(NUMPY_DTYPES[a["dtype"]])) for s, a in zip(self.checked_out_shapes(dims),
                                                                                    self.outs))
        values = tuple(dims[d] for d in self.desc["dims"])
        return CallPlan(MappingProxyType(dims), values, outs, self._workspace_size(values))

    def _remember(self, key: tuple, plan: "CallPlan") -> None:
        """Keep a plan for its input shapes (at most _MAX_PLANS: a program with ever new shapes starts over)."""
        if len(self._fast_plans) >= _MAX_PLANS:
            self._fast_plans.clear()
        self._fast_plans[key] = plan

    def _by_name(self, args: tuple, kwargs: dict) -> tuple:
        """Positional and keyword inputs as one positional tuple, as Python binds them."""
        names = [a.get("param", a["name"]) for a in self.ins]
        unknown = [k for k in kwargs if k not in names]
        if unknown:
            raise TypeError(f"{self.title}() got an unexpected keyword argument '{unknown[0]}' "
                            f"(its inputs: {', '.join(names)})")
        doubled = [k for k in kwargs if names.index(k) < len(args)]
        if doubled:
            raise TypeError(f"{self.title}() got multiple values for argument '{doubled[0]}'")
        rest = self.ins[len(args):]
        missing = [n for n, a in zip(names[len(args):], rest) if n not in kwargs and "default" not in a]
        if missing:
            raise TypeError(f"{self.title}() missing argument(s): {', '.join(missing)}")
        return tuple(args) + tuple(kwargs.get(n, a.get("default")) for n, a in zip(names[len(args):], rest))

    def call_numpy(self, args, out=None, dims=None, torch_out=False):
        """The ctypes call on numpy-compatible values; one result as itself, several as a tuple."""
        outs = self.call_arrays(args, out, dims)
        return _results(outs, self.outs, torch_out)

    def call_arrays(self, args, out=None, dims=None) -> list[np.ndarray]:
        """The ctypes call; every result as an array (0-d for a scalar)."""
        if self.desc["kind"] == "scalar":
            return self._call_scalar(args)
        return self._call_tensor(args, out, dims)

    def _call_scalar(self, args) -> list[np.ndarray]:
        cargs = [CTYPES[a["dtype"]](_scalar(x, a, self.title)) for a, x in zip(self.ins, args)]
        if self.desc["returns"] != "void":
            return [_scalar_result(_py(self.fn(*cargs)), self.outs[0])]
        outs = [CTYPES[a["dtype"]]() for a in self.outs]
        self.fn(*cargs, *[ctypes.byref(o) for o in outs])
        return [_scalar_result(o.value, a) for o, a in zip(outs, self.outs)]

    def _call_tensor(self, args, out, given_dims) -> list[np.ndarray]:
        arrays = [_as_array(x, a, self.title) for x, a in zip(args, self.ins)]
        plan = self.plan([arr.shape for arr in arrays], given_dims)
        outs = self._outputs(plan, out)
        written = outs if out is None else self._written(arrays, outs)
        ins = [_address(arr) if a["shape"] else _item(arr, a) for a, arr in zip(self.ins, arrays)]
        self.call_pointers(plan, ins, [_address(o) for o in written])
        for o, w in zip(outs, written):
            if w is not o:
                np.copyto(o, w)
        return [_decoded(o) if a["dtype"] == "str" else o for o, a in zip(outs, self.outs)]

    def _written(self, arrays: list, outs: list) -> list[np.ndarray]:
        """The arrays the C call writes: each out= array, or a new one where it shares memory with an input
        (then copied into it after the call: numpy's ufunc rule, results as if nothing overlapped), except an
        out= array that is an input itself where the export computes in place (its "in_place" inputs)."""
        written = []
        for o in outs:
            clash = any(np.may_share_memory(o, x) and not (k in self._in_place and _same_buffer(o, x))
                        for k, (x, a) in enumerate(zip(arrays, self.ins)) if a["shape"])
            written.append(np.empty_like(o) if clash else o)
        return written

    def call_pointers(self, dims: "dict | CallPlan", ins: list, outs: list) -> None:
        """The C call on raw addresses (ints) of tensors, Python numbers for scalar inputs; `dims` is a plan (see
        `plan`) or the dims as a dict."""
        if type(dims) is CallPlan:
            dim_values, ws_size = dims.dim_values, dims.ws_size
        else:
            dim_values = [dims[d] for d in self.desc["dims"]]
            ws_size = self._workspace_size(dim_values)
        status = self.fn(*dim_values, *ins, *outs, self._workspace_of(ws_size))
        if status != 0:
            raise CallError(f"{self.desc['symbol']} returned status {status}: {STATUS.get(status, 'unknown')}")

    def bind_dims(self, shapes, given: dict | None = None) -> dict:
        """Values of the symbolic dims from the input shapes (and `given` for free dims); checks consistency."""
        dims = dict(given) if given else {}
        if given and any(d not in self.desc["dims"] for d in given):
            unknown = [d for d in given if d not in self.desc["dims"]]
            raise CallError(f"{self.title}: dims {unknown} are not dims of this export (its dims: {self.desc['dims']})")
        for i, axis, d in self._plan:
            s = shapes[i][axis]
            want = dims.setdefault(d, s) if isinstance(d, str) else d
            if want != s and not isinstance(d, str):
                raise CallError(f"{self.title}: argument '{_shown(self.ins[i])}' must have size {d} along axis {axis}, "
                                f"got shape {list(shapes[i])}")
            if want != s:
                raise CallError(f"{self.title}: argument '{_shown(self.ins[i])}': dimension {d} is {want} elsewhere "
                                f"but {s} here (shape {list(shapes[i])})")
        if len(dims) < len(self.desc["dims"]):
            self._solve_dims(shapes, dims)
        if len(dims) < len(self.desc["dims"]):
            missing = [d for d in self.desc["dims"] if d not in dims]
            raise CallError(f"{self.title}: cannot infer dims {missing} from the inputs; pass dims={{...}}")
        for a, shape in zip(self.ins, shapes):
            for d, s in zip(a["shape"], shape):
                if isinstance(d, str) and not d.isidentifier() and dim_value(d, dims) != s:
                    raise CallError(f"{self.title}: argument '{_shown(a)}': dimension {d} = {dim_value(d, dims)} "
                                    f"but {s} given")
        return dims

    def _solve_dims(self, shapes, dims: dict) -> None:
        """Dims that an input's shape shows only inside an expression linear in them (an ONNX `2*hh`): each
        from a size where it is the one unknown; a size the expression cannot take is a CallError."""
        progress = True
        while progress:
            progress = False
            for a, shape in zip(self.ins, shapes):
                for axis, (d, size) in enumerate(zip(a["shape"], shape)):
                    unknown = [n for n in dim_names(d) if n not in dims] if isinstance(d, str) else []
                    if len(unknown) != 1 or d.isidentifier():
                        continue
                    u = unknown[0]
                    c = dim_value(d, {**dims, u: 0})
                    step = dim_value(d, {**dims, u: 1}) - c
                    value = (size - c) // step if step > 0 else None
                    if value is None or value < 0 or dim_value(d, {**dims, u: value}) != size:
                        raise CallError(f"{self.title}: argument '{_shown(a)}' must have a size of the form {d} along "
                                        f"axis {axis}, got shape {list(shape)}")
                    dims[u] = value
                    progress = True

    def out_shapes(self, dims: dict) -> list[tuple]:
        """The shape of every output given the dims (works on torch SymInts too)."""
        return [tuple(dim_value(d, dims) for d in a["shape"]) for a in self.outs]

    def checked_out_shapes(self, dims: dict) -> list[tuple]:
        """out_shapes, with a CallError when the inputs make an output size negative (a `h - 2` for h = 1)."""
        shapes = self.out_shapes(dims)
        for shape, a in zip(shapes, self.outs):
            for size, d in zip(shape, a["shape"]):
                if isinstance(size, int) and size < 0:
                    named = [k for k in dims if re.search(rf"\b{re.escape(k)}\b", str(d))]
                    given = ", ".join(f"{k} = {dims[k]}" for k in named)
                    raise CallError(f"{self.title}: output '{a['name']}' would have {d} = {size} elements along an "
                                    f"axis ({given}): the inputs are too small for it")
        return shapes

    def _outputs(self, plan: "CallPlan", out):
        given = out if isinstance(out, (tuple, list)) else [out] if out is not None else None
        shapes = [s for s, _ in plan.outs]
        if given is None:
            return [np.empty(s, dtype) for s, dtype in plan.outs]
        if self._strings:
            raise CallError(f"{self.title}: out= is not supported for an export with string arguments")
        res = [_np_view(o, a, self.title) for o, a in zip(given, self.outs)]
        for r, s, a in zip(res, shapes, self.outs):
            if r.shape != s or r.dtype != NUMPY_DTYPES[a["dtype"]] or not r.flags.c_contiguous:
                raise CallError(f"out= for {self.title} must be a contiguous {a['dtype']} array of shape {s}")
            if not r.flags.writeable:
                raise CallError(f"out= for {self.title}: the array for '{a['name']}' is read-only")
        for i, j in combinations(range(len(res)), 2):
            if np.may_share_memory(res[i], res[j]):
                raise CallError(f"out= for {self.title}: the arrays for '{self.outs[i]['name']}' and "
                                f"'{self.outs[j]['name']}' share memory; give each output its own array")
        return res

    def _workspace_size(self, dim_values) -> int:
        """The bytes of workspace a call with these dims needs (the export's _workspace_size function)."""
        return self.ws_fn(*dim_values) if self.desc["workspace"] else 0

    def _workspace_of(self, n: int) -> int | None:
        """The address of this thread's workspace of at least n bytes (None for none), grown when a call needs more
        and reused, so that calls do not page-fault; its address is kept with it (asking numpy for an array's
        address costs microseconds, a call to a small kernel not many more)."""
        if not n:
            return None
        local = self._scratch
        if getattr(local, "size", -1) < n:
            local.buf = np.empty(n + 64, np.uint8)
            addr = local.buf.ctypes.data
            local.addr, local.size = addr + (-addr % 64), n  # the C ABI wants 16-byte alignment; 64 keeps lines whole
        return local.addr


class CallPlan(NamedTuple):
    """What a call with given input shapes needs (Export.plan): the dims, their values in the C ABI's order,
    (shape, numpy dtype) of every output, the workspace's bytes."""

    dims: Mapping[str, int]
    dim_values: tuple
    outs: tuple
    ws_size: int


_MAX_PLANS = 64  # shapes remembered per export
_SLOW = object()  # what the fast path returns when it does not apply


def _fitting_outputs(plan: CallPlan, out, args: tuple, addresses: list, in_place: set) -> tuple | None:
    """(outputs, their addresses): new output arrays, or the out= arrays when they fit the plan exactly and share no
    memory with the inputs (at `addresses`; but for an input at a position in `in_place` passed as out= itself) or
    each other (else None: the full path explains, or computes apart and copies). Every array here is contiguous,
    so two share memory when their byte ranges meet: what np.may_share_memory's bounds check decides, from the
    addresses the call needs anyway (np.may_share_memory costs about a microsecond a pair: 30 pairs for an export of
    15 inputs and 2 outputs)."""
    if out is None:
        outs = [np.empty(shape, dtype) for shape, dtype in plan.outs]
        return outs, [_address(o) for o in outs]
    given = out if isinstance(out, (tuple, list)) else (out,)
    if len(given) != len(plan.outs):
        return None
    for o, (shape, dtype) in zip(given, plan.outs):
        if type(o) is not np.ndarray or o.shape != shape or o.dtype is not dtype or not o.flags.c_contiguous \
                or not o.flags.writeable:
            return None
    spans = [(a, a + x.nbytes) for a, x in zip(addresses, args)]
    placed = []
    for o in given:
        start = _address(o)
        end = start + o.nbytes
        for j, (lo, hi) in enumerate(spans):
            if start < hi and lo < end and (args[j] is not o or j not in in_place):
                return None
        for lo, hi in placed:
            if start < hi and lo < end:
                return None
        placed.append((start, end))
    return list(given), [lo for lo, _ in placed]


def _same_buffer(a: np.ndarray, b: np.ndarray) -> bool:
    """Two contiguous arrays of one dtype that are the same bytes (the C call gets one pointer twice)."""
    return a.ctypes.data == b.ctypes.data and a.nbytes == b.nbytes


def _tensor_argtypes(desc: dict, ins: list, outs: list) -> list:
    """ctypes argtypes of a tensor export: dims, inputs (pointers or scalars), outputs, workspace."""
    types = [ctypes.c_int64] * len(desc["dims"])
    types += [ctypes.c_void_p if a["shape"] or a["dtype"] == "str" else CTYPES[a["dtype"]] for a in ins]
    return types + [ctypes.c_void_p] * (len(outs) + 1)


def _bind_plan(ins: list) -> list[tuple[int, int, int | str]]:
    """(input, axis, dim) for every axis whose dim is a literal or a name: what binds and checks the dims."""
    return [(i, k, d) for i, a in enumerate(ins) for k, d in enumerate(a["shape"])
            if isinstance(d, int) or d.isidentifier()]


def free_dims(desc: dict) -> list[str]:
    """The dims of an export that no input shape shows (by name, or in an expression such as `2*hh`): the
    caller passes them (dims=)."""
    shown = {n for a in desc["args"] if a["role"] == "in" for d in a["shape"] if isinstance(d, str)
             for n in dim_names(d)}
    return [d for d in desc["dims"] if d not in shown]


def dim_names(dim: str) -> list[str]:
    """The names a dim expression reads."""
    if dim.isidentifier():
        return [dim]
    return [e.id for e in ast.walk(ast.parse(dim, mode="eval")) if isinstance(e, ast.Name)]


_DIM_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}


def dim_value(dim, dims: dict):
    """The size of a dim: a literal, a name, or an expression of names with + - * // (as ksbuild writes them)."""
    if isinstance(dim, int):
        return dim
    if dim.isidentifier():
        return dims[dim]
    return _eval_dim(ast.parse(dim, mode="eval").body, dims)


def _eval_dim(node, dims):
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name):
        return dims[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _DIM_OPS:
        return _DIM_OPS[type(node.op)](_eval_dim(node.left, dims), _eval_dim(node.right, dims))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval_dim(node.operand, dims)
    raise CallError(f"cannot evaluate dimension expression '{ast.unparse(node)}'")


def _shown(a: dict) -> str:
    """An argument's name in messages: the parameter's name in the user's source when the C name differs."""
    return a.get("param", a["name"])


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch")


def _scalar(x, a: dict, export: str):
    """A Python number for a scalar argument: typed values (numpy, torch) must have its dtype."""
    if a["dtype"] == "str":
        return _encoded(x, a, export)
    if isinstance(x, (bool, int, float, np.generic, np.ndarray)) or _is_torch(x):
        return _item(_as_array(x, a, export), a)
    raise CallError(f"{export}: argument '{_shown(a)}' must be a number, got {type(x).__name__}")


def _item(arr: np.ndarray, a: dict):
    """A scalar argument's value for ctypes (a float16 travels as its bits, a string as its address)."""
    return arr.view(np.uint16).item() if a["dtype"] == "f16" else arr.item()


def _strings(x, a: dict, export: str) -> np.ndarray:
    """Strings (str or bytes; numpy str, bytes or object arrays; lists) as an array of `const char*`: the
    addresses of their NUL-terminated UTF-8 bytes, which the array keeps alive."""
    if _is_torch(x):
        raise DtypeError(f"{export}: argument '{_shown(a)}' takes strings; torch tensors cannot hold them")
    arr = np.asarray(x, dtype=object)
    if arr.ndim != len(a["shape"]):
        raise CallError(f"{export}: argument '{_shown(a)}' must have {len(a['shape'])} dimension(s), got shape "
                        f"{list(arr.shape)}")
    items = [_encoded(v, a, export) for v in arr.reshape(-1)]
    pointers = (ctypes.c_char_p * max(len(items), 1))(*items)  # holds the bytes objects: they live as long
    return np.frombuffer(pointers, dtype=np.uintp, count=len(items)).reshape(arr.shape)


def _encoded(v, a: dict, export: str) -> bytes:
    """One string argument's UTF-8 bytes (without the NUL that ctypes adds)."""
    if isinstance(v, (np.generic, np.ndarray)) and np.ndim(v) == 0:
        v = v.item()
    if not isinstance(v, (str, bytes)):
        raise DtypeError(f"{export}: argument '{_shown(a)}' takes strings, got a {type(v).__name__}")
    raw = v.encode("utf-8") if isinstance(v, str) else v
    if b"\0" in raw:
        raise CallError(f"{export}: argument '{_shown(a)}' holds a string with a NUL character, which a C string "
                        "cannot")
    return raw


def _decoded(arr: np.ndarray) -> np.ndarray:
    """An array of `const char*` results as an object array of Python str (None for NULL)."""
    out = np.empty(arr.shape, dtype=object)
    flat = out.reshape(-1)
    for i, p in enumerate(arr.reshape(-1).tolist()):
        flat[i] = ctypes.string_at(p).decode("utf-8", "replace") if p else None
    return out


def _scalar_result(v, a: dict) -> np.ndarray:
    """A scalar result from ctypes as a 0-d array (a string decoded)."""
    if a["dtype"] == "str":
        out = np.empty((), dtype=object)
        out[()] = v.decode("utf-8", "replace") if v is not None else None
        return out
    return np.asarray(v, NUMPY_DTYPES[a["dtype"]])


def _py(v):
    return v.value if hasattr(v, "value") else v


def _np_view(x, a: dict, export: str) -> np.ndarray:
    """A numpy view of a CPU torch tensor (no copy; a tensor that needs a gradient is refused here)."""
    if not _is_torch(x):
        return x
    if x.requires_grad:
        raise CallError(f"{export}: argument '{_shown(a)}' requires grad; call the export without out= so that "
                        "autograd runs through its vjp")
    if x.device.type != "cpu":
        raise CallError(f"{export}: argument '{_shown(a)}' is on {x.device}; ksbuild exports run on the CPU")
    return x.numpy()


def _as_array(x, a: dict, export: str) -> np.ndarray:
    """x as a contiguous array of the argument's dtype; typed values of another dtype are an error."""
    if x is None:
        raise CallError(f"{export}: argument '{_shown(a)}' is None; pass a value (for an absent ONNX optional "
                        "input: a value of its shape, such as zeros, and False for its _present flag)")
    if a["dtype"] == "str":
        return _strings(x, a, export)
    want = NUMPY_DTYPES[a["dtype"]]
    typed = _is_torch(x) or isinstance(x, (np.ndarray, np.generic))
    try:
        arr = np.asarray(_np_view(x, a, export))
    except ValueError as e:  # a list of arrays of different shapes (a ragged ONNX sequence, ...)
        raise CallError(f"{export}: argument '{_shown(a)}' is not one array: {e}") from None
    if typed and arr.dtype != want:
        rebuild = f" or build the package for {arr.dtype}" if arr.dtype in (np.float32, np.float64) \
            and np.dtype(want).kind == "f" else ""
        raise DtypeError(f"{export}: argument '{_shown(a)}' is {arr.dtype} but the export takes {a['dtype']} "
                         f"({np.dtype(want).name}); ksbuild does not cast silently: convert it yourself "
                         f"(.astype(np.{np.dtype(want).name})){rebuild}")
    if not typed:
        _check_untyped(arr, a, export)
        arr = arr.astype(want)
    # np.asarray, not ascontiguousarray: the latter turns a 0-d value into shape [1]
    arr = np.ascontiguousarray(arr) if arr.ndim else arr
    if arr.ndim != len(a["shape"]):
        raise CallError(f"{export}: argument '{_shown(a)}' must have {len(a['shape'])} dimension(s), got shape "
                        f"{list(arr.shape)}")
    return arr


def _check_untyped(arr: np.ndarray, a: dict, export: str) -> None:
    """Python numbers and lists convert to the argument's dtype only without losing their kind (no float -> int)."""
    order = "bif"
    have, want = arr.dtype.kind if arr.dtype.kind in order else "?", KINDS[a["dtype"]]
    if have == "?" or order.index(have) > order.index(want) or (want == "b" and have != "b"):
        first = arr.flat[0] if arr.size else None
        first = first.item() if isinstance(first, np.generic) else first
        got = f"a {type(first).__name__}" if arr.dtype.kind in "USO" and arr.size else \
            f"a Python value of kind {arr.dtype.name}"
        raise DtypeError(f"{export}: argument '{_shown(a)}' takes {a['dtype']}, got {got}")


def _address(a: np.ndarray) -> int:
    """The address of an array's data: through the buffer protocol where the array is writable (about a
    microsecond; numpy's `a.ctypes.data` builds an object and takes three), else through numpy."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    except (TypeError, ValueError):  # read-only or empty
        return a.ctypes.data


def _results(outs, descs, torch_out: bool):
    """Python values for the caller: numpy arrays and Python numbers, or torch tensors (0-d for scalars)."""
    vals = []
    for o, a in zip(outs, descs):
        if torch_out and a["dtype"] != "str":  # (torch has no strings: they stay numpy arrays)
            import torch
            vals.append(torch.from_numpy(o))
        else:
            vals.append(o if a["shape"] else o.reshape(()).item())
    return vals[0] if len(vals) == 1 else tuple(vals)


def _load(lib: Path) -> ctypes.CDLL:
    """The package's shared library; a clear error when a function it calls is defined nowhere (an external C function
    declared without its sources, which an app links: ksbuild.extern)."""
    try:
        return ctypes.CDLL(str(lib))
    except OSError as e:
        missing = re.search(r"undefined symbol: (\w+)", str(e))
        if missing is None:
            raise
        raise ImportError(f"cannot load {lib.name}: it calls the C function '{missing.group(1)}', which it does not "
                          "define (an external function declared with ksbuild.extern and no sources: the app that "
                          "links the library defines it). Give its sources, ksbuild.extern(sources=[...]), to use the "
                          "package from Python") from None


class Package:
    """A built package: each export is an attribute."""

    def __init__(self, root: Path, library: Path | None = None):
        self.root = root
        share = next((root / "share").iterdir())
        self.desc = json.loads((share / f"{share.name}.json").read_text())
        stamp = share / "ksbuild-hash"
        self.key = stamp.read_text().strip() if stamp.is_file() else ""
        lib = library or next((share / "python").glob("*.so"))
        self.lib = _load(lib)
        self.exports = {n: Export(self.lib, n, d, self) for n, d in self.desc["exports"].items()}
        self._torch_ops = None
        import sys
        if sys.modules.get("torch") is not None:  # define the custom ops now, outside any torch.compile trace
            self.torch_ops()

    def torch_ops(self):
        """The torch.library custom ops of this package's exports (torch_ops.py; imports torch)."""
        if self._torch_ops is None:
            try:
                from . import torch_ops
            except ImportError:  # shipped as a top-level module next to this one
                import torch_ops  # type: ignore[no-redef]
            self._torch_ops = torch_ops.package_ops(self)
        return self._torch_ops

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
