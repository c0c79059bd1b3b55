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
    Known("inf-vs-nan",
          "where torch's derivative is infinite (sqrt at 0 with a nonzero tangent, reached through several paths), "
          "ksbuild may give nan: inf - inf or 0 * inf in a different order of operations than torch's. "
          "Reproducer: seed 200 kernel 161, jacfwd of `t1 = F.elu(x) ** 0.5; t1.mean() / torch.logsumexp(t1, dim=0)` "
          "at x[0] = 0. Reduced (t1 = sqrt(x); t1.mean() / logsumexp(t1)): forward mode's quotient rule is "
          "inf / L - m * inf / L**2 = nan, and torch.func.jacfwd gives nan there too; the fuzzer's oracle computes "
          "every Jacobian in reverse mode (torch.func.vjp), which gives inf. Not a ksbuild defect so much as "
          "forward and reverse mode disagreeing on inf arithmetic. Also seed 2000 kernel 174, jvp(vmap(f)): "
          "t = sqrt(0) (a torch.where's side taken) with an infinite tangent, then silu(t), which is "
          "t * sigmoid(t) here: its jvp's t * dsigmoid is 0 * inf = nan where torch's fused silu rule gives "
          "inf (the kernel also has a nan value on the way, W / W at 0, so its stage is nonfinite-intermediate; "
          "docs/ad-correctness.md)",
          lambda f: f.stage in ("interpreter-vs-torch", "nonfinite-intermediate")
          and "got np.float64(nan), want np.float64(" in f.message
          and ("want np.float64(inf)" in f.message or "want np.float64(-inf)" in f.message)),
    Known("hypot-origin-third-order",
          "math.hypot is not differentiable at the origin; from the third derivative on, torch's own answer there "
          "depends on how it nests its derivatives (seed 100 kernel 47: hessian(jacfwd(f)) at x1 = 0 through "
          "hypot(x1, c * x1): torch.func.hessian gives nan, the fuzzer's reverse-over-reverse oracle 0, ksbuild nan)",
          lambda f: f.stage == "interpreter-vs-torch" and "math.hypot" in f.case.kernel.source
          and _order(_nesting(f)) >= 3 and "got np.float64(nan)" in f.message),
    Known("clamped-negative-zero",
          "a clamp at 0 of -0.0 is +0.0 in the compiled code and -0.0 in the interpreter (and torch): simplify's "
          "clamp_inclusive makes select(x < 0, 0, x) the ReLU form select(x <= 0, 0, x), on purpose (one form "
          "whichever frontend made the clamp); the values are equal, but a derivative that is infinite there "
          "(sqrt of the clamp at 0) takes the zero's sign: the compiled code gives -inf where the interpreter and "
          "torch give +inf, or the reverse. Reproducer: seed 8100 kernel 29, jacfwd of sqrt(clamp(x0 / x2, 0, 2)) "
          "at x0 = 0, x2 = -1",
          lambda f: f.stage == "compiled-vs-interpreter" and any(
              f"got np.float64({a}inf), want np.float64({b}inf)" in f.message for a, b in (("-", ""), ("", "-")))),
    Known("oracle-view-error",
          "the oracle, not ksbuild: torch.func raises 'view size is not compatible with input tensor's size and "
          "stride' inside the fuzzer's own oracle (fuzz/nesting.py) for reverse over reverse of `W.T @ u` "
          "(seed 8200 kernel 77: jacrev(vjp(f)) of sqrt(sqrt((W.T @ u) ** 2 + 1)), in u and W or in u and the "
          "cotangent; the same nesting written directly with torch.func.jacrev and vjp computes it), so there is "
          "nothing to compare",
          lambda f: f.stage == "oracle-error" and "view size is not compatible" in f.message),
]


def explained(failure) -> Known | None:
    """The known defect that explains `failure`, if any."""
    return next((k for k in KNOWN if k.explains(failure)), None)
