"""`synth runs`: every run in the store with its state, progress and pass rate."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel, ConfigDict
from rich.console import Console

from trajsynth.cli.context import current_settings
from trajsynth.cli.ids import id_column
from trajsynth.cli.tables import Table
from trajsynth.store import Store

__all__ = ["RunRow", "list_runs", "runs"]


class RunRow(BaseModel):
    """One run as ``synth runs`` shows it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    state: str
    created_at: datetime | None
    updated_at: datetime | None
    rounds_planned: int
    rounds_done: int
    tasks: int
    trajectories: int
    counted: int
    passed: int
    pass_rate: float | None


_RUNS_SQL = """
WITH per_run AS (
    SELECT t.run_id,
           count(DISTINCT t.blueprint_id) AS tasks,
           count(*) AS trajectories,
           count(*) FILTER (WHERE NOT coalesce(v.excluded, true)) AS counted,
           count(*) FILTER (WHERE v.passed AND NOT v.excluded) AS passed
    FROM trajectories t LEFT JOIN verdicts v USING (trajectory_id)
    GROUP BY t.run_id
)
SELECT r.run_id, r.state, r.created_at, r.updated_at,
       CAST(coalesce(json_extract(r.config, '$.rounds'), '1') AS INTEGER) AS rounds_planned,
       coalesce(p.tasks, 0) AS tasks,
       coalesce(p.trajectories, 0) AS trajectories,
       coalesce(p.counted, 0) AS counted,
       coalesce(p.passed, 0) AS passed
FROM runs r LEFT JOIN per_run p USING (run_id)
ORDER BY r.created_at DESC NULLS LAST, r.run_id
"""


def _rounds_done(store: Store, row: dict[str, Any]) -> int:
    """Rounds whose curation wrote its ``round_stats`` row (the last step of a round); a
    store without that table counts a completed run's rounds as done, and an unfinished
    run's rounds before the last one it has rollouts in."""
    run_id, planned = row["run_id"], int(row["rounds_planned"])
    stats = store.query(
        "SELECT count(*) AS n FROM information_schema.tables WHERE table_name = 'round_stats'"
    )
    if stats and stats[0]["n"]:
        done = store.query(
            "SELECT count(DISTINCT round) AS n FROM round_stats WHERE run_id = ?", [run_id]
        )
        if done and done[0]["n"]:
            return min(int(done[0]["n"]), planned)
    if row["state"] == "completed":
        return planned
    rounds = store.query("SELECT max(round) AS r FROM trajectories WHERE run_id = ?", [run_id])
    last = rounds[0]["r"] if rounds else None
    return 0 if last is None else min(int(last), planned)


def list_runs(store: Store) -> list[RunRow]:
    """Every run in ``store``, newest first (an empty list when there is no store yet)."""
    if not store.path.exists():
        return []
    with store.session(read_only=True):  # a query per run follows
        return _list_runs(store)


def _list_runs(store: Store) -> list[RunRow]:
    out = []
    for row in store.query(_RUNS_SQL):
        counted, passed = int(row["counted"]), int(row["passed"])
        out.append(
            RunRow(
                run_id=row["run_id"],
                state=row["state"] or "unknown",
                created_at=row["created_at"],
                updated_at=row["updated_at"],
                rounds_planned=int(row["rounds_planned"]),
                rounds_done=_rounds_done(store, row),
                tasks=int(row["tasks"]),
                trajectories=int(row["trajectories"]),
                counted=counted,
                passed=passed,
                pass_rate=passed / counted if counted else None,
            )
        )
    return out


_STATE_STYLE = {"completed": "green", "running": "yellow", "failed": "red"}


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else ""


def runs(
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
    store_path: Annotated[Path | None, typer.Option("--store", help="DuckDB store")] = None,
) -> None:
    """List the runs in the store: state, rounds done, trajectories, pass rate.

    A run killed mid-way shows ``running`` until the same command runs it again (that resumes
    it); times are UTC.
    """
    if store_path is None:
        store_path = current_settings().store_path
    console = Console()
    rows = list_runs(Store(store_path))
    if as_json:
        sys.stdout.write(json.dumps([r.model_dump(mode="json") for r in rows], indent=2) + "\n")
        return
    if not rows:
        console.print(f"no runs in {store_path} (start one with `synth run`)")
        return
    table = Table(title=f"runs in {store_path}")
    # the id stays whole at any width (it is copied into the next command); the other
    # columns fold rather than lose characters to an ellipsis
    id_column(table, "run", [r.run_id for r in rows])
    for col, justify in (
        ("state", "left"),
        ("created (UTC)", "left"),
        ("updated (UTC)", "left"),
        ("rounds", "right"),
        ("tasks", "right"),
        ("trajectories", "right"),
        ("pass rate", "right"),
    ):
        table.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for r in rows:
        style = _STATE_STYLE.get(r.state, "white")
        rate = f"{r.pass_rate:.0%} ({r.passed}/{r.counted})" if r.pass_rate is not None else "n/a"
        table.add_row(
            r.run_id,
            f"[{style}]{r.state}[/]",
            _when(r.created_at),
            _when(r.updated_at),
            f"{r.rounds_done}/{r.rounds_planned}",
            str(r.tasks),
            str(r.trajectories),
            rate,
        )
    console.print(table)
