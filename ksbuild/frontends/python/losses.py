"""torch.nn.functional losses in Python kernels, with torch's options: mse_loss, l1_loss, smooth_l1_loss,
huber_loss, binary_cross_entropy(_with_logits) (weight=, pos_weight=), cross_entropy and nll_loss (weight=,
ignore_index=, label_smoothing=, class-probability targets), reduction= everywhere; arguments at torch's
positions. Each is a decomposition into the shared op library (log_softmax, gather, softplus, reductions)."""
from __future__ import annotations

from ...ir.core import Atom, Lit
from ...ir.types import Type
from ...ops import activations, index, reduce
from ...ops import math as math_ops
from ...ops import shape as shape_ops
from .registry import torch_function
from .scope import Const
from .tensors import _arg, _c, _count, _float_kw, _i64, _two_floats, float_tensor, int_const, tensor


def _reduction(fc, args, kw, pos: int, node) -> str:
    how = _arg(fc, args, kw, pos, "reduction", node, "mean")
    if how not in ("mean", "sum", "none"):
        raise fc.src.error(node, f"unsupported reduction '{how}'", hint="mean, sum or none")
    return how


def _reduce_loss(fc, b, e: Atom, args, kw, pos: int, node) -> Atom:
    """The per-element loss e reduced as reduction= (argument `pos` in torch's signature) says."""
    return _reduced(b, e, _reduction(fc, args, kw, pos, node))


def _reduced(b, e: Atom, how: str) -> Atom:
    return e if how == "none" else reduce.mean(b, e) if how == "mean" else reduce.sum(b, e)


def _optional_tensor(fc, b, args, kw, pos: int, name: str, node) -> Atom | None:
    """A float tensor argument such as weight= (None when not given)."""
    v = _arg(fc, args, kw, pos, name, node, None)
    return None if v is None else float_tensor(fc, b, v, node)


def _weighted(fc, b, e: Atom, w: Atom | None, node) -> Atom:
    return e if w is None else b.mul(*fc.unify(b, e, w, node))


@torch_function("torch.nn.functional.binary_cross_entropy_with_logits")
def _bce_logits(fc, b, args, kw, node):
    """F.binary_cross_entropy_with_logits(input, target, weight=None, size_average, reduce, reduction='mean',
    pos_weight=None): w·[p·y·softplus(-z) + (1-y)·softplus(z)], the stable form of -w·[p·y·log σ(z) +
    (1-y)·log(1-σ(z))] (log σ(z) = -softplus(-z)); without pos_weight softplus(z) - z·y."""
    z = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    y = float_tensor(fc, b, _arg(fc, args, kw, 1, "target", node), node)
    z, y = fc.unify(b, z, y, node)
    pos_weight = _optional_tensor(fc, b, args, kw, 6, "pos_weight", node)
    if pos_weight is None:
        e = b.sub(activations.softplus(b, z), b.mul(z, y))
    else:
        py = b.mul(*fc.unify(b, y, pos_weight, node))
        e = b.add(b.mul(py, activations.softplus(b, b.neg(z))), b.mul(b.sub(_c(y, 1.0), y), activations.softplus(b, z)))
    e = _weighted(fc, b, e, _optional_tensor(fc, b, args, kw, 2, "weight", node), node)
    return _reduce_loss(fc, b, e, args, kw, 5, node)


@torch_function("torch.nn.functional.binary_cross_entropy")
def _bce(fc, b, args, kw, node):
    """F.binary_cross_entropy(input, target, weight=None, size_average, reduce, reduction='mean')."""
    p = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    y = float_tensor(fc, b, _arg(fc, args, kw, 1, "target", node), node)
    p, y = fc.unify(b, p, y, node)
    # torch clamps the logs at -100
    lo = _c(p, -100.0)
    e = b.neg(b.add(b.mul(y, b.max(b.log(p), lo)), b.mul(b.sub(_c(p, 1.0), y), b.max(b.log1p(b.neg(p)), lo))))
    e = _weighted(fc, b, e, _optional_tensor(fc, b, args, kw, 2, "weight", node), node)
    return _reduce_loss(fc, b, e, args, kw, 5, node)


