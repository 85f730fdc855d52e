"""Views over the store that need more than SQL: the dashboard's curation drawings and the
transcript of one trajectory.

``quotient_graph`` builds a task's quotient graph (docs/methods.md §8) the way ``synth topo`` does:
it loads that one task's trajectories and verdicts and calls ``curation.topology``.
``load_transcript`` reads one trajectory with its verdict and signals and hands them to
``curation.transcript.transcript`` (the reading ``synth show trajectory`` prints).
"""

from __future__ import annotations

from typing import Any

import networkx as nx

from trajsynth.curation.topology import build_quotient_graph, task_metrics
from trajsynth.curation.transcript import Transcript, transcript
from trajsynth.store import Store
from trajsynth.store.tasks import load_task, load_trajectory

__all__ = ["load_transcript", "quotient_graph"]


def quotient_graph(store: Store, task_id: str) -> tuple[nx.MultiDiGraph, dict[str, Any]]:
    """The task's quotient graph and its topology metrics (``TaskTopology``).

    Raises ``InputError`` when the store holds no trajectory of the task.
    """
    trajectories, verdicts, write_tools, hidden = load_task(store, task_id)
    graph = build_quotient_graph(
        trajectories, verdicts, write_tools=write_tools, hidden_info=hidden
    )
    return graph, task_metrics(graph).model_dump(mode="json")


def load_transcript(store: Store, trajectory_id: str) -> Transcript:
    """The transcript of a stored trajectory (any unique id prefix). Raises ``InputError`` for
    an unknown id."""
    return transcript(*load_trajectory(store, trajectory_id))
