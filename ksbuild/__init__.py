"""ksbuild: compile Python numeric kernels, their vmap and derivatives, into plain C++ libraries."""
from .dev import Kernel, kernel, vmap
from .errors import KsbuildError
from .resources import VERSION as __version__

__all__ = ["Kernel", "KsbuildError", "build", "kernel", "vmap", "__version__"]


def build(manifest, *, out=None, target="host", quiet=True, backend=None, portable=False):
    """Build a manifest (cached by content hash) and load its exports; see ksbuild.packaging.loader."""
    from .packaging.loader import build as _build

    return _build(manifest, out=out, target=target, quiet=quiet, backend=backend, portable=portable)
