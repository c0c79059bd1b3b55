"""Where a network's time goes step by step, in the network and alone: what the per-layer view (depthwise_layers.py)
does not show (docs/performance.md, "The time between the layers").

    python benchmarks/models/network_steps.py PACKAGE EXPORT [BATCH] [CALLS]      e.g.
    python benchmarks/models/compare.py ... (or ksbuild.build(manifest, out=PACKAGE)), then
    python benchmarks/models/network_steps.py /tmp/cmp/new-1234abcd/pkg mnasnet_b1 1 40

PACKAGE is the folder ksbuild.build(..., out=) wrote for the host (x86-64, kernels at LEVEL, default x86-64-v3; the
generated source is kept in share/<name>/src). Its source is copied with every step of EXPORT (`[=]() KS_STEP
{...}();`, codegen/steps.py: a layer, a fused loop nest, the final product) wrapped in a timer, compiled as the
package's CMake project compiles it (templates/CMakeLists.txt.j2's flags, Release) with the kernel layer's source
(ks/kernels.cpp, the float convolutions) and the package's constants (taken out of lib<name>.a), and run: per step
the thread CPU time (CLOCK_THREAD_CPUTIME_ID) in the network (the median over CALLS calls), alone and hot (the same
step run 10 more times at once, the fastest: its inputs, outputs, scratch and weights in cache, as a layer timed
alone is) and alone and cold (the fastest of 3 runs each after 64 MB were written: nothing of it in cache). Printed:
per step its C++ comment (the ONNX nodes), the three times and network / hot; then the sums and the whole call's
time (its excess over the steps' sum is the timers' own cost and the code outside the steps). Needs g++, ar and
objcopy; a package without KS_STEP steps (a small network) has nothing to time.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

TIMER = r'''
#include <time.h>
#include <stdlib.h>
static double ks_t[4096]; static int ks_mode = 0;
static inline double ks_now() {
    timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec;
}
template <class F> static inline void ks_time(int i, F f) {
    double best = 1e9;
    if (ks_mode == 0) { double a = ks_now(); f(); ks_t[i] += ks_now() - a; return; }
    if (ks_mode == 2) {
        static char* junk = static_cast<char*>(malloc(64l << 20));
        for (int r = 0; r < 3; ++r) { for (long j = 0; j < (64l << 20); j += 64) junk[j] += 1;
            double a = ks_now(); f(); double d = ks_now() - a; best = d < best ? d : best; }
    } else {
        f();
        for (int r = 0; r < 10; ++r) { double a = ks_now(); f(); double d = ks_now() - a; best = d < best ? d : best; }
    }
    ks_t[i] += best;
}
extern "C" double* steps_times() { return ks_t; }
extern "C" void steps_mode(int m) { ks_mode = m; }
'''

MAIN = r'''
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <time.h>
extern "C" { double* steps_times(); void steps_mode(int);
int steps_run(int64_t, const float*, float*, void*); size_t steps_run_workspace_size(int64_t); }
static double now() { timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static double med(std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }
int main(int, char** argv) {
    const int64_t b = atoi(argv[1]), in = atoi(argv[2]), out = atoi(argv[3]), steps = atoi(argv[4]);
    const int calls = atoi(argv[5]);
    void* w = aligned_alloc(64, (steps_run_workspace_size(b) + 64) / 64 * 64);
    std::vector<float> x(b * in), y(b * out);
    for (size_t i = 0; i < x.size(); ++i) x[i] = float((i * 2654435761u) % 1000) / 500.0f - 1.0f;
    std::vector<std::vector<double>> t(3 * steps); std::vector<double> whole;
    for (int mode = 0; mode < 3; ++mode) {
        steps_mode(mode);
        for (int c = 0; c < (mode == 0 ? calls : mode == 1 ? calls / 4 + 1 : 3); ++c) {
            std::memset(steps_times(), 0, sizeof(double) * steps);
            const double a = now(); steps_run(b, x.data(), y.data(), w); const double d = now() - a;
            if (mode == 0) whole.push_back(d);
            for (int i = 0; i < steps; ++i) t[mode * steps + i].push_back(steps_times()[i]);
        }
    }
    for (int i = 0; i < steps; ++i)
        printf("%.2f %.2f %.2f\n", med(t[i]) * 1e6, med(t[steps + i]) * 1e6, med(t[2 * steps + i]) * 1e6);
    printf("%.2f\n", med(whole) * 1e6);
}
'''


def instrumented(source: str, package: str, export: str) -> tuple[str, list]:
    """source with export's innermost steps timed (ks_time) and export renamed steps_run; and each step's comment."""
    start = source.index(f'extern "C" int {package}_{export}(')
    end = source.index("\nextern \"C\"", start + 1)
    lines, pairs, stack = source[start:end].split("\n"), [], []
    for k, line in enumerate(lines):
        opened = re.match(r"^(\s*)\[=\]\([^)]*\) KS_STEP \{$", line)
        if opened:
            stack.append((opened.group(1), k, len(pairs)))
            pairs.append(None)
        elif stack and re.match(r"^" + stack[-1][0] + r"\}\([^)]*\);$", line):
            _, first, slot = stack.pop()
            pairs[slot] = (first, k)
    inner = [(i, j) for i, j in pairs if not any(i < a < j for a, _ in pairs)]  # (not the loop over the images)
    notes = []
    for i, j in inner:
        comment = next(x.strip()[3:] for x in reversed(lines[:i]) if x.strip().startswith("// "))
        lines[i] = re.sub(r"\[=\]\([^)]*\) KS_STEP \{", f"ks_time({len(notes)}, [=]() KS_STEP {{", lines[i])
        lines[j] = re.sub(r"\}\([^)]*\);$", "});", lines[j])
        notes.append(comment)
    body = "\n".join(lines).replace(f"{package}_{export}(", "steps_run(", 1)
    body = body.replace(f"{package}_{export}_workspace_size(", "steps_run_workspace_size(")
    tail = source[end:]
    size = tail[tail.index(f'extern "C" size_t {package}_{export}_workspace_size('):]
    size = size[:size.index("\n}\n") + 3].replace(f"{package}_{export}_workspace_size(", "steps_run_workspace_size(")
    head = source[:start].replace('#include "ks/kernels.h"\n', '#include "ks/kernels.h"\n' + TIMER, 1)
    return head + 'extern "C" size_t steps_run_workspace_size(int64_t);\n' + body + "\n" + size, notes


def build(pkg: Path, export: str, folder: Path) -> tuple[Path, list, list]:
    """The timing program for export of package folder pkg, in folder; the steps' comments; the export's shapes."""
    import json
    name = next(pkg.glob("share/*/src")).parent.name
    src = pkg / "share" / name / "src"
    desc = json.loads((pkg / "share" / name / f"{name}.json").read_text())
    text, notes = instrumented((src / f"{name}.cpp").read_text(), name, export)
    (folder / "steps.cpp").write_text(text)
    (folder / "main.cpp").write_text(MAIN)
    level = os.environ.get("LEVEL", "x86-64-v3")
    flags = ["g++", "-std=c++17", "-O3", "-DNDEBUG", f"-march={level}", "-fno-exceptions", "-fno-rtti",
             "-fno-math-errno", "-fno-trapping-math", "-fwrapv", "-fopenmp-simd", "-DKS_OPENMP_SIMD",
             f"-DKS_KERNELS=ks_kernels_{level.replace('-', '_')}", f"-I{src}", f"-I{pkg / 'include'}"]
    subprocess.run(["ar", "x", str(pkg / "lib" / f"lib{name}.a")], cwd=folder, check=True)
    objects = [p for p in folder.glob("*.o") if p.name not in ("steps.o", "kernels.o", "blob.o")]
    subprocess.run(["objcopy", "-O", "binary", "--only-section=.rodata.ks_blob", str(objects[0]),
                    str(folder / "blob.bin")], check=True)
    (folder / "blob.S").write_text(f'.section .rodata.ks_blob,"a"\n.balign 64\n.globl {name}_data_blob\n'
                                   f'{name}_data_blob:\n.incbin "blob.bin"\n.section .note.GNU-stack,"",@progbits\n')
    subprocess.run(["g++", "-c", "blob.S", "-o", "blob.o"], cwd=folder, check=True)
    subprocess.run([*flags, "-DKS_KERNELS_CONVS32", "-c", str(src / "ks" / "kernels.cpp"), "-o", "kernels.o"],
                   cwd=folder, check=True)
    subprocess.run([*flags, "-c", "steps.cpp", "-o", "steps.o"], cwd=folder, check=True)
    subprocess.run(["g++", "-O2", "main.cpp", "steps.o", "blob.o", "kernels.o", "-o", "steps"], cwd=folder, check=True)
    entry = desc["exports"][export]
    return folder / "steps", notes, entry


def sizes(entry: dict) -> tuple[int, int]:
    """Elements of one image of the export's (one) input and (one) output: their dims after the batch."""
    import math
    shapes = {a["role"]: a["shape"][1:] for a in entry["args"] if a["role"] in ("in", "out")}
    return math.prod(shapes["in"]), math.prod(shapes["out"])


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    pkg, export = Path(sys.argv[1]), sys.argv[2]
    batch = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    calls = int(sys.argv[4]) if len(sys.argv) > 4 else 40
    with tempfile.TemporaryDirectory(prefix="steps_") as folder:  # (the program, the constants: ~the weights' size)
        program, notes, entry = build(pkg, export, Path(folder))
        inputs, outputs = sizes(entry)
        run = subprocess.run([str(program), str(batch), str(inputs), str(outputs), str(len(notes)), str(calls)],
                             check=True, capture_output=True, text=True).stdout.split("\n")
    print(f"load average {os.getloadavg()[0]:.1f}\n\n"
          "| step | network µs | alone hot µs | alone cold µs | network / hot |\n|---|---:|---:|---:|---:|")
    sums = [0.0, 0.0, 0.0]
    for note, line in zip(notes, run):
        t = [float(v) for v in line.split()]
        sums = [s + v for s, v in zip(sums, t)]
        print(f"| {note[:70]} | {t[0]:.1f} | {t[1]:.1f} | {t[2]:.1f} | {t[0] / max(t[1], 1e-9):.2f} |")
    print(f"| **all steps** | {sums[0]:.0f} | {sums[1]:.0f} | {sums[2]:.0f} | {sums[0] / sums[1]:.3f} |\n\n"
          f"the whole call {float(run[len(notes)]):.0f} µs\nload average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
