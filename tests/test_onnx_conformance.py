"""A fixed sample of the ONNX backend node tests (about 100 cases over the op types of exported models,
plus narrow types, quantization, control flow), compiled into one package and run: any
regression fails. The full table is `ksbuild onnx-report` (docs/onnx-support.md)."""
from __future__ import annotations

import pytest

pytest.importorskip("onnx", reason="the onnx package is not installed")

SAMPLE = [
    "test_add", "test_sub", "test_mul", "test_div", "test_pow", "test_sqrt", "test_exp", "test_log", "test_neg",
    "test_abs", "test_reciprocal_example", "test_relu_expanded_ver18", "test_leakyrelu_default",
    "test_sigmoid_example", "test_tanh_example", "test_gelu_default_1", "test_elu", "test_hardsigmoid",
    "test_hardswish", "test_clip_default_min", "test_softmax_default_axis_expanded_ver18",
    "test_logsoftmax_default_axis_expanded_ver18", "test_matmul_3d", "test_gemm_default_scalar_bias",
    "test_basic_conv_with_padding", "test_convtranspose", "test_maxpool_1d_default", "test_averagepool_1d_default",
    "test_globalaveragepool", "test_batchnorm_epsilon", "test_layer_normalization_2d_axis0",
    "test_instancenorm_epsilon", "test_group_normalization_epsilon", "test_reshape_allowzero_reordered",
    "test_transpose_all_permutations_0", "test_flatten_axis0", "test_squeeze", "test_unsqueeze_axis_0",
    "test_concat_1d_axis_0", "test_split_1d_uneven_split_opset18", "test_slice", "test_gather_0", "test_shape",
    "test_expand_dim_changed", "test_where_example", "test_equal", "test_less_equal_uint64",
    "test_greater_equal_uint64", "test_not_3d", "test_cast_FLOAT_to_UINT4", "test_constant_pad_axes",
    "test_constantofshape_int_shape_zero", "test_range_int32_type_negative_delta",
    "test_reduce_mean_keepdims_example", "test_reduce_sum_empty_set", "test_reduce_max_empty_set",
    "test_dropout_default", "test_reflect_pad", "test_resize_tf_crop_and_resize_extrapolation_value",
    "test_lstm_reverse", "test_gru_reverse", "test_simple_rnn_defaults", "test_cumsum_1d_reverse_exclusive",
    "test_argmax_negative_axis_keepdims_example", "test_top_k_same_values_2d", "test_tile_precomputed",
    "test_min_int8", "test_max_int8", "test_attention_4d_causal_with_past_and_present",
    "test_cast_FLOAT_to_FLOAT16", "test_cast_FLOAT_to_FLOAT8E4M3FN", "test_cast_FLOAT_to_INT4",
    "test_quantizelinear", "test_dequantizelinear_axis", "test_gridsample", "test_resize_upsample_scales_cubic",
    "test_softmax_axis_0_expanded", "test_layer_normalization_4d_axis0_expanded", "test_dft", "test_scan9_sum",
    "test_if", "test_cumsum_2d_axis_1", "test_bitshift_left_uint8", "test_gathernd_example_int32", "test_scatternd",
    "test_onehot_with_axis", "test_lrn", "test_lppool_2d_default", "test_lstm_batchwise", "test_gru_batchwise",
    "test_einsum_scalar", "test_conv_with_strides_and_asymmetric_padding", "test_maxpool_2d_same_lower",
    "test_averagepool_2d_precomputed_strides", "test_batchnorm_example", "test_erf", "test_top_k",
    "test_gather_2d_indices", "test_matmul_1d_1d", "test_convtranspose_group_2",
    "test_attention_4d_causal_fp16", "test_attention_3d_causal_bf16", "test_training_dropout_mask",
    "test_equal_string_broadcast", "test_identity_sequence", "test_identity_opt",
]


def test_sample_is_fixed_and_present():
    from ksbuild.tools.onnx_conformance import load_cases
    assert len(SAMPLE) == len(set(SAMPLE)) == 106
    assert {c.name for c in load_cases(names=SAMPLE)} == set(SAMPLE)


def test_sample_passes_compiled(tmp_path):
    from ksbuild.tools.onnx_conformance import PASS, load_cases, run_compiled
    results = run_compiled(load_cases(names=SAMPLE), tmp_path, progress=lambda s: None)
    bad = [f"{r.case}: {r.status}: {r.detail}" for r in results if r.status != PASS]
    assert not bad, "\n".join(bad)


def test_interpreter_agrees_on_a_few(tmp_path):
    """The reference interpreter runs the same cases (the compiled run's oracle is the expected outputs;
    this keeps the interpreter path of `onnx-report --interpreted` honest too)."""
    from ksbuild.tools.onnx_conformance import PASS, load_cases, run_interpreted
    for c in load_cases(names=SAMPLE[::10]):
        r = run_interpreted(c)
        assert r.status == PASS, f"{c.name}: {r.detail}"


def test_a_filter_without_cases_names_the_op_types(capsys):
    """(It was a ZeroDivisionError from inside ksbuild.)"""
    from ksbuild.cli import main
    assert main(["onnx-report", "--filter", "OneHotEncoder"]) != 0
    err = capsys.readouterr().err
    assert "--filter OneHotEncoder: no ONNX backend node test has that op type" in err and "Conv, " in err
    assert "Traceback" not in err


def test_only_the_named_cases_need_the_reference_semantics():
    """The report compiles every case with onnx_semantics = "reference" (the expected outputs are
    onnx.reference's) and names the cases that fail with the default, onnxruntime's reading: that list is
    exact for the op where the readings differ, and those cases pass with the reference's reading."""
    import warnings

    from ksbuild.tools.onnx_conformance import PASS, load_cases, run_interpreted
    from ksbuild.tools.onnx_report import SEMANTICS_CASES
    cases = load_cases("Resize") + load_cases("Upsample")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        default = {c.name for c in cases if run_interpreted(c, "onnxruntime").status != PASS}
        reference = {c.name for c in cases if run_interpreted(c, "reference").status != PASS}
    assert default == set(SEMANTICS_CASES) and not reference
