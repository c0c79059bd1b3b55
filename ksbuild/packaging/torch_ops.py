"""Every export of a built package as a torch op, with autograd through the package's derivative exports.

Standalone like runtime.py (torch, numpy and the standard library only), so it ships in a wheel next to it.
docs/torch.md says what users see; in short:
- Names: export E of package P is the op ksbuild_P::E, for every build of P, so a program saved with
  torch.export.save loads in a new process once P is loaded there. The build behind the ops (version,
  content key, folder) is on the namespace object torch.ops.ksbuild_P, not in the name.
- One build per name: the ops run the build of P loaded last; an older build's package runs its own code
  eagerly, and what needs its ops is an error. An op keeps the schema it was first defined with (torch ops
  cannot be redefined): an export whose signature changed runs eagerly only, until Python restarts.
- Autograd, for export E with expression X: the first of fwd(X)+bwd(X), vjp(X), grad(X) (a scalar loss)
  whose argnums cover every input that requires grad; none is an error at the call, naming what to add.
  A backward pass that is itself differentiated (create_graph=True) runs vjp(X) through its op.
- Each op has a fake kernel from the export's signature (torch.compile, torch.export). Inputs are tensors
  (0-d for scalars); dims no input shape shows come as a trailing `SymInt[] dims`.
- ksbuild's copy of this file and each wheel's share a package's ops through its namespace object in
  torch.ops (attributes ksbuild_slots, ksbuild_owner, ksbuild_loader; a slot's `schema`, `op` and
  `current`, whose `cpu`, `fake` and `autograd` the op's kernels call): keep those names.
- torch.compile caches compiled graphs on disk by the ops they call, by name. Inside a torch.compile trace an export
  is called through an overload named after the build (ksbuild_P::E.b<key>, same kernels as E.default), so a graph
  compiled with one build of P (its residuals, its result shapes) is never reused for another: a ksbuild upgrade or
  an edited kernel that kept its signature once made torch run a stale compiled graph. torch.export records
  E.default, so saved programs keep loading with any build of P.
"""
from __future__ import annotations

import ast
import hashlib
import keyword
from typing import NamedTuple

import torch
from torch._C import _after_autograd_keyset, _any_requires_grad, _AutoDispatchBelowAutograd

TORCH_DTYPES = {"f32": torch.float32, "f64": torch.float64, "i32": torch.int32, "i64": torch.int64,
                "bool": torch.bool, "f16": torch.float16, "bf16": torch.bfloat16, "i8": torch.int8,
                "i16": torch.int16, "u8": torch.uint8}
# the types whose torch dtype holds the C ABI's bits as they are (older torch lacks some of them)
TORCH_DTYPES.update({k: getattr(torch, name) for k, name in (
    ("u16", "uint16"), ("u32", "uint32"), ("u64", "uint64"), ("f8e4m3fn", "float8_e4m3fn"), ("f8e5m2", "float8_e5m2"),
    ("f8e4m3fnuz", "float8_e4m3fnuz"), ("f8e5m2fnuz", "float8_e5m2fnuz")) if hasattr(torch, name)})
FLOATS = ("f32", "f64")  # the dtypes with derivatives
PREFIX = "ksbuild_"  # the namespace of package P is ksbuild_P
_PACKAGES: dict[str, "PackageOps"] = {}  # namespace -> the PackageOps this copy made last for it
_LIBRARIES: list = []  # torch.library.Library objects: their definitions last as long as they do
_PLAIN_CPU = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU).add(torch._C.DispatchKey.AutogradCPU)
"""The dispatch keys an op's autograd kernel sees for plain CPU tensors outside any mode or transform."""


class OpNotLoadedError(LookupError):
    """A ksbuild op was looked up (by torch.export.load, unpickling, ...) before its package was loaded."""


def package_ops(package) -> "PackageOps":
    """The torch ops of a loaded package (a runtime.Package), defined or moved to its build on first use."""
    namespace = PREFIX + package.desc["package"]
    ops = _PACKAGES.get(namespace)
    if ops is None or ops.key != _key(package):
        ops = _PACKAGES[namespace] = PackageOps(package, namespace)
    elif _namespace(namespace).ksbuild_owner.key != ops.key:  # another copy of this file loaded another build since
        ops._bind()
    return ops


