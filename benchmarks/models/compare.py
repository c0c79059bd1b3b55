"""Two versions of ksbuild on the same networks or layers, in one process, in turn with onnxruntime: what a change to
the kernels gains (docs/performance.md's old -> new figures on a loaded machine).

    python benchmarks/models/compare.py FOLDER OLD_CHECKOUT NAMES BATCHES      e.g.
    python benchmarks/models/compare.py /tmp/cmp /work/main resnet18,g1024_7 1,8

Each name is a layer of LAYERS (a Conv with its bias and ReLU), an image network of bench.py (benchmarks/onnx's
resnet.py and mobilenets.py: resnet18, mobilenet_v2, mobilenet_v3_small, efficientnet_b0) or a held-out network of
heldout.py; each is exported once by torch into FOLDER (a symbolic batch), and one package exporting them
all is built twice, natively: by the ksbuild of OLD_CHECKOUT (a subprocess with that checkout first on PYTHONPATH) and
by the ksbuild this script imports.
Both are loaded (ksbuild.load) and checked against onnxruntime; then per batch, 1 thread, thread CPU time, the median
of ROUNDS (environment, default 11) samples of old, new and onnxruntime taken in turn, each the mean of enough calls
for about 30 ms.

With EXECUTORCH=1 (and scripts/install_executorch.sh's venv, as bench.py finds it), ExecuTorch + XNNPACK is a fourth
contender in the same turns: each network is lowered to a .pte per batch by that venv's python (executorch_run.py's
`lowered`), and the .pte is run here, in this process, by ExecuTorch's runtime (its site-packages appended to
sys.path: the same torch version; its thread pool set to 1 thread), so that its samples are interleaved with the
others' instead of taken in a process of its own after them (bench.py). Its error is against onnxruntime too.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from resnet_layers import medians  # noqa: E402  (name -> median seconds per call, samples taken in turn)

LAYERS = {  # name: (in channels, out channels, kernel, stride, pad, input side, groups)
    "c64to128s2": (64, 128, 3, 2, 1, 56, 1),     # ResNet-18's 3 x 3 stride-2 layers
    "c128to256s2": (128, 256, 3, 2, 1, 28, 1),
    "c256to512s2": (256, 512, 3, 2, 1, 14, 1),
    "c64_56": (64, 64, 3, 1, 1, 56, 1),          # ResNet-18's 3 x 3 stride-1 layers (Winograd, then chunks at 7 x 7)
    "c128_28": (128, 128, 3, 1, 1, 28, 1),
    "c256_14": (256, 256, 3, 1, 1, 14, 1),
    "c512_7": (512, 512, 3, 1, 1, 7, 1),
    "g256_56s2": (256, 256, 3, 2, 1, 56, 32),    # ResNeXt-50 32x4d's grouped 3 x 3 layers
    "g256_28": (256, 256, 3, 1, 1, 28, 32),
    "g512_28s2": (512, 512, 3, 2, 1, 28, 32),
    "g512_14": (512, 512, 3, 1, 1, 14, 32),
    "g1024_14s2": (1024, 1024, 3, 2, 1, 14, 32),
    "g1024_7": (1024, 1024, 3, 1, 1, 7, 32),
}


def model(name: str):
    """name -> (torch module, input shape of one image)."""
    import torch
    from torch import nn
    if name in LAYERS:
        cin, cout, k, stride, pad, side, groups = LAYERS[name]

        class Conv(nn.Module):
            def __init__(self):
                super().__init__()
                self.c = nn.Conv2d(cin, cout, k, stride, pad, groups=groups)

            def forward(self, x):
                return torch.relu(self.c(x))

        torch.manual_seed(0)
        return Conv().eval(), (cin, side, side)
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent / "onnx"))
    from mobilenets import MODELS as MOBILE
    from resnet import MODELS as NETS
    if name in NETS or name in MOBILE:  # (bench.py's image networks: resnet18, mobilenet_v2, mobilenet_v3_small, ...)
        return {**NETS, **MOBILE}[name][0](), (3, 224, 224)
    from heldout import MODELS
    return MODELS[name](), (3, 224, 224)


def build(folder: Path, names: list, tag: str, checkout: str | None) -> dict:
    """name -> export of one package of all names' ONNX files, built by the ksbuild of `checkout` (None: this one)
    into folder/tag-<names' hash>."""
    import hashlib

    import ksbuild
    out = folder / f"{tag}-{hashlib.sha1(','.join(names).encode()).hexdigest()[:8]}"
    if not (out / "done").exists():
        out.mkdir(parents=True, exist_ok=True)
        toml, exports = f'[package]\nname = "cmp_{tag}"\n\n', "[exports]\n"
        for name in names:
            toml += f'[kernels.{name}]\nonnx = "../{name}.onnx"\n\n'
            exports += f'{name} = "{name}"\n'
        (out / "m.toml").write_text(toml + exports)
        code = f"import ksbuild; ksbuild.build({str(out / 'm.toml')!r}, out={str(out / 'pkg')!r})"
        env = dict(os.environ, PYTHONPATH=checkout or str(HERE.parent.parent))
        subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=out)  # (not the cwd: its ksbuild)
        (out / "done").write_text("")
    pkg = ksbuild.load(out / "pkg")
    return {name: getattr(pkg, name) for name in names}


