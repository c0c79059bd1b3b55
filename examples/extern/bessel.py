"""External C functions with the derivative rules ksbuild cannot work out (Knossos's edef): docs/custom-derivatives.md.

ksbuild compiles a call of j0 into a call of the C function bessel_j0 of bessel.c, compiled into the library. The
Python bodies are what the file computes when it runs as Python and what ksbuild's reference interpreter runs; ksbuild
never compiles them. The derivative comes from the rule: d J0(x) = -J1(x) dx.
"""
import math

import ksbuild

POINTS = 32  # the midpoint rule of Bessel's integral on 32 points, as in bessel.c


@ksbuild.extern(sources=["bessel.c"], c_name="bessel_j0")
def j0(x: float) -> float:
    return sum(math.cos(-x * math.sin(math.pi * (k + 0.5) / POINTS)) for k in range(POINTS)) / POINTS


@ksbuild.extern(sources=["bessel.c"], c_name="bessel_j1")
def j1(x: float) -> float:
    return sum(math.cos(t - x * math.sin(t)) for t in [math.pi * (k + 0.5) / POINTS for k in range(POINTS)]) / POINTS


@j0.defjvp
def j0_jvp(x: float, dx: float) -> tuple[float, float]:
    return j0(x), -j1(x) * dx


def ring(r: "float[n]", k: float) -> float:
    """A sum of circular waves J0(k r_i) (the field of a drum head at the radii r)."""
    s = 0.0
    for i in range(r.shape[0]):
        s = s + j0(k * r[i])
    return s
