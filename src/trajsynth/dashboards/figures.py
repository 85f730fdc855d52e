"""Plotly figures of a rollout tree and a task's quotient graph, laid out in layers.

Both are drawn full width with zoom and pan (plotly's own controls; the wheel zooms). A tree
is laid out in layers by depth, leaves in depth-first order and each parent level with its
children (no crossing edges; networkx walks the tree). A quotient graph's layer is a state's
distance from the start (networkx shortest paths, docs/methods.md §8), the terminals last, and each
layer is ordered by where its predecessors sit (barycentre), so its edges seldom cross: the
positions of ``dashboards.quotient_drawing.layered_positions``, which ``synth topo`` draws too.
pygraphviz is not installed, so Graphviz ``dot`` is not used. Nodes carry
a short label under them; the long text (node id, tool, value, outcome) is in the hover, so no
label runs over a neighbour.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import networkx as nx
import plotly.graph_objects as go

__all__ = ["PLOTLY_CONFIG", "quotient_figure", "tree_figure"]

PLOTLY_CONFIG = {"scrollZoom": True, "displaylogo": False, "responsive": True}
_PASSED = "#7fc97f"
_FAILED = "#f0787a"
_GREY = "#cfcfcf"
_PRUNED = "#fdb462"
_INNER = "#ffffff"
_SHORT = 14  # characters of a node label; the rest is in the hover


def _short(text: str) -> str:
    return text if len(text) <= _SHORT else text[: _SHORT - 1] + "…"


def _tree_positions(
    graph: nx.DiGraph, roots: Sequence[Any], by_id: Mapping[Any, Mapping[str, Any]]
) -> dict[Any, tuple[float, float]]:
    """A tidy layered tree: x the depth; leaves one unit apart from the top in depth-first
    order, each inner node level with the middle of its children, so no two edges cross."""
    pos: dict[Any, tuple[float, float]] = {}
    slot = 0
    for root in roots:
        for node in nx.dfs_postorder_nodes(graph, root, sort_neighbors=sorted):
            depth = float(by_id[node].get("depth") or 0)
            kids = [pos[c] for c in graph.successors(node) if c in pos]
            if kids:
                pos[node] = (depth, statistics.fmean(y for _, y in kids))
            else:
                pos[node] = (depth, -float(slot))
                slot += 1
    return pos


def _edges_trace(pos: Mapping[Any, tuple[float, float]], edges: Sequence[tuple[Any, Any]],
                 color: str, width: float, name: str) -> go.Scatter:  # fmt: skip
    xs: list[float | None] = []
    ys: list[float | None] = []
    for u, v in edges:
        xs += [pos[u][0], pos[v][0], None]
        ys += [pos[u][1], pos[v][1], None]
    return go.Scatter(x=xs, y=ys, mode="lines", line={"color": color, "width": width},
                      hoverinfo="skip", name=name, showlegend=False)  # fmt: skip


def _layout(fig: go.Figure, pos: Mapping[Any, tuple[float, float]], title: str) -> go.Figure:
    n_layers = len({x for x, _ in pos.values()}) or 1
    ys = [y for _, y in pos.values()] or [0.0]
    fig.update_layout(
        title={"text": title, "font": {"size": 14}},
        # 70 px between rows up to 2,400 px; a taller tree is read by zooming in
        height=min(2400, max(360, int(70 * (max(ys) - min(ys) + 1)) + 120)),
        dragmode="pan",
        hovermode="closest",
        margin={"l": 20, "r": 20, "t": 50, "b": 20},
        plot_bgcolor="white",
        xaxis={"visible": False, "range": [-0.6, n_layers - 0.4]},
        # room above and below for the labels under the outermost nodes
        yaxis={"visible": False, "range": [min(ys) - 0.7, max(ys) + 0.4]},
        legend={"orientation": "h", "y": -0.02},
    )
    return fig


def _outcome(node: Mapping[str, Any], leaf: Mapping[str, Any] | None) -> tuple[str, str]:
    if node.get("prune_reason"):
        return f"pruned: {node['prune_reason']}", _PRUNED
    if leaf is None:
        return "", _INNER
    if leaf.get("excluded"):
        return "excluded", _GREY
    if leaf.get("passed") is None:
        return "unverified", _GREY
    return ("pass", _PASSED) if leaf["passed"] else ("fail", _FAILED)


def tree_figure(
    nodes: Sequence[Mapping[str, Any]], leaves: Sequence[Mapping[str, Any]], *, title: str = ""
) -> go.Figure:
    """A rollout tree: depth left to right; a node shows its tool and outcome (pass, fail,
    excluded, unverified, pruned), its hover the node id, depth, value and trajectory.
    Colours: green passed, red failed, grey excluded or unverified, orange pruned."""
    by_id = {n["node_id"]: n for n in nodes}
    outcome = {leaf["leaf_node_id"]: leaf for leaf in leaves}
    children: dict[Any, list[Any]] = {}
    roots = []
    for n in nodes:
        parent = n.get("parent_id")
        if parent in by_id:
            children.setdefault(parent, []).append(n["node_id"])
        else:
            roots.append(n["node_id"])
    graph = nx.DiGraph()
    graph.add_nodes_from(by_id)
    graph.add_edges_from((p, c) for p, cs in children.items() for c in cs)
    pos = _tree_positions(graph, roots, by_id)
    text, hover, colors = [], [], []
    for node_id in graph.nodes:
        node = by_id[node_id]
        leaf = outcome.get(node_id)
        word, color = _outcome(node, leaf)
        depth = node.get("depth") or 0
        tool = str(node.get("tool") or ("root" if node.get("parent_id") is None else f"d{depth}"))
        text.append(_short(tool) + (f"<br>{word}" if word else ""))
        value = node.get("value")
        lines = [f"<b>{node_id}</b>", f"depth {node.get('depth', 0)}", f"tool {tool}"]
        if value is not None:
            lines.append(f"value {value:.2f}")
        if word:
            lines.append(word)
        if leaf is not None:
            lines.append(f"trajectory {leaf.get('trajectory_id')}")
        hover.append("<br>".join(lines))
        colors.append(color)
    fig = go.Figure(_edges_trace(pos, list(graph.edges), "#999999", 1.5, "edge"))
    fig.add_trace(
        go.Scatter(
            x=[pos[n][0] for n in graph.nodes], y=[pos[n][1] for n in graph.nodes],
            mode="markers+text", text=text, textposition="bottom center",
            textfont={"size": 12, "color": "#222222"}, hovertext=hover, hoverinfo="text",
            name="node",
            marker={"size": 22, "color": colors, "line": {"color": "#333333", "width": 1}},
            showlegend=False, customdata=list(graph.nodes),
        )
    )  # fmt: skip
    return _layout(fig, pos, title)


def quotient_figure(graph: nx.MultiDiGraph, *, title: str = "") -> go.Figure:
    """A task's quotient graph (``curation.topology.build_quotient_graph``): layers by distance
    from the start, terminals (success, fail) in the last layer. Edges on a successful rollout
    green, error edges red, others grey; nodes labelled S1/E1 with the tool in the hover."""
    from trajsynth.curation.topology import FAIL, SUCCESS
    from trajsynth.dashboards.quotient_drawing import layered_positions

    pos = layered_positions(graph)  # the layout `synth topo` draws too
    layer = list(pos)  # layer by layer, top row first
    groups: dict[str, list[tuple[Any, Any]]] = {"success": [], "error": [], "other": []}
    for u, v, data in graph.edges(data=True):
        if u == v:
            continue
        key = "error" if data.get("error") else ("success" if data.get("on_success") else "other")
        groups[key].append((u, v))
    fig = go.Figure()
    for key, color in (("other", "#aaaaaa"), ("error", "#d62728"), ("success", "#2ca02c")):
        fig.add_trace(_edges_trace(pos, groups[key], color, 2.5, key))
    colors = {"start": "#9ecae1", "state": "#ffffff", "error": _FAILED, SUCCESS: _PASSED,
              FAIL: "#bdbdbd"}  # fmt: skip
    counters: dict[str, int] = {}
    text, hover = [], []
    for node in layer:
        data = graph.nodes[node]
        kind = data["kind"]
        if kind in ("start", SUCCESS, FAIL):
            label = str(kind)
        else:
            counters[kind] = counters.get(kind, 0) + 1
            label = ("E" if kind == "error" else "S") + str(counters[kind])
        text.append(label)
        lines = [f"<b>{label}</b> ({kind})", f"rollouts {len(data.get('rollouts', []))}"]
        if data.get("tool"):
            lines.append(f"tool {data['tool']}")
        if data.get("error_type"):
            lines.append(f"error {data['error_type']}")
        lines.append(_short(str(node)) if len(str(node)) > 60 else str(node))
        hover.append("<br>".join(lines))
    fig.add_trace(
        go.Scatter(
            x=[pos[n][0] for n in layer], y=[pos[n][1] for n in layer],
            mode="markers+text", text=text, textposition="bottom center",
            textfont={"size": 12, "color": "#222222"}, hovertext=hover, hoverinfo="text",
            name="state",
            marker={"size": 22, "color": [colors.get(graph.nodes[n]["kind"], _GREY) for n in layer],
                    "line": {"color": "#333333", "width": 1}},
            showlegend=False,
        )
    )  # fmt: skip
    return _layout(fig, pos, title)