def _class_losses(fc, b, logp: Atom, target: Atom, args, kw, node, smoothing: float = 0.0) -> Atom:
    """nll_loss / cross_entropy of log-probabilities logp [N, C], with class indices target [N] or class
    probabilities target [N, C] (torch's signature: weight=None at 2, ignore_index=-100 at 4, reduction='mean'
    at 6; cross_entropy's label smoothing ε)."""
    if logp.type.rank != 2 or target.type.rank not in (1, 2):
        raise fc.src.error(node, f"[N, C] inputs with class indices [N] or class probabilities [N, C] are "
                                 f"supported, got {logp.type} and {target.type}")
    weight = _optional_tensor(fc, b, args, kw, 2, "weight", node)
    how = _reduction(fc, args, kw, 6, node)
    if target.type.rank == 2:
        return _probability_losses(fc, b, logp, float_tensor(fc, b, target, node), weight, how, smoothing, node)
    ignore = int_const(fc, _arg(fc, args, kw, 4, "ignore_index", node, Const(-100)), node, "ignore_index")
    return _index_losses(fc, b, logp, _i64(b, target), weight, ignore, how, smoothing, node)


def _probability_losses(fc, b, logp: Atom, t: Atom, weight, how: str, smoothing: float, node) -> Atom:
    """Row i: -Σ_c w[c]·t'[i, c]·logp[i, c] with t' = (1-ε)·t + ε/C; a mean divides by N."""
    if smoothing:
        share = b.div(_c(t, smoothing), _count(b, logp.type.shape[1], t.type.dtype))
        t = b.add(b.mul(t, _c(t, 1.0 - smoothing)), share)
    return _reduced(b, b.neg(reduce.sum(b, _weighted(fc, b, b.mul(*fc.unify(b, t, logp, node)), weight, node), [1])),
                    how)


def _index_losses(fc, b, logp: Atom, t: Atom, weight, ignore: int, how: str, smoothing: float, node) -> Atom:
    """Row i: -w[t_i]·logp[i, t_i], 0 where t_i = ignore_index; a mean divides by Σ w[t_i] over the rows kept.
    With label smoothing ε: (1-ε)·that + ε/C·(the same reduction of -Σ_c w[c]·logp[i, c]), as torch's
    cross_entropy_loss_label_smoothing."""
    kept = b.ne(t, Lit(ignore, Type("i64")))
    safe = b.select(kept, t, Lit(0, Type("i64")))  # (an ignored row reads class 0, then counts 0)
    zero = _c(logp, 0.0)
    picked = b.neg(shape_ops.squeeze(b, index.gather_elements(b, logp, shape_ops.unsqueeze(b, safe, 1), 1), [1]))
    row_weight = index.gather(b, weight, safe, 0) if weight is not None else _c(logp, 1.0)
    total = reduce.sum(b, b.select(kept, row_weight, zero)) if how == "mean" else None
    out = _rows_reduced(b, b.select(kept, _weighted(fc, b, picked, row_weight, node), zero), how, total)
    if not smoothing:
        return out
    smooth = b.select(kept, b.neg(reduce.sum(b, _weighted(fc, b, logp, weight, node), [1])), zero)
    share = b.div(_c(logp, smoothing), _count(b, logp.type.shape[1], logp.type.dtype))
    return b.add(b.mul(out, _c(out, 1.0 - smoothing)), b.mul(_rows_reduced(b, smooth, how, total), share))


def _rows_reduced(b, rows: Atom, how: str, total: Atom | None) -> Atom:
    """Per-row losses reduced: as they are, summed, or summed over `total` (a weighted mean)."""
    return rows if how == "none" else reduce.sum(b, rows) if how == "sum" else b.div(reduce.sum(b, rows), total)


