"""Known defects the fuzzer still finds: each entry names the defect and says which failures it explains.
A failure that one of these explains is reported as known (counted, written to disk), not as new; the run's
exit status and the CI test fail only on new ones. Remove an entry when its defect is fixed."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Known:
    name: str
    defect: str
    explains: Callable  # (failure) -> bool


def _order(t: tuple) -> int:
    """How many derivative transformations nesting t has."""
    if t[0] == "kernel":
        return 0
    here = 2 if t[0] == "hessian" else 0 if t[0] == "vmap" else 1
    return here + _order(t[1])


def _nesting(f):
    return f.case.exports.get(f.export, ("kernel",))


KNOWN = [
    Known("nonfinite-intermediate",
          "an inf or nan *value* computed on the way (sqrt or pow of a negative, x ** -2 at 0, ...) that does not "
          "reach the result (it is read only by the side of an if not taken, or its effect is clamped away) meets a "
          "zero (co)tangent in a derivative rule with a plain product (tanh, mul, ...): 0 * nan = nan where torch, "
          "which never differentiates what the result does not read, gives a number. Reproducer: "
          "`t = math.tanh(math.sqrt(x)); return t if y > 0.0 else y`, grad at x = y = -1: ksbuild d/dx = nan, torch 0. "
          "docs/ad-correctness.md lists it under 'What is not covered'",
          lambda f: f.stage == "nonfinite-intermediate"),
    Known("inf-vs-nan",
          "where torch's derivative is infinite (sqrt at 0 with a nonzero tangent, reached through several paths), "
          "ksbuild may give nan: inf - inf or 0 * inf in a different order of operations than torch's. "
          "Reproducer: seed 200 kernel 161, jacfwd of `t1 = F.elu(x) ** 0.5; t1.mean() / torch.logsumexp(t1, dim=0)` "
          "at x[0] = 0 (docs/ad-correctness.md promises 'the same inf or NaN')",
          lambda f: f.stage == "interpreter-vs-torch" and "got np.float64(nan), want np.float64(" in f.message
          and ("want np.float64(inf)" in f.message or "want np.float64(-inf)" in f.message)),
    Known("elu-second-derivative-at-0",
          "F.elu's second derivative exactly at x = 0 is alpha (the x <= 0 side) in ksbuild and 0 in torch (torch "
          "takes the x <= 0 side for the first derivative and the x > 0 side for the second)",
          lambda f: f.stage == "interpreter-vs-torch" and "F.elu" in f.case.kernel.source and _order(_nesting(f)) >= 2),
]


def explained(failure) -> Known | None:
    """The known defect that explains `failure`, if any."""
    return next((k for k in KNOWN if k.explains(failure)), None)
