"""manifest.toml: loading the DESIGN.md example, and errors that name the message, file and line."""
from __future__ import annotations

from pathlib import Path

import pytest

from ksbuild.compile.backends import BACKENDS
from ksbuild.errors import KsbuildError, Location
from ksbuild.ir.types import Type
from ksbuild.manifest import TExpr, load_manifest, locate, parse_signature, parse_transform

VALID = '''\
[package]
name = "activations"          # C identifier: library, header, namespace, CMake package
version = "0.1.0"

[build]                       # every key optional
backend = "plain"             # plain (default, runtime-free) | blas | aten | ort
dtype = "float32"             # what Python `float` means in kernels
target = "host"               # or a triple such as aarch64-linux-gnu

[kernels.relu3]
python = "relu3.py:relu3"     # file relative to the manifest, or module:function
signature = "(x: f32) -> f32"

[exports]                     # C name = transformation expression over kernels
relu3 = "relu3"
vrelu3 = "vmap(relu3)"
relu3_vjp = "vjp(relu3)"
vrelu3_vjp = "vjp(vmap(relu3))"
relu3_jvp = "jvp(relu3)"
vrelu3_axes = "vmap(relu3, in_axes=(0, None))"
'''

RELU3 = '''\
def relu3(x: float) -> float:
    if x < 0.0:
        return 0.0
    elif x < 1.0:
        return x * x * x / 3.0
    else:
        return x - 2.0 / 3.0
'''


def write(tmp_path: Path, text: str) -> Path:
    """A manifest.toml with a relu3.py next to it."""
    (tmp_path / "relu3.py").write_text(RELU3)
    path = tmp_path / "manifest.toml"
    path.write_text(text)
    return path


