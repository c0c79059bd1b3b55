"""The closed core of primitives. Importing this package registers all of them."""
from . import control, elementwise, lanes, lowering, shape, tensor  # noqa: F401
from .base import PRIMS, Prim

__all__ = ["PRIMS", "Prim"]
