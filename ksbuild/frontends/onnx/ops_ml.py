"""ONNX-ML ops (domain ai.onnx.ml) that are plain tensor code: Binarizer, ArrayFeatureExtractor, LabelEncoder,
OneHotEncoder, FeatureVectorizer, CategoryMapper, Scaler, Imputer, Normalizer, LinearRegressor, LinearClassifier,
and the post transforms of the ML models (the tree ensembles are in ops_trees.py, the SVMs in ops_svm.py)."""
from __future__ import annotations

import numpy as np

from ...ir.core import Lit
from ...ir.types import Type, dtype_of, numel, numpy_dtype
from ...ops import index as ix
from ...ops import math as m
from ...ops import reduce as red
from ...ops._util import scalar_lit
from ...ops.create import array
from ...ops.index import arg_extremum
from ...ops.shape import stack
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
    """X's last axis gathered at the indices Y, flattened (onnxruntime: Z is X's shape with its last dim the
    number of indices, [1, k] for a 1-D X). skl2onnx's label lookups pass ArgMax's [N, 1] and a class table."""
    x, idx = n.x(0), n.x(1)
    if x.type.rank == 0:
        raise n.error(f"{n.op}: X must have at least one axis")
    known, width = n.known(1), x.type.shape[-1]
    if known is not None and isinstance(width, int) and known.dtype != object and known.size and \
            (known.min() < 0 or known.max() >= width):
        bad = int(known.reshape(-1)[(known.reshape(-1) < 0) | (known.reshape(-1) >= width)][0])
        raise n.error(f"{n.op}: index {bad} is outside the {width} columns of X (onnxruntime refuses the call)")
    idx = n.b.reshape(idx, shape=(numel(idx.type.shape),)) if idx.type.rank != 1 else idx
    z = ix.gather(n.b, x, idx, x.type.rank - 1)
    return [n.b.reshape(z, shape=(1,) + z.type.shape) if x.type.rank == 1 else z]


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


POST_TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")
"""The post_transform values of the ONNX-ML models (TreeEnsemble's integer one indexes this)."""


def post_transform(n: Node, score, post: str, k: int):
    """onnxruntime's post transforms of [N, K] scores (for one target it applies none of them but PROBIT; its
    PROBIT is Winitzki's approximation of erfinv, good to about 2e-3, ksbuild's is exact to float precision)."""
    b = n.b
    if post == "PROBIT":
        return m.probit(b, score)
    if post == "NONE" or k == 1:
        return score
    if post == "LOGISTIC":
        return b.logistic(score)
    if post == "SOFTMAX":
        return red.softmax(b, score, 1)
    return _softmax_zero(b, score)


def _softmax_zero(b, score):
    """onnxruntime's SOFTMAX_ZERO: a softmax over the entries that are not (within 1e-7 of) zero; those stay
    (nearly) zero."""
    dt = score.type.dtype
    top = red.amax(b, score, [1], keepdim=True)
    nonzero = b.gt(b.abs(score), Lit(1e-7, Type(dt)))
    e = b.select(nonzero, b.exp(b.sub(score, top)), b.mul(score, b.exp(b.neg(top))))
    total = red.sum(b, b.select(nonzero, e, Lit(0.0, Type(dt))), [1], keepdim=True)
    return b.div(e, total)


# ---- preprocessing and linear models (what skl2onnx writes for pipelines before a model) -------------

def _per_feature(n: Node, values, x, what: str):
    """A list attribute of one value, or one per feature of x [N, F], as an f32 row (or scalar)."""
    arr = np.asarray(values, dtype=np.float32).reshape(-1)
    f = x.type.shape[-1] if x.type.rank else 1
    if len(arr) not in (1, f):
        raise n.error(f"{n.op}: {what} has {len(arr)} values for {f} features (give 1 or {f})")
    return array(n.b, arr) if len(arr) > 1 else scalar_lit(float(arr[0]), "f32")


def _as_f32(n: Node, x):
    return x if x.type.dtype == "f32" else n.b.convert(x, dtype="f32")


@handler("Scaler")
def scaler(n: Node):
    """y = (x - offset) * scale, per feature (float output)."""
    x = _as_f32(n, n.x(0))
    offset = _per_feature(n, n.attr("offset", [0.0]), x, "offset")
    scale = _per_feature(n, n.attr("scale", [1.0]), x, "scale")
    return [n.b.mul(n.b.sub(x, offset), scale)]


