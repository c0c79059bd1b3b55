"""torch.nn.functional's activations (ops/activations.py): relu, sigmoid, tanh, gelu, silu, elu, celu,
selu, leaky_relu, softplus, softsign, mish, logsigmoid, hardtanh, relu6, hardsigmoid, hardswish, the shrinks,
threshold, prelu, glu and softmin. Each handler is registered with `@torch_function` (registry.py)."""
from __future__ import annotations

from ...ops import activations, nn, reduce
from .math import _only_input, _unary
from .registry import torch_function
from .scope import Const
from .tensors import _arg, _c, _dim, _float_kw, float_tensor, int_const


def _library(name: str):
    """A function of the scalar library (relu, sigmoid, ...) called from a torch namespace (inplace=False, as
    F.relu takes it, is accepted: kernels never update in place)."""
    def fn(fc, b, args, kw, node):
        from .mathlib import LIBRARY
        inplace = _arg(fc, [], kw, 99, "inplace", node, Const(False)) if "inplace" in kw else Const(False)
        if not isinstance(inplace, Const) or inplace.value:
            raise fc.src.error(node, f"{name}(inplace=True) updates its input; kernels never update in place",
                               hint="drop inplace=True (the result is a new value)")
        if any(k != "inplace" for k in kw):
            raise fc.src.error(node, f"{name}() takes no keyword arguments here")
        return LIBRARY[name](fc, b, [fc.plain(b, a) for a in args], node)
    return fn


@torch_function("torch.nn.functional.softmin")
def _softmin(fc, b, args, kw, node):
    """F.softmin(input, dim): softmax of -input."""
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    axis = _dim(fc, args, kw, 1, node, x.type.rank)
    if axis is None:
        raise fc.src.error(node, "F.softmin needs dim=")
    return reduce.softmax(b, b.neg(x), axis)


@torch_function("torch.nn.functional.threshold")
def _threshold(fc, b, args, kw, node):
    """F.threshold(input, threshold, value): input above threshold, else value."""
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    th, value = _float_kw(fc, args, kw, 1, "threshold", node, None), _float_kw(fc, args, kw, 2, "value", node, None)
    return b.select(b.gt(x, _c(x, th)), x, _c(x, value))


@torch_function("torch.nn.functional.tanhshrink")
def _tanhshrink(fc, b, args, kw, node):
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    return b.sub(x, b.tanh(x))


def _shrink(soft: bool):
    """F.softshrink / hardshrink(input, lambd=0.5)."""
    def fn(fc, b, args, kw, node):
        x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
        lambd = _float_kw(fc, args, kw, 1, "lambd", node, 0.5)
        return activations.shrink(b, x, lambd if soft else 0.0, lambd)
    return fn


@torch_function("torch.nn.functional.prelu")
def _prelu(fc, b, args, kw, node):
    """F.prelu(input, weight): x where positive, weight·x else; weight has one value or one per channel (dim 1)."""
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    w = float_tensor(fc, b, _arg(fc, args, kw, 1, "weight", node), node)
    if w.type.rank == 1 and w.type.shape[0] != 1 and x.type.rank >= 2:
        w = nn.channel(b, w, x.type.rank)
    return b.select(b.gt(x, _c(x, 0)), x, b.mul(*fc.unify(b, w, x, node)))


def _logsigmoid(b, x):
    return b.neg(activations.softplus(b, b.neg(x)))


def _hardtanh(lo: float, hi: float, bounds: bool):
    """F.hardtanh(x, min_val=-1, max_val=1) (bounds=True) and F.relu6(x): as torch's, the derivative is 0 at
    the bounds (a clamp's is 1 there) and a NaN stays NaN."""
    def fn(fc, b, args, kw, node):
        x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
        low, high = lo, hi
        if bounds:
            low = _float_kw(fc, args, kw, 1, "min_val", node, lo)
            high = _float_kw(fc, args, kw, 2, "max_val", node, hi)
            args, kw = args[:1] + args[3:], {k: v for k, v in kw.items() if k not in ("min_val", "max_val")}
        _only_input(fc, args, kw, node)
        low_c, high_c = _c(x, low), _c(x, high)
        return b.select(b.le(x, low_c), low_c, b.select(b.ge(x, high_c), high_c, x))
    return fn


@torch_function("torch.nn.functional.gelu")
def _gelu(fc, b, args, kw, node):
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    return activations.gelu(b, x, _arg(fc, args, kw, 1, "approximate", node, "none"))


def _with_alpha(op, name: str, default: float):
    def fn(fc, b, args, kw, node):
        x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
        return op(b, x, _float_kw(fc, args, kw, 1, name, node, default))
    return fn


def _selu(b, x):
    # torch's constants (Klambauer et al. 2017)
    return activations.selu(b, x, 1.6732632423543772, 1.0507009873554805)


@torch_function("torch.nn.functional.softplus")
def _softplus(fc, b, args, kw, node):
    """F.softplus(x, beta=1, threshold=20): x itself where beta·x > threshold, as torch's."""
    from ...ops import aten
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    beta = _float_kw(fc, args, kw, 1, "beta", node, 1.0)
    threshold = _float_kw(fc, args, kw, 2, "threshold", node, 20.0)
    return aten.softplus(b, x, beta, threshold)


def _torch_alpha(op, name: str, default: float):
    """F.leaky_relu / F.celu with torch's derivative at 0 (ops/aten.py: the slope for leaky_relu, 1 for celu)."""
    def fn(fc, b, args, kw, node):
        from ...ops import aten
        x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
        alpha = _float_kw(fc, args, kw, 1, name, node, default)
        if op == "leaky_relu":
            return aten.leaky_relu(b, x, alpha)
        return aten.elu(b, x, alpha, 1.0, 1.0 / alpha)  # celu(x, α) = elu with input scale 1/α
    return fn


@torch_function("torch.nn.functional.glu")
def _glu(fc, b, args, kw, node):
    """F.glu(input, dim=-1): the first half times the sigmoid of the second."""
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    return activations.glu(b, x, int_const(fc, _arg(fc, args, kw, 1, "dim", node, Const(-1)), node, "dim"))


for _name in ("relu", "sigmoid", "tanh"):
    torch_function(f"torch.nn.functional.{_name}")(_library(_name))
torch_function("torch.nn.functional.softshrink")(_shrink(True))
torch_function("torch.nn.functional.hardshrink")(_shrink(False))
torch_function("torch.nn.functional.silu")(_unary(activations.swish))
torch_function("torch.nn.functional.elu")(_with_alpha(activations.elu, "alpha", 1.0))
torch_function("torch.nn.functional.celu")(_torch_alpha("celu", "alpha", 1.0))
torch_function("torch.nn.functional.leaky_relu")(_torch_alpha("leaky_relu", "negative_slope", 0.01))
torch_function("torch.nn.functional.selu")(_unary(_selu))
torch_function("torch.nn.functional.hardsigmoid")(_unary(lambda b, x: activations.hard_sigmoid(b, x, 1.0 / 6.0, 0.5)))
torch_function("torch.nn.functional.hardswish")(_unary(activations.hard_swish))
torch_function("torch.nn.functional.softsign")(_unary(activations.softsign))
torch_function("torch.nn.functional.mish")(_unary(activations.mish))
torch_function("torch.nn.functional.logsigmoid")(_unary(_logsigmoid))
torch_function("torch.nn.functional.relu6")(_hardtanh(0.0, 6.0, False))
torch_function("torch.nn.functional.hardtanh")(_hardtanh(-1.0, 1.0, True))
