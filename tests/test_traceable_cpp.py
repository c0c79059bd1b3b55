"""Generated C++ a reader can trace back to the source: the user's names for loop counters and values, a
`// file:line` (or ONNX node) comment before each loop nest, index arithmetic folded into one subscript.

examples/gmm's C++ compiles and matches torch in test_examples_tensor.py; here, what it reads like.
"""
from __future__ import annotations

import contextlib
import io
import re

import pytest
from conftest import ROOT

from ksbuild.cli import main as cli_main
from ksbuild.codegen.cpp import Namer


def _render(example: str, package: str, out) -> str:
    """The generated source of an example's package (not its dispatch file)."""
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli_main(["render", str(ROOT / "examples" / example / "manifest.toml"), "-o", str(out)]) == 0
    return (out / "src" / f"{package}.cpp").read_text()


def _function(cpp: str, name: str) -> list[str]:
    """The lines of one generated function's body."""
    lines = cpp.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"(extern \"C\" )?int {name}\(", line))
    end = next(i for i in range(start, len(lines)) if lines[i] == "}")
    return lines[start:end]


@pytest.fixture(scope="module")
def gmm_cpp(tmp_path_factory):
    return _render("gmm", "gmm", tmp_path_factory.mktemp("gmm"))


def test_gmm_loops_count_with_the_users_names_under_a_comment_naming_their_line(gmm_cpp):
    body = [line.strip() for line in _function(gmm_cpp, "gmm_gmm_tri")]
    source = (ROOT / "examples/gmm/gmm.py").read_text().splitlines()
    head = 0  # (each loop searched after the one it nests in: a table hoisted before the i loop has k and r too)
    for counter, text in [("i", "for i in range(n):"), ("k", "scores = torch.stack(["),
                          ("r", "alphas[k] + torch.sum(icf[k, :d]) - 0.5 * sum("),
                          ("c", "+ sum(icf[k, d + c * (2 * d - c - 1) // 2 + r - c - 1]")]:
        opening = f"for (int64_t {counter} = 0; {counter} < "
        if counter == "r":  # (the row-by-row form: the branch for fewer than 8 rows, transforms/triangles.py)
            head = body.index("} else {", head)
        head = next(j for j in range(head, len(body)) if body[j].startswith(opening))
        line = next(n for n, s in enumerate(source, 1) if s.strip().startswith(text))
        comment = next(body[j] for j in range(head, 0, -1) if body[j].startswith("// "))
        assert comment.startswith(f"// gmm.py:{line}: {text}") or comment == f"// gmm.py:{line} (continued)", \
            (counter, comment)
    assert not any(re.search(r"\b(k|i)\d+\b", line) for line in body), "a numbered counter where the user named one"
    assert "for (int64_t c = 0; c < d; ++c) {" in body and "const int64_t r = ((c + int64_t{1}) + below);" in body


def test_gmm_names_values_after_the_users_variables(gmm_cpp):
    body = "\n".join(_function(gmm_cpp, "gmm_gmm"))
    for name in ("Qs", "base", "centered", "scores", "constant", "n_w"):  # gmm.py's own names
        assert re.search(rf"\b{name}\b", body), name
    grad = "\n".join(_function(gmm_cpp, "gmm_gmm_tri_grad"))
    assert re.search(r"for \(int64_t r = ", grad) and re.search(r"\b(out_)?d_alphas\b", grad)


def test_gmm_index_arithmetic_is_one_subscript_and_paths_are_relative(gmm_cpp):
    assert ")[0]" not in gmm_cpp  # x[k * n + i], not ((x + k * n) + i)[0]
    assert "Qs[k * (d * d) + i * d + j] = " in gmm_cpp
    assert str(ROOT) not in gmm_cpp and "// gmm.py:" in gmm_cpp


def test_onnx_loops_name_their_nodes_and_values_their_tensors(tmp_path):
    cpp = _render("onnx_mlp", "onnx_mlp", tmp_path)
    assert re.search(r"^ +// ONNX nodes? \S+ \(\w+\)", cpp, re.M)
    assert "fc2_Gemm_i" in cpp and "* const Tanh_1 = " in cpp   # /fc2/Gemm_output_0, /Tanh_1_output_0


