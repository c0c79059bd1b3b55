"""Custom derivative rules (issue 32): ksbuild.custom_jvp / custom_vjp in kernel files, used by every transformation.

Oracles: torch.autograd.Function subclasses with the same rules (written here again, in torch), torch.func.vmap
over them, and the kernel file itself run as PyTorch (the decorators wire the rules into torch's autograd). Each
rule differs from the derivative of its function's body somewhere (NaN at a point, or a factor on purpose), so a
transformation that differentiated the body instead fails these tests.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from source_kernels import build_source, ir_getter

from ksbuild.errors import KsbuildError
from ksbuild.frontends.python.source import compile_python_kernel
from ksbuild.ir.interp import eval_func
from ksbuild.ir.parser import parse_func
from ksbuild.ir.printer import print_func
from ksbuild.ir.verify import verify
from ksbuild.transforms.jacobian import hessian_func
from ksbuild.transforms.jvp import jvp_func
from ksbuild.transforms.pipeline import lower
from ksbuild.transforms.vjp import grad_func, vjp_func
from ksbuild.transforms.vmap import vmap_func

SOURCE = '''\
import torch
import ksbuild


@ksbuild.custom_jvp
def log1pexp(x: float) -> float:
    return torch.log(1.0 + torch.exp(x))  # its own derivative exp(x) / (1 + exp(x)) is inf / inf at x = 1000


@log1pexp.defjvp
def log1pexp_jvp(x: float, dx: float) -> tuple[float, float]:
    return log1pexp(x), dx * torch.sigmoid(x)


@ksbuild.custom_jvp
def safe_norm(x: "float[3]") -> float:
    return torch.sqrt(torch.sum(x * x))  # its own derivative x / |x| is NaN at 0


@safe_norm.defjvp
def safe_norm_jvp(x: "float[3]", dx: "float[3]") -> tuple[float, float]:
    n = torch.sqrt(torch.sum(x * x))
    return n, torch.sum(x * dx) / torch.clamp(n, min=1e-30)


@ksbuild.custom_vjp
def sin_times(x: float, y: float) -> float:
    return torch.sin(x) * y


def sin_times_fwd(x: float, y: float) -> tuple[float, float, float, float]:
    return torch.sin(x) * y, torch.cos(x), torch.sin(x), y


def sin_times_bwd(c: float, s: float, y: float, g: float) -> tuple[float, float]:
    return 2.0 * c * g * y, s * g  # twice the true d/dx, on purpose: the rule is used, not the body


sin_times.defvjp(sin_times_fwd, sin_times_bwd)


@ksbuild.custom_vjp
def clip_gradient(x: "float[n]") -> "float[n]":
    return x * 1.0


def clip_gradient_fwd(x: "float[n]") -> "float[n]":
    return x * 1.0


def clip_gradient_bwd(g: "float[n]") -> "float[n]":
    return torch.clamp(g, -1.0, 1.0)


clip_gradient.defvjp(clip_gradient_fwd, clip_gradient_bwd)


def softplus_loss(x: "float[n]", w: float) -> float:
    s = 0.0
    for i in range(x.shape[0]):
        s = s + w * log1pexp(x[i])
    return s


def lengths(p: "float[m, 3]") -> float:
    s = 0.0
    for i in range(p.shape[0]):
        s = s + safe_norm(p[i])
    return s


def sin_loss(x: "float[n]", y: float) -> float:
    s = 0.0
    for i in range(x.shape[0]):
        s = s + sin_times(x[i], y)
    return s


def clipped_loss(x: "float[n]") -> float:
    return torch.sum(clip_gradient(x) * 5.0)
'''
PY: dict = {}
exec(compile(SOURCE, "custom_kernels.py", "exec", dont_inherit=True), PY)
XS = np.array([-1000.0, -3.0, 0.5, 30.0, 1000.0])
P = np.array([[0.0, 0.0, 0.0], [3.0, -4.0, 12.0], [0.0, 1e-3, 0.0]])


@pytest.fixture(scope="module")
def ir(tmp_path_factory):
    return ir_getter(tmp_path_factory, SOURCE, "custom_kernels")


# ---- the oracles: torch.autograd.Function with the same rules ------------------------------------------------

class Log1pexp(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.log(1.0 + torch.exp(x))

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        return g * torch.sigmoid(ctx.saved_tensors[0])


class SafeNorm(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.sqrt(torch.sum(x * x))

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0], output)

    @staticmethod
    def backward(ctx, g):
        x, n = ctx.saved_tensors
        return g * x / torch.clamp(n, min=1e-30)


class SinTimes(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x, y):
        return torch.sin(x) * y

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return 2.0 * torch.cos(x) * g * y, torch.sin(x) * g


class ClipGradient(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x * 1.0

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        return torch.clamp(g, -1.0, 1.0)


def t(a) -> torch.Tensor:
    return torch.tensor(a, dtype=torch.float64)


def torch_grad(fn, *args) -> list[np.ndarray]:
    """d fn / d each argument, by torch's autograd through the Functions above."""
    xs = [t(a).requires_grad_() for a in args]
    return [g.numpy() for g in torch.autograd.grad(fn(*xs), xs)]


