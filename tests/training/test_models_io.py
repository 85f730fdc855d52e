"""bf16 autocast only where the hardware multiplies bf16 (issue 18, item 6)."""

from __future__ import annotations

import logging

import pytest

from trajsynth.curation import embeddings
from trajsynth.training import models_io
from trajsynth.training.models_io import use_bf16


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


def test_auto_without_a_gpu_falls_back_to_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(embeddings, "cpu_has_bf16", lambda: False)
    assert use_bf16("auto", use_cpu=False) is False
