"""The scratch of each kernel-layer call, in elements, known when the package is built.

A call of ks::conv, ks::conv_rows, ks::conv_winograd, ks::conv_depthwise, ks::tiled_gemm, ks::qconv,
ks::qconv_depthwise or ks::qmatmul works in scratch while it runs (a packed kernel, a padded image, im2col
blocks, transformed tiles, a channel's copy). The prims' `scratch` rules say how many bytes a call of static
sizes needs, and the memory plan (transforms/plan_memory.py) gives it those bytes of the workspace arena for that
call alone, beside the activations live at the time. Each size below is the prelude's C++ constant expression (the
function named in its docstring) written again in Python, for the register tiles of one instruction set level
(`Tiles`); a package takes the largest over the levels it is built for. The generated code static_asserts that the
C++ size fits the bytes planned, and tests/test_memory_arena.py checks the two equal, call by call and level by
level, so that the two cannot drift apart.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..ir.types import Type


@dataclass(frozen=True)
class Tiles:
    """What the prelude's scratch sizes depend on at one instruction set level (ks/gemm.h's tiles namespace)."""

    vector_bytes: int             # tiles::vector_bytes (0: no vector unit, one lane)
    row_block: int                # tiles::row_block: the rows of a register tile
    k_block: int = 1024           # tiles::k_block (KS_GEMM_KC)
    panels_per_block: int = 4     # tiles::panels_per_block (KS_GEMM_NCP)
    winograd_panels: int = 4      # KS_WINOGRAD_PANELS


X86_64_TILES = {"x86-64": Tiles(16, 3), "x86-64-v3": Tiles(32, 6), "x86-64-v4": Tiles(64, 8)}
"""The tiles of the x86-64 levels a portable build compiles (compile/targets.py: X86_64_LEVELS)."""
AARCH64_TILES = Tiles(16, 6)
ONE_LANE = Tiles(0, 1)
ALL_TILES = (*X86_64_TILES.values(), AARCH64_TILES, ONE_LANE)


def target_tiles(target, cpu: str = "", several: bool = True) -> tuple[Tiles, ...]:
    """The tiles of every level a package for `target` (compile/targets.py: Target) may run: on x86-64 the level
    [build] cpu names (native: this machine's), the baseline's when the build compiles one level (`several` False:
    optimize = "size", a backend without cpu variants), else all three (a portable build dispatches among them);
    Arm's NEON tiles on aarch64; one lane without vectors (Cortex-M, RISC-V: no vector unit the prelude uses);
    every kind elsewhere."""
    if target.processor in ("x86_64", "AMD64"):
        if cpu == "native" and not target.cross:
            from ..compile.targets import host_level
            cpu = host_level()
        cpu = cpu or ("" if several else "x86-64")
        return (X86_64_TILES[cpu],) if cpu in X86_64_TILES else tuple(X86_64_TILES.values())
    if target.processor == "aarch64":
        return (AARCH64_TILES,)
    if not target.vectors or target.processor == "riscv64":
        return (ONE_LANE,)
    return ALL_TILES


# ---- the geometry of a convolution (ks::conv_shape) -------------------------------------------------------------

@dataclass(frozen=True)
class ConvShape:
    """ks::conv_shape with literal sizes: spatial axes padded in front to three."""

    channels: int
    out_channels: int
    groups: int
    inp: tuple[int, int, int]
    out: tuple[int, int, int]
    kernel: tuple[int, int, int]
    stride: tuple[int, int, int]
    dilation: tuple[int, int, int]
    pad: tuple[int, int, int]

    def taps(self) -> int:
        return math.prod(self.kernel)

    def depth(self) -> int:
        return self.channels // self.groups * self.taps()

    def positions(self) -> int:
        return math.prod(self.out)


def conv_geometry(x: Type, kernel: Type, y: Type, params) -> ConvShape | None:
    """The ConvShape of a convolution of x with a kernel of type `kernel` ([M, C/G, K...]) into y, None when a size
    other than the batch is symbolic (as prims/convolve.py's conv_shape writes it in C++)."""
    k = x.rank - 2
    lead = 3 - k

    def triple(values, fill) -> tuple:
        return (fill,) * lead + tuple(values)

    fields = (x.shape[1], kernel.shape[0], params["groups"], triple(x.shape[2:], 1), triple(y.shape[2:], 1),
              triple(kernel.shape[2:], 1), triple(params["strides"], 1), triple(params["dilations"], 1),
              triple(params["pads"][:k], 0))
    flat = [fields[0], fields[1], fields[2], *[d for t in fields[3:] for d in t]]
    return ConvShape(*fields) if all(isinstance(d, int) for d in flat) else None


def _aligned(count: int) -> int:
    """convs::aligned: elements rounded up to a multiple of 16."""
    return (count + 15) // 16 * 16


def _extent(s: ConvShape, a: int) -> int:
    return (s.out[a] - 1) * s.stride[a] + (s.kernel[a] - 1) * s.dilation[a] + 1


def _panel(size: int) -> int:
    """panel_width<T>: the columns of a panel, a cache line of T."""
    return 64 // size


def _lanes(size: int, t: Tiles) -> int:
    """tiles::simd<T>::lanes."""
    return (t.vector_bytes or size) // size


def _k_step(k: int, t: Tiles) -> int:
    blocks = -(-k // t.k_block)
    return (k + blocks - 1) // blocks if blocks > 1 else k


# ---- ks::conv and ks::conv_rows (prelude/ks/conv.h) ----------------------------------------------------------------

CONV_PLAN_BYTES = 208
"""sizeof(convs::conv_plan): a conv_shape (21 int64), a bool padded to 8 bytes, 4 int64."""


def _copies_image(s: ConvShape, size: int, t: Tiles) -> bool:
    pads = any(s.pad[a] > 0 or _extent(s, a) - s.pad[a] > s.inp[a] for a in range(3))
    return pads or (_direct(s, size, t) and s.out[2] % _panel(size) != 0) or _phased(s, size) or \
        _flattened(s, size, t) or _split_packed(s, size, t)


def _split_rows(s: ConvShape) -> bool:
    """convs::split_rows: im2col rows copied from the image split into its stride phases (2-d, stride 2 × 2)."""
    fits = s.channels * 4 * (-(-_extent(s, 1) // 2) + 1) * (-(-_extent(s, 2) // 2) + 1) < 1 << 30
    return s.out[0] == 1 and s.inp[0] == 1 and s.kernel[0] == 1 and s.pad[0] == 0 and s.stride[1] == 2 and \
        s.stride[2] == 2 and s.dilation[1] == 1 and s.dilation[2] == 1 and s.kernel[1] >= 2 and s.kernel[2] >= 2 and \
        fits


def _split_packed(s: ConvShape, size: int, t: Tiles) -> bool:
    """convs::split_packed<T>: the panels method's blocks packed from the image split into its stride phases."""
    return s.groups == 1 and _split_rows(s) and not _few_positions(s) and not _chunked(s, size, t)


def _phased(s: ConvShape, size: int) -> bool:
    """convs::phased<T>: a strided 2-d convolution read from the image split into its stride phases."""
    fits = s.channels * s.stride[1] * s.stride[2] * (_extent(s, 1) // s.stride[1] + 1) * \
        (_extent(s, 2) // s.stride[2] + 1) < 1 << 30
    return s.groups == 1 and s.out[0] == 1 and s.inp[0] == 1 and s.kernel[0] == 1 and s.pad[0] == 0 and \
        s.stride[2] > 1 and s.dilation[1] == 1 and s.dilation[2] == 1 and s.out[2] >= 4 * _panel(size) and \
        s.kernel[1] >= s.stride[1] and s.kernel[2] >= s.stride[2] and fits


def _flat_positions(s: ConvShape) -> int:
    """convs::flat_positions: the output rows phase_cols apart."""
    return (s.out[1] - 1) * -(-_extent(s, 2) // s.stride[2]) + s.out[2]


def _flat_split(s: ConvShape) -> bool:
    return s.stride[1] > 1 or s.stride[2] > 1


def _flattened(s: ConvShape, size: int, t: Tiles) -> bool:
    """convs::flattened<T>: a 2-d convolution over output rows as wide as the padded (or phase) rows."""
    p, n = _panel(size), s.positions()
    taps = not _flat_split(s) or (s.dilation[1] == 1 and s.dilation[2] == 1 and s.kernel[1] >= s.stride[1] and
                                  s.kernel[2] >= s.stride[2])
    fits = s.channels * s.stride[1] * s.stride[2] * (-(-_extent(s, 1) // s.stride[1]) + 1) * \
        (-(-_extent(s, 2) // s.stride[2]) + 1) < 1 << 30
    return s.out[0] == 1 and s.inp[0] == 1 and s.kernel[0] == 1 and s.pad[0] == 0 and not _few_positions(s) and \
        s.groups > 1 and s.out_channels // s.groups <= 64 and s.depth() <= t.k_block and \
        not _direct(s, size, t) and not _phased(s, size) and not _chunked(s, size, t) and taps and \
        4 * -(-_flat_positions(s) // p) <= 5 * -(-n // p) and fits


def _phase_planes(s: ConvShape) -> int:
    """The elements of one channel's phase planes: stride_h · stride_w planes of phase_rows × phase_cols."""
    return s.stride[1] * s.stride[2] * -(-_extent(s, 1) // s.stride[1]) * -(-_extent(s, 2) // s.stride[2])


def _chunked(s: ConvShape, size: int, t: Tiles) -> bool:
    """convs::chunked<T>: im2col by chunks of input channels (a kernel over two chunks of 512 KB)."""
    return not _few_positions(s) and not _direct(s, size, t) and s.groups == 1 and \
        s.positions() <= t.panels_per_block * _panel(size) and \
        s.out_channels * s.depth() * size > 2 * 512 * 1024 and _k_step(s.depth(), t) >= s.taps()


def _crowded(s: ConvShape, size: int, t: Tiles) -> bool:
    """convs::crowded<T>: a pointwise convolution whose planes' first lines share few of the L1 cache's sets."""
    plane = math.prod(s.inp) * size
    low = plane & -plane
    return t.vector_bytes >= 32 and size == 4 and s.groups == 1 and math.prod(s.kernel) == 1 and plane >= 4096 and \
        low <= 256 and s.channels * low > 4 * 4096


def _direct(s: ConvShape, size: int, t: Tiles) -> bool:
    return s.stride[2] == 1 and 2 * s.out[2] >= _panel(size) and s.channels * math.prod(s.inp) < 1 << 30 and \
        not _crowded(s, size, t)


def _padded_size(s: ConvShape, size: int, t: Tiles) -> int:
    if not _copies_image(s, size, t):
        return 0
    plain = s.channels * _extent(s, 0) * _extent(s, 1) * _extent(s, 2)
    planes = s.channels * _phase_planes(s)
    split = _phased(s, size) or (_flattened(s, size, t) and _flat_split(s)) or _split_packed(s, size, t)
    return (planes if split and planes > plain else plain) + _panel(size)


def _block_columns(s: ConvShape, size: int, t: Tiles) -> int:
    p = _panel(size)
    block = t.panels_per_block * p
    return -(-s.positions() // p) * p if s.positions() < block else block


def _chunks_room(size: int, t: Tiles) -> int:
    """convs::chunks_room<T>: the elements of a chunks<T> (an int64 count and three arrays of `most` int64)."""
    most = 2 * t.panels_per_block * _panel(size)
    return _aligned(-(-(8 + 3 * most * 8) // size))


def _canonical(s: ConvShape) -> ConvShape:
    """convs::canonical: a pointwise convolution as one of images of one row."""
    if any(s.kernel[a] != 1 or s.stride[a] != 1 or s.pad[a] != 0 or s.out[a] != s.inp[a] for a in range(3)):
        return s
    n = s.positions()
    return replace(s, inp=(1, 1, n), out=(1, 1, n), dilation=(1, 1, 1))


def _tiles_room(s: ConvShape, size: int, t: Tiles, packs: bool = True) -> int:
    """convs::tiles_room<T>."""
    mg = s.out_channels // s.groups
    packed = s.groups * -(-mg // t.row_block) * t.row_block * s.depth() if packs else 0
    panels = _k_step(s.depth(), t) * _block_columns(s, size, t)
    rest = _aligned(s.depth()) if _direct(s, size, t) or (_phased(s, size) and _aligned(s.depth()) > panels) else panels
    if _flattened(s, size, t):  # (the offsets, then a block of results of a group)
        rest = max(_aligned(s.depth()) + _aligned(mg * t.panels_per_block * _panel(size)), panels)
    columns = s.positions() * s.depth() if _few_positions(s) else 0
    tails = _aligned(s.out_channels * _panel(size)) if _chunked(s, size, t) else 0  # (convs::tails_room)
    return _aligned(-(-CONV_PLAN_BYTES // size)) + _aligned(packed) + _aligned(_padded_size(s, size, t)) + \
        _aligned(max(rest, columns)) + tails + _chunks_room(size, t)


def _few_positions(s: ConvShape) -> bool:
    return s.positions() <= 2 * 4  # (2·tiles::dot_block)


def _packs_kernel(given: ConvShape, images: int, size: int, t: Tiles) -> bool:
    """convs::packs_kernel<T>: the tiles read the kernel more than once (kernel_passes of the run shape)."""
    s = _canonical(given)
    if _copies_image(s, size, t):
        s = replace(s, inp=tuple(_extent(s, a) for a in range(3)), pad=(0, 0, 0))
    if images <= 0:
        return True
    if _few_positions(s) or _chunked(s, size, t):  # (convs::method_for: few, chunks: the kernel read as it is)
        return False
    if _phased(s, size):
        s = replace(s, inp=(1, -(-_extent(s, 1) // s.stride[1]), -(-_extent(s, 2) // s.stride[2])),
                    stride=(1, 1, 1), pad=(0, 0, 0))
    elif _flattened(s, size, t):
        return images * -(-_flat_positions(s) // (t.panels_per_block * _panel(size))) > 1
    return _kernel_passes(s, images, size, t) > 1


def _kernel_passes(s: ConvShape, images: int, size: int, t: Tiles) -> int:
    """convs::kernel_passes<T>: how often the tiles read the kernel over `images` images."""
    p, block = _panel(size), t.panels_per_block * _panel(size)
    if not _direct(s, size, t):
        return images * -(-s.positions() // block)
    per_plane = -(-s.out[1] // t.panels_per_block) if s.out[2] <= p else s.out[1] * -(-s.out[2] // block)
    return images * s.out[0] * per_plane


def conv_scratch(s: ConvShape, size: int, t: Tiles, rows: bool = False, images: int = 0) -> int:
    """ks::conv_scratch<T>(s, rows, images): ks::conv's (or, rows, ks::conv_rows') elements of T (`size` bytes each);
    images > 0: ks::conv_as's over that many images, without room for a kernel its method does not pack."""
    if rows:
        return _aligned(_padded_size(s, size, t)) + _aligned(s.depth() * _block_columns(s, size, t)) + \
            _chunks_room(size, t)
    return _tiles_room(_canonical(s), size, t, _packs_kernel(s, images, size, t))


def winograd_scratch(s: ConvShape, size: int, t: Tiles) -> int:
    """ks::winograd_scratch<T>(s): the split image, then a block of transformed tiles ([16][C][run]) and their
    products ([M][row])."""
    lanes = _lanes(size, t)
    run = t.winograd_panels * _panel(size) + lanes
    rows, row = (s.out[1] + 1) // 2 * 2 + 2, (s.out[2] + 1) // 2 * 2 + 2
    products = s.out_channels * (16 * run + _panel(size))
    return _aligned(s.channels * rows * row + lanes) + 16 * run * s.channels + products


DEPTHWISE_RUN = 4           # depthwise::run_vectors
ACROSS_POSITIONS = 3136     # depthwise::across_positions
ACROSS_BAND = 1792          # depthwise::across_band


def depthwise_scratch(s: ConvShape, size: int, t: Tiles) -> int:
    """ks::depthwise_scratch<T>(s): a channel's copy, a flat plane's sums and the taps' offsets, or the planes of
    16 channels across (the larger where a plane is small enough for that)."""
    lanes = _lanes(size, t)
    places = s.out[2] + (s.kernel[2] - 1) * s.dilation[2] // s.stride[2]
    rows = s.out[1] + (s.kernel[1] - 1) * s.dilation[1] // s.stride[1]
    flat = s.out[2] % lanes != 0 or s.out[2] < DEPTHWISE_RUN * lanes
    copy = _aligned(_extent(s, 0) * s.stride[1] * s.stride[2] * rows * places + DEPTHWISE_RUN * lanes)
    sums = _aligned(rows * places + DEPTHWISE_RUN * lanes) if flat else 0
    copied = copy + sums + -(-s.taps() * 8 // size)
    small = s.out[1] * s.out[2] <= ACROSS_POSITIONS
    fits = s.kernel[0] == 1 and s.inp[0] == 1 and s.out[0] == 1 and s.out_channels == s.channels and \
        (small or s.channels >= 8)  # (depthwise::across_fits: larger planes in bands, with 8 channels or more)
    band = s.out[1] if small else ACROSS_BAND // s.out[2] if s.out[2] < ACROSS_BAND else 1
    extent = (band - 1) * s.stride[1] + (s.kernel[1] - 1) * s.dilation[1] + 1  # (depthwise::band_extent)
    across = 16 * (extent * _extent(s, 2) + band * s.out[2] + s.taps() + 1)
    return across if fits and across > copied else copied


# ---- ks::tiled_gemm (prelude/ks/gemm.h) and parts (prelude/ks/parts.h) ---------------------------------------------

def pointwise_scratch(s: ConvShape, size: int, t: Tiles) -> int:
    """ks::pointwise_scratch<T>(s): the transposed result of two panels of output channels; with a window
    (convs::windowed), a block's channels padded, its im2col rows for a group of images, their transposed result and
    (float on AVX2) the rows again as row tiles."""
    windowed = s.taps() > 1 or math.prod(s.stride) > 1 or sum(s.pad) > 0 or s.out != s.inp
    tiles_of = size == 4 and t.vector_bytes == 32  # (convs::window_tiles: float on AVX2)
    if not windowed:  # (and the image transposed: convs::pointwise_rows)
        return _aligned(s.positions() * 2 * _panel(size)) + (_aligned(s.positions() * s.channels) if tiles_of else 0)
    cc = max(1, min(s.channels, 512 * 1024 // (s.out_channels * s.taps() * size)))  # (convs::window_channels)
    rows = max(1, 256 // s.positions()) * s.positions()  # (convs::window_images)
    plain = cc * _extent(s, 0) * _extent(s, 1) * _extent(s, 2)
    planes = cc * 4 * -(-_extent(s, 1) // 2) * -(-_extent(s, 2) // 2) if _split_rows(s) else 0
    padded = max(plain, planes) + _panel(size)  # (convs::window_padded: the channels padded or split)
    width = -(-s.out_channels // _panel(size)) * _panel(size)
    tiled = -(-rows // t.row_block) * t.row_block * cc * s.taps() if tiles_of else 0
    return _aligned(padded) + _aligned(cc * s.taps() * rows) + _aligned(rows * width) + _aligned(tiled) + \
        _chunks_room(size, t)  # (tiled: convs::window_tiled, float on AVX2)


def dots_scratch(s: ConvShape) -> int:
    """ks::convs::dots_scratch: a window's offsets, the identity offsets of a gathered window (int32 each) and one
    gathered window, each rounded up to 16 elements."""
    return 3 * _aligned(s.depth())


def _packed_blocks(m: int, n: int, k: int, size: int, t: Tiles) -> int:
    """tiles::scratch_for<T>(m, n, k)."""
    p = _panel(size)
    nc = t.panels_per_block * p
    cols = -(-n // p) * p if n < nc else nc
    return _k_step(k, t) * cols if t.vector_bytes > 0 and m >= t.row_block and n > 0 and k > 0 else 0


def tiled_gemm_scratch(m: int, n: int, k: int, size: int, t: Tiles) -> int:
    """ks::tiled_gemm_scratch<T>(m, n, k): b's panels, in either orientation."""
    return max(_packed_blocks(m, n, k, size, t), _packed_blocks(n, m, k, size, t))


def parts_room(parts: int, elements: int) -> int:
    """ks::parts::room(parts, elements): a 64-byte aligned slice per part."""
    return parts * _aligned(elements)


def max_pool_scratch(h: int, w: int, oh: int, ow: int, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int,
                     ph: int, pw: int) -> int:
    """ks::max_pool_scratch<T>(pool_shape) (prelude/ks/maxpool.h): one padded row of the windows of an output row."""
    return (ow - 1) * sw + (kw - 1) * dw + 1


# ---- ks::qconv, ks::qconv_depthwise, ks::qmatmul (prelude/ks/qconv.h): bytes -----------------------------------

Q_ROWS, Q_COLS, Q_DEPTHWISE_CHUNK = 8, 32, 512  # qtile::rows, cols, depthwise_chunk


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def _q_packed(n: int, depth: int, width: int) -> int:
    """qtile::packed_size."""
    return _round_up(_round_up(n, width) * -(-depth // 4) * 4, 64)


def _wide(s: ConvShape) -> tuple[tuple[int, ...], int, int, int]:
    """qtile::wide_of: (the phase volume's sides, its volume, the phases, the wide positions)."""
    side = tuple(-(-_extent(s, a) // s.stride[a]) for a in range(3))
    wide = ((s.out[0] - 1) * side[1] + s.out[1] - 1) * side[2] + s.out[2]
    return side, math.prod(side), math.prod(s.stride), wide


def _phases_size(s: ConvShape, count: int) -> int:
    _, volume, phases, _ = _wide(s)
    return _round_up(phases * count * volume, 64)


def qconv_scratch(s: ConvShape) -> int:
    """ks::qconv_scratch(s) bytes (qtile::qconv_room)."""
    side, _, _, wide = _wide(s)
    m, cg = s.out_channels // s.groups, s.channels // s.groups
    dense = side[2] == s.out[2] and (s.out[0] == 1 or side[1] == s.out[1])
    wide_bytes = 0 if dense else _round_up(m, Q_ROWS) * _round_up(wide, Q_COLS)
    direct = s.pad == (0, 0, 0) and s.stride == (1, 1, 1)
    return _round_up(m * 4, 64) + Q_ROWS * Q_COLS * 4 + _q_packed(Q_COLS, s.depth(), Q_COLS) + \
        _round_up(s.depth() * 4, 64) + (0 if direct else _phases_size(s, cg)) + _round_up(wide_bytes, 64)


def qconv_depthwise_scratch(s: ConvShape) -> int:
    """ks::qconv_depthwise_scratch(s) bytes (qtile::planes_scratch)."""
    _, volume, phases, wide = _wide(s)
    batch = min(max(16384 // max(phases * volume, 1), 1), 64)  # (qtile::depthwise_batch)
    return _phases_size(s, batch) + 128 + _round_up(s.taps() * 4, 64) + Q_DEPTHWISE_CHUNK * 4 + _round_up(wide, 64)


def qmatmul_scratch(depth: int, n: int) -> int:
    """ks::qmatmul_scratch(depth, n) bytes: the offsets, a block of rows, the sums' room."""
    return _round_up(n * 4, 64) + _q_packed(Q_ROWS, depth, Q_ROWS) + Q_ROWS * Q_COLS * 4


def most_bytes(elements, size: int, tiles) -> int:
    """The bytes of the most elements (of `size` bytes) elements(t) gives over the levels' tiles."""
    return max(elements(t) for t in tiles) * size

