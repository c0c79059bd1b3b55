"""The primitive record: one object holding every rule of a primitive, side by side.

Constructing a `Prim` registers it in `PRIMS`; there is no other registry. A prim that takes an operation as a
param (compare[op="lt"], logic[op="and"]) names its forms in the record (`forms`): the Builder binds a form by its
name (`b.lt(x, y)` is `b.compare(x, y, op="lt")`) and the IR text prints and reads it by that name (`lt(x, y)`);
`FORMS` maps each form's name to its record and params, filled by the same construction. Where the forms differ by
more than an operator (math's exp, log, tanh, ...: value, C++, derivative, facts), `table` holds a record per form,
which the prim's rules read (`form_record` finds an equation's); the facts the passes ask about stay the prim's.

Rule signatures (b is a Builder, atoms are Var/Lit, a tangent or cotangent of None is zero):
- type_rule(in_types, **params) -> tuple[Type]
- eval(*arrays, env=dims, **params) -> tuple[np.ndarray]
- jvp(b, primals, tangents, **params) -> (outs, out_tangents)   None: the jvp pass never calls it (the prim takes
  no operands, or no result of it is ever a float, which carries no tangent; transforms/jvp.py binds such an
  equation as it is), or the prim cannot be differentiated (`opt_outs` says why: `rule` raises that)
- transpose(b, cts_out, ins, linear, **params) -> cts_in      (linear prims only); with
  `accumulates`, transpose(..., acc=cts so far per operand) -> the new sums (the loop prim)
- batch(b, ins, batched, size, **params) -> (outs, out_batched)   batch axis is always 0; None: the prim takes no
  operands (vmap binds an equation none of whose operands is batched as it is) or is made after vmap (lowering)
- emit(ctx, eqn) -> None     writes C++ through the codegen context; None: the prim never reaches codegen (its
  `expand` rule, a `select_backend` that always replaces it or a `simplify` that always removes it runs first)
- partial_eval(split, eqn, known_mask) -> None   control flow only: splits itself into split.kb/ub
- prune(eqn, used) -> Eqn    control flow and calls only: the equation narrowed to the used results
- simplify(ins, out) -> Atom | None   a local algebraic identity replacing the output, if any
- expand(b, ins, **params) -> outs   a decomposition into other prims, applied before codegen
- rows(eqn, n) -> (params, sliced) | None   when row i (along axis 0, of n rows) of every output depends only
  on row i of the operands marked in `sliced` (the others are read whole): the params of the same equation
  on one row ([1, ...] instead of [n, ...]); None otherwise. The per_row pass runs chains of such equations
  one row at a time. Elementwise prims need no rule: their operands with n rows are sliced.
- along(eqn, axis, n) -> (params, axes) | None   when position i along the output's `axis` depends only on
  position i along axes[k] of each operand k (None: operand k is read whole there): the params of the same
  equation with that axis n long instead. The gather_early pass takes the rows a gather reads from such
  equations' operands instead of their results. Elementwise prims need no rule (broadcast_along).
- fusible(eqn) -> bool    a prim that is not elementwise but may join a loop nest over its output's
  shape all the same (a gather from a 1-D table: one element read at the current index's position)
- inplace(eqn) -> int | None   the operand the equation may update in place (its output takes that storage)
- select_backend(b, eqn, ins, backend, threads) -> outs | None   what the select_backend pass binds in its place for a
  backend record and a thread count (einsum: a contract; conv: a convolve of one impl; qconv, qmatmul: their
  weights through a qpack); None keeps the equation
- parallel(eqn) -> bool   whether the outermost loop of the equation's loop nest writes each output element from
  one iteration only, so that the parallelize pass may spread it over threads (param threads = N)
- scratch(eqn, tiles) -> int | None   the bytes of workspace the kernel-layer call the equation emits works in while
  it runs (prims/scratch.py: its size on the levels of `tiles`, the largest); None when it needs none or its size is
  known only at run time. The memory plan gives it bytes of the arena for the equation alone
- bounds(eqn, range_of) -> (lo, hi) | None   the half-open range [lo, hi) (ints or symbolic dims) of an integer
  result, from range_of(atom) of its operands (None: unknown); interval arithmetic for loop bounds and indices
- sign(eqn, sign_of) -> ANY | NONNEG | POSITIVE   what is known of the sign of its result (ints and floats) where
  its operands are finite and of the signs sign_of(atom) gives, and the result is finite (-0.0 counts as >= 0: the
  rule of atan2, whose atan2(-0.0, -1) is -pi, knows nothing); ANY for a prim with several results.
  codegen/int_signs.py: a never negative index is clamped from above only, a `//` of one is a shift;
  transforms/nonfinite.py: the log of a positive value is finite. Every record states it (`unsigned`: nothing known)
- nonfinite(eqn, sign_of) -> bool   whether a float result may be inf or nan although its operands are finite and
  of the signs sign_of(atom) gives (log of a value not known > 0, x / y, an external function); overflow (exp of a
  large x) and a reduction over an empty axis (max: -inf) aside. `from_bodies`: a prim with sub-functions, whose
  results are what they make (the nonfinite pass walks them; alone it says True). Every record states it
  (transforms/nonfinite.py masks the (co)tangent products of such values)
- declare(eqn) -> (declaration, files)   a C declaration at file scope that the equation's C++ needs (an external C
  function's: extern_call) and the user's source files that define it (copied into the project and compiled)
- int_value(eqn, value_of, nonneg_of) -> Dim | None   the exact value of a signed integer scalar result as a
  polynomial of its operands' values (value_of(atom): a Dim, or None), where `bounds` does not give it
  (max(n, 0) is n when n >= 0); None: unknown
Flags: `elementwise` (fusible into a loop nest), `view` (the output aliases the first
operand's storage, or read-only data when there is no operand), `lowering` (only the codegen
passes make it; see prims/lowering.py).
Facts the passes read instead of testing a prim's name:
- reduction: "sum", "max" or "min" for a reduction a fused loop nest accumulates into a scalar, "argmax" or "argmin"
  for one that accumulates the first position of the extremum (with the extremum itself beside it); "" otherwise
- loop_remat: what a reverse loop recomputes from the counter and the loop constants rather than storing one per
  iteration (the residuals of a loop body: x[k], L[r, k] - mu[k], an index k + 1): "any" at any rank (views: index,
  slice, reshape; dim_size), "scalar" on scalars only (index arithmetic: add, sub, mul, neg, floordiv, max, min,
  convert); "" never (prims/control.py `_cheap_part`)
- remat: an elementwise prim so cheap that the unknown part of a partial evaluation recomputes it from
  its one tensor operand rather than reading its stored result (2·x from the derivative of x², −x,
  x − 1): the forward pass then writes one array fewer, and the operand is often stored anyway
- strings: it takes string operands (compares them for equality or moves them); no other prim may
- whole: its float result holds whole numbers: "always" (floor), "if_operands" (when its operands do:
  add, max, select, ...), "" (unknown)
- runs: the param holding the sub-function whose equations run whenever the equation does (a call's fn, once; a
  fusion's body, over its loop nest), unlike an if's branches or a loop's body: what they require, the equation
  requires (codegen/viewmodel.py's shape checks look inside it); "" when there is none
- unmasked: the prim computing the same values where no operand is a zero against an inf or nan (mulz, mulzz: mul):
  the simplify pass binds it for a product by a finite nonzero scalar literal, which needs no mask
- branches: its sub-functions are alternatives, each run only where its condition holds (cond and the per-lane
  ifs): what they compute may be guarded by the condition (a size n - 2 meant only for n > 2)
- sinks: an if whose operands (all but the condition) are the params of both of its branches, then_fn and
  else_fn: a value only one branch reads may be computed inside it (transforms/sink.py)
- epilogue_impls: the impls (params["impl"]) of a product whose kernel applies an elementwise epilogue to each
  result tile (the fuse_epilogue pass moves a fusion after the product into it)
- positional: an elementwise prim whose value is its element's position (iota): it reads no operand rows, and a
  loop nest computing it keeps its axes
- costly: a function call worth computing once rather than in every iteration of a loop (exp, log, sin, pow):
  the hoist pass computes such a value that is the same in every iteration before the loop, into a table
- lazy: the operands its C++ form evaluates only where its condition picks them (select's x and y: `p ? x : y`):
  codegen writes no float computation into them, so what they read is computed before, unconditionally, and the
  select stays a branch-free select
- precompute: a transform of weights (a Winograd kernel, int8 packing): an equation of it whose operand is a
  constant is computed by its eval when the package is compiled (layout_constants) instead of at run time
- takes: it takes elements at positions along an axis (params["axis"]) of its first operand, or writes
  there: the operands holding index tensors (() when the positions are scalars); None if it does not
- implies(eqn, holds) -> ((atom, sign), ...)   of a prim with a bool result: what its result being `holds` shows of
  its operands' signs (compare: x > c for a literal c >= 0 shows x > 0 where it holds); the nonfinite pass gives an
  if's branches the signs their condition shows (the else branch of `if n < 1e-4` has n > 0)
- masked: the masked product (mulz: 0 where the first operand is 0) that transforms/nonfinite.py binds in place of
  an equation of this product (ctmul: a (co)tangent times a value) whose second operand may be inf or nan
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..errors import rule  # noqa: F401  (prims.base.rule: a prim's rule, or the reason it has none)
from ..ir.core import Lit

PRIMS: dict[str, "Prim"] = {}
FORMS: dict[str, tuple["Prim", dict]] = {}  # a form's name -> (its prim, the params the name fixes)

NOT_LINEAR = None


@dataclass(frozen=True, eq=False)
class Prim:
    """A primitive with all of its rules."""

    name: str
    type_rule: Callable
    eval: Callable
    jvp: Optional[Callable]
    batch: Optional[Callable]
    emit: Optional[Callable]
    transpose: Optional[Callable] = NOT_LINEAR
    partial_eval: Optional[Callable] = None
    prune: Optional[Callable] = None
    simplify: Optional[Callable] = None
    expand: Optional[Callable] = None
    fusible: Optional[Callable] = None
    rows: Optional[Callable] = None
    along: Optional[Callable] = None
    accumulates: bool = False
    elementwise: bool = False
    doc: str = ""
    opt_outs: tuple[str, ...] = field(default=())
    view: bool = False      # the output is a view of the first operand's storage (no copy)
    lowering: bool = False  # made by the codegen passes; has no jvp/transpose/batching rules
    inplace: Optional[Callable] = None
    bounds: Optional[Callable] = None
    select_backend: Optional[Callable] = None
    parallel: Optional[Callable] = None
    scratch: Optional[Callable] = None
    reduction: str = ""
    remat: bool = False
    loop_remat: str = ""
    strings: bool = False
    whole: str = ""
    takes: Optional[tuple[int, ...]] = None
    positional: bool = False
    precompute: bool = False
    branches: bool = False
    runs: str = ""
    unmasked: Optional["Prim"] = None
    sinks: bool = False
    epilogue_impls: tuple[str, ...] = ()
    costly: bool = False
    lazy: tuple[int, ...] = ()
    forms: dict = field(default_factory=dict)  # name -> params: `b.lt(x, y)` binds compare with op="lt"
    table: dict = field(default_factory=dict)  # form name -> its record, which the rules read (math's MathFn)
    sign: Optional[Callable] = None       # (None: not stated, which tests/test_prim_facts.py refuses)
    nonfinite: Optional[Callable] = None  # (likewise)
    masked: Optional["Prim"] = None
    implies: Optional[Callable] = None
    int_value: Optional[Callable] = None
    declare: Optional[Callable] = None

    def __post_init__(self):
        assert self.name not in PRIMS and self.name not in FORMS, f"primitive {self.name} defined twice"
        assert self.reduction in ("", "sum", "max", "min", "argmax", "argmin")
        assert self.whole in ("", "always", "if_operands")
        assert self.loop_remat in ("", "any", "scalar")
        PRIMS[self.name] = self
        for form, params in self.forms.items():
            assert form not in PRIMS and form not in FORMS, f"form {form} of {self.name} defined twice"
            FORMS[form] = (self, dict(params))

    def __repr__(self) -> str:
        return f"Prim({self.name})"


# ---- the sign and nonfinite facts (see `sign` and `nonfinite` above) -----------------------------------------

ANY, NONNEG, POSITIVE = 0, 1, 2
"""What a `sign` rule knows of a value where it is finite: nothing, >= 0, > 0 (ordered: a larger one knows more)."""


def literal_sign(value) -> int:
    """The sign of a literal number (ANY for a bool, which is no number here)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value >= 0:
        return ANY
    return POSITIVE if value > 0 else NONNEG


