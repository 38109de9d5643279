#!/usr/bin/env python3
"""BpeTokenizer vs Hugging Face tokenizers: builds a ~1 MB corpus (this repository's Markdown,
C++ and Python files as documents, plus the multilingual texts of tests/golden/gen_bpe_ref.py),
times HF's encode of each document (single thread, best of 3), runs build/rlx_bench_bpe on the
same corpus and checks that every document's ids are identical.
Usage: python3 bench/bpe_peer.py [build dir]"""
import glob
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "golden"))
import gen_bpe_ref  # noqa: E402  (the same HF tokenizer as the golden data)


def corpus(specials, limit=1_000_000):
    docs = [t for t in gen_bpe_ref.corpus(specials) if "<" not in t and "\0" not in t] * 20
    size = sum(len(d.encode()) for d in docs)
    for pattern in ("**/*.md", "src/**/*.cc", "include/**/*.h", "python/**/*.py"):
        for path in sorted(glob.glob(os.path.join(ROOT, pattern), recursive=True)):
            if "/build" in path or size >= limit:
                continue
            text = open(path, encoding="utf-8", errors="replace").read()
            docs.append(text)
            size += len(text.encode())
    return docs


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
    path = gen_bpe_ref.model_path()
    tok, specials = gen_bpe_ref.build(path, False)
    docs = corpus(specials)
    data = "\0".join(docs).encode()
    best = 1e30
    for _ in range(3):
        t0 = time.perf_counter()
        hf = [tok.encode(d, add_special_tokens=False).ids for d in docs]
        best = min(best, time.perf_counter() - t0)
    print(f"HF tokenizers {gen_bpe_ref.tokenizers.__version__}: {len(docs)} docs, {len(data)} "
          f"bytes, {sum(map(len, hf))} ids, {best:.3f} s, {len(data) / 1e6 / best:.2f} MB/s")
    with tempfile.TemporaryDirectory() as tmp:
        cpath, ipath = os.path.join(tmp, "corpus"), os.path.join(tmp, "ids")
        open(cpath, "wb").write(data)
        subprocess.run([os.path.join(build, "rlx_bench_bpe"), cpath, ipath, path], check=True)
        mine = [[int(x) for x in line.split()] for line in open(ipath).read().split("\n")[:-1]]
    bad = [i for i, (a, b) in enumerate(zip(hf, mine)) if a != b]
    if len(mine) != len(hf) or bad:
        sys.exit(f"ids differ: {len(mine)} vs {len(hf)} docs, first differing docs {bad[:5]}")
    print(f"ids identical on all {len(docs)} documents")


if __name__ == "__main__":
    main()
