"""The embedded server's prompt cache is bounded by what its entries really hold.

llama-cpp-python's ``LlamaRAMCache`` counts only the KV bytes of each saved state, while
every state also carries a copy of the logits buffer (``n_batch x n_vocab`` floats, about
100 MB for SmolLM2); ``CompactRAMCache`` drops that copy (a restored state is decoded again
before sampling) and counts every byte."""

from __future__ import annotations

import numpy as np
import pytest

from trajsynth.llm.chat_handler import CompactRAMCache

llama = pytest.importorskip("llama_cpp.llama")

VOCAB = 2_000
BATCH = 512


def _state(n_tokens: int, kv_bytes: int) -> object:
    return llama.LlamaState(
        input_ids=np.arange(4096, dtype=np.intc),
        scores=np.ones((min(n_tokens, BATCH), VOCAB), dtype=np.single),
        n_tokens=n_tokens,
        llama_state=b"\0" * kv_bytes,
        llama_state_size=kv_bytes,
        seed=0,
    )


def test_entries_drop_the_logits_copy_and_count_every_byte() -> None:
    cache = CompactRAMCache.make(capacity_bytes=10 * 2**20)
    cache[[1, 2, 3]] = _state(600, kv_bytes=100_000)
    (entry,) = cache.cache_state.values()
    assert entry.scores.shape == (1, VOCAB)  # was (512, 2000): 4 MB
    assert cache.cache_size == 100_000 + VOCAB * 4 + 4096 * 4


def test_the_capacity_holds_over_many_prompts() -> None:
    capacity = 2 * 2**20
    cache = CompactRAMCache.make(capacity_bytes=capacity)
    for i in range(50):
        cache[[i, i + 1, i + 2]] = _state(600, kv_bytes=200_000)
        assert cache.cache_size <= capacity
    assert 5 <= len(cache.cache_state) <= 10
    # the newest prompt is still there, found by its longest prefix
    assert cache[[49, 50, 51, 52]].n_tokens == 600


def test_a_restored_entry_fills_the_logits_rows_it_is_loaded_into() -> None:
    cache = CompactRAMCache.make(capacity_bytes=10 * 2**20)
    cache[[7]] = _state(300, kv_bytes=1_000)
    scores = np.full((BATCH, VOCAB), 5.0, dtype=np.single)
    entry = cache[[7]]
    scores[: entry.n_tokens, :] = entry.scores.copy()  # what Llama.load_state does
    assert not scores[:300].any() and scores[300:].all()


def test_a_longer_state_of_the_same_conversation_replaces_the_shorter() -> None:
    cache = CompactRAMCache.make(capacity_bytes=10 * 2**20)
    cache[[1, 2]] = _state(2, kv_bytes=1_000)
    cache[[9, 9]] = _state(2, kv_bytes=1_000)
    cache[[1, 2, 3, 4]] = _state(4, kv_bytes=2_000)
    assert sorted(cache.cache_state) == [(1, 2, 3, 4), (9, 9)]
    assert cache[[1, 2, 5]].n_tokens == 4  # the longer state still serves the shared prefix
