"""Build one model into a Cortex-M4 program two ways, ksbuild's package or emx-onnx-cgen's C, run it on QEMU's
mps2-an386 board and read what it prints (app/main.c): outputs, instructions per inference, stack, sizes.

Both programs are app/main.c with a call.h written here, compiled with the same flags (-O2; the model's own code
at the flags its tool was asked for), linked against newlib's semihosting specs with --gc-sections
(tests/cross/baremetal_c's startup file and memory map). A baseline program, the same main.c calling no model,
is what `flash` and `ram` subtract: they are the model's share of the program."""
from __future__ import annotations

import bisect
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BOARD = ROOT / "tests/cross/baremetal_c"
CPU = ["-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"]
ICOUNT_SHIFT = 7                                  # 2**7 ns of virtual time per instruction
INSTRUCTIONS_PER_TICK = 40 / 2 ** ICOUNT_SHIFT    # timer 0 ticks at 25 MHz: 40 ns
TOOLS = ("arm-none-eabi-gcc", "arm-none-eabi-size", "qemu-system-arm")
TRACE = re.compile(r"^Trace \d+: 0x[0-9a-f]+ \[[0-9a-f]+/([0-9a-f]+)/")  # QEMU's -d exec line: the guest's pc


@dataclass(frozen=True)
class Run:
    """What one program printed and what its ELF holds (bytes)."""
    outputs: np.ndarray
    instructions: float   # per inference, the empty measurement subtracted
    loop_instructions: float  # measured around a loop of `loop_expected` instructions (+ call and return)
    loop_expected: int
    stack: int            # bytes below main's stack pointer written during the inference (at least 64)
    workspace: int        # ksbuild: what WORKSPACE_NEEDED() returned; emx: 0
    text: int             # arm-none-eabi-size: .text (with .rodata here) + .vectors + .ARM.exidx
    data: int
    bss: int
    elf: Path

    @property
    def flash(self) -> int:
        return self.text + self.data

    @property
    def ram(self) -> int:
        return self.data + self.bss


def missing_tools() -> list[str]:
    """The cross tools this needs that are not on PATH (scripts/install.sh, as root, installs them)."""
    return [t for t in TOOLS if shutil.which(t) is None]


def input_for(shape) -> np.ndarray:
    """The input main.c makes: element i is ((i * 37) % 101) / 50 - 1, in float32 as C computes it."""
    i = np.arange(int(np.prod(shape)), dtype=np.uint32)
    return (((i * 37) % 101).astype(np.float32) / np.float32(50.0) - np.float32(1.0)).reshape(shape)


def ksbuild_package(name: str, onnx_file: Path, work: Path, optimize: str) -> Path:
    """A package `m4bench` for target cortex-m4 with the model as its one export `name`; its install tree. (One
    package per model: a package keeps all its weights in one section, which --gc-sections keeps whole.)"""
    from ksbuild.packaging.package import package
    work.mkdir(parents=True, exist_ok=True)
    (work / "manifest.toml").write_text(f'[package]\nname = "m4bench"\n\n[build]\noptimize = "{optimize}"\n\n'
                                        f'[kernels.{name}]\nonnx = "{onnx_file.resolve()}"\n\n'
                                        f'[exports]\n{name} = "{name}"\n')
    return package(work / "manifest.toml", work / "dist", target="cortex-m4", progress=lambda s: None)


def ksbuild_run(name: str, module_shape, work: Path, optimize: str) -> tuple[Run, np.ndarray]:
    """A torch module and its input shape exported to ONNX (networks.export), packaged for cortex-m4 at `optimize`
    and run once in the program: its Run and onnxruntime's output for the same input (the tests' oracle)."""
    import onnxruntime as ort
    from networks import export
    module, shape = module_shape
    work.mkdir(parents=True, exist_ok=True)
    export(module, shape, work / f"{name}.onnx")
    x = input_for(shape)
    session = ort.InferenceSession(str(work / f"{name}.onnx"), providers=["CPUExecutionProvider"])
    want = session.run(None, {"x": x})[0].ravel()
    tree = ksbuild_package(name, work / f"{name}.onnx", work / "ks", optimize)
    return ksbuild_app(tree, name, (x.size, want.size), work / "app"), want


