"""ksbuild's torch ops by name: torch.ops.ksbuild_<package>.<export>, the same for every build, defined when a
package (a ksbuild.build, ksbuild.load, a wheel's import, a dev-loop kernel) is loaded; saved programs load in a
new process; the build loaded last runs them; autograd through vjp, fwd/bwd or grad exports, and an error at call
time when there is none. Oracles: torch's own autograd and gradcheck, the values of the process that saved."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile

import pytest
from conftest import ROOT, build_kernel_file
from test_wheel import gmm_manifest, gmm_wheel  # noqa: F401  (the session's GMM wheel, built once)

torch = pytest.importorskip("torch")

import ksbuild  # noqa: E402
from ksbuild.packaging import runtime, torch_ops  # noqa: E402

RELU3 = ROOT / "examples/relu3/manifest.toml"
LOSS = '''def loss(w: "float[n]", x: "float[n]") -> float:
    return (w * w * x).sum() + (w * x).sum()


def scaled(x: "float[n]", s: float) -> "float[n]":
    return x * s
'''
LOSS_MANIFEST = '''[package]
name = "reg_loss"
[build]
dtype = "float64"
[kernels.loss]
python = "k.py:loss"
[kernels.scaled]
python = "k.py:scaled"
[exports]
loss = "loss"
loss_grad = "grad(loss, argnums=0)"
scaled = "scaled"
scaled_vjp = "vjp(scaled, argnums=1)"
'''
LOAD_AND_RUN = """
import sys, torch
{load}
ep = torch.export.load(sys.argv[1])
for x, y in torch.load(sys.argv[2]):
    torch.testing.assert_close(ep.module()(x), y)
