"""ONNX names as C identifiers.

Codegen spells the hint of a parameter and the name of every symbolic dim verbatim in the generated
C++, so the names an ONNX file gives (graph inputs, initializers, `dim_param`s) must be identifiers
that no C/C++ compiler reads as something else: ASCII, and not a macro of the headers the generated
code includes. C++ keywords in *parameter* hints are left to codegen, which gives such a parameter
another C name and keeps the ONNX name as the Python parameter's name; a dim has no such second
name, so `dim_name` renames keywords itself.
"""
from __future__ import annotations

import re

MACRO_LIKE = re.compile(r"[A-Z][A-Z0-9_]{2,}|[A-Z]_\w*|_[A-Z_]\w*")
"""Names that may be macros of the C/C++ standard headers (and of ATen, for the aten backend).

A fixed list cannot be complete (each C library and compiler defines its own), so a pattern:
- all capitals, digits and underscores, three characters or more: NULL, EOF, NAN, EIO, INT64_MAX,
  M_PI, CHAR_BIT, ATen's C10_.../AT_... One and two characters (N, B, HW: common dim names) are
  kept: no standard header defines such a macro (glibc's, checked with `g++ -dM -E`);
- a capital and an underscore, then anything: glibc's M_PIl, M_El, L_tmpnam, P_tmpdir;
- an underscore and a capital or a second underscore: reserved for the implementation in every
  scope (__linux__, _GNU_SOURCE). A name like `_x` is kept: it is reserved at global scope only.
"""

LOWERCASE_MACROS = frozenset({"errno", "linux", "unix", "i386", "stdin", "stdout", "stderr",
                              "math_errhandling", "sched_priority"})
"""The object-like macros of glibc's headers that the pattern misses (linux, unix, i386 in GNU mode).
Function-like macros (offsetof, alloca) expand only before a '(' and never clash with a name."""


def ascii_name(name: str, prefix: str = "v") -> str:
    """An ONNX name as an ASCII C identifier: other ASCII characters become '_', a non-ASCII one its
    code point (`π` -> `u03c0`), a leading digit gets the prefix."""
    s = "".join(_ascii_char(c) for c in name)
    return s if s and not s[0].isdigit() else f"{prefix}{s}"


def _ascii_char(c: str) -> str:
    if c.isascii():
        return c if c.isalnum() or c == "_" else "_"
    return f"u{ord(c):04x}"


def is_macro_like(name: str) -> bool:
    """True when a standard header may define `name` as a macro (see MACRO_LIKE)."""
    return name in LOWERCASE_MACROS or MACRO_LIKE.fullmatch(name) is not None


def c_name(name: str, prefix: str = "v") -> str:
    """An ONNX name as the hint of an IR parameter: ASCII, prefixed when it may be a macro
    (`INT64_MAX` -> `x_INT64_MAX`; a C++ keyword stays, for codegen to rename)."""
    s = ascii_name(name, prefix)
    return _prefixed(s, prefix) if is_macro_like(s) else s


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