@torch_function("torch.nn.functional.cross_entropy")
def _cross_entropy(fc, b, args, kw, node):
    """F.cross_entropy(input, target, weight=None, size_average, ignore_index=-100, reduce, reduction='mean',
    label_smoothing=0.0): nll_loss of log_softmax along the class axis (with label smoothing)."""
    logits = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    target = tensor(fc, b, _arg(fc, args, kw, 1, "target", node), node)
    smoothing = _float_kw(fc, args, kw, 7, "label_smoothing", node, 0.0)
    return _class_losses(fc, b, reduce.log_softmax(b, logits, 1), target, args, kw, node, smoothing)


@torch_function("torch.nn.functional.nll_loss")
def _nll_loss(fc, b, args, kw, node):
    """F.nll_loss(input, target, weight=None, size_average, ignore_index=-100, reduce, reduction='mean')."""
    logp = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    target = tensor(fc, b, _arg(fc, args, kw, 1, "target", node), node)
    if target.type.rank != 1:
        raise fc.src.error(node, f"nll_loss takes class indices [N], got {target.type}")
    return _class_losses(fc, b, logp, target, args, kw, node)


@torch_function("torch.nn.functional.smooth_l1_loss")
def _smooth_l1(fc, b, args, kw, node):
    x, y = _two_floats(fc, b, [_arg(fc, args, kw, 0, "input", node), _arg(fc, args, kw, 1, "target", node)],
                       node, "smooth_l1_loss")
    beta = _float_kw(fc, args, kw, 5, "beta", node, 1.0)
    d = b.abs(b.sub(x, y))
    e = b.select(b.lt(d, _c(d, beta)), b.div(b.mul(_c(d, 0.5), b.ipow(d, n=2)), _c(d, beta)),
                 b.sub(d, _c(d, 0.5 * beta)))
    return _reduce_loss(fc, b, e, args, kw, 4, node)


@torch_function("torch.nn.functional.huber_loss")
def _huber(fc, b, args, kw, node):
    """F.huber_loss(input, target, reduction='mean', delta=1.0) = delta · smooth_l1_loss with beta = delta."""
    x, y = _two_floats(fc, b, [_arg(fc, args, kw, 0, "input", node), _arg(fc, args, kw, 1, "target", node)],
                       node, "huber_loss")
    delta = _float_kw(fc, args, kw, 3, "delta", node, 1.0)
    d = b.abs(b.sub(x, y))
    e = b.select(b.lt(d, _c(d, delta)), b.mul(_c(d, 0.5), b.ipow(d, n=2)),
                 b.mul(_c(d, delta), b.sub(d, _c(d, 0.5 * delta))))
    return _reduce_loss(fc, b, e, args, kw, 2, node)


def _loss(kind: str):
    """F.mse_loss / F.l1_loss(input, target, size_average, reduce, reduction='mean')."""
    def fn(fc, b, args, kw, node):
        x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
        t = float_tensor(fc, b, _arg(fc, args, kw, 1, "target", node), node)
        d = b.sub(*fc.unify(b, x, t, node))
        e = b.ipow(d, n=2) if kind == "mse" else b.abs(d)
        return _reduce_loss(fc, b, e, args, kw, 4, node)
    return fn


@torch_function("torch.nn.functional.kl_div")
def _kl_div(fc, b, args, kw, node):
    """F.kl_div(input, target, size_average, reduce, reduction='mean', log_target=False): target·(log target -
    input) per element (0 where target is 0), or e^t·(t - input) with log_target; reduction 'batchmean' divides
    the sum by the first dim (what the KL divergence is; 'mean' divides by every element, as torch)."""
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    t = float_tensor(fc, b, _arg(fc, args, kw, 1, "target", node), node)
    how = _arg(fc, args, kw, 4, "reduction", node, "mean")
    if how not in ("mean", "batchmean", "sum", "none"):
        raise fc.src.error(node, f"unsupported reduction '{how}'", hint="mean, batchmean, sum or none")
    log_target = _arg(fc, args, kw, 5, "log_target", node, Const(False))
    if not isinstance(log_target, Const):
        raise fc.src.error(node, "log_target must be a literal")
    x, t = fc.unify(b, x, t, node)
    if log_target.value:
        e = b.mul(b.exp(t), b.sub(t, x))
    else:
        positive = b.gt(t, _c(t, 0.0))
        e = b.select(positive, b.mul(t, b.sub(b.log(b.select(positive, t, _c(t, 1.0))), x)),
                     b.select(b.eq(t, _c(t, 0.0)), _c(t, 0.0), b.mul(t, b.sub(b.log(t), x))))
    if how == "batchmean":
        total = reduce.sum(b, e)
        return b.div(total, _count(b, e.type.shape[0], total.type.dtype)) if e.type.rank else total
    return _reduced(b, e, how)


