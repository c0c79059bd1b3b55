"""Run the ONNX backend node tests through ksbuild and tabulate the results per op type.

The node tests ship with the `onnx` package (`onnx.backend.test.loader.load_model_tests(kind=
"node")`): one small model per case with inputs and expected outputs. Inputs that ksbuild
needs at compile time (a Reshape's shape, Slice bounds, ...) are made initializers holding
the test's values, as they are in exported models. Each case is imported and either run in
the reference interpreter or compiled (many cases per package) and compared with the
expected outputs under the test's tolerances. Every case is imported with onnx_semantics =
"reference": the expected outputs are onnx.reference's, and where onnxruntime computes
differently (docs/onnx.md, "Where onnxruntime and onnx.reference differ") the tests follow it.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import KsbuildError

PASS, FAIL, UNSUPPORTED = "passed", "failed", "unsupported"
SEMANTICS = "reference"  # the kernels' onnx_semantics: the node tests' expected outputs are onnx.reference's


@dataclass
class Case:
    """One node test: its name, op type, model and data sets ((inputs, outputs) pairs)."""

    name: str
    op: str
    model: object
    data: list
    rtol: float
    atol: float
    frozen: list[str] = field(default_factory=list)
    shaped: bool = False  # a sequence input's element shape comes from the data (complete_shapes)


@dataclass
class Result:
    case: str
    op: str
    status: str
    detail: str = ""
    max_error: float = 0.0
    shaped: bool = False  # (Case.shaped)


def op_names() -> dict[str, str]:
    """snake_case name (and the lowercase name) -> ONNX op type, for every op the onnx package defines."""
    import onnx.defs
    names = {}
    for s in onnx.defs.get_all_schemas_with_history():
        names[re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", s.name).lower()] = s.name
        names.setdefault(s.name.lower(), s.name)
    return names


def op_of(test_name: str, model, names: dict[str, str]) -> str:
    """The op a test exercises: the longest op name its name starts with, else the model's only op type."""
    stem = test_name[len("test_"):] if test_name.startswith("test_") else test_name
    ops = {nd.op_type for nd in model.graph.node}
    best = max((k for k in names if (stem == k or stem.startswith(k + "_") or stem.startswith(k) and
                                      names[k] in ops)), key=len, default=None)
    if best:
        return names[best]
    return ops.pop() if len(ops) == 1 else model.graph.node[-1].op_type


def load_cases(filter_op: str | None = None, names: list[str] | None = None) -> list[Case]:
    """The node test cases (optionally only those of one op type, or with the given names)."""
    tests = _node_tests()
    ops = op_names()
    cases = []
    for t in tests:
        op = op_of(t.name, t.model, ops)
        if filter_op and op.lower() != filter_op.lower():
            continue
        if names is not None and t.name not in names:
            continue
        data = [([_array(v) for v in ins], [_array(v) for v in outs]) for ins, outs in (t.data_sets or [])]
        model = complete_shapes(t.model, data)
        cases.append(Case(t.name, op, model, data, t.rtol, t.atol, shaped=model is not t.model))
    return cases


def _array(v):
    """A test value as a numpy array (some data sets hold TensorProtos; sequences stay lists)."""
    from onnx import TensorProto, numpy_helper
    if isinstance(v, TensorProto):
        return numpy_helper.to_array(v)
    if isinstance(v, list):
        return [_array(e) for e in v]
    return v


@functools.lru_cache(maxsize=1)
def _node_tests():
    """The onnx package's node tests (generated once per process: it takes a while)."""
    import warnings

    from onnx.backend.test.loader import load_model_tests
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return load_model_tests(kind="node")


# ---- preparing a case --------------------------------------------------------------------------------

def freeze_inputs(model, names: list[str], values: dict[str, np.ndarray]):
    """A copy of the model where the named graph inputs are initializers holding `values`."""
    from onnx import ModelProto, numpy_helper
    m = ModelProto()
    m.CopyFrom(model)
    keep = [vi for vi in m.graph.input if vi.name not in names]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    for name in names:
        m.graph.initializer.append(numpy_helper.from_array(np.asarray(values[name]), name))
    return m


