"""One task's records as the library's models: what ``synth topo`` and the dashboard draw."""

from __future__ import annotations

from typing import Any

from trajsynth.schemas import InputError, Trajectory, Verdict
from trajsynth.store.rows import model_from_row
from trajsynth.store.store import Store

__all__ = ["load_task"]


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
