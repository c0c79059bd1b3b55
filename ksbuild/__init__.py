"""ksbuild: compile Python numeric kernels, their vmap and derivatives, into plain C++ libraries."""
from .custom import custom_jvp, custom_vjp, extern
from .dev import Kernel, elementwise, hessian, jacfwd, jacobian, jacrev, kernel, register, vmap
from .errors import KsbuildError
from .resources import VERSION as __version__

__all__ = ["Kernel", "KsbuildError", "build", "custom_jvp", "custom_vjp", "elementwise", "extern",
           "hessian", "jacfwd", "jacobian", "jacrev", "kernel",
           "load", "register", "vmap", "__version__"]


def build(manifest, *, out=None, target="host", quiet=None, backend=None, portable=False, optimize=None):
    """Build a manifest (cached by content hash) and load its exports; see ksbuild.packaging.loader.
    A KsbuildError (an error in the user's files, located) is raised without ksbuild's own frames, and
    ksbuild's warnings point at the caller's line."""
    import warnings

    from .errors import KsbuildWarning
    from .packaging.loader import build as _build

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", KsbuildWarning)
        try:
            pkg = _build(manifest, out=out, target=target, quiet=quiet, backend=backend, portable=portable,
                         optimize=optimize)
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


def load(path):
    """The package ksbuild.build wrote into folder `path` (its out=), loaded without building: its exports, and,
    with torch imported, its torch ops torch.ops.ksbuild_<name>.* (what torch.export.load of a program calling
    them needs)."""
    from pathlib import Path

    from .packaging.runtime import Package

    root = Path(path)
    shares = sorted(root.glob("share/*/python/*.so"))
    if not shares or not (shares[0].parent.parent / f"{shares[0].parent.parent.name}.json").is_file():
        error = KsbuildError(f"{root} is not a folder that ksbuild.build(..., out=folder) wrote: it has no "
                             "share/<package>/python/ library and description",
                             hint="`ksbuild package` builds for C only; ksbuild.build(manifest, out=folder) also "
                                  "builds the library Python loads")
        raise error.with_traceback(None) from None
    return Package(root, shares[0])
