"""The IR text form and verifier: print → parse → print is byte-identical, the parsed function
computes what the original does, and the verifier and parser reject malformed IR with a place."""
from __future__ import annotations

import re

import numpy as np
import pytest

from ksbuild import prims  # noqa: F401  (registers the primitives)
from ksbuild.errors import KsbuildError
from ksbuild.ir.builder import Builder
from ksbuild.ir.core import Eqn, Func, Lit, Var
from ksbuild.ir.interp import eval_func
from ksbuild.ir.parser import parse_func
from ksbuild.ir.printer import print_func
from ksbuild.ir.types import NUMPY_DTYPES, Type
from ksbuild.ir.verify import verify
from ksbuild.prims.base import PRIMS
from ksbuild.transforms.jvp import jvp_func
from ksbuild.transforms.vjp import grad_func, vjp_func
from ksbuild.transforms.vmap import fresh_dim, vmap_func

F, F64, I64, B = Type("f32"), Type("f64"), Type("i64"), Type("bool")
DIMS = {"n": 4, "m": 3, "n1": 5}


def lit(value, t: Type = F) -> Lit:
    return Lit(value, t)


def unary_func(name: str, body, hint: str = "y") -> Func:
    """A one-parameter f32 function built by body(b, x) -> result."""
    b = Builder()
    x = Var(F, hint)
    return b.func(name, [x], [body(b, x)])


# ---- functions built by hand ------------------------------------------------------------------

def make_elementwise() -> Func:
    b = Builder()
    x, y = Var(F, "x"), Var(F, "y")
    e = b.mul(b.exp(x), y)
    s = b.sub(b.add(e, b.sin(x)), b.div(b.ipow(y, n=2), lit(3.0)))
    m = b.max(b.tanh(s), lit(float("-inf")))
    w = b.convert(b.mul(m, lit(2)), dtype="f64")
    return b.func("elementwise", [x, y], [b.convert(w, dtype="f32"), b.logistic(x)], ("z", "not an identifier"))


def make_select() -> Func:
    b = Builder()
    x, y = Var(F, "x"), Var(F, "y")
    (not_zero,) = b.bind(PRIMS["logic"], [b.eq(y, lit(0.0))], {"op": "not"})
    (big,) = b.bind(PRIMS["logic"], [b.gt(x, lit(0.5)), not_zero], {"op": "and"})
    return b.func("select", [x, y], [b.select(big, b.mul(x, y), b.neg(y))])


def make_tensor() -> Func:
    b = Builder()
    x, y = Var(Type("f32", ("n", 3)), "x"), Var(Type("f32", (3,)), "y")
    yb = b.broadcast_to(y, shape=("n", 3))
    z = b.select(b.lt(x, yb), b.mul(x, yb), b.sub(x, lit(1.0)))
    zt = b.transpose(z, perm=(1, 0))
    r = b.reshape(zt, shape=(3, 1, "n"))
    s = b.reduce_sum(b.mul(r, r), axes=(1, 2))
    return b.func("tensor", [x, y], [b.reduce_sum(s, axes=(0,))])


def make_relu3() -> Func:
    """Knossos' relu3: 0 below 0, x³/3 on [0, 1), x - 2/3 above, as nested ifs."""
    then_fn = unary_func("t", lambda b, y: b.div(b.ipow(y, n=3), lit(3.0)))
    else_fn = unary_func("e", lambda b, y: b.sub(y, lit(2 / 3)))
    inner = unary_func("inner", lambda b, y: b.cond(b.lt(y, lit(1.0)), y, then_fn=then_fn, else_fn=else_fn))
    zero = unary_func("zero", lambda b, y: lit(0.0))
    return unary_func("relu3", lambda b, x: b.cond(b.lt(x, lit(0.0)), x, then_fn=zero, else_fn=inner), "x")


def _loop_body() -> Func:
    """body(k, c, acc, x) -> (acc * c + x + k, acc * x)."""
    b = Builder()
    k, c, acc, x = Var(I64, "k"), Var(F, "c"), Var(F, "acc"), Var(F, "x")
    kf = b.convert(k, dtype="f32")
    new = b.add(b.add(b.mul(acc, c), x), kf)
    return b.func("body", [k, c, acc, x], [new, b.mul(acc, x)])