@torch_function("torch.nn.functional.soft_margin_loss")
def _soft_margin(fc, b, args, kw, node):
    """F.soft_margin_loss(input, target, reduction='mean'): log(1 + e^(-y·x))."""
    x, y = fc.unify(b, *(float_tensor(fc, b, _arg(fc, args, kw, i, n, node), node)
                         for i, n in enumerate(("input", "target"))), node)
    return _reduce_loss(fc, b, activations.softplus(b, b.neg(b.mul(y, x))), args, kw, 4, node)


@torch_function("torch.nn.functional.margin_ranking_loss")
def _margin_ranking(fc, b, args, kw, node):
    """F.margin_ranking_loss(input1, input2, target, margin=0, reduction='mean'): max(0, -y·(x1 - x2) + margin)."""
    x1, x2, y = (float_tensor(fc, b, _arg(fc, args, kw, i, n, node), node)
                 for i, n in enumerate(("input1", "input2", "target")))
    margin = _float_kw(fc, args, kw, 3, "margin", node, 0.0)
    e = b.add(b.neg(b.mul(y, b.sub(*fc.unify(b, x1, x2, node)))), _c(x1, margin))
    return _reduce_loss(fc, b, math_ops.relu(b, e), args, kw, 6, node)


@torch_function("torch.nn.functional.poisson_nll_loss")
def _poisson_nll(fc, b, args, kw, node):
    """F.poisson_nll_loss(input, target, log_input=True, full=False, size_average, eps=1e-8, reduce,
    reduction='mean'): e^x - y·x (log_input), else x - y·log(x + eps); full adds Stirling's term for y > 1."""
    import math
    x, y = fc.unify(b, *(float_tensor(fc, b, _arg(fc, args, kw, i, n, node), node)
                         for i, n in enumerate(("input", "target"))), node)
    log_input = _arg(fc, args, kw, 2, "log_input", node, Const(True))
    full = _arg(fc, args, kw, 3, "full", node, Const(False))
    eps = _float_kw(fc, args, kw, 5, "eps", node, 1e-8)
    if not isinstance(log_input, Const) or not isinstance(full, Const):
        raise fc.src.error(node, "log_input and full must be literals")
    e = b.sub(b.exp(x), b.mul(y, x)) if log_input.value else b.sub(x, b.mul(y, b.log(b.add(x, _c(x, eps)))))
    if full.value:
        ys = b.select(b.gt(y, _c(y, 1)), y, _c(y, 2))
        stirling = b.add(b.sub(b.mul(ys, b.log(ys)), ys), b.mul(_c(y, 0.5), b.log(b.mul(_c(y, 2 * math.pi), ys))))
        e = b.add(e, b.select(b.gt(y, _c(y, 1)), stirling, _c(y, 0)))
    return _reduce_loss(fc, b, e, args, kw, 7, node)


@torch_function("torch.nn.functional.gaussian_nll_loss")
def _gaussian_nll(fc, b, args, kw, node):
    """F.gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction='mean'):
    (log max(var, eps) + (x - y)² / max(var, eps)) / 2 (+ log(2π)/2 when full)."""
    import math
    x, y, var = (float_tensor(fc, b, _arg(fc, args, kw, i, n, node), node)
                 for i, n in enumerate(("input", "target", "var")))
    full = _arg(fc, args, kw, 3, "full", node, Const(False))
    eps = _float_kw(fc, args, kw, 4, "eps", node, 1e-6)
    v = math_ops.clamp(b, var, _c(var, eps))
    d = b.sub(*fc.unify(b, x, y, node))
    e = b.mul(_c(d, 0.5), b.add(b.log(v), b.div(b.mul(d, d), v)))
    if isinstance(full, Const) and full.value:
        e = b.add(e, _c(e, 0.5 * math.log(2 * math.pi)))
    return _reduce_loss(fc, b, e, args, kw, 5, node)



