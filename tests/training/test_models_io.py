"""bf16 autocast only where the hardware multiplies bf16; the GGUF's
dequantized copy kept in the cache."""

from __future__ import annotations

import inspect
import logging
import os
from pathlib import Path

import pytest

from trajsynth.curation import embeddings
from trajsynth.training import models_io
from trajsynth.training.models_io import use_bf16

pytestmark = pytest.mark.alone  # torch or transformers: every core


@pytest.mark.parametrize("has_bf16", [True, False])
def test_auto_on_a_cpu_follows_its_flags(monkeypatch: pytest.MonkeyPatch, has_bf16: bool) -> None:
    monkeypatch.setattr(embeddings, "cpu_has_bf16", lambda: has_bf16)
    assert use_bf16("auto", use_cpu=True) is has_bf16


def test_an_explicit_setting_wins_and_emulated_bf16_is_warned(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(embeddings, "cpu_has_bf16", lambda: False)
    assert use_bf16(False, use_cpu=True) is False
    assert not caplog.records
    with caplog.at_level(logging.WARNING, logger=models_io.__name__):
        assert use_bf16(True, use_cpu=True) is True
    assert "emulated" in caplog.text


@pytest.mark.slow
def test_auto_without_a_gpu_falls_back_to_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(embeddings, "cpu_has_bf16", lambda: False)
    assert use_bf16("auto", use_cpu=False) is False


def test_the_least_recently_used_copies_are_evicted(tmp_path: Path) -> None:
    for age, name in enumerate(["new", "middle", "old", "oldest"]):
        (tmp_path / name).mkdir()
        os.utime(tmp_path / name, (1e9 - age, 1e9 - age))
    (tmp_path / ".model-partial").mkdir()  # another process still writing: not ours to take
    models_io._evict(tmp_path, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".model-partial", "middle", "new"]


@pytest.mark.slow  # transformers reads the GGUF once: about 30 s on 2 cores
def test_a_gguf_is_read_once_then_loaded_from_its_saved_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    from trajsynth.llm.chat_template import default_gguf_path

    gguf = default_gguf_path()
    first = models_io.load_gguf_model(gguf, cache_dir=tmp_path)
    (saved,) = tmp_path.iterdir()
    assert saved.name.startswith(gguf.stem) and (saved / "model.safetensors").is_file()

    def no_second_read(*args: object, **kwargs: object) -> None:
        raise AssertionError("the GGUF was read again")

    monkeypatch.setattr(gguf_utils, "load_gguf_checkpoint", no_second_read)
    again = models_io.load_gguf_model(gguf, cache_dir=tmp_path)
    assert getattr(again.config, "quantization_config", None) is None
    ours, theirs = first.state_dict(), again.state_dict()
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert again.dtype == torch.float32


@pytest.mark.slow  # loads torch, transformers and TRL
def test_the_fused_head_scores_labelled_positions_only_with_the_same_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch
    import trl.trainer.utils as trl_utils
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    model = LlamaForCausalLM(config)
    trl_utils.add_fused_lm_head(model, outputs=("log_probs", "entropy", "is_top1"))
    ids = torch.randint(0, 97, (1, 40))
    labels = ids.clone()
    labels[:, :30] = -100  # a prompt of 30 tokens: only the last 10 are trained on
    scored: list[int] = []
    apply = trl_utils._ChunkedLogProbFunction.apply

    def counting(hidden: torch.Tensor, *args: object) -> object:
        scored.append(hidden.shape[0])
        return apply(hidden, *args)

    monkeypatch.setattr(trl_utils._ChunkedLogProbFunction, "apply", counting)
    # an SFT or GRPO step run earlier in this process (by another test) has tuned the head
    # already: start from TRL's own decision, and undo what this test changes
    decide = trl_utils._use_triton
    while getattr(decide, "compacts_on_cpu", False):
        decide = inspect.getclosurevars(decide).nonlocals["decide"]
    monkeypatch.setattr(trl_utils, "_use_triton", decide)
    chunk = trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE
    monkeypatch.setattr(trl_utils, "_CHUNKED_LOGPROB_CHUNK_SIZE", chunk)

    def run() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        model.zero_grad()
        out = model(input_ids=ids, labels=labels, fused_lm_head=True)
        out.loss.backward()
        grad = model.model.layers[0].self_attn.q_proj.weight.grad
        assert grad is not None
        return out.log_probs.detach(), out.entropy.detach(), grad.clone()

    every = run()
    models_io.tune_fused_lm_head()
    models_io.tune_fused_lm_head()  # a second call does not wrap the wrapper
    labelled = run()
    assert scored == [39, 10]  # labels shift by one: 39 positions, the last 10 labelled
    for before, after in zip(every, labelled, strict=True):
        torch.testing.assert_close(before, after)
    assert trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE <= models_io.LOGPROB_CHUNK_TOKENS
