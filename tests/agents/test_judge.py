"""Judging a rollout is library code: a failed leaf's class follows its last failing call."""

from __future__ import annotations

from fakes.trajectories import call, make_trajectory, make_verdict

from trajsynth.agents.judge import classify
from trajsynth.schemas import FailureClass

BAD = call("get_order", {"order_id": "X9"}, "no such order", error="not_found",
           failure=FailureClass.TOOL)  # fmt: skip
GOOD = call("get_order", {"order_id": "W1"}, {"status": "delivered"})


def test_a_passed_trajectory_keeps_no_failure_class() -> None:
    t = make_trajectory("a", [[BAD], [GOOD]])
    assert classify(t, make_verdict("a", True)) is None


def test_a_failed_one_is_a_tool_failure_when_a_tool_failed_last() -> None:
    t = make_trajectory("b", [[GOOD], [BAD]])
    assert classify(t, make_verdict("b", False)) is FailureClass.TOOL


def test_a_failed_one_without_a_failing_call_is_the_models() -> None:
    t = make_trajectory("c", [[GOOD]])
    assert classify(t, make_verdict("c", False)) is FailureClass.MODEL


def test_an_infra_fault_stays_what_it_was() -> None:
    t = make_trajectory("d", [[GOOD]], failure_class=FailureClass.INFRA)
    assert classify(t, make_verdict("d", False, excluded=True)) is FailureClass.INFRA