print("ok")
"""


class Net(torch.nn.Module):
    """A Linear layer, then vrelu3 of a package (flattened: the export maps one axis)."""

    def __init__(self, pkg):
        super().__init__()
        self.pkg, self.lin = pkg, torch.nn.Linear(3, 4)

    def forward(self, x):
        return self.pkg.vrelu3(self.lin(x).reshape(-1)).reshape(-1, 4)


@pytest.fixture(scope="module")
def loss_pkg(tmp_path_factory):
    return build_kernel_file(tmp_path_factory.mktemp("reg_loss"), LOSS, LOSS_MANIFEST, "reg_loss_k")[0]


def saved(model, tmp_path, *inputs) -> tuple:
    """(program, inputs and outputs) files of torch.export.save of model, with a dynamic batch."""
    batch = torch.export.Dim("batch")
    ep = torch.export.export(model, (inputs[0],), dynamic_shapes=({0: batch},))
    torch.export.save(ep, tmp_path / "program.pt2")
    with torch.no_grad():
        torch.save([(x, model(x)) for x in inputs], tmp_path / "io.pt")
    return tmp_path / "program.pt2", tmp_path / "io.pt"


def run_fresh(load: str, program, io, cwd, env=None):
    """Load and run a saved program in a new Python process after `load` (the documented import)."""
    return subprocess.run([sys.executable, "-c", LOAD_AND_RUN.format(load=load), str(program), str(io)],
                          capture_output=True, text=True, timeout=600, cwd=cwd, env=env)


def test_ops_are_named_by_package_and_export(relu3_pkg):
    ops = relu3_pkg.torch_ops()
    assert ops.namespace == "ksbuild_activations"
    assert ops.ops["vrelu3"] is torch.ops.ksbuild_activations.vrelu3.default
    assert str(ops.ops["vrelu3_vjp"]._schema) == "ksbuild_activations::vrelu3_vjp(Tensor x, Tensor ct) -> Tensor"
    build = torch_ops.build_of("ksbuild_activations")
    assert build == {"package": "activations", "version": "0.1.0", "key": relu3_pkg.key,
                     "root": str(relu3_pkg.root)}
    assert relu3_pkg.key[:12] in repr(torch.ops.ksbuild_activations)


def test_an_op_refuses_other_dtypes_and_ranks(relu3_pkg):
    """A program calling an op by name may come from another build (float64, say): the op refuses inputs of
    other dtypes or ranks, as a call of the export does, instead of reading their memory as its own."""
    op = torch.ops.ksbuild_activations.vrelu3
    with pytest.raises(runtime.DtypeError, match="is torch.float64 but the export takes f32"):
        op(torch.ones(3, dtype=torch.float64))
    with pytest.raises(runtime.CallError, match="must have 1 dimension"):
        op(torch.ones(2, 3))


def test_ops_pass_torch_opcheck(relu3_pkg, loss_pkg):
    """Schema, autograd registration, fake tensors and AOT dispatch, as torch.library.opcheck checks them."""
    x = torch.linspace(-2, 3, 7, requires_grad=True)
    torch.library.opcheck(relu3_pkg.torch_ops().ops["vrelu3"], (x,))
    torch.library.opcheck(relu3_pkg.torch_ops().ops["vrelu3_vjp"], (x.detach(), torch.ones(7)))
    w = torch.randn(5, dtype=torch.float64, requires_grad=True)
    torch.library.opcheck(loss_pkg.torch_ops().ops["loss"], (w, torch.randn(5, dtype=torch.float64)))


def test_saved_program_loads_in_a_fresh_process(relu3_pkg, tmp_path):
    """torch.export.save of a model calling a package's op, then torch.export.load and a run in new processes:
    after ksbuild.build (from the cache), after ksbuild.load of its folder, and not without either."""
    torch.manual_seed(0)
    program, io = saved(Net(relu3_pkg).eval(), tmp_path, torch.randn(5, 3), torch.randn(2, 3))
    for load in (f"import ksbuild; ksbuild.build({str(RELU3)!r})",
                 f"import ksbuild; ksbuild.load({str(relu3_pkg.root)!r})"):
        r = run_fresh(load, program, io, tmp_path)
        assert r.returncode == 0 and r.stdout.strip() == "ok", (load, r.stderr[-3000:])
    r = run_fresh("import ksbuild", program, io, tmp_path)
    assert r.returncode != 0 and "ksbuild_activations.vrelu3" in r.stderr


def test_saved_dev_loop_program_loads_after_creating_the_kernel(tmp_path):
    """The issue's case: in the new process, `import torch, ksbuild; ksbuild.vmap(relu3)` and no call: the lookup
    of the kernel's op builds (here: loads from the cache) the kernel's package."""
    spec = importlib.util.spec_from_file_location("relu3", ROOT / "examples/relu3/relu3.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), ksbuild.vmap(mod.relu3).nnModule()).eval()
    program, io = saved(model, tmp_path, torch.randn(5, 3), torch.randn(3, 3))
    load = (f"import ksbuild; sys.path.insert(0, {str(ROOT / 'examples/relu3')!r}); from relu3 import relu3; "
            "vrelu3 = ksbuild.vmap(relu3)")
    r = run_fresh(load, program, io, tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]


def test_load_of_a_folder_that_is_not_a_python_build(tmp_path):
    with pytest.raises(ksbuild.KsbuildError, match="not a folder that ksbuild.build"):
        ksbuild.load(tmp_path)


def write_kernel(root, body: str, params: str = 'x: "float[n]"', result: str = '"float[n]"',
                 package: str = "reg_rebuilt"):
    (root / "k.py").write_text(f'def f({params}) -> {result}:\n    return {body}\n')
    (root / "manifest.toml").write_text(f'[package]\nname = "{package}"\n[kernels.f]\npython = "k.py:f"\n'
                                        '[exports]\nf = "f"\nf_vjp = "vjp(f)"\n')
    return root / "manifest.toml"


def test_compiled_graphs_of_two_builds_are_not_shared(tmp_path, monkeypatch):
    """Two builds of one package whose op has one schema but other result shapes ([n], then a scalar: a 0-d
    tensor): torch.compile's caches of compiled graphs (by the ops a graph calls) must not give the second build the
    first one's graph. It did when a compiled graph called E.default; now a trace calls E.b<build key>."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    # config.patch, not monkeypatch.setattr: undoing a setattr on torch's config modules leaves the entry hidden
    # ("torch._functorch.config.enable_autograd_cache does not exist" in the next test of the process)
    with torch._inductor.config.patch(fx_graph_cache=True), torch._functorch.config.patch(enable_autograd_cache=True):
        _compile_two_builds(tmp_path)


def _compile_two_builds(tmp_path):
    x = torch.linspace(-1, 1, 5)
    p1 = ksbuild.build(write_kernel(tmp_path, "x * 2.0", package="reg_keyed"))
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(lambda v: p1.f(v), fullgraph=True)(x), 2 * x)
    p2 = ksbuild.build(write_kernel(tmp_path, "(x * 3.0).sum()", result="float", package="reg_keyed"))
    assert p2.key != p1.key
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(lambda v: p2.f(v), fullgraph=True)(x), (3 * x).sum())