@handler("Imputer")
def imputer(n: Node):
    """x with the elements equal to the replaced value (NaN matches NaN) set to the imputed value of their
    feature."""
    x = n.x(0)
    floats, ints = n.attr("imputed_value_floats", None), n.attr("imputed_value_int64s", None)
    if (floats is None) == (ints is None):
        raise n.error(f"{n.op} needs exactly one of imputed_value_floats and imputed_value_int64s")
    if floats is not None:
        replaced = float(n.attr("replaced_value_float", 0.0))
        values = np.asarray(floats, dtype=numpy_dtype(x.type.dtype) if x.type.is_float else np.float32)
    else:
        replaced = int(n.attr("replaced_value_int64", 0))
        values = np.asarray(ints, dtype=numpy_dtype(x.type.dtype))
    f = x.type.shape[-1]
    if len(values) not in (1, f):
        raise n.error(f"{n.op}: {len(values)} imputed values for {f} features (give 1 or {f})")
    if x.type.is_float != (floats is not None):
        raise n.error(f"{n.op}: the input is {x.type.dtype} but the imputed values are "
                      f"{'floats' if floats is not None else 'integers'}")
    fill = array(n.b, values.astype(numpy_dtype(x.type.dtype)))
    hit = n.b.ne(x, x) if x.type.is_float and np.isnan(replaced) else n.b.eq(x, scalar_lit(replaced, x.type.dtype))
    return [n.b.select(hit, n.b.broadcast_to(fill, shape=x.type.shape), x)]


@handler("Normalizer")
def normalizer(n: Node):
    """Each row divided by its largest element (MAX), the sum of |x| (L1) or its Euclidean norm (L2); a row whose
    divisor is 0 stays as it is (the operator's text, and onnxruntime: MAX takes the signed maximum)."""
    x = _as_f32(n, n.x(0))
    norm = n.attr_in("norm", ("MAX", "L1", "L2"), "MAX")
    b = n.b
    axis = x.type.rank - 1
    if norm == "MAX":
        div = red.amax(b, x, [axis], keepdim=True)
    elif norm == "L1":
        div = red.sum(b, b.abs(x), [axis], keepdim=True)
    else:
        div = b.sqrt(red.sum(b, b.mul(x, x), [axis], keepdim=True))
    zero = b.eq(div, scalar_lit(0.0, "f32"))
    return [b.select(zero, x, b.div(x, b.select(zero, scalar_lit(1.0, "f32"), div)))]


@handler("LinearRegressor")
def linear_regressor(n: Node):
    """y = x · coefficientsᵀ + intercepts: the coefficients of each target contiguous (float output)."""
    x = _as_f32(n, n.x(0))
    targets = n.attr("targets", 1)
    coef = np.asarray(n.attr("coefficients"), dtype=np.float32)
    f = x.type.shape[-1]
    if not isinstance(f, int) or coef.size != targets * f:
        raise n.error(f"{n.op}: {coef.size} coefficients for {targets} target(s) of {f} features")
    post = n.attr_in("post_transform", POST_TRANSFORMS, "NONE")
    y = n.b.einsum(x, array(n.b, coef.reshape(targets, f)), spec="nf,tf->nt") if x.type.rank == 2 else \
        n.b.einsum(x, array(n.b, coef.reshape(targets, f)), spec="f,tf->t")
    intercepts = n.attr("intercepts", None)
    if intercepts is not None:
        if len(intercepts) != targets:
            raise n.error(f"{n.op}: {len(intercepts)} intercepts for {targets} target(s)")
        y = n.b.add(y, array(n.b, np.asarray(intercepts, dtype=np.float32)))
    return [post_transform(n, y, post, targets)]


@handler("ZipMap")
def zipmap(n: Node):
    raise n.unsupported("ZipMap (its output is a sequence of maps, which a C ABI has no type for)",
                        hint="convert the classifier with its probabilities as a tensor: skl2onnx's "
                             "options={id(model): {'zipmap': False}} (onnxmltools: zipmap=False)")


# ---- LinearClassifier (scikit-learn's LogisticRegression, LinearSVC, RidgeClassifier, LDA as skl2onnx writes them)

