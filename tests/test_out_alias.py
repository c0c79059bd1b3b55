"""`out=` arrays that share memory with inputs, and the C ABI's aliasing rule (issue 32).

`pkg.tr(S, out=S)` used to return a half-transposed S, and a cumsum into a shifted view of its own
input garbage. The Python API now follows numpy's ufunc rule (results as if nothing overlapped: the
call writes a new array and copies it into out=), except where the header says an output may be an
input itself (codegen/aliasing.py): then the C call runs in place. The oracle is numpy on the same
values; a C program checks every in-place call the header allows. (tests/test_inplace_alias.py is
about the generated code's own buffers, not the caller's.)
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess

import numpy as np
import pytest
from conftest import build_kernel_file

from ksbuild.packaging import runtime

KERNELS = '''
import torch


def tr(S: "float[n, n]") -> "float[n, n]":
    return S.T


def mm(A: "float[n, n]", B: "float[n, n]") -> "float[n, n]":
    return A @ B


def cs(x: "float[n]") -> "float[n]":
    return torch.cumsum(x, dim=0)


def axpy(a: float, x: "float[n]", y: "float[n]") -> "float[n]":
    return a * x + y


def relu3(x: float) -> float:
    if x < 0.0:
        return 0.0
    elif x < 1.0:
        return x ** 3 / 3.0
    return x - 2.0 / 3.0


def scale_sum(x: "float[n]") -> "float[n]":
    return x / torch.sum(x)


def two(x: "float[n]", y: "float[n]"):
    return x + y, x * y


def bias(X: "float[b, n]", v: "float[n]") -> "float[b, n]":
    return torch.tanh(X + v)
'''

EXPORTS = {"tr": "tr", "mm": "mm", "cs": "cs", "axpy": "axpy", "vrelu3": "vmap(relu3)",
           "vrelu3_vjp": "vjp(vmap(relu3))", "vrelu3_jvp": "jvp(vmap(relu3))", "scale_sum": "scale_sum",
           "two": "two", "bias": "bias"}

IN_PLACE = {"axpy": ["x", "y"], "vrelu3": ["x"], "vrelu3_vjp": ["x", "ct"], "vrelu3_jvp": ["x", "dx"],
            "bias": ["X"]}
"""What codegen/aliasing.py allows: one loop nest of elementwise steps, an input of the output's type."""


def relu3(x):
    return np.where(x < 0, 0.0, np.where(x < 1, x ** 3 / 3, x - 2 / 3))


def relu3_d(x):
    return np.where(x < 0, 0.0, np.where(x < 1, x ** 2, 1.0))


ORACLES = {  # numpy, by the export's C input names (a scalar `a` is 2.5 in the C program)
    "tr": lambda S: S.T, "mm": lambda A, B: A @ B, "cs": np.cumsum, "axpy": lambda a, x, y: a * x + y,
    "vrelu3": relu3, "vrelu3_vjp": lambda x, ct: relu3_d(x) * ct, "vrelu3_jvp": lambda x, dx: relu3_d(x) * dx,
    "scale_sum": lambda x: x / x.sum(), "bias": lambda X, v: np.tanh(X + v),
}


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    root = tmp_path_factory.mktemp("out_alias")
    manifest = '[package]\nname = "oal"\n[build]\ndtype = "float64"\n[kernels]\n'
    manifest += "".join(f'{k} = {{ python = "k.py:{k}" }}\n' for k in ["relu3"] + [e for e in EXPORTS if
                                                                               EXPORTS[e] == e])
    manifest += "[exports]\n" + "".join(f'{e} = "{x}"\n' for e, x in EXPORTS.items())
    return build_kernel_file(root, KERNELS, manifest, "out_alias_kernels")[0]


def rand(*shape, seed=0):
    return np.random.default_rng(seed).uniform(-1.5, 1.5, shape)


# ---- the Python API ------------------------------------------------------------------------------------------

def test_transpose_into_its_own_input(pkg):
    for _ in range(2):  # full path, then fast path
        S = rand(5, 5)
        want = S.T.copy()
        got = pkg.tr(S, out=S)
        assert got is S
        np.testing.assert_array_equal(S, want)


@pytest.mark.parametrize("which", ["A", "B"])
def test_matrix_product_into_an_operand(pkg, which):
    for _ in range(2):
        A, B = rand(37, 37), rand(37, 37, seed=1)
        want = A @ B
        out = A if which == "A" else B
        assert pkg.mm(A, B, out=out) is out
        np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)
    A = rand(37, 37)
    want = A @ A
    np.testing.assert_allclose(pkg.mm(A, A, out=A), want, rtol=1e-12)