def line_of(text: str, snippet: str) -> int:
    """The 1-based number of the first line of text containing snippet."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if snippet in line)


def load_error(tmp_path: Path, text: str) -> str:
    with pytest.raises(KsbuildError) as info:
        load_manifest(write(tmp_path, text))
    return str(info.value)


def kernel(name: str) -> TExpr:
    return TExpr("kernel", name)


def test_valid_manifest_loads(tmp_path):
    path = write(tmp_path, VALID)
    m = load_manifest(path)
    assert m.path == path.resolve() and m.root == tmp_path.resolve()
    assert (m.name, m.version, m.text) == ("activations", "0.1.0", VALID)
    assert (m.build.backend, m.build.dtype, m.build.target) == ("plain", "float32", "host")
    assert m.float_dtype() == "f32"
    spec = m.kernels["relu3"]
    assert (spec.python, spec.signature, spec.onnx) == ("relu3.py:relu3", "(x: f32) -> f32", None)
    assert spec.loc.line == 10 and spec.loc.file == str(path)


def test_valid_manifest_exports(tmp_path):
    m = load_manifest(write(tmp_path, VALID))
    assert list(m.exports) == ["relu3", "vrelu3", "relu3_vjp", "vrelu3_vjp", "relu3_jvp", "vrelu3_axes"]
    ex = {name: e.expr for name, e in m.exports.items()}
    assert ex["relu3"] == kernel("relu3")
    assert ex["vrelu3"] == TExpr("vmap", arg=kernel("relu3"))
    assert ex["relu3_vjp"] == TExpr("vjp", arg=kernel("relu3"))
    assert ex["vrelu3_vjp"] == TExpr("vjp", arg=TExpr("vmap", arg=kernel("relu3")))
    assert ex["relu3_jvp"] == TExpr("jvp", arg=kernel("relu3"))
    assert ex["vrelu3_axes"] == TExpr("vmap", arg=kernel("relu3"), in_axes=(0, None))
    vjp = m.exports["vrelu3_vjp"]
    assert vjp.text == "vjp(vmap(relu3))" and vjp.loc.line == line_of(VALID, "vrelu3_vjp =")


def test_minimal_manifest_defaults(tmp_path):
    text = '[package]\nname = "p"\n\n[kernels.relu3]\npython = "relu3.py:relu3"\n\n[exports]\nf = "grad(relu3)"\n'
    m = load_manifest(write(tmp_path, text))
    assert m.version == "0.1.0" and (m.build.backend, m.build.dtype, m.build.target) == ("plain", "float32", "host")
    assert m.exports["f"].expr == TExpr("grad", arg=kernel("relu3"))
    assert load_manifest(tmp_path).name == "p"  # a directory means its manifest.toml


def test_module_kernel_and_float64(tmp_path):
    text = VALID.replace('"relu3.py:relu3"', '"mypkg.acts:relu3"').replace('"float32"', '"float64"')
    m = load_manifest(write(tmp_path, text))
    assert m.kernels["relu3"].python == "mypkg.acts:relu3" and m.float_dtype() == "f64"


def test_kernels_keep_order(tmp_path):
    extra = '[kernels.b]\npython = "relu3.py:relu3"\n\n[kernels.a]\nonnx = "m.onnx"\n\n'
    text = VALID.replace("[exports]", extra + "[exports]")
    (tmp_path / "m.onnx").write_bytes(b"")
    m = load_manifest(write(tmp_path, text))
    assert list(m.kernels) == ["relu3", "b", "a"] and m.kernels["a"].onnx == "m.onnx"


# Each bad manifest: (text edit old -> new, expected message, a snippet of the line the error points at).
BAD = {
    "unknown key in [build]": ('target = "host"', 'target = "host"\nfoo = 1', "unknown key 'foo' in [build]", "foo ="),
    "unknown table": ("[exports]", "[tool]\nx = 1\n\n[exports]", "unknown table [tool]", "[tool]"),
    "wrong type for version": ('version = "0.1.0"', "version = 1", "'version' in [package] must be a string",
                               "version = 1"),
    "bad version": ('version = "0.1.0"', 'version = "1.x"', "version '1.x' in [package] must be digits and dots",
                    "version ="),
    "missing package name": ('name = "activations"', "", "missing 'name' in [package]", "[package]"),
    "bad package name": ('"activations"', '"my-lib"', "package name 'my-lib' is not a C identifier", "name ="),
    "unknown backend": ('"plain"  ', '"cuda"  ', f"unknown backend 'cuda' in [build]; valid: {', '.join(BACKENDS)}",
                        "backend ="),
    "bad dtype": ('"float32"', '"float16"', "unknown dtype 'float16' in [build]", "dtype ="),
    "missing python file": ('"relu3.py:relu3"', '"relu4.py:relu3"', "python file 'relu4.py' not found", "python ="),
    "bad python format": ('"relu3.py:relu3"', '"relu3.py"', "'python' must be \"file.py:function\"", "python ="),
    "python and onnx": ('signature = "(x: f32) -> f32"', 'onnx = "mlp.onnx"',
                        "kernel 'relu3' has both 'python' and 'onnx'", "onnx ="),
    "neither python nor onnx": ('python = "relu3.py:relu3"', "", "kernel 'relu3' needs 'python' or 'onnx'",
                                "[kernels.relu3]"),
    "unknown key in kernel": ("signature =", "sig =", "unknown key 'sig' in [kernels.relu3]", "sig ="),
    "bad signature": ("(x: f32) -> f32", "(x: f16) -> f32", "unknown type 'f16'; valid types: f32, f64, i32, i64, bool",
                      "signature ="),
    "unknown kernel in export": ('"vmap(relu3)"', '"vmap(relu4)"', "unknown kernel 'relu4'; defined kernels: relu3",
                                 "vrelu3 ="),
    "unknown transformation": ('"jvp(relu3)"', '"hess(relu3)"',
                               "unknown transformation 'hess'; valid transformations: vmap, jvp, vjp, grad",
                               "relu3_jvp ="),
    "export syntax error": ('"vmap(relu3)"', '"vmap(relu3"', "syntax error in transformation expression",
                            "vrelu3 ="),
    "wrong number of arguments": ('"vjp(relu3)"', '"vjp(relu3, relu3)"', "wrong number of arguments", "relu3_vjp ="),
    "bad in_axes": ("in_axes=(0, None)", "in_axes=(0, -1)", "bad in_axes entry '-1'", "vrelu3_axes ="),
    "bad export name": ('relu3 = "relu3"', '"2x" = "relu3"', "export name '2x' is not a C identifier", '"2x" ='),
    "export not a string": ('relu3 = "relu3"', "relu3 = 3", "export 'relu3' must be a string", "relu3 = 3"),
    "TOML syntax error": ('version = "0.1.0"', 'version = "0.1.0', "invalid TOML", "version ="),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_manifest(tmp_path, case):
    old, new, message, snippet = BAD[case]
    assert old in VALID
    text = VALID.replace(old, new, 1)
    err = load_error(tmp_path, text)
    assert message in err
    assert f"manifest.toml:{line_of(text, snippet)}:" in err


def test_error_shows_caret_under_the_unknown_kernel(tmp_path):
    err = load_error(tmp_path, VALID.replace('"vjp(vmap(relu3))"', '"vjp(vmap(relu4))"'))
    line, col = line_of(VALID, "vrelu3_vjp ="), len('vrelu3_vjp = "vjp(vmap(') + 1
    assert f"manifest.toml:{line}:{col}: error: unknown kernel 'relu4'" in err
    assert 'vrelu3_vjp = "vjp(vmap(relu4))"' in err and "^~~~~" in err


def test_empty_and_missing_tables(tmp_path):
    head = VALID.split("[exports]")[0]
    assert "[exports] is empty" in load_error(tmp_path, head + "[exports]\n")
    assert "[exports] is missing" in load_error(tmp_path, head)
    no_kernels = VALID.split("[kernels.relu3]")[0] + "[exports]" + VALID.split("[exports]")[1]
    assert "[kernels] is missing" in load_error(tmp_path, no_kernels)


def test_missing_manifest(tmp_path):
    with pytest.raises(KsbuildError, match="cannot read manifest"):
        load_manifest(tmp_path / "nope.toml")


def test_unknown_key_suggests_the_close_one(tmp_path):
    err = load_error(tmp_path, VALID.replace("backend =", "backnd ="))
    assert "unknown key 'backnd' in [build]; valid keys: backend, dtype, target" in err
    assert "did you mean 'backend'?" in err


def test_locate():
    text = '[package]\nname = "x"\n\n[kernels."relu3"]\n  python = "a.py:f"\n[exports]\nf = "relu3"\n'
    assert (locate(text, "package").line, locate(text, "package", "name").line) == (1, 2)
    loc = locate(text, "kernels.relu3", "python", file="m.toml")
    assert (loc.file, loc.line, loc.col, loc.source_line) == ("m.toml", 5, 2, '  python = "a.py:f"')
    assert locate(text, "exports", "f").line == 7
    assert locate(text, "exports", "nope").line == 6  # falls back to the section header
    assert locate(text, "nope").line == 0


LOC = Location("m.toml", 1)


@pytest.mark.parametrize("text, params, results", [
    ("(x: f32, w: f32[n, 3]) -> f32", [("x", Type("f32")), ("w", Type("f32", ("n", 3)))], [Type("f32")]),
    ("(x: f32) -> (f32, f32[n])", [("x", Type("f32"))], [Type("f32"), Type("f32", ("n",))]),
    ("(a: i32, b: i64, c: bool, d: f64[2]) -> bool",
     [("a", Type("i32")), ("b", Type("i64")), ("c", Type("bool")), ("d", Type("f64", (2,)))], [Type("bool")]),
    ("() -> i64[m, n]", [], [Type("i64", ("m", "n"))]),
    ("(x: f32)", [("x", Type("f32"))], None),  # no results: what the kernel returns
])
def test_parse_signature(text, params, results):
    assert parse_signature(text, LOC) == (params, results)


@pytest.mark.parametrize("text, message", [
    ("(x: float) -> f32", "unknown type 'float'; valid types: f32, f64, i32, i64, bool"),
    ("(x) -> f32", "parameter 'x' needs a type"),
    ("(x: f32) -> ()", "a signature must look like"),
    ("(x: f32[0]) -> f32", "bad dimension '0'"),
    ("(x: f32[n + 1]) -> f32", "bad dimension 'n + 1'"),
    ("(x: f32, x: f32) -> f32", "duplicate parameter 'x'"),
    ("(*x: f32) -> f32", "only plain parameters"),
    ("(x: f32 -> f32", "syntax error in signature"),
])
def test_parse_signature_errors(text, message):
    with pytest.raises(KsbuildError, match=message.replace("(", r"\(").replace(")", r"\)").replace("+", r"\+")) as info:
        parse_signature(text, LOC)
    assert info.value.loc.file == "m.toml"


def test_signature_error_caret_points_into_the_string():
    line = 'signature = "(x: f16) -> f32"'
    with pytest.raises(KsbuildError) as info:
        parse_signature("(x: f16) -> f32", Location("m.toml", 3, 0, source_line=line))
    assert (info.value.loc.col, info.value.loc.end_col) == (line.index("f16"), line.index("f16") + 3)


@pytest.mark.parametrize("text, expr", [
    ("relu3", kernel("relu3")),
    ("  vmap(relu3) ", TExpr("vmap", arg=kernel("relu3"))),
    ("vmap(relu3, in_axes=0)", TExpr("vmap", arg=kernel("relu3"))),
    ("vmap(vmap(g, in_axes=(None, 0)))", TExpr("vmap", arg=TExpr("vmap", arg=kernel("g"), in_axes=(None, 0)))),
    ("grad(jvp(vjp(relu3)))", TExpr("grad", arg=TExpr("jvp", arg=TExpr("vjp", arg=kernel("relu3"))))),
    ("jvp(grad(relu3), primals=True)", TExpr("jvp", arg=TExpr("grad", arg=kernel("relu3")), primals=True)),
    ("jvp(relu3, argnums=0, primals=True)", TExpr("jvp", arg=kernel("relu3"), argnums=(0,), primals=True)),
])
def test_parse_transform(text, expr):
    assert parse_transform(text, LOC, ["relu3", "g"]) == expr


@pytest.mark.parametrize("text, message", [
    ("vmap", "unknown kernel 'vmap'"),
    ("relu3 + 1", "expected a kernel name or a transformation"),
    ("vmap(relu3, in_axes=None)", "bad in_axes 'None'"),
    ("vmap(relu3, in_axes=(None, None))", "bad in_axes"),
    ("vmap(relu3, in_axes=[0])", "bad in_axes entry"),
    ("vjp(relu3, in_axes=(0,))", "unexpected keyword argument 'in_axes' to vjp"),
    ("jvp(relu3, in_axes=0)", "unexpected keyword argument 'in_axes' to jvp; jvp takes only primals or argnums"),
    ("jvp(relu3, primals=1)", "bad primals '1': True or False"),
    ("vmap()", "wrong number of arguments"),
    ("", "syntax error"),
])
def test_parse_transform_errors(text, message):
    with pytest.raises(KsbuildError, match=message.replace("(", r"\(").replace("+", r"\+")):
        parse_transform(text, LOC, ["relu3"])


def test_backend_override(tmp_path):
    """--backend / ksbuild.build(backend=) replace [build] backend; an unknown one is an error."""
    path = tmp_path / "manifest.toml"
    path.write_text(VALID)
    (tmp_path / "relu3.py").write_text("def relu3(x: float) -> float:\n    return x\n")
    assert load_manifest(path, "blas").build.backend == "blas"
    assert load_manifest(path, "ort").build.backend == "ort"
    assert load_manifest(path).build.backend == "plain"
    with pytest.raises(KsbuildError, match=f"unknown backend 'cuda'; known backends: {', '.join(BACKENDS)}"):
        load_manifest(path, "cuda")


def test_cpu_key_reaches_the_generated_cmake(tmp_path):
    """[build] cpu = "x86-64-v3" becomes the default of the project's p_CPU (-march); a bad value names the key."""
    from ksbuild.packaging.package import render
    text = '[package]\nname = "p"\n[build]\ncpu = "x86-64-v3"\n[kernels.relu3]\npython = "relu3.py:relu3"\n' \
           '[exports]\nf = "grad(relu3)"\n'
    path = write(tmp_path, text)
    assert load_manifest(path).build.cpu == "x86-64-v3"
    render(path, tmp_path / "proj", lambda s: None)
    assert 'p_setting(CPU STRING "x86-64-v3"' in (tmp_path / "proj/CMakeLists.txt").read_text()
    with pytest.raises(KsbuildError, match="cpu 'x86 64' in \\[build\\] must be") as info:
        load_manifest(write(tmp_path, text.replace("x86-64-v3", "x86 64")))
    assert info.value.loc.line == 4
    assert load_manifest(write(tmp_path, text.replace("x86-64-v3", ""))).build.cpu == ""  # the README's default


