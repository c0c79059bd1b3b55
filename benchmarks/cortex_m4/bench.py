"""Six small networks on a Cortex-M4: ksbuild against emx-onnx-cgen, in flash, RAM and instructions per inference.

    pip install -e .[onnx,bench]        # torch, onnxruntime, emx-onnx-cgen
    python benchmarks/cortex_m4/bench.py [--models mlp cnn gru lstm transformer mobilenet_like] [--int8]
                                         [--symbols] [--profile]

Needs arm-none-eabi-gcc with newlib and qemu-system-arm (scripts/install.sh, as root). The networks are
networks.py's torch modules (random weights, nothing downloaded) exported to ONNX with a static batch of 1. Each is
built four ways: ksbuild for target cortex-m4 with [build] optimize = "speed" and "size", and emx-onnx-cgen's C
compiled with arm-none-eabi-gcc -O3 and -Os (-mcpu=cortex-m4 -mthumb -mfloat-abi=hard -mfpu=fpv4-sp-d16), each
linked into the same C99 program (app/main.c, --gc-sections, newlib with semihosting) and run once on QEMU's
mps2-an386 board; outputs checked against onnxruntime on the host (firmware.py says how). Columns:
- flash: text + rodata + data of the program minus those of the same program calling no model (weights included);
- RAM: data + bss of the program minus the baseline's (ksbuild's workspace is a static buffer there) plus the
  stack the inference wrote, measured by painting the free stack before it (ksbuild's build-time figure, P.json's
  stack_bytes, is printed beside it);
- instr: instructions executed by one inference, from QEMU's virtual clock with -icount (exact to a timer tick,
  0.3 instructions; the loop check printed under the table is the method run on a loop of known length).
Ratios are ksbuild / emx-onnx-cgen: below 1, ksbuild needs less. With --int8, the MLP, the CNN and the
MobileNet-like net also as onnxruntime's quantize_static makes them (uint8 activations, int8 weights per channel) in
its QDQ and QOperator formats ("= ort": the share of outputs equal to onnxruntime's). --symbols prints each
program's largest functions and objects, --profile the functions that execute most instructions.
"""
from __future__ import annotations

import argparse
import datetime
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))
import firmware  # noqa: E402
from networks import INT8, SIX, export, models, quantize  # noqa: E402

VARIANTS = (("ksbuild", "speed"), ("ksbuild", "size"), ("emx", "-O3"), ("emx", "-Os"))
PAIRS = (("speed", "-O3"), ("size", "-Os"))   # which ksbuild build is compared with which emx build


def build_and_run(name: str, onnx_file: Path, shape, work: Path) -> dict:
    """The model through every variant: "runs" {variant: firmware.Run, or the error's last line if it failed to
    build}, "base" the program without a model, "want" onnxruntime's output, "stacks" P.json's stack_bytes."""
    import onnxruntime as ort
    ort.set_default_logger_severity(3)  # (not the quantized models' "Removing initializer" warnings)
    x = firmware.input_for(shape)
    session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    want = session.run(None, {"x": x})[0].ravel()
    sizes = (x.size, want.size)
    got = {"runs": {}, "want": want, "stacks": {}, "base": firmware.baseline_app(sizes, work / "base")}
    for optimize in ("speed", "size"):
        tree = firmware.ksbuild_package(name, onnx_file, work / f"ks_{optimize}", optimize)
        got["runs"][optimize] = firmware.ksbuild_app(tree, name, sizes, work / f"app_{optimize}")
        got["stacks"][optimize] = firmware.ksbuild_stack(tree, name)
    try:
        source = firmware.emx_source(onnx_file, name, work / "emx")
    except RuntimeError as e:   # (a model emx-onnx-cgen does not compile: a failed row, not a failed benchmark)
        got["runs"].update({opt: _last_line(e) for opt in ("-O3", "-Os")})
        return got
    for opt in ("-O3", "-Os"):
        got["runs"][opt] = firmware.emx_app(source, name, sizes, work / f"app{opt}", opt)
    return got