def softplus_loss(x, w):
    return torch.sum(w * Log1pexp.apply(x))


def lengths(p):
    return sum(SafeNorm.apply(row) for row in p)


def sin_loss(x, y):
    return torch.sum(SinTimes.apply(x, y))


def clipped_loss(x):
    return torch.sum(ClipGradient.apply(x) * 5.0)


def close(got, want, what: str = "") -> None:
    got = got if isinstance(got, (list, tuple)) else [got]
    assert len(got) == len(want), what
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g, dtype=np.float64), np.asarray(w), rtol=1e-12, atol=1e-14,
                                   err_msg=what)


# ---- the reference interpreter --------------------------------------------------------------------------------

def test_the_bodies_own_derivatives_differ(tmp_path):
    """The same file without the decorators: the body's derivative is wrong (0 or NaN) where the rule is not (so
    the tests below would catch the body being differentiated instead of the rule)."""
    plain = SOURCE.replace("@ksbuild.custom_jvp\n", "").replace("@log1pexp.defjvp\n", "") \
        .replace("@safe_norm.defjvp\n", "")
    path = tmp_path / "plain.py"
    path.write_text(plain.split("@ksbuild.custom_vjp")[0])
    g = eval_func(grad_func(compile_python_kernel(path, "log1pexp", "f64")), [1000.0])[0]
    assert not np.isclose(g, 1.0)  # (the rule's sigmoid(1000))
    g = eval_func(grad_func(compile_python_kernel(path, "safe_norm", "f64")), [np.zeros(3)])[0]
    assert np.isnan(g).all()


@pytest.mark.parametrize("x", XS)
def test_grad_and_jvp_of_a_custom_jvp(ir, x):
    f = ir("log1pexp")
    want = torch_grad(Log1pexp.apply, x)
    close(eval_func(grad_func(f), [x]), want, "grad")
    close(eval_func(jvp_func(f), [x, 0.5])[1], [0.5 * want[0]], "jvp")
    close(eval_func(vjp_func(f), [x, 2.0]), [2.0 * want[0]], "vjp")


def test_vmap_uses_the_batched_rule(ir):
    """vmap(grad(f)), vjp(vmap(f)) and jvp(vmap(f)): the rule batched, in both orders."""
    f = ir("log1pexp")
    want = torch.func.vmap(torch.func.grad(Log1pexp.apply))(t(XS)).numpy()
    vg, _ = vmap_func(grad_func(f), [True], "n")
    close(eval_func(vg, [XS]), [want], "vmap(grad)")
    vf, _ = vmap_func(f, [True], "n")
    verify(vf)
    close(eval_func(vjp_func(vf), [XS, np.ones(5)]), [want], "vjp(vmap)")
    close(eval_func(jvp_func(vf), [XS, np.full(5, 3.0)])[1], [3.0 * want], "jvp(vmap)")


def test_a_custom_jvp_called_in_a_loop(ir):
    got = eval_func(grad_func(ir("softplus_loss")), [XS, 0.7])
    close(got, torch_grad(softplus_loss, XS, 0.7))
    got = eval_func(grad_func(ir("lengths")), [P])
    close(got, torch_grad(lengths, P))
    assert not np.isnan(got[0]).any()


