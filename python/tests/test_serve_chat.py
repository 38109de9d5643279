"""`rlx serve` answering /v1/chat/completions and /v1/completions through the official `openai`
client, on a tiny random decoder with a byte-level tokenizer and a ChatML template
(test_llama.write_tiny_chat: 2 layers, vocabulary 260, so a request costs milliseconds).

References: `rlx generate` of the same prompt, settings and seed (the server's answer must be
its text exactly: a slot's prefill has the shape of generate's, decode rows are independent of
the batch), and the server's own serial answers for the load test (continuous batching must not
change or mix up any answer). Every error case is checked on status and OpenAI error body."""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("gguf")
from test_llama import write_tiny_chat  # noqa: E402
from test_serve import Served, tool_path  # noqa: E402

pytestmark = pytest.mark.skipif(tool_path() is None, reason="needs the built rlx tool")

MODEL = "tiny-chat"
SLOT_CTX = 256  # --ctx 2048 over --parallel 8


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("chat") / "tiny.gguf"
    write_tiny_chat(path)
    return str(path)


@pytest.fixture(scope="module")
def long_tiny(tmp_path_factory) -> str:
    """The tiny decoder with context 4096: a request of 4000 tokens holds its slot for ~0.4 s
    on a fast CPU (the whole stream fits the loopback socket buffers, so a client that stops
    reading does not hold it back), long against the milliseconds a test takes to queue
    requests behind it."""
    path = tmp_path_factory.mktemp("chat") / "long_tiny.gguf"
    write_tiny_chat(path, context=4096)
    return str(path)


def serve(tiny: str, *args: str) -> Served:
    return Served(*args, model=["--model", tiny, "--model-name", MODEL])


@pytest.fixture(scope="module")
def server(tiny):
    s = serve(tiny, "--parallel", "8", "--ctx", str(8 * SLOT_CTX))
    yield s
    assert s.close() == 0


def generate(tiny: str, prompt: str, n: int, chat: bool = True, **flags) -> str:
    """`rlx generate`'s text (its stdout ends with one newline of its own)."""
    cmd = [str(tool_path()), "generate", "--model", tiny, "-p", prompt, "-n", str(n), "--ctx",
           str(SLOT_CTX)]
    if chat:
        cmd.append("--chat")
    for k, v in flags.items():
        cmd += ["--" + k.replace("_", "-"), str(v)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    assert out.endswith("\n")
    return out[:-1]


HOT = dict(temperature=1.3, top_p=0.9, seed=1234, presence_penalty=0.5, frequency_penalty=0.3)
HOT_FLAGS = dict(temp=1.3, top_p=0.9, seed=1234, presence_penalty=0.5, frequency_penalty=0.3)


def chat(client, content: str, **kw):
    return client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": content}], **kw)


def test_chat_and_completions_equal_rlx_generate(server, tiny):
    c = server.client
    greedy = chat(c, "Hello there", max_tokens=24, temperature=0)
    assert greedy.choices[0].message.content == generate(tiny, "Hello there", 24, temp=0)
    assert greedy.object == "chat.completion" and greedy.model == MODEL
    assert greedy.choices[0].finish_reason == "length"
    assert greedy.choices[0].message.role == "assistant"
    u = greedy.usage
    assert u.completion_tokens == 24 and u.total_tokens == u.prompt_tokens + 24
    sampled = chat(c, "Hello there", max_tokens=24, **HOT)
    assert sampled.choices[0].message.content == generate(tiny, "Hello there", 24, **HOT_FLAGS)
    assert sampled.choices[0].message.content != greedy.choices[0].message.content
    other = chat(c, "Hello there", max_tokens=24, **{**HOT, "seed": 99})
    assert other.choices[0].message.content != sampled.choices[0].message.content
    text = c.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=16, **HOT)
    assert text.object == "text_completion"
    assert text.choices[0].text == generate(tiny, "Once upon a time", 16, chat=False, **HOT_FLAGS)


def test_streaming_concatenates_to_the_answer(server):
    c = server.client
    whole = chat(c, "Stream me", max_tokens=30, **HOT).choices[0].message.content
    chunks = list(chat(c, "Stream me", max_tokens=30, stream=True,
                       stream_options={"include_usage": True}, **HOT))
    assert all(ch.object == "chat.completion.chunk" for ch in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 30
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks[:-1]) == whole
    pieces = list(c.completions.create(model=MODEL, prompt="Go", max_tokens=20, stream=True, **HOT))
    full = c.completions.create(model=MODEL, prompt="Go", max_tokens=20, **HOT).choices[0].text
    assert "".join(p.choices[0].text for p in pieces) == full
    assert pieces[-1].choices[0].finish_reason == "length"


