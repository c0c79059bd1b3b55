"""Held-out networks for benchmarks/README.md's checks (torchvision cannot be installed beside the venv's torch): the
layouts of torchvision's resnext50_32x4d, googlenet, squeezenet1_1, mobilenet_v3_large and resnet34 written out
here (and MnasNet-B1 after its paper; wide_resnet_like, a wide residual network on resnet34's code), random
weights, eval mode, the batch norms' running statistics drawn at random. Not part of bench.py's table: run by hand
against a change (benchmarks/models/compare.py builds two ksbuild versions of them and times both in turn with
onnxruntime).
"""
from __future__ import annotations


def _random_statistics(m):
    import torch
    for mod in m.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.1, 0.1)
            mod.running_var.uniform_(0.5, 1.5)
    return m.eval()


def resnext50_32x4d(counts=(3, 4, 6, 3)):
    """torchvision's ResNeXt-50 32x4d: bottlenecks of [3, 4, 6, 3] blocks, 3 × 3 convolutions of 32 groups (128 to
    1024 channels), stride 2 in the grouped convolution of each stage's first block."""
    import torch
    from torch import nn

    class Bottleneck(nn.Module):
        def __init__(self, cin, planes, stride):
            super().__init__()
            width, cout = planes * 2, planes * 4
            self.c1, self.b1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
            self.c2, self.b2 = nn.Conv2d(width, width, 3, stride, 1, groups=32, bias=False), nn.BatchNorm2d(width)
            self.c3, self.b3 = nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = torch.relu(self.b1(self.c1(x)))
            y = torch.relu(self.b2(self.c2(y)))
            y = self.b3(self.c3(y))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    class ResNeXt(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                      nn.MaxPool2d(3, 2, 1))
            blocks, cin = [], 64
            for planes, count, stride in zip((64, 128, 256, 512), counts, (1, 2, 2, 2)):
                for i in range(count):
                    blocks.append(Bottleneck(cin, planes, stride if i == 0 else 1))
                    cin = planes * 4
            self.blocks = nn.Sequential(*blocks)
            self.fc = nn.Linear(2048, 1000)

        def forward(self, x):
            x = self.blocks(self.stem(x))
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

    torch.manual_seed(0)
    return _random_statistics(ResNeXt())


def googlenet():
    """torchvision's GoogLeNet (no auxiliary classifiers, no input transform): convolutions with batch norm (eps
    0.001), inception blocks of four branches (1 × 1; 1 × 1 then 3 × 3; 1 × 1 then 3 × 3, as torchvision has it; 3 × 3
    max pooling then 1 × 1) concatenated, max pooling with ceil_mode."""
    import torch
    from torch import nn

    def conv(cin, cout, k, stride=1, pad=0):
        return nn.Sequential(nn.Conv2d(cin, cout, k, stride, pad, bias=False), nn.BatchNorm2d(cout, eps=0.001),
                             nn.ReLU())

    class Inception(nn.Module):
        def __init__(self, cin, c1, c3r, c3, c5r, c5, pool):
            super().__init__()
            self.b1 = conv(cin, c1, 1)
            self.b2 = nn.Sequential(conv(cin, c3r, 1), conv(c3r, c3, 3, 1, 1))
            self.b3 = nn.Sequential(conv(cin, c5r, 1), conv(c5r, c5, 3, 1, 1))
            self.b4 = nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=True), conv(cin, pool, 1))

        def forward(self, x):
            return torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], 1)

    class GoogLeNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(conv(3, 64, 7, 2, 3), nn.MaxPool2d(3, 2, ceil_mode=True), conv(64, 64, 1),
                                      conv(64, 192, 3, 1, 1), nn.MaxPool2d(3, 2, ceil_mode=True))
            self.body = nn.Sequential(
                Inception(192, 64, 96, 128, 16, 32, 32), Inception(256, 128, 128, 192, 32, 96, 64),
                nn.MaxPool2d(3, 2, ceil_mode=True),
                Inception(480, 192, 96, 208, 16, 48, 64), Inception(512, 160, 112, 224, 24, 64, 64),
                Inception(512, 128, 128, 256, 24, 64, 64), Inception(512, 112, 144, 288, 32, 64, 64),
                Inception(528, 256, 160, 320, 32, 128, 128), nn.MaxPool2d(2, 2, ceil_mode=True),
                Inception(832, 256, 160, 320, 32, 128, 128), Inception(832, 384, 192, 384, 48, 128, 128))
            self.fc = nn.Linear(1024, 1000)

        def forward(self, x):
            x = self.body(self.stem(x))
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

    torch.manual_seed(0)
    return _random_statistics(GoogLeNet())


