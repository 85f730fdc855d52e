"""`synth run --tasks 3` for real: embedded llama.cpp server, Docker sandbox, DuckDB on disk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trajsynth.synth.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.llm, pytest.mark.docker]

SECRET = "sk-test-never-stored-4242"


def test_synth_run_writes_judged_trajectories(tmp_path: Path) -> None:
    env = {**os.environ, "SYNTH_SANDBOX__KIND": "docker", "SYNTH_LLM__API_KEY": SECRET}
    proc = subprocess.run(
        [sys.executable, "-m", "trajsynth.synth.cli", "run", "--tasks", "3", "--seed", "5"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "passed / counted" in proc.stdout

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
    assert len(rows) == n_bp >= 1
    for row in rows:  # every trajectory judged by every one of its task's real constraints
        assert row["n_results"] == row["n_constraints"] >= 1
    roles = {r["role"] for r in store.query("SELECT DISTINCT role FROM llm_calls")}
    assert "assistant" in roles
    nodes = store.query("SELECT count(*) AS n FROM nodes WHERE parent_id IS NULL")[0]["n"]
    assert nodes == len(rows)  # one tree root per rollout

    # a second identical run resumes: nothing new, nothing duplicated
    again = subprocess.run(
        [sys.executable, "-m", "trajsynth.synth.cli", "run", "--tasks", "3", "--seed", "5"],
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