def test_werror_key_controls_warnings_as_errors(tmp_path):
    """[build] werror = false renders p_WERROR OFF, so a compiler warning no longer stops `cmake --build`; with
    the default (true) it does, and the error says how to build anyway. The warning is planted in the rendered
    source (ksbuild's own C++ compiles warning-free), then built through the same CMake step as `ksbuild package`."""
    from ksbuild.compile.cmake import build_and_install
    from ksbuild.packaging.package import render
    text = '[package]\nname = "p"\n[build]\nwerror = false\n[kernels.relu3]\npython = "relu3.py:relu3"\n' \
           '[exports]\nf = "relu3"\n'
    assert load_manifest(write(tmp_path, text.replace("werror = false\n", ""))).build.werror is True
    with pytest.raises(KsbuildError, match="'werror' in \\[build\\] must be true or false, got 'no'") as info:
        load_manifest(write(tmp_path, text.replace("false", '"no"')))
    assert info.value.loc.line == 4
    for werror in (True, False):
        path = write(tmp_path, text.replace("false", str(werror).lower()))
        proj = tmp_path / f"proj_{werror}"
        render(path, proj, lambda s: None)
        assert f'p_setting(WERROR BOOL {"ON" if werror else "OFF"} "Treat warnings as errors ([build] werror)")' in \
            (proj / "CMakeLists.txt").read_text()
        with open(proj / "src/p.cpp", "a") as f:
            f.write("\nstatic int planted_unused_function() { return 0; }\n")  # -Wunused-function
        build = lambda: build_and_install(proj, tmp_path / f"build_{werror}", tmp_path / f"install_{werror}",
                                          log=tmp_path / f"log_{werror}", progress=lambda s: None)
        if werror:
            with pytest.raises(KsbuildError, match="C\\+\\+ build failed") as info:
                build()
            assert "werror = false" in info.value.hint and "planted_unused_function" in str(info.value)
        else:
            build()
            assert (tmp_path / "install_False/lib/libp.a").exists()


