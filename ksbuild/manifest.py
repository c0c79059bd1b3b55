"""The manifest: read manifest.toml, validate it, and point every error at the user's line."""
from __future__ import annotations

import ast
import difflib
import keyword
import re
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable

from .codegen.viewmodel import C_KEYWORDS, reserved_dim_name
from .compile.backends import BACKENDS as BACKEND_RECORDS
from .errors import KsbuildError, Location
from .ir.types import Type

BACKENDS = tuple(BACKEND_RECORDS)  # compile/backends.py: one record each
FLOAT_DTYPES = {"float32": "f32", "float64": "f64"}
TRANSFORMS = ("vmap", "jvp", "vjp", "grad", "fwd", "bwd",  # fwd/bwd: vjp split in two (docs/torch.md)
              "jacfwd", "jacrev", "jacobian", "hessian")  # whole Jacobians (docs/transformations.md)
JACOBIANS = ("jacfwd", "jacrev", "jacobian", "hessian")
TABLES = ("package", "build", "kernels", "exports")
PACKAGE_KEYS = ("name", "version")
BUILD_KEYS = ("backend", "dtype", "target", "cpu", "threads", "weights", "werror", "optimize")
KERNEL_KEYS = ("python", "signature", "onnx", "weights", "torch", "onnx_semantics")
SOURCE_KEYS = ("python", "onnx", "torch")  # a kernel has exactly one source
OPTIMIZE = ("speed", "size", "debug")  # -O3 (and, on x86-64, every level) / -Os, one build / -Og -g, one build
WEIGHTS = ("embed", "external")  # ONNX initializers / torch parameters and buffers: linked in, or passed by the caller
ONNX_SEMANTICS = ("onnxruntime", "reference")  # where onnxruntime and onnx.reference compute differently
SIGNATURE_DTYPES = ("f32", "f64", "i32", "i64", "bool")  # the dtypes a Python kernel computes with
# The package name becomes file names (include/<name>.h, lib/cmake/<name>/<name>ConfigVersion.cmake, ...): file
# systems allow 255 bytes a name, and the longest generated one adds 25 characters.
MAX_PACKAGE_NAME = 200

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*\Z")
_VERSION = re.compile(r"\d+(\.\d+){0,3}\Z")
_TARGET = re.compile(r"[A-Za-z0-9_.+-]+\Z")
_CPU = re.compile(r"[A-Za-z0-9_.+-]*\Z")  # "" is the target's baseline, as the README's manifest shows
_HEADER = re.compile(r"\s*\[\[?\s*([^\[\]]*?)\s*\]\]?\s*(#.*)?$")
_TOML_POS = re.compile(r"\s*\(at line (\d+), column (\d+)\)")

WORKSPACE_SUFFIX = "_workspace_size"  # P_E_workspace_size: the C function giving export E's workspace bytes
# Keywords of C++20 that C_KEYWORDS (C++17) lacks: a consumer compiling the header as C++20 would fail.
CXX20_KEYWORDS = frozenset(("char8_t", "concept", "consteval", "constinit", "co_await", "co_return", "co_yield",
                            "requires"))
# Names in C_KEYWORDS that are not keywords, and what the generated C++ uses them for.
RESERVED_NAMES = {"ks": "ksbuild's own namespace (and include/ks/, the prelude)", "std": "C++'s standard namespace",
                  "workspace": "the workspace parameter of generated functions", "main": "the program entry point",
                  "NULL": "a C macro", "size_t": "a type the generated code uses",
                  **{f"{u}int{n}_t": "a type the generated code uses" for u in ("", "u") for n in (8, 16, 32, 64)}}
