"""Defects the differential fuzzer (fuzz/, README "The fuzzer") found, each reduced to a kernel and checked
against torch.func, interpreted and compiled (one package for the file)."""
from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from source_kernels import build_source, ir_getter

from ksbuild.ir.interp import eval_func
from ksbuild.transforms.pipeline import lower
from ksbuild.transforms.rewrite import walk_funcs
from ksbuild.transforms.vjp import grad_func

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: fuzz/ is not installed

SOURCE = '''\
import math
import re

import torch


def ignores(a: float, b: float = 0.25) -> float:
    return b


def twice(a: float) -> float:
    return a * 2.0


def dead_call(x: float) -> float:
    return ignores(twice(x)) + x


def nan_side(x: float, y: float) -> float:
    return y if x > 0.5 else math.exp(x) * math.log(y)


def where_shared(y: "float[n]", s: float) -> float:
    return torch.where(y[0] > 0.5, s, y[1])
'''

EXPORTS = {"dead_call": "dead_call", "nan_side_gg": "grad(grad(nan_side, argnums=(0,)), argnums=(0,))",
           "nan_side_h": "hessian(nan_side, argnums=(0, 1))",
           "where_jacrev": "jacrev(vmap(where_shared, in_axes=(None, 0)), argnums=(0,))",
           "where_jacfwd": "jacfwd(vmap(where_shared, in_axes=(None, 0)), argnums=(0,))"}


@pytest.fixture(scope="module")
def ir(tmp_path_factory):
    return ir_getter(tmp_path_factory, SOURCE, "fuzz_regressions")


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    return build_source(tmp_path_factory, SOURCE, "fuzz_regressions", EXPORTS)


def test_unread_call_argument_is_dead(ir):
    """fuzz seed 3 kernel 1: `ignores(twice(x))` kept the call of `twice` (its result unread), and the C++
    variable it set was unused: -Werror stopped the build. The call's prune rule drops unread arguments."""
    names = {e.params["fn"].name for f in walk_funcs(lower(ir("dead_call"))) for e in f.eqns if e.prim.name == "call"}
    assert "twice" not in names


def test_unread_call_argument_compiles(pkg):
    assert pkg.dead_call(3.0) == 3.25


def torch_nan_side(x, y):
    return y if x > 0.5 else torch.exp(x) * torch.log(y)


POINTS = [(1.0, -0.3), (0.75, -2.0), (0.0, 2.0), (1.0, 2.0), (0.25, 1.5)]


@pytest.mark.parametrize("x, y", POINTS)
def test_second_derivative_of_if_expression(ir, pkg, x, y):
    """fuzz seed 3 kernel 6: the second derivative of an if-expression whose side not taken has a NaN value
    (log of a negative) was NaN: the first derivative's selects put that side's values into the derivative
    program, where the zero cotangent met them in a plain product (0 * nan). Its derivatives are now
    cond_selects of the sides' derivatives (differentiated as an if at every order)."""
    tx, ty = torch.tensor(x, dtype=torch.float64), torch.tensor(y, dtype=torch.float64)
    want = torch.func.grad(torch.func.grad(torch_nan_side))(tx, ty).item()
    gg = grad_func(grad_func(ir("nan_side"), argnums=(0,)), argnums=(0,))
    assert eval_func(gg, [np.float64(x), np.float64(y)])[0] == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert pkg.nan_side_gg(x, y) == pytest.approx(want, rel=1e-12, abs=1e-12)
    want_h = torch.func.hessian(torch_nan_side, argnums=(0, 1))(tx, ty)
    got_h = pkg.nan_side_h(x, y)
    for got, w in zip(got_h, [h for row in want_h for h in row]):
        assert not np.isnan(w.item()) and got == pytest.approx(w.item(), rel=1e-12, abs=1e-12)


LOOP_SOURCE = '''\
import math
import re


def loop_ifexp(x0: float) -> float:
    t1 = x0
    for i in range(1, 4):
        t1 = 0.75 * t1 + math.tanh((x0 if x0 <= -1.0 else x0) * 2.0)
    return math.exp(t1)
'''
LOOP_EXPR = "jacrev(grad(jvp(loop_ifexp)), argnums=(0,))"


