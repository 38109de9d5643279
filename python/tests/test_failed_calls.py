"""Failed calls change nothing the caller passed: numpy arrays given to run / set_param keep
their bytes, shape, dtype, strides and flags when the call raises, a failed compile leaves the
graph as it was, and the executable still gives its first results bit for bit. Also the
memory limit of compile (memory_limit=, RLX_MEMORY_LIMIT)."""

from __future__ import annotations

import numpy as np
import pytest

import rlx


def graph():
    g = rlx.Graph("unchanged")
    x = g.input("x", (2, 3))
    y = g.input("y", (3,), "i32")
    w = g.param("w", (3, 4))
    g.outputs((x + g.convert(y, "f32")) @ w, x * 2)
    return g


def snapshot(a):
    return (a.tobytes(), a.shape, a.dtype, a.strides, a.flags.writeable, a.flags.c_contiguous,
            a.ctypes.data)


def test_failed_run_and_set_param_leave_arrays_unchanged():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    y = rng.integers(-5, 5, 3).astype(np.int32)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    bad = {
        "x_f64": x.astype(np.float64),
        "x_t": np.ascontiguousarray(x.T),
        "x_strided": rng.standard_normal((2, 6)).astype(np.float64)[:, ::2],  # copied, not viewed
        "y_2d": y.reshape(1, 3).copy(),
        "w_t": np.ascontiguousarray(w.T),
        "w_f16": w.astype(np.float16),
        "w_strided": rng.standard_normal((4, 6)).astype(np.float32)[:, ::2],
    }
    arrays = {"x": x, "y": y, "w": w, **bad}
    before = {k: snapshot(v) for k, v in arrays.items()}

    g = graph()
    text = str(g)
    exe = rlx.Session().compile(g)
    with pytest.raises(rlx.Error, match=r"param 'w' \(f32\[3,4\]\) was never set"):
        exe.run(x=x, y=y)
    exe.set_param("w", w)
    first = exe.run(x=x, y=y)
    np.testing.assert_allclose(first[0], (x + y.astype(np.float32)) @ w, rtol=1e-5, atol=1e-5)

    calls = [
        (r"expected f32\[2,3\], got f64\[2,3\]", lambda: exe.run(x=bad["x_f64"], y=y)),
        (r"expected f32\[2,3\], got f32\[3,2\]", lambda: exe.run(x=bad["x_t"], y=y)),
        (r"expected f32\[2,3\], got f64\[2,3\]", lambda: exe.run(x=bad["x_strided"], y=y)),
        (r"expected i32\[3\], got i32\[1,3\]", lambda: exe.run({"x": x, "y": bad["y_2d"]})),
        (r"expected i32\[3\], got i32\[1,3\]", lambda: exe.run(x, bad["y_2d"])),
        (r"unknown input 'z'", lambda: exe.run(x=x, y=y, z=x)),
        (r"missing input 'y'", lambda: exe.run(x=x)),
        (r"input 'x' given twice", lambda: exe.run(x, x=x)),
        (r"3 positional inputs for a graph with 2", lambda: exe.run(x, y, x)),
        (r"set_param 'w': expected f32\[3,4\], got f32\[4,3\]",
         lambda: exe.set_param("w", bad["w_t"])),
        (r"set_param 'w': expected f32\[3,4\], got f16\[3,4\]",
         lambda: exe.set_param("w", bad["w_f16"])),
        (r"set_param 'w': expected f32\[3,4\], got f32\[4,3\]",
         lambda: exe.set_param("w", bad["w_strided"])),
        (r"unknown param 'v'", lambda: exe.set_param("v", w)),
        (r"planned memory .* exceeds the limit", lambda: rlx.Session().compile(g, memory_limit=64)),
        (r"memory_limit must be a positive int", lambda: rlx.Session().compile(g, memory_limit=0)),
        (r"memory_limit: expected a positive byte count",
         lambda: rlx.Session().compile(g, memory_limit="lots")),
    ]
    for message, call in calls:
        with pytest.raises(rlx.Error, match=message):
            call()
        for k, v in arrays.items():
            assert snapshot(v) == before[k], f"{k} changed by a call failing with {message!r}"
        assert str(g) == text
        again = exe.run(x=x, y=y)
        for a, b in zip(again, first):
            assert a.tobytes() == b.tobytes(), message


def test_memory_limit_option_and_environment(monkeypatch):
    monkeypatch.delenv("RLX_MEMORY_LIMIT", raising=False)
    g = rlx.Graph("four_mib")
    g.outputs(g.exp(g.input("x", (1024, 1024))))
    with pytest.raises(rlx.Error) as e:
        rlx.Session().compile(g, memory_limit="2M")
    assert str(e.value).startswith(
        "cpu backend: planned memory 8.0 MiB (arena 4.0 MiB, params 0.0 MiB, constants 0.0 MiB, "
        "outputs 4.0 MiB; ")
    assert "exceeds the limit 2.0 MiB (2097152 bytes" in str(e.value)
    exe = rlx.Session().compile(g, memory_limit=64 << 20)
    assert exe.run(x=np.zeros((1024, 1024), np.float32))[0, 0] == 1.0

    monkeypatch.setenv("RLX_MEMORY_LIMIT", "1M")
    with pytest.raises(rlx.Error, match=r"exceeds the limit 1.0 MiB"):
        rlx.Session().compile(g)
    rlx.Session().compile(g, memory_limit="1G")  # the option wins over the variable
    monkeypatch.setenv("RLX_MEMORY_LIMIT", "8X")
    with pytest.raises(rlx.Error, match=r"^RLX_MEMORY_LIMIT: expected a positive byte count"):
        rlx.Session().compile(g)

    for bad in (True, -1, 2**70, 1.5):
        with pytest.raises(rlx.Error, match="memory_limit must be a positive int"):
            rlx.Session().compile(g, memory_limit=bad)


def test_terabyte_graph_is_rejected_at_compile(monkeypatch):
    monkeypatch.delenv("RLX_MEMORY_LIMIT", raising=False)
    g = rlx.Graph("tera")
    g.outputs(g.exp(g.input("x", (1 << 20, 1 << 20))))
    with pytest.raises(rlx.Error, match=r"outputs 4194304\.0 MiB; .*physical memory"):
        rlx.Session().compile(g)
