"""The same LSTM objective through the Python frontend (benchmarks/gradbench/lstm.py, whose loops are loops from
the start): F and G = grad(F, argnums=(0, 1)) times at each sequence length, for comparison with bench.py.

    PYTHONPATH=. python benchmarks/reroll/python_frontend.py [--sizes 16,64,256,1024]
"""
import argparse
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench import median_time  # noqa: E402


def main() -> None:
    import lstm_model

    import ksbuild
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="16,64,256,1024")
    a = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="lstm-py-"))
    (folder / "manifest.toml").write_text(
        '[package]\nname = "lstm_py"\n\n[build]\ndtype = "float64"\n\n[kernels.lstm]\n'
        f'python = "{HERE.parent / "gradbench" / "lstm.py"}:lstm_objective"\n\n'
        '[exports]\nF = "lstm"\nG = "grad(lstm, argnums=(0, 1))"\n')
    t0 = time.perf_counter()
    pkg = ksbuild.build(folder / "manifest.toml")
    print(f"build (once for every c: the dims are symbolic): {time.perf_counter() - t0:.1f} s")
    print("| c | F_s | G_s |\n|---|---|---|")
    for c in (int(s) for s in a.sizes.split(",")):
        xs = [x.numpy() for x in lstm_model.inputs(c)]
        print(f"| {c} | {median_time(lambda: pkg.F(*xs)):.3g} | {median_time(lambda: pkg.G(*xs)):.3g} |", flush=True)


if __name__ == "__main__":
    main()