def test_loop_keeps_only_the_stacked_inputs_it_reads(tmp_path_factory):
    """fuzz seed 100 kernel 15: after a third derivative, a loop's body no longer read two of its stacked
    inputs, which stayed in the loop (the C++ filled arrays nobody read: -Werror stopped the build). The
    loop's prune rule drops them; the export builds and agrees with the interpreter."""
    from ksbuild.errors import Location
    from ksbuild.exports import apply_transform
    from ksbuild.manifest import parse_transform

    get = ir_getter(tmp_path_factory, LOOP_SOURCE, "loop_regression")
    f = apply_transform(parse_transform(LOOP_EXPR, Location("m"), ["loop_ifexp"]), {"loop_ifexp": get("loop_ifexp")},
                        Location("m"))
    for g in walk_funcs(lower(f)):
        for e in g.eqns:
            if e.prim.name == "loop":
                body, nc, ncar = e.params["body"], e.params["n_consts"], e.params["n_carry"]
                read = {a for q in body.eqns for a in q.ins} | set(body.results)
                assert all(p in read for p in body.params[1 + nc + ncar:])
    pkg = build_source(tmp_path_factory, LOOP_SOURCE, "loop_regression", {"loop_d3": LOOP_EXPR})
    for x in (-1.5, -1.0, 0.3):
        want = [np.asarray(r) for r in eval_func(f, [np.float64(x), np.float64(0.5)])]
        got = pkg.loop_d3(x, 0.5)
        got = list(got) if isinstance(got, tuple) else [got]
        for g_, w in zip(got, want):
            np.testing.assert_allclose(g_, w, rtol=1e-12)


# ---- a value computed before an if for one branch alone (fuzz/known.py 'nonfinite-intermediate' until now) --

BEFORE_IF_SOURCE = '''\
import math
import re

import torch


def nan_before_if(x: float, y: float) -> float:
    t = math.tanh(math.sqrt(x))
    if y > 0.0:
        return t
    return y


def nan_before_ifexp(x: float, y: float) -> float:
    t = math.tanh(math.sqrt(x))
    return t if y > 0.0 else y


def nan_in_condition(x: float, y: float) -> float:
    t = math.tanh(math.sqrt(x))
    if t < 0.5:
        return t * y
    return y


def nan_factor_before_if(x: float) -> float:
    t = math.pow(x, x)
    if x > 0.5:
        return t
    return 2.0 * x


def pow_zero_exponent(x: float, y: float) -> float:
    t = math.pow(math.sqrt(x), torch.clamp(1.0 / y, 0.0, 1.0))
    return math.log1p(math.pow(y, t))
'''
BEFORE_IF_EXPORTS = {
    "g_stmt": "grad(nan_before_if)", "g_expr": "grad(nan_before_ifexp)", "g_cond": "grad(nan_in_condition)",
    "jg_stmt": "jvp(grad(nan_before_if))", "vjpv_stmt": "vjp(vmap(nan_before_if))",
    "vjpv_expr": "vjp(vmap(nan_before_ifexp))", "gg_pow": "grad(grad(nan_factor_before_if))",
    "g_pow0": "grad(pow_zero_exponent)",
}
BEFORE_IF_POINTS = [(-1.0, -1.0), (0.0, -1.0), (4.0, -1.0), (4.0, 2.0), (0.25, 1.0)]


@pytest.fixture(scope="module")
def before_if(tmp_path_factory):
    return (ir_getter(tmp_path_factory, BEFORE_IF_SOURCE, "before_if"),
            build_source(tmp_path_factory, BEFORE_IF_SOURCE, "before_if", BEFORE_IF_EXPORTS))


def _torch_kernel(name):
    from fuzz.torch_shim import load
    return load(BEFORE_IF_SOURCE)[name]


def _t(*xs):
    return [torch.tensor(x, dtype=torch.float64) for x in xs]


@pytest.mark.parametrize("x, y", BEFORE_IF_POINTS)
@pytest.mark.parametrize("export, kernel", [("g_stmt", "nan_before_if"), ("g_expr", "nan_before_ifexp"),
                                            ("g_cond", "nan_in_condition")])