def _last_line(e: Exception) -> str:
    """The last non-empty line of a tool's error output."""
    return [line for line in str(e).splitlines() if line.strip()][-1][:160]


def onnx_files(name: str, module_shape, work: Path, int8: bool) -> dict:
    """{row label: ONNX file} for one network: its float export and, with int8, its QDQ and QOperator
    quantizations (networks.INT8 only)."""
    module, shape = module_shape
    (work / "onnx").mkdir(parents=True, exist_ok=True)
    files = {name: work / "onnx" / f"{name}.onnx"}
    export(module, shape, files[name])
    if int8 and name in INT8:
        for fmt in ("qdq", "qop"):
            files[f"{name} int8 {fmt}"] = work / "onnx" / f"{name}_{fmt}.onnx"
            quantize(files[name], files[f"{name} int8 {fmt}"], shape, fmt)
    return files


def error(run, want) -> float:
    """Largest difference from onnxruntime, relative to onnxruntime's largest output."""
    return float(np.abs(run.outputs - want).max() / max(np.abs(want).max(), 1e-30))


def share(run, base) -> tuple[float, float]:
    """(flash, RAM) in KB that the model adds to the program: RAM with the stack the inference wrote."""
    return (run.flash - base.flash) / 1024, (run.ram - base.ram + run.stack) / 1024


def detail_rows(name: str, got: dict) -> list[list[str]]:
    """One row per variant: flash, static RAM, stack painted / P.json, instructions, error, share equal to ort."""
    base, rows = got["base"], []
    for tool, variant in VARIANTS:
        run = got["runs"][variant]
        if isinstance(run, str):
            rows.append([name, f"{tool} {variant}", f"failed: {run}"] + [""] * 7)
            continue
        flash, ram = share(run, base)
        pjson = str(got["stacks"][variant]) if tool == "ksbuild" else "-"
        rows.append([name, f"{tool} {variant}", f"{flash:.1f}", f"{(run.ram - base.ram) / 1024:.1f}",
                     f"{run.stack} / {pjson}", f"{run.workspace}", f"{ram:.1f}", f"{run.instructions:.0f}",
                     f"{error(run, got['want']):.1e}", f"{np.mean(run.outputs == got['want']):.2f}"])
    return rows


def summary_row(name: str, got: dict, pair: tuple[str, str]) -> list[str]:
    """model | flash KB | RAM KB | instructions, ksbuild then emx, then the three ratios."""
    base, ks, emx = got["base"], got["runs"][pair[0]], got["runs"][pair[1]]
    kf, kr = share(ks, base)
    if isinstance(emx, str):
        return [name, f"{kf:.1f}", "failed", f"{kr:.1f}", "failed", f"{ks.instructions:.0f}", "failed", "-"]
    ef, er = share(emx, base)
    return [name, f"{kf:.1f}", f"{ef:.1f}", f"{kr:.1f}", f"{er:.1f}", f"{ks.instructions:.0f}",
            f"{emx.instructions:.0f}", f"{kf / ef:.2f} / {kr / er:.2f} / {ks.instructions / emx.instructions:.2f}"]


