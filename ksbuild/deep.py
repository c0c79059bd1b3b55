"""Room for deep nesting: the compiler's walks over the IR recurse once per level of nesting.

A kernel whose helpers call each other 300 deep, or an if nested in 300 others, nests the IR that
deep (a call or a cond carries its callee or branches as sub-functions), and the printer, verifier,
interpreter, transformations and codegen recurse into sub-functions: a few Python frames a level,
past CPython's default limit of 1000. `deeply` runs such work in a thread with a large stack and
a high recursion limit. (Expression depth does not count: the IR is in A-normal form, and the
front end walks a long chain such as a sum of 5000 terms in a loop.)

The same work builds a large IR of long-lived objects and leaves almost no garbage in cycles, so CPython's
default collector (a young generation of 700 objects) traverses it thousands of times for nothing: a third of
the Python time of a package of 300 nested helpers with their vjp and jvp. `deeply` raises the collector's
thresholds while fn runs (GC_THRESHOLDS) and restores them after.
"""
from __future__ import annotations

import gc
import sys
import threading
from typing import Callable, TypeVar

T = TypeVar("T")
STACK_BYTES = 1 << 30  # reserved, not committed: the pages a deep walk does not reach cost nothing
RECURSION_LIMIT = 200_000
GC_THRESHOLDS = (100_000, 20, 100)  # (CPython's: 700, 10, 10)
_lock = threading.Lock()


def deeply(fn: Callable[..., T], *args, **kwargs) -> T:
    """fn(*args, **kwargs) run with room for deep recursion; its result, or the exception it raised."""
    if getattr(_local, "inside", False):
        return fn(*args, **kwargs)
    box: dict = {}

    def run() -> None:
        _local.inside = True
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001  handed to the caller's thread as it is
            box["error"] = e

    with _lock:
        old_stack, old_limit, old_gc = threading.stack_size(), sys.getrecursionlimit(), gc.get_threshold()
        threading.stack_size(STACK_BYTES)
        sys.setrecursionlimit(max(old_limit, RECURSION_LIMIT))
        if old_gc[0]:  # (0: the caller turned the collector off)
            gc.set_threshold(*map(max, old_gc, GC_THRESHOLDS))
        try:
            worker = threading.Thread(target=run, name="ksbuild-deep")
            worker.start()
            threading.stack_size(old_stack)
            worker.join()
        finally:
            threading.stack_size(old_stack)
            sys.setrecursionlimit(old_limit)
            gc.set_threshold(*old_gc)
    if "error" in box:
        raise box["error"]
    return box["value"]


_local = threading.local()
