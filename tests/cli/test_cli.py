"""The CLI over a real store: init, schema, query, show, and clear errors for bad input.

One test runs `python -m trajsynth.cli` as a process (the entry point, output piped); the others
call the same entry point in this process (the ``synth`` fixture, tests/cli/conftest.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from fakes.cli import SynthRunner

from trajsynth.schemas import Termination, Trajectory
from trajsynth.store import Store


def synth_subprocess(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trajsynth.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    store = Store(tmp_path / "data" / "synth.duckdb")
    store.insert(
        "trajectories",
        [
            Trajectory(
                trajectory_id="traj_abc123",
                run_id="run_1",
                blueprint_id="bp_1",
                tree_id="tree_1",
                leaf_node_id="node_1",
                cluster_id="shop",
                messages=[{"role": "user", "content": "hi"}],
                termination=Termination.USER_STOP,
            )
        ],
    )
    return tmp_path


@pytest.mark.slow
def test_query_formats(workdir: Path) -> None:
    out = synth_subprocess(
        "query",
        "select cluster_id, count(*) as n from trajectories group by 1",
        "--format",
        "json",
        cwd=workdir,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [{"cluster_id": "shop", "n": 1}]
    out = synth_subprocess(
        "query", "select trajectory_id from trajectories", "-f", "csv", cwd=workdir
    )
    assert out.stdout.splitlines() == ["trajectory_id", "traj_abc123"]


def test_show_by_unique_prefix(workdir: Path, synth: SynthRunner) -> None:
    out = synth("show", "trajectory", "traj_abc", "--json", cwd=workdir)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["messages"][0]["content"] == "hi"


def test_show_trajectory_is_a_transcript(workdir: Path, synth: SynthRunner) -> None:
    out = synth("show", "trajectory", "traj_abc", cwd=workdir)
    assert out.returncode == 0, out.stderr
    assert "traj_abc123" in out.stdout and "user: hi" in out.stdout
    assert "not verified" in out.stdout  # no verdict stored for it
    out = synth("show", "trajectory", "traj_zzz", cwd=workdir)
    assert out.returncode == 2 and "no trajectory with id 'traj_zzz'" in out.stderr


def test_bad_sql_and_unknown_kind_are_one_line_errors(workdir: Path, synth: SynthRunner) -> None:
    out = synth("query", "selec 1", cwd=workdir)
    assert out.returncode == 2 and "SQL error" in out.stderr
    out = synth("show", "spaceship", "x", cwd=workdir)
    assert out.returncode == 2 and "unknown kind" in out.stderr


def test_init_then_bad_setting_names_file_and_key(tmp_path: Path, synth: SynthRunner) -> None:
    assert synth("init", cwd=tmp_path).returncode == 0
    text = (tmp_path / "synth.toml").read_text()
    (tmp_path / "synth.toml").write_text(text.replace("tasks = 20", "tasks = -1"))
    out = synth("query", "select 1", cwd=tmp_path)
    assert out.returncode == 2
    assert "synth.toml: invalid value -1 for 'run.tasks'" in out.stderr


def test_schema_prints_json_schema(tmp_path: Path, synth: SynthRunner) -> None:
    out = synth("schema", "Blueprint", cwd=tmp_path)
    assert out.returncode == 0
    assert json.loads(out.stdout)["title"] == "Blueprint"
    assert synth("schema", "Nope", cwd=tmp_path).returncode == 2


def test_schema_of_a_table_gives_each_column_a_meaning(tmp_path: Path, synth: SynthRunner) -> None:
    out = synth("schema", "task_topology", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "error_branch_ratio" in out.stdout and "shortest_success_len" in out.stdout
    assert "fewest edges of a successful path" in out.stdout
    bad = synth("schema", "task_topo", cwd=tmp_path)
    assert bad.returncode == 2 and "task_topology" in bad.stderr
