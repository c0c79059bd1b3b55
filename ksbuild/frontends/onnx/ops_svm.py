"""ONNX-ML SVMRegressor and SVMClassifier (what skl2onnx writes for scikit-learn's SVR, NuSVR, OneClassSVM, SVC
and NuSVC). The math is in ops/svm.py; the outputs' conventions where the operator's text is silent (the
binary case, which scores Z holds, labels by votes) are onnxruntime's, checked against it in
tests/test_onnx_sklearn.py."""
from __future__ import annotations

import numpy as np

from ...ops import svm
from ...ops._util import scalar_lit
from ...ops.create import array
from ...ops.index import arg_extremum
from ...ops.shape import stack
from .graph import handler
from .node import Node
from .ops_ml import POST_TRANSFORMS, class_labels, feature_rows, pick_label, post_transform


def _kernel(n: Node, linear: bool = False) -> svm.Kernel:
    """The kernel (a model without support vectors is linear, whatever kernel_type says: onnxruntime)."""
    kind = n.attr_in("kernel_type", svm.KERNELS, "LINEAR")
    params = list(n.attr("kernel_params", [])) + [0.0, 0.0, 0.0]
    return svm.Kernel("LINEAR" if linear else kind, float(params[0]), float(params[1]), float(params[2]))


def _floats(n: Node, name: str, default=None) -> np.ndarray:
    return np.asarray(n.attr(name, default) if default is not None else n.attr(name), dtype=np.float32).reshape(-1)


def _vectors(n: Node, count: int) -> np.ndarray:
    """support_vectors as [count, F]."""
    sv = _floats(n, "support_vectors", [])
    if count <= 0 or sv.size % count or not sv.size:
        raise n.error(f"{n.op}: {sv.size} support_vectors values do not split into {count} vectors")
    return sv.reshape(count, -1)


@handler("SVMRegressor")
def svm_regressor(n: Node):
    """y = Σ_m coefficients_m K(x, v_m) + rho (libsvm), or x · coefficients + rho without support vectors
    (liblinear); one_class=1 answers 1 or -1 by its sign. [N, 1] float."""
    b = n.b
    coef = _floats(n, "coefficients")
    rho = _floats(n, "rho")
    count = int(n.attr("n_supports", 0))
    if count > 0:
        vectors = _vectors(n, count)
        if coef.size != count:
            raise n.error(f"{n.op}: {coef.size} coefficients for {count} support vectors")
        x = feature_rows(n, vectors.shape[1])
        k = svm.kernel(b, x, vectors, _kernel(n, False))
        y = b.einsum(k, array(b, coef.reshape(-1, 1)), spec="nv,vo->no")
    else:
        _kernel(n, linear=True)
        x = feature_rows(n, coef.size)
        y = b.einsum(x, array(b, coef.reshape(-1, 1)), spec="nf,fo->no")
    y = b.add(y, scalar_lit(float(rho[0]), "f32"))
    if n.attr("one_class", 0):
        y = b.select(b.gt(y, scalar_lit(0.0, "f32")), scalar_lit(1.0, "f32"), scalar_lit(-1.0, "f32"))
    return [post_transform(n, y, n.attr_in("post_transform", POST_TRANSFORMS, "NONE"), 1)]