def test_value_before_an_if_for_the_other_branch(before_if, export, kernel, x, y):
    """fuzz (seed 100 kernels 33, 44, 190; ~1.4% of exports): `t = tanh(sqrt(x))` before an if that returns
    t on one side only; at x = -1, t = nan and the zero cotangent of t met tanh'(nan) in a plain product outside
    the if: d/dx = nan where torch gives 0. Also when the condition reads t (t < 0.5 is false for nan): then
    only t's derivative moves into the branch. transforms/sink.py computes them in the branch that reads them."""
    ir, pkg = before_if
    want = [w.item() for w in torch.func.grad(_torch_kernel(kernel), argnums=(0, 1))(*_t(x, y))]
    f = grad_func(ir(kernel))
    assert [float(v) for v in eval_func(f, [np.float64(x), np.float64(y)])] == pytest.approx(want, rel=1e-12)
    assert list(getattr(pkg, export)(x, y)) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("x, y", BEFORE_IF_POINTS)
def test_value_before_an_if_forward_over_reverse(before_if, x, y):
    _, pkg = before_if
    g = torch.func.grad(_torch_kernel("nan_before_if"), argnums=(0, 1))
    _, want = torch.func.jvp(lambda a, b: g(a, b), tuple(_t(x, y)), tuple(_t(0.5, -1.5)))
    assert list(pkg.jg_stmt(x, y, 0.5, -1.5)) == pytest.approx([w.item() for w in want], rel=1e-12)


@pytest.mark.parametrize("export, kernel", [("vjpv_stmt", "nan_before_if"), ("vjpv_expr", "nan_before_ifexp")])
def test_value_before_an_if_under_vmap(before_if, export, kernel):
    """fuzz seed 100 kernel 190: vjp(vmap(f)) of the same; under vmap the if is per lane (both branches and a
    select), and the value is now computed inside the branch before vmap, so the lane mask covers it."""
    _, pkg = before_if
    xs, ys, ct = np.array([-1.0, 4.0, 0.0, 0.25]), np.array([-1.0, 2.0, -2.0, 1.0]), np.array([1.0, -2.0, 0.5, 3.0])
    fn = _torch_kernel(kernel)
    want = np.array([[w.item() for w in torch.func.grad(fn, argnums=(0, 1))(*_t(x, y))] for x, y in zip(xs, ys)])
    got = getattr(pkg, export)(xs, ys, ct)
    np.testing.assert_allclose(np.stack(got, axis=1), want * ct[:, None], rtol=1e-12)


@pytest.mark.parametrize("x", [-1.0, -0.5, 0.25, 2.0])
def test_pow_before_an_if_second_order(before_if, x):
    """fuzz seed 200 kernel 59: pow(x, x)'s exponent derivative log(x) = nan at x < 0, on the side not taken,
    reached the second derivative (0 * nan)."""
    ir, pkg = before_if
    fn = _torch_kernel("nan_factor_before_if")
    want = torch.func.grad(torch.func.grad(fn))(*_t(x)).item()
    assert eval_func(grad_func(grad_func(ir("nan_factor_before_if"))), [np.float64(x)])[0] == \
        pytest.approx(want, rel=1e-12)
    assert pkg.gg_pow(x) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("x, y", [(2.2, -0.3), (1.0, -0.36), (2.2, 0.5), (0.5, -2.0)])
def test_pow_base_derivative_at_a_zero_exponent(before_if, x, y):
    """fuzz seed 8100 kernel 11: t = sqrt(x) ** clamp(1 / y, 0, 1) is 1 for y < 0, and the cotangent t gets from
    pow(y, t) is NaN there (its exponent factor log(y), y < 0). torch's pow gives the base 0 where the exponent is 0
    (where(exponent == 0, 0, ...)), so d/dx = 0; ksbuild multiplied the NaN by y x^(y-1) = 0 (masked by the
    tangent only): NaN. The select on the exponent is now outside the product, so it masks the cotangent."""
    ir, pkg = before_if
    want = [w.item() for w in torch.func.grad(_torch_kernel("pow_zero_exponent"), argnums=(0, 1))(*_t(x, y))]
    assert not any(math.isnan(w) for w in want)
    got = eval_func(grad_func(ir("pow_zero_exponent")), [np.float64(x), np.float64(y)])
    assert [float(v) for v in got] == pytest.approx(want, rel=1e-12)
    assert list(pkg.g_pow0(x, y)) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("y0", [0.0, 1.0])