def class_labels(n: Node, ints: str = "classlabels_ints", required: bool = True) -> tuple[np.ndarray | None, str]:
    """The class labels (int64 or strings) and the label output's dtype; (None, "i64") when none are given and
    they are not required."""
    labels_int, labels_str = n.attr(ints, None), n.attr("classlabels_strings", None)
    if labels_int is not None and labels_str is not None:
        raise n.error(f"{n.op}: set {ints} or classlabels_strings, not both")
    if labels_str is not None:
        arr = np.empty(len(labels_str), dtype=object)
        arr[:] = [s.decode() if isinstance(s, bytes) else str(s) for s in labels_str]
        return arr, "str"
    if labels_int is not None:
        return np.asarray(labels_int, dtype=np.int64), "i64"
    if required:
        raise n.error(f"{n.op} needs {ints} or classlabels_strings")
    return None, "i64"


def feature_rows(n: Node, features: int | None = None):
    """X as f32 [N, F]: a 1-D X is one row (as onnxruntime reads it); int and double inputs are converted."""
    x = _as_f32(n, n.x(0))
    if x.type.rank == 1:
        x = n.b.reshape(x, shape=(1,) + x.type.shape)
    if x.type.rank != 2:
        raise n.error(f"{n.op}: X must be [N, F] (a batch of feature rows) or [F], got {x.type}")
    if features is not None and x.type.shape[1] != features:
        raise n.error(f"{n.op}: the model was made for {features} features, X has {x.type.shape[1]}")
    return x


def pick_label(n: Node, labels: np.ndarray, index, dtype: str) -> Val:
    """labels[index] as the label output."""
    return Val(n.b.gather(array(n.b, labels), index, axis=0), None, dtype)


