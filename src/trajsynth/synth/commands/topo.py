"""`synth topo TASK_ID`: draw one task's quotient graph from the store (METHODS.md §8)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from trajsynth.curation.topology import build_quotient_graph, draw_quotient_graph, task_metrics
from trajsynth.schemas import InputError, Trajectory, Verdict
from trajsynth.synth.store import Store

__all__ = ["app", "load_task", "topo"]

# For ``synth topo TASK_ID`` mount the function itself: ``app.command("topo")(topo.topo)``
# (a one-command sub-app mounted with ``add_typer`` would read ``synth topo topo TASK_ID``).
app = typer.Typer(help="Draw a task's quotient graph (success branches green, errors red).")
console = Console()


def _model_fields(model: type[Trajectory] | type[Verdict], row: Mapping[str, Any]) -> dict:
    return {k: v for k, v in row.items() if k in model.model_fields and v is not None}


def load_task(
    store: Store, task_id: str
) -> tuple[list[Trajectory], dict[str, Verdict], set[str] | None, dict[str, Any] | None]:
    """The task's trajectories, their verdicts, its cluster's write tools and hidden info."""
    rows = store.query("SELECT * FROM trajectories WHERE blueprint_id = ?", [task_id])
    if not rows:
        raise InputError(f"no trajectories for task {task_id!r} in {store.path}")
    trajectories = [Trajectory.model_validate(_model_fields(Trajectory, r)) for r in rows]
    ids = [t.trajectory_id for t in trajectories]
    placeholders = ", ".join("?" for _ in ids)
    verdicts = {
        r["trajectory_id"]: Verdict.model_validate(_model_fields(Verdict, r))
        for r in store.query(f"SELECT * FROM verdicts WHERE trajectory_id IN ({placeholders})", ids)
    }
    tools = store.query(
        "SELECT name, access FROM tools WHERE cluster_id = ?", [trajectories[0].cluster_id]
    )
    write_tools = {r["name"] for r in tools if r["access"] == "write"} if tools else None
    bp = store.query("SELECT hidden_info FROM blueprints WHERE blueprint_id = ?", [task_id])
    hidden = bp[0]["hidden_info"] if bp and isinstance(bp[0]["hidden_info"], dict) else None
    return trajectories, verdicts, write_tools, hidden


@app.command()
def topo(
    task_id: Annotated[str, typer.Argument(help="the task (blueprint id)")],
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help=".png, .svg or .html (default: PNG)")
    ] = None,
    store_path: Annotated[Path | None, typer.Option("--store", help="DuckDB store")] = None,
) -> None:
    """Write the task's quotient graph as a picture and print its topology metrics."""
    if store_path is None:
        from trajsynth.synth import cli  # the CLI mounts this module: import it late

        store_path = cli.settings().store_path
    trajectories, verdicts, write_tools, hidden = load_task(Store(store_path), task_id)
    graph = build_quotient_graph(
        trajectories, verdicts, write_tools=write_tools, hidden_info=hidden
    )
    path = draw_quotient_graph(graph, out or Path(f"topo-{task_id}.png"))
    metrics = task_metrics(graph)
    table = Table(title=f"topology of {task_id}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in metrics.model_dump().items():
        table.add_row(key, f"{value:.4g}" if isinstance(value, float) else str(value))
    console.print(table)
    console.print(f"wrote {path}")
