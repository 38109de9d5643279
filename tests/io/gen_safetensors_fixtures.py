#!/usr/bin/env python3
"""Fixtures for tests/io/safetensors_test.cc, written by the official `safetensors` package.

Writes into tests/io/data/:
  numpy_dtypes.safetensors   every dtype rlx reads (incl. a 0-d and size-0 tensors, inf/nan/-0,
                             integer extremes) plus I16, U32 and F8_E4M3 tensors rlx must
                             refuse by name, and __metadata__;
  reference_layout.safetensors  supported dtypes only, one metadata key: rlx's writer must
                             reproduce it byte for byte from the tensors it reads back;
  expected.json              for each file: tensor names in data order, metadata, and each
                             tensor's stored dtype, shape and values (format below).

expected.json: {file: {"names": [...], "metadata": {...}, "tensors": {name: {"stored_dtype",
"dtype" (rlx name, or null when rlx does not support it), "shape", "data" (flat, row-major;
floats exact in their dtype, "nan"/"inf"/"-inf" as strings; null when unsupported)}}}}.

The reference writes __metadata__ from a hash map, so the key order in numpy_dtypes' header (and
so its bytes) can change between runs; the tensors and expected.json do not.

The C++ tests need no Python. To regenerate:
  pip install safetensors==0.8.0 numpy==2.4.6 ml_dtypes==0.6.0
  python3 tests/io/gen_safetensors_fixtures.py
"""

import importlib.metadata
import json
import math
import os
import struct

PINS = {"safetensors": "0.8.0", "numpy": "2.4.6", "ml_dtypes": "0.6.0"}
for pkg, want in PINS.items():
    have = importlib.metadata.version(pkg)
    assert have == want, f"{pkg} {have} installed, this script pins {want}"

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")

RLX = {
    "F32": "f32", "F16": "f16", "BF16": "bf16", "F64": "f64", "I8": "i8", "U8": "u8",
    "I32": "i32", "I64": "i64", "BOOL": "bool",
}

rng = np.random.default_rng(20260115)


def special_floats(dtype):
    """Values every float dtype must carry through exactly (as that dtype)."""
    info = ml_dtypes.finfo(dtype)
    return np.array([0.0, -0.0, 1.0, -2.5, np.inf, -np.inf, np.nan, float(info.max),
                     float(info.smallest_subnormal), 0.1], dtype=dtype)


def json_value(x):
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
    return x


def describe(path, tensors, metadata):
    """The expected.json record of a file as written: names in offset order from its header."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    # The reader orders by (begin, end), ties in header order; Python dicts keep header order.
    names = sorted(header, key=lambda k: tuple(header[k]["data_offsets"]))
    out = {"names": names, "metadata": metadata, "tensors": {}}
    for name, arr in tensors.items():
        stored = header[name]["dtype"]
        supported = stored in RLX
        values = None
        if supported:
            flat = arr.reshape(-1)
            if arr.dtype.kind == "f" or arr.dtype == ml_dtypes.bfloat16:
                values = [json_value(float(v)) for v in flat.astype(np.float64)]
            elif arr.dtype == np.bool_:
                values = [bool(v) for v in flat]
            else:
                values = [int(v) for v in flat]
        out["tensors"][name] = {
            "stored_dtype": stored,
            "dtype": RLX.get(stored),
            "shape": list(arr.shape),
            "data": values,
        }
    return out


def numpy_dtypes():
    t = {
        "f32": np.concatenate([special_floats(np.float32),
                               rng.standard_normal(6).astype(np.float32)]).reshape(4, 4),
        "f16": special_floats(np.float16).reshape(2, 5),
        "bf16": special_floats(ml_dtypes.bfloat16).reshape(5, 2),
        "f64": np.concatenate([special_floats(np.float64), rng.standard_normal(2)]),
        "i8": np.array([-128, -1, 0, 1, 127], dtype=np.int8),
        "u8": np.array([[0, 1, 128], [200, 254, 255]], dtype=np.uint8),
        "i32": np.array([-(2**31), -7, 0, 42, 2**31 - 1], dtype=np.int32),
        "i64": np.array([-(2**63), -1, 0, 2**53 + 1, 2**63 - 1], dtype=np.int64).reshape(1, 5),
        "bool": np.array([[True, False, True], [False, False, True]]),
        "scalar_f32": np.array(3.25, dtype=np.float32),
        "scalar_i64": np.array(-9, dtype=np.int64),
        "empty_f32": np.zeros((3, 0), dtype=np.float32),
        "empty_bf16": np.zeros((0,), dtype=ml_dtypes.bfloat16),
        "unsupported_i16": np.array([1, -2, 3], dtype=np.int16),
        "unsupported_u32": np.array([7], dtype=np.uint32),
        "unsupported_f8": np.array([0.5, -1.0], dtype=ml_dtypes.float8_e4m3fn),
    }
    meta = {"format": "np", "source": "tests/io/gen_safetensors_fixtures.py", "unicode": "ü→β"}
    return t, meta


def reference_layout():
    t = {
        "w": rng.standard_normal((3, 4)).astype(np.float32),
        "b": rng.standard_normal(4).astype(ml_dtypes.bfloat16),
        "ids": np.arange(6, dtype=np.int64).reshape(2, 3),
        "mask": np.array([True, False, True]),
        "h": np.array([1.5, -0.25, 65504.0], dtype=np.float16),
        "q": np.array([-3, 4, 5], dtype=np.int8),
        "none": np.zeros((0, 2), dtype=np.float64),
    }
    return t, {"format": "np"}  # one key: the reference writes a HashMap in no fixed order


def main():
    os.makedirs(DATA, exist_ok=True)
    expected = {}
    for fname, make in [("numpy_dtypes.safetensors", numpy_dtypes),
                        ("reference_layout.safetensors", reference_layout)]:
        tensors, meta = make()
        path = os.path.join(DATA, fname)
        save_file(tensors, path, metadata=meta)
        expected[fname] = describe(path, tensors, meta)
    with open(os.path.join(DATA, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