def test_onnx_tensor_names_become_identifiers():
    from ksbuild.frontends.onnx.names import value_hint
    assert value_hint("/conv1/Conv_output_0") == "conv1_Conv" and value_hint("y") == "y"
    assert value_hint("onnx::Gemm_12") == "onnx_Gemm_12" and value_hint("123") == ""


def test_names_are_scoped_like_blocks_and_never_shadow():
    namer = Namer(["n", "int"], source_names=["r"])
    namer.enter(1)
    assert namer.index(2) == "i"            # a loop's counter lives inside it
    namer.enter(2)
    assert namer.fresh("x") == "x" and namer.fresh("x") == "x1" and namer.index(3) == "j"
    namer.enter(1)                          # both loops closed: a sibling loop counts with i again
    assert namer.index(2) == "i" and namer.fresh("x") == "x"
    assert namer.fresh("n") == "n1" and namer.fresh("int") == "int1"   # a dim, a keyword
    assert namer.fresh("r") == "r1" and namer.fresh("r", source=True) == "r"  # generated r leaves r to the user
    namer.enter(3)
    assert namer.fresh("y") == "y"
    namer.enter(1)
    assert namer.fresh("y", depth=0) == "y1"   # a workspace pointer is in scope where y was
    assert namer.fresh("NAN") == "v_NAN"       # a macro of <cmath>


def test_a_users_name_never_hides_the_packages_constants_or_the_prologues_pointer():
    namer = Namer()
    assert namer.fresh("ks_data_0", source=True) == "v_ks_data_0" and namer.fresh("next_slot") == "next_slot1"


def test_integer_floordiv_by_one_folds_and_a_floats_does_not(gmm_cpp):
    from ksbuild.ir.builder import Builder
    from ksbuild.ir.core import Lit, Var
    from ksbuild.ir.interp import eval_func
    from ksbuild.ir.types import Type
    from ksbuild.transforms.simplify import simplify
    for dtype, value, folded in (("i64", -7, True), ("f32", 2.5, False)):
        b = Builder()
        x = Var(Type(dtype))
        f = b.func("f", [x], [b.floordiv(x, Lit(1, Type(dtype)))])
        g = simplify(f)
        assert (not g.eqns and g.results[0] is g.params[0]) == folded
        assert eval_func(g, [value]) == eval_func(f, [value])  # floor(2.5 / 1) = 2.0, not 2.5
    assert not re.search(r"floordiv\(\w+, int64_t\{1\}\)", gmm_cpp)  # range(r)'s count r // 1 is r


def _count_names():
    import sys
    sys.path.insert(0, str(ROOT / "scripts"))
    import count_names
    return count_names


def test_gmm_numbered_names_stay_below_their_measured_share(gmm_cpp):
    """scripts/count_names.py's measure of examples/gmm's C++: at most 20% of its locals are numbered (t12, sum1;
    68% before index arithmetic was folded, scalar splats read as themselves and loop and if results named after
    their bodies; 675/1065 before carries were assigned where made, 659/1051 after; 656/1042 before unnamed floats
    read once were folded, loads named after their buffers and stacked residuals after their values, 356/781
    after, 339/781 once accumulators were named after what they reduce, qs_sum; 362/904 before the reverse loops'
    carries took the cotangents' names and unnamed values names after what computes them, 166/904 after: 18%;
    154/904 before a dim read as a value took the dim's name, convert_d, and an index the name of the tensor it picks
    from, icf_k_at; 129/904 after: 14%; 128/947 before a body's params took the names made for what they are bound
    to and a choice against a literal was named x_if_p, exp_q_if_i_eq_j; 108/947 after: 11.4%; 115/971 before an
    isinf test was named scores_max_is_inf and a returned value without a name `result`, 106/971 after: 10.9%;
    107/975 before an unnamed loop or if result fell back to `res` rather than `r`, which gmm.py's own r holds, so
    that every such buffer was numbered, r1[r], 104/975 after: 10.7%) and none of its loop counters."""
    s = _count_names().shares(gmm_cpp)
    assert s["locals"] > 500 and s["counters"] > 300
    assert s["local_share"] <= 0.11 and s["numbered_counters"] == 0, s


