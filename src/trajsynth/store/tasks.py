"""One task's records as the library's models: what ``synth topo`` and the dashboard draw."""

from __future__ import annotations

from typing import Any

from trajsynth.schemas import InputError, Signals, Trajectory, Verdict
from trajsynth.store.rows import BlueprintRow, ToolRow, model_from_row
from trajsynth.store.store import Store

__all__ = ["load_task", "load_trajectory"]


def load_task(
    store: Store, task_id: str
) -> tuple[list[Trajectory], dict[str, Verdict], set[str] | None, dict[str, Any] | None]:
    """The task's trajectories, their verdicts, its cluster's write tools and hidden info."""
    with store.session(read_only=True):
        trajectories = store.read(Trajectory, blueprint_id=task_id)
        if not trajectories:
            raise InputError(f"no trajectories for task {task_id!r} in {store.path}")
        of_task = "trajectory_id IN (SELECT trajectory_id FROM trajectories WHERE blueprint_id = ?)"
        verdicts = {v.trajectory_id: v for v in store.read(Verdict, of_task, [task_id])}
        tools = store.read(ToolRow, cluster_id=trajectories[0].cluster_id)
        blueprints = store.read(BlueprintRow, blueprint_id=task_id)
    write_tools = {t.name for t in tools if t.access == "write" and t.name} if tools else None
    hidden = blueprints[0].hidden_info if blueprints else None
    return trajectories, verdicts, write_tools, hidden if isinstance(hidden, dict) else None


def load_trajectory(
    store: Store, trajectory_id: str
) -> tuple[Trajectory, Verdict | None, Signals | None]:
    """One stored trajectory (any unique id prefix) with its verdict and signals when curation
    stored them: what a transcript reads. ``InputError`` for an unknown id."""
    row = store.get("trajectories", trajectory_id)
    if row is None:
        raise InputError(f"no trajectory with id {trajectory_id!r} in {store.path}")
    trajectory = model_from_row(Trajectory, row)
    tid = trajectory.trajectory_id
    verdicts = store.read(Verdict, trajectory_id=tid)
    signals = store.read(Signals, trajectory_id=tid)
    return trajectory, verdicts[0] if verdicts else None, signals[0] if signals else None
