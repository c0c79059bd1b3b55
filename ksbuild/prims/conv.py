"""conv: N-d convolution, the heavy operation of CNNs, as one primitive.

conv[strides, pads, dilations, groups](x, w) -> y
    x [N, C, S1, ..., Sk], w [M, C / groups, K1, ..., Kk] (k = 1, 2 or 3 spatial axes, literal taps),
    y [N, M, O1, ..., Ok] with Oi = (Si + lo_i + hi_i - dilation_i·(Ki - 1) - 1) // stride_i + 1 and
    y[n, m, o] = Σ_{c, t} x[n, g·C/G + c, o·stride + t·dilation - lo] · w[m, c, t] (g = m's group, x zero
    outside), pads = (lo_1, ..., lo_k, hi_1, ..., hi_k) >= 0: cross-correlation, as in ONNX and PyTorch.

It is bilinear, so its jvp is two convolutions; its transposes are decompositions: the input gradient of a
stride-1 convolution is a convolution of ȳ with the flipped kernel, otherwise windows, folds and einsums
overlap-add w·ȳ back into the image; the weight gradient correlates the image's windows with ȳ. The
codegen passes lower it to `convolve` (prims/convolve.py), which calls ks::conv (prelude/ks/conv.h:
im2col blocks packed for the register tiles).
"""
from __future__ import annotations

import numpy as np

from ..errors import KsbuildError
from ..ir.dense import Dense
from ..ir.types import Type, dim_add, dim_mul, numel
from .base import Prim, finite, unsigned
from .window import window_count

OUTS = "opq"   # output position letters, one per spatial axis
TAPS = "uvw"   # kernel tap letters


def _rule(in_types, strides, pads, dilations, groups):
    x, w = in_types
    k = x.rank - 2
    if not 1 <= k <= 3 or w.rank != x.rank:
        raise KsbuildError(f"conv of {x} with kernel {w}: expected [N, C, 1 to 3 spatial axes] and a kernel of the "
                           "same rank")
    if x.dtype != w.dtype or not x.is_float:
        raise KsbuildError(f"conv needs float operands of one dtype, got {x} and {w}")
    if len(strides) != k or len(dilations) != k or len(pads) != 2 * k or min(pads, default=0) < 0:
        raise KsbuildError(f"conv over {k} spatial axes needs {k} strides and dilations and {2 * k} pads >= 0")
    taps = w.shape[2:]
    if not all(isinstance(t, int) and t >= 1 for t in taps) or min(strides) < 1 or min(dilations) < 1:
        raise KsbuildError(f"conv kernel {w}: the taps must be literal sizes, strides and dilations >= 1")
    c, m, cg = x.shape[1], w.shape[0], w.shape[1]
    grouped = isinstance(c, int) and isinstance(m, int) and c % groups == 0 and m % groups == 0 and \
        c // groups == cg
    if not (grouped or (groups == 1 and c == cg)):
        raise KsbuildError(f"conv of {x} with kernel {w} and {groups} group(s): the channels do not match "
                           f"(input channels / groups must equal the kernel's axis 1)")
    outs = []
    for i in range(k):
        o = window_count(dim_add(x.shape[2 + i], pads[i] + pads[k + i]), taps[i], strides[i], dilations[i])
        if isinstance(o, int) and o < 1:
            raise KsbuildError(f"conv kernel {w} with dilation {dilations[i]} does not fit in spatial axis {i} of "
                               f"{x} (padded by {pads[i]} + {pads[k + i]})")
        outs.append(o)
    return (Type(x.dtype, (x.shape[0], m) + tuple(outs)),)