def expect_package(name: str, loader) -> None:
    """Let a lookup of an op of package `name` that is not loaded load it first: loader() (the dev loop's build)."""
    _namespace(PREFIX + name).ksbuild_loader = loader


def build_of(namespace: str) -> dict | None:
    """The build of a package whose ops torch.ops.<namespace> runs: package, version, key and root (None if none)."""
    owner = _namespace(namespace).ksbuild_owner
    if owner is None:
        return None
    desc = owner.package.desc
    return {"package": desc["package"], "version": desc.get("version", ""), "key": owner.key,
            "root": str(owner.package.root)}


class PackageOps:
    """The torch ops of one build of a package, and the derivative exports each export's autograd uses."""

    def __init__(self, package, namespace: str):
        self.package, self.namespace, self.key = package, namespace, _key(package)
        found = derivatives(package.exports)
        self.exports = {n: _ExportOp(self, e, found[n]) for n, e in package.exports.items()}
        self.ops: dict = {}  # export -> its op (torch.ops.ksbuild_P.E.default)
        self.keyed: dict = {}  # export -> its op for torch.compile traces (torch.ops.ksbuild_P.E.b<key>)
        self.no_op: dict[str, str] = {}  # export -> why it has no op (it runs eagerly only)
        self._bind()

    def call(self, export, args, dims: dict | None = None):
        """Call export on torch tensors (and Python numbers): results as tensors, one or a tuple."""
        export = self.package.exports[export.name]  # the objects the ops were defined with
        if not dims and _plain_call(export, args):
            return _unpack(run(export, args, {}))
        tensors = [_tensor(x, a, export) for x, a in zip(args, export.ins)]
        _no_forward_mode(export.name, tensors)
        need_grad = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
        eager = _plain_eager(tensors)
        if eager and need_grad:
            op = self.exports[export.name]
            d = op.derivative(tensors)
            if d is not None:  # the same computation as the op's autograd, without the dispatcher
                return _unpack(list(_Grad.apply(op, d, None, dims or {}, *tensors)))
        if eager:
            return _unpack(run(export, tensors, dims or {}))
        return _unpack(_as_list(self.invoke(export.name, tensors, dims or {})))

    def invoke(self, name: str, tensors, dims: dict):
        """Call the op of export `name`, adding its free dims (taken from `dims`) when it has any."""
        if name not in self.ops:
            raise RuntimeError(f"ksbuild: {self.no_op[name]}")
        self._check_current(name)
        export = self.package.exports[name]
        extra = [[dims[d] for d in export.free_dims]] if export.free_dims else []
        return self.op(name)(*tensors, *extra)

    def op(self, name: str):
        """The op of export `name` to call: inside a torch.compile session its overload of this build (so that
        torch's caches of compiled graphs, keyed by the ops a graph calls, tell builds apart), else E.default."""
        if torch.compiler.is_compiling() and not torch.compiler.is_exporting():
            return self.keyed.get(name, self.ops[name])
        return self.ops[name]

    def _check_current(self, name: str) -> None:
        """An error when a later build of the package took the ops over (they would run its code, not ours)."""
        owner = self._ns.ksbuild_owner
        if owner is not self and owner.key != self.key:
            raise RuntimeError(f"ksbuild: {_title(self, name)}: the torch ops of package '{_package(self)}' now run "
                               f"another build of it, loaded later ({_build_text(owner)}); this one "
                               f"({_build_text(self)}) runs eagerly only: use the package loaded last")

    def _bind(self) -> None:
        """Point the ops of this package's namespace at this build (defining those that are new)."""
        ns = self._ns = _namespace(self.namespace)
        for name, op in self.exports.items():
            reason = _no_op_reason(self, op.export)
            if reason is None:
                slot = ns.ksbuild_slots.get(name) or _define(ns, name, schema(op.export))
                reason = _schema_change(self, name, slot, schema(op.export))
            if reason is not None:
                self.no_op[name] = reason
                continue
            slot.current, self.ops[name] = op, slot.op
            self.keyed[name] = _keyed_op(ns, name, slot, self.key)
        for name, slot in ns.ksbuild_slots.items():
            if name not in self.ops:
                slot.current = _Unbound(self.no_op.get(name) or f"{_title(self, name)}: package "
                                        f"'{_package(self)}' as loaded last ({_build_text(self)}) has no export "
                                        f"'{name}'")
        ns.ksbuild_owner = self


