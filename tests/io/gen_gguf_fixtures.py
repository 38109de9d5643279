#!/usr/bin/env python3
"""Fixtures for tests/io/gguf_test.cc, written (and read back) by ggml's own Python package gguf-py.

Writes into tests/io/data/:
  gguf_all_types.gguf    v3, written by gguf.GGUFWriter: one metadata entry of every value type
                         (u8 ... f64, bool, string), arrays of every element type, arrays of
                         arrays (two and three deep, of numbers and of strings), and tensors
                         F32 (1-D to 4-D), F16, BF16, F64, I8, I16, I32, I64, Q8_0 (quantized by
                         gguf.quants from known floats) and Q4_K (raw bytes);
  gguf_align64.gguf      v3, GGUFWriter with add_custom_alignment(64);
  gguf_v2.gguf           a GGUFWriter file whose version field is set to 2 (v2 and v3 share the
                         layout; gguf.GGUFReader reads both);
  gguf_empty_arrays.gguf v3, packed here with struct by the layout of GGUFWriter, since
                         GGUFWriter refuses empty arrays (the format allows them): empty arrays
                         of u8, string and arrays, and [[], [7]]; read back by gguf.GGUFReader;
  gguf_expected.json     for each file what a reader must find (format below);
and the seed corpus of the `gguf` fuzz target into fuzz/corpus/gguf/: the four files above plus
small variants packed here (one block of every ggml type, alignment 1, no tensors, metadata
only, nesting at the depth limit).

Every file is read back with gguf.GGUFReader and checked against what was written before the
JSON is written, so the JSON states what ggml's reference reader sees.

gguf_expected.json: {file: {"version", "alignment", "data_offset", "rewrite" (how rlx's writer,
given what rlx read, must reproduce the file: "identical", or "version3" for the same bytes but
version 3), "kv": [{"key", "type", "value"}] in file order, "tensors": [{"name", "type" (ggml
name), "shape" (outermost first), "offset", "nbytes", "hex" (the bytes), "values" (flat floats
or ints for types with an rlx dtype, else null)}]}}. A value is a number, a bool, a string, or
for an array {"element_type", "items"}; floats that JSON cannot hold are "nan", "inf", "-inf".

The C++ tests need no Python. To regenerate:
  pip install gguf==0.19.0 numpy==2.4.6
  python3 tests/io/gen_gguf_fixtures.py
"""

import importlib.metadata
import json
import math
import os
import struct

PINS = {"gguf": "0.19.0", "numpy": "2.4.6"}
for pkg, want in PINS.items():
    have = importlib.metadata.version(pkg)
    assert have == want, f"{pkg} {have} installed, this script pins {want}"

import numpy as np  # noqa: E402
from gguf import (  # noqa: E402
    GGML_QUANT_SIZES,
    GGMLQuantizationType as Q,
    GGUFReader,
    GGUFValueType as V,
    GGUFWriter,
)
from gguf.quants import quantize  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")

rng = np.random.default_rng(20260514)

# rlx's names of the value types (rlx/io/gguf.h gguf_value_type_name).
VT = {V.UINT8: "u8", V.INT8: "i8", V.UINT16: "u16", V.INT16: "i16", V.UINT32: "u32",
      V.INT32: "i32", V.FLOAT32: "f32", V.BOOL: "bool", V.STRING: "string", V.ARRAY: "array",
      V.UINT64: "u64", V.INT64: "i64", V.FLOAT64: "f64"}
NP = {V.UINT8: np.uint8, V.INT8: np.int8, V.UINT16: np.uint16, V.INT16: np.int16,
      V.UINT32: np.uint32, V.INT32: np.int32, V.FLOAT32: np.float32, V.UINT64: np.uint64,
      V.INT64: np.int64, V.FLOAT64: np.float64}