def test_every_loop_nest_stands_under_a_comment_naming_its_source(gmm_cpp, tmp_path):
    """Each loop nest of examples/gmm's and onnx_mlp's C++ has its comment (101 of gmm's 172 before: a second nest
    of one line, a sum's zeroing loop and the sum, the copies into the outputs had none); a later nest of the line
    says `// gmm.py:92 (continued)`, a copy into an output `// the result out_d_means`."""
    count_names = _count_names()
    for cpp in (gmm_cpp, _render("onnx_mlp", "onnx_mlp", tmp_path)):
        nests = count_names.loop_nests(cpp)
        assert len(nests) > 5 and [n for n, under in nests if not under] == []
    assert "    // gmm.py:53 (continued)\n" in gmm_cpp and "    // the result out_d_means\n" in gmm_cpp
    assert "(continued) (continued)" not in gmm_cpp  # (a third nest of a line said it twice)


def test_a_reverse_loops_carries_are_the_cotangents_of_the_forward_ones(gmm_cpp):
    """vjp of gmm_tri's `for i` loop carries d_slse backwards (the cotangent of slse), and the inner r loop the
    cotangent of sum: partial eval and transpose name a loop body's params after the body's they come from."""
    grad = "\n".join(_function(gmm_cpp, "gmm_gmm_tri_grad"))
    assert re.search(r"^ +double d_slse;$", grad, re.M) and re.search(r"^ +d_sum\d* = d_sum;$", grad, re.M)
    assert re.search(r"double\* const exp_sub_scores_sum = ", grad)  # (the stacked sums of exp(scores - max))


def test_unnamed_values_are_named_after_what_computes_them():
    """exp(x) is exp_x, x - y is x_sub_y, a sum of x's elements x_sum, a view keeps its operand's name; a value made
    from a made name takes one more form (exp_x_sub_y), and no further: the names do not grow into chains."""
    from ksbuild.codegen.naming import derived_names
    from ksbuild.ir.builder import Builder
    from ksbuild.ir.core import Var
    from ksbuild.ir.types import Type
    b = Builder()
    x, y = Var(Type("f64", ("n",)), "x"), Var(Type("f64", ("n",)), "y")
    e, d = b.exp(x), b.sub(x, y)
    ed = b.exp(d)
    eed = b.exp(ed)
    s = b.reduce_sum(x, axes=(0,))
    row = b.slice(x, axis=0, start=0, stop=1)
    f = b.func("f", [x, y], [e, ed, eed, s, b.neg(row)])
    names = derived_names(f)
    got = [names.get(v, "") for v in (f.results[0], f.results[1], f.results[2], f.results[3], f.results[4])]
    assert got == ["exp_x", "exp_x_sub_y", "", "x_sum", "neg_x"], got


def test_a_choice_against_a_literal_and_a_bodys_params_are_named_after_what_they_hold():
    """select(p, x, 0) is x_if_p and select(p, 0, x) x_unless_p (the diagonal exp_q_if_i_eq_j of gmm's cholesky
    factor; select is the prim whose record says its branches are lazy); a body's param bound to a value named here
    takes its name (a loop constant exp(x) is exp_x inside the body, as a fusion's element is outside it)."""
    from ksbuild.codegen.naming import derived_names
    from ksbuild.ir.builder import Builder
    from ksbuild.ir.core import Lit, Var
    from ksbuild.ir.types import Type
    from ksbuild.prims import PRIMS
    f64, i64 = Type("f64"), Type("i64")
    b = Builder()
    x, y, n = Var(f64, "x"), Var(f64, "y"), Var(i64, "n")
    p = b.lt(x, y)
    kept, dropped = b.select(p, b.exp(x), Lit(0.0, f64)), b.select(p, Lit(0.0, f64), y)
    body_b = Builder()
    k, c, s = Var(i64, ""), Var(f64, ""), Var(f64, "s")
    body = body_b.func("body", [k, c, s], [body_b.add(s, c)])
    looped = b.bind(PRIMS["loop"], [n, b.exp(y), x], {"body": body, "n_consts": 1, "n_carry": 1, "length": None,
                                                         "reverse": False})[0]
    names = derived_names(b.func("f", [x, y, n], [kept, dropped, looped]))
    assert [names.get(v, "") for v in (p, kept, dropped, c)] == ["x_lt_y", "exp_x_if_x_lt_y", "y_unless_x_lt_y",
                                                                 "exp_y"]