class _Derivative(NamedTuple):
    """One way to get an export's input cotangents: kind "split" (names: fwd, bwd), "vjp" or "grad" (name: the
    export), and the inputs it gives cotangents for (its argnums, float inputs only)."""

    kind: str
    names: tuple
    covers: frozenset


class _ExportOp:
    """One export of one build as a torch op: its kernels (CPU, fake, autograd) and its backward formula."""

    def __init__(self, ops: PackageOps, export, found: list):
        self.ops, self.export, self.name, self.derivatives = ops, export, export.name, found
        self.n_in = len(export.ins)
        self.kinds = [(TORCH_DTYPES.get(a["dtype"]), len(a["shape"])) for a in export.ins]
        self.floats_in = [i for i, a in enumerate(export.ins) if a["dtype"] in FLOATS]
        self.differentiable = bool(self.floats_in) and any(a["dtype"] in FLOATS for a in export.outs)

    def cpu(self, *args):
        """The op's CPU kernel: the C call (on inputs of the export's dtypes and ranks)."""
        self.check(args)
        if len(args) == self.n_in:
            return _unpack(run(self.export, args, {}))
        return _unpack(run(self.export, args[:self.n_in], dict(zip(self.export.free_dims, args[self.n_in]))))

    def fake(self, *args):
        """The op's fake (meta) kernel: empty results of the shapes the signature gives (dims may be SymInts)."""
        self.check(args)
        tensors, given = args[:self.n_in], args[self.n_in] if len(args) > self.n_in else []
        dims = self.export.bind_dims([t.shape for t in tensors], dict(zip(self.export.free_dims, given)))
        return _unpack([torch.empty(s, dtype=TORCH_DTYPES[a["dtype"]], device=_device(tensors))
                        for s, a in zip(self.export.out_shapes(dims), self.export.outs)])

    def check(self, args) -> None:
        """A DtypeError or CallError (from _tensor) for an input of another dtype or rank than the export's: a
        program calling the op by name may have been made with another build."""
        for t, (dtype, rank) in zip(args, self.kinds):
            if t.dtype is not dtype or t.dim() != rank:
                for x, a in zip(args, self.export.ins):
                    _tensor(x, a, self.export)

    def autograd(self, keyset, *args):
        """The op's autograd kernel: an autograd node through a derivative export when an input requires grad
        (an error at once if the package has none), else on to the C call (plain CPU tensors) or the next key."""
        if torch.is_grad_enabled() and _any_requires_grad(*args):
            tensors = args[:self.n_in]
            d = None if torch.compiler.is_exporting() else self.derivative(tensors)
            if d is not None:
                dims = dict(zip(self.export.free_dims, args[self.n_in])) if len(args) > self.n_in else {}
                plain = keyset == _PLAIN_CPU  # (then the forward pass calls C directly)
                return _unpack(list(_Grad.apply(self, d, None if plain else keyset, dims, *tensors)))
        if keyset == _PLAIN_CPU:
            return self.cpu(*args)
        with _AutoDispatchBelowAutograd():
            return self.ops.op(self.name).redispatch(keyset & _after_autograd_keyset, *args)

    def derivative(self, tensors) -> _Derivative | None:
        """The derivative that covers every float input requiring grad (None if nothing needs one); an error
        naming the export and what to add to the manifest when there is none."""
        need = {i for i in self.floats_in if tensors[i].requires_grad}
        if not need or not self.differentiable:
            return None
        for d in self.derivatives:
            if need <= d.covers:
                return d
        raise RuntimeError(_no_derivative_message(self, need))

    def forward(self, d: _Derivative, tensors, keyset, dims: dict) -> tuple[list, list]:
        """(results, residuals): of fwd(X) for a split derivative, else of X itself (no residuals)."""
        name = d.names[0] if d.kind == "split" else self.name
        if keyset is None:  # eager, plain CPU tensors
            outs = run(self.ops.package.exports[name], tensors, dims)
        else:
            export = self.ops.package.exports[name]
            extra = [[dims[k] for k in export.free_dims]] if export.free_dims else []
            with _AutoDispatchBelowAutograd():
                outs = _as_list(self.ops.op(name).redispatch(keyset & _after_autograd_keyset, *tensors, *extra))
        n = len(self.export.outs)
        return list(outs[:n]), list(outs[n:])

    def grads(self, ctx, grads) -> list:
        """The cotangent of every input (None where the derivative gives none) from those of the float results."""
        cts = [g if g is not None else torch.zeros(shape, dtype=dtype, device=device)
               for g, (shape, dtype, device), a in zip(grads, ctx.out_meta, self.export.outs) if a["dtype"] in FLOATS]
        inputs, d = ctx.saved_tensors, ctx.derivative
        if torch.is_grad_enabled():  # create_graph=True: the backward pass is differentiated too, through vjp(X)
            d = next((v for v in self.derivatives if v.kind == "vjp" and d.covers <= v.covers), d)
        if d.kind == "split":
            res = _as_list(self._apply(d.names[1], [*inputs, *ctx.residuals, *cts], ctx.dims))
        elif d.kind == "grad":  # vjp of a scalar loss: its gradient times the result's cotangent
            res = [cts[0] * g for g in _as_list(self._apply(d.names[0], list(inputs), ctx.dims))]
        else:
            res = _as_list(self._apply(d.names[0], [*inputs, *cts], ctx.dims))
        it = iter(res)
        return [next(it) if i in d.covers else None for i in range(self.n_in)]

    def _apply(self, name: str, tensors, dims: dict):
        """Export `name` on tensors: a direct call when nothing needs to see it, else its (differentiable) op."""
        if not torch.is_grad_enabled() and _plain_eager(tensors):
            return _unpack(run(self.ops.package.exports[name], tensors, dims))
        return self.ops.invoke(name, tensors, dims)


