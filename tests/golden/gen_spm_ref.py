"""Reference ids for BpeTokenizer's SentencePiece mode (tokenizer.ggml.model "llama"):
tests/golden/spm_ref.json.

Trains a tiny SentencePiece BPE model with the `sentencepiece` package, with Llama's settings
(identity normalization, a dummy space prefix, no whitespace clean-up, byte fallback, digits
split), on a small corpus written here, and stores its vocabulary as GGUF's tokenizer.ggml.*
arrays (tokens, scores, token_type: sentencepiece's piece types, which llama.cpp's converter
copies) together with sentencepiece's own ids for a varied corpus (code, emoji, CJK, numbers,
whitespace runs). The C++ test writes the vocabulary into a GGUF in memory and compares ids.

"special" ids (parse_special): llama.cpp's rule, which HF's Llama tokenizer (legacy) follows:
the text is cut at the control and unknown tokens, each is its id, and each piece of text is encoded by
sentencepiece on its own, with the dummy space prefix when it is first or follows a control
token. The per-piece ids are sentencepiece's.

Run: python3 -m venv /tmp/v && /tmp/v/bin/pip install sentencepiece==0.2.3 &&
     /tmp/v/bin/python tests/golden/gen_spm_ref.py
"""
import io
import json
import os

import sentencepiece as spm

assert spm.__version__ == "0.2.3", spm.__version__

TRAIN = """\
The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away.
Tokenizers split text into pieces. A piece is a word, a part of a word, or a single character.
Merges are applied by score: the pair whose merged piece has the highest score goes first.
def tokenize(text):
    return [piece for piece in text.split() if piece]
for i in range(10):
    print(i * 2, i ** 2)
if (a && b) { c[i] = d->e; } else { return -1; }
naive cafe resume facade: naïve café résumé façade, über straße
Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 2024 3.14159 1e-10
Hello world! Hello, world? hello there, general. HELLO WORLD.
In the beginning the universe was created. This has made a lot of people very angry.
It was the best of times, it was the worst of times, it was the age of wisdom.
Once upon a time, in a small village by the sea, there lived an old fisherman.
""" * 20

SPECIALS = ["<unk>", "<s>", "</s>"]


def train():
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(TRAIN.splitlines()), model_writer=model, model_type="bpe",
        vocab_size=420, character_coverage=1.0, byte_fallback=True, split_digits=True,
        normalization_rule_name="identity", add_dummy_prefix=True,
        remove_extra_whitespaces=False, allow_whitespace_only_pieces=True,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, num_threads=1, minloglevel=2)
    return spm.SentencePieceProcessor(model_proto=model.getvalue())


def piece_type(sp, i):
    if sp.IsUnknown(i):
        return 2
    if sp.IsControl(i):
        return 3
    if sp.IsByte(i):
        return 6
    if sp.IsUnused(i):
        return 5
    return 1


def corpus():
    return [
        "", " ", "  ", "Hello world", "Hello, world!  How are you?", " leading space",
        "The quick brown fox jumps over the lazy dog.", "trailing spaces   ",
        "a  b   c    d", "line one\nline two\r\nline three\n\n  indented\n", "\t\ttabs\t",
        "12345 67 8.9 3,141,592 1e-10 0x1F", "2024-12-02T11:55:00Z",
        "naïve café résumé Ångström façade", "Straße groß Œuvre",
        "日本語のテキストです。中文文本。한국어 텍스트", "emoji 😀👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️",
        "Привет, мир! Ελληνικά עברית العربية हिन्दी",
        "def f(x):\n    return x ** 2  # square\n", "if (a && b) { c[i] = d->e; }\t// done",
        "<html><body class=\"x\">&amp;</body></html>", "supercalifragilisticexpialidocious",
        "x" * 200, " " * 50 + "end", "!" * 30, "a\u00a0b\u2003c\u3000d", "\u0000 \u0007 \u007f",
        "▁ already escaped ▁▁", "unseen: zqxj ~ ` ^ |", "<s> and </s> as text",
    ]


def main():
    sp = train()
    n = sp.GetPieceSize()
    tokens = [sp.IdToPiece(i) for i in range(n)]
    scores = [sp.GetScore(i) for i in range(n)]
    types = [piece_type(sp, i) for i in range(n)]
    control = {tokens[i]: i for i in range(n) if types[i] in (2, 3)}  # llama.cpp matches <unk> too

    def special_ids(text):
        # Every piece of text is first or follows a control token, so each gets the prefix.
        ids, i, start = [], 0, 0
        while True:
            hit = next((c for c in sorted(control, key=len, reverse=True)
                        if text.startswith(c, i)), None) if i < len(text) else None
            if hit is None and i < len(text):
                i += 1
                continue
            if start < i:
                ids += sp.EncodeAsIds(text[start:i])
            if hit is None:
                return ids
            ids.append(control[hit])
            i += len(hit)
            start = i

    cases = []
    texts = corpus() + [f"<s>{t}</s>" for t in ["Hi there", " two", "x</s><s>y", "a<unk>b "]]
    for text in texts:
        plain = sp.EncodeAsIds(text)
        cases.append({"text_hex": text.encode("utf-8").hex(), "plain": plain,
                      "special": special_ids(text)})
    out = {"generator": "tests/golden/gen_spm_ref.py", "sentencepiece": spm.__version__,
           "tokens": tokens, "scores": scores, "token_type": types,
           "bos_token_id": 1, "eos_token_id": 2, "unknown_token_id": 0, "cases": cases}
    dest = os.path.join(os.path.dirname(os.path.abspath(__file__)), "spm_ref.json")
    with open(dest, "w") as f:
        json.dump(out, f, separators=(",", ":"), ensure_ascii=False)
        f.write("\n")
    print(f"{dest}: {n} tokens, {len(cases)} cases")


if __name__ == "__main__":
    main()