def ksbuild_stack(tree: Path, name: str) -> int:
    """The stack the build measured for export `name` (P.json's stack_bytes)."""
    return json.loads((tree / "share/m4bench/m4bench.json").read_text())["exports"][name]["stack_bytes"]


def emx_source(onnx_file: Path, name: str, out: Path) -> Path:
    """emx-onnx-cgen's C for the model, function `name`: weights compiled in (--large-weight-threshold 0) and
    temporaries on the stack (--large-temp-threshold 0: no malloc), as its "fully embedded" scenario says."""
    out.mkdir(parents=True, exist_ok=True)
    c = out / f"{name}.c"
    _run([sys.executable, "-m", "emx_onnx_cgen", "compile", str(onnx_file), str(c), "--model-name", name,
          "--color", "never", "--large-weight-threshold", "0", "--large-temp-threshold", "0"])
    return c


def ksbuild_app(tree: Path, name: str, sizes: tuple[int, int], work: Path, workspace: int | None = None) -> Run:
    """Program calling export `name` of the package at `tree` with a static workspace of `workspace` bytes; the
    first run (None) asks the package how much it needs and the program is linked again with exactly that."""
    ws = 1 << 20 if workspace is None else workspace
    arg = "workspace" if ws else "NULL"
    call = (f"#include <m4bench.h>\n#define WORKSPACE_NEEDED() m4bench_{name}_workspace_size()\n"
            + (f"static unsigned char workspace[{ws}] __attribute__((aligned(16)));\n" if ws else "")
            + f"#define RUN(x, y) m4bench_{name}((x), (y), {arg})\n")
    run = _program(work, call, sizes, ["-I", str(tree / "include")], [str(tree / "lib/libm4bench.a")])
    return run if workspace is not None else ksbuild_app(tree, name, sizes, work, run.workspace)


def emx_app(source: Path, name: str, sizes: tuple[int, int], work: Path, opt: str) -> Run:
    """Program calling emx-onnx-cgen's `void name(const float x[restrict ...], float y[restrict ...])`, its C
    compiled with `opt` (-O3 or -Os), C99."""
    work.mkdir(parents=True, exist_ok=True)
    obj = work / f"{name}.o"
    _run(["arm-none-eabi-gcc", *CPU, "-std=c99", opt, "-ffunction-sections", "-fdata-sections", "-c", str(source),
          "-o", str(obj)])
    call = f"void {name}(const float *x, float *y); /* (arrays of the model's shapes in {source.name}) */\n" \
           f"#define RUN(x, y) ({name}((x), (y)), 0)\n"
    return _program(work, call, sizes, [], [str(obj)])


def baseline_app(sizes: tuple[int, int], work: Path) -> Run:
    """The same program with input and output buffers of these sizes and no model."""
    keep = ("__attribute__((noinline)) static int keep(const float *x, float *y) {\n"
            '    __asm__ volatile("" : : "r"(x), "r"(y) : "memory"); /* the buffers stay, as if used */\n'
            "    return 0;\n}\n#define RUN(x, y) keep((x), (y))\n")
    return _program(work, keep, sizes, [], [])


