"""ONNX RNN, GRU and LSTM (and onnxruntime's com.microsoft DynamicQuantizeLSTM): attributes parsed here, the layers
are ops/rnn.py loops."""
from __future__ import annotations

import numpy as np

from ...ir.dense import Dense
from ...ops import rnn
from .graph import handler
from .node import Node

DEFAULTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
NEEDS_ALPHA = {"Affine", "LeakyRelu", "ThresholdedRelu", "ScaledTanh", "HardSigmoid", "Elu"}
NEEDS_BETA = {"Affine", "ScaledTanh", "HardSigmoid"}
DEFAULT_ALPHA = {"LeakyRelu": 0.01, "ThresholdedRelu": 1.0, "HardSigmoid": 0.2, "Elu": 1.0}
DEFAULT_BETA = {"HardSigmoid": 0.5}


def _activations(n: Node, dirs: int, kind: str) -> list:
    names = n.attr("activations", None) or DEFAULTS[kind] * dirs
    alphas = list(n.attr("activation_alpha", None) or [])
    betas = list(n.attr("activation_beta", None) or [])
    if len(names) != len(DEFAULTS[kind]) * dirs:
        raise n.error(f"{n.op}: {len(names)} activations for {dirs} direction(s)")
    acts = []
    for name in names:
        alpha = alphas.pop(0) if name in NEEDS_ALPHA and alphas else DEFAULT_ALPHA.get(name)
        beta = betas.pop(0) if name in NEEDS_BETA and betas else DEFAULT_BETA.get(name)
        acts.append(rnn.activation(n.b, name, alpha, beta))
    return acts


@handler("RNN", "GRU", "LSTM")
def recurrent(n: Node):
    return _recurrent(n, n.op, n.x(1), n.x(2))


@handler("DynamicQuantizeLSTM", domain="com.microsoft")
def dynamic_quantize_lstm(n: Node):
    """onnxruntime's LSTM of 8-bit weights (W [dirs, input, 4·hidden], R [dirs, hidden, 4·hidden], transposed from
    LSTM's, with scales and zero points per direction or per column), computed as onnxruntime's kernel computes it
    (core/providers/cpu/rnn/rnn_helpers.cc, ComputeGemm of quantized weights): the input sequence (all steps'
    rows at once) and each step's hidden state (the whole batch) quantized to uint8 at run time by
    DynamicQuantizeLinear's rule, multiplied by the int8 weights in integers (ks::qmatmul with int32 sums),
    the sums times a_scale · w_scale (f32) and added up, (x·W + h·R) + (Wb + Rb), before the gates.
    Weights that the integer kernel does not take (uint8 with a zero point, values known only at run time) run
    as the LSTM of the dequantized weights, which differs from onnxruntime by the activations' quantization."""
    products = _integer_products(n)
    if products is not None:
        w, r = n.x(1), n.x(2)
        return _recurrent(n, "LSTM", w, r, products, hidden=n.x(2).type.shape[1])
    w, r = _dequantized(n, 1, 8, 9), _dequantized(n, 2, 10, 11)
    return _recurrent(n, "LSTM", w, r)


def _integer_products(n: Node):
    """rnn.Products for a DynamicQuantizeLSTM whose W and R are constant int8 with zero point 0 and constant
    scales (what quantize_dynamic writes), else None."""
    from .ops_quant import dynamic_quantize, integer_sums
    weights = []
    for q, scale, zero in ((1, 8, 9), (2, 10, 11)):
        w, s = n.known(q), n.known(scale)
        z = n.known(zero) if n.has(zero) else np.zeros((), np.int8)
        if w is None or s is None or z is None or w.dtype != np.int8 or np.any(z != 0) or w.ndim != 3:
            return None
        weights.append((w, np.asarray(s, np.float32).reshape(w.shape[0], -1)))
    (w_value, w_scale), (r_value, r_scale) = weights

    def product(b, a, w, value, scale):
        """f32(Σ (a_q - z)·w) · (a_scale · w_scale) of a's rows quantized at run time (one scale for all of a)."""
        a_q, a_scale, a_zero = dynamic_quantize(b, a)
        sums = integer_sums(b, a_q, "u8", a_zero, None, w, value, np.zeros((), np.int8))
        s = scale.reshape(()) if scale.size == 1 else scale
        factor = b.mul(a_scale, b.constant(value=Dense.of(s)))  # (onnxruntime's a_scale · w_scale, f32)
        return b.mul(b.convert(sums, dtype="f32"), factor)

    return rnn.Products(input=lambda b, rows, w, d: product(b, rows, w, w_value[d], w_scale[d]),
                        recurrent=lambda b, h, r, d: product(b, h, r, r_value[d], r_scale[d]))


def _dequantized(n: Node, q: int, scale: int, zero: int):
    """The constant 8-bit weights at input q ([dirs, in, 4·hidden]) dequantized and transposed to LSTM's layout
    [dirs, 4·hidden, in] (f32: (w - zero)·scale)."""
    w, s = n.known(q), n.known(scale)
    z = n.known(zero) if n.has(zero) else np.zeros_like(s, dtype=np.int8)
    if w is None or s is None or z is None:
        raise n.unsupported("DynamicQuantizeLSTM with weights, scales or zero points computed at run time")
    s, z = (np.asarray(v).reshape(w.shape[0], 1, -1) for v in (s, z))
    f = (w.astype(np.float32) - z.astype(np.float32)) * s.astype(np.float32)
    return n.b.constant(value=Dense.of(np.ascontiguousarray(f.transpose(0, 2, 1)).astype(np.float32)))


def _recurrent(n: Node, kind: str, w, r, products=None, hidden=None):
    x = n.x(0)
    direction = n.attr_in("direction", ("forward", "reverse", "bidirectional"), "forward")
    dirs = 2 if direction == "bidirectional" else 1
    hidden = n.attr("hidden_size", None) or hidden or r.type.shape[-1]
    layout = n.attr_in("layout", (0, 1), 0)
    clip = n.attr("clip", None)
    flag = bool(n.attr("input_forget", 0)) if kind == "LSTM" else bool(n.attr("linear_before_reset", 0)) \
        if kind == "GRU" else False
    acts = _activations(n, dirs, kind)
    bias, lens = n.opt(3), n.opt(4)
    h0 = n.opt(5)
    c0 = n.opt(6) if kind == "LSTM" else None
    p = n.opt(7) if kind == "LSTM" else None
    if layout == 1:
        x = n.b.transpose(x, perm=(1, 0, 2))
        h0 = n.b.transpose(h0, perm=(1, 0, 2)) if h0 is not None else None
        c0 = n.b.transpose(c0, perm=(1, 0, 2)) if c0 is not None else None
    if lens is not None:
        lens = lens if lens.type.dtype == "i64" else n.b.convert(lens, dtype="i64")
    outs = rnn.run_layer(n.b, kind.lower(), x, w, r, bias, [h0, c0], p, hidden, direction, acts, clip, lens, flag,
                         products)
    if layout == 1:  # y [batch, seq, dirs, hidden], states [batch, dirs, hidden]
        outs = [n.b.transpose(outs[0], perm=(2, 0, 1, 3))] + [n.b.transpose(s, perm=(1, 0, 2)) for s in outs[1:]]
    return outs