def unsigned(eqn, sign_of) -> int:
    """The sign rule of a prim that knows nothing of its result's sign."""
    return ANY


def same_sign(eqn, sign_of) -> int:
    """The sign rule of a prim whose result's elements are its first operand's (a view, a move, a copy)."""
    return sign_of(eqn.ins[0])


def product_sign(eqn, sign_of) -> int:
    """x * y (x / y, x // y) of operands >= 0 is >= 0, and so is x * x; a product of positives may underflow to 0."""
    if eqn.ins[0] is eqn.ins[1]:
        return NONNEG
    return min(NONNEG, *(sign_of(a) for a in eqn.ins))


def finite(eqn, sign_of) -> bool:
    """The nonfinite rule of a prim whose results are finite wherever its operands are (overflow aside)."""
    return False


def nowhere_finite(eqn, sign_of) -> bool:
    """The nonfinite rule of a prim of which nothing is known (an external function): any result may be inf or nan."""
    return True


def from_bodies(eqn, sign_of) -> bool:
    """The nonfinite rule of a prim with sub-functions: what they make (transforms/nonfinite.py walks them), so
    unknown without them."""
    return True


def divides(eqn, sign_of) -> bool:
    """The nonfinite rule of x / y, x // y, x mod y: inf or nan where y is 0, unless y is known > 0 or a nonzero
    literal."""
    y = eqn.ins[1]
    nonzero = isinstance(y, Lit) and not isinstance(y.value, bool) and y.value != 0
    return sign_of(y) < POSITIVE and not nonzero