def test_jacobian_of_select_with_a_shared_operand(pkg, y0):
    """fuzz seed 100 kernel 105: under vmap(in_axes=(None, 0)) the select torch.where(y[0] > 0.5, s, y[1]) has a
    shared condition and y[1], a batched s; its jvp in y alone (s's tangent missing) was a scalar, not one per
    lane, so jacfwd and jacrev in y returned [n] instead of [lanes, n]. A missing tangent is now a zero of the
    result's whole type."""
    y, s = np.array([y0, 2.0, 3.0]), np.array([0.5, -1.0])
    want = np.zeros((2, 3)) if y0 > 0.5 else np.array([[0.0, 1.0, 0.0]] * 2)
    for name in ("where_jacrev", "where_jacfwd"):
        np.testing.assert_array_equal(getattr(pkg, name)(y, s), want, err_msg=name)


ELU_SOURCE = '''\
import torch
import torch.nn.functional as F


def elu1(x: float) -> float:
    return F.elu(x)


def elu2(x: float) -> float:
    return F.elu(x, alpha=2.0)


def selu(x: float) -> float:
    return F.selu(x)


def celu(x: float) -> float:
    return F.celu(x, alpha=0.5)
'''


@pytest.mark.parametrize("kernel", ["elu1", "elu2", "selu", "celu"])
@pytest.mark.parametrize("x", [0.0, -0.5, 0.7])
def test_elu_derivatives_at_0(tmp_path_factory, kernel, x):
    """fuzz seed 100 kernel 37: F.elu's second derivative at x = 0 was alpha (the x <= 0 side); torch's is 0
    (elu_backward takes x <= 0, its own derivative x < 0). Orders 1 to 3, against torch.func.grad."""
    from fuzz.torch_shim import load
    f, tf = ir_getter(tmp_path_factory, ELU_SOURCE, "elu_orders")(kernel), load(ELU_SOURCE)[kernel]
    for order in range(1, 4):
        f, tf = grad_func(f), torch.func.grad(tf)
        want = tf(torch.tensor(x, dtype=torch.float64)).item()
        assert eval_func(f, [np.float64(x)])[0] == pytest.approx(want, rel=1e-12, abs=1e-15), order


LANE_SOURCE = '''\
import math
import re


def lane_if(x: float) -> float:
    if x < 0.25:
        return x * x
    return math.tanh(math.sqrt(x))
'''
LANE_EXPORTS = {"rvv": "jacrev(vjp(vmap(lane_if)), argnums=(0,))", "fvv": "jacfwd(vjp(vmap(lane_if)), argnums=(0,))",
                "rrv": "jacrev(jacrev(vmap(lane_if)))", "hv": "hessian(vmap(lane_if))"}


@pytest.mark.parametrize("export", sorted(LANE_EXPORTS))
def test_second_derivative_of_a_per_lane_if(tmp_path_factory, export):
    """fuzz seed 300 kernel 154: jacrev(vjp(vmap(f))) of a per-lane if at lanes x = [0.1, -0.5] was [[2, nan],
    [0, nan]]: the first derivative masks the tangents of the branch not taken, but a second reverse pass sent a
    zero cotangent through that branch's primal work (tanh(sqrt(-0.5)) = nan, in plain products). Each branch now
    reads its operands through lane_owned, whose derivative is zero on the other branch's lanes."""
    ir = ir_getter(tmp_path_factory, LANE_SOURCE, "lane_if")("lane_if")
    expr = LANE_EXPORTS[export]
    f = _transformed(lambda name: ir, expr, "lane_if")
    x = np.array([0.1, -0.5])
    args = [x, np.array([1.0, 1.0])] if "vjp" in expr else [x]
    second = [torch.func.grad(torch.func.grad(load_torch(LANE_SOURCE)["lane_if"]))(*_t(v)).item() for v in x]
    assert second == [2.0, 2.0]  # torch, lane by lane: d²/dx² x² (each lane takes the first branch)
    want = np.diag(second)  # the jacobian of the lanes' gradients (d/dx of ct · f'(x), ct = 1)
    if export in ("rrv", "hv"):  # d² f_i / dx_j dx_k: nonzero where i = j = k
        want = np.einsum("ij,jk->ijk", want, np.eye(2))
    pkg = build_source(tmp_path_factory, LANE_SOURCE, "lane_if", {export: expr})
    for got in (eval_func(f, args)[0], getattr(pkg, export)(*args)):
        np.testing.assert_array_equal(np.asarray(got), want)