def executorch_method(module, shape: tuple, b: int, folder: Path):
    """A callable running ExecuTorch + XNNPACK's lowering of module on a batch of b images, in this process (the
    EXECUTORCH=1 column), or None without ExecuTorch's venv."""
    import torch
    python = HERE.parent.parent / ".venv-executorch" / "bin" / "python"  # (bench.py's EXECUTORCH_PYTHON)
    if not python.exists():
        return None
    pt2, pte = folder / f"et_{b}.pt2", folder / f"et_{b}" / "program.pte"
    if not pte.exists():
        pte.parent.mkdir(parents=True, exist_ok=True)
        torch.export.save(torch.export.export(module.eval(), (torch.randn(b, *shape),)), str(pt2))
        code = (f"import sys; sys.path.insert(0, {str(HERE)!r}); from executorch_run import lowered; "
                f"from pathlib import Path; lowered(Path({str(pt2)!r}), Path({str(pte.parent)!r}))")
        subprocess.run([str(python), "-c", code], check=True, capture_output=True)
    site = next((python.parent.parent / "lib").glob("python3*/site-packages"))
    if str(site) not in sys.path:
        sys.path.append(str(site))
    from executorch.extension.pybindings.portable_lib import _load_for_executorch, _unsafe_reset_threadpool
    _unsafe_reset_threadpool(1)
    method = _load_for_executorch(str(pte))
    return lambda x: method.forward((torch.from_numpy(x),))[0].numpy()


def arguments(usage: str) -> tuple:
    """(FOLDER, made if missing; OLD_CHECKOUT; NAMES; BATCHES) from the command line, or exit with usage."""
    if len(sys.argv) != 5:
        sys.exit(usage)
    folder = Path(sys.argv[1])
    folder.mkdir(parents=True, exist_ok=True)
    return folder, sys.argv[2], sys.argv[3].split(","), [int(b) for b in sys.argv[4].split(",")]


def one_thread():
    """onnxruntime's session options for one thread."""
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return opts


def main() -> None:
    folder, old, names, batches = arguments(__doc__)
    import onnxruntime as ort
    import torch
    opts = one_thread()
    et = os.environ.get("EXECUTORCH") == "1"
    print(f"load average {os.getloadavg()[0]:.1f}\n\n| name | batch | old ms | new ms | onnxruntime ms | old / ort | "
          "new / ort | new / old | err old | err new |" + (" ExecuTorch ms | new / ET | err ET |" if et else "") +
          "\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|---:|" if et else ""), flush=True)
    shapes, modules = {}, {}
    for name in names:
        module, shapes[name] = model(name)
        modules[name] = module
        path = folder / f"{name}.onnx"
        if not path.exists():
            torch.onnx.export(module, (torch.randn(1, *shapes[name]),), str(path), dynamo=False, input_names=["x"],
                              output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    olds, news = build(folder, names, "old", old), build(folder, names, "new", None)
    for name in names:
        shape, path = shapes[name], folder / f"{name}.onnx"
        fns = {"old": olds[name], "new": news[name]}
        sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        for b in batches:
            x = np.random.default_rng(b).standard_normal((b, *shape)).astype(np.float32)
            want = sess.run(None, {"x": x})[0]
            runs = dict(fns)
            if et and (method := executorch_method(modules[name], shape, b, folder / name)) is not None:
                runs["et"] = method
            err = {k: float(np.abs(f(x) - want).max() / max(float(np.abs(want).max()), 1e-30)) for k, f in runs.items()}
            start = time.thread_time()
            fns["new"](x)
            reps = max(1, int(0.03 / max(time.thread_time() - start, 1e-5)))
            calls = {k: (lambda f=f: f(x)) for k, f in runs.items()}
            t = medians({**calls, "ort": lambda: sess.run(None, {"x": x})}, int(os.environ.get("ROUNDS", "11")), reps)
            line = (f"| {name} | {b} | {t['old'] * 1e3:.3f} | {t['new'] * 1e3:.3f} | {t['ort'] * 1e3:.3f} | "
                    f"{t['old'] / t['ort']:.3f} | {t['new'] / t['ort']:.3f} | {t['new'] / t['old']:.3f} | "
                    f"{err['old']:.1e} | {err['new']:.1e} |")
            if et:
                line += (f" {t['et'] * 1e3:.3f} | {t['new'] / t['et']:.3f} | {err['et']:.1e} |" if "et" in t
                         else " n/a | | |")
            print(line, flush=True)
    print(f"\nload average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
