"""jacfwd, jacrev, jacobian, hessian: whole Jacobians as vmaps of jvp or of the transposed linearization.

Requires: a verified Func and argnums (default (0,), as torch.func). Guarantees: a Func of the same
params whose results are, for each float result `out` of f and each argnum `x` (in that order), the
Jacobian block d out / d x of type out.shape + x.shape (torch.func's layout, flattened).

- jacfwd: per argnum x, the jvp of f in x alone, vmapped (one vmap per axis of x) over the identity
  basis of x's tangents: one direction per element of x. The primal part of the jvp reads no tangent,
  so vmap leaves it unbatched: f's values are computed once, not once per direction.
- jacrev: f linearized once (forward pass and residuals), then per float result the transposed
  linear part vmapped over the identity basis of that result's cotangents: one pass back per element
  of the result, all reading the one forward pass's residuals.
- jacobian: jacfwd when the argnums have fewer elements than the float results, else jacrev (a
  jvp or a vjp pass costs a small multiple of f, so the mode with fewer directions wins).
- hessian: jacfwd of jacrev (forward over reverse), as torch.func.hessian.
"""
from __future__ import annotations

from typing import Sequence

from ..errors import KsbuildError
from ..ir.builder import Builder, inline
from ..ir.core import Atom, Func, Lit, Var
from ..ir.types import Dim, Type
from ..ops.math import logical_and
from ..prims.common import zeros
from .jvp import jvp_func
from .transpose import transpose_func
from .vjp import diff_mask, linearize
from .vmap import vmap_func


def jacfwd_func(f: Func, argnums: Sequence[int] | None = None, name: str | None = None) -> Func:
    """Forward mode: per argnum x, the jvp of f in x alone vmapped over the identity basis of x's tangents."""
    nums, outs = _checked(f, argnums, "jacfwd")
    b = Builder()
    primals = [Var(p.type, p.hint) for p in f.params]
    per_arg = [_forward_blocks(b, f, primals, i, outs) for i in nums]
    blocks = [per_arg[a][o] for o in range(len(outs)) for a in range(len(nums))]
    return b.func(name or f"jacfwd_{f.name}", primals, blocks, _block_names(f, nums, outs))


def jacrev_func(f: Func, argnums: Sequence[int] | None = None, name: str | None = None) -> Func:
    """Reverse mode: linearize f once, then per float result vmap the transposed linear part over the
    identity basis of that result's cotangents."""
    nums, outs = _checked(f, argnums, "jacrev")
    fwd, lin, n_out, n_res = linearize(f, nums)
    n_ct = len(lin.results)
    lin_t = transpose_func(lin, [False] * n_res + [True] * (len(lin.params) - n_res))
    b = Builder()
    primals = [Var(p.type, p.hint) for p in f.params]
    residuals = inline(b, fwd, primals)[n_out:]
    order = [sorted(nums).index(i) for i in nums]  # lin_t's cotangents are in param order; blocks in argnums order
    blocks: list[Atom] = []
    for k in range(n_ct):
        per_arg = _reverse_blocks(b, lin_t, residuals, k, n_ct)
        blocks += [per_arg[a] for a in order]
    return b.func(name or f"jacrev_{f.name}", primals, blocks, _block_names(f, nums, outs))


def jacobian_func(f: Func, argnums: Sequence[int] | None = None, name: str | None = None) -> Func:
    """jacfwd when the differentiated inputs have fewer elements than the float results, else jacrev."""
    nums, outs = _checked(f, argnums, "jacobian")
    ins = [f.params[i].type for i in nums]
    fwd = elements_key(ins) < elements_key([f.results[o].type for o in outs])
    return (jacfwd_func if fwd else jacrev_func)(f, nums, name or f"jacobian_{f.name}")


def hessian_func(f: Func, argnums: Sequence[int] | None = None, name: str | None = None) -> Func:
    """jacfwd(jacrev(f, argnums), argnums): blocks d2 out / d x d y of type out.shape + x.shape + y.shape."""
    nums, outs = _checked(f, argnums, "hessian")
    h = jacfwd_func(jacrev_func(f, nums), nums)
    names = [f"d2{_out_name(f, o)}_d{_arg_name(f, i)}_d{_arg_name(f, j)}" for o in outs for i in nums for j in nums]
    return Func(name or f"hessian_{f.name}", h.params, h.eqns, h.results, tuple(names))


JACOBIAN_FUNCS = {"jacfwd": jacfwd_func, "jacrev": jacrev_func, "jacobian": jacobian_func, "hessian": hessian_func}