# A package installs include/<name>.h: a name here would shadow <name.h> for every consumer. The C23 standard
# headers, POSIX and glibc ones that programs commonly include, and those a ksbuild library may need.
SYSTEM_HEADERS = frozenset("""
    assert complex ctype errno fenv float inttypes iso646 limits locale math setjmp signal stdalign stdarg
    stdatomic stdbit stdbool stdckdint stddef stdint stdio stdlib stdnoreturn string tgmath threads time uchar
    wchar wctype
    alloca dirent dlfcn endian fcntl features getopt malloc memory netdb poll pthread regex sched semaphore
    strings syslog termios unistd
    cblas omp""".split())

Path_ = tuple[str, ...]  # a key path in the TOML document, e.g. ("kernels", "relu3", "python")


@dataclass(frozen=True)
class KernelSpec:
    """One [kernels.NAME] table: where the kernel's source is and its optional signature."""
    name: str
    python: str | None
    signature: str | None
    onnx: str | None
    loc: Location
    weights: str | None = None  # ONNX and torch kernels: "embed" | "external" (default: [build] weights)
    torch: str | None = None  # "model.py:make": make() returns an nn.Module and example inputs (docs/torch-export.md)
    onnx_semantics: str | None = None  # ONNX kernels: "onnxruntime" (default) | "reference" (docs/onnx.md)


@dataclass(frozen=True)
class TExpr:
    """A parsed transformation expression: a kernel, or a transformation of a TExpr."""
    kind: str
    name: str = ""
    arg: "TExpr | None" = None
    in_axes: tuple[int | None, ...] | None = None
    argnums: tuple[int, ...] | None = None  # jvp/vjp/grad/jac*: differentiate only these arguments
    primals: bool = False  # jvp(f, primals=True): f's results before the tangents


@dataclass(frozen=True)
class ExportSpec:
    """One `name = "expression"` line of [exports]."""
    name: str
    expr: TExpr
    text: str
    loc: Location


@dataclass(frozen=True)
class BuildSpec:
    """The [build] table."""
    backend: str = "plain"
    dtype: str = "float32"
    target: str = "host"
    cpu: str = ""  # a -march value such as "native" or "x86-64-v3"; "" is the target's baseline
    threads: int = 0  # > 1: layers and batch loops split over N threads (ks/pool.h; not runtime-free); 0, 1: none
    weights: str = "embed"  # ONNX kernels: initializers linked into the library, or arguments ("external")
    werror: bool = True  # compile with -Werror (false: a compiler's warning does not stop the build)
    optimize: str = "speed"  # "size": -Os and one instruction set level (the target's baseline or [build] cpu);
    # "debug": the package's own code at -Og -g, one level (quick to compile, steps through in a debugger; the kernel
    # layer keeps the speed build's flags and objects)


@dataclass(frozen=True)
class Manifest:
    """A validated manifest.toml."""
    path: Path
    name: str
    version: str
    build: BuildSpec
    kernels: dict[str, KernelSpec]
    exports: dict[str, ExportSpec]
    text: str

    @property
    def root(self) -> Path:
        """The directory of the manifest; relative paths in it are relative to this."""
        return self.path.parent

    def float_dtype(self) -> str:
        """The IR dtype of Python `float` in kernels: "f32" or "f64"."""
        return FLOAT_DTYPES[self.build.dtype]


def locate(text: str, section: str | Path_, key: str | None = None, *, file: str = "") -> Location:
    """The Location of the [section] header or of `key = ...` in it ('' is the top level); else of its parent."""
    path = (_split_dotted(section) if isinstance(section, str) else tuple(section)) + ((key,) if key else ())
    lines = text.splitlines()
    for n in range(len(path), 0, -1):
        hit = _find_path(lines, path[:n])
        if hit is not None:
            return Location(file, hit[0] + 1, hit[1], source_line=lines[hit[0]])
    return Location(file)


def _find_path(lines: list[str], path: Path_) -> tuple[int, int, bool] | None:
    """(line index, column, is a table header) of a key path: a [table] header or a `key =` line."""
    if not path:
        return -1, 0, True
    for i, line in enumerate(lines):
        m = _HEADER.match(line)
        if m and _split_dotted(m.group(1)) == path:
            return i, len(line) - len(line.lstrip()), True
    parent = _find_path(lines, path[:-1])
    return _find_key(lines, parent[0], path[-1]) if parent and parent[2] else None