def test_a_dims_value_and_an_index_are_named_after_the_dim_and_the_tensor():
    """dim_size of d is d (so float(d) is convert_d), and an unnamed integer that picks an element of icf_k is
    icf_k_at (the d + j·(2d - j - 1)/2 + i - j - 1 of cholesky_factor)."""
    from ksbuild.codegen.naming import derived_names
    from ksbuild.ir.builder import Builder
    from ksbuild.ir.core import Lit, Var
    from ksbuild.ir.types import Type
    b = Builder()
    icf_k, j = Var(Type("f64", ("T",)), "icf_k"), Var(Type("i64"), "j")
    d = b.dim_size(dim="d")
    at = b.add(b.mul(j, Lit(2, Type("i64"))), d)
    f = b.func("f", [icf_k, j], [b.convert(d, dtype="f64"), b.index(icf_k, at, axis=0)])
    names = derived_names(f)
    assert [names.get(v, "") for v in (d, f.results[0], at)] == ["d", "convert_d", "icf_k_at"]


def test_gmm_index_arithmetic_folds_and_results_take_their_bodys_names(gmm_cpp):
    body = "\n".join(_function(gmm_cpp, "gmm_gmm_tri"))
    ints = re.findall(r"const (?:int64_t|bool) (t\d+) = (.*);", body)   # one index expression, no chain of t's:
    for name, _ in ints:                                                  # no integer local reads another
        assert not any(re.search(rf"\b{name}\b", rhs) for _, rhs in ints), name
    assert ("= ((((d + ks::floordiv_nonneg((c * (((2*d) - c) - int64_t{1})), int64_t{2})) + r) - c) - int64_t{1});"
            in body)
    assert re.search(r"^ +double slse;$", body, re.M) and re.search(r"^ +double sum;$", body, re.M)
    assert "scores[k] = " in body                                    # the stacked scores of torch.stack([...])
    assert not re.search(r"const double x_i\d* = t\d+;", gmm_cpp)     # a scalar splat is read as itself


def test_a_carry_is_assigned_where_its_new_value_is_made(gmm_cpp):
    """slse = (slse + (ks::log(exp_sub_scores_sum) + select_scores_max)); and an inlined call's result named after
    the callee, not slse1 = ...; slse = slse1;"""
    tri_vec = "\n".join(_function(gmm_cpp, "gmm_gmm_tri_vec"))
    assert re.search(r"^ +slse = \(slse \+ .+\);$", tri_vec, re.M) and not re.search(r"\bslse\d", tri_vec)
    assert re.search(r"^ +double log_wishart_prior;$", "\n".join(_function(gmm_cpp, "gmm_gmm")), re.M)


CARRIES = '''
def carries(x: "float[n]") -> float:
    a = 0.0
    b = 1.0
    k = 0
    s = 0.0
    for i in range(x.shape[0]):
        late = k > 1              # a bool of the old k, read after k is updated (the C++ folds it into its reader)
        k = k + 1
        a_new = a + x[i]
        b = b * 0.5 + a           # the old a, read after a's new value is made
        a = a_new
        s = s + (x[i] if late else 2.0 * x[i])
    return a + b + s
'''


