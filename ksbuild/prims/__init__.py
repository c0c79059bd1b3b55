"""The closed core of primitives. Importing this package registers all of them."""
from . import bits, constant, control, conv, convolve, elementwise, gather, lanes, lowering, shape, tensor, window  # noqa: F401
from .base import PRIMS, Prim

__all__ = ["PRIMS", "Prim"]