def test_custom_vjp(ir):
    """grad, vjp, vmap(vjp) and vjp(vmap) use bwd (twice the body's d/dx)."""
    f = ir("sin_times")
    for x, y in [(0.3, 1.7), (-2.0, 0.5)]:
        close(eval_func(grad_func(f), [x, y]), torch_grad(SinTimes.apply, x, y), "grad")
    close(eval_func(grad_func(ir("sin_loss")), [XS[1:4], 1.3]), torch_grad(sin_loss, XS[1:4], 1.3), "loop")
    want = torch.func.vmap(torch.func.grad(SinTimes.apply, argnums=(0, 1)), in_dims=(0, None))(t(XS), t(1.3))
    vg, _ = vmap_func(grad_func(f), [True, False], "n", [True, True])
    close(eval_func(vg, [XS, 1.3]), [w.numpy() for w in want], "vmap(grad)")
    vf, _ = vmap_func(f, [True, True], "n")
    ys = np.linspace(-1, 1, 5)
    close(eval_func(vjp_func(vf), [XS, ys, np.ones(5)]), torch_grad(lambda a, b: torch.sum(SinTimes.apply(a, b)),
                                                                   XS, ys), "vjp(vmap)")


def test_forward_mode_of_a_custom_vjp_is_bwd_transposed(ir):
    """jvp(f) of a custom_vjp: J v with J the Jacobian torch gets from the same backward rule."""
    x, y, dx, dy = 0.3, 1.7, 0.25, -2.0
    jac = torch.autograd.functional.jacobian(SinTimes.apply, (t(x), t(y)))
    want = float(jac[0] * dx + jac[1] * dy)
    close(eval_func(jvp_func(ir("sin_times")), [x, y, dx, dy])[1], [want])


def test_a_nonlinear_backward_rule(ir):
    """A bwd that clips: reverse mode calls it as written; forward mode (bwd transposed) is a located error."""
    x = np.array([0.5, -2.0, 3.0])
    close(eval_func(grad_func(ir("clipped_loss")), [x]), torch_grad(clipped_loss, x))
    with pytest.raises(KsbuildError) as e:
        eval_func(jvp_func(ir("clipped_loss")), [x, np.ones(3)])
    assert "custom_vjp" in e.value.message and "clip_gradient_bwd" in e.value.message
    assert e.value.loc is not None and "torch.clamp(g" in (e.value.loc.source_line or "")


def test_second_derivatives(ir):
    """hessian through a custom_jvp differentiates the rule (sigmoid' = s (1 - s)); through a custom_vjp, bwd."""
    for x in XS:
        s = float(torch.sigmoid(t(x)))
        close(eval_func(hessian_func(ir("log1pexp")), [x]), [s * (1.0 - s)], f"hessian at {x}")
    want = torch.autograd.functional.hessian(lambda a: SinTimes.apply(a, t(1.7)), t(0.3)).numpy()
    close(eval_func(hessian_func(ir("sin_times")), [0.3, 1.7]), [want])


def test_text_form_keeps_the_rules(ir):
    """print -> parse -> print is the identity, and the parsed function still differentiates by the rules."""
    for name, args in [("softplus_loss", [XS, 0.7]), ("sin_loss", [XS[1:4], 1.3])]:
        f = ir(name)
        g = parse_func(print_func(f))
        assert print_func(g) == print_func(f)
        close(eval_func(grad_func(g), args), eval_func(grad_func(f), args), name)


def test_lowered_ir_is_the_body(ir):
    """Compiled, a custom function is a call of its body; the lowered IR computes the same values."""
    for name, args in [("softplus_loss", [XS, 0.7]), ("lengths", [P]), ("sin_loss", [XS[1:4], 1.3])]:
        g = grad_func(ir(name))
        close(eval_func(lower(g), args), eval_func(g, args), name)


def test_the_file_run_as_torch_uses_the_rules():
    """ksbuild.custom_jvp / custom_vjp in Python: torch's autograd through the rules (x = 1000: no NaN)."""
    close(torch_grad(lambda x: PY["softplus_loss"](x, 0.7), XS), torch_grad(lambda x: softplus_loss(x, 0.7), XS))
    close(torch_grad(PY["sin_times"], 0.3, 1.7), torch_grad(SinTimes.apply, 0.3, 1.7))
    close(torch_grad(PY["clipped_loss"], [0.5, -2.0]), torch_grad(clipped_loss, [0.5, -2.0]))