def _eval(x, w, strides, pads, dilations, groups, env):
    k = x.ndim - 2
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[k + i]) for i in range(k)])
    n, c = x.shape[:2]
    m, cg = w.shape[:2]
    for i in range(k):  # [.., S, ..] -> [.., O, K, ..] along spatial axis i (now at 2 + 2i)
        size, axis = w.shape[2 + i], 2 + 2 * i
        count = (xp.shape[axis] - dilations[i] * (size - 1) - 1) // strides[i] + 1
        taps = np.arange(count)[:, None] * strides[i] + np.arange(size)[None, :] * dilations[i]
        xp = np.take(xp, taps, axis=axis)
    patches = xp.reshape((n, groups, cg) + xp.shape[2:])
    kern = w.reshape((groups, m // groups, cg) + w.shape[2:])
    spec = f"ngc{''.join(o + t for o, t in zip(OUTS, TAPS[:k]))},gmc{TAPS[:k]}->ngm{OUTS[:k]}"
    y = np.einsum(spec, patches, kern)
    return (y.reshape((n, m) + y.shape[3:]).astype(x.dtype),)


def _jvp(b, p, t, **params):
    # bilinear: d conv(x, w) = conv(dx, w) + conv(x, dw)
    x, w = p
    out = None
    if t[0] is not None:
        out = b.conv(t[0], w, **params)
    if t[1] is not None:
        dw = b.conv(x, t[1], **params)
        out = dw if out is None else b.add(out, dw)
    return [b.conv(x, w, **params)], [out]


def _transpose(b, cts, ins, linear, strides, pads, dilations, groups):
    (ct,) = cts
    x, w = ins
    if ct is None:
        return [None, None]
    geometry = (strides, pads, dilations, groups)
    return [input_grad(b, ct, w, x.type, *geometry) if linear[0] else None,
            weight_grad(b, x, ct, w.type, *geometry) if linear[1] else None]


def _columns(b, ct, groups: int):
    """ȳ [N, M, O...] as [N, G, M/G, O] (the output positions merged)."""
    n, m = ct.type.shape[:2]
    mg = m if groups == 1 else m // groups
    return b.reshape(ct, shape=(n, groups, mg, numel(ct.type.shape[2:])))


def input_grad(b, ct, w, x_type: Type, strides, pads, dilations, groups):
    """x̄ = Σ_m w·ȳ overlap-added back into the image: x̄[n, c, o·s + t·d - lo] += Σ_m w[m, c, t]·ȳ[n, m, o].
    With stride 1 a convolution of ȳ with the flipped kernel (flipped_kernel); otherwise per image and group
    a matrix product wᵀ [C/G·K, M/G] · ȳ [M/G, O] (the im2col gradient), whose rows are then folded back
    along each spatial axis, and the pads cropped."""
    k = x_type.rank - 2
    flipped_pads = tuple((w.type.shape[2 + i % k] - 1) * dilations[i % k] - pads[i] for i in range(2 * k))
    if all(s == 1 for s in strides) and min(flipped_pads) >= 0:
        return b.conv(ct, flipped_kernel(b, w, groups), strides=strides, pads=flipped_pads, dilations=dilations,
                      groups=groups)
    n, c = x_type.shape[:2]
    m, cg = w.type.shape[:2]
    taps, outs = tuple(w.type.shape[2:]), ct.type.shape[2:]
    mg = m if groups == 1 else m // groups
    depth = numel((cg,) + taps)
    kern = b.broadcast_to(b.reshape(w, shape=(1, groups, mg, depth)), shape=(n, groups, mg, depth))
    cols = b.einsum(kern, _columns(b, ct, groups), spec="ngmd,ngmp->ngdp")  # [N, G, C/G·K, O]
    y = b.reshape(cols, shape=(n, groups, cg) + taps + tuple(outs))
    order = (0, 1, 2) + tuple(v for i in range(k) for v in (3 + k + i, 3 + i))  # [N, G, C, O1, K1, O2, K2, ...]
    y = b.transpose(y, perm=order)
    for i in range(k):
        padded = dim_add(x_type.shape[2 + i], pads[i] + pads[k + i])
        y = b.fold(y, axis=3 + i, stride=strides[i], dilation=dilations[i], n=padded)
    y = b.reshape(y, shape=(n, c) + y.type.shape[3:])
    for i in range(k):
        if pads[i] or pads[k + i]:
            y = b.slice(y, axis=2 + i, start=pads[i], stop=dim_add(x_type.shape[2 + i], pads[i]))
    return y


def flipped_kernel(b, w, groups: int):
    """The kernel of a stride-1 convolution's input gradient: w [M, C/G, K...] with its channel axes swapped
    within each group and every spatial axis reversed, [C, M/G, K...]. For stride 1, x̄[i] = Σ_t ȳ[i + lo - t·d]·w[t]
    = Σ_t' ȳ[i + t'·d - lo']·w[K-1-t'] with lo' = (K-1)·d - lo: a convolution of ȳ padded by lo' (and hi' alike)."""
    m, cg = w.type.shape[:2]
    taps = tuple(w.type.shape[2:])
    mg = m if groups == 1 else m // groups
    wt = b.reshape(w, shape=(groups, mg, cg) + taps)
    wt = b.transpose(wt, perm=(0, 2, 1) + tuple(range(3, 3 + len(taps))))
    wt = b.reshape(wt, shape=(dim_mul(groups, cg), mg) + taps)
    for i, size in enumerate(taps):
        if size > 1:
            reverse = b.constant(value=Dense.of(np.arange(size - 1, -1, -1, dtype=np.int64)))
            wt = b.gather(wt, reverse, axis=2 + i)
    return wt


def weight_grad(b, x, ct, w_type: Type, strides, pads, dilations, groups):
    """w̄[m, c, t] = Σ_{n, o} x[n, c, o·s + t·d - lo]·ȳ[n, m, o]: per group one matrix product ȳ [M/G, N·O] ·
    im2colᵀ [N·O, C/G·K] over all images at once (both laid out with images and positions merged)."""
    k = x.type.rank - 2
    n, c = x.type.shape[:2]
    m, cg = w_type.shape[:2]
    mg = m if groups == 1 else m // groups
    for i in range(k):
        if pads[i] or pads[k + i]:
            x = b.pad(x, axis=2 + i, lo=pads[i], hi=pads[k + i])
    x = b.reshape(x, shape=(n, groups, cg) + x.type.shape[2:])
    for i in range(k):
        x = b.window(x, axis=3 + 2 * i, size=w_type.shape[2 + i], stride=strides[i], dilation=dilations[i])
    outs = tuple(x.type.shape[3 + 2 * i] for i in range(k))
    depth, positions = numel((cg,) + tuple(w_type.shape[2:])), dim_mul(n, numel(outs))
    order = (1, 2) + tuple(4 + 2 * i for i in range(k)) + (0,) + tuple(3 + 2 * i for i in range(k))
    cols = b.reshape(b.transpose(x, perm=order), shape=(groups, depth, positions))  # [G, C/G·K, N·O]
    g = b.transpose(_columns(b, ct, groups), perm=(1, 2, 0, 3))  # [G, M/G, N, O]
    g = b.reshape(g, shape=(groups, mg, positions))
    return b.reshape(b.einsum(g, cols, spec="gmq,gdq->gmd"), shape=w_type.shape)


def _batch(b, ins, batched, size, strides, pads, dilations, groups):
    x, w = ins
    params = dict(strides=strides, pads=pads, dilations=dilations, groups=groups)
    if not batched[1]:  # lanes of images: more images
        lanes, n = x.type.shape[:2]
        y = b.conv(b.reshape(x, shape=(dim_mul(lanes, n),) + x.type.shape[2:]), w, **params)
        return [b.reshape(y, shape=(lanes, n) + y.type.shape[1:])], [True]
    if not isinstance(size, int):
        return [lane_einsum(b, x, w, batched[0], **params)], [True]
    # lanes of kernels: each lane's channels are groups of their own
    if not batched[0]:
        x = b.broadcast_to(b.reshape(x, shape=(1,) + x.type.shape), shape=(size,) + x.type.shape)
    lanes, n, c = x.type.shape[:3]
    xs = b.reshape(b.transpose(x, perm=(1, 0) + tuple(range(2, x.type.rank))),
                   shape=(n, dim_mul(lanes, c)) + x.type.shape[3:])
    ws = b.reshape(w, shape=(dim_mul(lanes, w.type.shape[1]),) + w.type.shape[2:])
    y = b.conv(xs, ws, **dict(params, groups=lanes * groups))
    m = w.type.shape[1]
    y = b.reshape(y, shape=(n, lanes, m) + y.type.shape[2:])
    return [b.transpose(y, perm=(1, 0) + tuple(range(2, y.type.rank)))], [True]


def lane_einsum(b, x, w, x_batched: bool, strides, pads, dilations, groups):
    """Lanes of kernels w [Z, M, C/G, K...] (Z symbolic) applied to x [Z, N, C, S...] (or one x [N, C, S...]):
    windows of the padded image contracted with each lane's kernel, y [Z, N, M, O...]."""
    z = 1 if x_batched else 0
    k = x.type.rank - 2 - z
    for i in range(k):
        if pads[i] or pads[k + i]:
            x = b.pad(x, axis=z + 2 + i, lo=pads[i], hi=pads[k + i])
    lead = x.type.shape[:z + 1]
    cg = w.type.shape[2]
    x = b.reshape(x, shape=lead + (groups, cg) + x.type.shape[z + 2:])
    for i in range(k):
        x = b.window(x, axis=z + 3 + 2 * i, size=w.type.shape[3 + i], stride=strides[i], dilation=dilations[i])
    lanes, m = w.type.shape[:2]
    mg = m if groups == 1 else m // groups
    kern = b.reshape(w, shape=(lanes, groups, mg, cg) + w.type.shape[3:])
    xl = ("z" if z else "") + "ngc" + "".join(o + t for o, t in zip(OUTS, TAPS[:k]))
    y = b.einsum(x, kern, spec=f"{xl},zgmc{TAPS[:k]}->zngm{OUTS[:k]}")
    return b.reshape(y, shape=y.type.shape[:2] + (m,) + y.type.shape[4:])


def _images_as_rows(eqn) -> bool:
    """Whether a float convolution of one group maps a batch of n images of one position each by a
    kernel of one tap (a squeeze-excite block's fully connected layers, [n, C, 1, 1] -> [n, M, 1, 1]; n symbolic or
    more than 1) of at least IMAGES_AS_ROWS_MIN elements: then it is the matrix product [n, C] · [M, C]ᵀ, which reads
    the kernel once for the n images where ks::conv's dot products
    (few_dots) read it once per image (and transforms/per_row.py leaves a product outside its image loops)."""
    (x, w), (y,) = [a.type for a in eqn.ins], eqn.outs
    p = eqn.params
    return len(eqn.ins) == 2 and x.dtype in ("f32", "f64") and p["groups"] == 1 and x.rank >= 3 and \
        x.shape[0] != 1 and isinstance(x.shape[1], int) and \
        isinstance(w.shape[0], int) and w.shape[0] * x.shape[1] >= IMAGES_AS_ROWS_MIN and \
        all(d == 1 for d in (*x.shape[2:], *w.shape[2:], *y.type.shape[2:]))


# The kernel elements from which _images_as_rows applies: mobilenet_v3_small's and _large's widest squeeze-excite
# FCs (576 x 144, 960 x 240). With every squeeze-excite FC as a product (efficientnet_b0's 96 x 4 to 1152 x 48 too)
# efficientnet_b0 lost 14-23% (compare.py, one run, loaded machine; the cause not found: the image loops cut at
# each of its 16 blocks are the suspect), where mobilenet_v3_small and _large at batch 8 gained 10-13%.
IMAGES_AS_ROWS_MIN = 65536


def _select(b, eqn, ins, backend, threads):
    """A convolve: impl "winograd" where winograd_applies (one thread, or a backend without its own conv), else
    "depthwise" for one group per channel, else "gemm" when the backend has a ks::gemm (Backend.gemm), else "tiles"
    (transforms/select_backend.py says why)."""
    from ..transforms.rewrite import bind_like
    from .convolve import convolve, depthwise_applies, winograd_applies, winograd_kernel
    p = eqn.params
    winograd = winograd_applies(eqn.ins[0].type, eqn.ins[1].type, eqn.outs[0].type, p["strides"], p["dilations"],
                                p["groups"])
    if winograd and (not backend.gemm or threads <= 1):
        (u,) = b.bind(winograd_kernel, [ins[1]], {})
        return bind_like(b, eqn, convolve, [ins[0], u] + list(ins[2:]), dict(p, impl="winograd"))
    if depthwise_applies(eqn.ins[0].type, p["groups"]):
        return bind_like(b, eqn, convolve, ins, dict(p, impl="depthwise"))
    if not backend.gemm and threads <= 1 and _images_as_rows(eqn):
        from .lowering import contract
        (n, c), m = eqn.ins[0].type.shape[:2], eqn.ins[1].type.shape[0]
        x = b.reshape(ins[0], shape=(n, c))
        w = b.reshape(ins[1], shape=(m, c))
        (y,) = b.bind(contract, [x, w], {"spec": "ik,jk->ij", "impl": "tiles", "acc": False})
        return [b.reshape(y, shape=eqn.outs[0].type.shape)]
    return bind_like(b, eqn, convolve, ins, dict(p, impl="gemm" if backend.gemm else "tiles"))


conv = Prim(
    name="conv",
    sign=unsigned,
    nonfinite=finite,
    type_rule=_rule,
    eval=_eval,
    jvp=_jvp,
    transpose=_transpose,
    batch=_batch,
    emit=None,
    select_backend=_select,
    doc="N-d convolution (cross-correlation) with zero padding, strides, dilations and groups",
    opt_outs=("emit: the select_backend pass makes every conv a convolve (prims/convolve.py) or a contract first",),
)
