"""A task's quotient graph as a picture: the layered layout that the dashboard's figure and
``synth topo`` share, and the matplotlib drawing ``synth topo`` writes (docs/methods.md §8)."""

from __future__ import annotations

import html
import io
import math
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

import networkx as nx

from trajsynth.curation.topology import FAIL, SUCCESS, task_metrics

__all__ = ["draw_quotient_graph", "layered_positions"]

_NODE_COLORS = {
    "start": "#4c72b0",
    "state": "#bbbbbb",
    "error": "#e07b7b",
    SUCCESS: "#2ca02c",
    FAIL: "#d62728",
}


def layered_positions(graph: nx.MultiDiGraph) -> dict[Any, tuple[float, float]]:
    """Where each state of a quotient graph is drawn: x its layer, the distance from the start
    (networkx shortest paths; terminals in the last layer), y one unit per row, each layer
    centred. A layer is ordered by where its predecessors sit (barycentre, one sweep from the
    start), so edges run straight instead of crossing; ties: states above errors, success
    above fail, then by name. The one layout of ``synth topo``'s picture and the dashboard's
    figure. (networkx's ``multipartite_layout`` places given layers but neither orders them
    nor keeps unit rows; Graphviz ``dot`` would, but its binary is not a dependency.)"""
    starts = [n for n, k in graph.nodes(data="kind") if k == "start"]
    depth: dict[Any, int] = {}
    for s in starts:
        for node, d in nx.single_source_shortest_path_length(graph, s).items():
            depth[node] = min(d, depth.get(node, d))
    last = max((d for n, d in depth.items() if n not in (SUCCESS, FAIL)), default=0) + 1
    of = {n: last if n in (SUCCESS, FAIL) else depth.get(n, last - 1) for n in graph.nodes}
    rank: dict[Any, float] = {}
    size: dict[int, int] = {}
    for d in range(last + 1):
        members = sorted((n for n in graph.nodes if of[n] == d), key=str)

        def place(n: Any) -> tuple[float, bool, bool, str]:
            seen = [rank[p] for p in graph.predecessors(n) if p in rank and p != n]
            centre = statistics.fmean(seen) if seen else 0.0
            return centre, graph.nodes[n]["kind"] == "error", n != SUCCESS, str(n)

        for i, n in enumerate(sorted(members, key=place)):
            rank[n] = float(i)
        size[d] = len(members)
    return {
        n: (float(of[n]), (size[of[n]] - 1) / 2.0 - rank[n])
        for n in sorted(graph.nodes, key=lambda n: (of[n], rank[n]))
    }


def _labels(graph: nx.MultiDiGraph) -> dict[str, str]:
    labels: dict[str, str] = {}
    counters = Counter[str]()
    for node in sorted(graph.nodes, key=lambda n: (graph.nodes[n]["step"], str(n))):
        kind = graph.nodes[node]["kind"]
        if kind in (SUCCESS, FAIL, "start"):
            labels[node] = {"start": "start", SUCCESS: "success", FAIL: "fail"}[kind]
            continue
        counters[kind] += 1
        prefix = "E" if kind == "error" else "S"
        tool = graph.nodes[node].get("tool")
        labels[node] = f"{prefix}{counters[kind]}" + (f"\n{tool}" if tool else "")
    return labels


def draw_quotient_graph(
    graph: nx.MultiDiGraph, path: Path | str, *, title: str | None = None
) -> Path:
    """Draw a task's quotient graph to ``path`` (.png, .svg, .pdf or .html) (docs/methods.md §8).

    Edges traversed by a successful rollout are green, error edges (into an error node or a
    node that cannot reach success) red, others grey; width grows with traversals. An ``.html``
    path gets the SVG inline plus a table of the task metrics. Returns the path written.
    """
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyArrowPatch

    out = Path(path)
    pos = layered_positions(graph)
    labels = _labels(graph)
    n_layers = max((x for x, _ in pos.values()), default=0) + 1
    height = max((sum(1 for x2, _ in pos.values() if x2 == x) for x, _ in pos.values()), default=1)
    fig = Figure(figsize=(max(6.0, 2.2 * n_layers), max(4.0, 1.2 * height + 1.5)))
    ax = fig.add_subplot()
    ax.set_axis_off()
    seen: Counter[tuple[str, str]] = Counter()
    for u, v, data in graph.edges(data=True):
        color = "#d62728" if data["error"] else ("#2ca02c" if data["on_success"] else "#888888")
        width = 1.0 + 1.5 * math.log1p(data["count"])
        if u == v:
            x, y = pos[u]
            ax.annotate(f"↺{data['count']}", (x, y + 0.22), ha="center", fontsize=7, color=color)
            continue
        rad = 0.15 * seen[(u, v)]
        seen[(u, v)] += 1
        ax.add_patch(
            FancyArrowPatch(
                pos[u], pos[v], arrowstyle="-|>", mutation_scale=12, linewidth=width, color=color,
                connectionstyle=f"arc3,rad={rad}", shrinkA=14, shrinkB=14, alpha=0.85,
            )
        )  # fmt: skip
    for node, (x, y) in pos.items():
        kind = graph.nodes[node]["kind"]
        ax.scatter([x], [y], s=650, color=_NODE_COLORS.get(kind, "#bbbbbb"), zorder=3,
                   edgecolors="black", linewidths=0.6)  # fmt: skip
        ax.annotate(labels[node], (x, y), ha="center", va="center", fontsize=7, zorder=4)
    xs = [x for x, _ in pos.values()] or [0.0]
    ys = [y for _, y in pos.values()] or [0.0]
    ax.set_xlim(min(xs) - 0.6, max(xs) + 0.6)
    ax.set_ylim(min(ys) - 0.8, max(ys) + 0.8)
    metrics = task_metrics(graph)
    p = "n/a" if metrics.pass_rate is None else f"{metrics.pass_rate:.2f}"
    ax.set_title(
        title
        or f"task {metrics.task_id}: {metrics.n_rollouts} rollouts, p={p}, "
        f"EBR={metrics.error_branch_ratio:.2f}, H_norm={metrics.strategy_entropy_norm:.2f}, "
        f"rl_score={metrics.rl_score:.3f}",
        fontsize=9,
    )
    ax.legend(
        handles=[
            Line2D([], [], color="#2ca02c", label="on a successful rollout"),
            Line2D([], [], color="#d62728", label="error / no success reachable"),
            Line2D([], [], color="#888888", label="other"),
        ],
        loc="lower left",
        fontsize=7,
        frameon=False,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix.lower() in (".html", ".htm"):
        buf = io.StringIO()
        fig.savefig(buf, format="svg", bbox_inches="tight")
        rows = "".join(
            f"<tr><td>{html.escape(k)}</td><td>{html.escape(str(v))}</td></tr>"
            for k, v in metrics.model_dump().items()
        )
        out.write_text(
            "<!doctype html><meta charset='utf-8'>"
            f"<title>quotient graph {html.escape(metrics.task_id)}</title>"
            f"{buf.getvalue()}<table>{rows}</table>\n",
            encoding="utf-8",
        )
    else:
        fig.savefig(out, dpi=120, bbox_inches="tight")
    return out