def make_loop(reverse: bool = False) -> Func:
    b = Builder()
    c, a0, xs = Var(F, "c"), Var(F, "a0"), Var(Type("f32", (3,)), "xs")
    acc, ys = b.loop(lit(3, I64), c, a0, xs, body=_loop_body(), n_consts=1, n_carry=1, length=3, reverse=reverse)
    return b.func("loop_rev" if reverse else "loop", [c, a0, xs], [b.add(acc, b.reduce_sum(ys, axes=(0,)))])


def make_loop_symbolic() -> Func:
    """A loop whose count is a parameter and whose length is the symbolic dim n."""
    b = Builder()
    trip, c, xs = Var(I64, "trip"), Var(F, "c"), Var(Type("f32", ("n",)), "xs")
    acc, ys = b.loop(trip, c, lit(0.0), xs, body=_loop_body(), n_consts=1, n_carry=1, length="n", reverse=False)
    return b.func("loop_n", [trip, c, xs], [acc, ys])


def make_call() -> Func:
    """Two calls of one shared callee (the same Func object twice)."""
    relu3 = make_relu3()
    b = Builder()
    x, y = Var(F, "x"), Var(F, "y")
    r = b.mul(b.call(x, fn=relu3), y)
    return b.func("calls", [x, y], [b.add(r, b.call(y, fn=relu3))])


def make_one_call() -> Func:
    b = Builder()
    x = Var(F, "x")
    return b.func("one_call", [x], [b.call(x, fn=make_relu3())])


def make_odd_names() -> Func:
    """Hints that are not identifiers or are shared, a quoted function name, an unused param."""
    b = Builder()
    x, y, z = Var(F, "x.0"), Var(F, "p"), Var(F, "p")
    return b.func("odd name", [x, y, z], [b.add(x, y), lit(True, B), lit(-2, I64)])


BASE = {
    "elementwise": make_elementwise,
    "select": make_select,
    "tensor": make_tensor,
    "relu3": make_relu3,
    "loop": make_loop,
    "loop_rev": lambda: make_loop(reverse=True),
    "loop_n": make_loop_symbolic,
    "call": make_call,
    "one_call": make_one_call,
    "odd_names": make_odd_names,
}


# ---- transformed functions ---------------------------------------------------------------------

def vmap_all(f: Func) -> Func:
    return vmap_func(f, [True] * len(f.params), fresh_dim(f), [True] * len(f.results))[0]


def vmap_floats(f: Func) -> Func:
    """vmap over the float params only (an integer loop count stays shared)."""
    batched = [p.type.is_float for p in f.params]
    return vmap_func(f, batched, fresh_dim(f), [True] * len(f.results))[0]


TRANSFORMED = {
    "jvp_relu3": lambda: jvp_func(make_relu3()),
    "vjp_relu3": lambda: vjp_func(make_relu3()),
    "grad_relu3": lambda: grad_func(make_relu3()),
    "vmap_relu3": lambda: vmap_all(make_relu3()),
    "vjp_vmap_relu3": lambda: vjp_func(vmap_all(make_relu3())),
    "jvp_vjp_relu3": lambda: jvp_func(vjp_func(make_relu3())),
    "vmap_vjp_relu3": lambda: vmap_all(vjp_func(make_relu3())),
    "jvp_vmap_relu3": lambda: jvp_func(vmap_all(make_relu3())),
    "jvp_elementwise": lambda: jvp_func(make_elementwise()),
    "vjp_elementwise": lambda: vjp_func(make_elementwise()),
    "vmap_select": lambda: vmap_all(make_select()),
    "vjp_select": lambda: vjp_func(make_select()),
    "jvp_tensor": lambda: jvp_func(make_tensor()),
    "grad_tensor": lambda: grad_func(make_tensor()),
    "vmap_tensor": lambda: vmap_all(make_tensor()),
    "vjp_vmap_tensor": lambda: vjp_func(vmap_all(make_tensor())),
    "jvp_loop": lambda: jvp_func(make_loop()),
    "grad_loop": lambda: grad_func(make_loop()),
    "grad_loop_rev": lambda: grad_func(make_loop(reverse=True)),
    "vmap_loop": lambda: vmap_all(make_loop()),
    "vmap_grad_loop": lambda: vmap_all(grad_func(make_loop())),
    "vjp_loop_n": lambda: vjp_func(make_loop_symbolic()),
    "vmap_loop_n": lambda: vmap_floats(make_loop_symbolic()),
    "jvp_call": lambda: jvp_func(make_call()),
    "grad_one_call": lambda: grad_func(make_one_call()),
    "vjp_vmap_one_call": lambda: vjp_func(vmap_all(make_one_call())),
    "vmap_call": lambda: vmap_all(make_call()),
}

