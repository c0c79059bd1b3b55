"""Held-out models of other kinds than the CNN benchmarks (twenty-fourth session): a small U-Net (ConvTranspose2d,
bilinear upsampling, skip concatenations), a TCN (dilated causal Conv1d, GELU, LayerNorm), GraphSAGE (index_add over
an edge list; torch.onnx cannot export index_add with repeated indices, so torch.export only), a top-2 mixture of
experts (topk, scatter, einsum), PointNet (1 x 1 Conv1d, max over points) and a spatial transformer (affine_grid,
grid_sample; ONNX opset 20). Each is built through ONNX and through torch.export with its vjp, and checked against
torch, onnxruntime and torch.autograd; then timed against onnxruntime and torch eager (1 thread, CPU time, medians):

    PYTHONPATH=. python benchmarks/models/heldout_ops.py [NAME ...]

Run against a change as the CNNs of heldout.py are; not part of bench.py's table.
"""
import torch
import torch.nn.functional as F
from torch import nn


class UNet(nn.Module):
    def __init__(self, c=8):
        super().__init__()
        def block(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(),
                                 nn.Conv2d(o, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU())
        self.e1, self.e2, self.e3 = block(3, c), block(c, 2 * c), block(2 * c, 4 * c)
        self.up2 = nn.ConvTranspose2d(4 * c, 2 * c, 2, stride=2)
        self.d2 = block(4 * c, 2 * c)
        self.up1 = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.d1 = block(3 * c, c)
        self.out = nn.Conv2d(c, 2, 1)

    def forward(self, x):
        a = self.e1(x)
        b = self.e2(F.max_pool2d(a, 2))
        c = self.e3(F.max_pool2d(b, 2))
        d = self.d2(torch.cat([self.up2(c), b], 1))
        e = self.d1(torch.cat([self.up1(d), a], 1))
        return torch.sigmoid(self.out(e))


class TCN(nn.Module):
    def __init__(self, c=16, k=3, levels=4):
        super().__init__()
        self.convs = nn.ModuleList()
        self.k = k
        for i in range(levels):
            self.convs.append(nn.Conv1d(c, c, k, dilation=2 ** i))
        self.norm = nn.LayerNorm(c)
        self.head = nn.Linear(c, 4)

    def forward(self, x):  # [n, c, t]
        for i, conv in enumerate(self.convs):
            pad = (self.k - 1) * 2 ** i
            x = x + F.gelu(conv(F.pad(x, (pad, 0))))
        h = self.norm(x.transpose(1, 2))
        return self.head(h[:, -1])


class SAGE(nn.Module):
    """GraphSAGE mean aggregation with index_add over an edge list (src, dst are inputs)."""
    def __init__(self, d=16, h=32, nodes=50):
        super().__init__()
        self.l1, self.r1 = nn.Linear(d, h), nn.Linear(d, h, bias=False)
        self.l2, self.r2 = nn.Linear(h, 8), nn.Linear(h, 8, bias=False)
        self.nodes = nodes

    def agg(self, x, src, dst):
        s = torch.zeros(self.nodes, x.shape[1], dtype=x.dtype).index_add(0, dst, x[src])
        deg = torch.zeros(self.nodes, dtype=x.dtype).index_add(0, dst, torch.ones_like(dst, dtype=x.dtype))
        return s / deg.clamp(min=1.0).unsqueeze(1)

    def forward(self, x, src, dst):
        h = F.relu(self.l1(self.agg(x, src, dst)) + self.r1(x))
        return F.log_softmax(self.l2(self.agg(h, src, dst)) + self.r2(h), dim=1)


class MoE(nn.Module):
    def __init__(self, d=32, e=4, h=64):
        super().__init__()
        self.gate = nn.Linear(d, e)
        self.w1 = nn.Parameter(torch.randn(e, d, h) * 0.1)
        self.w2 = nn.Parameter(torch.randn(e, h, d) * 0.1)

    def forward(self, x):  # [t, d]
        logits = self.gate(x)
        top, idx = torch.topk(logits, 2, dim=-1)
        wts = torch.softmax(top, dim=-1)
        mask = torch.zeros_like(logits).scatter(1, idx, wts)  # [t, e]
        hid = F.silu(torch.einsum("td,edh->teh", x, self.w1))
        out = torch.einsum("teh,ehd->ted", hid, self.w2)
        return x + (mask.unsqueeze(-1) * out).sum(1)


class PointNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.f = nn.Sequential(nn.Conv1d(3, 32, 1), nn.BatchNorm1d(32), nn.ReLU(), nn.Conv1d(32, 64, 1), nn.ReLU())
        self.head = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 5))

    def forward(self, p):  # [n, 3, points]
        return self.head(self.f(p).amax(dim=2))