SINGULAR_SOURCE = '''\
import math
import re

import torch


def max_drops_sqrt(x1: float, x2: float) -> float:
    return max(x2 * math.sqrt(x1), 1.0)


def clamp_cumsum_sqrt(W: "float[m, n]") -> float:
    t = torch.sqrt(torch.clamp(W, min=0.0, max=1.0) * torch.cumsum(W[-1], dim=0)[None, :])
    return t[1, 0]


def sqrt_log1p_min(u: "float[n]") -> float:
    return torch.sqrt(torch.log1p(torch.minimum(u[1], u[0] + 2.0)))


def product(x: float, y: float) -> float:
    return x * math.sqrt(y)
'''
SINGULAR_EXPORTS = {"vvv_product": "vjp(vjp(vjp(product)))","jg_max": "jvp(grad(max_drops_sqrt))",
                    "jfr_clamp": "jacfwd(jacrev(clamp_cumsum_sqrt, argnums=(0,)), argnums=(0,))",
                    "h_clamp": "hessian(clamp_cumsum_sqrt, argnums=(0,))",
                    "h_min": "hessian(sqrt_log1p_min, argnums=(0,))",
                    "jrr_min": "jacrev(jacrev(sqrt_log1p_min, argnums=(0,)), argnums=(0,))"}


@pytest.fixture(scope="module")
def singular(tmp_path_factory):
    return (ir_getter(tmp_path_factory, SINGULAR_SOURCE, "singular2"),
            build_source(tmp_path_factory, SINGULAR_SOURCE, "singular2", SINGULAR_EXPORTS))


def _transformed(ir, expr, name):
    from ksbuild.errors import Location
    from ksbuild.exports import apply_transform
    from ksbuild.manifest import parse_transform

    return apply_transform(parse_transform(expr, Location("m"), [name]), {name: ir(name)}, Location("m"))


def _agrees_where_torch_is_finite(got, want):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    finite = np.isfinite(want)
    assert not np.isnan(got[finite]).any(), (got, want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-12, atol=1e-12)


def test_second_derivative_of_a_discarded_singular_value(singular):
    """fuzz seed 700 kernel 264: max(x2 * sqrt(x1), 1) at x1 = 0 discards the product; jvp(grad) was nan in x2:
    the jvp of mul's transpose (ct * sqrt(x1), ct = 0 from the max) met sqrt's infinite tangent in a plain
    product, 0 * inf. mul's transpose makes a ctmul, whose jvp masks that term by the cotangent."""
    ir, pkg = singular
    fn = load_torch(SINGULAR_SOURCE)["max_drops_sqrt"]
    x, dx = (0.0, 2.1), (-1.4, -0.57)
    want = torch.func.jvp(torch.func.grad(fn, argnums=(0, 1)), tuple(_t(*x)), tuple(_t(*dx)))[1]
    want = [w.item() for w in want]
    assert want == [0.0, 0.0]
    f = _transformed(ir, SINGULAR_EXPORTS["jg_max"], "max_drops_sqrt")
    assert [float(v) for v in eval_func(f, [np.float64(v) for v in x + dx])] == want
    assert list(pkg.jg_max(*x, *dx)) == want


@pytest.mark.parametrize("export", ["jfr_clamp", "h_clamp"])
def test_jacfwd_direction_that_misses_an_infinite_cotangent(singular, export):
    """fuzz seed 700 kernel 60: d/dW of t[1, 0] = sqrt(clamp(W[1, 0]) * W[1, 0]) is infinite at W[1, 0] = 0;
    jacfwd's directions W[0, j] have a zero tangent there, which met that infinite cotangent in the jvp of mul's
    transpose: 0 * inf = nan across the row, where torch (reverse over reverse) gives 0."""
    ir, pkg = singular
    fn = load_torch(SINGULAR_SOURCE)["clamp_cumsum_sqrt"]
    W = np.array([[0.66, -0.51, -0.71], [0.0, 0.0, 0.21]])
    want = torch.func.jacrev(torch.func.jacrev(fn))(*_t(W)).numpy()
    assert np.isfinite(want).sum() >= 12
    _agrees_where_torch_is_finite(eval_func(_transformed(ir, SINGULAR_EXPORTS[export], "clamp_cumsum_sqrt"),
                                            [W])[0], want)
    _agrees_where_torch_is_finite(getattr(pkg, export)(W), want)


