"""A cluster that yields no task is a warning naming why."""

from __future__ import annotations

from pathlib import Path

from trajsynth.cli.run_command import empty_cluster_warnings
from trajsynth.schemas import RunConfig
from trajsynth.store import Store


def test_a_cluster_with_no_task_is_named_with_its_rejection_reasons(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    store = Store(path)
    store.insert_many(
        {
            "blueprint_attempts": [
                {
                    "attempt_id": f"a{i}",
                    "run_id": "run_x",
                    "round": 0,
                    "cluster_id": "files",
                    "cell": "{}",
                    "seed": i,
                    "accepted": False,
                    "reason": reason,
                    "detail": "",
                }
                for i, reason in enumerate(["no_entry_tool", "no_entry_tool", "gold_run_error"])
            ]
        }
    )
    warnings = empty_cluster_warnings(str(path), "run_x", RunConfig(clusters=["files", "time"]))
    assert warnings == [
        "cluster files yielded no task (no_entry_tool: 2, gold_run_error: 1)",
        "cluster time yielded no task (no attempt)",
    ]