def test_stop_strings_and_models(server):
    c = server.client
    full = chat(c, "Say something", max_tokens=40, **HOT).choices[0].message.content
    stop = full[len(full) // 2: len(full) // 2 + 2]
    cut = chat(c, "Say something", max_tokens=40, stop=[stop, "never there"], **HOT)
    assert cut.choices[0].message.content == full[: full.find(stop)]
    assert cut.choices[0].finish_reason == "stop"
    assert [m.id for m in c.models.list().data] == [MODEL]


def post(url: str, body: bytes | str, path: str = "/v1/chat/completions") -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else body.encode()
    req = urllib.request.Request(url + path, data=data,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


ERRORS = [  # body, status, param, code, words of the message
    ("{not json", 400, None, "invalid_json", "could not parse"),
    ('["a list"]', 400, None, None, "expected a JSON object"),
    ({"messages": [{"role": "user", "content": "x"}]}, 400, "model", None, "provide a model"),
    ({"model": 7, "messages": []}, 400, "model", None, "expected a string"),
    ({"model": MODEL}, 400, "messages", None, "'messages' is a required property"),
    ({"model": MODEL, "messages": []}, 400, "messages", None, "empty array"),
    ({"model": MODEL, "messages": "hi"}, 400, "messages", None, "expected an array"),
    ({"model": MODEL, "messages": [{"role": "tool", "content": "x"}]}, 400, "messages", None,
     "'tool'"),
    ({"model": MODEL, "messages": [{"role": "user", "content": 5}]}, 400, "messages", None,
     "expected a string or an array of text parts"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "temperature": "hot"}, 400,
     "temperature", None, "expected a number"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "temperature": 3}, 400,
     "temperature", None, "in [0, 2]"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, 400,
     "max_tokens", None, "expected an integer in [1,"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 2.5}, 400,
     "max_tokens", None, "expected an integer"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "stream": "yes"}, 400,
     "stream", None, "expected a boolean"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "stop": [1]}, 400, "stop",
     None, "expected a string"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "stop": list("abcde")}, 400,
     "stop", None, "at most 4"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "n": 2}, 400, "n",
     "unsupported_parameter", "n = 1"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "logprobs": True}, 400,
     "logprobs", "unsupported_parameter", "log probabilities"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}, 400,
     "top_logprobs", "unsupported_parameter", "log probabilities"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "frobnicate": 1}, 400,
     "frobnicate", None, "Unrecognized request argument"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "x" * 400}]}, 400, "messages",
     "context_length_exceeded", "maximum context length is 256 tokens"),
    ({"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]}, 404, "model",
     "model_not_found", "does not exist"),
]


@pytest.mark.parametrize("body,status,param,code,words", ERRORS,
                         ids=[f"{i}-{e[2]}-{e[4][:20]}" for i, e in enumerate(ERRORS)])
def test_errors_are_openai_error_objects(server, body, status, param, code, words):
    got_status, got = post(server.url, body if isinstance(body, str) else json.dumps(body))
    assert got_status == status, got
    err = got["error"]
    assert words in err["message"], err
    assert err["param"] == param and err["code"] == code, err
    assert err["type"] == "invalid_request_error"


def test_completions_errors_and_client_classes(server):
    status, got = post(server.url, json.dumps({"model": MODEL, "prompt": ["a", "b"]}),
                       "/v1/completions")
    assert status == 400 and "one prompt per request" in got["error"]["message"]
    status, got = post(server.url, json.dumps({"model": MODEL, "prompt": "a", "echo": True}),
                       "/v1/completions")
    assert status == 400 and got["error"]["param"] == "echo"
    status, got = post(server.url, json.dumps({"model": MODEL, "prompt": [1, 2, 999]}),
                       "/v1/completions")
    assert status == 400 and "prompt[2]" in got["error"]["message"]
    with pytest.raises(openai.BadRequestError) as e:
        chat(server.client, "x", n=3)
    assert e.value.status_code == 400 and e.value.code == "unsupported_parameter"
    with pytest.raises(openai.NotFoundError):
        server.client.chat.completions.create(model="nope", messages=[{"role": "user",
                                                                      "content": "x"}])


