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


def test_node_values_count_clean_passes_so_a_good_and_a_bad_branch_differ() -> None:
    """Two leaves whose constraints both held: one clean, one not (it called a tool that
    does not exist and never answered). The shaped scores made every node 0.95 with no
    advantage; valued by clean passes the branches part: V 1 and 0, A +0.5 and -0.5."""
    from trajsynth.agents.judge import _valued
    from trajsynth.schemas import Node

    nodes = [Node(node_id=i, tree_id="t", parent_id=p) for i, p in
             [("r", None), ("a", "r"), ("b", "r")]]  # fmt: skip
    good = make_trajectory("good", [[GOOD]]).model_copy(update={"node_ids": ["r", "a"]})
    bad = make_trajectory("bad", [[GOOD]]).model_copy(update={"node_ids": ["r", "b"]})
    verdicts = [
        make_verdict("good", True).model_copy(update={"score": 0.95}),
        make_verdict("bad", False).model_copy(
            update={"score": 0.05, "constraints_passed": True, "clean": False}
        ),
    ]
    valued = {n.node_id: n for n in _valued(nodes, [good, bad], verdicts)}
    assert (valued["r"].value, valued["a"].value, valued["b"].value) == (0.5, 1.0, 0.0)
    assert (valued["a"].advantage, valued["b"].advantage) == (0.5, -0.5)