def table(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table, numbers right-aligned."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header)))
             + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def check(name: str, got: dict) -> None:
    """Every variant's outputs against onnxruntime's: float rounding (1e-4 of the largest output) for float models,
    a few quantization steps (2%) for int8 ones."""
    tolerance = 0.02 if "int8" in name else 1e-4
    for variant, run in got["runs"].items():
        if not isinstance(run, str) and error(run, got["want"]) > tolerance:
            raise SystemExit(f"{name} {variant}: outputs differ from onnxruntime's by {error(run, got['want']):.1e} "
                             f"(relative to the largest)\n got  {run.outputs}\n want {got['want']}")


def print_symbols(name: str, got: dict) -> None:
    """The largest functions and objects of each program that the baseline program does not hold."""
    base = {s for s, _ in firmware.largest_symbols(got["base"].elf, 10 ** 6)}
    for variant in ("speed", "size", "-O3", "-Os"):
        if isinstance(got["runs"][variant], str):
            continue
        own = [(s, b) for s, b in firmware.largest_symbols(got["runs"][variant].elf, 40) if s not in base][:6]
        print(f"{name} {variant}: " + "; ".join(f"{s[:100]} {b} B" for s, b in own))


def print_profile(name: str, got: dict) -> None:
    """The functions that execute most of one inference's instructions (firmware.profile)."""
    kernel = name.split()[0]
    for variant, entry in (("speed", f"m4bench_{kernel}"), ("-O3", kernel)):
        if isinstance(got["runs"][variant], str):
            continue
        counts = firmware.profile(got["runs"][variant].elf, entry)
        total = sum(c for _, c in counts)
        print(f"{name} {variant}, {total} instructions: "
              + "; ".join(f"{f[:90]} {c} ({100 * c / total:.0f}%)" for f, c in counts[:4]))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=list(SIX), choices=list(models()))
    p.add_argument("--work", type=Path, help="build directory (default: a temporary one)")
    p.add_argument("--symbols", action="store_true", help="print each program's largest functions and objects")
    p.add_argument("--profile", action="store_true",
                   help="instructions per function of ksbuild (speed) and emx-onnx-cgen (-O3), one more run each")
    p.add_argument("--int8", action="store_true",
                   help=f"also {', '.join(INT8)} quantized by onnxruntime (QDQ and QOperator formats)")
    a = p.parse_args(argv)
    if firmware.missing_tools():
        raise SystemExit(f"not on PATH: {', '.join(firmware.missing_tools())} (scripts/install.sh installs them)")
    work = a.work or Path(tempfile.mkdtemp(prefix="ks_cortex_m4_"))
    made, results = models(), {}
    for name in a.models:
        for label, onnx_file in onnx_files(name, made[name], work, a.int8).items():
            print(f"building and running {label} ...", file=sys.stderr)
            results[label] = build_and_run(name, onnx_file, made[name][1], work / label.replace(" ", "_"))
            check(label, results[label])
    report(results, a.symbols)
    if a.profile:
        for name, got in results.items():
            print_profile(name, got)
    return 0


def report(results: dict, symbols: bool) -> None:
    """The tables, the counter's check and optionally the symbols."""
    print(f"Cortex-M4 (qemu-system-arm -M mps2-an386 -icount shift={firmware.ICOUNT_SHIFT}), "
          f"{datetime.date.today()}; KB = 1024 bytes; ratios ksbuild / emx-onnx-cgen (flash / RAM / instr)\n")
    for pair in PAIRS:
        print(f"ksbuild optimize = \"{pair[0]}\" against emx-onnx-cgen at {pair[1]}:\n")
        print(table(["model", "ksbuild flash KB", "emx flash KB", "ksbuild RAM KB", "emx RAM KB", "ksbuild instr",
                     "emx instr", "ratios"], [summary_row(n, g, pair) for n, g in results.items()]) + "\n")
    print(table(["model", "build", "flash KB", "data+bss KB", "stack B painted / P.json", "workspace B", "RAM KB",
                 "instr", "max err", "= ort"], [r for n, g in results.items() for r in detail_rows(n, g)]) + "\n")
    loops = [run for g in results.values() for run in g["runs"].values() if not isinstance(run, str)]
    print(f"counter check: a loop of {loops[0].loop_expected} instructions (plus its call and return) measured "
          f"{min(r.loop_instructions for r in loops):.2f} to {max(r.loop_instructions for r in loops):.2f}")
    if symbols:
        for name, got in results.items():
            print_symbols(name, got)


if __name__ == "__main__":
    sys.exit(main())