# Tensor types with an rlx dtype, and their numpy dtype.
NUMERIC = {Q.F32: np.float32, Q.F16: np.float16, Q.F64: np.float64, Q.I8: np.int8,
           Q.I32: np.int32, Q.I64: np.int64}


class Arr:
    """An array value: element type and items (items of an array of arrays are Arr)."""

    def __init__(self, etype, items):
        self.etype, self.items = etype, items


def jfloat(x):
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def jscalar(vtype, x):
    if vtype in (V.FLOAT32, V.FLOAT64):
        return jfloat(NP[vtype](x))  # the value as the file stores it
    if vtype == V.BOOL:
        return bool(x)
    if vtype == V.STRING:
        return x
    return int(x)


def jvalue(vtype, x):
    if vtype == V.ARRAY:
        return {"element_type": VT[x.etype],
                "items": [jvalue(x.etype, i) for i in x.items]}
    return jscalar(vtype, x)


def flat(vtype, x):
    """What GGUFReader's ReaderField.contents() gives: nested arrays flattened."""
    if vtype != V.ARRAY:
        return [x]
    out = []
    for i in x.items:
        out += flat(x.etype, i)
    return out


def type_chain(vtype, x):
    """ReaderField.types: the value type, then for an array the element types down its first
    elements (GGUFReader records the types of element 0 only)."""
    if vtype != V.ARRAY:
        return [vtype]
    if not x.items:
        return [V.ARRAY]
    return [V.ARRAY] + type_chain(x.etype, x.items[0])


def py_items(x):
    """An Arr as the nested lists GGUFWriter takes."""
    return [py_items(i) if isinstance(i, Arr) else i for i in x.items]


# ---- metadata of gguf_all_types.gguf (after general.architecture, which GGUFWriter adds first)
SCALARS = [
    ("test.u8", V.UINT8, 200),
    ("test.i8", V.INT8, -100),
    ("test.u16", V.UINT16, 60000),
    ("test.i16", V.INT16, -30000),
    ("test.u32", V.UINT32, 4_000_000_000),
    ("test.i32", V.INT32, -2_000_000_000),
    ("test.f32", V.FLOAT32, 0.1),
    ("test.bool_true", V.BOOL, True),
    ("test.bool_false", V.BOOL, False),
    ("test.string", V.STRING, "h\u00e9llo w\u00f6rld \u2603"),
    ("test.string_empty", V.STRING, ""),
    ("test.u64", V.UINT64, 2**64 - 1),
    ("test.i64", V.INT64, -(2**63)),
    ("test.f64", V.FLOAT64, -1.5e300),
]
ARRAYS = [
    ("test.arr_u8", Arr(V.UINT8, [0, 1, 255])),
    ("test.arr_i8", Arr(V.INT8, [-128, 0, 127])),
    ("test.arr_u16", Arr(V.UINT16, [0, 65535])),
    ("test.arr_i16", Arr(V.INT16, [-32768, 32767])),
    ("test.arr_u32", Arr(V.UINT32, [1, 2**32 - 1])),
    ("test.arr_i32", Arr(V.INT32, [-(2**31), 5, 2**31 - 1])),
    ("test.arr_f32", Arr(V.FLOAT32, [1.5, -0.0, float("inf"), float("nan"), 1e-45])),
    ("test.arr_bool", Arr(V.BOOL, [True, False, True])),
    ("test.arr_string", Arr(V.STRING, ["a", "", "\u00fc\u00df", "tab\tnewline\n"])),
    ("test.arr_u64", Arr(V.UINT64, [0, 2**64 - 1])),
    ("test.arr_i64", Arr(V.INT64, [-(2**63), 2**63 - 1])),
    ("test.arr_f64", Arr(V.FLOAT64, [0.1, -2.5e-310, float("-inf")])),
    ("test.nested_i32", Arr(V.ARRAY, [Arr(V.INT32, [1, 2]), Arr(V.INT32, [3])])),
    ("test.nested_str", Arr(V.ARRAY, [Arr(V.STRING, ["x", "yz"]), Arr(V.STRING, ["w"])])),
    # GGUFWriter gives the inner arrays of an array of arrays the type of their first element
    # (GGUFValueType.get_type: an int is INT32), whatever sub_type says for the outer one.
    ("test.nested3", Arr(V.ARRAY, [Arr(V.ARRAY, [Arr(V.INT32, [9, 8]), Arr(V.INT32, [7])])])),
]