# ---- compiled -------------------------------------------------------------------------------------------------

EXPORTS = {"f": "log1pexp", "g": "grad(log1pexp)", "j": "jvp(log1pexp)", "vg": "vmap(grad(log1pexp))",
           "vv": "vjp(vmap(log1pexp))", "gl": "grad(softplus_loss)", "gn": "grad(lengths)",
           "vn": "vjp(vmap(safe_norm))", "gs": "grad(sin_times)", "js": "jvp(sin_times)",
           "vgs": "vmap(grad(sin_times), in_axes=(0, None))", "gsl": "grad(sin_loss)", "gc": "grad(clipped_loss)"}


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    return build_source(tmp_path_factory, SOURCE, "custom_kernels", EXPORTS)


def test_compiled(pkg):
    want = torch.func.vmap(torch.func.grad(Log1pexp.apply))(t(XS)).numpy()
    close(pkg.vg(XS), [want], "vmap(grad)")
    close(pkg.vv(XS, np.ones(5)), [want], "vjp(vmap)")
    close([pkg.g(x) for x in XS], want, "grad")
    close([pkg.j(x, 2.0) for x in XS], 2.0 * want, "jvp")
    close(pkg.gl(XS, 0.7), torch_grad(softplus_loss, XS, 0.7), "grad(softplus_loss)")
    close(pkg.gn(P), torch_grad(lengths, P), "grad(lengths)")
    ct = np.array([1.0, -2.0, 0.5])
    close(pkg.vn(P, ct), torch_grad(lambda p: torch.sum(torch.func.vmap(SafeNorm.apply)(p) * t(ct)), P), "vjp(vmap)")
    close(pkg.gs(0.3, 1.7), torch_grad(SinTimes.apply, 0.3, 1.7), "grad(sin_times)")
    jac = torch.autograd.functional.jacobian(SinTimes.apply, (t(0.3), t(1.7)))
    close([pkg.js(0.3, 1.7, 0.25, -2.0)], [float(jac[0] * 0.25 - 2.0 * jac[1])], "jvp(sin_times)")
    want = torch.func.vmap(torch.func.grad(SinTimes.apply, argnums=(0, 1)), in_dims=(0, None))(t(XS), t(1.3))
    close(pkg.vgs(XS, 1.3), [w.numpy() for w in want], "vmap(grad(sin_times))")
    close(pkg.gsl(XS[1:4], 1.3), torch_grad(sin_loss, XS[1:4], 1.3), "grad(sin_loss)")
    x = np.array([0.5, -2.0, 3.0])
    close(pkg.gc(x), torch_grad(clipped_loss, x), "grad(clipped_loss)")