def squeezenet1_1():
    """torchvision's SqueezeNet 1.1: a 3 × 3 stride-2 stem, fire modules (a 1 × 1 squeeze, then 1 × 1 and 3 × 3
    expands concatenated), max pooling with ceil_mode, a 1 × 1 classifier convolution and global average pooling."""
    import torch
    from torch import nn

    class Fire(nn.Module):
        def __init__(self, cin, squeeze, e1, e3):
            super().__init__()
            self.s = nn.Conv2d(cin, squeeze, 1)
            self.e1, self.e3 = nn.Conv2d(squeeze, e1, 1), nn.Conv2d(squeeze, e3, 3, padding=1)

        def forward(self, x):
            x = torch.relu(self.s(x))
            return torch.cat([torch.relu(self.e1(x)), torch.relu(self.e3(x))], 1)

    class SqueezeNet(nn.Module):
        def __init__(self):
            super().__init__()
            pool = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)  # noqa: E731
            self.features = nn.Sequential(
                nn.Conv2d(3, 64, 3, 2), nn.ReLU(), pool(), Fire(64, 16, 64, 64), Fire(128, 16, 64, 64), pool(),
                Fire(128, 32, 128, 128), Fire(256, 32, 128, 128), pool(), Fire(256, 48, 192, 192),
                Fire(384, 48, 192, 192), Fire(384, 64, 256, 256), Fire(512, 64, 256, 256))
            self.classifier = nn.Conv2d(512, 1000, 1)

        def forward(self, x):
            x = torch.relu(self.classifier(self.features(x)))
            return torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1)

    torch.manual_seed(0)
    return _random_statistics(SqueezeNet())


def resnext_like():
    """ResNeXt-50 32x4d's layout with one block per stage (a third of its weights: quicker to build for a check)."""
    return resnext50_32x4d((1, 1, 1, 1))


def resnet34(counts=(3, 4, 6, 3), widths=(64, 128, 256, 512)):
    """torchvision's ResNet-34: ResNet-18's layout (benchmarks/onnx/resnet.py) with [3, 4, 6, 3] basic blocks per
    stage; its 3 × 3 convolutions of stride 1 are Winograd's (prims/convolve.py), 27 of them against ResNet-18's 12."""
    import torch
    from torch import nn

    def conv_bn(cin, cout, k, stride):
        return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout))

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1, self.c2 = conv_bn(cin, cout, 3, stride), conv_bn(cout, cout, 3, 1)
            self.down = conv_bn(cin, cout, 1, stride) if stride != 1 or cin != cout else None

        def forward(self, x):
            y = self.c2(torch.relu(self.c1(x)))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    layers, cin = [conv_bn(3, widths[0], 7, 2), nn.ReLU(), nn.MaxPool2d(3, 2, 1)], widths[0]
    for cout, count, stride in zip(widths, counts, (1, 2, 2, 2)):
        for i in range(count):
            layers.append(Block(cin, cout, stride if i == 0 else 1))
            cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 1000)]
    torch.manual_seed(0)
    return _random_statistics(nn.Sequential(*layers))


def wide_resnet_like():
    """A wide residual network after Zagoruyko and Komodakis ("Wide Residual Networks", 2016) on ResNet-18's ImageNet
    layout: [2, 2, 2, 2] basic blocks 1.5 times as wide (96, 192, 384, 768 channels; Winograd's layers of 384
    channels at 14 × 14 and a 768-channel stage at 7 × 7, widths no other network here has)."""
    return resnet34((2, 2, 2, 2), (96, 192, 384, 768))


