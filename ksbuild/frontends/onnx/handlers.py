"""Importing this module registers every ONNX op handler (one module per family of ops)."""
from . import (  # noqa: F401
    ops_control,
    ops_index,
    ops_math,
    ops_ml,
    ops_nn,
    ops_quant,
    ops_quant_contrib,
    ops_reduce,
    ops_resize,
    ops_rnn,
    ops_sequence,
    ops_shape,
    ops_signal,
    ops_svm,
    ops_training,
    ops_trees,
)