class _Grad(torch.autograd.Function):
    """The autograd node of an export call: forward through X or fwd(X), backward through a derivative export."""

    @staticmethod
    def forward(ctx, op: _ExportOp, d: _Derivative, keyset, dims: dict, *tensors):
        e = op.export
        results, ctx.residuals = op.forward(d, tensors, keyset, dims)
        ctx.op, ctx.derivative = op, d
        ctx.dims = e.bind_dims([t.shape for t in tensors], dims)
        ctx.out_meta = [(o.shape, o.dtype, o.device) for o in results]
        ctx.mark_non_differentiable(*[o for o, a in zip(results, e.outs) if a["dtype"] not in FLOATS])
        ctx.save_for_backward(*tensors)
        return tuple(results)

    @staticmethod
    def backward(ctx, *grads):
        return (None, None, None, None, *ctx.op.grads(ctx, grads))


class _Unbound:
    """What an op runs when the build loaded last has no such export (or another signature): an error."""

    def __init__(self, message: str):
        self.message = message

    def _fail(self, *args):
        raise RuntimeError(f"ksbuild: {self.message}")

    cpu = fake = _fail

    def autograd(self, keyset, *args):
        self._fail()


class _Slot:
    """One op of a namespace: its schema, the op, and the export of the build it currently runs."""

    def __init__(self, schema_text: str):
        self.schema, self.op, self.current = schema_text, None, None
        self.keyed: dict = {}  # build key -> the op's overload for torch.compile traces with that build


def _define(ns, name: str, schema_text: str) -> _Slot:
    """Define op ns::name with its CPU, fake and autograd kernels, each calling the slot's current export."""
    slot = _Slot(schema_text)
    lib = torch.library.Library(ns.name, "FRAGMENT")
    _LIBRARIES.append(lib)
    ns.ksbuild_defining = True  # (torch looks the name up first: not there is no error then)
    try:
        lib.define(f"{name}{schema_text}", tags=(torch.Tag.pt2_compliant_tag,))
    finally:
        ns.ksbuild_defining = False
    _implement(lib, ns, name, slot)
    slot.op = getattr(ns, name).default
    ns.ksbuild_slots[name] = slot
    return slot