@pytest.mark.parametrize("shift", [1, -1, 3])
def test_cumsum_into_a_shifted_view_of_its_input(pkg, shift):
    for _ in range(2):
        buf = rand(40)
        n = 40 - abs(shift)
        src, dst = (buf[:n], buf[shift:]) if shift > 0 else (buf[-shift:], buf[:n])
        want = np.cumsum(src)
        pkg.cs(src, out=dst)
        np.testing.assert_allclose(dst, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shift", [1, -1])
def test_elementwise_into_a_shifted_view_copies(pkg, shift):
    """In place is allowed for the very same buffer only: a shifted view overlaps other elements."""
    buf, y = rand(41), rand(40, seed=2)
    src, dst = (buf[:40], buf[1:]) if shift > 0 else (buf[1:], buf[:40])
    want = 2.5 * src + y
    pkg.axpy(2.5, src, y, out=dst)
    np.testing.assert_allclose(dst, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", sorted(IN_PLACE))
def test_in_place_where_the_header_allows_it_writes_no_temporary(pkg, name, monkeypatch):
    export = getattr(pkg, name)
    args = {"axpy": (2.5, rand(300), rand(300, seed=1)), "bias": (rand(7, 9), rand(9, seed=1))}.get(
        name, tuple(rand(300, seed=k) for k in range(len(export.ins))))
    want = ORACLES[name](*args)
    monkeypatch.setattr(runtime.np, "empty_like", _no_temporary)
    for k, a in enumerate(export.ins):
        if a["name"] not in IN_PLACE[name]:
            continue
        for _ in range(2):  # full path, then fast path
            mine = tuple(np.copy(x) for x in args)
            assert export(*mine, out=mine[k]) is mine[k]
            np.testing.assert_allclose(mine[k], want, rtol=1e-12, atol=1e-12)


def _no_temporary(*args, **kwargs):
    raise AssertionError("an in-place call the header allows made a temporary")


def test_in_place_takes_the_fast_path_and_overlap_the_full_one(pkg, monkeypatch):
    """A repeated call with out= the very input of an in-place export stays on the fast path; an overlap that must
    be computed apart leaves it for the full path."""
    x, S = rand(50), rand(4, 4)
    pkg.vrelu3(x), pkg.tr(S)  # (their shapes' plans)
    full = []
    for export in (pkg.vrelu3, pkg.tr):
        monkeypatch.setattr(export, "call_numpy", lambda *a, f=export.call_numpy, **k: full.append(f) or f(*a, **k))
    want = relu3(x)
    assert pkg.vrelu3(x, out=x) is x and not full
    np.testing.assert_allclose(x, want, rtol=1e-12)
    want = S.T.copy()
    pkg.tr(S, out=S)
    assert len(full) == 1
    np.testing.assert_array_equal(S, want)


def test_not_allowed_in_place_computes_apart(pkg, monkeypatch):
    """An exact alias of an export not proven safe (a transpose) goes through a temporary."""
    made = []
    monkeypatch.setattr(runtime.np, "empty_like", lambda a: made.append(a) or np.empty(a.shape, a.dtype))
    S = rand(4, 4)
    pkg.tr(S, out=S)
    assert len(made) == 1


def test_outputs_sharing_memory_are_refused(pkg):
    x, y, buf = rand(6), rand(6, seed=1), np.zeros(7)
    with pytest.raises(runtime.CallError, match="'out_0' and 'out_1' share memory"):
        pkg.two(x, y, out=(buf[:6], buf[1:]))
    s, p = np.empty(6), np.empty(6)
    assert pkg.two(x, y, out=(s, p))[0] is s
    np.testing.assert_allclose((s, p), (x + y, x * y))


def test_two_outputs_into_their_inputs(pkg):
    """An export with two outputs is not in place (the first store could come before a read the second needs)."""
    for _ in range(2):
        x, y = rand(6), rand(6, seed=1)
        want = (x + y, x * y)
        pkg.two(x, y, out=(y, x))
        np.testing.assert_allclose((y, x), want, rtol=1e-12)


def test_torch_tensors_with_out(pkg):
    torch = pytest.importorskip("torch")
    S = torch.tensor(rand(6, 6))
    want = S.T.clone()
    pkg.tr(S, out=S)
    assert torch.equal(S, want)
    x, y = torch.tensor(rand(9)), torch.tensor(rand(9, seed=1))
    want = 2.5 * x + y
    pkg.axpy(2.5, x, y, out=y)
    torch.testing.assert_close(y, want)


# ---- the header and the C ABI -----------------------------------------------------------------------------

def test_the_rule_per_export(pkg):
    """Which inputs each export's output may be, in the JSON and in the header's aliasing lines."""
    got = {n: d["in_place"] for n, d in pkg.desc["exports"].items() if d["in_place"]}
    assert got == IN_PLACE
    header = (pkg.root / "include" / "oal.h").read_text()
    lines = re.findall(r"^/\*   aliasing: (.*)\. \*/$", header, re.M)
    assert len(lines) == len(EXPORTS)
    assert "no output may overlap an input or another output" in lines[list(EXPORTS).index("two")]
    for name, line in zip(EXPORTS, lines):
        allowed = re.search(r"except that out may be (.*) itself", line)
        assert (allowed.group(1).split(" or ") if allowed else []) == IN_PLACE.get(name, [])
    assert "Aliasing: an output buffer may not overlap an input" in header


SHAPES = {"axpy": {"n": 1003}, "vrelu3": {"n": 1003}, "vrelu3_vjp": {"n": 1003}, "vrelu3_jvp": {"n": 1003},
          "bias": {"b": 7, "n": 131}}
"""Sizes that run the vector loops and their remainders."""


def test_c_program_calls_in_place_as_the_header_allows(pkg, tmp_path):
    """Every (export, input) the JSON allows, called from C with out == that input, gives numpy's values."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("needs a C compiler")
    desc = json.loads((pkg.root / "share" / "oal" / "oal.json").read_text())["exports"]
    cases = [(name, alias) for name, d in desc.items() for alias in d["in_place"]]
    blocks, wants = [], []
    for k, (name, alias) in enumerate(cases):
        d, dims = desc[name], SHAPES.get(name, {"n": 64})
        inputs = {a["name"]: rand(*[dims.get(s, s) for s in a["shape"]], seed=k) for a in d["args"]
                  if a["role"] == "in" and a["shape"]}
        for j, x in enumerate(inputs.values()):
            x.tofile(tmp_path / f"in{k}_{j}.bin")
        blocks.append(_c_block(k, d, dims, list(inputs), alias))
        wants.append(ORACLES[name](*[inputs.get(a["name"], 2.5) for a in d["args"] if a["role"] == "in"]))
    (tmp_path / "main.c").write_text(C_PROGRAM.replace("BLOCKS", "\n".join(blocks)))
    exe = tmp_path / "main"
    subprocess.run([cc, "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{pkg.root / 'include'}",
                    str(tmp_path / "main.c"), str(pkg.root / "lib" / "liboal.a"), "-lm", "-o", str(exe)],
                   check=True)
    subprocess.run([str(exe)], cwd=tmp_path, check=True)
    for k, ((name, alias), want) in enumerate(zip(cases, wants)):
        got = np.fromfile(tmp_path / f"out{k}.bin").reshape(want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=f"{name} in place of {alias}")
    assert len(cases) == sum(map(len, IN_PLACE.values()))


C_PROGRAM = '''#include <stdio.h>
#include <stdlib.h>
#include "oal.h"

static double* load(const char* path, size_t n) {
    double* p = malloc(n * sizeof(double) + 1);
    FILE* f = fopen(path, "rb");
    if (!p || !f || fread(p, sizeof(double), n, f) != n) exit(3);
    fclose(f);
    return p;
}

static void save(const char* path, const double* p, size_t n) {
    FILE* f = fopen(path, "wb");
    if (!f || fwrite(p, sizeof(double), n, f) != n) exit(4);
    fclose(f);
}

static _Alignas(64) unsigned char ws[1 << 16];

int main(void) {
BLOCKS
    return 0;
}
'''


def _c_block(k: int, d: dict, dims: dict, tensors: list[str], alias: str) -> str:
    """One call of export d with its output pointer the input `alias`; the result saved to out<k>.bin."""
    size = {a["name"]: " * ".join(str(dims.get(s, s)) for s in a["shape"]) for a in d["args"] if a["shape"]}
    lines = [f"    {{  /* {d['symbol']}, out = {alias} */"]
    lines += [f'        double* {t} = load("in{k}_{j}.bin", {size[t]});' for j, t in enumerate(tensors)]
    args = [str(dims[x]) for x in d["dims"]]
    args += [(a["name"] if a["shape"] else "2.5") if a["role"] == "in" else alias for a in d["args"]
             if a["role"] in ("in", "out")]
    lines.append(f"        if ({d['symbol']}_workspace_size({', '.join(str(dims[x]) for x in d['dims'])}) > "
                 "sizeof ws) return 5;")
    lines.append(f"        if ({d['symbol']}({', '.join(args)}, ws) != 0) return 6;")
    lines.append(f'        save("out{k}.bin", {alias}, {size[alias]});')
    lines += [f"        free({t});" for t in tensors] + ["    }"]
    return "\n".join(lines)
