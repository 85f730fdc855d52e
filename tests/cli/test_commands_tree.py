"""`synth show tree`: a stored tree drawn with its values, branch decisions and outcomes."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from trajsynth.cli.commands.tree import render_tree
from trajsynth.schemas import InputError
from trajsynth.store import Store


def _node(node_id: str, parent: str | None, depth: int, **extra: object) -> dict[str, object]:
    return {
        "node_id": node_id,
        "tree_id": "tree_demo",
        "parent_id": parent,
        "depth": depth,
        "messages": [],
        "calls": [],
        **extra,
    }


def _store(tmp_path: Path) -> Store:
    store = Store(tmp_path / "s.duckdb")
    call = {
        "call_id": "c1",
        "tool": "get_product",
        "raw_arguments": '{"product_id": "p1"}',
        "obs_class": "ok",
    }
    bad = {**call, "raw_arguments": '{"product_id": "nope"}', "obs_class": "error"}
    store.insert_many(
        {
            "trees": [
                {
                    "tree_id": "tree_demo",
                    "run_id": "r",
                    "blueprint_id": "bp",
                    "round": 0,
                    "rollout_mode": "tree",
                    "n_nodes": 4,
                    "n_leaves": 2,
                    "pass_rate": 0.5,
                    "total_tokens": 900,
                    "wall_s": 3.5,
                    "generated_tokens": 321,
                }
            ],
            "nodes": [
                _node(
                    "n_root",
                    None,
                    0,
                    value=0.5,
                    n_children=1,
                    messages=[{"role": "user", "content": "Find product p1"}],
                    branch={"after": "root", "branched": False, "width": 1},
                ),
                _node(
                    "n_call",
                    "n_root",
                    1,
                    value=0.5,
                    advantage=0.0,
                    n_children=2,
                    calls=[call],
                    branch={"after": "tool", "branched": True, "width": 2, "p": 0.7},
                ),
                _node(
                    "n_good",
                    "n_call",
                    2,
                    value=1.0,
                    advantage=0.5,
                    messages=[{"role": "assistant", "content": "It costs 12 dollars."}],
                ),
                _node(
                    "n_bad",
                    "n_call",
                    2,
                    value=0.0,
                    advantage=-0.5,
                    calls=[bad],
                    prune_reason="repeated_failing_call: get_product",
                ),
            ],
            "trajectories": [
                {
                    "trajectory_id": "t_good",
                    "run_id": "r",
                    "blueprint_id": "bp",
                    "tree_id": "tree_demo",
                    "leaf_node_id": "n_good",
                    "cluster_id": "shop",
                    "messages": [],
                    "termination": "user_stop",
                },
                {
                    "trajectory_id": "t_bad",
                    "run_id": "r",
                    "blueprint_id": "bp",
                    "tree_id": "tree_demo",
                    "leaf_node_id": "n_bad",
                    "cluster_id": "shop",
                    "messages": [],
                    "termination": "pruned",
                    "failure_class": "tool",
                },
            ],
            "verdicts": [
                {
                    "verdict_id": "v1",
                    "trajectory_id": "t_good",
                    "results": [],
                    "passed": True,
                    "score": 1.0,
                    "excluded": False,
                },
                {
                    "verdict_id": "v2",
                    "trajectory_id": "t_bad",
                    "results": [],
                    "passed": False,
                    "score": 0.0,
                    "excluded": False,
                },
            ],
        }
    )
    return store


def test_show_tree_draws_values_branches_and_outcomes(tmp_path: Path) -> None:
    console = Console(width=200, record=True)
    console.print(render_tree(_store(tmp_path), "tree_de"))  # a unique prefix is enough
    text = console.export_text()
    assert "4 nodes, 2 leaves, pass rate 50%, 321 generated tokens" in text
    assert "task: Find product p1" in text
    assert 'get_product(product_id="p1")  V=0.50 A=+0.00  branch×2 (tool, P=0.70)' in text
    assert "says: 'It costs 12 dollars.'  V=1.00 A=+0.50  ✓ passed" in text
    assert "✗  V=0.00 A=-0.50  pruned: repeated_failing_call: get_product  ✗ failed (tool)" in text
    lines = text.splitlines()
    depth = {k: next(i for i, line in enumerate(lines) if k in line) for k in ("p1", "12 dollars")}
    assert depth["p1"] < depth["12 dollars"]  # children drawn under their parent


def test_unknown_tree_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no tree with id 'tree_nope'"):
        render_tree(_store(tmp_path), "tree_nope")
