"""Signal processing: discrete Fourier transforms as contractions with constant cos/sin
matrices (exact for every length, differentiable), short-time transforms over `window`s."""
from __future__ import annotations

import numpy as np

from ..ir.core import Atom
from ._util import error, scalar_lit
from .create import array
from .linalg import LETTERS
from .nn import pad_axis


def _contract(b, x: Atom, m: np.ndarray, axis: int) -> Atom:
    """Σ_n m[k, n] x[.., n, ..] along axis."""
    letters = LETTERS[:x.type.rank]
    out = letters.replace(letters[axis], "Z")
    w = array(b, m.astype(np.float64 if x.type.dtype == "f64" else np.float32))
    return b.einsum(x, w, spec=f"{letters},Z{letters[axis]}->{out}")


def dft(b, re: Atom, im: Atom | None, axis: int, length: int, inverse: bool = False,
        onesided: bool = False) -> tuple[Atom, Atom]:
    """(real, imaginary) parts of the DFT of length `length` along axis (the input zero-padded or cut).
    Computed in f64 (then rounded to the input's dtype), as FFT libraries' accuracy demands."""
    n = re.type.shape[axis]
    if not isinstance(n, int):
        raise error(b, "a DFT needs a static signal length")
    dtype = re.type.dtype
    parts = [re] + ([im] if im is not None else [])
    parts = [_fit(b, p if dtype == "f64" else b.convert(p, dtype="f64"), axis, n, length) for p in parts]
    bins = length // 2 + 1 if onesided else length
    k = np.arange(bins)[:, None]
    t = np.arange(length)[None, :]
    theta = 2 * np.pi * ((k * t) % length) / length
    cos, sin = np.cos(theta), np.sin(theta)
    sign = 1.0 if inverse else -1.0  # e^(∓iθ)
    out_re = _contract(b, parts[0], cos, axis)
    out_im = _contract(b, parts[0], sign * sin, axis)
    if im is not None:
        out_re = b.sub(out_re, _contract(b, parts[1], sign * sin, axis))
        out_im = b.add(out_im, _contract(b, parts[1], cos, axis))
    if inverse:
        scale = scalar_lit(1.0 / length, "f64")
        out_re, out_im = b.mul(out_re, scale), b.mul(out_im, scale)
    return tuple(o if dtype == "f64" else b.convert(o, dtype=dtype) for o in (out_re, out_im))


def irfft(b, re: Atom, im: Atom, axis: int, length: int) -> Atom:
    """The real signal of length `length` whose one-sided spectrum is (re, im) along axis:
    x[t] = (1/N) Σ_k w_k (re_k cos θ - im_k sin θ), w_k = 2 for the bins that stand for two."""
    dtype = re.type.dtype
    re, im = (p if dtype == "f64" else b.convert(p, dtype="f64") for p in (re, im))
    bins = re.type.shape[axis]
    k = np.arange(bins)[None, :]
    t = np.arange(length)[:, None]
    theta = 2 * np.pi * ((k * t) % length) / length
    w = np.where((k == 0) | ((length % 2 == 0) & (k == length // 2)), 1.0, 2.0) / length
    out = b.sub(_contract(b, re, w * np.cos(theta), axis), _contract(b, im, w * np.sin(theta), axis))
    return out if dtype == "f64" else b.convert(out, dtype=dtype)


def _fit(b, x: Atom, axis: int, n: int, length: int) -> Atom:
    if length > n:
        return pad_axis(b, x, axis, 0, length - n)
    if length < n:
        return b.slice(x, axis=axis, start=0, stop=length)
    return x


def mel_weight_matrix(num_mel_bins: int, dft_length: int, sample_rate: int, low_hz: float, high_hz: float
                      ) -> np.ndarray:
    """[dft_length // 2 + 1, num_mel_bins] triangular filters equally spaced on the mel scale
    (mel = 2595 log10(1 + hz / 700)), as ONNX MelWeightMatrix defines them."""
    bins = np.arange(num_mel_bins + 2)
    low_mel = 2595 * np.log10(1 + low_hz / 700)
    high_mel = 2595 * np.log10(1 + high_hz / 700)
    mel = low_mel + bins * (high_mel - low_mel) / (num_mel_bins + 2)
    hz = 700 * (10 ** (mel / 2595) - 1)
    edges = (((dft_length + 1) * hz) // sample_rate).astype(int)
    out = np.zeros((dft_length // 2 + 1, num_mel_bins))
    for i in range(num_mel_bins):
        left, center, right = edges[i], edges[i + 1], edges[i + 2]
        if center == left:
            out[center, i] = 1
        else:
            for j in range(left, center + 1):
                out[j, i] = (j - left) / (center - left)
        for j in range(center, right):
            out[j, i] = (right - j) / (right - center)
    return out
