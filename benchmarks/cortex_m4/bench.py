"""Six small networks on a Cortex-M4: ksbuild against emx-onnx-cgen, in flash, RAM and instructions per inference.

    pip install -e .[onnx,bench]        # torch, onnxruntime, emx-onnx-cgen
    python benchmarks/cortex_m4/bench.py [--models mlp cnn gru lstm transformer mobilenet_like] [--symbols] [--profile]

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
Ratios are ksbuild / emx-onnx-cgen: below 1, ksbuild needs less.
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
from networks import export, models  # noqa: E402

VARIANTS = (("ksbuild", "speed"), ("ksbuild", "size"), ("emx", "-O3"), ("emx", "-Os"))
PAIRS = (("speed", "-O3"), ("size", "-Os"))   # which ksbuild build is compared with which emx build


def build_and_run(name: str, module_shape, work: Path) -> dict:
    """The model through every variant: {variant: firmware.Run}, {"base": Run}, onnxruntime's output, P.json stacks."""
    import onnxruntime as ort
    module, shape = module_shape
    onnx_file = work / "onnx" / f"{name}.onnx"
    onnx_file.parent.mkdir(parents=True, exist_ok=True)
    export(module, shape, onnx_file)
    x = firmware.input_for(shape)
    session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    want = session.run(None, {"x": x})[0].ravel()
    sizes = (x.size, want.size)
    runs = {"base": firmware.baseline_app(sizes, work / name / "base")}
    stacks = {}
    for optimize in ("speed", "size"):
        tree = firmware.ksbuild_package(name, onnx_file, work / name / f"ks_{optimize}", optimize)
        runs[optimize] = firmware.ksbuild_app(tree, name, sizes, work / name / f"app_{optimize}")
        stacks[optimize] = firmware.ksbuild_stack(tree, name)
    source = firmware.emx_source(onnx_file, name, work / name / "emx")
    for opt in ("-O3", "-Os"):
        runs[opt] = firmware.emx_app(source, name, sizes, work / name / f"app{opt}", opt)
    return {"runs": runs, "want": want, "stacks": stacks}


def error(run, want) -> float:
    """Largest difference from onnxruntime, relative to onnxruntime's largest output."""
    return float(np.abs(run.outputs - want).max() / max(np.abs(want).max(), 1e-30))


def share(run, base) -> tuple[float, float]:
    """(flash, RAM) in KB that the model adds to the program: RAM with the stack the inference wrote."""
    return (run.flash - base.flash) / 1024, (run.ram - base.ram + run.stack) / 1024


def detail_rows(name: str, got: dict) -> list[list[str]]:
    """One row per variant: flash, static RAM, stack painted / P.json, instructions, error."""
    base, rows = got["runs"]["base"], []
    for tool, variant in VARIANTS:
        run = got["runs"][variant]
        flash, ram = share(run, base)
        pjson = str(got["stacks"][variant]) if tool == "ksbuild" else "-"
        rows.append([name, f"{tool} {variant}", f"{flash:.1f}", f"{(run.ram - base.ram) / 1024:.1f}",
                     f"{run.stack} / {pjson}", f"{run.workspace}", f"{ram:.1f}", f"{run.instructions:.0f}",
                     f"{error(run, got['want']):.1e}"])
    return rows


def summary_row(name: str, got: dict, pair: tuple[str, str]) -> list[str]:
    """model | flash KB | RAM KB | instructions, ksbuild then emx, then the three ratios."""
    base, ks, emx = got["runs"]["base"], got["runs"][pair[0]], got["runs"][pair[1]]
    (kf, kr), (ef, er) = share(ks, base), share(emx, base)
    return [name, f"{kf:.1f}", f"{ef:.1f}", f"{kr:.1f}", f"{er:.1f}", f"{ks.instructions:.0f}",
            f"{emx.instructions:.0f}", f"{kf / ef:.2f} / {kr / er:.2f} / {ks.instructions / emx.instructions:.2f}"]


def table(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table, numbers right-aligned."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header)))
             + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def check(name: str, got: dict) -> None:
    """Every variant's outputs against onnxruntime's (float32 rounding: 1e-4 of the largest output)."""
    for variant, run in got["runs"].items():
        if variant != "base" and error(run, got["want"]) > 1e-4:
            raise SystemExit(f"{name} {variant}: outputs differ from onnxruntime's by {error(run, got['want']):.1e} "
                             f"(relative to the largest)\n got  {run.outputs}\n want {got['want']}")


def print_symbols(name: str, got: dict) -> None:
    """The largest functions and objects of each program that the baseline program does not hold."""
    base = {s for s, _ in firmware.largest_symbols(got["runs"]["base"].elf, 10 ** 6)}
    for variant in ("speed", "size", "-O3", "-Os"):
        own = [(s, b) for s, b in firmware.largest_symbols(got["runs"][variant].elf, 40) if s not in base][:6]
        print(f"{name} {variant}: " + "; ".join(f"{s[:100]} {b} B" for s, b in own))


def print_profile(name: str, got: dict) -> None:
    """The functions that execute most of one inference's instructions (firmware.profile)."""
    for variant, entry in (("speed", f"m4bench_{name}"), ("-O3", name)):
        counts = firmware.profile(got["runs"][variant].elf, entry)
        total = sum(c for _, c in counts)
        print(f"{name} {variant}, {total} instructions: "
              + "; ".join(f"{f[:90]} {c} ({100 * c / total:.0f}%)" for f, c in counts[:4]))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=list(models()), choices=list(models()))
    p.add_argument("--work", type=Path, help="build directory (default: a temporary one)")
    p.add_argument("--symbols", action="store_true", help="print each program's largest functions and objects")
    p.add_argument("--profile", action="store_true",
                   help="instructions per function of ksbuild (speed) and emx-onnx-cgen (-O3), one more run each")
    a = p.parse_args(argv)
    if firmware.missing_tools():
        raise SystemExit(f"not on PATH: {', '.join(firmware.missing_tools())} (scripts/install.sh installs them)")
    work = a.work or Path(tempfile.mkdtemp(prefix="ks_cortex_m4_"))
    made, results = models(), {}
    for name in a.models:
        print(f"building and running {name} ...", file=sys.stderr)
        results[name] = build_and_run(name, made[name], work)
        check(name, results[name])
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
                 "instr", "max err"], [r for n, g in results.items() for r in detail_rows(n, g)]) + "\n")
    loops = [run for g in results.values() for run in g["runs"].values()]
    print(f"counter check: a loop of {loops[0].loop_expected} instructions (plus its call and return) measured "
          f"{min(r.loop_instructions for r in loops):.2f} to {max(r.loop_instructions for r in loops):.2f}")
    if symbols:
        for name, got in results.items():
            print_symbols(name, got)


if __name__ == "__main__":
    sys.exit(main())