def _keyed_op(ns, name: str, slot: _Slot, key: str):
    """The overload ns::name.b<key> of a defined op (its kernels those of the slot, as the default's), defined on
    first use: what a torch.compile trace calls with the build of that key."""
    keyed = slot.__dict__.setdefault("keyed", {})  # (a slot made by an older wheel's copy of this file has none)
    if key in keyed:
        return keyed[key]
    overload = "b" + "".join(c for c in key if c.isalnum())[:20]
    lib = torch.library.Library(ns.name, "FRAGMENT")
    _LIBRARIES.append(lib)
    ns.ksbuild_defining = True
    try:
        lib.define(f"{name}.{overload}{slot.schema}", tags=(torch.Tag.pt2_compliant_tag,))
    finally:
        ns.ksbuild_defining = False
    _implement(lib, ns, f"{name}.{overload}", slot)
    keyed[key] = getattr(getattr(ns, name), overload)
    return keyed[key]


def _implement(lib, ns, qualname: str, slot: _Slot) -> None:
    """The CPU, fake and autograd kernels of op ns::qualname: each calls the slot's current export."""
    lib.impl(qualname, lambda *args: slot.current.cpu(*args), "CPU")
    torch.library.register_fake(f"{ns.name}::{qualname}", lambda *args: slot.current.fake(*args), lib=lib)
    lib.impl(qualname, lambda keyset, *args: slot.current.autograd(keyset, *args), "Autograd", with_keyset=True)


def _no_op_reason(ops: PackageOps, export) -> str | None:
    """Why an export gets no op (None if it gets one): no results, strings, or too many arguments."""
    if not export.outs:
        return f"{_title(ops, export.name)} has no results, so it is no torch op"
    if export._strings:
        return f"{_title(ops, export.name)} takes or gives strings (torch tensors cannot hold them): no torch op"
    if export.name == "name" or export.name.startswith(("_", PREFIX)):
        return (f"{_title(ops, export.name)}: torch.ops.{ops.namespace}.{export.name} would be an attribute of "
                "torch's namespace object, not an op: rename the export to have a torch op")
    if _op_arguments(export) > MAX_OP_ARGUMENTS:
        return (f"export '{export.name}' takes {_op_arguments(export)} arguments and a torch custom op at most "
                f"{MAX_OP_ARGUMENTS}, so it runs on plain CPU tensors only: not under torch.compile or torch.export, "
                "and not in a backward pass that is itself differentiated (create_graph=True)")
    return None


def _schema_change(ops: PackageOps, name: str, slot: _Slot, schema_text: str) -> str | None:
    """An error message when the op was defined (by an earlier build) with another schema, else None."""
    if slot.schema == schema_text:
        return None
    return (f"{_title(ops, name)} has the signature {schema_text}, but its torch op {ops.namespace}::{name} was "
            f"defined in this process with {slot.schema} by an earlier build, and torch ops cannot be redefined: it "
            "runs eagerly only (not under torch.compile or torch.export) until Python restarts")


MAX_OP_ARGUMENTS = 64
"""The most arguments torch.library takes in a custom op's schema (torch's own limit)."""


def _op_arguments(export) -> int:
    """The arguments of an export's op: its inputs, and the list of its free dims when it has any."""
    return len(export.ins) + (1 if export.free_dims else 0)


def run(export, tensors, dims: dict) -> list[torch.Tensor]:
    """The C call on CPU tensors of the right dtypes (no autograd here): new output tensors."""
    if export.desc["kind"] == "scalar":
        return [torch.from_numpy(o) for o in export.call_arrays([t.item() for t in tensors])]
    tensors = [t if t.is_contiguous() else t.detach().contiguous() for t in tensors]  # (data_ptr needs no detach)
    plan = export.plan([t.shape for t in tensors], dims)  # dims, output shapes, workspace size: once per shapes
    outs = [_empty(shape, TORCH_DTYPES[a["dtype"]]) for (shape, _), a in zip(plan.outs, export.outs)]
    ins = [t.data_ptr() if a["shape"] else _scalar_arg(t, a) for t, a in zip(tensors, export.ins)]
    export.call_pointers(plan, ins, [o.data_ptr() for o in outs])
    return outs


