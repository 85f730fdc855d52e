"""Ids whole in every table at 80 columns; any unique prefix accepted."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from fakes.trajectories import make_trajectory, make_verdict
from typer.testing import CliRunner

from trajsynth.cli.ids import resolve
from trajsynth.cli.main import app
from trajsynth.schemas import InputError
from trajsynth.store import Store

RUN_A = "run_7c3f9a2b1d4e5f6071829aab"
RUN_B = "run_7c40000000000000000000bb"
NARROW = {"COLUMNS": "80"}


def _store(tmp_path: Path) -> Store:
    store = Store(tmp_path / "s.duckdb")
    for i, run in enumerate((RUN_A, RUN_B)):
        at = datetime(2026, 1, 1 + i, 10, 0)
        store.insert(
            "runs",
            [
                {
                    "run_id": run,
                    "created_at": at,
                    "updated_at": at,
                    "state": "completed",
                    "config": {"rounds": 1},
                    "manifest": {},
                    "summary": None,
                }
            ],
        )
    t = make_trajectory("traj_0123456789abcdef01234567", [[]])
    store.insert("trajectories", [t.model_copy(update={"run_id": RUN_A})])
    store.insert("verdicts", [make_verdict("traj_0123456789abcdef01234567", True)])
    return store


def _invoke(store: Store, *args: str) -> str:
    env = {**NARROW, "SYNTH_STORE_PATH": str(store.path)}
    result = CliRunner().invoke(app, list(args), env=env)
    assert result.exit_code == 0, result.output
    return result.output


def test_resolve_exact_prefix_ambiguous_and_unknown(tmp_path: Path) -> None:
    store = _store(tmp_path)
    assert resolve(store, "run", RUN_A) == RUN_A
    assert resolve(store, "run", "run_7c3") == RUN_A
    assert resolve(store, "trajectory", "traj_01") == "traj_0123456789abcdef01234567"
    with pytest.raises(InputError, match=r"'run_7c' matches 2 run ids .*give more of the id"):
        resolve(store, "run", "run_7c")
    with pytest.raises(InputError, match="no run id starts with 'runX7c3'"):
        resolve(store, "run", "runX7c3")  # `_` is not a wildcard


def test_runs_table_keeps_ids_whole_at_80_columns(tmp_path: Path) -> None:
    store = _store(tmp_path)
    out = _invoke(store, "runs", "--store", str(store.path))
    assert max(len(line) for line in out.splitlines()) <= 80
    assert RUN_A in out and RUN_B in out and "…" not in out


def test_query_table_keeps_id_columns_whole_at_80_columns(tmp_path: Path) -> None:
    store = _store(tmp_path)
    out = _invoke(
        store,
        "query",
        "SELECT run_id, state, created_at, updated_at, config, manifest, summary, "
        "'a long text column that has to give way' AS note FROM runs",
    )
    # too wide for a table at 80 columns: one block per row, every value whole
    assert f"  run_id: {RUN_A}" in out and f"  run_id: {RUN_B}" in out
    assert "  note: a long text column that has to give way" in out
    narrow = _invoke(store, "query", "SELECT run_id, state FROM runs ORDER BY run_id")
    assert "┃ run_id" in narrow and RUN_A in narrow and "…" not in narrow


def test_stats_and_export_take_a_run_prefix(tmp_path: Path) -> None:
    store = _store(tmp_path)
    out = _invoke(store, "stats", "--run", "run_7c3", "--store", str(store.path))
    assert RUN_A in out
    result = CliRunner().invoke(
        app,
        ["export", "--run", "run_7c3", "--out", str(tmp_path / "o"), "--store", str(store.path)],
        env=NARROW,
    )
    # the prefix resolved to the run; it has nothing selected, which the message says
    assert result.exit_code == 2 and f"run {RUN_A!r}" in result.output.replace("\n", "")
