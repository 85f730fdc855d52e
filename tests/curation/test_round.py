"""The round as a plain function: no store, no flow; what it returns is what gets written."""

from __future__ import annotations

import pytest
from fakes.store_rows import hash_embedder
from fakes.trajectories import call, make_trajectory, verdicts_for

from trajsynth.curation.round import RoundInput, run_round
from trajsynth.schemas import CurationConfig

ORDER = {"order_id": "W1", "status": "delivered"}
GOOD = call("get_order", {"order_id": "W1"}, ORDER)
BAD = call("get_order", {"order_id": "X9"}, "no such order", error="not_found")


def _input(**more) -> RoundInput:
    trajectories = [
        make_trajectory("r1", [[GOOD]]),
        make_trajectory("r2", [[GOOD]], final="Order W1 was delivered yesterday, all fine."),
        make_trajectory("r3", [[BAD], [GOOD]]),
        make_trajectory("r4", [[BAD]], final="Sorry, I could not find it."),
    ]
    return RoundInput(
        run_id="run_x",
        round=0,
        config=CurationConfig(),
        input_hash="h",
        trajectories=trajectories,
        verdicts=verdicts_for({"r1": True, "r2": True, "r3": True, "r4": False}),
        embedder=hash_embedder(),
        **more,
    )


def test_the_round_returns_its_report_and_one_row_set_per_table() -> None:
    out = run_round(_input())
    assert (out.report.n_trajectories, out.report.n_verified, out.report.n_tasks) == (4, 3, 1)
    counts = {
        "signals": len(out.signals),
        "trajectory_topology": len(out.trajectory_topology),
        "task_topology": len(out.task_topology),
        "scores": len(out.scores),
        "selections": len(out.selections),
        "mode_codebooks": len(out.codebooks),
        "metric_values": len(out.metric_values),
    }
    assert counts == {
        "signals": 4,
        "trajectory_topology": 4,
        "task_topology": 1,
        "scores": 4,
        "selections": 5,
        "mode_codebooks": 1,
        "metric_values": 3,  # error_recovery_rate of r3 and r4, tokens_per_success
    }
    [task] = out.task_topology
    assert task.pass_rate == pytest.approx(0.75)
    assert set(out.task_graphs) == {task.task_id} and out.round_stats.run_id == "run_x"
    topo = {r.trajectory_id: r for r in out.trajectory_topology}
    assert (topo["r3"].recovered, topo["r3"].efficiency) == (True, 1.0)
    assert set(out.report.timings) >= {"signals", "topology", "selection"}


def test_earlier_rounds_enter_through_the_input() -> None:
    fresh = run_round(_input()).round_stats
    later = run_round(_input(earlier_duplicates=2, earlier_error_branch_ratios=[1.0]))
    stats = later.round_stats
    assert stats.n_duplicates == fresh.n_duplicates  # the round's own count
    assert later.report.cumulative.n_duplicates == fresh.n_duplicates + 2
    assert stats.error_branch_ratio > fresh.error_branch_ratio