def mobilenet_v3_large():
    """torchvision's mobilenet_v3_large (width 1.0), from benchmarks/onnx/mobilenets.py's blocks: a 3×3 stride-2 stem
    with hardswish, 15 inverted residual blocks (3×3 and 5×5 depthwise, ReLU or hardswish, squeeze-excite with ReLU
    and hardsigmoid), a 1×1 convolution to 960 channels, global average pooling, 960 -> 1280 (hardswish) -> 1000
    linear layers; batch norms with eps 0.001. A depthwise network bench.py does not time."""
    import sys
    from pathlib import Path

    import torch
    from torch import nn
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "onnx"))
    from mobilenets import _conv, _inverted, _make_divisible, _squeeze_excite
    eps, re, hs = 1e-3, nn.ReLU, nn.Hardswish
    # (in, kernel, expanded, out, squeeze-excite, activation, stride): torchvision's table for "mobilenet_v3_large"
    table = [(16, 3, 16, 16, False, re, 1), (16, 3, 64, 24, False, re, 2), (24, 3, 72, 24, False, re, 1),
             (24, 5, 72, 40, True, re, 2), (40, 5, 120, 40, True, re, 1), (40, 5, 120, 40, True, re, 1),
             (40, 3, 240, 80, False, hs, 2), (80, 3, 200, 80, False, hs, 1), (80, 3, 184, 80, False, hs, 1),
             (80, 3, 184, 80, False, hs, 1), (80, 3, 480, 112, True, hs, 1), (112, 3, 672, 112, True, hs, 1),
             (112, 5, 672, 160, True, hs, 2), (160, 5, 960, 160, True, hs, 1), (160, 5, 960, 160, True, hs, 1)]

    class MobileNetV3Large(nn.Module):
        def __init__(self):
            super().__init__()
            blocks = [_inverted(cin, k, h, cout,
                                _squeeze_excite(h, _make_divisible(h // 4), nn.ReLU, nn.Hardsigmoid) if se else None,
                                act, s, eps) for cin, k, h, cout, se, act, s in table]
            self.features = nn.Sequential(*_conv(3, 16, 3, 2, act=hs, eps=eps), *blocks,
                                          *_conv(160, 960, 1, act=hs, eps=eps))
            self.classifier = nn.Sequential(nn.Linear(960, 1280), nn.Hardswish(), nn.Dropout(0.2),
                                            nn.Linear(1280, 1000))

        def forward(self, x):
            x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
            return self.classifier(x.flatten(1))

    torch.manual_seed(0)
    return _random_statistics(MobileNetV3Large())


def mnasnet_b1():
    """MnasNet-B1 as its paper's figure and table give it (Tan et al., "MnasNet: Platform-Aware Neural Architecture
    Search for Mobile", 2019; width 1.0, no squeeze-excite), written here without torchvision: a 3×3 stride-2 stem to
    32 channels, a separable 3×3 block to 16, then MBConv blocks (expansion, stages of (expansion, kernel, out,
    count, first stride)): (3, 3, 24, 3, 2), (3, 5, 40, 3, 2), (6, 5, 80, 3, 2), (6, 3, 96, 2, 1), (6, 5, 192, 4, 2),
    (6, 3, 320, 1, 1); ReLU throughout, a 1×1 convolution to 1280 channels, global average pooling, a 1000-way
    linear layer. A depthwise network no session tuned the kernels on (issue 36 item 4's held-out check)."""
    import sys
    from pathlib import Path

    import torch
    from torch import nn
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "onnx"))
    from mobilenets import _conv, _inverted
    stages = [(3, 3, 24, 3, 2), (3, 5, 40, 3, 2), (6, 5, 80, 3, 2), (6, 3, 96, 2, 1), (6, 5, 192, 4, 2),
              (6, 3, 320, 1, 1)]
    layers, cin = [*_conv(3, 32, 3, 2, act=nn.ReLU), *_conv(32, 32, 3, groups=32, act=nn.ReLU), *_conv(32, 16, 1)], 16
    for t, k, cout, count, stride in stages:
        for i in range(count):
            layers.append(_inverted(cin, k, cin * t, cout, None, nn.ReLU, stride if i == 0 else 1, 1e-5))
            cin = cout
    layers += [*_conv(320, 1280, 1, act=nn.ReLU), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1280, 1000)]
    torch.manual_seed(0)
    return _random_statistics(nn.Sequential(*layers))


MODELS = {"resnext50_32x4d": resnext50_32x4d, "resnext_like": resnext_like, "googlenet": googlenet,
          "squeezenet1_1": squeezenet1_1, "mobilenet_v3_large": mobilenet_v3_large, "resnet34": resnet34,
          "mnasnet_b1": mnasnet_b1, "wide_resnet_like": wide_resnet_like}
