"""`ksbuild onnx-report`: the ONNX backend node tests through ksbuild, tabulated per op type."""
from __future__ import annotations

import collections
from pathlib import Path

from .onnx_conformance import FAIL, PASS, UNSUPPORTED, Result

COMMON_OPS = (
    "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Exp", "Log", "Neg", "Abs", "Reciprocal", "Relu", "LeakyRelu",
    "Sigmoid", "Tanh", "Erf", "Gelu", "Elu", "HardSigmoid", "HardSwish", "Clip", "Softmax", "LogSoftmax",
    "MatMul", "Gemm", "Einsum", "Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool",
    "BatchNormalization", "LayerNormalization", "InstanceNormalization", "GroupNormalization", "Reshape",
    "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Concat", "Split", "Slice", "Gather", "Shape", "Expand",
    "Where", "Equal", "Less", "Greater", "Not", "Cast", "Constant", "ConstantOfShape", "Range", "ReduceMean",
    "ReduceSum", "ReduceMax", "Identity", "Dropout", "Pad", "Resize", "LSTM", "GRU", "RNN", "CumSum", "ArgMax",
    "TopK", "Tile", "Min", "Max", "Attention",
)
"""The op types real exported models are made of (the target: every case of these passes)."""

DFT_ZERO = ("the expected output holds 1.9e-7 (float32 rounding in onnx.reference) where the exact inverse "
            "transform of the input is 0 (7e-16 in float64), beyond the test's atol of 1e-7; onnxruntime "
            "fails this case too (1.9e-5)")
DEVIATIONS = {
    "test_dft_inverse": DFT_ZERO,
    "test_dft_inverse_opset19": DFT_ZERO,
}
"""Failing cases whose expected outputs ksbuild departs from on purpose: why (they still count as failed)."""
SEMANTICS_CASES = ("test_resize_downsample_scales_linear_align_corners",
                   "test_resize_downsample_scales_cubic_align_corners")
"""The cases that pass only with onnx_semantics = "reference" (checked in tests/test_onnx_conformance.py)."""


def run(filter_op: str | None, mode: str, work: Path, backend: str = "plain", progress=print) -> list[Result]:
    """Run the node tests (one op type, or all) interpreted or compiled."""
    from .onnx_conformance import load_cases, run_compiled, run_interpreted
    progress("onnx-report: loading the ONNX backend node tests")
    cases = load_cases(filter_op)
    if not cases:
        from ..errors import KsbuildError
        from .onnx_conformance import _node_tests, op_names, op_of
        names = op_names()
        ops = sorted({op_of(t.name, t.model, names) for t in _node_tests()})
        raise KsbuildError(f"--filter {filter_op}: no ONNX backend node test has that op type",
                           hint=f"op types with node tests: {', '.join(ops)}")
    progress(f"onnx-report: {len(cases)} case(s), {mode}")
    if mode == "interpreted":
        return [run_interpreted(c) for c in cases]
    return run_compiled(cases, work, backend, progress)


def markdown(results: list[Result], mode: str) -> str:
    """The report: totals, the common ops, then one row per op type and the failing cases with reasons."""
    import onnx
    by_op = collections.defaultdict(list)
    for r in results:
        by_op[r.op].append(r)
    total = collections.Counter(r.status for r in results)
    n = len(results)
    common = [r for r in results if r.op in COMMON_OPS]
    common_pass = sum(r.status == PASS for r in common)
    lines = [
        "# ONNX conformance of ksbuild",
        "",
        f"The ONNX backend node tests of onnx {onnx.__version__} "
        f"(`onnx.backend.test.loader.load_model_tests(kind=\"node\")`), {mode} "
        f"(`ksbuild onnx-report{' --interpreted' if mode == 'interpreted' else ''}`; about ten minutes on two "
        "cores with an empty build cache).",
        "Inputs that ksbuild needs when it compiles (a Reshape's shape, Slice bounds, axes, a Loop's",
        "count) are made initializers holding the test's values, as they are in exported models;",
        "every other input stays a run-time argument. A sequence input whose element type has no",
        "shape gets the shape all of the test's elements have (ksbuild stacks a sequence's elements, so",
        "it needs their rank; a user gives it when exporting); passing cases where this was done: "
        + (", ".join(sorted(r.case for r in results if r.shaped)) or "none") + ".",
        "The expected outputs are onnx.reference's, so every case is compiled with `onnx_semantics = "
        "\"reference\"`. The default, `\"onnxruntime\"`, differs from it in two places, both in Resize given "
        "scales (the output length, and align_corners where length · scale is not whole; docs/onnx.md): "
        f"with the default, these cases fail as they do in onnxruntime: {', '.join(SEMANTICS_CASES)}.",
        "",
        f"**{total[PASS]} of {n} cases pass ({100 * total[PASS] / n:.1f}%)**: {total[FAIL]} fail, "
        f"{total[UNSUPPORTED]} are unsupported.",
        f"The {len(COMMON_OPS)} op types of exported models (`COMMON_OPS` in ksbuild/tools/onnx_report.py): "
        f"{common_pass} of {len(common)} cases pass ({100 * common_pass / max(len(common), 1):.1f}%).",
        "",
        "| op type | cases | passed | failed | unsupported | common |",
        "|---|---:|---:|---:|---:|:---:|",
    ]
    for op in sorted(by_op):
        rs = by_op[op]
        c = collections.Counter(r.status for r in rs)
        lines.append(f"| {op} | {len(rs)} | {c[PASS]} | {c[FAIL]} | {c[UNSUPPORTED]} | "
                     f"{'✓' if op in COMMON_OPS else ''} |")
    bad = [r for r in results if r.status != PASS]
    if bad:
        lines += ["", "## Cases that do not pass", "", "| case | op | status | reason (max error) |",
                  "|---|---|---|---|"]
        for r in sorted(bad, key=lambda r: (r.op, r.case)):
            err = f" ({r.max_error:.3g})" if r.status == FAIL and r.max_error else ""
            why = f"; {DEVIATIONS[r.case]}" if r.case in DEVIATIONS else ""
            lines.append(f"| {r.case} | {r.op} | {r.status} | {r.detail.replace('|', '/')}{err}{why} |")
    return "\n".join(lines) + "\n"


def main(filter_op: str | None, out: str | None, mode: str, backend: str, progress=print) -> str:
    """Run and write the report (to `out`, or return it for printing)."""
    import tempfile
    with tempfile.TemporaryDirectory(prefix="ksbuild-onnx-report-") as tmp:
        results = run(filter_op, mode, Path(tmp), backend, progress)
    text = markdown(results, mode)
    if out:
        Path(out).write_text(text)
        total = sum(r.status == PASS for r in results)
        progress(f"onnx-report: {total} of {len(results)} passed; wrote {out}")
    return text
