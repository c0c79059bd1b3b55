"""Targets: the records, their toolchain files, cross builds run under qemu-user, Cortex-M links.

The cross tests need the Debian cross toolchains (scripts/install.sh installs them as root);
each skips with the missing program named when they are not there.
"""
from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT

import ksbuild
from ksbuild.cli import main as cli_main
from ksbuild.compile.cmake import cmake_exe
from ksbuild.compile.targets import TARGETS, Target, get_target
from ksbuild.errors import KsbuildError
from ksbuild.packaging.package import package, render

RELU3 = ROOT / "examples/relu3/manifest.toml"
GMM = ROOT / "examples/gmm/manifest.toml"
CROSS = ROOT / "tests/cross"
EM_MACHINE = {"aarch64-linux-gnu": 183, "riscv64-linux-gnu": 243}  # ELF e_machine (System V gABI)
NOT_FREESTANDING = re.compile(r"^(malloc|free|calloc|realloc|_malloc_r|_free_r|_sbrk|_sbrk_r|__cxa_\w+|_Unwind_\w+|"
                              r"__gxx_personality\w*|_Znw\w+|_Zna\w+|_Zdl\w+|_Zda\w+)$")


def need(t: Target) -> None:
    """Skip unless the target's compiler (and emulator, if it has one) are installed."""
    missing = [p for p in (t.cxx, t.emulator) if p and not shutil.which(p)]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (scripts/install.sh, run as root, installs "
                    f"{' '.join(t.apt)} with apt)")


_trees: dict[tuple[str, str], Path] = {}


@pytest.fixture(scope="session")
def cross_tree(tmp_path_factory):
    """cross_tree(manifest, target): the install tree of a manifest for a target, built once per session."""
    root = tmp_path_factory.mktemp("cross")

    def get(manifest: Path, target: str) -> Path:
        key = (str(manifest), target)
        if key not in _trees:
            _trees[key] = package(manifest, root / f"{manifest.parent.name}-{target}", target=target,
                                  progress=lambda s: None)
        return _trees[key]
    return get


def cmake(*args: str, cwd: Path | None = None) -> str:
    proc = subprocess.run([cmake_exe(), *args], capture_output=True, text=True, cwd=cwd)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def ctest_exe() -> str:
    beside = Path(cmake_exe()).parent / "ctest"
    return str(beside) if beside.exists() else shutil.which("ctest") or "ctest"


def build_consumer(source: Path, build: Path, toolchain: Path, prefixes: list[Path], *defs: str) -> None:
    """Configure and build an app with ksbuild's installed toolchain file and find_package prefixes."""
    cmake("-S", str(source), "-B", str(build), f"-DCMAKE_TOOLCHAIN_FILE={toolchain}", "-DCMAKE_BUILD_TYPE=Release",
          "-DCMAKE_PREFIX_PATH=" + ";".join(str(p) for p in prefixes), *defs)
    cmake("--build", str(build))


# ----------------------------------------------------------------------------- records
def test_every_target_is_a_complete_record():
    assert list(TARGETS)[0] == "host" and not TARGETS["host"].cross
    for t in TARGETS.values():
        assert t.doc and t.processor and t.system in ("Linux", "Generic", "Darwin", "Windows"), t
        if t.system == "Generic":
            assert t.triple == "arm-none-eabi" and "--specs=nosys.specs" in t.link_flags and not t.blas
            assert any(f.startswith("-mcpu=") for f in t.flags) and any(f.startswith("-mfloat-abi=") for f in t.flags)


def test_every_target_is_named_where_users_and_ci_look():
    """A target's record is enough for ksbuild; the help text, the toolchains scripts/install.sh installs, the
    table of docs/shipping.md and an ELF machine number for the cross-build test come with it."""
    from ksbuild.cli import TARGET_HELP
    install = (ROOT / "scripts/install.sh").read_text()
    shipping = (ROOT / "docs/shipping.md").read_text()
    for t in TARGETS.values():
        assert t.name in TARGET_HELP and f"| `{t.name}`" in shipping, t.name
        assert all(p in install for p in t.apt), f"scripts/install.sh does not install {t.apt} of {t.name}"
        assert t.system == "Generic" or not t.cross or t.name in EM_MACHINE, f"EM_MACHINE lacks {t.name}"


