"""Quantized weights from Python: a graph with a u8 param holding packed ggml rows (a numpy
array bound with set_param), quant_matmul / dequantize on the CPU backend against gguf-py's
numpy quantizers and dequantizers (the independent reference), and the verifier's message."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

import rlx


def _packed_q8_0(rows: np.ndarray) -> np.ndarray:
    """gguf-py's Q8_0 quantizer: [N, K] f32 -> [N, K / 32 * 34] u8."""
    return np.asarray(gguf.quants.quantize(rows, gguf.GGMLQuantizationType.Q8_0), np.uint8)


def test_quant_matmul_with_a_numpy_u8_param_matches_gguf_py():
    rng = np.random.default_rng(5)
    n, k = 48, 128
    w = rng.standard_normal((n, k)).astype(np.float32)
    packed = _packed_q8_0(w)
    assert packed.shape == (n, k // 32 * 34) and packed.dtype == np.uint8
    g = rlx.Graph("linear")
    x = g.input("x", [4, k], "f32")
    wp = g.param("w", list(packed.shape), "u8")
    g.outputs(g.quant_matmul(x, wp, "q8_0"), g.dequantize(wp, "Q8_0", k),
              g.quant_matmul(x, wp, "q8_0", act_quant="int8"))
    assert ('quant_matmul %x, %w {format="q8_0", k=128, act_quant="none", activation="none"}'
            in g.to_string())
    exe = rlx.Session().compile(g)
    exe.set_param("w", packed)
    xv = rng.standard_normal((4, k)).astype(np.float32)
    exact, wd, y = exe.run({"x": xv})
    want_wd = gguf.quants.dequantize(packed, gguf.GGMLQuantizationType.Q8_0)
    np.testing.assert_array_equal(np.asarray(wd), want_wd)  # bit-equal to gguf-py
    ref = xv.astype(np.float64) @ want_wd.astype(np.float64).T
    # act_quant "none": f32 rounding only.
    np.testing.assert_allclose(np.asarray(exact), ref, rtol=1e-5, atol=1e-5)
    # "int8" rounds x to int8 blocks of 32: |error| <= sum_b max|x_b| / 254 * sum |w_b|.
    bound = sum(np.abs(xv[:, b:b + 32]).max(1, keepdims=True) / 254
                * np.abs(want_wd[:, b:b + 32]).sum(1)[None, :] for b in range(0, k, 32))
    assert np.all(np.abs(np.asarray(y) - ref) <= bound * 1.001 + 1e-5)


def test_quant_matmul_bias_and_gelu_match_numpy():
    """bias= and activation= of quant_matmul (the epilogue the CPU kernel applies): exact x
    against gguf-py's dequantized weights in f64, plus the bias, then the exact erf GELU."""
    from scipy.special import erf
    rng = np.random.default_rng(6)
    n, k = 40, 64
    packed = _packed_q8_0(rng.standard_normal((n, k)).astype(np.float32))
    g = rlx.Graph("linear_gelu")
    x = g.input("x", [3, k], "f32")
    wp = g.param("w", list(packed.shape), "u8")
    b = g.input("b", [n], "f32")
    g.outputs(g.quant_matmul(x, wp, "q8_0", bias=b, activation="gelu"))
    exe = rlx.Session().compile(g)
    exe.set_param("w", packed)
    xv = rng.standard_normal((3, k)).astype(np.float32)
    bv = rng.standard_normal(n).astype(np.float32)
    y = exe.run({"x": xv, "b": bv})  # one output: the array itself
    wd = gguf.quants.dequantize(packed, gguf.GGMLQuantizationType.Q8_0).astype(np.float64)
    z = xv.astype(np.float64) @ wd.T + bv
    want = 0.5 * z * (1 + erf(z / np.sqrt(2)))
    np.testing.assert_allclose(np.asarray(y), want, rtol=1e-5, atol=1e-5)


def test_dequantize_row_size_error_names_the_shapes():
    g = rlx.Graph("bad")
    w = g.param("w", [4, 35], "u8")
    with pytest.raises(rlx.Error, match=r"last dim is 35 bytes, but a q4_0 row of k = 64 elements "
                                        r"is 2 blocks of 18 bytes = 36 bytes"):
        g.dequantize(w, "q4_0", 64)
    with pytest.raises(rlx.Error, match="q9_9"):
        g.dequantize(w, "q9_9", 64)
