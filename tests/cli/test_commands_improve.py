"""`synth improve --smoke` end to end: a base run, gold demonstrations (the embedded model
passes almost nothing), two LoRA steps, a GGUF served back, a second run with the tuned
policy as the assistant; both rounds stored and shown by `synth stats`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trajsynth.cli.commands.improve import loop_run_config
from trajsynth.cli.settings import Settings
from trajsynth.schemas import RolloutMode
from trajsynth.store import Store


def test_the_smoke_path_is_tiny_and_the_command_line_wins() -> None:
    settings = Settings()
    tiny = loop_run_config(settings, {"tasks": None, "seed": 9}, smoke=True)
    assert (tiny.tasks, tiny.clusters, tiny.samples, tiny.rounds) == (2, ["shop", "calendar"], 1, 1)
    assert tiny.rollout_mode is RolloutMode.LINEAR and tiny.seed == 9
    assert tiny.budgets.max_turns == 3
    assert loop_run_config(settings, {"tasks": 3}, smoke=True).tasks == 3
    full = loop_run_config(settings, {"tasks": None, "samples": 5}, smoke=False)
    assert full == settings.run_config(samples=5)  # without --smoke: the settings' run


@pytest.mark.slow
@pytest.mark.llm
@pytest.mark.docker
def test_synth_improve_smoke_closes_the_loop(tmp_path: Path, prefect_api: dict[str, str]) -> None:
    # docker: this checkout's local sandbox cannot see the layered venv's packages
    env = {**os.environ, **prefect_api, "SYNTH_SANDBOX__KIND": "docker"}
    synth = [sys.executable, "-m", "trajsynth.cli"]
    proc = subprocess.run(
        [*synth, "improve", "--smoke", "--work", str(tmp_path / "work")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=2400,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    store = Store(tmp_path / "data" / "synth.duckdb")
    rounds = store.query("SELECT * FROM improve_rounds ORDER BY round")
    assert [r["round"] for r in rounds] == [0, 1]
    first, second = rounds
    assert first["policy"] == "embedded" and first["policy_model_id"] is None
    assert first["n_rollout_rows"] + first["n_gold_rows"] >= 1  # something was trained on
    (model,) = store.query("SELECT * FROM models WHERE model_id = ?", [first["trained_model_id"]])
    assert model["parent"] == "embedded" and first["run_id"] in model["run_ids"]
    assert Path(model["gguf_path"]).is_file()
    # round 1: the model trained on round 0 played the assistant, on new tasks
    assert second["policy_model_id"] == first["trained_model_id"]
    assert second["trained_model_id"] is None and second["run_id"] != first["run_id"]
    (run,) = store.query("SELECT manifest FROM runs WHERE run_id = ?", [second["run_id"]])
    assert run["manifest"]["policy"]["model_id"] == model["model_id"]
    models = store.query(
        "SELECT DISTINCT role, model FROM llm_calls WHERE run_id = ?", [second["run_id"]]
    )
    assert {m["model"] for m in models if m["role"] == "assistant"} == {
        f"policy:{model['model_id']}"
    }
    for r in rounds:  # the figures of each round are the run's
        assert r["n_trajectories"] >= 1 and r["n_counted"] <= r["n_trajectories"]
    stats = subprocess.run(
        [*synth, "stats", "--run", second["run_id"]],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert stats.returncode == 0, stats.stderr[-2000:]
    assert "expert iteration" in stats.stdout
