"""`synth runs`: the runs table with state, rounds done, trajectories and pass rate."""

from __future__ import annotations

import json
from datetime import datetime

from fakes.trajectories import make_verdict
from typer.testing import CliRunner

from trajsynth.cli.commands.runs import list_runs
from trajsynth.cli.main import app
from trajsynth.store import Store


def _run(store: Store, run_id: str, state: str, rounds: int, created: datetime) -> None:
    store.insert(
        "runs",
        [
            {
                "run_id": run_id,
                "created_at": created,
                "updated_at": created,
                "state": state,
                "config": {"rounds": rounds, "seed": 0},
                "manifest": {},
                "summary": None,
            }
        ],
    )


def _trajectory(tid: str, run_id: str, blueprint: str, round_: int) -> dict:
    return {"trajectory_id": tid, "run_id": run_id, "blueprint_id": blueprint, "round": round_}


def _store(tmp_path) -> Store:
    store = Store(tmp_path / "s.duckdb")
    _run(store, "run_done", "completed", 2, datetime(2026, 1, 1, 10, 0))
    _run(store, "run_killed", "running", 3, datetime(2026, 1, 2, 10, 0))
    _run(store, "run_empty", "failed", 1, datetime(2026, 1, 3, 10, 0))
    store.insert(
        "trajectories",
        [
            _trajectory("t1", "run_done", "bp1", 0),
            _trajectory("t2", "run_done", "bp1", 0),
            _trajectory("t3", "run_done", "bp2", 1),
            _trajectory("t4", "run_killed", "bp3", 0),
            _trajectory("t5", "run_killed", "bp4", 1),
        ],
    )
    store.insert(
        "verdicts",
        [
            make_verdict("t1", True),
            make_verdict("t2", False),
            make_verdict("t3", True, excluded=True),  # infra: not counted
            make_verdict("t4", True),
        ],  # t5 has no verdict yet: not counted
    )
    return store


def test_list_runs_reports_state_rounds_and_pass_rate(tmp_path) -> None:
    rows = {r.run_id: r for r in list_runs(_store(tmp_path))}
    assert [r for r in rows] == ["run_empty", "run_killed", "run_done"]  # newest first
    done, killed, empty = rows["run_done"], rows["run_killed"], rows["run_empty"]
    assert (done.state, done.rounds_done, done.rounds_planned) == ("completed", 2, 2)
    assert (done.tasks, done.trajectories, done.counted, done.passed) == (2, 3, 2, 1)
    assert done.pass_rate == 0.5
    # killed in round 1: round 0 is done, round 1 is not
    assert (killed.state, killed.rounds_done, killed.rounds_planned) == ("running", 1, 3)
    assert (killed.trajectories, killed.counted, killed.pass_rate) == (2, 1, 1.0)
    assert (empty.trajectories, empty.pass_rate, empty.rounds_done) == (0, None, 0)


def test_rounds_done_comes_from_round_stats_when_curation_wrote_them(tmp_path) -> None:
    store = _store(tmp_path)
    store.execute(
        "CREATE TABLE IF NOT EXISTS round_stats (round_key VARCHAR, run_id VARCHAR, round INT)"
    )
    store.execute(
        "INSERT INTO round_stats (round_key, run_id, round) "
        "VALUES ('k0', 'run_killed', 0), ('k1', 'run_killed', 1)"
    )
    rows = {r.run_id: r for r in list_runs(store)}
    assert rows["run_killed"].rounds_done == 2


def test_synth_runs_json_and_table(tmp_path) -> None:
    store = _store(tmp_path)
    result = CliRunner().invoke(app, ["runs", "--json", "--store", str(store.path)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [d["run_id"] for d in data] == ["run_empty", "run_killed", "run_done"]
    assert data[2]["pass_rate"] == 0.5 and data[2]["rounds_done"] == 2
    assert data[1]["state"] == "running"

    table = CliRunner().invoke(app, ["runs", "--store", str(store.path)], env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.output
    assert "run_killed" in table.output and "1/3" in table.output and "50% (1/2)" in table.output


def test_synth_runs_without_a_store(tmp_path) -> None:
    result = CliRunner().invoke(app, ["runs", "--store", str(tmp_path / "none.duckdb")])
    assert result.exit_code == 0
    assert "no runs" in result.output
    as_json = CliRunner().invoke(app, ["runs", "--json", "--store", str(tmp_path / "x.duckdb")])
    assert json.loads(as_json.output) == []