def test_ksbuild_build_raises_the_users_error_without_ksbuilds_frames(tmp_path):
    """ksbuild.build from Python: the located error, its traceback ending at the call (ksbuild's internals
    were a screenful of frames above the message)."""
    import traceback

    import ksbuild
    (tmp_path / "k.py").write_text("def k(x: float) -> float:\n    return x +* 2\n")
    (tmp_path / "manifest.toml").write_text('[package]\nname = "bad"\n\n[kernels.k]\npython = "k.py:k"\n\n'
                                            '[exports]\nk = "k"\n')
    with pytest.raises(ksbuild.KsbuildError) as e:
        ksbuild.build(tmp_path / "manifest.toml")
    assert "k.py:2:15: error: Python syntax error" in str(e.value)
    frames = [f.filename for f in traceback.extract_tb(e.value.__traceback__)]
    assert all(f == __file__ or f.endswith("ksbuild/__init__.py") for f in frames), frames


def test_jvp_with_primals_returns_both(tmp_path):
    """jvp(f, primals=True) returns f's results, then the tangents jvp(f) returns (one forward pass), in the
    C ABI's order; jvp(grad(f)) that way gives the gradient and a Hessian-vector product at once."""
    import numpy as np
    from conftest import build_kernel_file

    kernels = 'import torch\n\ndef f(x: "float[n]") -> float:\n    return torch.sum(torch.sin(x) * x)\n'
    manifest = ('[package]\nname = "jvp_primals"\n[build]\ndtype = "float64"\n[kernels.f]\npython = "k.py:f"\n'
                '[exports]\nboth = "jvp(f, primals=True)"\nhvp = "jvp(grad(f), primals=True)"\n')
    pkg, _ = build_kernel_file(tmp_path, kernels, manifest, "jvp_primals_kernels")
    x, v = np.linspace(-1.0, 2.0, 5), np.linspace(0.5, -0.5, 5)
    value, tangent = pkg.both(x, v)
    assert value == pytest.approx(np.sum(np.sin(x) * x))
    assert tangent == pytest.approx(np.sum((np.cos(x) * x + np.sin(x)) * v))
    grad, hv = pkg.hvp(x, v)
    np.testing.assert_allclose(grad, np.cos(x) * x + np.sin(x), rtol=1e-12)
    np.testing.assert_allclose(hv, (2 * np.cos(x) - x * np.sin(x)) * v, rtol=1e-12)


