#!/usr/bin/env python3
"""Writes tests/ir/quant_ref.json: reference data for rlx's ggml block formats (rlx/ir/quant.h).

Dequantization: for every format, raw block bytes crafted directly (random bytes for every
packed field, so every nibble / bit / 6-bit-scale pattern occurs; random finite f16 scales of
both signs, subnormals included; one block per format whose quant bytes count through 0..255)
and the f32 values gguf-py's numpy dequantizer (gguf.quants.dequantize) gives for them, as bit
patterns. Q8_K has no gguf-py dequantizer: its expected values are d * q computed here in
numpy f32 (value = d * q, ggml's dequantize_row_q8_K).

Quantization: random f32 rows (several magnitudes, an all-zero block, a constant block)
through gguf-py's numpy quantizers where it has one (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, BF16; F16 is
numpy's astype), and the bytes they produce.

Not run in CI; its output is committed. Pinned versions: tests/golden/requirements.txt.
Usage: python3 tests/ir/gen_quant_ref.py   (rewrites tests/ir/quant_ref.json)
"""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

EXPECTED = {"gguf": "0.19.0", "numpy": "2.4.6"}
OUT = Path(__file__).with_name("quant_ref.json")
RNG = np.random.default_rng(20240614)

# Byte offsets of the f16 scale fields of one block (everything else is packed quant data).
F16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
    T.IQ4_NL: [0],
}
BLOCK_FORMATS = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K,
                 T.Q6_K, T.Q8_K, T.IQ4_NL]
N_BLOCKS = {32: 6, 256: 2}


def random_f16(n: int) -> np.ndarray:
    """Finite f16 values of both signs over many binades, with a subnormal among them."""
    mag = np.exp2(RNG.uniform(-12, 3, n)).astype(np.float16)
    mag[0] = np.float16(2.0**-20)  # subnormal
    sign = RNG.choice([-1, 1], n).astype(np.float16)
    return mag * sign


def craft_blocks(t: T) -> np.ndarray:
    block_size, type_size = gguf.GGML_QUANT_SIZES[t]
    nb = N_BLOCKS[block_size]
    raw = RNG.integers(0, 256, (nb, type_size), dtype=np.uint8)
    raw[0] = np.arange(type_size, dtype=np.uint64) * 37 % 256  # counts through all bytes
    if t == T.Q8_K:
        d = (RNG.uniform(0.01, 2.0, nb) * RNG.choice([-1, 1], nb)).astype(np.float32)
        raw[:, 0:4] = d.view(np.uint8).reshape(nb, 4)
        # bsums are not read by the dequantizer; keep them consistent anyway.
        qs = raw[:, 4:260].view(np.int8).astype(np.int16).reshape(nb, 16, 16).sum(-1)
        raw[:, 260:292] = qs.astype("<i2").view(np.uint8).reshape(nb, 32)
        return raw
    for off in F16_FIELDS[t]:
        raw[:, off:off + 2] = random_f16(nb).view(np.uint8).reshape(nb, 2)
    return raw


def dequant_ref(t: T, raw: np.ndarray) -> np.ndarray:
    if t == T.Q8_K:
        d = raw[:, 0:4].copy().view(np.float32)  # (nb, 1)
        q = raw[:, 4:260].view(np.int8).astype(np.float32)
        return (d * q).reshape(-1).astype(np.float32)
    return dequantize(raw.reshape(-1), t).reshape(-1).astype(np.float32)


def bits(a: np.ndarray) -> str:
    """f32 values as the hex of their little-endian bytes (bit-exact)."""
    return np.ascontiguousarray(a, dtype="<f4").tobytes().hex()


def float_cases() -> list[dict]:
    """F32 / F16 / BF16 rows: finite values, signed zeros and subnormals."""
    cases = []
    vals = (RNG.standard_normal(64) * np.exp2(RNG.uniform(-20, 20, 64))).astype(np.float32)
    vals[:4] = [0.0, -0.0, 1e-40, -3e-39]
    cases.append({"name": "f32", "ggml_type": int(T.F32), "n": 64,
                  "bytes_hex": vals.tobytes().hex(), "expected_f32_hex": bits(vals)})
    h = (RNG.standard_normal(64) * np.exp2(RNG.uniform(-20, 10, 64))).astype(np.float16)
    h[:3] = [np.float16(0.0), np.float16(-0.0), np.float16(2.0**-24)]
    cases.append({"name": "f16", "ggml_type": int(T.F16), "n": 64, "bytes_hex": h.tobytes().hex(),
                  "expected_f32_hex": bits(dequantize(h.view(np.uint8), T.F16))})
    b = RNG.integers(0, 1 << 16, 64, dtype=np.uint16)
    b = b[(b & 0x7F80) != 0x7F80][:32]  # finite only
    cases.append({"name": "bf16", "ggml_type": int(T.BF16), "n": int(b.size),
                  "bytes_hex": b.tobytes().hex(),
                  "expected_f32_hex": bits(dequantize(b.view(np.uint8), T.BF16))})
    return cases


def quant_rows(block_size: int) -> np.ndarray:
    n = block_size * 4
    rows = []
    for scale in (1.0, 1e-3, 300.0):
        rows.append((RNG.standard_normal(n) * scale).astype(np.float32))
    r = (RNG.uniform(-1, 1, n) + 0.25).astype(np.float32)  # offset: min != -max
    r[:block_size] = 0.0  # an all-zero block (d = 0)
    r[block_size:2 * block_size] = 0.75  # a constant block
    rows.append(r)
    return np.stack(rows)


def main() -> None:
    for mod, want in EXPECTED.items():
        have = importlib.metadata.version(mod)
        if have != want:
            raise SystemExit(f"{mod} {have} found, {want} expected (tests/golden/requirements.txt)")
    dequant = float_cases()
    for t in BLOCK_FORMATS:
        raw = craft_blocks(t)
        block_size, _ = gguf.GGML_QUANT_SIZES[t]
        ref = dequant_ref(t, raw)
        assert ref.size == raw.shape[0] * block_size
        assert np.all(np.isfinite(ref)), t.name
        dequant.append({"name": t.name.lower(), "ggml_type": int(t), "n": int(ref.size),
                        "bytes_hex": raw.tobytes().hex(), "expected_f32_hex": bits(ref)})
    quant = []
    for t in [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.F16, T.BF16]:
        rows = quant_rows(32)
        for row in rows:
            q = quantize(row, t)
            quant.append({"name": t.name.lower(), "ggml_type": int(t), "n": int(row.size),
                          "input_f32_hex": bits(row),
                          "expected_hex": np.ascontiguousarray(q).view(np.uint8).tobytes().hex()})
    OUT.write_text(json.dumps({"generator": "tests/ir/gen_quant_ref.py", "versions": EXPECTED,
                               "dequantize": dequant, "quantize": quant}, indent=0) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