def _program(work: Path, call: str, sizes: tuple[int, int], includes: list[str], objects: list[str]) -> Run:
    """Write call.h, compile and link app/main.c with `objects`, run it; what it printed and its sizes."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "call.h").write_text(f"#define IN_SIZE {sizes[0]}u\n#define OUT_SIZE {sizes[1]}u\n{call}")
    elf = work / "app.elf"
    _run(["arm-none-eabi-gcc", *CPU, "-std=c99", "-O2", "-Wall", "-Wextra", "-ffunction-sections",
          "-fdata-sections", "-I", str(work), *includes, str(HERE / "app/main.c"), str(BOARD / "mps2_an386_startup.c"),
          *objects, "--specs=rdimon.specs", f"-T{BOARD / 'mps2_an386.ld'}", "-Wl,--gc-sections", "-lm", "-o", str(elf)])
    printed = _run(["qemu-system-arm", "-M", "mps2-an386", "-nographic", "-semihosting", "-icount",
                    f"shift={ICOUNT_SHIFT}", "-kernel", str(elf)], timeout=600)
    return _parse(printed, _size(elf), elf)


def _parse(printed: str, size: tuple[int, int, int], elf: Path) -> Run:
    """main.c's lines into a Run."""
    ys = [float(line.split()[1]) for line in printed.splitlines() if line.startswith("y ")]
    kv = {line.split()[0]: line.split()[1:] for line in printed.splitlines() if line and not line.startswith("y ")}
    if int(kv["status"][0]) != 0:
        raise RuntimeError(f"the program returned status {kv['status'][0]}:\n{printed}")
    ticks, empty, loop = int(kv["ticks"][0]), int(kv["empty"][0]), int(kv["loop"][0])
    return Run(np.array(ys, np.float32), (ticks - empty) * INSTRUCTIONS_PER_TICK,
               (loop - empty) * INSTRUCTIONS_PER_TICK, int(kv["loop"][1]), int(kv["stack"][0]),
               int(kv.get("workspace", ["0"])[0]), *size, elf)


def _size(elf: Path) -> tuple[int, int, int]:
    """text, data, bss of an ELF (arm-none-eabi-size, Berkeley format)."""
    fields = _run(["arm-none-eabi-size", str(elf)]).splitlines()[1].split()
    return int(fields[0]), int(fields[1]), int(fields[2])


def largest_symbols(elf: Path, count: int = 6) -> list[tuple[str, int]]:
    """The `count` largest functions and objects the program holds (name, bytes)."""
    rows = _run(["arm-none-eabi-nm", "--size-sort", "-S", "-C", "--reverse-sort", str(elf)]).splitlines()
    return [(" ".join(r.split()[3:]), int(r.split()[1], 16)) for r in rows[:count]]


def profile(elf: Path, entry: str) -> list[tuple[str, int]]:
    """Instructions per function during one call of `entry` (the model's C function), most first: QEMU runs
    one instruction per translation block (-singlestep) and logs each block's address (-d exec,nochain) into a
    pipe read here; counting starts at `entry` and stops at the first instruction back in main."""
    symbols = _functions(elf)
    starts = [s[0] for s in symbols]
    with tempfile.TemporaryDirectory() as tmp:
        fifo = Path(tmp) / "exec"
        os.mkfifo(fifo)
        qemu = subprocess.Popen(["qemu-system-arm", "-M", "mps2-an386", "-nographic", "-semihosting", "-icount",
                                 f"shift={ICOUNT_SHIFT}", "-singlestep", "-d", "exec,nochain", "-D", str(fifo),
                                 "-kernel", str(elf)], stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        with open(fifo) as log:
            counts = _count(log, symbols, starts, entry)
        qemu.wait(timeout=600)
    return counts.most_common()


def _count(log, symbols, starts, entry: str) -> collections.Counter:
    """Functions of the logged addresses between `entry` and main."""
    counts, inside = collections.Counter(), False
    for line in log:
        m = TRACE.match(line)
        if not m:
            continue
        pc = int(m.group(1), 16)
        i = bisect.bisect_right(starts, pc) - 1
        name = symbols[i][2] if i >= 0 and pc < symbols[i][0] + symbols[i][1] else "?"
        inside = inside or name == entry
        if inside and name == "main":
            break
        if inside:
            counts[name] += 1
    for _ in log:  # (drain the pipe: QEMU writes until the program ends)
        pass
    return counts


def _functions(elf: Path) -> list[tuple[int, int, str]]:
    """(address, size, demangled name) of the ELF's functions, by address."""
    rows = []
    for line in _run(["arm-none-eabi-nm", "-S", "-C", "--defined-only", str(elf)]).splitlines():
        f = line.split(maxsplit=3)
        if len(f) == 4 and f[2] in "tTwW":
            rows.append((int(f[0], 16) & ~1, int(f[1], 16), f[3]))
    return sorted(rows)


def _run(cmd: list[str], timeout: float = 300) -> str:
    """Run a command; its stdout, or an error with its output."""
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout
