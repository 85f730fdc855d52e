"""One task's records as the library's models: what ``synth topo`` and the dashboard draw."""

from __future__ import annotations

from typing import Any

from trajsynth.schemas import InputError, Signals, Trajectory, Verdict
from trajsynth.store.rows import model_from_row
from trajsynth.store.store import Store

__all__ = ["load_task", "load_trajectory"]


def load_task(
    store: Store, task_id: str
) -> tuple[list[Trajectory], dict[str, Verdict], set[str] | None, dict[str, Any] | None]:
    """The task's trajectories, their verdicts, its cluster's write tools and hidden info."""
    rows = store.query("SELECT * FROM trajectories WHERE blueprint_id = ?", [task_id])
    if not rows:
        raise InputError(f"no trajectories for task {task_id!r} in {store.path}")
    trajectories = [model_from_row(Trajectory, r) for r in rows]
    ids = [t.trajectory_id for t in trajectories]
    placeholders = ", ".join("?" for _ in ids)
    verdicts = {
        r["trajectory_id"]: model_from_row(Verdict, r)
        for r in store.query(f"SELECT * FROM verdicts WHERE trajectory_id IN ({placeholders})", ids)
    }
    tools = store.query(
        "SELECT name, access FROM tools WHERE cluster_id = ?", [trajectories[0].cluster_id]
    )
    write_tools = {r["name"] for r in tools if r["access"] == "write"} if tools else None
    bp = store.query("SELECT hidden_info FROM blueprints WHERE blueprint_id = ?", [task_id])
    hidden = bp[0]["hidden_info"] if bp and isinstance(bp[0]["hidden_info"], dict) else None
    return trajectories, verdicts, write_tools, hidden


def load_trajectory(
    store: Store, trajectory_id: str
) -> tuple[Trajectory, Verdict | None, Signals | None]:
    """One stored trajectory (any unique id prefix) with its verdict and signals when curation
    stored them: what a transcript reads. ``InputError`` for an unknown id."""
    row = store.get("trajectories", trajectory_id)
    if row is None:
        raise InputError(f"no trajectory with id {trajectory_id!r} in {store.path}")
    trajectory = model_from_row(Trajectory, row)
    tid = [trajectory.trajectory_id]
    verdicts = store.query("SELECT * FROM verdicts WHERE trajectory_id = ?", tid)
    signals = store.query("SELECT * FROM signals WHERE trajectory_id = ?", tid)
    return (
        trajectory,
        model_from_row(Verdict, verdicts[0]) if verdicts else None,
        model_from_row(Signals, signals[0]) if signals else None,
    )