def _empty(shape: tuple, dtype: torch.dtype) -> torch.Tensor:
    """torch.empty(shape, dtype=dtype); the sizes as separate arguments, which torch parses in half the time."""
    return torch.empty(*shape, dtype=dtype) if shape else torch.empty((), dtype=dtype)


def schema(export) -> str:
    """The op schema: every input a Tensor, then `SymInt[] dims` if the export has free dims."""
    names = [_arg_name(a["name"], i) for i, a in enumerate(export.ins)]
    params = [f"Tensor {n}" for n in names] + (["SymInt[] dims"] if export.free_dims else [])
    outs = ["Tensor"] * len(export.outs)
    ret = outs[0] if len(outs) == 1 else f"({', '.join(outs)})"
    return f"({', '.join(params)}) -> {ret}"


def _arg_name(name: str, i: int) -> str:
    if not name.isidentifier() or keyword.iskeyword(name) or name in ("self", "out", "dims"):
        return f"{name}_{i}" if name.isidentifier() else f"arg{i}"
    return name


# ---- derivative exports, found by expression ------------------------------------------------------------------

_KINDS = ("fwd", "bwd", "vjp", "grad")


def derivatives(exports: dict) -> dict[str, list[_Derivative]]:
    """For every export, the derivatives its package exports, preferred first: fwd/bwd pairs, vjp, grad."""
    by_form: dict[tuple, str] = {}  # (kind, inner expression, argnums) -> the first export of that form
    for name, e in exports.items():
        form = _derivative_form(e.desc["expression"])
        if form is not None:
            by_form.setdefault(form, name)
    return {name: _derivatives_of(e, by_form) for name, e in exports.items()}


def _derivative_form(expr: str) -> tuple | None:
    """(kind, inner, argnums) of `kind(inner, argnums=...)` for kind fwd/bwd/vjp/grad (inner as its syntax tree's
    dump, argnums a sorted tuple or None); None for any other expression."""
    node = _parsed(expr)
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _KINDS
            and len(node.args) == 1 and all(k.arg == "argnums" for k in node.keywords)):
        return None
    argnums = None
    for k in node.keywords:
        value = ast.literal_eval(k.value)
        argnums = tuple(sorted({value} if isinstance(value, int) else set(value)))
    return node.func.id, ast.dump(node.args[0]), argnums


def _derivatives_of(export, by_form: dict) -> list[_Derivative]:
    """The derivatives of one export among the package's exports of derivative form."""
    inner = ast.dump(_parsed(export.desc["expression"]) or ast.Constant(None))
    floats = frozenset(i for i, a in enumerate(export.ins) if a["dtype"] in FLOATS)
    mine = {(kind, argnums): name for (kind, x, argnums), name in by_form.items() if x == inner}
    covers = {argnums: floats if argnums is None else floats & frozenset(argnums) for _, argnums in mine}
    found = [_Derivative("split", (name, mine[("bwd", argnums)]), covers[argnums])
             for (kind, argnums), name in mine.items() if kind == "fwd" and ("bwd", argnums) in mine]
    found += [_Derivative("vjp", (name,), covers[argnums]) for (kind, argnums), name in mine.items() if kind == "vjp"]
    if len(export.outs) == 1 and export.outs[0]["dtype"] in FLOATS and not export.outs[0]["shape"]:
        found += [_Derivative("grad", (name,), covers[argnums]) for (kind, argnums), name in mine.items()
                  if kind == "grad"]
    return found


def _parsed(expr: str):
    try:
        return ast.parse(expr.strip(), mode="eval").body
    except SyntaxError:
        return None


