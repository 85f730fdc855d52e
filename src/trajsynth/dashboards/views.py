"""Views over the store that need more than SQL: the dashboard's curation drawings.

``quotient_graph_svg`` draws a task's quotient graph (METHODS.md §8) the way ``synth topo``
does: it loads that one task's trajectories and verdicts and calls ``curation.topology``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from trajsynth.curation.topology import build_quotient_graph, draw_quotient_graph, task_metrics
from trajsynth.store import Store
from trajsynth.store.tasks import load_task

__all__ = ["quotient_graph_svg"]


def quotient_graph_svg(store: Store, task_id: str) -> tuple[str, dict[str, Any]]:
    """The task's quotient graph as SVG text, and its topology metrics (``TaskTopology``).

    Raises ``InputError`` when the store holds no trajectory of the task.
    """
    trajectories, verdicts, write_tools, hidden = load_task(store, task_id)
    graph = build_quotient_graph(
        trajectories, verdicts, write_tools=write_tools, hidden_info=hidden
    )
    with tempfile.TemporaryDirectory(prefix="trajsynth-topo-") as tmp:
        path = draw_quotient_graph(graph, Path(tmp) / "graph.svg")
        svg = path.read_text()
    return svg, task_metrics(graph).model_dump(mode="json")
