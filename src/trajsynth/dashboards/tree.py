"""A rollout tree as Graphviz DOT (drawn in the browser by the dashboard).

A node is labelled with its depth, its first tool call and its value (the leaves' mean reward
below it, METHODS.md §9.1). Leaves are coloured by their trajectory's verdict: green passed,
red failed, grey excluded or unverified; a pruned node is orange and dashed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["tree_dot"]

_PASSED = "#b7e4b7"
_FAILED = "#f4b6b6"
_GREY = "#e0e0e0"
_PRUNED = "#ffd8a8"


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def tree_dot(nodes: Sequence[Mapping[str, Any]], leaves: Sequence[Mapping[str, Any]]) -> str:
    """DOT source for one tree: ``nodes`` rows from the ``nodes`` table, ``leaves`` with
    ``leaf_node_id``, ``passed`` and ``excluded`` per trajectory.

    >>> tree_dot([{"node_id": "n1", "parent_id": None, "depth": 0}], []).splitlines()[0]
    'digraph rollout_tree {'
    """
    outcome = {leaf["leaf_node_id"]: leaf for leaf in leaves}
    known = {n["node_id"] for n in nodes}
    lines = [
        "digraph rollout_tree {",
        "  rankdir=LR;",
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];',
    ]
    for i, node in enumerate(nodes):
        node_id = node["node_id"]
        parts = [f"d{node.get('depth', 0)}"]
        if node.get("tool"):
            parts.append(str(node["tool"]))
        if node.get("value") is not None:
            parts.append(f"v={node['value']:.2f}")
        attrs = {"fillcolor": "white", "tooltip": node_id}
        leaf = outcome.get(node_id)
        if node.get("prune_reason"):
            parts.append(f"pruned: {node['prune_reason']}")
            attrs.update(fillcolor=_PRUNED, style="rounded,filled,dashed")
        elif leaf is not None:
            if leaf.get("excluded") or leaf.get("passed") is None:
                attrs["fillcolor"] = _GREY
                parts.append("excluded" if leaf.get("excluded") else "unverified")
            else:
                attrs["fillcolor"] = _PASSED if leaf["passed"] else _FAILED
                parts.append("pass" if leaf["passed"] else "fail")
        attrs["label"] = "\n".join(parts)
        rendered = ", ".join(f"{k}={_quote(str(v))}" for k, v in attrs.items())
        lines.append(f"  n{i} [{rendered}];")
    index = {n["node_id"]: i for i, n in enumerate(nodes)}
    for node in nodes:
        parent = node.get("parent_id")
        if parent in known:
            lines.append(f"  n{index[parent]} -> n{index[node['node_id']]};")
    lines.append("}")
    return "\n".join(lines)