def _no_derivative_message(op: _ExportOp, need: set) -> str:
    """What to add to the manifest (or do instead) when no derivative export covers the inputs requiring grad."""
    e, expr, exports = op.export, op.export.desc["expression"], op.ops.package.exports
    names = ", ".join(f"'{_shown(e.ins[i])}'" for i in sorted(need))
    have = "".join(f"; {'/'.join(d.names)} = {exports[d.names[-1]].desc['expression']} covers "
                   f"{', '.join(repr(_shown(e.ins[i])) for i in sorted(d.covers)) or 'nothing'} only"
                   for d in op.derivatives)
    suggested = next(n for n in (f"{op.name}_vjp", f"{op.name}_vjp_all", f"{op.name}_vjp_{len(exports)}")
                     if n not in exports)
    return (f"ksbuild: {_title(op.ops, op.name)} = {expr} was called on inputs that require grad ({names}), and "
            f"package '{_package(op.ops)}' has no derivative of it for all of them{have}. Add one to [exports] in "
            f"its manifest, such as {suggested} = \"vjp({expr})\" (or fwd/bwd, or grad for a scalar loss), or call "
            "it under torch.no_grad() or on detached inputs (x.detach())")


# ---- the namespace objects in torch.ops --------------------------------------------------------------------------

class _Namespace(torch._ops._OpNamespace):
    """torch.ops.ksbuild_P: torch's namespace of P's ops, holding which build they run; a lookup of an op that is
    not there loads the package first if a loader is known (the dev loop), else says how to load it."""

    def __init__(self, name: str):
        super().__init__(name)
        self.__module__ = "torch._ops"  # the module torch names its ops by (pickled by name: torch.compile's cache)
        self.ksbuild_slots, self.ksbuild_owner, self.ksbuild_loader = {}, None, None

    def __repr__(self) -> str:
        owner = self.ksbuild_owner
        return f"<ksbuild ops torch.ops.{self.name}: {_build_text(owner) if owner else 'no build loaded'}>"

    def __getattr__(self, op_name: str):
        try:
            return super().__getattr__(op_name)
        except AttributeError:
            if op_name.startswith("_") or op_name.startswith(PREFIX) or self.__dict__.get("ksbuild_defining"):
                raise
        loader = self.__dict__.get("ksbuild_loader")
        if loader is not None and self.__dict__.get("ksbuild_owner") is None:
            loader()
            if op_name in self.ksbuild_slots:
                return super().__getattr__(op_name)
        raise OpNotLoadedError(_missing_message(self, op_name)) from None


def _namespace(name: str) -> _Namespace:
    """The namespace object torch.ops.<name>, made a ksbuild one (sharing its state with every copy of this file)."""
    ns = torch.ops.__dict__.get(name)
    if ns is None or "ksbuild_slots" not in vars(ns):
        ns = _Namespace(name)
        setattr(torch.ops, name, ns)
        if name not in torch.ops._dir:
            torch.ops._dir.append(name)
    return ns


def _missing_message(ns, op_name: str) -> str:
    """What to do when torch.ops.ksbuild_P.E is looked up and P's build in this process has no E (or none is
    loaded)."""
    package, owner = ns.name[len(PREFIX):], ns.__dict__.get("ksbuild_owner")
    if owner is not None:
        return (f"torch.ops.{ns.name}.{op_name}: the build of ksbuild package '{package}' loaded in this process "
                f"({_build_text(owner)}) has no export '{op_name}' (its exports: {', '.join(owner.exports)}); the "
                "program was made with another build: load that one")
    return (f"torch.ops.{ns.name}.{op_name} is export '{op_name}' of ksbuild package '{package}', which is not loaded "
            f"in this process: import torch, then load the package before torch.export.load: `import {package}` "
            f"(its wheel), ksbuild.build(\"path/to/manifest.toml\"), or ksbuild.load(\"folder\") (a folder written by "
            "ksbuild.build(..., out=folder))")


def _key(package) -> str:
    """A package's content key (its ksbuild-hash), or one of its folder when it has none."""
    return package.key or hashlib.sha256(str(package.root.resolve()).encode()).hexdigest()[:20]


def _package(ops: PackageOps) -> str:
    return ops.package.desc["package"]


def _title(ops: PackageOps, name: str) -> str:
    """How messages name an export: its title (the dev loop's relu3.vjp) or package.export."""
    export = ops.package.exports.get(name)
    title = getattr(export, "title", name)
    return title if title != name else f"{_package(ops)}.{name}"


def _build_text(ops) -> str:
    """A build in messages: version, content key and folder."""
    desc = ops.package.desc
    return f"{desc['package']} {desc.get('version', '')}, content {ops.key[:12]}, at {ops.package.root}"


# ---- call checks -------------------------------------------------------------------------------------------------

