"""`synth topo TASK_ID`: draw one task's quotient graph from the store (docs/methods.md §8)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from trajsynth.cli.context import current_settings
from trajsynth.cli.ids import resolve
from trajsynth.cli.options import JsonOpt, print_json
from trajsynth.cli.tables import Table
from trajsynth.curation.topology import build_quotient_graph, task_metrics
from trajsynth.dashboards.quotient_drawing import draw_quotient_graph
from trajsynth.store import Store
from trajsynth.store.tasks import load_task

__all__ = ["app", "load_task", "topo"]

# For ``synth topo TASK_ID`` mount the function itself: ``app.command("topo")(topo.topo)``
# (a one-command sub-app mounted with ``add_typer`` would read ``synth topo topo TASK_ID``).
app = typer.Typer(help="Draw a task's quotient graph (success branches green, errors red).")
console = Console()


@app.command()
def topo(
    task_id: Annotated[str, typer.Argument(help="the task (blueprint id, or a unique prefix)")],
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help=".png, .svg or .html (default: PNG)")
    ] = None,
    store_path: Annotated[Path | None, typer.Option("--store", help="DuckDB store")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Write the task's quotient graph as a picture and print its topology metrics."""
    if store_path is None:
        store_path = current_settings().store_path
    store = Store(store_path)
    task_id = resolve(store, "task", task_id)
    trajectories, verdicts, write_tools, hidden = load_task(store, task_id)
    graph = build_quotient_graph(
        trajectories, verdicts, write_tools=write_tools, hidden_info=hidden
    )
    path = draw_quotient_graph(graph, out or Path(f"topo-{task_id}.png"))
    metrics = task_metrics(graph)
    if as_json:
        print_json({"task_id": task_id, "picture": str(path), **metrics.model_dump(mode="json")})
        return
    table = Table(title=f"topology of {task_id}")
    table.add_column("metric", overflow="fold")
    table.add_column("value", justify="right", overflow="fold")
    for key, value in metrics.model_dump().items():
        table.add_row(key, f"{value:.4g}" if isinstance(value, float) else str(value))
    console.print(table)
    console.print(f"wrote {path}")
