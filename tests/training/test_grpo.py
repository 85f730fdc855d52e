"""The GRPO stage's inputs: configs from TOML, rows planned or loaded, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from trajsynth.schemas import InputError, RLRow
from trajsynth.training.grpo import load_train_config, rl_rows

pytestmark = pytest.mark.alone  # torch or transformers: every core


@pytest.mark.slow  # several seconds: planning, processes or a full round
def test_rows_are_planned_without_an_export() -> None:
    from trajsynth.training.run import smoke_config

    rows = rl_rows(smoke_config(n_tasks=2, clusters=["shop"]))
    assert len(rows) == 2 and all(isinstance(r, RLRow) for r in rows)
    assert {r.env.cluster_id for r in rows} == {"shop"}
    assert all(r.prompt[-1].content and r.tools for r in rows)


@pytest.mark.slow
def test_training_without_rows_or_an_export_is_a_clear_error() -> None:
    from trajsynth.training.run import smoke_config, train

    with pytest.raises(InputError, match="no RL tasks"):
        train(smoke_config(tasks=None))


def test_a_bad_config_file_names_itself(tmp_path: Path) -> None:
    bad = tmp_path / "train.toml"
    bad.write_text("[train]\nmax_steps = 'many'\n")
    with pytest.raises(InputError, match="train.toml"):
        load_train_config(bad)
    with pytest.raises(InputError, match="cannot read"):
        load_train_config(tmp_path / "missing.toml")
