#!/usr/bin/env python3
"""SmolLM2 (or any Llama-family GGUF) on rlx against llama.cpp (llama-cpp-python) on the same
file, the same threads and the same machine, in one run (issue 15's table and parity figures).

Speed: prompt processing of a 128-token prompt and greedy decode of 128 tokens, tok/s, at 1 and
2 threads (--threads). Each runtime is warmed up first (rlx compiles its step executables then),
then the two alternate round by round (rlx, llama.cpp, rlx, ...) so that load on a shared
machine hits both alike; the table gives each one's best round and the ratio rlx / llama.cpp
(> 1: rlx is faster). Decode is also given as a fraction of its memory-bandwidth bound: the
bytes a token streams (the file's tensor bytes, plus rlx's KV cache read at the mean position:
4 bytes per element with --cache-type f32, 2 with f16, llama.cpp's default) over the memcpy
bandwidth measured in the same run.

Parity (--parity): for a few prompts llama.cpp decodes greedily, keeping its logits at every
step; rlx runs one full forward over the prompt and llama.cpp's tokens. Reported per prompt: the
max |dlogit| over the steps, the steps where top-1 differs although llama.cpp's top-2 margin is
above 0.5, and how many tokens rlx's own greedy continuation shares with llama.cpp's before the
first step whose margin is below 0.5 (llama.cpp quantizes activations to 8 bits and keeps
attention in f16, so its logits differ from an exact forward by up to ~1).

Usage: PYTHONPATH=build/python python3 bench/llm_peers.py [--models a.gguf,b.gguf]
       [--threads 1,2] [--rounds 3] [--parity] [--cache-type f32|f16]
llama-cpp-python is a benchmark peer, never a CI dependency: build it on the benchmark machine
with CMAKE_ARGS=-DGGML_NATIVE=ON MAKEFLAGS=-j2 pip install llama-cpp-python (~15 min on 2 cores).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from serve_bench import cpu_description  # noqa: E402

PROMPT_TOKENS = 128
DECODE_TOKENS = 128
PARITY_PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n",
    "Once upon a time, in a small village by the sea,",
    "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n",
]


def memcpy_gbs() -> float:
    """Best of 5 copies of a 256 MiB buffer, read + write bytes per second (as rlx_bench_llm)."""
    a = np.ones(256 << 20, np.uint8)
    b = np.empty_like(a)
    best = 0.0
    for _ in range(5):
        t = time.perf_counter()
        np.copyto(b, a)
        best = max(best, 2 * a.nbytes / (time.perf_counter() - t) / 1e9)
    return best


def bench_prompt(tokenize) -> list[int]:
    """A 128-token prompt of ordinary prose (tokenize: text -> ids)."""
    text = ("The history of the river valley is a long one. Farmers came first, then traders, "
            "and the town grew along the water where the boats could land. ") * 20
    ids = tokenize(text)
    assert len(ids) >= PROMPT_TOKENS, len(ids)
    return ids[:PROMPT_TOKENS]


class RlxRunner:
    name = "rlx"

    def __init__(self, path: str, threads: int, cache_type: str):
        import rlx
        import rlx.models
        rlx.set_num_threads(threads)
        self.llm = rlx.models.LLM(path, ctx=512, bucket=PROMPT_TOKENS, cache_type=cache_type)

    def tokenize(self, text: str) -> list[int]:
        return self.llm.tokenize(text, True, True)

    def run(self, prompt: list[int]) -> tuple[float, float]:
        """(prompt tok/s, decode tok/s) of one generate from an empty cache."""
        self.llm.reset()
        self.llm.generate(prompt, max_tokens=DECODE_TOKENS, stop_at_eos=False)
        s = self.llm.last_stats
        assert s["generated_tokens"] == DECODE_TOKENS, s
        # the first new token is picked from the prefill's logits: the rest are decode steps
        return s["prompt_tokens"] / s["prefill_seconds"], \
            (DECODE_TOKENS - 1) / s["decode_seconds"]


class LlamaCppRunner:
    name = "llama.cpp"

    def __init__(self, path: str, threads: int):
        import llama_cpp
        self.llm = llama_cpp.Llama(model_path=path, n_ctx=512, n_batch=512, n_ubatch=512,
                                   n_threads=threads, n_threads_batch=threads,
                                   logits_all=False, verbose=False)

    def tokenize(self, text: str) -> list[int]:
        return self.llm.tokenize(text.encode(), add_bos=True, special=True)

    def last_logits(self) -> np.ndarray:
        """The logits of the last evaluated token (with logits_all=False llama-cpp-python keeps
        no scores: read llama.cpp's own buffer, which holds the batch's last row)."""
        n_vocab = self.llm.n_vocab()
        return np.ctypeslib.as_array(self.llm._ctx.get_logits(), shape=(n_vocab,)).copy()

    def run(self, prompt: list[int]) -> tuple[float, float]:
        self.llm.reset()
        self.llm._ctx.kv_cache_clear()
        t = time.perf_counter()
        self.llm.eval(prompt)
        pp = len(prompt) / (time.perf_counter() - t)
        tok = int(np.argmax(self.last_logits()))
        t = time.perf_counter()
        for _ in range(DECODE_TOKENS - 1):
            self.llm.eval([tok])
            tok = int(np.argmax(self.last_logits()))
        return pp, (DECODE_TOKENS - 1) / (time.perf_counter() - t)

    def greedy(self, prompt: list[int], n: int) -> tuple[list[int], np.ndarray]:
        """n greedy tokens and llama.cpp's logits at each step [n, vocab]."""
        self.llm.reset()
        self.llm._ctx.kv_cache_clear()
        self.llm.eval(prompt)
        ids, rows = [], []
        for _ in range(n):
            row = self.last_logits()
            rows.append(row)
            ids.append(int(np.argmax(row)))
            self.llm.eval([ids[-1]])
        return ids, np.stack(rows)


