"""compile(quantized_params=...): float params stored in ggml block formats. gguf-py's numpy
quantizers and dequantizers (PyPI `gguf`) are the independent reference for the packed bytes
and the values."""
import gguf
import numpy as np
import pytest

import rlx


def mlp():
    g = rlx.Graph("qmlp")
    x = g.input("x", (3, 64))
    w = g.param("w", (64, 8))  # x @ w: quantized along its axis 0 (the contracting one)
    v = g.param("v", (16, 8))  # ggml's [out, in]: x @ v.T, along its last axis
    g.outputs(g.matmul(x @ w, g.transpose(v, (1, 0))))
    return g


def test_packed_specs_and_values_match_gguf_py():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    w = (rng.standard_normal((64, 8)) * 0.1).astype(np.float32)
    exe = rlx.Session().compile(mlp(), quantized_params={"w": ("q8_0", 0), "v": "f16"})
    assert exe.params[0] == ("w", (8, 68), "u8")
    assert exe.params[1] == ("v", (16, 16), "u8")  # 8 f16 = 16 bytes per row
    v = rng.standard_normal((16, 8)).astype(np.float32)
    exe.set_param("w", w)
    exe.set_param("v", v)
    got = exe(x)
    # The bytes rlx packs are gguf-py's: binding gguf-py's packed rows gives the same output.
    packed = gguf.quants.quantize(np.ascontiguousarray(w.T), gguf.GGMLQuantizationType.Q8_0)
    assert packed.shape == (8, 68)
    exe.set_param("w", packed)
    np.testing.assert_array_equal(exe(x), got)
    # Values: x . dequantize(packed) . v (f16-rounded); the fused kernel rounds x to int8 blocks.
    w_deq = gguf.quants.dequantize(packed, gguf.GGMLQuantizationType.Q8_0).T
    want = (x @ w_deq) @ v.astype(np.float16).astype(np.float32).T
    # (an error of about 0.5 % of the output's norm; a wrong layout or scale gives ~100 %).
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1.5e-2


def test_errors_name_the_param():
    g = mlp()
    with pytest.raises(rlx.Error, match=r"graph 'qmlp' has no param 'u' \(params: w, v\)"):
        rlx.Session().compile(g, quantized_params={"u": "q8_0"})
    with pytest.raises(rlx.Error, match=r"axis 1 has 8 elements, not a multiple of the block "
                                         r"size 32"):
        rlx.Session().compile(g, quantized_params={"w": "q8_0"})
    with pytest.raises(rlx.Error, match=r"unknown quantization format 'q9_0'"):
        rlx.Session().compile(g, quantized_params={"w": ("q9_0", 0)})
    with pytest.raises(rlx.Error, match=r"quantized_params must be a dict"):
        rlx.Session().compile(g, quantized_params=["w"])
    exe = rlx.Session().compile(g, quantized_params={"w": ("q8_0", 0)})
    with pytest.raises(rlx.Error, match=r"set_param 'w': expected u8\[8,68\] \(q8_0 packed\) or "
                                         r"f32\[64,8\], got f32\[8,64\]"):
        exe.set_param("w", np.zeros((8, 64), np.float32))
