"""ksbuild: compile Python numeric kernels, their vmap and derivatives, into plain C++ libraries."""
from .dev import Kernel, kernel, vmap
from .errors import KsbuildError
from .resources import VERSION as __version__

__all__ = ["Kernel", "KsbuildError", "build", "kernel", "vmap", "__version__"]


def build(manifest, *, out=None, target="host", quiet=None, backend=None, portable=False):
    """Build a manifest (cached by content hash) and load its exports; see ksbuild.packaging.loader.
    A KsbuildError (an error in the user's files, located) is raised without ksbuild's own frames, and
    ksbuild's warnings point at the caller's line."""
    import warnings

    from .errors import KsbuildWarning
    from .packaging.loader import build as _build

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", KsbuildWarning)
        try:
            pkg = _build(manifest, out=out, target=target, quiet=quiet, backend=backend, portable=portable)
        except KsbuildError as e:
            error = e
        else:
            error = None
    said = set()
    for w in seen:
        if not isinstance(w.message, KsbuildWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
        elif str(w.message) not in said:
            said.add(str(w.message))
            warnings.warn(w.message, stacklevel=2)
    if error is not None:
        raise error.with_traceback(None) from None
    return pkg
