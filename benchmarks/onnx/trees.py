"""Tree-ensemble benchmark: forests compiled by ksbuild (backend plain, baseline CPU) against onnxruntime with one
thread, and memcpy of the input's bytes as the physical limit.

    python benchmarks/onnx/trees.py [--repeats 20]

The models (ai.onnx.ml TreeEnsembleRegressor / TreeEnsembleClassifier, as converters write them):
- boosted: examples/onnx_forest/forest.onnx, 40 trees of depth 3 on 3 features (gradient boosting);
- forest: a random forest of 100 trees of depth 10 on 20 features, BRANCH_LEQ (random trees of
  tests/tree_models.py);
- classes: a classifier of 50 trees of depth 6 voting for 3 classes (SOFTMAX), int labels;
- sklearn_rf: scikit-learn's RandomForestClassifier with its defaults (100 unpruned trees, depth ~20-30) on
  5000 samples of 20 features, converted by skl2onnx (needs the examples extra).
Each at batch 1 and 1000 (the batch dim is symbolic: one build serves both). Outputs are compared first.
Each time is the MEDIAN of --repeats samples of calls from Python (ctypes for ksbuild, session.run for
onnxruntime), the contenders sampled in turn. Ratios > 1 mean ksbuild is faster.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def models(tmp: Path) -> dict:
    import onnx
    import tree_models as tm
    out = {"boosted": (ROOT / "examples/onnx_forest/forest.onnx", 3)}
    forest = tm.regressor(1, n_targets=1, aggregate="AVERAGE", n_trees=100, depth=10)
    forest = _features(forest, 20)
    onnx.save(forest, str(tmp / "forest.onnx"))
    out["forest"] = (tmp / "forest.onnx", 20)
    classes = tm.classifier(2, [0, 1, 2], post="SOFTMAX", n_trees=50, depth=6)
    onnx.save(classes, str(tmp / "classes.onnx"))
    out["classes"] = (tmp / "classes.onnx", 4)
    try:  # a random forest as scikit-learn grows it by default: unpruned, depth ~20-30
        from skl2onnx import to_onnx
        from sklearn.datasets import make_classification
        from sklearn.ensemble import RandomForestClassifier
        x, y = make_classification(5000, 20, n_informative=10, n_classes=3, random_state=0)
        rf = RandomForestClassifier(100, random_state=0).fit(x.astype(np.float32), y)
        onnx.save(to_onnx(rf, x[:1].astype(np.float32), options={"zipmap": False}), str(tmp / "sklearn_rf.onnx"))
        out["sklearn_rf"] = (tmp / "sklearn_rf.onnx", 20)
    except ImportError:
        print("(scikit-learn or skl2onnx missing: no sklearn_rf; pip install -e .[examples])")
    return out


def _features(model, n: int):
    """The model with its trees reading features 0..n-1 (tree_models draws from 4)."""
    from onnx import helper
    node = model.graph.node[0]
    rng = np.random.default_rng(7)
    for a in node.attribute:
        if a.name == "nodes_featureids":
            a.ints[:] = [int(v) for v in rng.integers(0, n, size=len(a.ints))]
    model.graph.input[0].CopyFrom(helper.make_tensor_value_info("X", 1, ["N", n]))
    return model


def median_times(fns: dict, repeats: int, budget: float = 0.2) -> dict:
    """name -> median seconds per call, sampling the contenders in turn."""
    calls = {}
    for name, fn in fns.items():
        fn()
        t0, k = time.perf_counter(), 0
        while time.perf_counter() - t0 < budget / 10:
            fn()
            k += 1
        calls[name] = max(1, k)
    samples = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(calls[name]):
                fn()
            samples[name].append((time.perf_counter() - t0) / calls[name])
    return {name: float(np.median(v)) for name, v in samples.items()}


def run_table(ms: dict, package: str, repeats: int, rtol: float, atol: float) -> None:
    """Build the models {name: (onnx path, inputs(batch) -> x)} for the portable baseline and cpu = "native",
    check each against onnxruntime (1 thread) at batch 1 and 1000 (99% of the rows within rtol/atol: a label
    may differ where two classes tie), and print the median times and ratios."""
    import onnxruntime as ort

    import ksbuild
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        kernels = "\n".join(f'{k} = {{ onnx = "{p}" }}' for k, (p, _) in ms.items())
        exports = "\n".join(f'{k} = "{k}"' for k in ms)
        pkgs = {}
        for cpu in ("", "native"):  # the portable baseline (SSE2) and this machine's instruction set
            d = tmp / (cpu or "baseline")
            d.mkdir()
            (d / "manifest.toml").write_text(f'[package]\nname = "{package}"\n\n[build]\ncpu = "{cpu}"\n\n'
                                             f'[kernels]\n{kernels}\n\n[exports]\n{exports}\n')
            pkgs[cpu or "baseline"] = ksbuild.build(d / "manifest.toml", quiet=True, portable=True)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = opts.inter_op_num_threads = 1
        print(f"{'model':10} {'batch':>6} {'ksbuild us':>11} {'native us':>10} {'ort us':>9} {'memcpy us':>10} "
              f"{'ort/ksbuild':>12} {'ort/native':>11}")
        for name, (path, inputs) in ms.items():
            sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
            feed = sess.get_inputs()[0].name
            for batch in (1, 1000):
                x = inputs(batch)
                want = sess.run(None, {feed: x})
                for pkg in pkgs.values():
                    got = getattr(pkg, name)(x)
                    for g, w in zip(got if isinstance(got, tuple) else (got,), want):
                        close = np.isclose(np.asarray(g, dtype=np.float64), w, rtol=rtol, atol=atol)
                        close = close.reshape(len(x), -1).all(axis=1)
                        assert close.mean() > 0.99, (name, np.flatnonzero(~close)[:5])
                buf = np.empty_like(x)
                t = median_times({"ksbuild": lambda: getattr(pkgs["baseline"], name)(x),
                                  "native": lambda: getattr(pkgs["native"], name)(x),
                                  "ort": lambda: sess.run(None, {feed: x}),
                                  "memcpy": lambda: np.copyto(buf, x)}, repeats)
                print(f"{name:10} {batch:>6} {t['ksbuild'] * 1e6:>11.1f} {t['native'] * 1e6:>10.1f} "
                      f"{t['ort'] * 1e6:>9.1f} {t['memcpy'] * 1e6:>10.2f} {t['ort'] / t['ksbuild']:>12.2f} "
                      f"{t['ort'] / t['native']:>11.2f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ms = models(Path(tmp))
        table = {name: (path, lambda batch, f=features: np.random.default_rng(batch).normal(
            size=(batch, f)).astype(np.float32)) for name, (path, features) in ms.items()}
        run_table(table, "bench_trees", args.repeats, 1e-4, 1e-5)


if __name__ == "__main__":
    main()