def test_op_name_is_stable_across_rebuilds(tmp_path):
    """A rebuild after an edit keeps the op's name and takes it over: the op (and a program exported before the
    edit) runs the new code; the older build's package still calls its own code eagerly and says why its ops are
    gone elsewhere; a changed signature cannot redefine the op (eager only until restart); loading the first build
    again gives the ops back to it."""
    x = torch.linspace(-1, 1, 5)
    p1 = ksbuild.build(write_kernel(tmp_path, "x * 2.0"))
    op = torch.ops.ksbuild_reg_rebuilt.f.default
    program = torch.export.export(Scale(p1), (x,)).module()
    p2 = ksbuild.build(write_kernel(tmp_path, "x * 3.0"))
    assert p2.key != p1.key and p2.torch_ops().ops["f"] is op
    assert torch_ops.build_of("ksbuild_reg_rebuilt")["key"] == p2.key
    torch.testing.assert_close(op(x), 3 * x)
    torch.testing.assert_close(program(x), 3 * x)  # the saved program calls the op by its name
    torch.testing.assert_close(p1.f(x), 2 * x)  # the older package's own code, eagerly
    xg = x.clone().requires_grad_()
    p1.f(xg).sum().backward()
    torch.testing.assert_close(xg.grad, torch.full_like(x, 2.0))
    with pytest.raises(RuntimeError, match="now run another build of it, loaded later"):
        p1.torch_ops().invoke("f", [x], {})
    p3 = ksbuild.build(write_kernel(tmp_path, "x * y", 'x: "float[n]", y: "float[n]"'))
    torch.testing.assert_close(p3.f(x, x), x * x)
    with pytest.raises(RuntimeError, match="torch ops cannot be redefined.*until Python restarts"):
        p3.torch_ops().invoke("f", [x, x], {})
    with pytest.raises(RuntimeError, match="until Python restarts"):
        op(x)
    p1_again = ksbuild.build(write_kernel(tmp_path, "x * 2.0"))
    assert p1_again.key == p1.key
    torch.testing.assert_close(op(x), 2 * x)
    torch.testing.assert_close(p1.torch_ops().invoke("f", [x], {}), 2 * x)  # the same build: its ops again


class Scale(torch.nn.Module):
    def __init__(self, pkg):
        super().__init__()
        self.pkg = pkg

    def forward(self, x):
        return self.pkg.f(x)


def test_no_derivative_is_an_error_at_call_time(relu3_pkg):
    """vrelu3_vjp has no vjp(vjp(...)) in the package: calling it on a tensor that requires grad raises then,
    eagerly and through its op, naming the export and the manifest line to add; without grad it runs."""
    x, ct = torch.linspace(-2, 3, 7, requires_grad=True), torch.ones(7)
    want = 'vrelu3_vjp_vjp = "vjp(vjp(vmap(relu3)))"'
    with pytest.raises(RuntimeError, match="activations.vrelu3_vjp = vjp.*require grad \\('x'\\)") as e:
        relu3_pkg.vrelu3_vjp(x, ct)
    assert want in str(e.value) and "torch.no_grad()" in str(e.value)
    with pytest.raises(RuntimeError, match="require grad"):
        torch.ops.ksbuild_activations.vrelu3_vjp(x, ct)
    with torch.no_grad():
        got = relu3_pkg.vrelu3_vjp(x, ct)
    torch.testing.assert_close(relu3_pkg.vrelu3_vjp(x.detach(), ct), got)
    assert not got.requires_grad


def test_grad_export_gives_a_scalar_loss_its_backward(loss_pkg):
    """A package with only grad(loss, argnums=0): loss.backward() runs it (times the loss's cotangent), gradcheck
    passes, through the op too; x, which it does not cover, may not require grad (an error at call time)."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(6, dtype=torch.float64, generator=g, requires_grad=True)
    x = torch.randn(6, dtype=torch.float64, generator=g)
    loss_pkg.loss(w, x).backward()
    wr = w.detach().clone().requires_grad_()
    ((wr * wr * x).sum() + (wr * x).sum()).backward()
    torch.testing.assert_close(w.grad, wr.grad)
    assert torch.autograd.gradcheck(lambda v: loss_pkg.loss(v, x), (w,))
    assert torch.autograd.gradcheck(lambda v: torch.ops.ksbuild_reg_loss.loss(v, x), (w,))
    with pytest.raises(RuntimeError, match="require grad \\('w', 'x'\\)") as e:
        loss_pkg.loss(w, x.clone().requires_grad_())
    assert "loss_grad = grad(loss, argnums=0) covers 'w' only" in str(e.value)


def test_vjp_with_argnums_covers_its_arguments(loss_pkg):
    """vjp(scaled, argnums=1) gives the gradient of s only: s may require grad, x may not."""
    x = torch.linspace(-1, 1, 4, dtype=torch.float64)
    s = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v: loss_pkg.scaled(x, v), (s,))
    with pytest.raises(RuntimeError, match="scaled = scaled was called on inputs that require grad \\('x', 's'\\)") \
            as e:
        loss_pkg.scaled(x.clone().requires_grad_(), s)
    assert "scaled_vjp = vjp(scaled, argnums=1) covers 's' only" in str(e.value)
    assert 'scaled_vjp_all = "vjp(scaled)"' in str(e.value)


def test_a_wheel_copy_of_the_ops_module_shares_the_ops(loss_pkg):
    """ksbuild's torch_ops.py and a wheel's copy of it in one process: the second binds the same ops (one
    definition per name, no 'already defined' error) and either copy's package calls them."""
    spec = importlib.util.spec_from_file_location("torch_ops_copy", torch_ops.__file__)
    copy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copy)
    twin = copy.package_ops(runtime.load(loss_pkg.root))
    assert twin is not loss_pkg.torch_ops() and twin.ops["loss"] is loss_pkg.torch_ops().ops["loss"]
    w, x = torch.randn(4, dtype=torch.float64, requires_grad=True), torch.randn(4, dtype=torch.float64)
    (g,) = torch.autograd.grad(twin.invoke("loss", [w, x], {}), w)
    torch.testing.assert_close(g, 2 * w.detach() * x + x)
    torch.testing.assert_close(loss_pkg.torch_ops().invoke("loss", [w.detach(), x], {}), loss_pkg.loss(w.detach(), x))