def test_dev_loop(tmp_path, monkeypatch):
    """ksbuild.vmap / ksbuild.kernel of a decorated function: compiled, and torch's autograd gets the rule."""
    import importlib

    import ksbuild
    (tmp_path / "custom_dev.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("custom_dev")
    x = t(XS).requires_grad_()
    ksbuild.vmap(mod.log1pexp)(x).sum().backward()
    close([x.grad.numpy()], torch_grad(lambda a: torch.sum(Log1pexp.apply(a)), XS))
    close(ksbuild.kernel(mod.sin_times).grad(t(0.3), t(1.7)), torch_grad(SinTimes.apply, 0.3, 1.7))


# ---- misuse: located errors --------------------------------------------------------------------------------------

HEAD = "import torch\nimport ksbuild\n\n\n"
WRONG = {
    "arity": ('''@ksbuild.custom_jvp
def f(x: float) -> float:
    return x * x


@f.defjvp
def f_jvp(x: float) -> tuple[float, float]:
    return x * x, 2.0 * x
''', "def f_jvp", "takes 1 argument(s), but it must take 2"),
    "shapes": ('''@ksbuild.custom_jvp
def f(x: "float[3]") -> float:
    return torch.sum(x * x)


@f.defjvp
def f_jvp(x: "float[3]", dx: "float[3]") -> tuple[float, "float[3]"]:
    return torch.sum(x * x), 2.0 * x * dx
''', "-> tuple[float", "must return f's results, then one tangent per float result: (f64, f64)"),
    "bwd_count": ('''@ksbuild.custom_vjp
def f(x: float, y: float) -> float:
    return x * y


def f_fwd(x: float, y: float) -> tuple[float, float, float]:
    return x * y, x, y


def f_bwd(x: float, y: float, g: float) -> float:
    return y * g
f.defvjp(f_fwd, f_bwd)
''', "-> float", "one cotangent per float argument of f: (f64, f64)"),
    "bwd_arity": ('''@ksbuild.custom_vjp
def f(x: float) -> float:
    return x * x


def f_fwd(x: float) -> tuple[float, float]:
    return x * x, x


def f_bwd(g: float) -> float:
    return g
f.defvjp(f_fwd, f_bwd)
''', "def f_bwd", "the residuals fwd returns, then one cotangent per float result"),
    "no_rule": ('''@ksbuild.custom_jvp
def f(x: float) -> float:
    return x * x
''', "@ksbuild.custom_jvp", "declared custom_jvp but given no rule"),
    "not_custom": ('''def f(x: float) -> float:
    return x * x


@f.defjvp
def f_jvp(x: float, dx: float) -> tuple[float, float]:
    return x * x, 2.0 * x * dx
''', "@f.defjvp", "'f' is not decorated with @ksbuild.custom_jvp"),
    "defvjp_args": ('''@ksbuild.custom_vjp
def f(x: float) -> float:
    return x * x


f.defvjp(lambda x: x)
''', "f.defvjp(lambda", "defvjp takes 2 function(s) of this file by name"),
}


@pytest.mark.parametrize("case", list(WRONG))
def test_misuse_is_a_located_error(tmp_path, case):
    body, line, message = WRONG[case]
    path = tmp_path / "bad.py"
    call = {"shapes": "f(x + torch.zeros(3))", "bwd_count": "f(x, x)"}.get(case, "f(x)")
    path.write_text(HEAD + body + f"\n\ndef use(x: float) -> float:\n    return {call} * 2.0\n")
    with pytest.raises(KsbuildError) as e:
        compile_python_kernel(path, "use", "f64")
    assert message in e.value.message, e.value.message
    assert e.value.loc is not None and e.value.loc.file == str(path)
    assert line in (e.value.loc.source_line or ""), (e.value.loc, e.value.message)


def test_the_docs_example(tmp_path):
    """docs/custom-derivatives.md's kernels compile and do what the page says."""
    import re
    from pathlib import Path

    page = (Path(__file__).parent.parent / "docs" / "custom-derivatives.md").read_text()
    path = tmp_path / "kernels.py"
    path.write_text("\n\n".join(re.findall(r"```python\n(.*?)```", page, re.S)))
    (tmp_path / "bessel.c").write_text((Path(__file__).parent.parent / "examples/extern/bessel.c").read_text())
    dlog, _ = vmap_func(grad_func(compile_python_kernel(path, "log1pexp", "f64")), [True], "n")
    close(eval_func(dlog, [np.array([-1000.0, 0.0, 1000.0])]), [np.array([0.0, 0.5, 1.0])])
    close(eval_func(grad_func(compile_python_kernel(path, "safe_norm", "f64")), [np.zeros(3)]), [np.zeros(3)])
    clip = compile_python_kernel(path, "clip_gradient", "f64")
    close(eval_func(vjp_func(clip), [np.zeros(3), np.array([-5.0, 0.5, 3.0])]), [np.array([-1.0, 0.5, 1.0])])
    with pytest.raises(KsbuildError, match="not linear in its cotangents"):
        lower(jvp_func(clip))
    ring, r, k, h = compile_python_kernel(path, "ring", "f64"), np.array([0.5, 4.0]), 1.3, 1e-6  # (an extern's rule)
    dk = (eval_func(ring, [r, k + h])[0] - eval_func(ring, [r, k - h])[0]) / (2 * h)
    np.testing.assert_allclose(eval_func(grad_func(ring, argnums=(1,)), [r, k])[0], dk, rtol=1e-6)
