"""ONNX signal ops: DFT, STFT, MelWeightMatrix (window functions expand into ONNX ops)."""
from __future__ import annotations

import numpy as np

from ...ops import shape as sh
from ...ops import signal as sg
from .graph import handler
from .node import Node
from .values import onnx_dtype


def _split_complex(n: Node, x):
    """(real, imaginary or None) of a signal whose last axis is 1 (real) or 2 (complex)."""
    last = x.type.shape[-1]
    r = x.type.rank
    if last == 1:
        return n.b.reshape(x, shape=x.type.shape[:-1]), None
    if last == 2:
        re = n.b.reshape(n.b.slice(x, axis=r - 1, start=0, stop=1), shape=x.type.shape[:-1])
        im = n.b.reshape(n.b.slice(x, axis=r - 1, start=1, stop=2), shape=x.type.shape[:-1])
        return re, im
    raise n.error(f"{n.op}: the last axis of the signal must be 1 (real) or 2 (complex), got {x.type}")


def _join(n: Node, re, im):
    return sh.stack(n.b, [re, im], -1)


@handler("DFT")
def dft(n: Node):
    x = n.x(0)
    inverse, onesided = bool(n.attr("inverse", 0)), bool(n.attr("onesided", 0))
    if n.opset >= 20:
        axis = n.ints(2, "axis")[0] if n.has(2) else -2
    else:
        axis = n.attr("axis", 1)
    r = x.type.rank
    axis = axis + r if axis < 0 else axis
    if axis == r - 1:
        raise n.error("DFT: the axis must not be the last (complex) axis")
    re, im = _split_complex(n, x)
    if inverse and onesided:  # a one-sided spectrum back to a real signal
        if im is None:
            raise n.error("DFT: an inverse one-sided transform needs a complex input")
        length = n.ints(1, "dft_length")[0] if n.has(1) else 2 * (re.type.shape[axis] - 1)
        y = sg.irfft(n.b, re, im, axis, length)
        return [n.b.reshape(y, shape=y.type.shape + (1,))]
    length = n.ints(1, "dft_length")[0] if n.has(1) else re.type.shape[axis]
    if onesided and im is not None:
        raise n.error("DFT: onesided needs a real signal")
    out_re, out_im = sg.dft(n.b, re, im, axis, length, inverse, onesided)
    return [_join(n, out_re, out_im)]


@handler("STFT")
def stft(n: Node):
    x = n.x(0)
    step = n.ints(1, "frame_step")[0]
    onesided = bool(n.attr("onesided", 1))
    window = n.opt(2)
    if n.has(3):
        frame = n.ints(3, "frame_length")[0]
    elif window is not None:
        frame = window.type.shape[0]
    else:
        raise n.error("STFT needs a window or a frame_length")
    re, im = _split_complex(n, x)
    b = n.b
    frames = [b.window(p, axis=1, size=frame, stride=step, dilation=1) for p in ([re] + ([im] if im is not None
                                                                                    else []))]
    if window is not None:
        frames = [b.mul(f, window) for f in frames]
    out_re, out_im = sg.dft(b, frames[0], frames[1] if im is not None else None, 2, frame, False,
                            onesided and im is None)
    return [_join(n, out_re, out_im)]


@handler("MelWeightMatrix")
def mel_weight_matrix(n: Node):
    mel, dft_len, rate = (n.ints(i, what)[0] for i, what in enumerate(("num_mel_bins", "dft_length",
                                                                       "sample_rate")))
    low = float(np.asarray(n.const(3, "lower_edge_hertz")).reshape(-1)[0])
    high = float(np.asarray(n.const(4, "upper_edge_hertz")).reshape(-1)[0])
    out = onnx_dtype(n.attr("output_datatype", 1), "output_datatype", n.loc)
    from ...ir.types import numpy_dtype
    return [sg.mel_weight_matrix(mel, dft_len, rate, low, high).astype(numpy_dtype(out))]