def _find_key(lines: list[str], header: int, key: str) -> tuple[int, int, bool] | None:
    """The `key = ...` line between a header (or the start) and the next header."""
    pattern = re.compile(rf"\s*(?:{re.escape(key)}|\"{re.escape(key)}\"|'{re.escape(key)}')\s*[.=]")
    for i in range(header + 1, len(lines)):
        if _HEADER.match(lines[i]):
            return None
        if pattern.match(lines[i]):
            return i, len(lines[i]) - len(lines[i].lstrip()), False
    return None


def _split_dotted(name: str) -> Path_:
    return tuple(p.strip("\"'") for p in re.findall(r"\"[^\"]*\"|'[^']*'|[^.\s]+", name))


@dataclass(frozen=True)
class _Ctx:
    """The manifest being read: its name for messages and its raw text."""
    file: str
    text: str

    def loc(self, path: Path_) -> Location:
        return locate(self.text, path, file=self.file)

    def error(self, path: Path_, message: str, hint: str | None = None) -> KsbuildError:
        return KsbuildError(message, self.loc(path), hint)


def load_manifest(path: str | Path, backend: str | None = None, target: str | None = None,
                  optimize: str | None = None) -> Manifest:
    """Read, parse and validate a manifest.toml (or the manifest.toml in a directory).

    `backend` and `optimize` (from --backend / --optimize or the Python API) replace the manifest's [build] backend
    and optimize; `target` (from --target) is the one [build] cpu is checked against, instead of the manifest's own.
    """
    p = Path(path) / "manifest.toml" if Path(path).is_dir() else Path(path)
    try:
        ctx = _Ctx(str(p), p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise KsbuildError(f"cannot read manifest: {getattr(e, 'strerror', None) or e}", Location(str(p))) from None
    data = _parse_toml(ctx)
    _check_keys(ctx, (), data, TABLES)
    name, version = _package(ctx, _table(ctx, data, "package"))
    build = _build(ctx, _table(ctx, data, "build", required=False), target)
    kernels = {k: _kernel(ctx, k, v, p.parent) for k, v in _table(ctx, data, "kernels").items()}
    exports = {k: _export(ctx, k, v, kernels) for k, v in _table(ctx, data, "exports").items()}
    _check_symbol_clashes(ctx, name, exports)
    if backend is not None:
        if backend not in BACKENDS:
            raise KsbuildError(f"unknown backend '{backend}'; known backends: {', '.join(BACKENDS)}",
                               hint=f"use one of: {', '.join(BACKENDS)}")
        build = replace(build, backend=backend)
    if optimize is not None:
        if optimize not in OPTIMIZE:
            raise KsbuildError(f"unknown optimize '{optimize}'; valid: {', '.join(OPTIMIZE)}",
                               hint=f"use one of: {', '.join(OPTIMIZE)}")
        build = replace(build, optimize=optimize)
    return Manifest(p.resolve(), name, version, build, kernels, exports, ctx.text)


def _check_symbol_clashes(ctx: _Ctx, package: str, exports: dict[str, ExportSpec]) -> None:
    """Export E_workspace_size next to export E: both would define the C function P_E_workspace_size."""
    for name in exports:
        base = name.removesuffix(WORKSPACE_SUFFIX)
        if base != name and base in exports:
            raise ctx.error(("exports", name), f"export '{name}' collides with the workspace size function of "
                            f"export '{base}': both would be the C function {package}_{name}",
                            hint=f"rename export '{name}'")


def _parse_toml(ctx: _Ctx) -> dict[str, Any]:
    """The TOML document; a syntax error is reported at the line and column tomllib names."""
    try:
        return tomllib.loads(ctx.text)
    except tomllib.TOMLDecodeError as e:
        msg, lines = str(e), ctx.text.splitlines() or [""]
    m = _TOML_POS.search(msg)
    line, col = (int(m[1]), int(m[2]) - 1) if m else (len(lines), len(lines[-1]))
    msg = _TOML_POS.sub("", msg).replace(" (at end of document)", "")
    source = lines[line - 1] if 0 < line <= len(lines) else None
    raise KsbuildError(f"invalid TOML: {msg}", Location(ctx.file, line, max(col, 0), source_line=source))


def _check_keys(ctx: _Ctx, path: Path_, table: dict, valid: tuple[str, ...]) -> None:
    """Reject any key of table not in valid, naming it, its table and the valid keys."""
    for key in (k for k in table if k not in valid):
        close = difflib.get_close_matches(key, valid, n=1)
        hint = f"did you mean '{close[0]}'?" if close else None
        if not path:
            raise ctx.error((key,), f"unknown table [{key}]; valid tables: [{'], ['.join(valid)}]", hint)
        section = "[" + ".".join(path) + "]"
        raise ctx.error(path + (key,), f"unknown key '{key}' in {section}; valid keys: {', '.join(valid)}", hint)


def _table(ctx: _Ctx, data: dict, key: str, required: bool = True) -> dict:
    """A top-level table; a required one must be there and not empty."""
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise ctx.error((key,), f"[{key}] must be a table, got {type(value).__name__}")
    if required and not value:
        raise ctx.error((key,), f"[{key}] is {'empty' if key in data else 'missing'}; "
                                "see the manifest section of README.md")
    return value


def _field(ctx: _Ctx, table: dict, path: Path_, key: str, default: str | None = None,
           valid: tuple[str, ...] | re.Pattern | None = None, expect: str = "") -> str | None:
    """The string table[key] (default if absent), checked against a tuple of choices or a regex."""
    if key not in table:
        return default
    value, where, section = table[key], path + (key,), "[" + ".".join(path) + "]"
    if not isinstance(value, str):
        raise ctx.error(where, f"'{key}' in {section} must be a string, got {type(value).__name__} {value!r}")
    if isinstance(valid, tuple) and value not in valid:
        raise ctx.error(where, f"unknown {key} '{value}' in {section}; valid: {', '.join(valid)}")
    if isinstance(valid, re.Pattern) and not valid.match(value):
        raise ctx.error(where, f"{key} '{value}' in {section} must be {expect}")
    return value


def _check_c_name(ctx: _Ctx, path: Path_, name: str, what: str, cxx: bool = False) -> None:
    """A C identifier that is no Python keyword; with cxx (it names a C++ function or namespace in the
    generated header), also no C++ keyword and no name the generated C++ reserves."""
    if not _IDENT.match(name):
        raise ctx.error(path, f"{what} '{name}' is not a C identifier (letters, digits, _; no leading digit)")
    if keyword.iskeyword(name):
        raise ctx.error(path, f"{what} '{name}' is a Python keyword")
    if cxx and name in RESERVED_NAMES:
        raise ctx.error(path, f"{what} '{name}' is reserved in the generated C++: it is {RESERVED_NAMES[name]}",
                        hint=f"rename it, e.g. '{name}_'")
    if cxx and (name in C_KEYWORDS or name in CXX20_KEYWORDS):
        raise ctx.error(path, f"{what} '{name}' is a C or C++ keyword", hint=f"rename it, e.g. '{name}_'")


def _check_header_name(ctx: _Ctx, path: Path_, name: str) -> None:
    """A package name whose include/<name>.h would shadow a system header is an error."""
    if name.lower() in SYSTEM_HEADERS:  # case-insensitive file systems (macOS, Windows) confuse Math.h too
        raise ctx.error(path, f"package name '{name}' would install include/{name}.h, which shadows the system "
                        f"header <{name.lower()}.h> for every program that uses the package",
                        hint=f"pick a more specific name, e.g. '{name}_kernels'")


def _package(ctx: _Ctx, pkg: dict) -> tuple[str, str]:
    path = ("package",)
    _check_keys(ctx, path, pkg, PACKAGE_KEYS)
    name = _field(ctx, pkg, path, "name")
    if name is None:
        raise ctx.error(path, "missing 'name' in [package]", hint='add name = "mylib"')
    _check_c_name(ctx, path + ("name",), name, "package name", cxx=True)
    _check_header_name(ctx, path + ("name",), name)
    if len(name) > MAX_PACKAGE_NAME:
        raise ctx.error(path + ("name",), f"package name '{name[:20]}...' has {len(name)} characters; at most "
                        f"{MAX_PACKAGE_NAME} fit in the file names it becomes (include/<name>.h, ...)",
                        hint="pick a shorter name")
    return name, _field(ctx, pkg, path, "version", "0.1.0", _VERSION, 'digits and dots, like "0.1.0"')


def _build(ctx: _Ctx, table: dict, given_target: str | None = None) -> BuildSpec:
    path, default = ("build",), BuildSpec()
    _check_keys(ctx, path, table, BUILD_KEYS)
    backend = _field(ctx, table, path, "backend", default.backend, BACKENDS)
    dtype = _field(ctx, table, path, "dtype", default.dtype, tuple(FLOAT_DTYPES))
    target = _field(ctx, table, path, "target", default.target, _TARGET, '"host" or a triple like "aarch64-linux-gnu"')
    from .compile.targets import get_target
    get_target(target, ctx.loc(path + ("target",)) if "target" in table else None)
    cpu = _field(ctx, table, path, "cpu", default.cpu, _CPU, 'a -march value such as "native" or "x86-64-v3"')
    if cpu:  # (armv8.2-a with --target aarch64-linux-gnu: checked against that target's compiler, not the host's)
        _check_cpu(ctx, path + ("cpu",), cpu, get_target(given_target or target))
    threads = table.get("threads", default.threads)
    if type(threads) is not int or not 0 <= threads <= 1024:
        raise ctx.error(path + ("threads",), f"'threads' in [build] must be an integer from 0 to 1024, got {threads!r}",
                        hint="0 or 1: single-threaded and runtime-free (the default); "
                        "N > 1: the calling thread and N - 1 POSIX threads")
    weights = _field(ctx, table, path, "weights", default.weights, WEIGHTS)
    werror = table.get("werror", default.werror)
    if type(werror) is not bool:
        raise ctx.error(path + ("werror",), f"'werror' in [build] must be true or false, got {werror!r}",
                        hint="true (the default): warnings stop the build; false: they are only printed in the log")
    optimize = _field(ctx, table, path, "optimize", default.optimize, OPTIMIZE)
    return BuildSpec(backend, dtype, target, cpu, threads, weights, werror, optimize)


def check_cpu(m: "Manifest", target) -> None:
    """[build] cpu checked against another target's C++ compiler (package --target): an error at the key."""
    _check_cpu(_Ctx(str(m.path), m.text), ("build", "cpu"), m.build.cpu, target)


def _check_cpu(ctx: _Ctx, path: Path_, cpu: str, target) -> None:
    """A cpu the target's C++ compiler rejects as -march=<cpu> is an error at the key (no compiler: no check)."""
    from .compile.targets import host_cxx, march_rejected

    try:
        command = [target.cxx] if target.cross else host_cxx()
    except KsbuildError:
        return
    hint = march_rejected(tuple(command), target.flags, cpu)
    if hint is not None:
        raise ctx.error(path, f"unknown cpu '{cpu}' in [build]: the C++ compiler for target '{target.name}' "
                        f"({' '.join(command)}) rejects -march={cpu}", hint=hint)


def _kernel(ctx: _Ctx, name: str, spec: Any, root: Path) -> KernelSpec:
    path = ("kernels", name)
    if not isinstance(spec, dict):
        raise ctx.error(path, f"kernel '{name}' must be a table [kernels.{name}], got {type(spec).__name__}")
    _check_c_name(ctx, path, name, "kernel name")
    _check_keys(ctx, path, spec, KERNEL_KEYS)
    python, signature, onnx, torch = (_field(ctx, spec, path, key) for key in ("python", "signature", "onnx", "torch"))
    weights = _field(ctx, spec, path, "weights", None, WEIGHTS)
    semantics = _field(ctx, spec, path, "onnx_semantics", None, ONNX_SEMANTICS)
    sources = [key for key in SOURCE_KEYS if spec.get(key) is not None]
    if len(sources) != 1:
        which = "needs 'python' or 'onnx' or 'torch'" if not sources else \
            f"has both '{sources[0]}' and '{sources[1]}'; give exactly one"
        raise ctx.error(path + ((sources[-1],) if sources else ()), f"kernel '{name}' {which}")
    if python is not None:
        _check_python(ctx, path + ("python",), python, root)
    if torch is not None:
        _check_python(ctx, path + ("torch",), torch, root, "torch", "make")
    if onnx is not None:
        _check_file(ctx, path + ("onnx",), onnx, root, "onnx file")
    if python is None and signature is not None:
        raise ctx.error(path + ("signature",), f"kernel '{name}': 'signature' is for Python kernels; an "
                        f"{'ONNX' if onnx else 'exported torch'} model declares its own inputs and outputs")
    if python is not None and weights is not None:
        raise ctx.error(path + ("weights",), f"kernel '{name}': 'weights' is for ONNX kernels and torch kernels")
    if onnx is None and semantics is not None:
        raise ctx.error(path + ("onnx_semantics",), f"kernel '{name}': 'onnx_semantics' is for ONNX kernels")
    if signature is not None:
        parse_signature(signature, ctx.loc(path + ("signature",)))
    return KernelSpec(name, python, signature, onnx, ctx.loc(path), weights, torch, semantics)


def _check_python(ctx: _Ctx, path: Path_, ref: str, root: Path, key: str = "python", func: str = "function") -> None:
    """A `python` (or `torch`) value is "file.py:function" (an existing file) or "package.module:function"."""
    source, colon, name = ref.rpartition(":")
    if not colon or not source or not _IDENT.match(name):
        raise ctx.error(path, f"'{key}' must be \"file.py:{func}\" or \"module:{func}\", got '{ref}'")
    if source.endswith(".py"):
        _check_file(ctx, path, source, root, "python file")
    elif not _MODULE.match(source):
        raise ctx.error(path, f"'{source}' in '{key}' is neither a .py file nor a dotted module name")


def _check_file(ctx: _Ctx, path: Path_, relative: str, root: Path, what: str) -> None:
    if not (root / relative).is_file():
        raise ctx.error(path, f"{what} '{relative}' not found (looked for {root / relative})")


def _export(ctx: _Ctx, name: str, text: Any, kernels: dict[str, KernelSpec]) -> ExportSpec:
    path = ("exports", name)
    _check_c_name(ctx, path, name, "export name", cxx=True)
    if not isinstance(text, str):
        raise ctx.error(path, f"export '{name}' must be a string such as \"vmap(f)\", got {type(text).__name__}")
    loc = ctx.loc(path)
    return ExportSpec(name, parse_transform(text, loc, kernels), text, loc)


@dataclass(frozen=True)
class _Src:
    """Maps columns of a parsed string to Locations in the manifest line that holds it."""
    loc: Location
    start: int | None  # the column in loc.source_line of column 0 of the parsed source

    @staticmethod
    def of(loc: Location, text: str, shift: int) -> "_Src":
        line = loc.source_line or ""
        idx = line.find(text, line.find("=", loc.col) + 1) if text else -1
        return _Src(loc, idx + shift if idx >= 0 else None)

    def at(self, col: int, end: int) -> Location:
        if self.start is None:
            return self.loc
        return replace(self.loc, col=max(self.start + col, 0), end_col=self.start + end)

    def error(self, node: ast.AST, message: str, hint: str | None = None) -> KsbuildError:
        one_line = getattr(node, "lineno", 0) == 1 == getattr(node, "end_lineno", 0)
        loc = self.at(node.col_offset, node.end_col_offset) if one_line else self.loc  # type: ignore[attr-defined]
        return KsbuildError(message, loc, hint)

    def syntax_error(self, what: str, text: str, e: SyntaxError) -> KsbuildError:
        loc = self.at(e.offset - 1, e.offset) if e.lineno == 1 and e.offset else self.loc
        return KsbuildError(f"syntax error in {what} '{text}': {e.msg}", loc)


def parse_transform(text: str, loc: Location, kernels: Iterable[str]) -> TExpr:
    """Parse a transformation expression such as "vjp(vmap(relu3))" over the named kernels."""
    src = _Src.of(loc, text, len(text) - len(text.lstrip()))
    try:
        return _texpr(ast.parse(text.lstrip(), mode="eval").body, src, tuple(kernels))
    except SyntaxError as e:
        raise src.syntax_error("transformation expression", text, e) from None


def _texpr(node: ast.expr, src: _Src, kernels: tuple[str, ...]) -> TExpr:
    if isinstance(node, ast.Name) and node.id in kernels:
        return TExpr("kernel", node.id)
    if isinstance(node, ast.Name):
        hint = f"'{node.id}' is a transformation; apply it to a kernel: {node.id}(f)" if node.id in TRANSFORMS else None
        raise src.error(node, f"unknown kernel '{node.id}'; defined kernels: {', '.join(kernels) or '(none)'}", hint)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return _transform(node, node.func.id, src, kernels)
    raise src.error(node, f"expected a kernel name or a transformation such as vmap(f), got '{ast.unparse(node)}'")


def _transform(node: ast.Call, kind: str, src: _Src, kernels: tuple[str, ...]) -> TExpr:
    if kind not in TRANSFORMS:
        raise src.error(node.func, f"unknown transformation '{kind}'; valid transformations: {', '.join(TRANSFORMS)}")
    if len(node.args) != 1 or isinstance(node.args[0], ast.Starred):
        raise src.error(node, f"wrong number of arguments: {kind} takes exactly one function, got {len(node.args)}")
    in_axes = argnums = None
    primals = False
    allowed = ("in_axes",) if kind == "vmap" else ("primals", "argnums") if kind == "jvp" else ("argnums",)
    for kw in node.keywords:
        if kw.arg not in allowed:
            raise src.error(kw, f"unexpected keyword argument '{kw.arg}' to {kind}; {kind} takes only "
                                f"{' or '.join(allowed)}")
        if kind == "vmap":
            in_axes = _in_axes(kw.value, src)
        elif kw.arg == "primals":
            primals = _flag(kw, src)
        else:
            argnums = _argnums(kw.value, src)
    return TExpr(kind, arg=_texpr(node.args[0], src, kernels), in_axes=in_axes, argnums=argnums, primals=primals)


def _flag(kw: ast.keyword, src: _Src) -> bool:
    """primals=True or primals=False."""
    if not (isinstance(kw.value, ast.Constant) and type(kw.value.value) is bool):
        raise src.error(kw.value, f"bad {kw.arg} '{ast.unparse(kw.value)}': True or False")
    return kw.value.value


def _argnums(node: ast.expr, src: _Src) -> tuple[int, ...]:
    """argnums=(0, 2) or argnums=1: the positions of the arguments to differentiate."""
    elts = node.elts if isinstance(node, ast.Tuple) else [node]
    if not elts or not all(isinstance(e, ast.Constant) and type(e.value) is int and e.value >= 0 for e in elts):
        raise src.error(node, f"bad argnums '{ast.unparse(node)}': an integer >= 0 or a tuple of them")
    nums = tuple(e.value for e in elts)  # type: ignore[attr-defined]
    if len(set(nums)) != len(nums):
        raise src.error(node, f"bad argnums '{ast.unparse(node)}': an argument is listed twice")
    return nums


def _in_axes(node: ast.expr, src: _Src) -> tuple[int | None, ...] | None:
    """A tuple with an int >= 0 or None per argument; a single 0 means the default (all 0)."""
    elts = node.elts if isinstance(node, ast.Tuple) else [node]
    for e in elts:
        if not (isinstance(e, ast.Constant) and (e.value is None or type(e.value) is int and e.value >= 0)):
            raise src.error(e, f"bad in_axes entry '{ast.unparse(e)}': each entry must be an integer >= 0 or None")
    axes = tuple(e.value for e in elts)  # type: ignore[attr-defined]
    if all(a is None for a in axes) or (not isinstance(node, ast.Tuple) and axes != (0,)):
        raise src.error(node, f"bad in_axes '{ast.unparse(node)}': map at least one argument; a single value "
                        "must be 0", hint="give one entry per argument, e.g. in_axes=(0, None)")
    return axes if isinstance(node, ast.Tuple) else None


def parse_signature(text: str, loc: Location) -> tuple[list[tuple[str, Type]], list[Type] | None]:
    """Parse "(x: f32, w: f32[n, 3]) -> f32" into [(name, type)] parameters and result types; without `-> ...`
    the results are None (what the kernel returns)."""
    src = _Src.of(loc, text, -len("def _"))
    try:
        body = ast.parse(f"def _{text}: pass").body
    except SyntaxError as e:
        raise src.syntax_error("signature", text, e) from None
    fn = body[0]
    assert isinstance(fn, ast.FunctionDef)
    results = fn.returns.elts if isinstance(fn.returns, ast.Tuple) else [fn.returns]
    if len(body) > 1 or len(fn.body) > 1 or not results:
        raise KsbuildError(f"a signature must look like '(x: f32, w: f32[n, 3]) -> f32', got '{text}'", loc)
    return _params(fn.args, src), None if fn.returns is None else [_type(n, src) for n in results]


def _params(args: ast.arguments, src: _Src) -> list[tuple[str, Type]]:
    if args.posonlyargs or args.vararg or args.kwonlyargs or args.kwarg or args.defaults:
        raise KsbuildError("a signature takes only plain parameters 'name: type'", src.loc)
    params: list[tuple[str, Type]] = []
    for a in args.args:
        if a.annotation is None:
            raise src.error(a, f"parameter '{a.arg}' needs a type, e.g. '{a.arg}: f32'")
        if a.arg in dict(params):
            raise src.error(a, f"duplicate parameter '{a.arg}'")
        params.append((a.arg, _type(a.annotation, src)))
    return params


def _type(node: ast.expr, src: _Src) -> Type:
    """f32 | f64 | i32 | i64 | bool, optionally followed by [dims]."""
    base = node.value if isinstance(node, ast.Subscript) else node
    if not isinstance(base, ast.Name) or base.id not in SIGNATURE_DTYPES:
        raise src.error(base, f"unknown type '{ast.unparse(base)}'; valid types: {', '.join(SIGNATURE_DTYPES)}",
                        "e.g. f32[n, 3]")
    if not isinstance(node, ast.Subscript):
        return Type(base.id)
    dims = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    return Type(base.id, tuple(_dim(d, src) for d in dims))


def _dim(node: ast.expr, src: _Src) -> int | str:
    if isinstance(node, ast.Name) and reserved_dim_name(node.id):
        raise src.error(node, f"{reserved_dim_name(node.id)}: dims become parameters of the C functions",
                        f"rename the dim, e.g. '{node.id.lower()}_'")
    if isinstance(node, ast.Name):
        return node.id
    value = node.value if isinstance(node, ast.Constant) else None
    if type(value) is int and value > 0:
        return value
    raise src.error(node, f"bad dimension '{ast.unparse(node)}': a dimension is a positive integer or a name")