class STN(nn.Module):
    def __init__(self):
        super().__init__()
        self.loc = nn.Sequential(nn.Conv2d(1, 8, 5), nn.MaxPool2d(2), nn.ReLU(), nn.Flatten(),
                                 nn.Linear(8 * 12 * 12, 6))
        with torch.no_grad():
            self.loc[-1].weight.mul_(0.01)
            self.loc[-1].bias.copy_(torch.tensor([1.0, 0, 0, 0, 1, 0]))

    def forward(self, x):  # [n, 1, 28, 28]
        theta = self.loc(x).view(-1, 2, 3)
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        return F.grid_sample(x, grid, align_corners=False)


def _stats(m):
    for mod in m.modules():
        if isinstance(mod, (nn.BatchNorm2d, nn.BatchNorm1d)):
            mod.running_mean.uniform_(-0.1, 0.1)
            mod.running_var.uniform_(0.5, 1.5)
    return m.eval()


def _edges(nodes=50, edges=200):
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, nodes, (edges,), generator=g), torch.randint(0, nodes, (edges,), generator=g)


def make(name):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(2)
    if name == "unet":
        return _stats(UNet()), (torch.randn(2, 3, 32, 32, generator=g),)
    if name == "tcn":
        return _stats(TCN()), (torch.randn(2, 16, 100, generator=g),)
    if name == "sage":
        return SAGE().eval(), (torch.randn(50, 16, generator=g), *_edges())
    if name == "moe":
        return MoE().eval(), (torch.randn(12, 32, generator=g),)
    if name == "pointnet":
        return _stats(PointNet()), (torch.randn(2, 3, 128, generator=g),)
    if name == "stn":
        return STN().eval(), (torch.randn(2, 1, 28, 28, generator=g),)
    raise KeyError(name)


NAMES = ["unet", "tcn", "sage", "moe", "pointnet", "stn"]
for _n in NAMES:
    globals()[f"make_{_n}"] = (lambda n: lambda: make(n))(_n)


def _rel(a, b) -> float:
    import numpy as np
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def _median_cpu(fn, rounds: int = 5, calls: int = 30) -> float:
    import statistics
    import time
    fn()
    medians = []
    for _ in range(rounds):
        times = []
        for _ in range(calls):
            start = time.process_time()
            fn()
            times.append(time.process_time() - start)
        medians.append(statistics.median(times))
    return statistics.median(medians)


def check(name: str, folder) -> str:
    """Build `name` from ONNX and through torch.export (with its vjp) in folder; one line of errors and times."""
    import numpy as np
    import onnxruntime as ort

    import ksbuild
    m, args = make(name)
    with torch.no_grad():
        want = m(*args).numpy()
    xs = [a.numpy() for a in args]
    folder.mkdir(parents=True, exist_ok=True)
    onnx_path = folder / f"{name}.onnx"
    if name != "sage":
        torch.onnx.export(m, args, str(onnx_path), dynamo=False, input_names=[f"in{i}" for i in range(len(args))],
                          output_names=["y"], opset_version=20 if name == "stn" else 17)
    line = [name]
    floats = [i for i, a in enumerate(args) if a.is_floating_point()]
    leaves = [a.clone().requires_grad_(a.is_floating_point()) for a in args]
    out = m(*leaves)
    ct = np.random.default_rng(0).standard_normal(out.shape).astype(np.float32)
    autograd = torch.autograd.grad(out, [leaves[i] for i in floats], torch.from_numpy(ct))
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    for kind, source in (("onnx", f'onnx = "{onnx_path.name}"'), ("torch", f'torch = "{__file__}:make_{name}"')):
        if kind == "onnx" and name == "sage":
            continue
        manifest = folder / f"{kind}.toml"
        manifest.write_text(f'[package]\nname = "heldout_{name}_{kind}"\n\n[kernels.k]\n{source}\n\n'
                            '[exports]\nf = "k"\nf_vjp = "vjp(k)"\n')
        pkg = ksbuild.build(manifest, quiet=True)
        grads = pkg.f_vjp(*xs, ct)
        grads = grads if isinstance(grads, tuple) else (grads,)
        line.append(f"{kind}: {_rel(pkg.f(*xs), want):.1e} of torch, vjp "
                    f"{max(_rel(g, t.numpy()) for g, t in zip(grads, autograd)):.1e} of autograd")
        if kind == "onnx":
            session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
            feed = {i.name: x for i, x in zip(session.get_inputs(), xs)}
            line.append(f"{_rel(pkg.f(*xs), session.run(None, feed)[0]):.1e} of onnxruntime")
            ksb, rt = _median_cpu(lambda: pkg.f(*xs)), _median_cpu(lambda: session.run(None, feed))
            with torch.no_grad():
                eager = _median_cpu(lambda: m(*args))
            line.append(f"{ksb * 1e3:.3f} ms, onnxruntime {rt * 1e3:.3f}, torch {eager * 1e3:.3f}: "
                        f"ksbuild / onnxruntime {ksb / rt:.2f}")
    return "; ".join(line)


if __name__ == "__main__":
    import sys
    import tempfile
    from pathlib import Path
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        for n in sys.argv[1:] or NAMES:
            print(check(n, Path(tmp) / n), flush=True)