@pytest.mark.parametrize("export", ["h_min", "jrr_min"])
def test_hessian_direction_that_misses_a_singular_rule(singular, export):
    """fuzz seed 700 kernel 163: sqrt(log1p(min(u[1], u[0] + 2))) at u[1] = 0: the jvp of log1p's masked rule
    (mulz(ct, 1 / (1 + x)), ct infinite there) multiplied the infinite cotangent by the zero tangent of the
    direction u[0] (which the min discards), masked by the cotangent alone: nan. mulz's jvp masks that term by
    the tangent too."""
    ir, pkg = singular
    fn = load_torch(SINGULAR_SOURCE)["sqrt_log1p_min"]
    u = np.array([0.5, 0.0])
    want = torch.func.jacrev(torch.func.jacrev(fn))(*_t(u)).numpy()
    assert want[1, 0] == 0.0
    _agrees_where_torch_is_finite(eval_func(_transformed(ir, SINGULAR_EXPORTS[export], "sqrt_log1p_min"), [u])[0],
                                  want)
    _agrees_where_torch_is_finite(getattr(pkg, export)(u), want)


def load_torch(source):
    from fuzz.torch_shim import load
    return load(source)


def _torch_vjp(f, n):
    """torch's vjp(f) as a function of (n primals, then the cotangents) returning every primal's cotangent."""
    def vjp(*xs):
        outs, back = torch.func.vjp(f, *xs[:n])
        return back(xs[n:] if isinstance(outs, tuple) else xs[n])
    return vjp


@pytest.mark.parametrize("c", [0.0, 0.5])
def test_third_order_at_a_zero_cotangent(singular, c):
    """fuzz seed 700 kernels 21, 58 (found after the rules above, in their first form): vjp(vjp(vjp(f))) where
    the first cotangent c is 0. The second derivative's c * dy term was masked by a select on c == 0, whose own
    derivative in c is 0, so d/dc (c * dy) = dy came out 0. mulzz(c, dy) masks the value alone; its derivative
    in c is mulzz(dc, dy)."""
    ir, pkg = singular
    f = load_torch(SINGULAR_SOURCE)["product"]
    g = _torch_vjp(_torch_vjp(_torch_vjp(f, 2), 3), 5)
    point = [0.7, 0.3, c, 0.4, -1.1, 0.9, -0.6, 1.3]
    want = [w.item() for w in g(*_t(*point))]
    assert want[2] != 0.0
    got = eval_func(_transformed(ir, SINGULAR_EXPORTS["vvv_product"], "product"), [np.float64(v) for v in point])
    np.testing.assert_allclose([float(v) for v in got], want, rtol=1e-12)
    np.testing.assert_allclose(list(pkg.vvv_product(*point)), want, rtol=1e-12)


POW_SOURCE = '''\
import math
import re


def pow_ifexp(x: float) -> float:
    return math.pow(x, (math.pow(x, 1.5) if x >= 0.0 else math.floor(x)))
'''


def test_reverse_over_forward_of_pow_with_an_if_expression_exponent(tmp_path_factory):
    """fuzz seed 1000 kernel 12 (compiled run): jacrev(jacfwd) of pow(x, e) at x = -0.5, e an if-expression taking
    floor: pow's exponent factor log(x) x^y (NaN for x < 0, masked where the exponent's tangent is 0) was a plain
    product, and the transpose of its jvp multiplied a zero cotangent by log(x) = NaN. It is mulz(x^y, log x) now."""
    ir = ir_getter(tmp_path_factory, POW_SOURCE, "pow_ifexp")
    f = _transformed(ir, "jacrev(jacfwd(pow_ifexp))", "pow_ifexp")
    fn = load_torch(POW_SOURCE)["pow_ifexp"]
    want = torch.func.grad(torch.func.grad(fn))(*_t(-0.5)).item()
    assert want == -16.0
    assert float(eval_func(f, [np.float64(-0.5)])[0]) == want


