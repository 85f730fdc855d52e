"""A store holding what ``synth export`` reads: rollouts, verdicts, blueprints, scores,
selections, a run and (optionally) a ``round_stats`` row.

``export_store(path)`` builds it from hand-built trajectories: three rollouts of ``task-1``
(t1, t2 pass; t3 fails), one of ``task-2`` (t4, passes); SFT selects t1, t2, t4; RL selects
task-1. ``bad_args`` makes t2's call arguments invalid JSON.
"""

from __future__ import annotations

from pathlib import Path

from fakes.store_rows import RUN, blueprint_row, write_round
from fakes.trajectories import call, make_trajectory, verdicts_for
from trajsynth.store import Store

__all__ = ["RUN", "export_store", "select"]

CONSTRAINT = {"kind": "tool_called", "call": {"tool": "get_order", "matchers": {"order_id": "W1"}}}


def select(kind: str, item_id: str, task_id: str, *, selected: bool = True) -> dict:
    return {
        "selection_id": f"sel-{kind}-{item_id}",
        "run_id": RUN,
        "kind": kind,
        "item_id": item_id,
        "task_id": task_id,
        "round": 0,
        "selected": selected,
        "score": 0.75,
        "rank": 0,
        "reason": "test",
    }


def export_store(
    path: Path, *, bad_args: bool = False, stats: bool = True, selections: bool = True
) -> Store:
    store = Store(path)
    t2_args = '{"order_id": W2' if bad_args else {"order_id": "W2"}
    trajectories = [
        make_trajectory(
            "t1",
            [[call("get_order", {"order_id": "W1"}, {"status": "ok"})]],
            final="Order W1's status is ok.",
        ),
        make_trajectory(
            "t2",
            ["Which order?", [call("get_item", t2_args, {"sku": "M1"})]],
            replies={0: "W2 please."},
            final="The item on order W2 is M1.",
        ),
        make_trajectory("t3", [[call("cancel_order", {"order_id": "W1"})]]),
        make_trajectory(
            "t4", [[call("list_items", {}, [{"sku": "A"}])]], task_id="task-2", final="Done ✓."
        ),
    ]
    blueprints = []
    for task, mode in (("task-1", "direct_execute"), ("task-2", "clarify")):
        row = blueprint_row(task, mode=mode)
        row.update(initial_state_id=f"state-{task}", seed=7, constraints=[CONSTRAINT])
        blueprints.append(row)
    write_round(
        store,
        trajectories,
        verdicts_for({"t1": True, "t2": True, "t3": False, "t4": True}),
        blueprints=blueprints,
    )
    scores = [
        {
            "trajectory_id": tid,
            "action_complexity": cac,
            "mode_label": mode,
            "domain": "retail",
            "run_id": RUN,
        }
        for tid, cac, mode in (
            ("t1", 1.5, "direct_execute"),
            ("t2", 3.25, "clarify"),
            ("t4", 2.0, "direct_execute"),
        )
    ]
    rows: dict[str, list[dict]] = {"scores": scores}
    if selections:
        rows["selections"] = [
            select("sft", "t1", "task-1"),
            select("sft", "t2", "task-1"),
            select("sft", "t3", "task-1", selected=False),
            select("sft", "t4", "task-2"),
            select("rl", "task-1", "task-1"),
            select("rl", "task-2", "task-2", selected=False),
        ]
        rows["task_topology"] = [
            {
                "task_id": "task-1",
                "run_id": RUN,
                "round": 0,
                "cluster_id": "shop",
                "pass_rate": 2 / 3,
            }
        ]
    if stats:
        rows["round_stats"] = [
            {
                "round_key": f"{RUN}:0",
                "run_id": RUN,
                "round": 0,
                "n_trajectories": 4,
                "pass_rate": 0.75,
                "domain_entropy": 0.0,
                "reasoning_mode_entropy": 0.918,
                "action_complexity": 2.25,
                "error_branch_ratio": 0.125,
                "n_sft_selected": 3,
                "n_rl_selected": 1,
            }
        ]
        rows["runs"] = [
            {
                "run_id": RUN,
                "state": "done",
                "config": {"model": "smollm2", "rounds": 1, "llm_api_key": "sk-secret"},
            }
        ]
    store.insert_many(rows)
    return store