ALL = {**BASE, **TRANSFORMED}
ALL["grad_call"] = lambda: grad_func(make_call())
CASES = sorted(ALL)


def random_args(f: Func, rng: np.random.Generator) -> list[np.ndarray]:
    """Random inputs for f's params; an integer scalar (a loop count) is the size of dim n."""
    args = []
    for p in f.params:
        shape = tuple(d if isinstance(d, int) else DIMS[d] for d in p.type.shape)
        dt = NUMPY_DTYPES[p.type.dtype]
        if p.type.is_float:
            args.append((rng.standard_normal(shape) * 1.5).astype(dt))
        elif p.type.dtype == "bool":
            args.append(rng.random(shape) < 0.5)
        else:
            args.append(np.full(shape, DIMS["n"], dt))
    return args


@pytest.mark.parametrize("name", CASES)
def test_verify_and_round_trip(name):
    f = ALL[name]()
    verify(f)
    text = print_func(f)
    g = parse_func(text)
    verify(g)
    assert print_func(g) == text
    assert g.result_names == f.result_names
    rng = np.random.default_rng(sum(map(ord, name)))
    for _ in range(3):
        args = random_args(f, rng)
        for want, got in zip(eval_func(f, args), eval_func(g, args), strict=True):
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", CASES)
def test_text_does_not_depend_on_uids(name):
    assert print_func(ALL[name]()) == print_func(ALL[name]())


def test_relu3_text():
    assert print_func(make_relu3()) == """\
func relu3(%x: f32) -> (f32) {
  %0: bool = lt(%x, 0.0: f32)
  %1: f32 = cond(%0, %x)
    else_fn = func inner(%y_1: f32) -> (f32) {
      %2: bool = lt(%y_1, 1.0: f32)
      %3: f32 = cond(%2, %y_1)
        else_fn = func e(%y_2: f32) -> (f32) {
          %4: f32 = sub(%y_2, 0.6666666666666666: f32)
          return %4
        }
        then_fn = func t(%y_3: f32) -> (f32) {
          %5: f32 = ipow[n=3](%y_3)
          %6: f32 = div(%5, 3.0: f32)
          return %6
        }
      return %3
    }
    then_fn = func zero(%y_4: f32) -> (f32) {
      return 0.0: f32
    }
  return %1
}
"""


def test_literal_params_and_names_text():
    text = print_func(make_tensor()) + print_func(make_loop()) + print_func(make_odd_names())
    assert "func tensor(%x: f32[n, 3], %y: f32[3]) -> (f32) {" in text
    assert "broadcast_to[shape=('n', 3)](%y)" in text
    assert "reduce_sum[axes=(0,)]" in text
    assert "loop[length=3, n_carry=1, n_consts=1, reverse=False](3: i64, %c_1, %a0, %xs)" in text
    assert "body = func body(%k: i64, %c_2: f32, %acc: f32, %x: f32) -> (f32, f32) {" in text
    assert "func 'odd name'(%0: f32, %p_1: f32, %p_2: f32) -> (f32, bool, i64) {" in text
    assert "return %1, True: bool, -2: i64" in text
    assert "-> (z: f32, 'not an identifier': f32)" in print_func(make_elementwise())


# ---- the verifier rejects malformed IR -----------------------------------------------------------

def _func(params, eqns, results) -> Func:
    return Func("bad", tuple(params), tuple(eqns), tuple(results))


def test_verify_use_before_definition():
    x, t, u = Var(F, "x"), Var(F, "t"), Var(F, "u")
    eqns = [Eqn(PRIMS["add"], (x, u), (t,)), Eqn(PRIMS["neg"], (x,), (u,))]
    with pytest.raises(KsbuildError, match="internal: .*used before its definition"):
        verify(_func([x], eqns, [t]))


def test_verify_wrong_out_type():
    x, t = Var(F, "x"), Var(F64, "t")
    with pytest.raises(KsbuildError, match=r"internal: .*out types \(f64\) differ .*\(f32\)"):
        verify(_func([x], [Eqn(PRIMS["add"], (x, x), (t,))], [t]))


def test_verify_defined_twice():
    x, t = Var(F, "x"), Var(F, "t")
    eqns = [Eqn(PRIMS["neg"], (x,), (t,)), Eqn(PRIMS["neg"], (x,), (t,))]
    with pytest.raises(KsbuildError, match="internal: .*defined twice"):
        verify(_func([x], eqns, [t]))


