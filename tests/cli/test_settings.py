from __future__ import annotations

from pathlib import Path

import pytest

from trajsynth.cli.settings import default_toml, load_settings
from trajsynth.schemas import InputError, RolloutMode, TreeConfig


def test_default_toml_loads_and_matches_defaults(tmp_path: Path) -> None:
    path = tmp_path / "synth.toml"
    path.write_text(default_toml())
    loaded = load_settings(path)
    assert loaded.run.tasks == 20
    assert loaded.llm.base_url is None
    assert loaded.run_config().rollout_mode is RolloutMode.TREE
    assert loaded.run_config().tree == TreeConfig()


def test_env_overrides_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "synth.toml"
    path.write_text("[run]\ntasks = 3\n")
    monkeypatch.setenv("SYNTH_RUN__TASKS", "5")
    assert load_settings(path).run.tasks == 5


def test_unknown_key_names_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "synth.toml"
    path.write_text("[run]\ntaskz = 3\n")
    with pytest.raises(InputError, match=r"synth.toml: unknown setting 'run.taskz'"):
        load_settings(path)


def test_invalid_value_names_key_value_and_rule(tmp_path: Path) -> None:
    path = tmp_path / "synth.toml"
    path.write_text('[sandbox]\nkind = "vm"\n')
    with pytest.raises(InputError, match=r"invalid value 'vm' for 'sandbox.kind'.*docker"):
        load_settings(path)


def test_malformed_toml_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "synth.toml"
    path.write_text("[run\n")
    with pytest.raises(InputError, match="not valid TOML"):
        load_settings(path)


def test_api_key_comes_from_env_and_is_secret(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SYNTH_LLM__API_KEY", "sk-secret-123")
    loaded = load_settings()
    assert loaded.llm.api_key is not None
    assert loaded.llm.api_key.get_secret_value() == "sk-secret-123"
    assert "sk-secret-123" not in repr(loaded)
    assert "sk-secret-123" not in loaded.run_config().model_dump_json()


def test_one_default_per_knob(tmp_path: Path) -> None:
    """The settings' defaults are RunConfig's: a run built from an empty synth.toml is
    RunConfig() (same run id), and the file written by `synth init` says the same."""
    from trajsynth.schemas import RunConfig

    path = tmp_path / "synth.toml"
    path.write_text("")
    assert load_settings(path).run_config() == RunConfig()
    path.write_text(default_toml())
    assert load_settings(path).run_config() == RunConfig()


def test_every_llm_knob_is_settable(tmp_path: Path) -> None:
    path = tmp_path / "synth.toml"
    path.write_text("[llm]\ntop_p = 0.5\ntop_logprobs = 2\n")
    llm = load_settings(path).run_config().llm
    assert (llm.top_p, llm.top_logprobs) == (0.5, 2)
