"""Render the standalone CMake project of a package: sources, header, CMake, share files."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import jinja2

from ..codegen.data import DataSection
from ..codegen.epilogue import EpilogueForms
from ..codegen.helpers import Helpers
from ..codegen.viewmodel import ExportView, export_view
from ..compile.backends import OWN_HEADERS, get_backend
from ..compile.targets import TARGETS, Target, cpu_variants
from ..errors import KsbuildError
from ..exports import Export
from ..manifest import Manifest
from ..resources import VERSION, resource_dir


def _env(folder: str) -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(resource_dir(folder))),
                              undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                              trim_blocks=False, lstrip_blocks=False)


def export_doc(e: Export, m: Manifest) -> list[str]:
    """The comment lines documenting an export in the header and source."""
    f = e.func
    ins = ", ".join(f"{p.hint or 'x'}: {p.type}" for p in f.params)
    outs = ", ".join(str(t) for t in f.out_types)
    src = e.kernel.python or e.kernel.onnx or e.kernel.torch
    lines = [f"{e.name} = {e.spec.text}   (kernel {e.kernel.name} from {src})", f"  ({ins}) -> ({outs})"]
    if e.kernel.onnx is not None:
        external = (e.kernel.weights or m.build.weights) == "external"
        lines.append("  ONNX: graph inputs, then " + ("the float initializers (weights) in the model's order, "
                     "passed by the caller" if external else "nothing else: the initializers are linked into "
                     "the library") + "; results are the graph outputs")
        lines += [f"  {note}" for note in e.notes]
    if e.kernel.torch is not None:
        external = (e.kernel.weights or m.build.weights) == "external"
        lines.append("  torch.export: the forward's inputs, then " + ("the float parameters and buffers in "
                     "named_parameters() then named_buffers() order, passed by the caller" if external else
                     "nothing else: parameters and buffers are linked into the library") +
                     "; results are the forward's outputs, flattened")
    return lines


def views(m: Manifest, exports: list[Export], data: DataSection | None = None,
          forms: EpilogueForms | None = None, helpers: Helpers | None = None, vectors: bool = True) -> list[ExportView]:
    """The view of every export (`data`, `forms` and `helpers` collect what they share in the source file;
    `vectors`: the target has a vector unit, Target.vectors)."""
    out = []
    for e in exports:
        v = export_view(m.name, e.name, e.func, export_doc(e, m), data, forms, m.root, helpers, vectors)
        v.doc[1] = _signature_line(v, e.func)
        out.append(v)
    if forms is not None:  # (the epilogues' sites are known for the whole package now)
        for v in out:
            v.body = forms.resolve(v.body)
    return out


def _signature_line(v: ExportView, f) -> str:
    """The doc line of an export's inputs and results by the names of its C parameters (which differ from the
    kernel's where two would clash, dx and dx1, or one is a C++ name: workspace -> x1; the kernel's name is
    shown then, as the Python API takes it)."""
    ins = [a for a in v.args if a.role == "in"]
    shown = ", ".join(f"{a.name}: {p.type}" + (f" (in Python: {a.param})" if a.param and a.param != a.name else "")
                      for a, p in zip(ins, f.params))
    return f"  ({shown}) -> ({', '.join(str(t) for t in f.out_types)})"


def describe(m: Manifest, vs: list[ExportView], exports: list[Export]) -> dict:
    """The JSON description of every export's C signature (share/P/P.json)."""
    out = {"package": m.name, "version": m.version, "ksbuild": VERSION, "exports": {}}
    for v, e in zip(vs, exports):
        out["exports"][v.name] = {
            "symbol": v.c_name, "kind": v.kind, "expression": e.spec.text, "kernel": e.kernel.name,
            "dims": v.dims, "returns": v.ret, "workspace": v.needs_workspace,
            "args": _args(v, dict(e.defaults)),
            "results": [str(t) for t in e.func.out_types],
            "in_place": v.in_place,  # the inputs the one output may be (the same buffer; codegen/aliasing.py)
        }
    return out


def _args(v: ExportView, defaults: dict[int, object]) -> list[dict]:
    """The export's C parameters; an input keeps its name in the kernel's source (param) and its default."""
    out, k = [], 0
    for a in v.args:
        d = {"name": a.name, "role": a.role, "dtype": a.dtype, "shape": a.shape}
        d |= {"param": a.param} if a.param else {}
        if a.role == "in":
            if k in defaults:
                d["default"] = defaults[k]
            k += 1
        out.append(d)
    return out


def target_record(t: Target) -> dict:
    """What share/P/target.json records about the target the tree was built for."""
    return {"target": t.name, "triple": t.triple, "system": t.system, "processor": t.processor,
            "flags": list(t.flags), "link_flags": list(t.link_flags)}