def elements_key(types: Sequence[Type]) -> tuple[int, int]:
    """How many elements the types hold, comparable with symbolic dims: (the most symbolic dims of one
    type, the product of the literal dims summed over the types). A symbolic dim counts as larger than
    any literal product: f32[n] has more elements than f32[300]."""
    degree = max((sum(isinstance(d, str) for d in t.shape) for t in types), default=0)
    literal = sum(_literal_size(t) for t in types if sum(isinstance(d, str) for d in t.shape) == degree)
    return degree, literal


def _literal_size(t: Type) -> int:
    n = 1
    for d in t.shape:
        n *= d if isinstance(d, int) else 1
    return n


def _checked(f: Func, argnums, what: str) -> tuple[list[int], list[int]]:
    """(the argnums, default (0,); the positions of f's float results) after checking both."""
    nums = list(argnums) if argnums is not None else [0]
    if not f.params:
        raise KsbuildError(f"{what} of '{f.name}': it takes no arguments to differentiate")
    diff_mask(f, nums)  # raises for an argnum out of range or not a float
    outs = [k for k, t in enumerate(f.out_types) if t.is_float]
    if not outs:
        raise KsbuildError(f"{what} of '{f.name}': it has no float result to differentiate")
    return nums, outs


def _forward_blocks(b: Builder, f: Func, primals: list[Var], i: int, outs: list[int]) -> list[Atom]:
    """d out / d x_i for each float result: the jvp in x_i, vmapped over x_i's basis, axes moved last."""
    x = f.params[i].type
    jf = jvp_func(f, [k == i for k in range(len(f.params))])
    tangents = jf.results[len(f.results):]  # one per float result, in order
    jf = Func(jf.name, jf.params, jf.eqns, tangents)
    batched = _vmap_over(jf, x.shape)
    res = inline(b, batched, list(primals) + [identity_basis(b, x)])
    return [_move_lead_last(b, r, x.rank) for r in res]


def _reverse_blocks(b: Builder, lin_t: Func, residuals: list[Atom], k: int, n_ct: int) -> list[Atom]:
    """d out_k / d x for each argnum x: lin_t with the cotangent of result k alone, vmapped over its basis."""
    n_res = len(residuals)
    ct_params = lin_t.params[n_res:]
    out = ct_params[k].type
    res = [Var(p.type, p.hint) for p in lin_t.params[:n_res]]
    ct = Var(out, "ct")
    g = Builder()
    cts = [ct if j == k else zeros(p.type) for j, p in enumerate(ct_params)]
    single = g.func(f"{lin_t.name}_{k}", res + [ct], inline(g, lin_t, res + cts))
    batched = _vmap_over(single, out.shape)
    return inline(b, batched, list(residuals) + [identity_basis(b, out)])


def _vmap_over(g: Func, shape: tuple[Dim, ...]) -> Func:
    """g vmapped over its last param once per axis of shape (innermost first): the last param gains
    shape as leading axes and every result gains them too."""
    batched = [False] * (len(g.params) - 1) + [True]
    for d in reversed(shape):
        g, _ = vmap_func(g, batched, d, [True] * len(g.results), name=g.name)
    return g


def identity_basis(b: Builder, t: Type) -> Atom:
    """The identity of shape t.shape + t.shape: element (i, j) is 1 where the index tuples i and j are
    equal. Row i is the unit tangent (or cotangent) in the direction of element i."""
    r = t.rank
    if r == 0:
        return Lit(1, t)
    shape = tuple(t.shape) * 2
    same = None
    for k in range(r):
        eq = b.eq(b.iota(shape=shape, axis=k, dtype="i64"), b.iota(shape=shape, axis=r + k, dtype="i64"))
        same = eq if same is None else logical_and(b, same, eq)
    return b.convert(same, dtype=t.dtype)


def _move_lead_last(b: Builder, x: Atom, lead: int) -> Atom:
    """x with its first `lead` axes moved after the others: (x.shape + out.shape) -> out.shape + x.shape."""
    rank = x.type.rank
    if lead == 0 or lead == rank:
        return x
    perm = tuple(range(lead, rank)) + tuple(range(lead))
    return b.transpose(x, perm=perm)


def _block_names(f: Func, nums: list[int], outs: list[int]) -> tuple[str, ...]:
    return tuple(f"d{_out_name(f, o)}_d{_arg_name(f, i)}" for o in outs for i in nums)


def _out_name(f: Func, k: int) -> str:
    name = f.result_names[k] if f.result_names and k < len(f.result_names) else ""
    return name or ("f" if len(f.results) == 1 else f"f{k}")


def _arg_name(f: Func, i: int) -> str:
    return f.params[i].hint or f"x{i}"
