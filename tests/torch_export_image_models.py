"""Small image-network blocks for tests/test_torch_export_vs_onnx.py, one per family of benchmarks/models/bench.py's
networks (written after torchvision's layouts at small widths, random weights and batch norm statistics): a ResNet
basic block with a downsampling shortcut, a MobileNetV2 inverted residual (ReLU6), a MobileNetV3 block (hardswish,
squeeze-excite with hardsigmoid, a 5x5 depthwise convolution, the classifier head) and an EfficientNet MBConv
(SiLU, squeeze-excite with sigmoid). Each `make_*` returns (module, example input, dynamic shapes) as a
`torch =` kernel's make() does; the batch is the dim "batch"."""
from __future__ import annotations

import torch
from torch import nn

SIDE = 12


def _conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act=None) -> list:
    """A bias-free convolution with 'same' padding, a batch norm and an optional activation."""
    layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return layers + [act()] if act is not None else layers


class SqueezeExcite(nn.Module):
    """x * gate(fc2(act(fc1(mean over H, W of x)))) (torchvision's SqueezeExcitation)."""

    def __init__(self, c: int, squeeze: int, act, gate):
        super().__init__()
        self.fc1, self.fc2, self.act, self.gate = nn.Conv2d(c, squeeze, 1), nn.Conv2d(squeeze, c, 1), act(), gate()

    def forward(self, x):
        return x * self.gate(self.fc2(self.act(self.fc1(nn.functional.adaptive_avg_pool2d(x, 1)))))


class BasicBlock(nn.Module):
    """ResNet's basic block, stride 2, with a 1x1 convolution + batch norm on the shortcut."""

    def __init__(self, cin: int = 8, cout: int = 16):
        super().__init__()
        self.body = nn.Sequential(*_conv_bn(cin, cout, 3, 2, act=nn.ReLU), *_conv_bn(cout, cout, 3))
        self.down = nn.Sequential(*_conv_bn(cin, cout, 1, 2))

    def forward(self, x):
        return torch.relu(self.body(x) + self.down(x))


class Inverted(nn.Module):
    """An inverted residual: 1x1 expansion, kxk depthwise, optional squeeze-excite, 1x1 projection, the input
    added (MobileNetV2/V3, EfficientNet's MBConv)."""

    def __init__(self, c: int, hidden: int, k: int, act, se: nn.Module | None):
        super().__init__()
        self.body = nn.Sequential(*_conv_bn(c, hidden, 1, act=act),
                                  *_conv_bn(hidden, hidden, k, groups=hidden, act=act),
                                  *([se] if se is not None else []), *_conv_bn(hidden, c, 1))

    def forward(self, x):
        return x + self.body(x)


class MobileNetV3Tail(nn.Module):
    """A MobileNetV3 block, then its head: 1x1 convolution with hardswish, global average pooling, flatten,
    linear + hardswish, linear."""

    def __init__(self):
        super().__init__()
        self.block = Inverted(8, 24, 5, nn.Hardswish, SqueezeExcite(24, 8, nn.ReLU, nn.Hardsigmoid))
        self.last = nn.Sequential(*_conv_bn(8, 32, 1, act=nn.Hardswish))
        self.classifier = nn.Sequential(nn.Linear(32, 40), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(40, 10))

    def forward(self, x):
        x = nn.functional.adaptive_avg_pool2d(self.last(self.block(x)), 1)
        return self.classifier(x.flatten(1))


def _random_statistics(module: nn.Module, seed: int) -> nn.Module:
    """module in eval mode, seeded weights, its batch norms' running statistics and affine drawn at random (so
    that folding them is not the identity)."""
    g = torch.Generator().manual_seed(seed)
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            for t, lo, hi in ((m.running_mean, -0.5, 0.5), (m.running_var, 0.5, 1.5), (m.weight, 0.5, 1.5),
                              (m.bias, -0.5, 0.5)):
                t.data.copy_(torch.rand(t.shape, generator=g) * (hi - lo) + lo)
    return module.eval()


def _image(module_class, seed: int, channels: int = 8):
    torch.manual_seed(seed)
    x = torch.randn(2, channels, SIDE, SIDE, generator=torch.Generator().manual_seed(seed))
    return _random_statistics(module_class(), seed), (x,), ({0: torch.export.Dim("batch", min=1, max=64)},)


def make_resnet_block():
    return _image(BasicBlock, 10)


def make_mobilenet_v2_block():
    return _image(lambda: Inverted(8, 32, 3, nn.ReLU6, None), 11)


def make_mobilenet_v3_block():
    return _image(MobileNetV3Tail, 12)


def make_mbconv_block():
    return _image(lambda: Inverted(8, 32, 5, nn.SiLU, SqueezeExcite(32, 2, nn.SiLU, nn.Sigmoid)), 13)


IMAGE = {"resnet_block": make_resnet_block, "mobilenet_v2_block": make_mobilenet_v2_block,
         "mobilenet_v3_block": make_mobilenet_v3_block, "mbconv_block": make_mbconv_block}
