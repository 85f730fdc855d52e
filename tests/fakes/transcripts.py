"""A shop trajectory with a long listing, a failed call and a question, and a failed verdict:
what the transcript tests read."""

from __future__ import annotations

import json

from fakes.trajectories import call, make_trajectory
from trajsynth.schemas import ConstraintResult, Trajectory, Verdict

LONG = json.dumps([{"sku": f"S{i}", "name": f"item {i}"} for i in range(40)], indent=1)


def shop_trajectory() -> Trajectory:
    return make_trajectory(
        "t1",
        [
            [call("get_order", {"order_id": "W1"}, {"status": "shipped"})],
            [call("list_items", {}, LONG), call("cancel_order", {"order_id": "W1"}, "no",
                                              error="ToolError")],
            "Which order do you mean?",
        ],
        replies={2: "W1, please."},
    )  # fmt: skip


def failed_verdict() -> Verdict:
    return Verdict(
        verdict_id="v1",
        trajectory_id="t1",
        passed=False,
        score=0.05,
        results=[
            ConstraintResult(index=0, kind="tool_called", hard=True, passed=True,
                             detail="get_order called with order_id=W1"),
            ConstraintResult(index=1, kind="final_state", hard=True, passed=False,
                             detail="orders.W1.status: expected cancelled, got shipped"),
        ],
    )  # fmt: skip
