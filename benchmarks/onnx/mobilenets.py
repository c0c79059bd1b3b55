"""MobileNetV3-small and EfficientNet-B0 as torch modules, written here after torchvision's layouts
(torchvision/models/mobilenetv3.py and efficientnet.py: the same blocks, channels, kernels, strides, activations and
squeeze-excite widths), random weights, nothing downloaded; the networks of benchmarks/models/bench.py that have
hardswish/hardsigmoid, SiLU, squeeze-excite blocks and 5×5 depthwise convolutions.
"""
from __future__ import annotations

from resnet import _with_random_statistics


def _make_divisible(v: float, divisor: int = 8) -> int:
    """torchvision's rounding of a channel count to a multiple of 8 (never down by more than 10%)."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def _conv(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act=None, eps: float = 1e-5) -> list:
    """A bias-free convolution with 'same' padding, a batch norm and an optional activation module."""
    from torch import nn
    layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False), nn.BatchNorm2d(cout, eps=eps)]
    return layers + [act()] if act is not None else layers


def _squeeze_excite(channels: int, squeeze: int, act, scale):
    """x * scale(fc2(act(fc1(mean over H, W of x)))), the 1×1 convolutions with biases (torchvision's
    SqueezeExcitation)."""
    from torch import nn

    class SE(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Conv2d(channels, squeeze, 1), nn.Conv2d(squeeze, channels, 1)
            self.act, self.scale = act(), scale()

        def forward(self, x):
            s = nn.functional.adaptive_avg_pool2d(x, 1)
            return x * self.scale(self.fc2(self.act(self.fc1(s))))
    return SE()


def _inverted(cin: int, k: int, hidden: int, cout: int, se, act, stride: int, eps: float):
    """An inverted residual block: 1×1 expansion (when hidden != cin), k×k depthwise, squeeze-excite (se: the
    module or None), 1×1 projection; the input added when the shapes allow."""
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            expand = _conv(cin, hidden, 1, act=act, eps=eps) if hidden != cin else []
            dw = _conv(hidden, hidden, k, stride, groups=hidden, act=act, eps=eps)
            self.body = nn.Sequential(*expand, *dw, *([se] if se is not None else []),
                                      *_conv(hidden, cout, 1, eps=eps))
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            return x + self.body(x) if self.residual else self.body(x)
    return Block()


def mobilenet_v3_small():
    """MobileNetV3-small (Howard et al., "Searching for MobileNetV3", 2019; torchvision's mobilenet_v3_small layout,
    width 1.0: a 3×3 stride-2 stem with hardswish, 11 inverted residual blocks (3×3 and 5×5 depthwise, ReLU or
    hardswish, squeeze-excite with ReLU and hardsigmoid), a 1×1 convolution to 576 channels, global average pooling,
    576 -> 1024 (hardswish) -> 1000 linear layers), batch norms with eps 0.001, in eval mode with random running
    statistics as resnet18's."""
    from torch import nn
    eps = 1e-3
    # (in, kernel, expanded, out, squeeze-excite, activation, stride): torchvision's table for "mobilenet_v3_small"
    table = [(16, 3, 16, 16, True, nn.ReLU, 2), (16, 3, 72, 24, False, nn.ReLU, 2), (24, 3, 88, 24, False, nn.ReLU, 1),
             (24, 5, 96, 40, True, nn.Hardswish, 2), (40, 5, 240, 40, True, nn.Hardswish, 1),
             (40, 5, 240, 40, True, nn.Hardswish, 1), (40, 5, 120, 48, True, nn.Hardswish, 1),
             (48, 5, 144, 48, True, nn.Hardswish, 1), (48, 5, 288, 96, True, nn.Hardswish, 2),
             (96, 5, 576, 96, True, nn.Hardswish, 1), (96, 5, 576, 96, True, nn.Hardswish, 1)]

    class MobileNetV3Small(nn.Module):
        def __init__(self):
            super().__init__()
            blocks = [_inverted(cin, k, h, cout,
                                _squeeze_excite(h, _make_divisible(h // 4), nn.ReLU, nn.Hardsigmoid) if se else None,
                                act, s, eps) for cin, k, h, cout, se, act, s in table]
            self.features = nn.Sequential(*_conv(3, 16, 3, 2, act=nn.Hardswish, eps=eps), *blocks,
                                          *_conv(96, 576, 1, act=nn.Hardswish, eps=eps))
            self.classifier = nn.Sequential(nn.Linear(576, 1024), nn.Hardswish(), nn.Dropout(0.2),
                                            nn.Linear(1024, 1000))

        def forward(self, x):
            x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
            return self.classifier(x.flatten(1))

    return _with_random_statistics(MobileNetV3Small)


def efficientnet_b0():
    """EfficientNet-B0 (Tan and Le, "EfficientNet: Rethinking Model Scaling for Convolutional Neural Networks",
    2019; torchvision's efficientnet_b0 layout: a 3×3 stride-2 stem, 16 MBConv blocks in 7 stages (3×3 and 5×5
    depthwise, SiLU, squeeze-excite to a quarter of the block's input channels with SiLU and sigmoid), a 1×1
    convolution to 1280 channels, global average pooling, a 1000-way linear layer; stochastic depth and dropout are
    identities in eval mode), in eval mode with random running statistics as resnet18's."""
    from torch import nn
    eps = 1e-5
    # (expand ratio, kernel, stride, in, out, layers): torchvision's MBConvConfig table at width and depth 1.0
    stages = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
              (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1)]

    class EfficientNetB0(nn.Module):
        def __init__(self):
            super().__init__()
            blocks = []
            for t, k, s, cin, cout, n in stages:
                for i in range(n):
                    c = cin if i == 0 else cout
                    h = _make_divisible(c * t)
                    se = _squeeze_excite(h, max(1, c // 4), nn.SiLU, nn.Sigmoid)
                    blocks.append(_inverted(c, k, h, cout, se, nn.SiLU, s if i == 0 else 1, eps))
            self.features = nn.Sequential(*_conv(3, 32, 3, 2, act=nn.SiLU), *blocks, *_conv(320, 1280, 1, act=nn.SiLU))
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, 1000))

        def forward(self, x):
            x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
            return self.classifier(x.flatten(1))

    return _with_random_statistics(EfficientNetB0)


MODELS = {"mobilenet_v3_small": (mobilenet_v3_small, "MobileNetV3-small"),
          "efficientnet_b0": (efficientnet_b0, "EfficientNet-B0")}
