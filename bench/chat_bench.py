#!/usr/bin/env python3
"""Aggregate decode throughput of POST /v1/chat/completions with 1, 4 and 8 concurrent
streaming chats: `rlx serve` (continuous batching over --parallel slots) against
llama-cpp-python's OpenAI-compatible server (`python3 -m llama_cpp.server`, when installed) on
the same GGUF (SmolLM2-135M-Instruct Q4_1 by default) and the same number of threads, in one run.

Each client thread sends `--rounds` chats one after another (distinct prompts asking for long
answers, greedy, max_tokens `--max-tokens`), streamed over its own keep-alive connection and
read as server-sent events. A cell's throughput is the completion tokens of every chat (each
server's usage counts) over the cell's wall time; TTFT is from sending a request to its first
content event. Each server gets one untimed chat per cell first (rlx compiles its prefill and
decode executables then). rlx runs with --parallel equal to the concurrency; the peer as
llama-cpp-python serves (one sequence at a time; --interrupt_requests False, else each new
request ends the stream in progress and the table would count the truncated chats). Prints the CPU, the load average and the
table.

Usage: python3 bench/chat_bench.py [--tool build/rlx] [--model FILE.gguf] [--threads 2]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_bench import cpu_description  # noqa: E402

TOPICS = ["the history of Rome", "how rivers form", "a day in the life of a cat",
          "the rules of chess", "why the sky is blue", "how bread is baked", "the planets",
          "a trip to the mountains", "how computers add numbers", "the life of bees"]


def default_model() -> str:
    if os.environ.get("RLX_LLM_MODEL"):
        return os.environ["RLX_LLM_MODEL"]
    import rlx
    return rlx._core.default_llm_gguf_path()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port: int, proc: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/v1/models")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit("the server did not come up")


def start_rlx(tool: str, model: str, threads: int, parallel: int, ctx: int):
    port = free_port()
    # OMP_WAIT_POLICY from the caller's environment, else passive (a server shares its cores)
    env = {"OMP_WAIT_POLICY": "passive", **os.environ, "RLX_NUM_THREADS": str(threads)}
    p = subprocess.Popen([tool, "serve", "--model", model, "--model-name", "m", "--port",
                          str(port), "--parallel", str(parallel), "--ctx", str(ctx * parallel),
                          "--threads", str(threads)], stdout=subprocess.DEVNULL, env=env)
    wait_ready(port, p)
    return p, port


def start_peer(model: str, threads: int, ctx: int):
    port = free_port()
    p = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", model,
                          "--model_alias", "m", "--port", str(port), "--n_threads", str(threads),
                          "--n_threads_batch", str(threads), "--n_ctx", str(ctx),
                          # its default cuts a running stream short when a new request arrives
                          "--interrupt_requests", "False"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_ready(port, p)
    return p, port


def chat(conn: http.client.HTTPConnection, prompt: str, max_tokens: int) -> tuple[int, float]:
    """One streamed greedy chat: (completion tokens, seconds to the first content event)."""
    body = {"model": "m", "messages": [{"role": "user", "content": prompt}], "stream": True,
            "stream_options": {"include_usage": True}, "max_tokens": max_tokens,
            "temperature": 0}
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", json.dumps(body),
                 {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"status {r.status}: {r.read()[:200]!r}")
    ttft, tokens, pieces = None, None, 0
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        data = line[6:]
        if data == b"[DONE]":
            break
        event = json.loads(data)
        if event.get("usage"):
            tokens = event["usage"]["completion_tokens"]
        for c in event.get("choices", []):
            if c.get("delta", {}).get("content"):
                pieces += 1
                if ttft is None:
                    ttft = time.perf_counter() - t0
    r.read()
    # A server that sends no usage in the stream: one event per token.
    return (tokens if tokens is not None else pieces), (ttft or 0.0)


def step_seconds(port: int) -> str:
    """rlx's decode-step count and mean duration from /metrics (empty for the peer)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    r = conn.getresponse()
    if r.status != 200:
        return ""
    text = r.read().decode()
    values = {}
    for line in text.splitlines():
        for key in ("rlx_chat_step_duration_seconds_sum", "rlx_chat_step_duration_seconds_count"):
            if line.startswith(key + '{kind="decode"}'):
                values[key] = float(line.split()[-1])
    if len(values) < 2:
        return ""
    n = values["rlx_chat_step_duration_seconds_count"]
    return f"{n:.0f} decode steps of {1000 * values['rlx_chat_step_duration_seconds_sum'] / n:.1f} ms"


def cell(port: int, concurrency: int, rounds: int, max_tokens: int) -> dict:
    results: list[tuple[int, float]] = []
    lock = threading.Lock()

    def client(c: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        for k in range(rounds):
            topic = TOPICS[(c * rounds + k) % len(TOPICS)]
            out = chat(conn, f"Write a long, detailed essay about {topic}.", max_tokens)
            with lock:
                results.append(out)

    # Warm up: every prompt of the cell once (rlx compiles the prefill of each length bucket).
    warm = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    for c in range(concurrency):
        for k in range(rounds):
            topic = TOPICS[(c * rounds + k) % len(TOPICS)]
            chat(warm, f"Write a long, detailed essay about {topic}.", 2)
    threads = [threading.Thread(target=client, args=(c,)) for c in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    tokens = sum(n for n, _ in results)
    ttfts = sorted(t for _, t in results)
    return {"tokens": tokens, "seconds": seconds, "tok_s": tokens / seconds,
            "ttft_p50": ttfts[len(ttfts) // 2], "chats": len(results),
            "steps": step_seconds(port)}


def stop(p: subprocess.Popen) -> None:
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tool", default=str(Path(__file__).resolve().parents[1] / "build" / "rlx"))
    ap.add_argument("--model", default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=512, help="KV positions per sequence")
    ap.add_argument("--concurrency", default="1,4,8")
    args = ap.parse_args()
    model = args.model or default_model()
    levels = [int(c) for c in args.concurrency.split(",")]
    print(cpu_description())
    print(f"model {model}, {args.threads} threads, {args.rounds} chats per client, "
          f"max_tokens {args.max_tokens}, greedy, load average {os.getloadavg()[0]:.1f}")
    rows = []
    for c in levels:
        p, port = start_rlx(args.tool, model, args.threads, c, args.ctx)
        try:
            rows.append(("rlx serve", c, cell(port, c, args.rounds, args.max_tokens)))
        finally:
            stop(p)
    try:
        import llama_cpp  # noqa: F401
        import llama_cpp.server  # noqa: F401
        have_peer = True
    except ImportError as e:
        have_peer = False
        print(f"llama-cpp-python's server is not installed ({e}): no peer column")
    if have_peer:
        p, port = start_peer(model, args.threads, args.ctx)
        try:
            for c in levels:
                rows.append(("llama_cpp.server", c, cell(port, c, args.rounds, args.max_tokens)))
        finally:
            stop(p)
    print(f"\n| server | concurrent chats | completion tokens | seconds | aggregate tok/s | "
          f"TTFT p50 ms | decode steps (whole run) |")
    print("|---|---|---|---|---|---|---|")
    for name, c, r in rows:
        print(f"| {name} | {c} | {r['tokens']} | {r['seconds']:.1f} | {r['tok_s']:.1f} | "
              f"{1000 * r['ttft_p50']:.0f} | {r['steps']} |")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
