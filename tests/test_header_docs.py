"""The header documents each export's arguments by the names of its C parameters (red-team pass: when ksbuild
renamed a parameter, dx -> dx1 for jvp's tangent of a kernel argument named dx, or workspace -> x1, the doc
line kept the kernel's names, so two arguments read `dx`)."""
from __future__ import annotations

import re

from ksbuild.packaging.package import render

KERNELS = '''
def f_dx(x: float, dx: float) -> float:
    return x * dx


def f_ws(x: "float[n]", workspace: float) -> "float[n]":
    return x * workspace
'''

MANIFEST = '''[package]
name = "pdoc"
[kernels.f_dx]
python = "k.py:f_dx"
[kernels.f_ws]
python = "k.py:f_ws"
[exports]
f_dx_jvp = "jvp(f_dx)"
f_ws = "f_ws"
'''


def test_doc_lines_use_the_prototypes_names(tmp_path):
    (tmp_path / "k.py").write_text(KERNELS)
    (tmp_path / "manifest.toml").write_text(MANIFEST)
    render(tmp_path / "manifest.toml", tmp_path / "proj", progress=lambda s: None)
    header = (tmp_path / "proj" / "include" / "pdoc.h").read_text()
    lines = header.splitlines()
    for export in ("f_dx_jvp", "f_ws"):
        k = next(i for i, line in enumerate(lines) if re.match(rf"(int|float) pdoc_{export}\(", line))
        doc = re.match(r"/\*   \((.*)\) -> .*\*/", lines[k - 1])
        assert doc, lines[k - 1]
        documented = [part.split(":")[0].strip() for part in re.split(r", (?![^(]*\))", doc.group(1))]
        prototype = [q.split()[-1].lstrip("*") for q in lines[k][lines[k].index("(") + 1:-2].split(", ")]
        assert all(name in prototype for name in documented), (documented, prototype)
        assert len(set(documented)) == len(documented), documented
    assert "x1: f32 (in Python: workspace)" in header
    # jvp(f_dx)'s tangent of x is dx1 in Python too: dx is the primal argument's name there (both were `dx`)
    assert "dx1: f32," in header and "(in Python: dx)" not in header


def test_parameters_named_like_cxx20_or_c_keywords_are_renamed(tmp_path):
    """A header included by a C++20 or C program must not use `requires`, `concept` or `restrict` as parameter
    names (the kernel's own names for them: the Python API keeps those)."""
    (tmp_path / "k.py").write_text("def f(requires: float, concept: float, restrict: float) -> float:\n"
                                   "    return requires * concept + restrict\n")
    (tmp_path / "manifest.toml").write_text('[package]\nname = "kw20"\n[kernels.f]\npython = "k.py:f"\n'
                                            '[exports]\nf = "f"\n')
    render(tmp_path / "manifest.toml", tmp_path / "proj", progress=lambda s: None)
    header = (tmp_path / "proj" / "include" / "kw20.h").read_text()
    prototype = next(line for line in header.splitlines() if line.startswith("float kw20_f("))
    assert not re.search(r"\b(requires|concept|restrict)\b", prototype), prototype
