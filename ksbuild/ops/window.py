"""Helpers about sliding windows shared by ops (the prim is prims/window.py)."""
from __future__ import annotations


def window_count_of(n: int, size: int, stride: int, dilation: int) -> int:
    """How many windows of `size` taps (spaced by dilation, moved by stride) fit in n."""
    return (n - dilation * (size - 1) - 1) // stride + 1
