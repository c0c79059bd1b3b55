"""The closed core of primitives. Importing this package registers all of them."""
from . import (  # noqa: F401
    bits,
    constant,
    control,
    conv,
    convolve,
    cteinsum,
    custom,
    elementwise,
    extern,
    gather,
    lanes,
    lowering,
    math_functions,
    pooling,
    qlinear,
    shape,
    tensor,
    trees,
    window,
)
from .base import PRIMS, Prim

__all__ = ["PRIMS", "Prim"]