def _tensor(x, a: dict, export) -> torch.Tensor:
    """A tensor argument of the export's dtype: a Python number becomes a 0-d tensor; other dtypes are an error."""
    want = TORCH_DTYPES.get(a["dtype"])
    if want is None:
        raise export.DtypeError(f"{export.name}: argument '{_shown(a)}' is {a['dtype']}, which torch has no dtype "
                                "for: pass a numpy array (of its bits, see docs/onnx.md)")
    if not isinstance(x, torch.Tensor):
        if isinstance(x, float) and a["dtype"] not in FLOATS or isinstance(x, int) and a["dtype"] == "bool":
            raise export.DtypeError(f"{export.name}: argument '{_shown(a)}' takes {a['dtype']}, got "
                                    f"{type(x).__name__} {x!r}")
        return torch.tensor(x, dtype=want)
    if x.dtype != want:
        raise export.DtypeError(f"{export.name}: argument '{_shown(a)}' is {x.dtype} but the export takes "
                                f"{a['dtype']} ({want}); ksbuild does not cast silently: convert it yourself or build "
                                "the package for that dtype")
    if x.dim() != len(a["shape"]):
        raise export.CallError(f"{export.name}: argument '{_shown(a)}' must have {len(a['shape'])} dimension(s), "
                               f"got shape {list(x.shape)}")
    return x


def _scalar_arg(t: torch.Tensor, a: dict):
    """A 0-d tensor as a scalar argument of the C call (16-bit floats as their bits)."""
    if a["dtype"] in ("f16", "bf16"):
        return t.view(torch.int16).item() & 0xFFFF
    return t.item()


def _no_forward_mode(name: str, tensors) -> None:
    """An error when forward-mode AD is on (torch.func.jvp, jacfwd, torch.autograd.forward_ad): the ops have no
    forward derivative in torch, whose dual tensors would otherwise lose their tangents silently."""
    if torch.autograd.forward_ad._current_level < 0:
        return
    if any(torch.autograd.forward_ad.unpack_dual(t).tangent is not None for t in tensors):
        message = (f"forward-mode AD (torch.func.jvp, jacfwd, forward_ad) through the ksbuild op '{name}' is not "
                   "supported: torch would drop the tangents")
        hint = ("call the kernel's own jvp export (kernel.jvp(x, dx), or jvp(...) in the manifest); reverse mode "
                "through .backward() and torch.autograd.grad works")
        try:
            from ..errors import KsbuildError
        except ImportError:  # in a wheel, without ksbuild
            raise RuntimeError(f"{message} ({hint})") from None
        raise KsbuildError(message, hint=hint)


def _plain_eager(tensors) -> bool:
    """True when the ctypes call can run directly: eager, plain CPU tensors, no tracing or functorch wrappers."""
    if torch.compiler.is_compiling():
        return False
    return all(type(t) is torch.Tensor and t.is_cpu and not _wrapped(t) for t in tensors)


def _plain_call(export, args) -> bool:
    """True for the common call, which `run` does as it is: eager, no forward-mode AD, plain CPU tensors of the
    export's dtypes and ranks, none needing a gradient (the full path checks, converts and explains the rest)."""
    if torch.autograd.forward_ad._current_level >= 0 or torch.compiler.is_compiling():
        return False
    grad = torch.is_grad_enabled()
    for t, a in zip(args, export.ins):
        if type(t) is not torch.Tensor or t.dtype is not TORCH_DTYPES.get(a["dtype"]) \
                or t.dim() != len(a["shape"]) or not t.is_cpu or (grad and t.requires_grad) or _wrapped(t):
            return False
    return True


_wrapped = getattr(torch._C._functorch, "is_functorch_wrapped_tensor", lambda t: False)  # (older torch lacks it)


def _device(tensors):
    return tensors[0].device if tensors else torch.device("cpu")


def _as_list(x) -> list:
    return list(x) if isinstance(x, (tuple, list)) else [x]


def _unpack(outs: list):
    return outs[0] if len(outs) == 1 else tuple(outs)


def _shown(a: dict) -> str:
    """An argument's name in messages: the parameter's name in the user's source when the C name differs."""
    return a.get("param", a["name"])