@pytest.mark.parametrize("name, flags", [
    ("cortex-m4", ["-mcpu=cortex-m4", "-mthumb", "-mfpu=fpv4-sp-d16", "-mfloat-abi=hard"]),
    ("cortex-m7", ["-mcpu=cortex-m7", "-mthumb", "-mfpu=fpv5-d16", "-mfloat-abi=hard"]),
    ("cortex-m0plus", ["-mcpu=cortex-m0plus", "-mthumb", "-mfloat-abi=soft"]),
])
def test_cortex_m_flags(name, flags):
    assert list(get_target(name).flags) == flags


def test_unknown_target_is_an_error_listing_the_known_ones():
    with pytest.raises(KsbuildError, match="unknown target 'cortex-m5'; known targets: host, aarch64-linux-gnu, .*m4"):
        get_target("cortex-m5")


def test_unknown_target_in_the_manifest_names_the_key(tmp_path, capsys):
    text = RELU3.read_text().replace('dtype = "float32"', 'dtype = "float32"\ntarget = "armv9-linux"')
    (tmp_path / "manifest.toml").write_text(text)
    shutil.copy(RELU3.parent / "relu3.py", tmp_path)
    assert cli_main(["package", str(tmp_path / "manifest.toml"), "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    line = text.splitlines().index('target = "armv9-linux"') + 1
    assert f"manifest.toml:{line}:1: error: unknown target 'armv9-linux'" in err
    assert not (tmp_path / "out").exists()


def test_blas_for_a_target_without_one_is_an_error(capsys):
    assert cli_main(["package", str(GMM), "--target", "cortex-m4", "--backend", "blas"]) == 1
    assert "backend 'blas' needs a BLAS library for target 'cortex-m4'" in capsys.readouterr().err


def test_check_refuses_a_backend_the_manifests_target_lacks(tmp_path, capsys):
    """ksbuild check passed backend = "blas" with target = "cortex-m4"; only package refused it, without a line."""
    text = RELU3.read_text().replace('dtype = "float32"', 'dtype = "float32"\ntarget = "cortex-m4"\nbackend = "blas"')
    (tmp_path / "manifest.toml").write_text(text)
    shutil.copy(RELU3.parent / "relu3.py", tmp_path)
    assert cli_main(["check", str(tmp_path / "manifest.toml")]) == 1
    line = text.splitlines().index('backend = "blas"') + 1
    assert f"manifest.toml:{line}:1: error: backend 'blas' needs a BLAS library" in capsys.readouterr().err


def test_rendered_toolchain_file(tmp_path):
    """The project of a cross target carries its toolchain file, uses it by default, records the target."""
    render(RELU3, tmp_path / "p", lambda s: None, target="cortex-m4")
    toolchain = (tmp_path / "p/share/toolchain.cmake").read_text()
    for line in ["set(CMAKE_SYSTEM_NAME Generic)", "set(CMAKE_CXX_COMPILER arm-none-eabi-g++)",
                 'set(CMAKE_CXX_FLAGS_INIT "-mcpu=cortex-m4 -mthumb -mfpu=fpv4-sp-d16 -mfloat-abi=hard")',
                 'set(CMAKE_EXE_LINKER_FLAGS_INIT "--specs=nosys.specs")',
                 "set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)",
                 'string(APPEND CMAKE_CXX_FLAGS_INIT " -fno-exceptions -fno-rtti")']:  # (an app pulls no unwinder)
        assert line in toolchain
    assert "CMAKE_CROSSCOMPILING_EMULATOR" not in toolchain
    assert "share/toolchain.cmake" in (tmp_path / "p/CMakeLists.txt").read_text()
    assert json.loads((tmp_path / "p/share/target.json").read_text())["target"] == "cortex-m4"
    render(RELU3, tmp_path / "q", lambda s: None, target="aarch64-linux-gnu")
    toolchain = (tmp_path / "q/share/toolchain.cmake").read_text()
    assert "find_program(KS_EMULATOR qemu-aarch64)" in toolchain
    assert 'set(CMAKE_CROSSCOMPILING_EMULATOR "${KS_EMULATOR};-L;/usr/aarch64-linux-gnu")' in toolchain


def test_host_tree_records_its_target(relu3_pkg):
    record = json.loads((relu3_pkg.root / "share/activations/target.json").read_text())
    assert record["target"] == "host"
    assert not (relu3_pkg.root / "share/activations/toolchain.cmake").exists()
    assert 'set(activations_KSBUILD_TARGET "host")' in \
        (relu3_pkg.root / "lib/cmake/activations/activationsConfig.cmake").read_text()


# ----------------------------------------------------------------------------- Linux targets under qemu
def gmm_reference():
    spec = importlib.util.spec_from_file_location("gmm_reference", ROOT / "examples/gmm/reference.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def write_inputs(folder: Path, x: np.ndarray, data: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "relu3.in").write_text(" ".join(repr(float(v)) for v in [len(x), *x]))
    K, d = data["means"].shape
    head = [K, d, data["icf"].shape[1], data["x"].shape[0]]
    body = [*head, *data["alphas"], *data["means"].ravel(), *data["icf"].ravel(), *data["x"].ravel(),
            data["gamma"], data["m"]]
    (folder / "gmm.in").write_text(" ".join(repr(float(v)) for v in body))


def elf_machine(path: Path) -> int:
    return int.from_bytes(path.read_bytes()[18:20], "little")


@pytest.mark.parametrize("target", [t.name for t in TARGETS.values() if t.cross and t.hosted])
def test_cross_build_runs_under_qemu_and_matches_host(target, cross_tree, relu3_pkg, tmp_path):
    """relu3 and gmm built for the target run under qemu through ctest and give the host's numbers."""
    t = TARGETS[target]
    need(t)
    relu3, gmm = cross_tree(RELU3, target), cross_tree(GMM, target)
    ref = gmm_reference()
    x = np.linspace(-2.5, 2.5, 21, dtype=np.float32)
    data = ref.make_data(d=3, K=4, n=10, seed=3)
    write_inputs(tmp_path / "data", x, data)
    build_consumer(CROSS / "linux", tmp_path / "b", relu3 / "share/activations/toolchain.cmake", [relu3, gmm],
                   f"-DKS_DATA={tmp_path / 'data'}")
    assert elf_machine(tmp_path / "b/ks_driver") == EM_MACHINE[target]
    log = subprocess.run([ctest_exe(), "-V"], cwd=tmp_path / "b", capture_output=True, text=True)
    assert log.returncode == 0, log.stdout + log.stderr
    runs = re.findall(rf'Test command: \S*/{t.emulator} "-L" "{t.sysroot}" "\S*/ks_driver"', log.stdout)
    assert len(runs) == 2, log.stdout  # ctest ran both tests through the emulator

    got = np.loadtxt(tmp_path / "data/relu3.out").reshape(len(x), 4)
    host = [relu3_pkg.vrelu3(x), relu3_pkg.vrelu3_vjp(x, np.ones_like(x)),
            [relu3_pkg.relu3(float(v)) for v in x], [relu3_pkg.relu3_grad(float(v)) for v in x]]
    np.testing.assert_allclose(got, np.array(host, dtype=np.float64).T, rtol=1e-6, atol=1e-7)

    gmm_host = ksbuild.build(GMM)
    args = (data["alphas"], data["means"], data["icf"], data["x"], data["gamma"], data["m"])
    value, *grads = np.loadtxt(tmp_path / "data/gmm.out")
    host_grads = np.concatenate([g.ravel() for g in gmm_host.gmm_grad(*args)])
    assert value == pytest.approx(gmm_host.gmm(*args), rel=1e-12)
    np.testing.assert_allclose(grads, host_grads, rtol=1e-10, atol=1e-12)
    torch_value, *torch_grads = ref.gmm_grad_torch(data)  # the oracle, not only the host build
    assert value == pytest.approx(torch_value, rel=1e-10)
    np.testing.assert_allclose(grads, np.concatenate([g.ravel() for g in torch_grads]), rtol=1e-8, atol=1e-10)


# ----------------------------------------------------------------------------- Cortex-M
def readelf_attributes(t: Target, path: Path) -> str:
    return subprocess.run([f"{t.triple}-readelf", "-A", str(path)], capture_output=True, text=True,
                          check=True).stdout


def test_cortex_m4_links_a_freestanding_program(cross_tree, tmp_path):
    """A Cortex-M4 program with static buffers links relu3 and gmm with nosys specs: no heap, no exceptions."""
    t = TARGETS["cortex-m4"]
    need(t)
    relu3, gmm = cross_tree(RELU3, "cortex-m4"), cross_tree(GMM, "cortex-m4")
    build_consumer(CROSS / "cortex_m", tmp_path / "b", relu3 / "share/activations/toolchain.cmake", [relu3, gmm])
    elf = tmp_path / "b/ks_cortex_m_app.elf"
    attrs = readelf_attributes(t, elf)
    assert "Tag_CPU_arch: v7E-M" in attrs and "Tag_ABI_VFP_args: VFP registers" in attrs
    nm = subprocess.run([f"{t.triple}-nm", str(elf)], capture_output=True, text=True, check=True).stdout
    symbols = {line.split()[-1] for line in nm.splitlines() if line.strip()}
    assert {"main", "activations_vrelu3", "gmm_gmm_f32_grad"} <= symbols  # exp and log are inline (ks/vmath.h)
    assert not sorted(s for s in symbols if NOT_FREESTANDING.match(s))


def test_find_package_refuses_a_tree_of_another_cross_target(cross_tree, tmp_path):
    """An app configured with aarch64's toolchain does not find a cortex-m7 tree (it was found, and the link
    failed: 'file in wrong format'; red-team pass)."""
    for name in ("aarch64-linux-gnu", "cortex-m7"):
        need(TARGETS[name])
    m7 = cross_tree(RELU3, "cortex-m7")
    toolchain = cross_tree(RELU3, "aarch64-linux-gnu") / "share/activations/toolchain.cmake"
    proc = subprocess.run([cmake_exe(), "-S", str(ROOT / "examples/relu3/app"), "-B", str(tmp_path / "b"),
                           f"-DCMAKE_TOOLCHAIN_FILE={toolchain}", f"-DCMAKE_PREFIX_PATH={m7}"],
                          capture_output=True, text=True)
    assert proc.returncode != 0
    assert "activations was built for cortex-m7 (arm), but this" in proc.stdout + proc.stderr, proc.stderr


def test_native_project_refuses_a_cross_tree(cross_tree, tmp_path):
    """A native app does not find an aarch64 tree: Config.cmake said so but went on and set _FOUND TRUE, and the
    link failed (red-team pass)."""
    need(TARGETS["aarch64-linux-gnu"])
    tree = cross_tree(RELU3, "aarch64-linux-gnu")
    proc = subprocess.run([cmake_exe(), "-S", str(ROOT / "examples/relu3/app"), "-B", str(tmp_path / "b"),
                           f"-DCMAKE_PREFIX_PATH={tree}"], capture_output=True, text=True)
    assert proc.returncode != 0
    assert "activations was built for aarch64-linux-gnu, not for this machine" in proc.stdout + proc.stderr


def _relu3_with_cpu(tmp_path, cpu: str):
    """A copy of examples/relu3 whose manifest says [build] cpu = <cpu>."""
    root = tmp_path / "k"
    shutil.copytree(ROOT / "examples/relu3", root, ignore=shutil.ignore_patterns("app", "build*"))
    text = (root / "manifest.toml").read_text()
    (root / "manifest.toml").write_text(text.replace("[build]", f'[build]\ncpu = "{cpu}"', 1) if "[build]" in text
                                        else text + f'\n[build]\ncpu = "{cpu}"\n')
    return root


def test_cpu_is_checked_against_the_target_of_the_command_line(tmp_path, capsys):
    """[build] cpu = "x86-64-v3" passed `check` for the host, then `package --target aarch64-linux-gnu` failed
    deep in the C++ build: now it is an error at the key, before compiling."""
    need(TARGETS["aarch64-linux-gnu"])
    root = _relu3_with_cpu(tmp_path, "x86-64-v3")
    assert cli_main(["package", str(root / "manifest.toml"), "--target", "aarch64-linux-gnu", "-o",
                 str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "manifest.toml:" in err and "unknown cpu 'x86-64-v3'" in err and "aarch64-linux-gnu-g++" in err
    assert not (tmp_path / "out").exists()


def test_a_cpu_of_the_command_lines_target_is_accepted(tmp_path, capsys):
    """cpu = "armv8.2-a" with --target aarch64-linux-gnu was checked against the host's compiler when the manifest
    was read, and refused (held-out pass over cross builds); it is checked against the target's."""
    need(TARGETS["aarch64-linux-gnu"])
    root = _relu3_with_cpu(tmp_path, "armv8.2-a")
    assert cli_main(["render", str(root / "manifest.toml"), "--target", "aarch64-linux-gnu", "-o",
                     str(tmp_path / "proj")]) == 0, capsys.readouterr().err
    assert 'activations_setting(CPU STRING "armv8.2-a"' in (tmp_path / "proj" / "CMakeLists.txt").read_text()


@pytest.mark.parametrize("target, manifest, expect, absent", [
    ("cortex-m4", GMM, ["Tag_CPU_arch: v7E-M", "Tag_FP_arch: VFPv4-D16", "Tag_ABI_VFP_args: VFP registers"], []),
    ("cortex-m7", RELU3, ["Tag_CPU_arch: v7E-M", "Tag_FP_arch: FPv5/FP-D16", "Tag_ABI_VFP_args: VFP registers"], []),
    ("cortex-m0plus", RELU3, ["Tag_CPU_arch: v6S-M"], ["Tag_FP_arch", "VFP registers"]),
])
def test_cortex_m_library_has_the_targets_abi_and_no_runtime(target, manifest, expect, absent, cross_tree):
    """The archive is built for the record's CPU and float ABI and needs only libm, mem* and libgcc helpers."""
    t = TARGETS[target]
    need(t)
    name = "gmm" if manifest == GMM else "activations"
    lib = cross_tree(manifest, target) / f"lib/lib{name}.a"
    attrs = readelf_attributes(t, lib)
    assert all(e in attrs for e in expect) and not any(a in attrs for a in absent), attrs
    nm = subprocess.run([f"{t.triple}-nm", "-u", str(lib)], capture_output=True, text=True, check=True).stdout
    undefined = {line.split()[-1] for line in nm.splitlines() if line.strip() and not line.endswith(":")}
    libm = {"exp", "expf", "log", "logf", "lgamma", "lgammaf", "sqrt", "sqrtf"}
    assert {s for s in undefined if s not in libm and not s.startswith(("__aeabi_", "mem"))} == set()


# ----------------------------------------------------------------------------- sources outside CMake
@pytest.fixture(scope="module")
def sqrl_project(tmp_path_factory) -> Path:
    """The rendered project of the sqrl example, whose sums carry `omp simd reduction` pragmas."""
    out = tmp_path_factory.mktemp("sqrl") / "p"
    render(ROOT / "examples/sqrl/manifest.toml", out, lambda s: None)
    assert "KS_OMP_SIMD(reduction(+:" in (out / "src/sqrl.cpp").read_text()
    return out


@pytest.mark.parametrize("target", ["host", "aarch64-linux-gnu", "cortex-m4", "cortex-m0plus"])
def test_generated_source_compiles_by_hand_with_warnings_as_errors(target, sqrl_project, tmp_path):
    """`<cxx> -Wall -Wextra -Werror -c src/P.cpp` without -fopenmp-simd: no unknown-pragma failure."""
    t = TARGETS[target]
    if t.cross and not shutil.which(t.cxx):
        pytest.skip(f"{t.cxx} not installed (scripts/install.sh installs {' '.join(t.apt)})")
    cxx = shutil.which(t.cxx)
    flags = ["-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", *t.flags,
             f"-I{sqrl_project / 'include'}", f"-I{sqrl_project / 'src'}"]
    proc = subprocess.run([cxx, *flags, "-c", str(sqrl_project / "src/sqrl.cpp"), "-o", str(tmp_path / "sqrl.o")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    # with the generated CMake's flags the pragma is there, so the optimized build is unchanged; on a microcontroller
    # (no vector unit: an M-profile core) the loop is kept rolled instead (prelude.h: code size, issue 36)
    pre = subprocess.run([cxx, *flags, "-fopenmp-simd", "-DKS_OPENMP_SIMD", "-E", str(sqrl_project / "src/sqrl.cpp")],
                         capture_output=True, text=True, check=True).stdout
    assert ("#pragma omp simd reduction(+:" if t.vectors else "#pragma GCC unroll 1") in pre


def test_generated_header_is_c(sqrl_project, tmp_path):
    """The header is plain C (C99, pedantic), documents workspace alignment and the shapes."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("needs a C compiler")
    header = sqrl_project / "include/sqrl.h"
    subprocess.run([cc, "-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-x", "c",
                    str(header)], check=True)
    text = header.read_text()
    assert "aligned to 16 bytes" in text and "same name, same size" in text
    assert re.search(r"/\*   shapes: \w+\[\w+(, \w+)*\].* -> ", text)