@handler("SVMClassifier")
def svm_classifier(n: Node):
    labels, ldt = class_labels(n)
    c = len(labels)
    post = n.attr_in("post_transform", POST_TRANSFORMS, "NONE")
    per_class = np.asarray(n.attr("vectors_per_class", []), dtype=np.int64)
    prob_a, prob_b = _floats(n, "prob_a", []), _floats(n, "prob_b", [])
    if len(prob_a) != len(prob_b):
        raise n.error(f"{n.op}: prob_a has {len(prob_a)} values, prob_b {len(prob_b)} (one each per pair of "
                      "classes)")
    if c < 2:
        raise n.unsupported("an SVMClassifier with fewer than two class labels")
    if per_class.sum() <= 0:
        return _liblinear(n, labels, ldt, post)
    if len(per_class) != c:
        raise n.error(f"{n.op}: vectors_per_class has {len(per_class)} entries for {c} class labels")
    b = n.b
    sv = _floats(n, "support_vectors", [])
    width = n.x(0).type.shape[-1] if n.x(0).type.rank else None
    if isinstance(width, int) and width and sv.size != int(per_class.sum()) * width:
        raise n.error(f"{n.op}: vectors_per_class adds up to {int(per_class.sum())} support vectors, but "
                      f"support_vectors holds {sv.size / width:g} of the input's {width} features")
    vectors = _vectors(n, int(per_class.sum()))
    npairs = len(svm.pairs(c))
    coef = _floats(n, "coefficients")
    rho = _floats(n, "rho")
    if coef.size != (c - 1) * len(vectors) or len(rho) != npairs:
        raise n.error(f"{n.op}: {c} classes and {len(vectors)} support vectors take {(c - 1) * len(vectors)} "
                      f"coefficients and {npairs} rho values, got {coef.size} and {len(rho)}")
    if len(prob_a) not in (0, npairs):
        raise n.error(f"{n.op}: prob_a has {len(prob_a)} values for {npairs} class pairs")
    x = feature_rows(n, vectors.shape[1])
    k = svm.kernel(b, x, vectors, _kernel(n, False))
    decision = b.add(b.einsum(k, array(b, svm.pair_weights(coef.reshape(c - 1, -1), per_class)), spec="nv,vp->np"),
                     array(b, rho))
    label = pick_label(n, labels, svm.votes(b, decision, c), ldt)
    if len(prob_a):
        probs = svm.couple(b, svm.platt(b, decision, prob_a, prob_b), c)
        return [label, post_transform(n, probs, post, c)]
    if c > 2:
        return [label, post_transform(n, decision, post, npairs)]
    s = b.reshape(decision, shape=(decision.type.shape[0],))
    if post == "PROBIT":
        return [label, b.reshape(post_transform(n, s, post, 1), shape=(s.type.shape[0], 1))]
    if post == "NONE":  # [-s, s]; else [1 - t(s), t(s)] of the post transform t (SOFTMAX: identity), as onnxruntime
        return [label, stack(b, [b.neg(s), s], 1)]
    t = b.logistic(s) if post == "LOGISTIC" else s
    return [label, stack(b, [b.sub(scalar_lit(1.0, "f32"), t), t], 1)]


def _liblinear(n: Node, labels: np.ndarray, ldt: str, post: str):
    """No support vectors: scores = x · coefficientsᵀ + rho[0] per class [N, C]; the label is the first
    class of the highest score, but for two classes labels[1] when that score is > 0 (>= 0.5 when every
    coefficient is >= 0), as onnxruntime."""
    b = n.b
    c = len(labels)
    _kernel(n, linear=True)
    coef = _floats(n, "coefficients")
    if coef.size % c:
        raise n.error(f"{n.op}: {coef.size} coefficients do not split into {c} class rows")
    x = feature_rows(n, coef.size // c)
    rho = _floats(n, "rho")
    score = b.add(b.einsum(x, array(b, coef.reshape(c, -1)), spec="nf,cf->nc"), scalar_lit(float(rho[0]), "f32"))
    best = arg_extremum(b, score, 1, keepdims=False, largest=True)
    if c == 2:
        top = b.reduce_max(score, axes=(1,))
        cut = 0.5 if bool(np.all(coef >= 0)) else 0.0
        one = b.ge(top, scalar_lit(cut, "f32")) if cut else b.gt(top, scalar_lit(cut, "f32"))
        best = b.select(one, scalar_lit(1, "i64"), best)
    return [pick_label(n, labels, best, ldt), post_transform(n, score, post, c)]
