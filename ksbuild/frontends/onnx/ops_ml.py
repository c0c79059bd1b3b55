"""ONNX-ML ops (domain ai.onnx.ml) that are plain tensor code: Binarizer, ArrayFeatureExtractor, LabelEncoder."""
from __future__ import annotations

import numpy as np

from ...ir.core import Lit
from ...ir.types import Type, dtype_of, numpy_dtype
from ...ops import index as ix
from ...ops import math as m
from ...ops import reduce as red
from ...ops._util import scalar_lit
from ...ops.create import array
from .graph import handler
from .node import Node
from .values import Val


@handler("Binarizer")
def binarizer(n: Node):
    x = n.x(0)
    t = n.attr("threshold", 0.0)
    return [n.b.select(n.b.gt(x, scalar_lit(t, x.type.dtype)), scalar_lit(1, x.type.dtype),
                       scalar_lit(0, x.type.dtype))]


@handler("ArrayFeatureExtractor")
def array_feature_extractor(n: Node):
    x, idx = n.x(0), n.x(1)
    idx = n.b.reshape(idx, shape=(idx.type.shape[-1],)) if idx.type.rank != 1 else idx
    return [ix.gather(n.b, x, idx, x.type.rank - 1)]


LABEL_DEFAULTS = {"f": -0.0, "i": -1, "str": "_Unused"}
"""LabelEncoder's default output by the kind of its values (the schema's)."""


def _label_attr(n: Node, kind: str) -> tuple[str, np.ndarray] | None:
    """The keys_* or values_* attribute that is set, as (name, 1-D array); None when none is."""
    given = [(name, n.attr(name, None)) for name in (f"{kind}_floats", f"{kind}_int64s", f"{kind}_strings",
                                                     f"{kind}_tensor")]
    given = [(name, v) for name, v in given if v is not None]
    if len(given) != 1:
        raise n.error(f"LabelEncoder needs exactly one {kind}_* attribute, got {len(given)}")
    name, v = given[0]
    dtype = {"floats": np.float32, "int64s": np.int64, "strings": object}.get(name.rsplit("_", 1)[1])
    return name, np.asarray(v, dtype=dtype).reshape(-1) if dtype is not None else np.asarray(v).reshape(-1)


@handler("LabelEncoder")
def label_encoder(n: Node):
    """y = values[the last i with keys[i] == x] (NaN keys match NaN), else the default: the last matching
    key's position is a max over the keys (one fused reduction, however many keys), then a gather."""
    x = n.x(0)
    (_, keys), (vname, values) = _label_attr(n, "keys"), _label_attr(n, "values")
    if len(keys) != len(values):
        raise n.error(f"LabelEncoder has {len(keys)} keys but {len(values)} values")
    default = _label_default(n, vname, values)
    keys_atom = array(n.b, keys.astype(numpy_dtype(x.type.dtype)) if x.type.dtype != "str" else keys)
    xs = n.b.reshape(x, shape=x.type.shape + (1,))
    hit = n.b.eq(xs, keys_atom)
    if x.type.is_float and n.opset >= 4:  # (opset 4 made NaN keys match NaN)
        hit = m.logical_or(n.b, hit, m.logical_and(n.b, n.b.ne(xs, xs), n.b.ne(keys_atom, keys_atom)))
    order = n.b.iota(shape=x.type.shape + (len(keys),), axis=x.type.rank, dtype="i64")
    last = red.amax(n.b, n.b.select(hit, order, Lit(-1, Type("i64"))), [x.type.rank])
    found = ix.gather(n.b, array(n.b, values), n.b.select(n.b.lt(last, Lit(0, Type("i64"))), Lit(0, Type("i64")),
                                                          last), 0)
    return [Val(n.b.select(n.b.ge(last, Lit(0, Type("i64"))), found, array(n.b, np.asarray(default))), None,
                dtype_of(values))]


def _label_default(n: Node, vname: str, values: np.ndarray):
    """The default output value, of the values' dtype."""
    if vname == "values_tensor":
        t = n.attr("default_tensor", None)
        if t is not None:
            return np.asarray(t).reshape(-1)[0].astype(values.dtype) if values.dtype != object else \
                str(np.asarray(t).reshape(-1)[0])
        kind = "str" if values.dtype == object else "f" if values.dtype.kind == "f" else "i"
        return np.asarray(LABEL_DEFAULTS[kind], dtype=values.dtype)
    if vname == "values_strings":
        return np.asarray(n.attr("default_string", LABEL_DEFAULTS["str"]), dtype=object)
    if vname == "values_floats":
        return np.float32(n.attr("default_float", LABEL_DEFAULTS["f"]))
    return np.int64(n.attr("default_int64", LABEL_DEFAULTS["i"]))