@torch_function("torch.nn.functional.hinge_embedding_loss")
def _hinge_embedding(fc, b, args, kw, node):
    """F.hinge_embedding_loss(input, target, margin=1.0, reduction='mean'): x where y = 1, max(0, margin - x)
    where y = -1."""
    x, y = fc.unify(b, *(float_tensor(fc, b, _arg(fc, args, kw, i, n, node), node)
                         for i, n in enumerate(("input", "target"))), node)
    margin = _float_kw(fc, args, kw, 2, "margin", node, 1.0)
    clamped = math_ops.relu(b, b.sub(_c(x, margin), x))  # (torch's sum of both parts, for any other target too)
    e = b.add(b.select(b.ne(y, _c(y, 1)), clamped, _c(x, 0)), b.select(b.ne(y, _c(y, -1)), x, _c(x, 0)))
    return _reduce_loss(fc, b, e, args, kw, 5, node)


@torch_function("torch.nn.functional.cosine_embedding_loss")
def _cosine_embedding(fc, b, args, kw, node):
    """F.cosine_embedding_loss(input1, input2, target, margin=0, reduction='mean') over rows [N, D]: 1 - cos
    where y = 1, max(0, cos - margin) where y = -1 (cos with eps 1e-12 under the norms' product, as torch)."""
    x1, x2, y = (float_tensor(fc, b, _arg(fc, args, kw, i, n, node), node)
                 for i, n in enumerate(("input1", "input2", "target")))
    margin = _float_kw(fc, args, kw, 3, "margin", node, 0.0)
    axis = [x1.type.rank - 1]
    dot = reduce.sum(b, b.mul(x1, x2), axis)
    m1 = b.add(reduce.sum(b, b.mul(x1, x1), axis), _c(x1, 1e-12))
    m2 = b.add(reduce.sum(b, b.mul(x2, x2), axis), _c(x1, 1e-12))
    cos = b.div(dot, b.sqrt(b.mul(m1, m2)))
    e = b.select(b.eq(y, _c(y, 1)), b.sub(_c(cos, 1), cos),
                 b.select(b.eq(y, _c(y, -1)), math_ops.relu(b, b.sub(cos, _c(cos, margin))), _c(cos, 0)))
    return _reduce_loss(fc, b, e, args, kw, 6, node)


@torch_function("torch.nn.functional.triplet_margin_loss")
def _triplet_margin(fc, b, args, kw, node):
    """F.triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False,
    reduction='mean'): max(0, d(a, p) - d(a, n) + margin) with pairwise_distance."""
    a, pos, neg = (_arg(fc, args, kw, i, n, node) for i, n in enumerate(("anchor", "positive", "negative")))
    margin = _float_kw(fc, args, kw, 3, "margin", node, 1.0)
    p = _float_kw(fc, args, kw, 4, "p", node, 2.0)
    eps = _float_kw(fc, args, kw, 5, "eps", node, 1e-6)
    swap = _arg(fc, args, kw, 6, "swap", node, Const(False))
    from .nn import _pairwise_distance
    dist = lambda u, v: _pairwise_distance(fc, b, [u, v, Const(p), Const(eps)], {}, node)  # noqa: E731
    d_ap, d_an = dist(a, pos), dist(a, neg)
    if isinstance(swap, Const) and swap.value:
        d_an = math_ops.extremum(b, d_an, dist(pos, neg), False)
    e = math_ops.relu(b, b.add(b.sub(d_ap, d_an), _c(d_ap, margin)))
    return _reduce_loss(fc, b, e, args, kw, 9, node)


torch_function("torch.nn.functional.mse_loss")(_loss("mse"))
torch_function("torch.nn.functional.l1_loss")(_loss("l1"))