def f32_tensor(shape):
    return rng.standard_normal(shape).astype(np.float32)


def q4_k_bytes(rows):
    """Random Q4_K blocks with finite f16 scales d and dmin (the first 4 bytes of each block)."""
    block = GGML_QUANT_SIZES[Q.Q4_K][1]
    raw = rng.integers(0, 256, size=(rows, block), dtype=np.uint8)
    scales = rng.uniform(0.001, 0.1, size=(rows, 2)).astype(np.float16)
    raw[:, 0:4] = scales.view(np.uint8).reshape(rows, 4)
    return raw


def tensors_all_types():
    q8_src = rng.uniform(-2, 2, size=(2, 64)).astype(np.float32)
    bf16_src = np.array([1.0, -2.5, 3.140625, 1e-3], dtype=np.float32)
    return [
        # (name, numpy data as add_tensor gets it, raw_dtype or None)
        ("w.f32", f32_tensor((3, 4)), None),
        ("w.f32_1d", f32_tensor((5,)), None),
        ("w.f32_3d", f32_tensor((2, 3, 2)), None),
        ("w.f32_4d", f32_tensor((1, 2, 1, 3)), None),
        ("w.f16", rng.standard_normal((2, 8)).astype(np.float16), None),
        ("w.bf16", quantize(bf16_src, Q.BF16), Q.BF16),
        ("w.f64", np.array([0.1, -1e300], dtype=np.float64), None),
        ("w.i8", np.array([-128, -1, 0, 127, 5], dtype=np.int8), None),
        ("w.i16", np.array([-32768, 7, 32767], dtype=np.int16), None),
        ("w.i32", np.array([-(2**31), 0, 2**31 - 1], dtype=np.int32), None),
        ("w.i64", np.array([-(2**63), 2**63 - 1], dtype=np.int64), None),
        ("w.q8_0", quantize(q8_src, Q.Q8_0), Q.Q8_0),
        ("w.q4_k", q4_k_bytes(2), Q.Q4_K),
    ]