KERNEL_PART_CALLS = {
    "products": re.compile(r"\bks::(tiled_gemm|packed_gemm|gemm|parts::(tiled_gemm|packed_gemm))<\s*(?P<type>\w+)"),
    "convs": re.compile(r"\bks::(conv|conv_as|conv_rows|conv_winograd|conv_depthwise|conv_dots|conv_pointwise|"
                        r"winograd_kernel|max_pool|parts::(conv|depthwise|winograd))<\s*(?P<type>\w+)"),
    "int8": re.compile(r"\bks::(qconv|qconv_depthwise|qmatmul|qmatmul_folded|qlookup|qsoftmax)<\s*(?P<type>\w+)"),
}
"""The kernel layer's parts (ks/kernels.h, src/ks/kernels.cpp: one object each per level) and the calls in generated
code that need each: a package of matrix products alone compiles the products' part only (a quarter of the layer's
compile), a package of loops alone none. The products and convs parts are one object per element type (the type a
call names first: products32 for float, products64 for double), so that a package of float models (ONNX and torch
models) compiles no double kernel (half the convolutions' compile, 20-45 s of CPU per level at -O3). The convs part
holds the products of its type too (one translation unit: they share the register tiles and GCC's local copies of
them, which two objects would each carry). ks::parts:: (`threads = N`) are templates of the generated code: each
wraps a product or a convolution and needs what it wraps (a threaded package of products alone compiled the whole
float layer before). The int8 part is one object per activation type, the type its calls name first (int8u for
uint8_t, int8s for int8_t, either with outputs of both types): a package of uint8 activations (onnxruntime's
quantize_static) compiles 40% less (x86-64-v3: 9.7 s of CPU against 17.8 for both types). ks::qpack_rows and
ks::qpack_columns are inline functions of the package's own code, in no part."""
PART_TYPES = {"products": {"float": "32", "double": "64"}, "convs": {"float": "32", "double": "64"},
              "int8": {"uint8_t": "u", "int8_t": "s"}}
"""A part's objects by the element type its calls name first (another type, or one the regex cannot read: all)."""


def kernel_parts(source: str) -> tuple[str, ...]:
    """The parts of the kernel layer a generated source calls, in the order the project compiles them (a type's convs
    part stands for its products too)."""
    parts: list[str] = []
    for part, call in KERNEL_PART_CALLS.items():
        types = PART_TYPES[part]
        named = {types.get(found["type"], "") for found in call.finditer(source)}
        parts += [f"{part}{t}" for t in types.values() if t in named or "" in named]
    return tuple(p for p in parts if not (p.startswith("products") and f"convs{p[-2:]}" in parts))


def render_project(m: Manifest, exports: list[Export], out: Path, target: Target = TARGETS["host"]) -> None:
    """Write the whole project into `out` (created; must not exist or be empty), built for `target`."""
    from ..deep import deeply
    deeply(_render_project, m, exports, out, target)


def kernel_objects(variants: tuple[str, ...], cpu: str, parts: tuple[str, ...]) -> list[str]:
    """The kernel layer objects a project takes from its kernel cache folder unless its CPU setting is changed:
    kernels_<level>_<part>.o per level and part, named as the CMake function names them (MAKE_C_IDENTIFIER of the
    -march); a portable build's int8 parts below its highest level kernels_<level>_<part>_own.o (the register tiles
    of that level alone: ks/qconv.h, KS_QTILE_OWN_LEVEL)."""
    levels = [v.replace("-", "_") for v in variants] or [re.sub(r"^(?=\d)", "_", re.sub(r"\W", "_", cpu)) or "baseline"]
    own = set(levels[:-1]) if variants else set()
    return [f"kernels_{level}_{part}{'_own' if level in own and part.startswith('int8') else ''}.o"
            for level in levels for part in parts]


def extern_functions(exports: list[Export]) -> tuple[dict[str, tuple[str, object]], dict[str, Path]]:
    """The external C functions the exports call (ksbuild.extern: the prims' `declare` rule), C name -> (declaration,
    the location of a call), and the user's files that define them by their name in the project (src/extern/<file>)."""
    from ..transforms.rewrite import walk_funcs

    decls, files = {}, {}
    for e in exports:
        for g in walk_funcs(e.func):
            for eqn in g.eqns:
                if eqn.prim.declare is not None:
                    decl, sources = eqn.prim.declare(eqn)
                    decls.setdefault(eqn.params["c_name"], (decl, eqn.loc))
                    files.update({f"src/extern/{Path(f).name}": Path(f) for f in sources})
    return decls, files