LITERAL_ARG_SOURCE = '''\
import math
import re

import torch


def lit_h0(a: float, b: float = 0.5) -> float:
    return math.atan2(b, math.hypot(b, -0.5))


def literal_arg(x0: float) -> float:
    if torch.maximum(x0, x0) != 1.5:
        t1 = (((x0 if x0 <= 0.0 and x0 <= 1.0 else x0) if x0 >= -0.5 and x0 < 3.0 else (x0 + x0))
              / (max(x0, x0) * math.expm1(x0)) if (max(x0, x0) * math.expm1(x0)) != 0.0
              else ((x0 if x0 <= 0.0 and x0 <= 1.0 else x0) if x0 >= -0.5 and x0 < 3.0 else (x0 + x0)))
    else:
        t1 = ((torch.minimum(x0, x0) if x0 != 1.5 else torch.clamp(x0, 0.0, 1.0)) + lit_h0(x0, min(x0, x0)))
    t2 = (3.0 + -torch.relu(x0))
    t3 = t2
    return (math.sqrt(math.log(-math.sin(t1))) if math.log(-math.sin(t1)) > 0.0 else (2.0 + (t2 if x0 < 0.25 else x0)))
'''


def test_a_literal_argument_of_a_kept_call_is_packed(tmp_path_factory):
    """fuzz seed 1200 kernel 26: vmap(hessian(grad(f))) passed a literal tensor (a splat) to a helper kept as a call
    whose argument must be dense; packing it read the literal's name hint, which a literal has not: an internal error
    (AttributeError) in the build. Now it is packed like any other argument; the values are the interpreter's."""
    expr = "vmap(hessian(grad(literal_arg, argnums=(0,)), argnums=(0,)))"
    pkg = build_source(tmp_path_factory, LITERAL_ARG_SOURCE, "literal_arg", {"vhg": expr})
    ir = ir_getter(tmp_path_factory, LITERAL_ARG_SOURCE, "literal_arg")
    x = np.array([-0.7, 0.1, 0.4, 2.0])
    want = eval_func(_transformed(ir, expr, "literal_arg"), [x])[0]
    np.testing.assert_allclose(pkg.vhg(x), want, rtol=1e-12, atol=1e-12)


MAX_BUFFER_SOURCE = '''\
import torch
import torch.nn.functional as F


def max_buffer(W: "float[m, n]", y: "float[n]") -> tuple["float[n]", "float[n]"]:
    if (torch.minimum(W[:, -1], W[:, -1])).max() > 1.0:
        return (torch.sin(W[-1]) * (W[:, 0]).max()), torch.expm1(torch.sigmoid(y))
    return torch.sqrt(torch.sqrt(torch.log1p(y) ** 2 + 1.0) ** 2 + 1.0), torch.logsumexp(F.log_softmax(W, dim=1), dim=0)
'''


def test_a_step_declares_only_the_buffers_it_reads(tmp_path):
    """fuzz seed 8100 kernel 58 (compiled run): a step function of a long export declared the pointer of a buffer named
    `max` because `reduction(max:...)` in its pragma named it, and never read it: an unused variable that failed the
    default -Werror build. Rendered only (no C++ compile): every pointer a step declares is read in that step."""
    from ksbuild.packaging.package import render
    (tmp_path / "k.py").write_text(MAX_BUFFER_SOURCE)
    (tmp_path / "manifest.toml").write_text(
        '[package]\nname = "maxbuf"\nversion = "0.1.0"\n\n[build]\ndtype = "float64"\n\n[kernels.max_buffer]\n'
        'python = "k.py:max_buffer"\n\n[exports]\n'
        'vvj = "vjp(vmap(jacfwd(max_buffer, argnums=(0,)), in_axes=(0, None)))"\n')
    render(tmp_path / "manifest.toml", tmp_path / "out", progress=lambda _: None)
    source = (tmp_path / "out" / "src" / "maxbuf.cpp").read_text()
    steps = re.findall(r"KS_STEP \{\n(.*?)\n    \}\(", source, re.S)
    assert steps and any("reduction(max:" in s for s in steps)
    for step in steps:
        code = re.sub(r"reduction\(\w+:", "reduction(:", step)  # (an OpenMP reduction's operator reads nothing)
        for name in re.findall(r"\* const (\w+) = reinterpret_cast", code):
            assert len(re.findall(rf"(?<![\w:.]){name}\b", code)) > 1, f"{name} declared and not read"