def test_verify_param_defined_in_two_functions():
    inner = unary_func("inner", lambda b, y: b.neg(y))
    outer = Func("outer", inner.params, (Eqn(PRIMS["call"], inner.params, (Var(F),), {"fn": inner}),), inner.params)
    with pytest.raises(KsbuildError, match="internal: .*defined twice"):
        verify(outer)


def test_verify_capture_by_sub_function():
    x = Var(F, "x")
    b = Builder()
    y = Var(F, "y")
    captures = b.func("captures", [y], [b.add(y, x)])
    outer = Builder()
    out = outer.call(x, fn=captures)
    with pytest.raises(KsbuildError, match="internal: .*captured from another function"):
        verify(outer.func("outer", [x], [out]))


def test_verify_undefined_result():
    x = Var(F, "x")
    with pytest.raises(KsbuildError, match="internal: .*used before its definition"):
        verify(_func([x], [], [Var(F, "nowhere")]))


BAD_LITERALS = [(np.float32(1.0), F), (1.5, Type("i32")), (True, F), (1, B), (2**40, Type("i32"))]


@pytest.mark.parametrize("value, t", BAD_LITERALS)
def test_verify_bad_literal(value, t):
    x = Var(t, "x")
    out = Var(t, "y")
    prim = PRIMS["select"]
    with pytest.raises(KsbuildError, match="internal: .*literal value"):
        verify(_func([x], [Eqn(prim, (Lit(True, B), x, Lit(value, t)), (out,))], [out]))


def test_verify_shared_sub_function_is_fine():
    verify(make_call())


# ---- the parser reports the place of an error ----------------------------------------------------

GOOD = """\
func f(%x: f32) -> (f32) {
  %0: f32 = add(%x, 1.0: f32)
  return %0
}
"""


def _parse_error(text: str) -> KsbuildError:
    with pytest.raises(KsbuildError) as info:
        parse_func(text)
    return info.value


def test_parse_good():
    f = parse_func(GOOD)
    assert print_func(f) == GOOD
    assert float(eval_func(f, [np.float32(2.0)])[0]) == 3.0


@pytest.mark.parametrize("line2, where, message", [
    ("  %0: f32 = add(%x, 1.0: f32", "3:3", "expected ,, got 'return'"),
    ("  %0: f64 = add(%x, 1.0: f32)", "2:3", r"'add' gives \(f32\) but the text says \(f64\)"),
    ("  %0: f32 = frobnicate(%x)", "2:13", "unknown primitive 'frobnicate'"),
    ("  %0: f32 = add(%y, 1.0: f32)", "2:17", "%y is not defined"),
    ("  %0: f32 = add(%x, 1.0: f32) $", "2:31", "unexpected character"),
    ("  %0: f32 = add(%x, 1.0: q32)", "2:26", "unknown dtype 'q32'"),
    ("  %0: f32 = add(%x, 1.5: i64)", "2:21", "does not fit"),
    ("  %0: f32 = add(%x, 2: i64)", "2:3", "add needs operands of one dtype"),
    ("  %0: f32 = add(%x, True: f32)", "2:21", "does not fit"),
    ("  %x: f32 = neg(%x)", "2:3", "%x is defined twice"),
    ("  %0: f32, %0: f32 = neg(%x)", "2:12", "%0 is defined twice"),
    ("  %0: f32 = reduce_sum[axis=(0,)](%x)", "2:3", "bad operands or parameters for 'reduce_sum'"),
])
def test_parse_error_has_line_and_column(line2, where, message):
    lines = GOOD.split("\n")
    lines[1] = line2
    err = _parse_error("\n".join(lines))
    assert err.loc is not None and err.loc.file == "<ir>"
    assert str(err).startswith(f"<ir>:{where}: error:"), str(err)
    assert re.search(message, err.message), err.message


def test_parse_error_in_nested_function_names_its_line():
    text = print_func(make_relu3()).replace("%5: f32 = ipow[n=3](%y_3)", "%5: f32 = ipow[n=3](%2)")
    err = _parse_error(text)
    assert (err.loc.line, str(err.loc)) == (12, "<ir>:12:31")
    assert "%2 is not defined" in err.message


def test_parse_result_type_mismatch():
    err = _parse_error(GOOD.replace("-> (f32)", "-> (f64)"))
    assert err.loc.line == 3 and "declares results (f64) but returns (f32)" in err.message


def test_parse_trailing_garbage():
    err = _parse_error(GOOD + "func")
    assert err.loc.line == 5
