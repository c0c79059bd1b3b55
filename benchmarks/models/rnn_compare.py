"""compare.py for the text RNNs: two versions of ksbuild on bench.py's lstm_text and two recurrent networks nobody named
(gru_text: the same embedding and a 2-layer GRU of 256; bilstm: a 1-layer bidirectional LSTM of 192), 64 tokens in,
in one process, in turn with onnxruntime (1 thread, thread CPU time, median of ROUNDS samples, default 11).

    python benchmarks/models/rnn_compare.py FOLDER OLD_CHECKOUT NAMES BATCHES      e.g.
    python benchmarks/models/rnn_compare.py /tmp/rnn /tmp/main-copy lstm_text,gru_text,bilstm 1,8

Errors are relative to onnxruntime's largest output; "err torch" is the new build's against torch's.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench import lstm_text  # noqa: E402
from compare import arguments, build, one_thread  # noqa: E402
from resnet_layers import medians  # noqa: E402


def text_rnn(kind: str, hidden: int, layers: int, bidirectional: bool):
    """An embedding of 128 (10000 words), a torch.nn.GRU or LSTM (batch first), the last step's 2 classes."""
    import torch
    from torch import nn
    torch.manual_seed(0)

    class TextRNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(10000, 128)
            self.rnn = getattr(nn, kind)(128, hidden, num_layers=layers, batch_first=True, bidirectional=bidirectional)
            self.fc = nn.Linear(hidden * (2 if bidirectional else 1), 2)

        def forward(self, ids):
            out, _ = self.rnn(self.embed(ids))
            return self.fc(out[:, -1])
    return TextRNN().eval()


MODELS = {"lstm_text": lstm_text, "gru_text": lambda: text_rnn("GRU", 256, 2, False),
          "bilstm": lambda: text_rnn("LSTM", 192, 1, True)}


def export(folder: Path, names: list) -> dict:
    """name -> torch module, each exported to FOLDER/name.onnx (a symbolic batch) unless it is there."""
    import torch
    modules = {name: MODELS[name]() for name in names}
    for name, module in modules.items():
        path = folder / f"{name}.onnx"
        if not path.exists():
            x = torch.from_numpy(np.random.default_rng(0).integers(0, 1000, (1, 64)))
            torch.onnx.export(module, (x,), str(path), dynamo=False, input_names=["x"], output_names=["y"],
                              dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    return modules


def row(name: str, b: int, fns: dict, sess, module) -> str:
    """One table row: old, new and onnxruntime in turn on a batch of b random token sequences."""
    import torch
    x = np.random.default_rng(b).integers(0, 10000, (b, 64))
    want = sess.run(None, {"x": x})[0]
    scale = max(float(np.abs(want).max()), 1e-30)
    err = {k: float(np.abs(f(x) - want).max()) / scale for k, f in fns.items()}
    with torch.no_grad():
        err_torch = float(np.abs(fns["new"](x) - module(torch.from_numpy(x)).numpy()).max()) / scale
    start = time.thread_time()
    fns["new"](x)
    reps = max(1, int(0.03 / max(time.thread_time() - start, 1e-5)))
    calls = {k: (lambda f=f: f(x)) for k, f in fns.items()}
    t = medians({**calls, "ort": lambda: sess.run(None, {"x": x})}, int(os.environ.get("ROUNDS", "11")), reps)
    return (f"| {name} | {b} | {t['old'] * 1e3:.3f} | {t['new'] * 1e3:.3f} | {t['ort'] * 1e3:.3f} | "
            f"{t['old'] / t['ort']:.3f} | {t['new'] / t['ort']:.3f} | {t['new'] / t['old']:.3f} | {err['old']:.1e} | "
            f"{err['new']:.1e} | {err_torch:.1e} |")


def main() -> None:
    folder, old, names, batches = arguments(__doc__)
    import onnxruntime as ort
    modules = export(folder, names)
    olds, news = build(folder, names, "old", old), build(folder, names, "new", None)
    opts = one_thread()
    print(f"load average {os.getloadavg()[0]:.1f}\n\n| name | batch | old ms | new ms | onnxruntime ms | old / ort | "
          "new / ort | new / old | err old | err new | err torch |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
          "---:|", flush=True)
    for name in names:
        sess = ort.InferenceSession(str(folder / f"{name}.onnx"), opts, providers=["CPUExecutionProvider"])
        for b in batches:
            print(row(name, b, {"old": olds[name], "new": news[name]}, sess, modules[name]), flush=True)
    print(f"\nload average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