def test_jvp_with_argnums_takes_tangents_of_those_only(tmp_path):
    """jvp(f, argnums=1) takes a tangent for argument 1 only (the others' are zero, and no work is spent on
    them), as vjp(f, argnums=...) gives cotangents of those only."""
    import numpy as np
    from conftest import build_kernel_file

    kernels = ('import torch\n\ndef f(x: "float[n]", y: "float[n]") -> float:\n'
               '    return torch.sum(torch.sin(x) * y * y)\n')
    manifest = ('[package]\nname = "jvp_argnums"\n[build]\ndtype = "float64"\n[kernels.f]\npython = "k.py:f"\n'
                '[exports]\ndy = "jvp(f, argnums=1)"\nboth = "jvp(grad(f, argnums=1), argnums=(1,), primals=True)"\n')
    pkg, _ = build_kernel_file(tmp_path, kernels, manifest, "jvp_argnums_kernels")
    x, y, v = np.linspace(-1.0, 2.0, 5), np.linspace(0.5, 1.5, 5), np.linspace(0.5, -0.5, 5)
    assert pkg.dy(x, y, v) == pytest.approx(np.sum(np.sin(x) * 2 * y * v))
    grad, hv = pkg.both(x, y, v)
    np.testing.assert_allclose(grad, 2 * np.sin(x) * y, rtol=1e-12)
    np.testing.assert_allclose(hv, 2 * np.sin(x) * v, rtol=1e-12)
    with pytest.raises(TypeError):
        pkg.dy(x, y, v, v)
