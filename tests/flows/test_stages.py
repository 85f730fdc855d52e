"""Stage flows that need no LLM: argument errors surface as clear InputErrors."""

from __future__ import annotations

from pathlib import Path

import pytest

from trajsynth.flows.stages import train_stage
from trajsynth.schemas import InputError


def test_train_stage_needs_a_config_or_smoke() -> None:
    with pytest.raises(InputError, match="config_path or smoke"):
        train_stage.fn()


def test_train_stage_names_a_bad_config(tmp_path: Path) -> None:
    bad = tmp_path / "gpu.toml"
    bad.write_text("[train]\nadvantage = 'best'\n")
    with pytest.raises(InputError, match="gpu.toml"):
        train_stage.fn(config_path=str(bad))
