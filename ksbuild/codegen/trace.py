"""Comments that say where generated code comes from: `// gmm.py:47: <the line>`, `// ONNX node Relu_3 (Relu)`,
`// export.py: node relu (aten.relu.default)` (a torch.export graph's node whose stack trace names no line).

One comment goes before each loop nest (a fused group names every source line it computes), so a reader of
the C++ finds the line of the kernel, or the node of the model, that a loop computes; a later nest of the same
place in the same block says `// gmm.py:92 (continued)`, without the line's text again. File paths are relative
to the manifest's directory, so the generated code does not depend on where the project sits.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from ..errors import Location

MAX_SHOWN = 4   # nodes or lines named in one comment; the rest are counted
MAX_TEXT = 90   # characters of a source line shown


def source_comment(locs: Iterable[Location | None], root: Path | None) -> str | None:
    """The comment (without //) naming where locs are: one line with its text, several lines, or ONNX nodes;
    None when no location is known."""
    known = [loc for loc in locs if loc is not None and (loc.line or loc.node)]
    if not known:
        return None
    if not any(loc.line for loc in known):  # nodes of a model
        nodes = list(dict.fromkeys(loc.node for loc in known))
        shown = ", ".join(_safe(n) for n in nodes[:MAX_SHOWN])
        more = f" and {len(nodes) - MAX_SHOWN} more" if len(nodes) > MAX_SHOWN else ""
        what = f"node{'s' if len(nodes) > 1 else ''} {shown}{more}"
        file = known[0].file
        return f"ONNX {what}" if file.endswith(".onnx") else f"{_relative(file, root)}: {what}"
    known = [loc for loc in known if loc.line]
    by_file: dict[str, list[Location]] = {}
    for loc in known:
        by_file.setdefault(_relative(loc.file, root), []).append(loc)
    if len(by_file) == 1 and len({loc.line for loc in known}) == 1:
        (path, (loc, *_)), = by_file.items()
        text = " ".join((loc.source_line or "").split())
        text = text if len(text) <= MAX_TEXT else text[:MAX_TEXT - 3] + "..."
        return f"{path}:{loc.line}" + (f": {_safe(text)}" if text else "")
    return "; ".join(f"{path}:{_lines(sorted({loc.line for loc in ls}))}" for path, ls in by_file.items())


CONTINUED = " (continued)"


def continued(text: str) -> str:
    """The comment of a later nest of the place `text` names: the place without the source's text (`gmm.py:92
    (continued)`)."""
    text = text.removesuffix(CONTINUED)  # (a third nest says it once, too)
    place = text.split(": ", 1)[0]
    return (place if ".py:" in place else text) + CONTINUED


def _lines(lines: list[int]) -> str:
    shown = ", ".join(map(str, lines[:MAX_SHOWN]))
    return shown + (f" and {len(lines) - MAX_SHOWN} more" if len(lines) > MAX_SHOWN else "")


def _relative(file: str, root: Path | None) -> str:
    """file as a path relative to root, with / separators (the file as it is when it is not a path)."""
    if root is None or file.startswith("<") or not os.path.isabs(file):
        return file.replace(os.sep, "/")
    return os.path.relpath(file, root).replace(os.sep, "/")


def _safe(text: str) -> str:
    """Text that cannot end or escape a // comment: printable ASCII only (a trailing backslash would continue the
    comment onto the next line; ??/ is a trigraph of one)."""
    text = "".join(ch if 32 <= ord(ch) < 127 else "?" for ch in text).replace("??", "?")
    return text.rstrip("\\").rstrip()
