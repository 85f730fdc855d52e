"""`synth run` for real: embedded llama.cpp server, Docker sandbox, DuckDB on disk, trees."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trajsynth.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.llm, pytest.mark.docker]

SECRET = "sk-test-never-stored-4242"
RUN = [sys.executable, "-m", "trajsynth.cli", "run", "--tasks", "3", "--seed", "5"]
RUN += ["--samples", "3"]


def test_synth_run_writes_judged_trajectories(tmp_path: Path, prefect_api: dict[str, str]) -> None:
    env = {
        **os.environ,
        **prefect_api,
        "SYNTH_SANDBOX__KIND": "docker",
        "SYNTH_LLM__API_KEY": SECRET,
    }
    proc = subprocess.run(
        RUN,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "passed / judged" in proc.stdout

    store = Store(tmp_path / "data" / "synth.duckdb")
    runs = store.query("SELECT state, manifest FROM runs")
    assert [r["state"] for r in runs] == ["completed"]
    assert runs[0]["manifest"]["sandbox_image"]  # the Docker image id is recorded
    n_bp = store.query("SELECT count(*) AS n FROM blueprints")[0]["n"]
    rows = store.query(
        "SELECT t.trajectory_id, t.termination, json_array_length(v.results) AS n_results, "
        "json_array_length(b.constraints) AS n_constraints "
        "FROM trajectories t JOIN verdicts v USING (trajectory_id) "
        "JOIN blueprints b USING (blueprint_id)"
    )
    trees = store.query("SELECT * FROM trees")
    assert len(trees) == n_bp >= 1  # one tree per blueprint (tree rollouts are the default)
    assert len(rows) == sum(t["n_leaves"] for t in trees)
    for tree in trees:  # the budget is recorded and never exceeded
        assert tree["rollout_mode"] == "tree" and 1 <= tree["n_leaves"] <= 3
        assert tree["budget"]["generated_tokens"] <= tree["budget"]["max_tree_tokens"]
        assert tree["generated_tokens"] == tree["budget"]["generated_tokens"] > 0
    roots = store.query("SELECT * FROM nodes WHERE parent_id IS NULL")
    assert len(roots) == len(trees) and all(r["branch"]["after"] == "root" for r in roots)
    judged = [r for r in roots if r["n_leaves"]]
    assert all(0.0 <= r["value"] <= 1.0 for r in judged)  # node values from the verdicts
    for row in rows:  # every trajectory judged by every one of its task's real constraints
        assert row["n_results"] == row["n_constraints"] >= 1
    roles = {r["role"] for r in store.query("SELECT DISTINCT role FROM llm_calls")}
    assert "assistant" in roles

    # a second identical run resumes: nothing new, nothing duplicated
    again = subprocess.run(
        RUN,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert store.query("SELECT count(*) AS n FROM trajectories")[0]["n"] == len(rows)

    # the API key is nowhere in the store
    dump = json.dumps(store.query("SELECT * FROM runs"), default=str)
    assert SECRET not in dump
    assert SECRET.encode() not in (tmp_path / "data" / "synth.duckdb").read_bytes()
