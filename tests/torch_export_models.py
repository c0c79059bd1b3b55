"""Models for tests/test_torch_export.py: each `make_*` returns (module, example inputs, dynamic
shapes) as a `torch =` kernel's make() does. Weights are random (fixed seeds); batch norm running
statistics are set away from their defaults so that they matter."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.export import Dim

BATCH = Dim("batch")


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 16), nn.Tanh(),
                                 nn.Linear(16, 4), nn.LogSoftmax(dim=1))

    def forward(self, x):
        return self.net(x)


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(2, 4, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 6, 3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(6)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(6 * 2 * 2, 5)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = self.pool(torch.relu(self.bn2(self.conv2(x))))
        return self.fc(torch.flatten(x, 1))


class GRUHead(nn.Module):
    """A batch-first GRU, then a linear head on the last step; returns the head and the final state."""

    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(3, 5, batch_first=True)
        self.head = nn.Linear(5, 2)

    def forward(self, x):
        y, h = self.gru(x)
        return self.head(y[:, -1]), h


class LSTM2(nn.Module):
    """Two stacked bidirectional LSTM layers (batch second, torch's default layout)."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(3, 4, num_layers=2, bidirectional=True)

    def forward(self, x):
        y, (h, c) = self.lstm(x)
        return y, h, c


class Block(nn.Module):
    """A transformer-style feed-forward block: LayerNorm, Linear, GELU, Linear, residual, mean pool."""

    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.up = nn.Linear(8, 16)
        self.down = nn.Linear(16, 8)

    def forward(self, x):
        h = self.down(nn.functional.gelu(self.up(self.norm(x))))
        return (x + h).mean(dim=1)


class Unsupported(nn.Module):
    def forward(self, x):
        return torch.cummax(x, dim=1).values * 2


class Indices(nn.Module):
    def forward(self, x):
        return nn.functional.max_pool2d(x, 2, return_indices=True)[1].float()


def _seeded(cls):
    torch.manual_seed(0)
    m = cls()
    for mod in m.modules():
        if isinstance(mod, (nn.BatchNorm1d, nn.BatchNorm2d)):
            with torch.no_grad():
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 2.0)
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.5, 0.5)
    return m


def make_mlp():
    return _seeded(MLP), (torch.randn(3, 6),), ({0: BATCH},)


def make_cnn():
    return _seeded(SmallCNN), (torch.randn(3, 2, 8, 8),), ({0: BATCH},)


def make_gru():
    return _seeded(GRUHead), (torch.randn(3, 4, 3),), ({0: BATCH},)


def make_lstm():
    return _seeded(LSTM2), (torch.randn(5, 3, 3),), ({1: BATCH},)


def make_block():
    return _seeded(Block), (torch.randn(3, 4, 8),), {"x": {0: BATCH}}


def make_unsupported():
    return Unsupported(), (torch.randn(2, 5),)


def make_indices():
    return Indices(), (torch.randn(1, 1, 4, 4),)


class ShapeBug(nn.Module):
    def forward(self, x):
        return x @ x  # [2, 3] @ [2, 3]: a shape error in the user's forward


def make_shape_bug():
    return ShapeBug(), (torch.randn(2, 3),)


def make_raises():
    raise ValueError("no weights here")


def make_not_a_module():
    return torch.randn(2), (torch.randn(2),)


MODELS = {"mlp": make_mlp, "cnn": make_cnn, "gru": make_gru, "lstm": make_lstm, "block": make_block}


# ---- a wider zoo, checked through the reference interpreter (no C++ build) -------------------------------