def test_a_carry_whose_old_value_is_read_later_is_not_overwritten_early(tmp_path):
    import numpy as np
    from conftest import build_kernel_file
    manifest = '[package]\nname = "carries"\n[build]\ndtype = "float64"\n[kernels.carries]\npython = "k.py:carries"\n' \
               '[exports]\ncarries = "carries"\n'
    pkg, source = build_kernel_file(tmp_path, CARRIES, manifest, "carries_k")
    x = np.random.default_rng(0).uniform(-1, 1, 6)
    assert abs(pkg.carries(x) - source.carries(x)) < 1e-12


def test_unnamed_values_read_once_fold_into_their_reader_and_named_ones_stay(gmm_cpp):
    """An unnamed float read once is written where it is read (slse = (slse + (ks::log(...) + ...))); a value the
    source names stays a local of that name (n_w, frobenius), also when it is read once; a select's branches get
    no computation folded into them (they stay branch-free: a local before the select)."""
    tri = "\n".join(_function(gmm_cpp, "gmm_gmm_tri"))
    assert re.search(r"^ +slse = \(slse \+ \(ks::log\(exp_sub_scores_sum\) \+ select_scores_max\)\);$", tri, re.M)
    assert re.search(r"double scores_max = ", tri) and re.search(r"\bqs_sum \+= qs_i;", gmm_cpp)
    assert re.search(r"const double n_w = ", tri) and re.search(r"const double frobenius = \(\w+ \+ \w+\);", tri)


def test_a_selects_branches_stay_plain_operands(tmp_path):
    """vrelu3's nested selects (vmap of relu3's ifs) read locals and literals only: both branches are computed
    before, unconditionally, and the loop stays branch-free (select's record says lazy=(1, 2))."""
    body = "\n".join(_function(_render("relu3", "activations", tmp_path), "activations_vrelu3"))
    selects = re.findall(r"\((\w+) \? ([^:;]+) : ([^;]+)\);", body)
    assert len(selects) == 2 and all(re.fullmatch(r"\w+|[0-9.]+f", b) for s in selects for b in s[1:]), selects


def test_a_stacked_residual_keeps_the_name_of_what_it_stacks(gmm_cpp):
    """vjp stores the forward loop's per-iteration scores for the backward loop: the buffer is scores, not r5."""
    grad = "\n".join(_function(gmm_cpp, "gmm_gmm_tri_grad"))
    assert re.search(r"double\* const scores = ", grad) and re.search(r"^ +scores\[k\] = ", grad, re.M)
    assert "Qs[k * (d * d) + i * d + j] = " in "\n".join(_function(gmm_cpp, "gmm_gmm_grad"))
    vec = "\n".join(_function(gmm_cpp, "gmm_gmm_tri_vec_grad"))  # (xc and row per i, stacked for the reverse loop)
    assert re.search(r"double\* const xc = ", vec) and re.search(r"double\* const row = ", vec)


def test_an_isinf_test_and_a_returned_value_are_named_for_what_they_are():
    """abs(m) == inf, the test logsumexp makes of its maximum m, is m_is_inf (gmm's scores_max_is_inf, which was t1);
    the value a function returns, when neither the source nor what computes it names it, is `result`."""
    from ksbuild.codegen.naming import derived_names
    from ksbuild.ir.builder import Builder
    from ksbuild.ir.core import Lit, Var
    from ksbuild.ir.types import Type
    f64 = Type("f64")
    b = Builder()
    x, y = Var(Type("f64", ("n",)), "x"), Var(f64, "y")
    m = b.reduce_max(x, axes=(0,))
    inf = b.eq(b.abs(m), Lit(float("inf"), f64))
    total = b.add(b.mul(b.select(inf, Lit(0.0, f64), m), b.exp(y)), b.sin(b.exp(y)))
    f = b.func("f", [x, y], [total])
    names = derived_names(f)
    assert names[inf] == "x_max_is_inf" and names[total] == "result", names
    assert derived_names(b.func("g", [x, y], [inf, total])).get(total) is None  # (two results: no `result`)