@handler("LinearClassifier")
def linear_classifier(n: Node):
    """scores = x · coefficientsᵀ + intercepts [N, C]; the label is the first class of the highest score. With one
    score column (a binary model) the label is labels[1] (or 1) where the score is > 0, and for two labels Z is
    [1 - t(s), t(s)] with t the post transform (onnxruntime 1.32; it garbles PROBIT there, ksbuild applies it)."""
    intercepts = np.asarray(n.attr("intercepts", []), dtype=np.float32)
    coef = np.asarray(n.attr("coefficients"), dtype=np.float32)
    c = len(intercepts)
    width = n.x(0).type.shape[-1] if n.x(0).type.rank else None
    if c == 0 or coef.size % c or (isinstance(width, int) and coef.size != c * width):
        want = f"; X has {width} features, so {coef.size // width} intercepts would fit" \
            if isinstance(width, int) and width and coef.size % width == 0 else ""
        raise n.error(f"{n.op}: {c} intercepts (one per class) and {coef.size} coefficients (one row of features "
                      f"per class) do not agree{want}")
    x = feature_rows(n, coef.size // c)
    labels, ldt = class_labels(n, required=c > 1)
    if c > 1 and len(labels) != c:
        raise n.error(f"{n.op}: {len(labels)} class labels for {c} score columns")
    if c == 1 and labels is not None and len(labels) != 2:
        raise n.error(f"{n.op}: a binary model (one score column) takes 2 class labels (or none), got {len(labels)}")
    b = n.b
    post = n.attr_in("post_transform", POST_TRANSFORMS, "NONE")
    n.attr_in("multi_class", (0, 1), 0)  # (one-vs-rest or multinomial: the scores are the same linear map)
    score = b.add(b.einsum(x, array(b, coef.reshape(c, -1)), spec="nf,cf->nc"), array(b, intercepts))
    if c > 1:
        return [pick_label(n, labels, arg_extremum(b, score, 1, keepdims=False, largest=True), ldt),
                post_transform(n, score, post, c)]
    s = b.reshape(score, shape=score.type.shape[:1])
    positive = b.convert(b.gt(s, scalar_lit(0.0, "f32")), dtype="i64")
    if labels is None:
        return [Val(positive, None, "i64"), m.probit(b, score) if post == "PROBIT" else score]
    t = m.probit(b, s) if post == "PROBIT" else b.logistic(s) if post == "LOGISTIC" else s
    return [pick_label(n, labels, positive, ldt), stack(b, [b.sub(scalar_lit(1.0, "f32"), t), t], 1)]


@handler("OneHotEncoder")
def one_hot_encoder(n: Node):
    """Y[..., k] = 1.0 where X equals category k (a float X is truncated to an integer first, as onnxruntime
    reads it), Y of shape X.shape + [len(cats)]. With zeros=0 onnxruntime fails the call on a value that is
    no category; compiled code has no data-dependent errors, so that row is all zeros, as with zeros=1."""
    x = n.x(0)
    ints, strings = n.attr("cats_int64s", None), n.attr("cats_strings", None)
    if (ints is None) == (strings is None):
        raise n.error(f"{n.op} needs exactly one of cats_int64s and cats_strings")
    n.attr_in("zeros", (0, 1), 1)
    if strings is not None:
        if x.type.dtype != "str":
            raise n.error(f"{n.op}: string categories for a {x.type.dtype} input")
        cats = np.empty(len(strings), dtype=object)
        cats[:] = [s.decode() if isinstance(s, bytes) else str(s) for s in strings]
    else:
        if x.type.dtype == "str":
            raise n.error(f"{n.op}: integer categories for a string input")
        cats = np.asarray(ints, dtype=np.int64)
        x = n.b.convert(m.trunc(n.b, x) if x.type.is_float else x, dtype="i64")
    hit = n.b.eq(n.b.reshape(x, shape=x.type.shape + (1,)), array(n.b, cats))
    return [n.b.convert(hit, dtype="f32")]


@handler("FeatureVectorizer")
def feature_vectorizer(n: Node):
    """The inputs side by side as float [N, Σ inputdimensions]: input i gives its first inputdimensions[i]
    columns, zero-padded when it has fewer (a 1-D input is one row)."""
    sizes = [int(d) for d in n.attr("inputdimensions", [])]
    xs = [n.x(i) for i in range(n.n_in)]
    if len(sizes) != len(xs):
        raise n.error(f"{n.op}: {len(sizes)} inputdimensions for {len(xs)} inputs")
    parts = []
    for x, d in zip(xs, sizes):
        x = _as_f32(n, x if x.type.rank != 1 else n.b.reshape(x, shape=(1,) + x.type.shape))
        if x.type.rank != 2:
            raise n.error(f"{n.op}: inputs must be [N, C] or [C], got {x.type}")
        c = x.type.shape[1]
        if not isinstance(c, int):
            raise n.error(f"{n.op}: an input of a symbolic width ({x.type})")
        x = n.b.slice(x, axis=1, start=0, stop=d) if c > d else x
        parts.append(n.b.pad(x, axis=1, lo=0, hi=d - c) if c < d else x)
    from ...ops.shape import concatenate
    rows = {p.type.shape[0] for p in parts}
    if len(rows) > 1:
        raise n.error(f"{n.op}: the inputs have different numbers of rows ({sorted(map(str, rows))})")
    return [concatenate(n.b, parts, 1) if len(parts) > 1 else parts[0]]


@handler("CategoryMapper")
def category_mapper(n: Node):
    """Strings to integers (or integers to strings) by the pairs cats_strings[i] <-> cats_int64s[i]; a value
    not among them gives default_int64 (-1) or default_string ('_Unused'). The direction is the input's type
    (as onnxruntime); a value listed twice maps as its last pair (onnxruntime's maps keep the last)."""
    x = n.x(0)
    strings = np.asarray([s.decode() if isinstance(s, bytes) else str(s) for s in n.attr("cats_strings")],
                         dtype=object)
    ints = np.asarray(n.attr("cats_int64s"), dtype=np.int64)
    if len(strings) != len(ints):
        raise n.error(f"{n.op}: {len(strings)} cats_strings but {len(ints)} cats_int64s")
    default_int, default_str = n.attr("default_int64", -1), n.attr("default_string", "_Unused")
    if x.type.dtype == "str":
        keys, values, default, dtype = strings, ints, np.asarray(int(default_int)), "i64"
    elif x.type.dtype == "i64":
        keys, values, default, dtype = ints, strings, np.asarray(str(default_str), dtype=object), "str"
    else:
        raise n.error(f"{n.op}: the input must be strings or int64, got {x.type.dtype}")
    b = n.b
    hit = b.eq(b.reshape(x, shape=x.type.shape + (1,)), array(b, keys))
    order = b.iota(shape=x.type.shape + (len(keys),), axis=x.type.rank, dtype="i64")
    last = red.amax(b, b.select(hit, order, Lit(-1, Type("i64"))), [x.type.rank])
    found = b.ge(last, Lit(0, Type("i64")))
    picked = ix.gather(b, array(b, values), b.select(found, last, Lit(0, Type("i64"))), 0)
    return [Val(b.select(found, picked, array(b, default)), None, dtype)]