def lookup(name: str) -> tuple[Prim, dict]:
    """The prim a name binds and the params the name fixes: a prim's own name (no params) or one of its forms."""
    return (PRIMS[name], {}) if name in PRIMS else FORMS[name]


def form_record(prim: Prim, params):
    """The record of the form an equation of prim with params is (math[fn="exp"]: exp's MathFn), or None."""
    return prim.table.get(form_name(prim, params))


def opted_out(prim: Prim, params, which: str) -> str:
    """Why prim (in the form its params pick) has no rule `which` ("jvp", ...): its `opt_outs` entry or its form
    record's; "" when it has the rule."""
    entries = prim.opt_outs + getattr(form_record(prim, params), "opt_outs", ())
    return next((o.split(":", 1)[1].strip() for o in entries if o.startswith(which + ":")), "")


def form_name(prim: Prim, params) -> str:
    """The name an equation of prim with params is written by: the form its params pick (lt for compare[op="lt"]),
    else the prim's name."""
    for form, fixed in prim.forms.items():
        if len(fixed) == len(params) and all(params.get(k, object()) == v for k, v in fixed.items()):
            return form
    return prim.name


# ---- rows rules (see `rows` above) ----------------------------------------------------------------

def leads(a, n) -> bool:
    """Whether the atom a has n rows: its type's axis 0 is n."""
    return a.type.rank > 0 and a.type.shape[0] == n


