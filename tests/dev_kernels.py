"""Small kernels for the dev-loop tests (ksbuild.kernel / ksbuild.vmap compile them from this file)."""


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
