"""`synth show tree ID`: a rollout tree drawn in the terminal.

One line per node: what the assistant did (its tool calls, or the start of its reply), how the
calls came back, the node's value V (mean verified score of the leaves below) and advantage A
over its parent, the branch decision that gave it its children, and for a leaf its verdict or
why it was pruned.

Text is shortened on word boundaries (never mid-word) and kept on one logical line: arguments
are shown as ``name=value`` pairs with JSON values, so a newline inside a value stays ``\n``
and rich wraps the label between pairs when the terminal is narrow.
"""

from __future__ import annotations

import json
from typing import Any

from rich.text import Text
from rich.tree import Tree

from trajsynth.schemas import InputError
from trajsynth.store import Store

__all__ = ["render_tree"]


def _short(text: str, limit: int) -> str:
    r"""``text`` on one line (whitespace collapsed), cut at a word boundary past ``limit``.

    >>> _short("find the  red\nmug", 40), _short("alpha beta gamma delta", 12)
    ('find the red mug', 'alpha beta …')
    """
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[:limit]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut) + " …"


def _arguments(raw: str, limit: int = 120) -> str:
    r"""A call's arguments as ``key=value`` pairs (values as compact JSON), shortened on a pair
    boundary; arguments that are not a JSON object are shown as written, newlines escaped.

    >>> print(_arguments('{"name": "Ann Lee", "note": "a\\nb"}'))
    name="Ann Lee", note="a\nb"
    >>> print(_arguments('{"q": "x\ny'))
    {"q": "x\ny
    """
    try:
        parsed = json.loads(raw or "{}")
    except (ValueError, RecursionError):
        parsed = None
    if not isinstance(parsed, dict):
        return _short(raw.replace("\n", "\\n"), limit)
    pairs = [f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in parsed.items()]
    shown: list[str] = []
    for pair in pairs:
        if shown and len(", ".join([*shown, pair])) > limit:
            return ", ".join(shown) + ", …"
        shown.append(pair if len(pair) <= limit else _short(pair, limit))
    return ", ".join(shown)


def _action(node: dict[str, Any]) -> Text:
    messages = node.get("messages") or []
    if node.get("parent_id") is None:
        goal = next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")
        return Text(f"task: {_short(goal, 90)}", style="bold")
    calls = node.get("calls") or []
    if calls:
        text = Text()
        for i, call in enumerate(calls):
            if i:
                text.append(", ")
            ok = call.get("obs_class") != "error"
            text.append(
                f"{call['tool']}({_arguments(call.get('raw_arguments') or '')})",
                style="cyan" if ok else "red",
            )
            if not ok:
                text.append(" ✗", style="red")
        return text
    reply = next((m.get("content") or "" for m in messages if m.get("role") == "assistant"), "")
    user = next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")
    out = Text(f"says: {_short(reply, 60)!r}")
    if user:
        out.append(f"  user: {_short(user, 40)!r}", style="dim")
    return out


def _figures(node: dict[str, Any], leaf: dict[str, Any] | None) -> Text:
    out = Text()
    if node.get("value") is not None:
        out.append(f"  V={node['value']:.2f}", style="bold")
    if node.get("advantage") is not None:
        adv = node["advantage"]
        out.append(f" A={adv:+.2f}", style="green" if adv > 0 else "red" if adv < 0 else "")
    branch = node.get("branch") or {}
    if branch.get("branched") and node.get("parent_id") is not None:
        out.append(
            f"  branch×{branch.get('width')} ({branch.get('after')}, P={branch.get('p', 0):.2f})",
            style="magenta",
        )
    if node.get("prune_reason"):
        out.append(f"  pruned: {_short(node['prune_reason'], 60)}", style="yellow")
    if leaf is not None:
        if leaf["excluded"]:
            out.append(f"  – excluded ({leaf['failure_class']})", style="dim")
        elif leaf["passed"]:
            out.append("  ✓ passed", style="bold green")
        else:
            out.append(f"  ✗ failed ({leaf['failure_class'] or 'model'})", style="red")
    return out


def render_tree(store: Store, tree_id: str) -> Tree:
    """The tree ``tree_id`` (or a unique prefix) as a rich ``Tree``."""
    tree = store.get("trees", tree_id)
    if tree is None:
        raise InputError(
            f"no tree with id {tree_id!r} (list them: synth query 'select * from trees')"
        )
    nodes = store.query(
        "SELECT * FROM nodes WHERE tree_id = ? ORDER BY depth, node_id", [tree["tree_id"]]
    )
    leaves = {
        r["leaf_node_id"]: r
        for r in store.query(
            "SELECT t.leaf_node_id, t.failure_class, v.passed, v.excluded FROM trajectories t "
            "JOIN verdicts v USING (trajectory_id) WHERE t.tree_id = ?",
            [tree["tree_id"]],
        )
    }
    rate = tree.get("pass_rate")
    title = Text(
        f"{tree['tree_id']}  {tree['rollout_mode']}: {tree['n_nodes']} nodes, "
        f"{tree['n_leaves']} leaves, pass rate {'n/a' if rate is None else f'{rate:.0%}'}, "
        f"{tree.get('generated_tokens') or 0:,} generated tokens, {tree['wall_s']:.1f} s",
        style="bold",
    )
    out = Tree(title)
    branches: dict[str | None, Tree] = {}
    for node in nodes:
        parent = branches.get(node["parent_id"], out)
        label = _action(node)
        label.append_text(_figures(node, leaves.get(node["node_id"])))
        branches[node["node_id"]] = parent.add(label)
    return out
