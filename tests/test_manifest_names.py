"""Red-team pass of manifest names and the command line: names that would break the generated C++ or
shadow a system header, colliding C symbols, a cpu the compiler rejects, and unclear CLI errors.
Each is a located manifest error from `ksbuild check` (no C++ build needed)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_manifest import write  # a manifest.toml with a relu3.py next to it

from ksbuild import __version__
from ksbuild.cli import main
from ksbuild.errors import KsbuildError
from ksbuild.manifest import load_manifest


def manifest(package: str = "pk", exports: str = 'relu3 = "relu3"', build: str = "") -> str:
    return (f'[package]\nname = "{package}"\n{build}\n[kernels.relu3]\npython = "relu3.py:relu3"\n\n'
            f"[exports]\n{exports}\n")


def line_of(text: str, snippet: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if line.startswith(snippet))


def check_error(tmp_path: Path, text: str, capsys) -> str:
    """stderr of `ksbuild check` on text, which must fail with a user error (exit 1)."""
    rc = main(["check", str(write(tmp_path, text))])
    err = capsys.readouterr().err
    assert rc == 1, err
    assert "internal error" not in err and "Traceback" not in err
    return err


@pytest.mark.parametrize("name", ["int", "delete", "const", "new", "auto", "char", "namespace", "nullptr",
                                  "requires", "co_await"])
def test_export_named_cxx_keyword(tmp_path, capsys, name):
    text = manifest(exports=f'{name} = "relu3"')
    err = check_error(tmp_path, text, capsys)
    assert f"manifest.toml:{line_of(text, name + ' =')}:1: error: export name '{name}' is a C or C++ keyword" in err


@pytest.mark.parametrize("name", ["int", "delete", "template"])
def test_package_named_cxx_keyword(tmp_path, capsys, name):
    text = manifest(package=name)
    err = check_error(tmp_path, text, capsys)
    assert f"manifest.toml:2:1: error: package name '{name}' is a C or C++ keyword" in err


@pytest.mark.parametrize("name", ["std", "ks", "int64_t", "size_t", "workspace"])
def test_names_the_generated_cxx_reserves(tmp_path, capsys, name):
    text = manifest(exports=f'{name} = "relu3"')
    err = check_error(tmp_path, text, capsys)
    assert f":{line_of(text, name + ' =')}:1: error: export name '{name}' is reserved in the generated C++" in err


def test_python_keyword_still_reported_as_such(tmp_path):
    with pytest.raises(KsbuildError, match="export name 'class' is a Python keyword"):
        load_manifest(write(tmp_path, manifest(exports='class = "relu3"')))


def test_keyword_like_names_are_fine(tmp_path):
    """Names that merely contain a keyword, and a kernel named like one, are not reserved."""
    m = load_manifest(write(tmp_path, manifest(package="int_ops", exports='int_ = "relu3"\nnew_relu3 = "relu3"')))
    assert list(m.exports) == ["int_", "new_relu3"]


def test_export_collides_with_workspace_size_function(tmp_path, capsys):
    text = manifest(exports='relu3 = "relu3"\nvrelu3 = "vmap(relu3)"\nrelu3_workspace_size = "relu3"')
    err = check_error(tmp_path, text, capsys)
    assert (f"manifest.toml:{line_of(text, 'relu3_workspace_size')}:1: error: export 'relu3_workspace_size' "
            "collides with the workspace size function of export 'relu3'") in err
    assert "pk_relu3_workspace_size" in err


def test_workspace_size_suffix_alone_is_fine(tmp_path):
    m = load_manifest(write(tmp_path, manifest(exports='vrelu3_workspace_size = "vmap(relu3)"')))
    assert list(m.exports) == ["vrelu3_workspace_size"]


@pytest.mark.parametrize("name", ["math", "signal", "stdio", "stdlib", "string", "time", "errno", "limits",
                                  "complex", "Math", "unistd", "omp"])
def test_package_named_like_system_header(tmp_path, capsys, name):
    err = check_error(tmp_path, manifest(package=name), capsys)
    assert f"manifest.toml:2:1: error: package name '{name}' would install include/{name}.h" in err
    assert f"<{name.lower()}.h>" in err and "hint: " in err


@pytest.mark.parametrize("name, reason", [("assert", "Python keyword"), ("float", "C or C++ keyword")])
def test_header_names_that_are_keywords(tmp_path, capsys, name, reason):
    """<assert.h> and <float.h> are covered already: their names are keywords."""
    err = check_error(tmp_path, manifest(package=name), capsys)
    assert f"manifest.toml:2:1: error: package name '{name}' is a {reason}" in err


def test_package_named_std_or_ks(tmp_path, capsys):
    err = check_error(tmp_path, manifest(package="ks"), capsys)
    assert "manifest.toml:2:1: error: package name 'ks' is reserved in the generated C++" in err
    assert "prelude" in err
    err = check_error(tmp_path, manifest(package="std"), capsys)
    assert "package name 'std' is reserved" in err


needs_cxx = pytest.mark.skipif(not (shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")),
                               reason="no C++ compiler: [build] cpu is not checked")


@needs_cxx
def test_unknown_cpu_is_a_located_error(tmp_path, capsys):
    text = manifest(build='[build]\ncpu = "pentium9000"')
    err = check_error(tmp_path, text, capsys)
    assert f"manifest.toml:{line_of(text, 'cpu')}:1: error: unknown cpu 'pentium9000' in [build]" in err
    assert "-march=pentium9000" in err


@needs_cxx
def test_known_cpus_pass(tmp_path):
    for cpu in ("", "native"):
        m = load_manifest(write(tmp_path, manifest(build=f'[build]\ncpu = "{cpu}"')))
        assert m.build.cpu == cpu


def test_no_compiler_skips_the_cpu_check(tmp_path, monkeypatch):
    monkeypatch.setenv("CXX", "/nonexistent/ksbuild-test-c++")
    m = load_manifest(write(tmp_path, manifest(build='[build]\ncpu = "pentium9001"')))
    assert m.build.cpu == "pentium9001"


@pytest.mark.parametrize("jobs", ["-3", "0", "x"])
def test_jobs_must_be_a_positive_integer(tmp_path, capsys, jobs):
    with pytest.raises(SystemExit) as info:
        main(["package", str(write(tmp_path, manifest())), "--jobs", jobs])
    assert info.value.code == 2
    assert "argument --jobs: must be" in capsys.readouterr().err


def test_version(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"ksbuild {__version__}"


@pytest.mark.parametrize("command", ["render", "package"])
def test_out_under_a_file(tmp_path, capsys, monkeypatch, command):
    path = write(tmp_path, manifest())
    monkeypatch.chdir(tmp_path)
    rc = main([command, str(path), "-o", "relu3.py/out"])
    err = capsys.readouterr().err
    assert rc == 1, err
    assert "relu3.py is a file, not a directory" in err and "internal error" not in err


def test_os_error_under_a_file_is_not_internal(tmp_path, capsys, monkeypatch):
    """Any command that trips over a file where it wants a directory (e.g. wheel -o) says which file."""
    (tmp_path / "f").write_text("")

    def mkdir_under_file(a):
        (tmp_path / "f" / "out").mkdir(parents=True)

    monkeypatch.setitem(__import__("ksbuild.cli").cli.COMMANDS, "check", mkdir_under_file)
    rc = main(["check", "unused"])
    err = capsys.readouterr().err
    assert rc == 1, err
    assert f"{tmp_path / 'f'} is a file, not a directory" in err and "internal error" not in err