def ancestors(model, value: str) -> list[str]:
    """The graph inputs a value is computed from."""
    inputs = {vi.name for vi in model.graph.input}
    producer = {o: nd for nd in _all_nodes(model.graph) for o in nd.output}
    seen, stack, found = set(), [value], []
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in inputs:
            found.append(v)
        elif v in producer:
            stack.extend(_reads(producer[v]))
    return found


def _all_nodes(g) -> list:
    """The nodes of a graph and of every subgraph in it."""
    out = []
    for nd in g.node:
        out.append(nd)
        for a in nd.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                out += _all_nodes(sub)
    return out


def _reads(node) -> list[str]:
    """The values a node reads, including those its subgraphs read from outside."""
    names = [i for i in node.input if i]
    for a in node.attribute:
        for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
            for nd in g.node:
                names += _reads(nd)
    return names


def import_case(case: Case, float_dtype: str = "f32", semantics: str = SEMANTICS):
    """(IR function, the case's model with frozen inputs); frozen inputs come from the first data set."""
    from ..frontends.onnx import import_model
    from ..frontends.onnx.node import NeedsConstant
    first = dict(zip([vi.name for vi in case.model.graph.input], case.data[0][0])) if case.data else {}
    model = freeze_inputs(case.model, case.frozen, first) if case.frozen else case.model
    for _ in range(8):
        try:
            f, _ = import_model(Path(f"{case.name}.onnx"), case.name, float_dtype, "embed", model, semantics)
            return f, model
        except NeedsConstant as e:
            found = [n for v in e.sources for n in ancestors(model, v)]
            names = [n for n in dict.fromkeys(found) if n in first and n not in case.frozen]
            if not names:
                raise
            case.frozen += names
            model = freeze_inputs(case.model, case.frozen, first)
    raise KsbuildError("too many inputs must be known at compile time")


def case_inputs(case: Case, data_inputs) -> list:
    """A data set's inputs as the C ABI takes them: frozen ones left out, a sequence stacked, an optional
    value followed by whether it is there."""
    out = []
    for vi, v in zip(case.model.graph.input, data_inputs):
        if vi.name not in case.frozen:
            out += _abi_value(vi.type, v)
    return out


def _abi_value(t, v) -> list:
    kind = t.WhichOneof("value")
    if kind == "optional_type":
        inner = t.optional_type.elem_type
        return _abi_value(inner, v if v is not None else _nothing(inner)) + [np.bool_(v is not None)]
    if kind == "sequence_type":
        return [np.stack(v) if len(v) else _nothing(t)]
    return [v]


def _nothing(t) -> np.ndarray:
    """The value passed for an absent optional or an empty sequence: no elements (symbolic dims 0)."""
    from onnx import helper
    seq = t.WhichOneof("value") == "sequence_type"
    tt = (t.sequence_type.elem_type if seq else t).tensor_type
    shape = [d.dim_value if d.HasField("dim_value") else 0 for d in tt.shape.dim]
    return np.zeros(([0] if seq else []) + shape, helper.tensor_dtype_to_np_dtype(tt.elem_type))


def graph_outputs(case: Case, outs: list) -> list:
    """The export's results grouped back into graph outputs: a sequence as a list of its elements, an
    optional one as its value or None."""
    from ..frontends.onnx.graph import unwrap_type
    rest, grouped = list(outs), []
    for vi in case.model.graph.output:
        _, seq, optional = unwrap_type(vi.type)
        value = rest.pop(0)
        if seq:
            value = list(np.asarray(value))
        if optional and not bool(np.asarray(rest.pop(0))):
            value = None
        grouped.append(value)
    return grouped


def complete_shapes(model, data):
    """A copy of the model where the elements of a sequence input that have no shape get the one all of the
    test's elements have (ksbuild stacks them, so it needs their rank); the model itself when none lacks it."""
    from onnx import ModelProto

    from ..frontends.onnx.graph import unwrap_type
    todo = []
    for k, vi in enumerate(model.graph.input):
        t, seq, _ = unwrap_type(vi.type)
        if seq and not t.tensor_type.HasField("shape"):
            shapes = {np.shape(e) for ins, _ in data if k < len(ins) and ins[k] is not None for e in ins[k]}
            if len(shapes) == 1:
                todo.append((k, shapes.pop()))
    if not todo:
        return model
    m = ModelProto()
    m.CopyFrom(model)
    for k, shape in todo:
        dims = unwrap_type(m.graph.input[k].type)[0].tensor_type.shape
        for d in shape:
            dims.dim.add().dim_value = int(d)
    return m