def test_namespace_names_a_missing_export(loss_pkg):
    with pytest.raises(torch_ops.OpNotLoadedError, match="reg_loss 0.1.0.*has no export 'nothere'"):
        torch.ops.ksbuild_reg_loss.nothere  # noqa: B018


WHEEL_SCRIPT = """
import importlib.util, sys, torch
sys.path.insert(0, sys.argv[1])
import gmm
spec = importlib.util.spec_from_file_location("ref", sys.argv[2])
ref = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ref)
data = ref.make_data(d=3, K=4, n=10, seed=3)
a, mu, icf, x = ref.torch_inputs(data, requires_grad=True)
gmm.gmm(a, mu, icf, x, 1.0, 0.0).backward()
ins = ref.torch_inputs(data, requires_grad=True)
want = ref.gmm_objective_torch(*ins, 1.0, 0.0)
want.backward()
torch.testing.assert_close(gmm.gmm(*ins, 1.0, 0.0), want.detach())
for got, w in zip((a, mu, icf), ins[:3]):
    torch.testing.assert_close(got.grad, w.grad)
assert torch.autograd.gradcheck(lambda a, mu, icf: gmm.gmm(a, mu, icf, x, 1.0, 0.0), (a, mu, icf))
try:
    gmm.gmm_grad(a, mu, icf, x, 1.0, 0.0)
    print("no error")
except RuntimeError as e:
    print("error:", e)


class Loss(torch.nn.Module):
    def forward(self, a, mu, icf, x):
        return gmm.gmm(a, mu, icf, x, 1.0, 0.0) * 2


args = tuple(t.detach() for t in (a, mu, icf, x))
torch.export.save(torch.export.export(Loss(), args), sys.argv[3])
torch.save([(args, Loss()(*args))], sys.argv[4])
print("modules:", sorted(m for m in sys.modules if m.startswith("ksbuild")))
"""
WHEEL_LOAD = """
import sys, torch
sys.path.insert(0, sys.argv[1])
import gmm
ep = torch.export.load(sys.argv[2])
for args, y in torch.load(sys.argv[3]):
    torch.testing.assert_close(ep.module()(*args), y)
print("ok")
"""


def test_wheel_ops_autograd_and_saved_programs(gmm_wheel, tmp_path):  # noqa: F811
    """The GMM wheel (grad exports only) imported after torch, without ksbuild: its loss backpropagates through
    gmm_grad (torch's autograd of the torch reference agrees, gradcheck passes), gmm_grad itself has no derivative
    and says so at call time, and a saved program calling its op loads in a new process after `import gmm`."""
    site = tmp_path / "site"
    with zipfile.ZipFile(gmm_wheel) as z:
        z.extractall(site)
    env = {"PATH": "/usr/bin:/bin"}  # (not ksbuild's folder: the wheel alone)
    program, io = tmp_path / "gmm.pt2", tmp_path / "io.pt"
    r = subprocess.run([sys.executable, "-I", "-c", WHEEL_SCRIPT, str(site), str(ROOT / "examples/gmm/reference.py"),
                        str(program), str(io)], capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().endswith("modules: []")  # the wheel alone, no ksbuild
    assert "error: ksbuild: gmm.gmm_grad = grad(gmm, argnums=(0, 1, 2)) was called on inputs that require grad" \
        in r.stdout, r.stdout
    r = subprocess.run([sys.executable, "-I", "-c", WHEEL_LOAD, str(site), str(program), str(io)],
                       capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]
