"""A store with known rows for the dashboard tests (numbers worked out in the tests)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from fakes.dashboard_rows import merge, round_stats_row, run_row, task_rows

from trajsynth.store import Store


def known_rows() -> dict:
    """run-alpha (newest, finished): task-a1 on shop (3 pass, 1 fail), task-a2 on calendar
    (1 pass, 2 fail, 1 excluded), round figures for rounds 0 and 1. run-beta (older, running):
    task-b1 on bank (1 pass, 1 unverified), no round figures. run-alpha's stored summary: 120 s
    of wall time (the trajectories' own wall_s sum to 16 s: they overlap and leave out planning)."""
    return merge(
        run_row("run-alpha", "finished", datetime(2026, 1, 2, 10, 0), wall_s=120.0),
        run_row("run-beta", "running", datetime(2026, 1, 1, 9, 0)),
        task_rows(
            "run-alpha", "task-a1", "shop", ["pass", "pass", "pass", "fail"],
            modes=["plan-first"] * 3 + ["explore"], tokens=100, pruned=True,
        ),
        task_rows(
            "run-alpha", "task-a2", "calendar", ["pass", "fail", "fail", "excluded"],
            round_=1, modes=["explore", "explore", "recover", "recover"], tokens=200,
        ),
        task_rows("run-beta", "task-b1", "bank", ["pass", "unverified"], tokens=50),
        round_stats_row(
            "run-alpha", 0, n_trajectories=4, pass_rate=0.75, domain_entropy=0.6931,
            reasoning_mode_entropy=0.5623, action_complexity=4.25, error_branch_ratio=0.2,
        ),
        round_stats_row(
            "run-alpha", 1, n_trajectories=4, pass_rate=1 / 3, domain_entropy=1.0986,
            reasoning_mode_entropy=1.0397, action_complexity=5.5, error_branch_ratio=0.3333,
        ),
    )  # fmt: skip


@pytest.fixture
def known_store(tmp_path: Path) -> Store:
    store = Store(tmp_path / "dash.duckdb")
    store.insert_many(known_rows())
    return store
