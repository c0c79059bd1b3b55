"""ONNX-ML ops (domain ai.onnx.ml) that are plain tensor code: Binarizer, ArrayFeatureExtractor."""
from __future__ import annotations

from ...ops import index as ix
from ...ops._util import scalar_lit
from .graph import handler
from .node import Node


@handler("Binarizer")
def binarizer(n: Node):
    x = n.x(0)
    t = n.attr("threshold", 0.0)
    return [n.b.select(n.b.gt(x, scalar_lit(t, x.type.dtype)), scalar_lit(1, x.type.dtype),
                       scalar_lit(0, x.type.dtype))]


@handler("ArrayFeatureExtractor")
def array_feature_extractor(n: Node):
    x, idx = n.x(0), n.x(1)
    idx = n.b.reshape(idx, shape=(idx.type.shape[-1],)) if idx.type.rank != 1 else idx
    return [ix.gather(n.b, x, idx, x.type.rank - 1)]