class Activations(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(5, 6)
        self.acts = nn.ModuleList([nn.LeakyReLU(0.1), nn.ELU(), nn.SiLU(), nn.GELU("tanh"), nn.Hardtanh(-0.5, 0.5),
                                   nn.Softplus(), nn.Sigmoid(), nn.Mish(), nn.Hardswish(), nn.ReLU6(), nn.Softsign(),
                                   nn.SELU(), nn.CELU(0.7), nn.Hardsigmoid(), nn.Tanhshrink(), nn.LogSigmoid(),
                                   nn.PReLU()])

    def forward(self, x):
        h = self.lin(x)
        return torch.stack([a(h) for a in self.acts], 1).sum(1), F.softmax(h, -1), F.normalize(h, dim=1)


class Conv1d(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(2, 4, 3, groups=2, dilation=2)
        self.norm = nn.GroupNorm(2, 4)
        self.pool = nn.MaxPool1d(2, ceil_mode=True)
        self.avg = nn.AvgPool1d(2)
        self.up = nn.ConvTranspose1d(4, 3, 3, stride=2, padding=1, output_padding=1)
        self.adapt = nn.AdaptiveAvgPool1d(3)
        self.bn = nn.BatchNorm1d(3)

    def forward(self, x):
        return self.bn(self.adapt(self.up(self.avg(self.pool(self.norm(self.conv(x)))))))


class Conv2d(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, (3, 2), stride=(2, 1), padding=(1, 0))
        self.inorm = nn.InstanceNorm2d(4, affine=True)
        self.pool = nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)
        self.adapt = nn.AdaptiveAvgPool2d((2, 3))
        self.gmax = nn.AdaptiveMaxPool2d(1)

    def forward(self, x):
        h = self.pool(self.inorm(self.conv(x)))
        return self.adapt(h), self.gmax(h).flatten(1), F.interpolate(h, scale_factor=2)


class Resize(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1)
        self.shuffle = nn.PixelShuffle(2)
        self.conv3 = nn.Conv3d(1, 2, (1, 2, 2))

    def forward(self, x):
        return (F.interpolate(x, scale_factor=2, mode="bilinear"),
                F.interpolate(x, size=(7, 5), mode="bicubic", align_corners=True),
                F.interpolate(x, size=(9, 4), mode="nearest-exact"), self.up(x),
                self.shuffle(torch.cat([x, x], 1)), self.conv3(x[:, :1].unsqueeze(1)),
                F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=True),  # 5 x 4 -> 7 x 6
                F.interpolate(x, size=(1, 3), mode="bilinear"))  # one output row: torch samples the middle


class Recurrent(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(11, 4)
        self.rnn = nn.RNN(4, 3, num_layers=2, nonlinearity="relu", batch_first=True)
        self.birnn = nn.RNN(3, 3, bidirectional=True)
        self.lstm = nn.LSTM(6, 2, batch_first=True)

    def forward(self, tokens):
        y, h = self.rnn(self.embed(tokens))
        y2, _ = self.birnn(y.transpose(0, 1))
        y3, (a, b) = self.lstm(y2.transpose(0, 1))
        return y3, h, a + b


class Tensors(nn.Module):
    """Tensor plumbing: cat/chunk, where, reductions, padding, flips, slicing, indexing, matmul."""

    def __init__(self):
        super().__init__()
        self.register_buffer("rows", torch.tensor([[0, 2], [1, 1]]))
        self.register_buffer("cols", torch.tensor([3, 0]))

    def forward(self, x, y):
        a = torch.cat([x, y * 2], dim=1)
        b, c = a.chunk(2, dim=1)
        d = torch.where(b > 0, b, c) ** 2 + x.pow(3) / (1 + y.abs())
        e = d.var(1, keepdim=True) + d.std(0).mean() + d.amax(1, keepdim=True) - d.min(1).values[:, None]
        f = F.pad(d, (1, 2))[:, 1:-2] + d.flip(1) + d.cumsum(1) + d.clamp(-1, 1) + torch.exp(-d) + d.log1p()
        g = f @ f.T
        sq = x[:, None, :].expand(-1, 3, -1)
        picked = sq[:, self.rows, self.cols] + sq[:, -1, None, :2] + sq.gather(2, self.rows[None].expand(
            x.shape[0], 2, 2).clone())
        return (e, f[:, ::2], g.logsumexp(1), x.argmax(1), d.sum((0, 1)), torch.maximum(x, y) - torch.minimum(x, y),
                x.transpose(0, 1).reshape(-1), picked, sq.topk(2, dim=2).values)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        self.q = nn.Linear(8, 8)

    def forward(self, x):
        q = self.q(x).view(x.shape[0], 5, 2, 4).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, q, q, is_causal=True)
        return self.enc(x), torch.einsum("bhqd,bhkd->bhqk", o, q).softmax(-1)


class Strided(nn.Module):
    """as_strided in the decomposed graph: Swin's pooler (a 1-d adaptive average pool of a transposed sequence
    writes one, around its unit axes) and overlapping windows of a computed value taken by hand."""

    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(6)
        self.pool = nn.AdaptiveAvgPool1d(1)

    def forward(self, x):
        h = self.norm(x)
        windows = torch.as_strided(h.sum(0) * 1.0, (3, 4), (5, 2), 1)
        return torch.flatten(self.pool(h.transpose(1, 2)), 1), windows