def compare(got, want, rtol: float, atol: float) -> tuple[bool, float, str]:
    """(ok, max error, why not) of one output against the expected one."""
    want = np.asarray(want)
    got = np.asarray(got)
    if want.dtype == object or want.dtype.kind in "USO":  # strings
        same = got.shape == want.shape and got.astype(str).tolist() == want.astype(str).tolist()
        return same, 0.0, "strings differ"
    if got.shape != want.shape:
        return False, float("inf"), f"shape {list(got.shape)} instead of {list(want.shape)}"
    if want.dtype.kind in "biu":
        bad = got.astype(np.int64) != want.astype(np.int64) if want.dtype.kind != "b" else got != want
        err = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) if got.size else 0.0
        return not np.any(bad), err, "values differ"
    g, w = got.astype(np.float64), want.astype(np.float64)
    nan = np.isnan(w)
    if np.any(np.isnan(g) != nan):
        return False, float("nan"), "NaN at different positions"
    same = (g == w) | nan
    with np.errstate(invalid="ignore"):
        diff = np.where(same, 0.0, np.abs(g - w))
    ok = bool(np.all(diff <= atol + rtol * np.abs(np.where(nan, 0.0, w))))
    return ok, float(np.max(diff)) if diff.size else 0.0, "values differ"


def compare_value(got, want, rtol: float, atol: float) -> tuple[bool, float, str]:
    """compare, also for a sequence (a list: element by element) and an absent optional (None)."""
    if want is None or got is None:
        return want is None and got is None, 0.0, "an optional value is there in one and not in the other"
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return False, float("inf"), f"a sequence of {len(got) if isinstance(got, list) else 'no'} elements " \
                                        f"instead of {len(want)}"
        results = [compare(g, w, rtol, atol) for g, w in zip(got, want)]
        bad = [r for r in results if not r[0]]
        return not bad, max((r[1] for r in results), default=0.0), bad[0][2] if bad else ""
    return compare(got, want, rtol, atol)


def check_outputs(case: Case, outs: list, want: list) -> Result:
    worst = 0.0
    outs = graph_outputs(case, outs)
    if len(outs) != len(want):
        return Result(case.name, case.op, FAIL, f"{len(outs)} outputs instead of {len(want)}")
    for i, (g, w) in enumerate(zip(outs, want)):
        ok, err, why = compare_value(g, w, case.rtol, case.atol)
        worst = max(worst, err) if not np.isnan(err) else err
        if not ok:
            return Result(case.name, case.op, FAIL, f"output {i}: {why}", err)
    return Result(case.name, case.op, PASS, "", worst, case.shaped)


def run_interpreted(case: Case, semantics: str = SEMANTICS) -> Result:
    """Import the case and run it in the reference interpreter."""
    from ..ir.interp import eval_func
    try:
        f, _ = import_case(case, semantics=semantics)
    except KsbuildError as e:
        return Result(case.name, case.op, UNSUPPORTED, short(e))
    if not case.data:
        return Result(case.name, case.op, UNSUPPORTED, "no test data")
    result = None
    for inputs, want in case.data:
        try:
            with np.errstate(all="ignore"):
                outs = eval_func(f, case_inputs(case, inputs))
        except KsbuildError as e:
            return Result(case.name, case.op, FAIL, f"at run time: {short(e)}")
        except Exception as e:  # noqa: BLE001  a ksbuild bug: report it as a failure of this case
            return Result(case.name, case.op, FAIL, f"internal error: {type(e).__name__}: {e}"[:200])
        result = check_outputs(case, outs, want)
        if result.status != PASS:
            return result
    return result


def short(e: KsbuildError) -> str:
    """An error message without its location prefix (the report groups by op already)."""
    text = e.message
    return text if len(text) < 160 else text[:157] + "..."


