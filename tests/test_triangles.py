"""transforms/triangles.py: a triangular sum computed row by row becomes running sums updated column by column, with
the same values to the last bit (the reference interpreter on the IR before and after the pass; no C++ build: the
compiled forms are checked against torch by test_bounded_loops.py, test_loops_speed.py and the gmm golden)."""
import numpy as np
import pytest
from source_kernels import ir_getter

from ksbuild.ir.interp import eval_func
from ksbuild.transforms import triangles as triangles_module
from ksbuild.transforms.pipeline import lower
from ksbuild.transforms.triangles import triangles

SOURCE = '''
import torch

def loop_style(icf: "float[T]", x: "float[d]", m: "float[d]") -> float:
    """the loop-style GMM's triangle (benchmarks/loops/kernels.py): a row starts at exp(q_r)(x_r - m_r)."""
    d = x.shape[0]
    s = 0.0
    for r in range(d):
        row = torch.exp(icf[r]) * (x[r] - m[r])
        for c in range(r):
            row = row + icf[d + c * (2 * d - c - 1) // 2 + r - c - 1] * (x[c] - m[c])
        s = s + row * row
    return s

def generator(x: "float[d]", L: "float[d, d]") -> float:
    """a sum over c < r from 0 (sum(...)), then added to the row's first term."""
    d = x.shape[0]
    s = 0.0
    for r in range(d):
        row = torch.exp(x[r]) + sum(L[r, c] * x[c] for c in range(r))
        s = s + row * row
    return s

def carried(x: "float[d]", L: "float[d, d]") -> float:
    """the row starts from the outer loop's carry: not a triangle the pass may reorder."""
    d = x.shape[0]
    s = 0.0
    for r in range(d):
        row = s
        for c in range(r):
            row = row + L[r, c] * x[c]
        s = s + row * row
    return s
'''


@pytest.fixture(scope="module")
def ir(tmp_path_factory):
    return ir_getter(tmp_path_factory, SOURCE, "triangle_kernels")


def _loops(f):
    for e in f.eqns:
        if e.prim.name == "loop":
            yield e
        for sub in (v for v in e.params.values() if hasattr(v, "eqns")):
            yield from _loops(sub)


def _args(name: str, d: int, rng):
    x = rng.standard_normal(d)
    if name == "loop_style":
        return [rng.standard_normal(d * (d + 1) // 2 + 1) * 0.5, x, rng.standard_normal(d)]
    return [x * 0.5, rng.standard_normal((d, d))]


@pytest.mark.parametrize("name", ["loop_style", "generator"])
@pytest.mark.parametrize("columns_from", [0, None])
def test_column_by_column_gives_the_same_bits(ir, name, columns_from, monkeypatch):
    """The values before and after the pass are equal, not close (every row's terms are added in the same order),
    at sizes with no triangle (0, 1), one element (2), odd ones and either side of the branch on the row count
    (columns_from 0: every size column by column); the column branch has no loop in the loop over r."""
    if columns_from is not None:
        monkeypatch.setattr(triangles_module, "COLUMNS_FROM", columns_from)
    before = lower(ir(name), after="hoist")
    after = triangles(before)
    (branch,) = [e for e in after.eqns if e.prim.name == "cond"]
    columns = branch.params["then_fn"]
    outer = [e for e in columns.eqns if e.prim.name == "loop"][-1]
    # (the rows' first terms: a loop, or a literal)
    assert len(list(_loops(columns))) in (3, 4) and not list(_loops(outer.params["body"]))
    rng = np.random.default_rng(7)
    for d in (0, 1, 2, 3, 7, 8, 9, 20):
        args = _args(name, d, rng)
        want, got = eval_func(before, args)[0], eval_func(after, args)[0]
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes(), (d, got, want)


def test_a_row_from_the_carry_stays_row_by_row(ir):
    """A row that starts from the outer loop's carry depends on the rows before it: no interchange."""
    f = lower(ir("carried"), after="hoist")
    g = triangles(f)
    assert len(list(_loops(g))) == len(list(_loops(f))) and not [e for e in g.eqns if e.prim.name == "cond"]


def _row_by_row_transposes(f):
    """The reverse loops whose body runs a reverse loop over c < r (count r or max(r, 0)): a gradient's triangle
    row by row."""
    for e in _loops(f):
        if not e.params["reverse"]:
            continue
        body = e.params["body"]
        made = {v: x for x in body.eqns for v in x.outs}
        if any(x.prim.name == "loop" and x.params["reverse"] and triangles_module._counts_r(x.ins[0], body.params[0],
                                                                                               made)
               for x in body.eqns):
            yield e


def test_the_gradients_transposed_triangle_gives_the_same_bits(ir):
    """grad of the loop-style triangle: its reverse loop (`for c in reversed(range(r))`: d_x[c] += ..., d_m[c] +=
    ..., d_icf[i(r, c)] += ...) runs column by column after the pass, with every gradient equal to the last bit
    (the adds into each d_x[c] in the same order, summed in a register; each d_icf slot gets one add) at sizes
    with no triangle, one element, odd ones and 20; no branch on the size (the columns cost nothing at 2 rows).
    (generator's gradient adds a row of d_L after its inner loop, a form the pass does not take.)"""
    from ksbuild.transforms.vjp import grad_func
    name = "loop_style"
    before = lower(grad_func(ir(name)), after="hoist")
    after = triangles(before)
    assert len(list(_row_by_row_transposes(before))) == 1 and not list(_row_by_row_transposes(after))
    rng = np.random.default_rng(11)
    for d in (0, 1, 2, 3, 7, 9, 20):
        args = _args(name, d, rng)
        want, got = eval_func(before, args), eval_func(after, args)
        assert len(want) == len(got) == len(args)
        for w, g in zip(want, got):
            assert np.asarray(g).tobytes() == np.asarray(w).tobytes(), (d, g, w)


def test_a_gradient_whose_rows_read_the_carry_stays_row_by_row(ir):
    """The transpose of a row that starts from the carry: its inner loop's cotangent comes from a carry that
    changes every row, so the reverse loop is left as it is."""
    from ksbuild.ir.printer import print_func
    from ksbuild.transforms.vjp import grad_func
    f = lower(grad_func(ir("carried")), after="hoist")
    assert list(_row_by_row_transposes(f)) and print_func(triangles(f)) == print_func(f)