def speed(path: str, threads: int, rounds: int, cache_type: str) -> dict:
    runners = [RlxRunner(path, threads, cache_type), LlamaCppRunner(path, threads)]
    prompt = bench_prompt(runners[0].tokenize)
    for r in runners:  # warm-up (rlx compiles its prefill and decode executables)
        r.run(prompt)
    best = {r.name: [0.0, 0.0] for r in runners}
    for _ in range(rounds):
        for r in runners:
            pp, tg = r.run(prompt)
            best[r.name] = [max(best[r.name][0], pp), max(best[r.name][1], tg)]
    llm = runners[0].llm
    cfg = llm.config
    # rlx's K and V rows per position (llama.cpp keeps f16: with an f32 cache its bound is a
    # little higher)
    element = 2 if cache_type == "f16" else 4
    kv_per_pos = 2 * cfg["block_count"] * cfg["head_count_kv"] * cfg["key_length"] * element
    mean_pos = PROMPT_TOKENS + DECODE_TOKENS / 2
    token_bytes = llm.weight_bytes + kv_per_pos * mean_pos
    return {"best": best, "token_bytes": token_bytes}


def parity(path: str, n: int, cache_type: str) -> None:
    import rlx.models
    rl = rlx.models.LLM(path, ctx=512, cache_type=cache_type)
    lc = LlamaCppRunner(path, 2)
    print(f"\nparity with llama.cpp, {n} greedy steps per prompt (margin: llama.cpp's top-2 gap), "
          f"rlx cache {cache_type}")
    for text in PARITY_PROMPTS:
        prompt = rl.tokenize(text, True, True)
        assert prompt == lc.tokenize(text), "the tokenizers disagree on the prompt"
        ids, ref = lc.greedy(prompt, n)
        got = rl.logits(np.array(prompt + ids[:-1], np.int32))[len(prompt) - 1:]
        top2 = np.sort(ref, axis=1)[:, -2:]
        margin = top2[:, 1] - top2[:, 0]
        dmax = float(np.abs(got - ref).max())
        confident = margin > 0.5
        top1_bad = int(np.sum((got.argmax(1) != ref.argmax(1)) & confident))
        rl.reset()
        rl.generate(prompt, max_tokens=n, stop_at_eos=False)
        own = rl.last_ids
        first_tie = int(np.argmax(~confident)) if (~confident).any() else n
        shared = next((i for i in range(n) if i >= len(own) or own[i] != ids[i]), n)
        print(f"  {text[:40]!r:44s} max |dlogit| {dmax:5.3f}  top-1 differs at a margin > 0.5: "
              f"{top1_bad} of {int(confident.sum())}  greedy equal for {shared} tokens "
              f"(first margin < 0.5 at step {first_tie})")
        if shared < first_tie:
            print(f"    DIFFERS before the first near tie: rlx {own[:first_tie]} llama.cpp "
                  f"{ids[:first_tie]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="", help="comma-separated GGUF files (default: SmolLM2 Q4_1)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--parity", action="store_true")
    ap.add_argument("--parity-steps", type=int, default=32)
    ap.add_argument("--cache-type", default="f32", choices=["f32", "f16"],
                    help="rlx's KV cache (LLM cache_type; llama.cpp keeps its default, f16)")
    args = ap.parse_args()
    import rlx
    models = [m for m in args.models.split(",") if m] or [rlx._core.default_llm_gguf_path()]
    print(cpu_description())
    print(f"load average {os.getloadavg()}")
    bw = memcpy_gbs()
    print(f"memcpy bandwidth {bw:.1f} GB/s (read + write)")
    rows = []
    for path in models:
        for t in [int(x) for x in args.threads.split(",") if x]:  # "": parity only
            r = speed(path, t, args.rounds, args.cache_type)
            b = r["best"]
            bound = bw * 1e9 / r["token_bytes"]
            rows.append((os.path.basename(path), t, b, bound))
            print(f"  {os.path.basename(path)} {t} thr: rlx pp {b['rlx'][0]:.1f} tg {b['rlx'][1]:.1f}"
                  f"  llama.cpp pp {b['llama.cpp'][0]:.1f} tg {b['llama.cpp'][1]:.1f} tok/s",
                  flush=True)
    if rows:
        print(f"load average {os.getloadavg()}")
        print("\n| model | threads | rlx prompt tok/s | llama.cpp prompt tok/s | rlx / llama.cpp "
              "| rlx decode tok/s | llama.cpp decode tok/s | rlx / llama.cpp | rlx decode / bound "
              "| llama.cpp decode / bound |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name, t, b, bound in rows:
            (rp, rt), (lp, lt) = b["rlx"], b["llama.cpp"]
            print(f"| {name} | {t} | {rp:.1f} | {lp:.1f} | {rp / lp:.2f} | {rt:.1f} | {lt:.1f} | "
                  f"{rt / lt:.2f} | {rt / bound:.0%} | {lt / bound:.0%} |")
        bounds = {name: bound for name, _, _, bound in rows}
        print("(bound: memcpy bandwidth / bytes per decoded token: " +
              ", ".join(f"{n} {b:.0f} tok/s" for n, b in bounds.items()) + ")")
    if args.parity:
        for path in models:
            parity(path, args.parity_steps, args.cache_type)


if __name__ == "__main__":
    main()
