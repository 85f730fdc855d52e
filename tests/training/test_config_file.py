from __future__ import annotations

from pathlib import Path

import pytest

from trajsynth.schemas import InputError, TrainConfig
from trajsynth.training.config_file import load_config_file


def test_a_table_or_the_top_level_keys_with_overrides(tmp_path: Path) -> None:
    path = tmp_path / "train.toml"
    path.write_text("[train]\nmax_steps = 3\n")
    assert load_config_file(path, TrainConfig, table="train").max_steps == 3
    path.write_text("max_steps = 4\n")
    config = load_config_file(path, TrainConfig, table="train", max_steps=None)
    assert config.max_steps == 4  # None: not given on the command line
    assert load_config_file(path, TrainConfig, table="train", max_steps=7).max_steps == 7


def test_a_bad_file_names_itself(tmp_path: Path) -> None:
    path = tmp_path / "train.toml"
    with pytest.raises(InputError, match=r"train.toml: cannot read the train config"):
        load_config_file(path, TrainConfig, table="train")
    path.write_text("max_steps = 0\n")
    with pytest.raises(InputError, match=r"(?s)train.toml: .*max_steps"):
        load_config_file(path, TrainConfig, table="train")


def test_model_and_path_are_fields_a_config_can_override(tmp_path: Path) -> None:
    """`synth sft --config F --model X` and `synth train --config F --model X`: the override
    names collide with the loader's own parameter names unless those are positional-only."""
    from trajsynth.training.sft import load_sft_config

    path = tmp_path / "sft.toml"
    path.write_text('[sft]\nmodel = "embedded"\nmax_steps = 3\n')
    assert load_sft_config(path, model="/models/tuned").model == "/models/tuned"
    path.write_text('[train]\nmodel = "embedded"\n')
    assert load_config_file(path, TrainConfig, table="train", model="m").model == "m"