def test_load_8_streams_and_4_plain_equal_their_serial_answers(server):
    """Eight streaming and four non-streaming chats at once (greedy and sampled, distinct
    prompts and seeds, 8 slots, so requests wait and slots refill): each answer equals the one
    the same server gave it alone, nothing is dropped or mixed up, and RSS stays bounded."""
    c = server.client
    jobs = []
    for i in range(12):
        settings = {"temperature": 0} if i % 3 == 0 else {**HOT, "seed": 100 + i}
        jobs.append((f"request number {i}: tell me about {'cats' if i % 2 else 'dogs'}",
                     10 + i, settings, i < 8))
    serial = [chat(c, p, max_tokens=n, **s).choices[0].message.content for p, n, s, _ in jobs]
    assert len(set(serial)) > 6  # the prompts and seeds do give different answers
    rss_before = server.rss_kib()

    def run(job):
        p, n, s, stream = job
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0,
                               timeout=120)
        if not stream:
            return chat(client, p, max_tokens=n, **s).choices[0].message.content
        return "".join(ch.choices[0].delta.content or ""
                       for ch in chat(client, p, max_tokens=n, stream=True, **s))

    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
        answers = list(pool.map(run, jobs))
    for i, (got, want) in enumerate(zip(answers, serial)):
        assert got == want, f"request {i} differs from its serial answer"
    assert server.rss_kib() - rss_before < 64 * 1024
    m = server.metrics()
    assert "rlx_decode_batch_occupancy_bucket" in m
    occupancy = {line.split('le="')[1].split('"')[0]: float(line.split()[-1])
                 for line in m.splitlines() if line.startswith("rlx_decode_batch_occupancy_bucket")}
    assert occupancy["1"] < occupancy["8"], "decode steps never batched several slots"
    generated = float(next(line.split()[1] for line in m.splitlines()
                           if line.startswith("rlx_generated_tokens_total")))
    assert generated >= 2 * sum(n for _, n, _, _ in jobs)
    assert "rlx_time_to_first_token_seconds_count" in m
    assert 'rlx_queue_depth{model="tiny-chat"} 0' in m


def stream_raw(url: str, body: dict) -> http.client.HTTPResponse:
    host, port = url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.request("POST", "/v1/chat/completions", json.dumps({**body, "stream": True}),
                 {"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 200
    return r


def generated(s: Served) -> float:
    return float(next(line.split()[1] for line in s.metrics().splitlines()
                      if line.startswith("rlx_generated_tokens_total")))


def wait_for(s: Served, text: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while text not in s.metrics():
        assert time.monotonic() < deadline, f"metrics never showed {text!r}:\n{s.metrics()}"
        time.sleep(0.02)


def test_disconnect_frees_the_slot_and_the_queue_is_bounded(long_tiny):
    # 4000 tokens per request: 180 (context 256) took ~25 ms on a Zen 4 core, so the first
    # request could finish before the third was sent, and the queue was no longer full.
    s = serve(long_tiny, "--parallel", "1", "--max-queue", "2", "--ctx", "4096")
    try:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "go on"}],
                "max_tokens": 4000, "temperature": 0}
        r = stream_raw(s.url, body)
        r.readline()  # the first event: the request holds the only slot
        r2 = stream_raw(s.url, body)  # waits for the slot: the queue is now full
        wait_for(s, f'rlx_queue_depth{{model="{MODEL}"}} 2')
        with pytest.raises(openai.RateLimitError) as e:
            chat(s.client, "one too many", max_tokens=2)
        assert e.value.status_code == 429 and e.value.code == "queue_full"
        r.close()  # the client goes away: its slot is freed at the next token it cannot write
        r2.close()
        wait_for(s, f'rlx_queue_depth{{model="{MODEL}"}} 0')
        # Both were cut short (run to the end, they would have made 2 x 4000 tokens).
        assert generated(s) < 4000
        assert chat(s.client, "after", max_tokens=3).usage.completion_tokens == 3
    finally:
        assert s.close() == 0


def test_timeout_and_sigterm_drain(tiny):
    s = serve(tiny, "--parallel", "1", "--ctx", "256", "--timeout-ms", "1")
    try:
        with pytest.raises(openai.APIStatusError) as e:
            chat(s.client, "slow", max_tokens=200)
        assert e.value.status_code == 504 and e.value.code == "timeout"
    finally:
        assert s.close() == 0
    s = serve(tiny, "--parallel", "2", "--ctx", "512")
    want = chat(s.client, "drain me", max_tokens=60, temperature=0).choices[0].message.content
    r = stream_raw(s.url, {"model": MODEL, "messages": [{"role": "user", "content": "drain me"}],
                           "max_tokens": 60, "temperature": 0})
    r.readline()
    s.proc.send_signal(signal.SIGTERM)  # while the stream runs: it must still end whole
    events = [line[6:] for line in r.read().decode().splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    got = "".join(json.loads(e)["choices"][0]["delta"].get("content", "") for e in events[:-1])
    assert got == want
    assert s.proc.wait(timeout=30) == 0
    assert "SIGTERM, finishing the requests in flight" in s.proc.stderr.read()
    s.close()


def test_f16_cache_serves_what_rlx_generate_writes(tiny):
    """--cache-type f16: the server's slots hold an f16 KV cache, and a greedy and a sampled
    answer equal `rlx generate --cache-type f16` of the same prompt and seed."""
    s = serve(tiny, "--parallel", "2", "--ctx", str(2 * SLOT_CTX), "--cache-type", "f16")
    try:
        greedy = chat(s.client, "Hello there", max_tokens=16, temperature=0)
        assert greedy.choices[0].message.content == generate(
            tiny, "Hello there", 16, temp=0, cache_type="f16")
        hot = chat(s.client, "Tell me", max_tokens=16, **HOT)
        assert hot.choices[0].message.content == generate(
            tiny, "Tell me", 16, cache_type="f16", **HOT_FLAGS)
    finally:
        assert s.close() == 0
