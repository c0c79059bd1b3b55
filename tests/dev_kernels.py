"""Small kernels for the dev-loop tests (ksbuild.kernel / ksbuild.vmap compile them from this file)."""
# ruff: noqa: F821  (tensor annotations are signature strings such as "float[n]")


def scale(x: float, a: float) -> float:
    return a * x * x + 0.5 * x


def power(x: float, n: int) -> float:
    y = 1.0
    for _ in range(n):
        y = y * x
    return y


def is_negative(x: float) -> bool:
    """No float result: it compiles, but it has no derivative exports."""
    return x < 0.0


def broken(x: float) -> float:
    while x > 1.0:
        x = x / 2
    return x


def double(x: "float[n]", s: float) -> "float[n]":
    """Linear: bwd(f) reads neither x nor s (unused parameters in the generated C)."""
    return 2.0 * x


def softsign(x: float) -> float:
    """An activation from an importable module (a model holding it can be pickled by reference)."""
    return x / (1.0 + abs(x))


def scaled(x: float, scale: float = 2.0, flag: bool = False) -> float:
    return x * scale if flag else x
