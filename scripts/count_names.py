"""How many of the locals and loop counters in a generated C++ source are numbered (t12, sum1, r2, i1), and how
many of its loop nests stand under a comment saying where they come from (`// gmm.py:47: ...`).

    python scripts/count_names.py build/src/gmm.cpp [more.cpp ...]

A name is numbered when it ends in a digit: a generated temporary (t12) or a name taken twice in one scope
(sum1). The rest are the user's names (Qs, n_w, k) or short generated ones (acc, i). Declarations counted:
`const T name =`, `T name;`, `T name[..]`, `T* const name =` (workspace slots) and `for (int64_t name = ...`.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

TYPES = r"(?:double|float|bool|u?int(?:8|16|32|64)_t|ks::\w+|unsigned char|int)"
LOCAL = re.compile(rf"^\s*(?:alignas\(\d+\) )?(?:const )?{TYPES}\*?(?: const)? (\w+)(?: =|;|\[)")
COUNTER = re.compile(r"\bfor \(int64_t (\w+) = ")


def declared_names(cpp: str) -> tuple[list[str], list[str]]:
    """(locals, loop counters) declared in function bodies of the source, one entry per declaration."""
    locals_, counters = [], []
    for line in cpp.splitlines():
        if not line.startswith(" "):  # (a function's signature, a namespace, a constant of the package)
            continue
        counters += COUNTER.findall(line)
        m = LOCAL.match(line)
        if m and "(" not in m.group(1):
            locals_.append(m.group(1))
    return locals_, counters


def numbered(names: list[str]) -> int:
    return sum(1 for n in names if n[-1].isdigit())


def shares(cpp: str) -> dict[str, float]:
    """The counts and numbered shares of locals and loop counters of one source."""
    locals_, counters = declared_names(cpp)
    return {"locals": len(locals_), "numbered_locals": numbered(locals_),
            "local_share": numbered(locals_) / max(1, len(locals_)),
            "counters": len(counters), "numbered_counters": numbered(counters),
            "counter_share": numbered(counters) / max(1, len(counters))}


PREAMBLE = re.compile(rf"^\s*(KS_OMP|KS_SCALAR|\[=\]\(|\(void\)|(const )?{TYPES}\*?( const)? \w+( = .*)?;"
                      r"|\w+(\[\w+\])? = [\w.\-]+;)")
"""Lines that may stand between a loop nest and its comment: declarations (an accumulator, a workspace pointer, a
carry and its initial value, a sum's first element), a pragma, the head of a step's lambda."""


def loop_nests(cpp: str) -> list[tuple[int, bool]]:
    """(line number, whether a comment stands over it) of each loop nest of the source: each `for` loop in no
    other, the comment above it or above the declarations right before it. A nest in the branches of an `if` that
    picks one of two forms of a loop by its length (`if (K >= 32) { vectorized } else { scalar }`) stands under
    the comment over that `if`."""
    lines = cpp.splitlines()

    def under_comment(n: int) -> bool:
        j = n - 1
        while j > 0 and PREAMBLE.match(lines[j]):
            j -= 1
        return lines[j].strip().startswith("// ")

    out, depth, fors, guard = [], 0, [], None  # guard: (the depth of an if outside every loop, its comment)
    for n, line in enumerate(lines):
        code = re.sub(r"//.*", "", line).strip()
        if code.startswith("if (") and not fors and guard is None:
            guard = (depth, under_comment(n))
        if code.startswith("for (") and not fors:
            out.append((n + 1, under_comment(n) or (guard is not None and depth > guard[0] and guard[1])))
        if code.startswith("for ("):
            fors.append(depth)
        depth += code.count("{") - code.count("}")
        while fors and depth <= fors[-1]:
            fors.pop()
        if guard is not None and depth <= guard[0] and not code.startswith("} else"):
            guard = None
    return out


def main(paths: list[str]) -> None:
    for p in paths:
        cpp = Path(p).read_text()
        s, nests = shares(cpp), loop_nests(cpp)
        print(f"{p}: {s['numbered_locals']}/{s['locals']} locals numbered ({s['local_share']:.0%}), "
              f"{s['numbered_counters']}/{s['counters']} loop counters ({s['counter_share']:.0%}), "
              f"{sum(c for _, c in nests)}/{len(nests)} loop nests under a comment")


if __name__ == "__main__":
    main(sys.argv[1:])