def first_rows(eqn, n, shape_param: str | None = None):
    """The rows rule of a prim whose output row i is computed from row i of its first operand alone (any other
    operand is read whole); `shape_param` names a param holding the output shape, whose n becomes 1."""
    if not (eqn.ins and leads(eqn.ins[0], n) and all(leads(v, n) for v in eqn.outs)):
        return None
    params = dict(eqn.params)
    if shape_param is not None:
        params[shape_param] = (1,) + tuple(params[shape_param][1:])
    return params, (True,) + (False,) * (len(eqn.ins) - 1)


def broadcast_rows(eqn, n, shape_param: str | None = None):
    """The rows rule of an elementwise (numpy-broadcasting) prim: an operand of the output's rank with n rows is
    sliced; one of lower rank or with a single row is broadcast to every row and read whole."""
    if not eqn.outs or not all(leads(v, n) for v in eqn.outs):
        return None
    rank = eqn.outs[0].type.rank
    params = dict(eqn.params)
    if shape_param is not None:
        params[shape_param] = (1,) + tuple(params[shape_param][1:])
    return params, tuple(a.type.rank == rank and leads(a, n) for a in eqn.ins)


# ---- along rules (see `along` above) --------------------------------------------------------------

def resized(shape, axis: int, n) -> tuple:
    """shape with its axis `axis` n long."""
    return tuple(shape[:axis]) + (n,) + tuple(shape[axis + 1:])


def broadcast_along(eqn, axis: int, n, shape_param: str | None = None):
    """The along rule of an elementwise (numpy-broadcasting) prim: an operand whose axis aligned with the output's
    (from the right) is as long is taken along it; one of lower rank or with a single element there is read
    whole. None for a one-element axis (there is nothing to take)."""
    out = eqn.outs[0].type
    size = out.shape[axis]
    if size == 1:
        return None
    axes = []
    for a in eqn.ins:
        k = axis - (out.rank - a.type.rank)
        axes.append(k if k >= 0 and a.type.shape[k] == size else None)
    params = dict(eqn.params)
    if shape_param is not None:
        params[shape_param] = resized(params[shape_param], axis, n)
    return params, tuple(axes)


def first_along(eqn, axis: int, n, in_axis: int | None = None, shape_param: str | None = None):
    """The along rule of a prim whose output's `axis` is its first operand's axis `in_axis` (by default the same
    axis), any other operand read whole; `shape_param` names a param holding the output shape."""
    params = dict(eqn.params)
    if shape_param is not None:
        params[shape_param] = resized(params[shape_param], axis, n)
    return params, (axis if in_axis is None else in_axis,) + (None,) * (len(eqn.ins) - 1)
