"""Plot relu3 and its derivative, both computed by the compiled kernels, over [-3, 3].

    python examples/relu3/plot.py [OUT.png]        # default: relu3.png in the current directory

The values come from `ksbuild.build` of this directory's manifest: `vrelu3` for relu3 and
`vrelu3_vjp` with a cotangent of ones for its derivative. Needs matplotlib
(`pip install -e .[plot]`).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import ksbuild

MANIFEST = Path(__file__).resolve().parent / "manifest.toml"


def import_pyplot():
    """matplotlib.pyplot on the non-interactive Agg backend, or exit 1 with a hint if it is missing."""
    try:
        import matplotlib
    except ImportError:
        print("plot.py needs matplotlib: pip install -e .[plot]  (or pip install matplotlib)", file=sys.stderr)
        sys.exit(1)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def relu3_and_derivative(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """relu3(x) and relu3'(x) from the compiled vmap and vjp exports."""
    pkg = ksbuild.build(MANIFEST)
    return pkg.vrelu3(x), pkg.vrelu3_vjp(x, np.ones_like(x))


def plot(out: Path) -> None:
    """Draw both curves into the PNG `out`."""
    plt = import_pyplot()
    x = np.linspace(-3.0, 3.0, 601, dtype=np.float32)
    y, dy = relu3_and_derivative(x)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(x, y, label="relu3(x)  (vrelu3)")
    ax.plot(x, dy, label="relu3'(x)  (vrelu3_vjp, ct = 1)")
    for edge in (0.0, 1.0):
        ax.axvline(edge, color="grey", linewidth=0.6, linestyle=":")
    ax.set_xlabel("x")
    ax.set_title("relu3: 0 for x < 0, x³/3 on [0, 1), x − 2/3 for x ≥ 1")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    print(f"wrote {out}")


def main(argv: list[str]) -> int:
    plot(Path(argv[1]) if len(argv) > 1 else Path("relu3.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