class Scatters(nn.Module):
    """scatter (src, value), scatter_reduce (sum, amax) and scatter_add with a src larger than the index (only its
    leading block is read; its `detach` must stop the gradient: vjp checks it), the indices computed from x: top-k
    positions as a mixture of experts routes tokens."""

    def forward(self, x):
        top, idx = torch.topk(x, 2, dim=1)
        routed = torch.zeros_like(x).scatter(1, idx, torch.softmax(top, 1))
        marked = x.scatter(1, idx[:, :1], -1.5)
        bins = (x.abs() * 3).long() % 4
        sums = torch.zeros(x.shape[0], 4).scatter_reduce(1, bins, x * x, "sum")
        peaks = torch.full((x.shape[0], 4), -2.0).scatter_reduce(1, bins, x, "amax")
        added = torch.ones(x.shape[0], 6).scatter_add(1, idx, torch.cat([x, x], 1).detach()) * x
        return routed, marked, sums, peaks, added


class Sampling(nn.Module):
    """A spatial transformer's sampling: affine_grid of a theta computed from x, then grid_sample with each
    interpolation and padding mode (bicubic with border padding clamps each tap, not the point)."""

    def __init__(self):
        super().__init__()
        self.loc = nn.Linear(2, 6)

    def forward(self, x):
        theta = torch.tanh(self.loc(x.mean((2, 3)))).view(-1, 2, 3) * 1.2
        grid = nn.functional.affine_grid(theta, [x.shape[0], 2, 5, 6], align_corners=False)
        sample = nn.functional.grid_sample
        return (sample(x, grid, align_corners=False), sample(x, grid, "nearest", "border", align_corners=False),
                sample(x, grid, "bicubic", "border", align_corners=True), sample(x, grid, "bicubic", "reflection",
                                                                                 align_corners=False),
                sample(x, grid, "bilinear", "reflection", align_corners=True))


class Stopped(nn.Module):
    """Values torch's autograd does not differentiate through: a teacher layer under torch.no_grad() (a no_grad
    nested in it), a set_grad_enabled(False) span, a detach, and an enable_grad inside a no_grad (differentiated)."""

    def __init__(self):
        super().__init__()
        self.teacher, self.student = nn.Linear(5, 4), nn.Linear(5, 4)

    def forward(self, x):
        with torch.no_grad():
            target = torch.softmax(self.teacher(x), -1)
            with torch.no_grad():
                target = target * 2
            with torch.enable_grad():
                kept = x.sum(-1, keepdim=True)
        torch.set_grad_enabled(False)
        scale = x.abs().mean()
        torch.set_grad_enabled(True)
        loss = ((torch.log_softmax(self.student(x), -1) - target) ** 2).sum(-1, keepdim=True)
        return loss * scale + kept * x.detach().amax(-1, keepdim=True)


def make_activations():
    return _seeded(Activations), (torch.randn(3, 5),), ({0: BATCH},)


def make_conv1d():
    return _seeded(Conv1d), (torch.randn(3, 2, 21),), ({0: BATCH},)


def make_conv2d():
    return _seeded(Conv2d), (torch.randn(3, 3, 11, 9),), ({0: BATCH},)


def make_resize():
    return _seeded(Resize), (torch.randn(3, 2, 5, 4),), ({0: BATCH},)


def make_recurrent():
    return _seeded(Recurrent), (torch.randint(0, 11, (3, 5)),), ({0: BATCH},)


def make_tensors():
    g = torch.Generator().manual_seed(0)
    return Tensors(), (torch.rand(3, 4, generator=g) + 0.1, torch.rand(3, 4, generator=g) + 0.1), ({0: BATCH},
                                                                                                 {0: BATCH})


def make_attention():
    return _seeded(Attention), (torch.randn(3, 5, 8),), ({0: BATCH},)


def make_strided():
    return _seeded(Strided), (torch.randn(3, 4, 6),), ({0: BATCH},)


def make_scatters():
    return _seeded(Scatters), (torch.randn(3, 6),), ({0: BATCH},)


def make_sampling():
    return _seeded(Sampling), (torch.randn(3, 2, 7, 9),), ({0: BATCH},)


def make_stopped():
    return _seeded(Stopped), (torch.randn(3, 5),), ({0: BATCH},)


ZOO = {"scatters": make_scatters, "sampling": make_sampling, "stopped": make_stopped,
       "activations": make_activations, "conv1d": make_conv1d, "conv2d": make_conv2d, "resize": make_resize,
       "recurrent": make_recurrent, "tensors": make_tensors, "attention": make_attention, "strided": make_strided}
