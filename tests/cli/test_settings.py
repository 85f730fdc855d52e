from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trajsynth.cli.settings import Settings, default_toml, load_settings
from trajsynth.schemas import (
    Budgets,
    CurationConfig,
    InputError,
    JudgeConfig,
    LLMConfig,
    PolicyRef,
    RolloutMode,
    RunConfig,
    SandboxKind,
    SandboxLimits,
    SFTSelectConfig,
    TreeConfig,
)


def test_default_toml_loads_and_matches_defaults(tmp_path: Path) -> None:
    path = tmp_path / "synth.toml"
    path.write_text(default_toml())
    loaded = load_settings(path)
    assert loaded.run.tasks == 20
    assert loaded.run.llm.base_url is None
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
    # the old key is read, and the error names where it lives now
    with pytest.raises(InputError, match=r"invalid value 'vm' for 'run.sandbox'.*docker"):
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


# One value per RunConfig field, each unlike its default: (TOML text under [run], the same as
# an environment variable, the value read back).
_SET: dict[str, tuple[str, dict[str, str], Any]] = {
    "tasks": ("tasks = 7", {"SYNTH_RUN__TASKS": "7"}, 7),
    "clusters": ('clusters = ["shop"]', {"SYNTH_RUN__CLUSTERS": '["shop"]'}, ["shop"]),
    "seed": ("seed = 9", {"SYNTH_RUN__SEED": "9"}, 9),
    "rounds": ("rounds = 3", {"SYNTH_RUN__ROUNDS": "3"}, 3),
    "samples": ("samples = 2", {"SYNTH_RUN__SAMPLES": "2"}, 2),
    "rollout_mode": (
        'rollout_mode = "linear"',
        {"SYNTH_RUN__ROLLOUT_MODE": "linear"},
        RolloutMode.LINEAR,
    ),
    "tree": ("tree.alpha = 0.1", {"SYNTH_RUN__TREE__ALPHA": "0.1"}, TreeConfig(alpha=0.1)),
    "curation": (
        "curation.sft.k_sft = 5",
        {"SYNTH_RUN__CURATION__SFT__K_SFT": "5"},
        CurationConfig(sft=SFTSelectConfig(k_sft=5)),
    ),
    "llm": ('llm.model = "m"', {"SYNTH_RUN__LLM__MODEL": "m"}, LLMConfig(model="m")),
    "budgets": (
        "budgets.max_turns = 2",
        {"SYNTH_RUN__BUDGETS__MAX_TURNS": "2"},
        Budgets(max_turns=2),
    ),
    "sandbox": ('sandbox = "local"', {"SYNTH_RUN__SANDBOX": "local"}, SandboxKind.LOCAL),
    "sandbox_limits": (
        "sandbox_limits.pids = 70",
        {"SYNTH_RUN__SANDBOX_LIMITS__PIDS": "70"},
        SandboxLimits(pids=70),
    ),
    "sandbox_pool": ("sandbox_pool = 0", {"SYNTH_RUN__SANDBOX_POOL": "0"}, 0),
    "planner_retries": ("planner_retries = 3", {"SYNTH_RUN__PLANNER_RETRIES": "3"}, 3),
    "plan_attempts": ("plan_attempts = 45", {"SYNTH_RUN__PLAN_ATTEMPTS": "45"}, 45),
    "user_resamples": ("user_resamples = 1", {"SYNTH_RUN__USER_RESAMPLES": "1"}, 1),
    "user_stop_when_met": (
        "user_stop_when_met = true",
        {"SYNTH_RUN__USER_STOP_WHEN_MET": "true"},
        True,
    ),
    "assistant_tool_choice": (
        'assistant_tool_choice = "auto"',
        {"SYNTH_RUN__ASSISTANT_TOOL_CHOICE": "auto"},
        "auto",
    ),
    "policy": (
        'policy = { path = "p.gguf", gguf = "p.gguf" }',
        {"SYNTH_RUN__POLICY": '{"path": "p.gguf", "gguf": "p.gguf"}'},
        PolicyRef(path="p.gguf", gguf="p.gguf"),
    ),
    "assistant_tool_choice_after_tool": (
        'assistant_tool_choice_after_tool = "auto"',
        {"SYNTH_RUN__ASSISTANT_TOOL_CHOICE_AFTER_TOOL": "auto"},
        "auto",
    ),
    "judge": (
        "judge.enabled = true",
        {"SYNTH_RUN__JUDGE__ENABLED": "true"},
        JudgeConfig(enabled=True),
    ),
}


def test_every_runconfig_field_has_a_case() -> None:
    assert set(_SET) == set(RunConfig.model_fields)


@pytest.mark.parametrize("field", sorted(RunConfig.model_fields))
def test_every_runconfig_field_is_settable_from_synth_toml(tmp_path: Path, field: str) -> None:
    toml, _, want = _SET[field]
    path = tmp_path / "synth.toml"
    path.write_text(f"[run]\n{toml}\n")
    got = getattr(load_settings(path).run_config(), field)
    assert got == want and got != RunConfig.model_fields[field].get_default(
        call_default_factory=True
    )


@pytest.mark.parametrize("field", sorted(RunConfig.model_fields))
def test_every_runconfig_field_is_settable_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, field: str
) -> None:
    monkeypatch.chdir(tmp_path)  # no synth.toml
    _, env, want = _SET[field]
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert getattr(load_settings().run_config(), field) == want


_OLD_KEYS = """\
[run]
rollout = "linear"
max_turns = 2
task_runner = "dask"
task_runner_workers = 3
[llm]
model = "m"
cache = false
[sandbox]
kind = "local"
pool = 0
pids = 70
[tree]
alpha = 0.1
[curation.sft]
k_sft = 5
"""


def test_the_older_keys_still_load_where_they_live_now(tmp_path: Path) -> None:
    path = tmp_path / "synth.toml"
    path.write_text(_OLD_KEYS)
    loaded = load_settings(path)
    run = loaded.run_config()
    assert (run.rollout_mode, run.budgets.max_turns, run.llm.model) == ("linear", 2, "m")
    assert (run.sandbox, run.sandbox_pool, run.sandbox_limits.pids) == ("local", 0, 70)
    assert (run.tree.alpha, run.curation.sft.k_sft) == (0.1, 5)
    assert (loaded.runner.kind, loaded.runner.workers, loaded.llm.cache) == ("dask", 3, False)


def test_the_older_environment_variables_still_apply(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for name, value in {
        "SYNTH_SANDBOX__KIND": "local",
        "SYNTH_LLM__MODEL": "m",
        "SYNTH_RUN__MAX_TURNS": "2",
        "SYNTH_TREE__ALPHA": "0.1",
        "SYNTH_RUN__TASK_RUNNER": "dask",
    }.items():
        monkeypatch.setenv(name, value)
    loaded = load_settings()
    run = loaded.run_config()
    assert (run.sandbox, run.llm.model, run.budgets.max_turns) == ("local", "m", 2)
    assert (run.tree.alpha, loaded.runner.kind) == (0.1, "dask")


def test_an_environment_variable_beats_the_file_in_either_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "synth.toml"
    path.write_text("[run.budgets]\nmax_turns = 3\n")
    monkeypatch.setenv("SYNTH_RUN__MAX_TURNS", "5")  # the older name
    assert load_settings(path).run_config().budgets.max_turns == 5


def test_command_line_overrides_update_the_run_config() -> None:
    config = Settings().run_config(tasks=3, seed=None, llm={"model": "m", "base_url": None})
    assert (config.tasks, config.seed, config.llm.model) == (3, 0, "m")
    assert config.llm.base_url is None
