"""Store rows for the dashboard tests and ``bench/dashboard.py``: runs, trees, nodes,
trajectories, verdicts, scores, LLM calls and round figures, all consistent with each other.

``task_rows("run-1", "task-1", "shop", ["pass", "fail", "excluded"])`` gives one task: a tree
(root, a middle layer, one leaf per outcome), one trajectory per leaf (built with
``make_trajectory``, so ``synth topo`` and the quotient graph read them), its verdict, score and
LLM calls. Insert with ``store.insert_many(rows)``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from fakes.trajectories import call, make_trajectory
from trajsynth.schemas import FailureClass

__all__ = ["merge", "round_stats_row", "run_row", "synthetic_rows", "task_rows"]

Rows = dict[str, list[dict[str, Any]]]

GOOD = call("get_order", {"order_id": "W1"}, {"status": "delivered"})
BAD = call("get_order", {"order_id": "X9"}, "no such order", error="not_found")


def merge(*parts: Rows) -> Rows:
    out: Rows = {}
    for part in parts:
        for table, rows in part.items():
            out.setdefault(table, []).extend(rows)
    return out


def run_row(run_id: str, state: str, created_at: datetime, *, wall_s: float | None = None) -> Rows:
    """A run; ``wall_s`` given: a finished run whose stored summary holds that wall time (the
    time ``synth run`` measured, not a sum over trajectories)."""
    return {
        "runs": [
            {
                "run_id": run_id,
                "created_at": created_at,
                "updated_at": created_at + timedelta(minutes=5),
                "state": state,
                "config": {"seed": 0},
                "manifest": {},
                "summary": None if wall_s is None else {"run_id": run_id, "wall_s": wall_s},
            }
        ]
    }


def round_stats_row(run_id: str, round_: int, **figures: float) -> Rows:
    row: dict[str, Any] = {"round_key": f"{run_id}:{round_}", "run_id": run_id, "round": round_}
    return {"round_stats": [row | figures]}


def task_rows(
    run_id: str,
    task_id: str,
    cluster_id: str,
    outcomes: Sequence[str],
    *,
    round_: int = 0,
    modes: Sequence[str] | None = None,
    tokens: int = 100,
    wall_s: float = 2.0,
    pruned: bool = False,
) -> Rows:
    """One task's rows; ``outcomes`` holds ``pass``, ``fail``, ``excluded`` or ``unverified``
    per leaf, ``modes`` a reasoning mode per leaf (None: unscored)."""
    tree_id = f"tree-{task_id}"
    root = f"{tree_id}-root"
    n_mid = (len(outcomes) + 1) // 2
    mids = [f"{tree_id}-m{j}" for j in range(n_mid)]
    reward = {"pass": 1.0, "fail": 0.0}
    nodes = [_node(root, tree_id, None, 0, None)]
    for j, mid in enumerate(mids):
        below = [reward.get(o) for o in outcomes[2 * j : 2 * j + 2]]
        values = [v for v in below if v is not None]
        nodes.append(_node(mid, tree_id, root, 1, sum(values) / len(values) if values else None))
    if pruned:
        nodes.append(_node(f"{tree_id}-pruned", tree_id, root, 1, 0.0, prune="repeated_call"))
    rows: Rows = {
        "trees": [
            {
                "tree_id": tree_id, "run_id": run_id, "blueprint_id": task_id, "round": round_,
                "rollout_mode": "tree", "n_nodes": 0, "n_leaves": len(outcomes),
                "pass_rate": None, "total_tokens": tokens * len(outcomes), "wall_s": wall_s,
            }
        ],
        "nodes": nodes,
        "trajectories": [],
        "verdicts": [],
        "scores": [],
        "llm_calls": [
            _llm_call(run_id, None, f"{task_id}-plan", "planner", tokens // 2, tokens // 4)
        ],
    }  # fmt: skip
    for i, outcome in enumerate(outcomes):
        tid = f"{task_id}-t{i}"
        leaf = f"{tree_id}-l{i}"
        mid = mids[i // 2]
        nodes.append(_node(leaf, tree_id, mid, 2, reward.get(outcome), tool="get_order"))
        traj = make_trajectory(
            tid,
            [[GOOD]] if outcome in ("pass", "excluded", "unverified") else [[BAD]],
            task_id=task_id,
            final="Here is what I found." if outcome != "fail" else "Sorry.",
            failure_class=FailureClass.INFRA if outcome == "excluded" else None,
        )
        row = traj.model_dump(mode="json") | {
            "run_id": run_id, "tree_id": tree_id, "leaf_node_id": leaf, "cluster_id": cluster_id,
            "round": round_, "node_ids": [root, mid, leaf], "total_tokens": tokens,
            "wall_s": wall_s, "n_calls": len(traj.calls),
        }  # fmt: skip
        rows["trajectories"].append(row)
        if outcome != "unverified":
            rows["verdicts"].append(
                {
                    "verdict_id": f"v-{tid}", "trajectory_id": tid,
                    "results": _results(outcome == "pass"),
                    "passed": outcome == "pass", "score": 1.0 if outcome == "pass" else 0.0,
                    "excluded": outcome == "excluded",
                }
            )  # fmt: skip
        if outcome == "fail":  # what curation's signals flag on a failed lookup
            rows.setdefault("signals", []).append(
                {"trajectory_id": tid, "run_id": run_id, "round": round_,
                 "failure_rate": 1.0, "failure": True, "no_progress": True}
            )  # fmt: skip
        if modes is not None:
            rows["scores"].append(
                {"trajectory_id": tid, "mode": modes[i], "action_complexity": 3.0 + i,
                 "run_id": run_id, "round": round_}
            )  # fmt: skip
        rows["llm_calls"] += [
            _llm_call(run_id, tid, f"{tid}-u", "user", tokens // 4, tokens // 8),
            _llm_call(run_id, tid, f"{tid}-a", "assistant", tokens // 2, tokens // 4),
        ]
    rows["trees"][0]["n_nodes"] = len(nodes)
    return rows


def _results(passed: bool) -> list[dict[str, Any]]:
    """Constraint results as the verifier writes them: a call check and a state check."""
    return [
        {"index": 0, "kind": "tool_called", "hard": True, "passed": True,
         "detail": "get_order was called"},
        {"index": 1, "kind": "final_state", "hard": True, "passed": passed,
         "detail": "order W1 read" if passed else "order X9 does not exist"},
    ]  # fmt: skip


def _node(
    node_id: str,
    tree_id: str,
    parent: str | None,
    depth: int,
    value: float | None,
    *,
    prune: str | None = None,
    tool: str | None = None,
) -> dict[str, Any]:
    return {
        "node_id": node_id, "tree_id": tree_id, "parent_id": parent, "depth": depth,
        "messages": [], "calls": [{"tool": tool}] if tool else [], "usage": [],
        "prune_reason": prune, "value": value, "n_children": 0,
    }  # fmt: skip


def _llm_call(
    run_id: str, tid: str | None, key: str, role: str, prompt: int, completion: int
) -> dict[str, Any]:
    return {
        "call_key": key, "run_id": run_id, "trajectory_id": tid, "role": role,
        "model": "fake", "prompt_tokens": prompt, "completion_tokens": completion,
        "latency_s": 0.5, "cached": False,
    }  # fmt: skip


def synthetic_rows(
    n_trajectories: int,
    *,
    run_id: str = "run-bench",
    rollouts: int = 4,
    rounds: int = 5,
    seed: int = 0,
    start: int = 0,
) -> Rows:
    """About ``n_trajectories`` trajectories in tasks of ``rollouts`` leaves over ``rounds``
    rounds and 6 clusters, outcomes and modes drawn at random (seeded), plus round figures.
    Task numbers begin at ``start``, so successive calls add new tasks."""
    rng = random.Random(seed)
    clusters = ("shop", "calendar", "bank", "files", "sql", "code")
    modes = ("plan-first", "explore", "verify-then-act", "ask-user", "recover")
    n_tasks = max(1, n_trajectories // rollouts)
    parts: list[Rows] = []
    for k in range(start, start + n_tasks):
        outcomes = rng.choices(("pass", "fail", "excluded"), weights=(6, 3, 1), k=rollouts)
        parts.append(
            task_rows(
                run_id, f"task-{run_id}-{k:06d}", rng.choice(clusters), outcomes,
                round_=(k - start) * rounds // n_tasks, modes=rng.choices(modes, k=rollouts),
                tokens=rng.randint(200, 4000), wall_s=rng.uniform(1, 30), pruned=k % 7 == 0,
            )
        )  # fmt: skip
    for r in range(rounds):
        parts.append(
            round_stats_row(
                run_id, r, n_trajectories=n_trajectories // rounds,
                domain_entropy=rng.uniform(1.2, 1.79), reasoning_mode_entropy=rng.uniform(1, 1.6),
                action_complexity=rng.uniform(3, 9), error_branch_ratio=rng.uniform(0.1, 0.5),
            )
        )  # fmt: skip
    return merge(*parts)