def write_with_gguf_py(path, scalars, arrays, tensors, alignment=None):
    w = GGUFWriter(path, arch="rlxtest")
    if alignment is not None:
        w.add_custom_alignment(alignment)
    for key, vtype, value in scalars:
        w.add_key_value(key, value, vtype)
    for key, arr in arrays:
        w.add_key_value(key, py_items(arr), V.ARRAY, sub_type=arr.etype)
    for name, data, raw in tensors:
        w.add_tensor(name, data, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    kv = [("general.architecture", V.STRING, "rlxtest")]
    if alignment is not None:
        kv.append(("general.alignment", V.UINT32, alignment))
    kv += scalars + [(k, V.ARRAY, a) for k, a in arrays]
    return kv


def pack_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def pack_value(vtype, x):
    if vtype == V.STRING:
        return pack_string(x)
    if vtype == V.ARRAY:
        out = struct.pack("<IQ", x.etype, len(x.items))
        return out + b"".join(pack_value(x.etype, i) for i in x.items)
    fmt = {V.UINT8: "B", V.INT8: "b", V.UINT16: "H", V.INT16: "h", V.UINT32: "I", V.INT32: "i",
           V.FLOAT32: "f", V.BOOL: "?", V.UINT64: "Q", V.INT64: "q", V.FLOAT64: "d"}[vtype]
    return struct.pack("<" + fmt, x)


def write_by_hand(path, kv, tensors, alignment=32):
    """GGUF v3 by the spec, laid out as GGUFWriter lays out its files (rlx/io/gguf.h)."""
    pad = lambda n: (alignment - n % alignment) % alignment  # noqa: E731
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv))
    for key, vtype, value in kv:
        out += pack_string(key) + struct.pack("<I", vtype) + pack_value(vtype, value)
    offset, blobs = 0, []
    for name, data, qtype in tensors:
        dims = list(reversed(data.shape))  # innermost first
        out += pack_string(name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", qtype, offset)
        blob = data.tobytes()
        blobs.append(blob + b"\0" * pad(len(blob)))
        offset += len(blobs[-1])
    out += b"\0" * pad(len(out)) + b"".join(blobs)
    with open(path, "wb") as f:
        f.write(out)


def check_with_reader(path, kv, version):
    """gguf.GGUFReader must read back every entry as written; returns the reader."""
    r = GGUFReader(path)
    assert int(r.fields["GGUF.version"].parts[0][0]) == version, path
    keys = [k for k in r.fields if not k.startswith("GGUF.")]
    assert keys == [k for k, _, _ in kv], (path, keys)
    for key, vtype, value in kv:
        field = r.fields[key]
        assert field.types == type_chain(vtype, value), (key, field.types)
        got = field.contents()
        if vtype == V.ARRAY:
            want = flat(vtype, value)
            got = got if isinstance(got, list) else [got]
        else:
            want, got = [value], [got]
        assert len(got) == len(want), (key, got, want)
        for g, w in zip(got, want):
            if isinstance(w, float):
                gf, wf = float(g), float(np.float32(w)) if field.types[-1] == V.FLOAT32 else w
                assert (math.isnan(gf) and math.isnan(wf)) or gf == wf, (key, g, w)
            else:
                assert g == w, (key, g, w)
    return r


def expected(path, kv, reader, version, rewrite):
    tensors = []
    for t in reader.tensors:
        qtype = Q(int(t.tensor_type))
        block, size = GGML_QUANT_SIZES[qtype]
        shape = [int(d) for d in reversed(t.shape.tolist())]
        raw = np.asarray(t.data).tobytes()
        assert len(raw) == t.n_bytes == math.prod(shape) // block * size, t.name
        values = None
        if qtype in NUMERIC:
            arr = np.frombuffer(raw, dtype=NUMERIC[qtype])
            values = [jfloat(v) if arr.dtype.kind == "f" else int(v) for v in arr.tolist()]
        elif qtype == Q.BF16:
            bits = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
            values = [jfloat(v) for v in bits.view(np.float32).tolist()]
        tensors.append({
            "name": t.name, "type": qtype.name, "shape": shape,
            "offset": int(t.data_offset - reader.data_offset), "nbytes": int(t.n_bytes),
            "hex": raw.hex(), "values": values,
        })
    return {
        "version": version, "alignment": int(reader.alignment),
        "data_offset": int(reader.data_offset), "rewrite": rewrite,
        "kv": [{"key": k, "type": VT[t], "value": jvalue(t, v)} for k, t, v in kv],
        "tensors": tensors,
    }


def write_fuzz_seeds(fixtures):
    seeds = os.path.join(HERE, "..", "..", "fuzz", "corpus", "gguf")
    os.makedirs(seeds, exist_ok=True)
    for name in fixtures:
        with open(os.path.join(DATA, name), "rb") as src, \
                open(os.path.join(seeds, name), "wb") as dst:
            dst.write(src.read())
    arch = [("general.architecture", V.STRING, "seed")]

    class Raw:  # raw bytes of a given ggml type and logical shape, for write_by_hand
        def __init__(self, shape, qtype):
            block, size = GGML_QUANT_SIZES[qtype]
            self.shape = shape
            nbytes = math.prod(shape) // block * size
            self.blob = bytes(rng.integers(0, 256, nbytes, dtype=np.uint8))

        def tobytes(self):
            return self.blob

    every = [(f"t.{q.name.lower()}", Raw((1, GGML_QUANT_SIZES[q][0]), q), q) for q in Q]
    write_by_hand(os.path.join(seeds, "every_ggml_type.gguf"), arch, every)
    write_by_hand(os.path.join(seeds, "alignment_1.gguf"),
                  arch + [("general.alignment", V.UINT32, 1)],
                  [("b", Raw((3,), Q.I8), Q.I8), ("w", Raw((2, 2), Q.F32), Q.F32)], alignment=1)
    write_by_hand(os.path.join(seeds, "no_tensors.gguf"),
                  arch + [("k.f64", V.FLOAT64, 2.5), ("k.bool", V.BOOL, True)], [])
    deep = Arr(V.UINT8, [1, 2])
    for _ in range(7):
        deep = Arr(V.ARRAY, [deep])
    write_by_hand(os.path.join(seeds, "nested_8_deep.gguf"), arch + [("k.deep", V.ARRAY, deep)],
                  [("s", Raw((), Q.F32), Q.F32)])
    for name in ("every_ggml_type.gguf", "alignment_1.gguf", "no_tensors.gguf",
                 "nested_8_deep.gguf"):
        GGUFReader(os.path.join(seeds, name))  # gguf-py reads each


def main():
    os.makedirs(DATA, exist_ok=True)
    out = {}

    path = os.path.join(DATA, "gguf_all_types.gguf")
    kv = write_with_gguf_py(path, SCALARS, ARRAYS, tensors_all_types())
    out[os.path.basename(path)] = expected(path, kv, check_with_reader(path, kv, 3), 3,
                                           "identical")

    path = os.path.join(DATA, "gguf_align64.gguf")
    tensors = [("a.f32", f32_tensor((3,)), None),
               ("a.q8_0", quantize(rng.uniform(-1, 1, (1, 32)).astype(np.float32), Q.Q8_0),
                Q.Q8_0),
               ("a.f16", rng.standard_normal((2, 3)).astype(np.float16), None)]
    kv = write_with_gguf_py(path, [("test.note", V.STRING, "aligned to 64")], [], tensors,
                            alignment=64)
    out[os.path.basename(path)] = expected(path, kv, check_with_reader(path, kv, 3), 3,
                                           "identical")

    path = os.path.join(DATA, "gguf_v2.gguf")
    kv = write_with_gguf_py(path, [("test.u32", V.UINT32, 7)],
                            [("test.arr", Arr(V.STRING, ["v2", "file"]))],
                            [("v.f32", f32_tensor((2, 2)), None)])
    with open(path, "r+b") as f:
        f.seek(4)
        f.write(struct.pack("<I", 2))
    out[os.path.basename(path)] = expected(path, kv, check_with_reader(path, kv, 2), 2,
                                           "version3")

    path = os.path.join(DATA, "gguf_empty_arrays.gguf")
    kv = [
        ("general.architecture", V.STRING, "rlxtest"),
        ("test.empty_u8", V.ARRAY, Arr(V.UINT8, [])),
        ("test.empty_string", V.ARRAY, Arr(V.STRING, [])),
        ("test.empty_of_arrays", V.ARRAY, Arr(V.ARRAY, [])),
        ("test.empty_inside", V.ARRAY, Arr(V.ARRAY, [Arr(V.INT32, []), Arr(V.INT32, [7])])),
    ]
    write_by_hand(path, kv, [("e.f32", f32_tensor((2,)), Q.F32)])
    out[os.path.basename(path)] = expected(path, kv, check_with_reader(path, kv, 3), 3,
                                           "identical")

    write_fuzz_seeds(list(out))

    with open(os.path.join(DATA, "gguf_expected.json"), "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    for name in out:
        print(name, os.path.getsize(os.path.join(DATA, name)), "bytes")


if __name__ == "__main__":
    main()