# ---- compiled mode ------------------------------------------------------------------------------------

def _bits(arr: np.ndarray, dtype: str) -> np.ndarray:
    """A test array as the C ABI wants it: the narrow types as their raw bits."""
    from ..ir.types import STORAGE_DTYPES
    arr = np.asarray(arr)
    if dtype in STORAGE_DTYPES and dtype != "f16":
        return arr.view(np.uint16 if arr.dtype.itemsize == 2 else np.uint8)
    return arr


def _from_bits(arr: np.ndarray, dtype: str) -> np.ndarray:
    from ..ir.types import STORAGE_DTYPES, numpy_dtype
    if dtype in STORAGE_DTYPES and dtype != "f16":
        return arr.view(numpy_dtype(dtype))
    return arr


def run_compiled(cases: list[Case], work: Path, backend: str = "plain", progress=print) -> list[Result]:
    """Import every case, compile the importable ones into packages of BATCH cases and run them."""
    results: dict[str, Result] = {}
    ready: list[tuple[Case, object, object]] = []
    for c in cases:
        try:
            f, model = import_case(c)
        except KsbuildError as e:
            results[c.name] = Result(c.name, c.op, UNSUPPORTED, short(e))
            continue
        if not c.data:
            results[c.name] = Result(c.name, c.op, UNSUPPORTED, "no test data")
            continue
        ready.append((c, f, model))
    for start in range(0, len(ready), BATCH):
        chunk = ready[start:start + BATCH]
        progress(f"onnx-report: compiling cases {start + 1}-{start + len(chunk)} of {len(ready)}")
        for r in _run_batch(chunk, work / f"batch{start // BATCH}", backend):
            results[r.case] = r
    return [results[c.name] for c in cases]


BATCH = 160


def _run_batch(chunk, folder: Path, backend: str) -> list[Result]:
    """Build one package of these cases and run each; a batch that does not build is split in two."""
    from ..packaging.loader import build
    try:
        pkg = build(_write_package(chunk, folder), backend=backend)
    except Exception as e:  # noqa: BLE001  a C++ build error: find the case that causes it
        if len(chunk) == 1:
            c = chunk[0][0]
            return [Result(c.name, c.op, FAIL, f"does not compile: {str(e).splitlines()[0][:150]}")]
        half = len(chunk) // 2
        return _run_batch(chunk[:half], folder / "a", backend) + _run_batch(chunk[half:], folder / "b", backend)
    return [_run_one(pkg, i, c, f) for i, (c, f, _) in enumerate(chunk)]


def _write_package(chunk, folder: Path) -> Path:
    import hashlib

    from onnx import save
    folder.mkdir(parents=True, exist_ok=True)
    names = "".join(c.name for c, _, _ in chunk)
    lines = [f'[package]\nname = "onnx_conf_{hashlib.sha256(names.encode()).hexdigest()[:10]}"\n', "[kernels]"]
    exports = ["\n[exports]"]
    for i, (c, _, model) in enumerate(chunk):
        save(model, str(folder / f"c{i}.onnx"))
        lines.append(f'c{i} = {{ onnx = "c{i}.onnx", onnx_semantics = "{SEMANTICS}" }}')
        exports.append(f'c{i} = "c{i}"  # {c.name}')
    (folder / "manifest.toml").write_text("\n".join(lines + exports) + "\n")
    return folder / "manifest.toml"


def _run_one(pkg, i: int, case: Case, f) -> Result:
    export = getattr(pkg, f"c{i}")
    in_types = [p.type.dtype for p in f.params]
    out_types = [r.type.dtype for r in f.results]
    result = None
    for inputs, want in case.data:
        args = [_bits(a, t) for a, t in zip(case_inputs(case, inputs), in_types)]
        try:
            outs = export(*args)
        except Exception as e:  # noqa: BLE001  a call error (bad status, shapes): a failure of this case
            return Result(case.name, case.op, FAIL, f"call failed: {e}"[:200])
        outs = list(outs) if isinstance(outs, tuple) else [outs]
        outs = [_from_bits(np.asarray(o), t) for o, t in zip(outs, out_types)]
        result = check_outputs(case, outs, want)
        if result.status != PASS:
            return result
    return result
