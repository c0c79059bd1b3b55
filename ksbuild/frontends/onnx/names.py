"""ONNX names as C identifiers.

Codegen spells the hint of a parameter and the name of every symbolic dim verbatim in the generated
C++, so the names an ONNX file gives (graph inputs, initializers, `dim_param`s) must be identifiers
that no C/C++ compiler reads as something else: ASCII, and not a macro of the headers the generated
code includes. C++ keywords in *parameter* hints are left to codegen, which gives such a parameter
another C name and keeps the ONNX name as the Python parameter's name; a dim has no such second
name, so `dim_name` renames keywords itself.
"""
from __future__ import annotations

from ...codegen.cpp import is_macro_like  # noqa: F401 (the ONNX names use it, and so do callers)


def ascii_name(name: str, prefix: str = "v") -> str:
    """An ONNX name as an ASCII C identifier: other ASCII characters become '_', a non-ASCII one its
    code point (`π` -> `u03c0`), a leading digit gets the prefix."""
    s = "".join(_ascii_char(c) for c in name)
    return s if s and not s[0].isdigit() else f"{prefix}{s}"


def _ascii_char(c: str) -> str:
    if c.isascii():
        return c if c.isalnum() or c == "_" else "_"
    return f"u{ord(c):04x}"


def c_name(name: str, prefix: str = "v") -> str:
    """An ONNX name as the hint of an IR parameter: ASCII, prefixed when it may be a macro
    (`INT64_MAX` -> `x_INT64_MAX`; a C++ keyword stays, for codegen to rename)."""
    s = ascii_name(name, prefix)
    return _prefixed(s, prefix) if is_macro_like(s) else s


def value_hint(name: str) -> str:
    """A node output's name as the hint of its value (the generated C++ names it so): ASCII, without an exporter's
    path and `_output_0` (`/conv1/Conv_output_0` -> `conv1_Conv`); "" for a name that is only a number."""
    import re
    s = re.sub(r"_+", "_", ascii_name(re.sub(r"_output_0$", "", name), "")).strip("_")
    return s if s.isidentifier() and not s[0].isdigit() else ""


def dim_name(name: str, taken: set[str]) -> str:
    """A `dim_param` as the name of a symbolic dim: ASCII, prefixed with `d` when it is a C++ keyword or
    may be a macro (`new` -> `d_new`, `NULL` -> `d_NULL`), and not one of the names `taken` by other
    dims (`a.b` and `a_b` are two dims: `a_b` and `a_b2`)."""
    from ...codegen.viewmodel import C_KEYWORDS
    s = ascii_name(name, "d")
    if s in C_KEYWORDS or is_macro_like(s):
        s = _prefixed(s, "d")
    base, k = s, 1
    while s in taken:
        k += 1
        s = f"{base}{k}"
    return s


def _prefixed(s: str, prefix: str) -> str:
    return f"{prefix}{s}" if s.startswith("_") else f"{prefix}_{s}"