def _extern_view(exports: list[Export], vs: list[ExportView]) -> dict:
    """What the templates print of the external C functions: declarations, and the sources CMake compiles; an error
    for one named as a function of the package is."""
    decls, files = extern_functions(exports)
    ours = {name for v in vs for name in (v.c_name, f"{v.c_name}_workspace_size")}
    for c_name, (_, loc) in decls.items():
        if c_name in ours:
            raise KsbuildError(f"the external C function '{c_name}' has the name of a C function of the package (an "
                               "export's)", loc, hint="give it another name with ksbuild.extern(c_name=...), or "
                                                      "rename the package or the export")
    compiled = [rel for rel in files if not rel.endswith((".h", ".hh", ".hpp"))]
    return dict(extern_decls=[d for d, _ in decls.values()], extern_files=files, extern_sources=compiled,
                extern_c=any(rel.endswith(".c") for rel in compiled))


def _render_project(m: Manifest, exports: list[Export], out: Path, target: Target) -> None:
    data, forms, helpers = DataSection.for_target(m.name, target.vectors), EpilogueForms(), Helpers()
    vs = views(m, exports, data, forms, helpers, target.vectors)
    # (a package of scalar functions only is not worth compiling several times)
    # (one build for size, and for a package of scalar functions only: not worth compiling several times)
    several = any(v.kind == "tensor" for v in vs) and m.build.optimize == "speed"
    backend = get_backend(m.build.backend).located()
    variants = cpu_variants(target, m.build.cpu, m.build.backend) if several else ()
    ctx = dict(variants=variants, variant_spaces=[f"{m.name}_{v.replace('-', '_')}" for v in variants],
               name=m.name, version=m.version, ksbuild_version=VERSION, manifest_name=m.path.name,
               exports=vs, backend=backend, guard=f"{m.name.upper()}_H_", target=target,
               cpu=m.build.cpu, threads=m.build.threads, werror=m.build.werror, optimize=m.build.optimize,
               data_decls=data.declarations(),
               epilogue_forms=forms.declarations(),
               helpers=helpers.declarations(),
               has_blob=bool(data.blob_size),
               description=f"ksbuild package {m.name}",
               has_bool=any(a.dtype == "bool" for v in vs for a in v.args) or any(v.ret == "bool" for v in vs),
               has_str=any(a.dtype == "str" for v in vs for a in v.args) or any(v.ret == "ks_str" for v in vs),
               **_extern_view(exports, vs))
    t = _env("templates")
    source = t.get_template("source.cpp.j2").render(ctx)
    ctx["kernel_parts"] = kernel_parts(source)
    ctx["kernels"] = bool(ctx["kernel_parts"])
    ctx["kernel_objects"] = kernel_objects(variants, m.build.cpu, ctx["kernel_parts"])
    files = {
        f"include/{m.name}.h": t.get_template("header.h.j2").render(ctx),
        f"src/{m.name}.cpp": source,
        "CMakeLists.txt": t.get_template("CMakeLists.txt.j2").render(ctx),
    }
    if backend.adapter:
        view = ctx | backend.adapter_view(vs)
        files[f"src/{m.name}_{backend.name}.cpp"] = t.get_template(backend.adapter).render(view)
    if variants:
        files[f"src/{m.name}_dispatch.cpp"] = t.get_template("dispatch.cpp.j2").render(ctx)
    d = _env("dist_templates")
    files[f"cmake/{m.name}Config.cmake"] = d.get_template("Config.cmake.j2").render(ctx)
    files[f"cmake/{m.name}ConfigVersion.cmake"] = d.get_template("ConfigVersion.cmake.j2").render(ctx)
    files[f"cmake/{m.name}.pc"] = d.get_template("pkgconfig.pc.j2").render(ctx)
    files[f"share/{m.name}.json"] = json.dumps(describe(m, vs, exports), indent=2) + "\n"
    files["share/manifest.toml"] = m.text
    files["share/target.json"] = json.dumps(target_record(target), indent=2) + "\n"
    if target.cross:
        files["share/toolchain.cmake"] = d.get_template("toolchain.cmake.j2").render(ctx)
    if backend.bridge[0]:
        files[backend.bridge[0]] = backend.bridge[1]
    if data.blob_size:
        files[f"src/{m.name}_data.S"] = data.assembly()
        (out / "src").mkdir(parents=True, exist_ok=True)
        (out / "src" / f"{m.name}_data.bin").write_bytes(data.blob())
    for rel, text in files.items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for rel, source in ctx["extern_files"].items():  # (the user's C sources of the external functions, as they are)
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, out / rel)
    (out / "src/ks").mkdir(parents=True, exist_ok=True)
    for header in sorted((resource_dir("prelude") / "ks").glob("*.[hc]*")):
        if header.name not in OWN_HEADERS or header.name in backend.own_headers:
            shutil.copyfile(header, out / "src/ks" / header.name)
