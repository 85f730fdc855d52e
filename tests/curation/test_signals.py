"""Cheap trajectory signals and triage (docs/methods.md §7)."""

from __future__ import annotations

import pytest
from fakes.trajectories import call, make_trajectory, make_verdict

from trajsynth.curation.signals import (
    TRIAGE_WEIGHTS,
    bigram_jaccard,
    compute_signals,
    registered_detectors,
    stagnation_efficiency,
    token_jaccard,
    triage_score,
)
from trajsynth.schemas import FailureClass, Message, Termination, Trajectory

TOL = 1e-4
GOOD = call("get_order", {"order_id": "W1"}, {"status": "delivered"})
BAD = call("get_order", {"order_id": "X9"}, "no such order", error="not_found")


def test_every_signal_of_the_table_is_registered() -> None:
    assert registered_detectors() == [
        "disengagement",
        "exhaustion",
        "failure",
        "loop",
        "misalignment",
        "satisfaction",
        "stagnation",
    ]


def test_methods_example_nine_turns() -> None:
    assert stagnation_efficiency(9) == pytest.approx(0.45455, abs=TOL)
    assert stagnation_efficiency(5) == 1.0 and stagnation_efficiency(0) == 1.0
    reads = [[call("get_item", {"order_id": f"W{i}"}, {"n": i})] for i in range(8)]
    s = compute_signals(make_trajectory("t", reads))  # 8 call turns + the final answer
    assert s.efficiency == pytest.approx(0.45455, abs=TOL)
    assert s.stagnation and not s.no_progress


def test_clean_run_has_no_flags_but_satisfaction() -> None:
    s = compute_signals(make_trajectory("t", [[GOOD]]), verdict=make_verdict("t", True))
    assert s.trajectory_id == "t"
    assert not any([s.misalignment, s.stagnation, s.disengagement, s.failure, s.loop, s.exhaustion])
    assert (s.satisfaction, s.satisfaction_count, s.satisfaction_confidence) == (True, 1, 0.6)
    assert s.triage == 0.0


def test_misalignment_counts_repairs_over_user_turns() -> None:
    traj = make_trajectory(
        "t",
        ["Which order?", "Which item?", "Anything else?"],
        replies={0: "No, I meant the blue mug.", 1: "To clarify: the blue mug.", 2: "ok"},
        closing=None,
    )
    s = compute_signals(traj)
    # user turns: opening + 3 replies = 4; repairs: 2
    assert s.misalignment_ratio == pytest.approx(0.5, abs=TOL)
    assert s.misalignment
    rephrase = make_trajectory(
        "u", ["Sorry?"], opening="cancel order W1 today", replies={0: "cancel the order W1 today"}
    )
    assert compute_signals(rephrase).misalignment_ratio == pytest.approx(1 / 3, abs=TOL)
    assert token_jaccard("cancel order W1", "the order W1 cancel") == 1.0


def test_no_progress_after_three_turns_without_a_new_state() -> None:
    s = compute_signals(make_trajectory("t", [[GOOD], [BAD], [BAD], [GOOD]], final=None))
    assert s.no_progress and s.stagnation
    assert s.failure_rate == pytest.approx(0.5, abs=TOL)
    fresh = [[call("get_item", {"order_id": f"W{i}"}, {"n": i})] for i in range(3)]
    assert not compute_signals(make_trajectory("u", fresh, final=None)).no_progress
    short = compute_signals(make_trajectory("v", [[BAD]], final=None))
    assert not short.no_progress  # fewer than 3 assistant turns


def test_no_progress_counts_a_revealed_hidden_slot_when_given_the_task_steps() -> None:
    from trajsynth.curation.topology import trajectory_steps

    # a read, then three asks: only the third answer reveals the order id the task hides
    asks = make_trajectory(
        "t",
        [[GOOD], "Which order?", "Which order exactly?", "The id, please?"],
        replies={1: "The last one.", 2: "The recent one.", 3: "It is W1."},
        opening="Please check my last order.",
        final="Done.",
    )
    assert compute_signals(asks).no_progress  # without the task, an answer is no new state
    steps = trajectory_steps(asks, hidden_info={"order_id": "W1"})
    assert not compute_signals(asks, steps=steps).no_progress


def test_disengagement_by_phrase_or_early_user_stop() -> None:
    quit_ = make_trajectory("t", ["Which one?"], replies={0: "Forget it, I give up."})
    assert compute_signals(quit_).disengagement
    stopped = make_trajectory("u", [[GOOD]])
    assert not compute_signals(stopped).disengagement  # no verdict: phrases only
    assert compute_signals(stopped, verdict=make_verdict("u", False)).disengagement
    assert not compute_signals(
        stopped, verdict=make_verdict("u", False, excluded=True)
    ).disengagement


def test_satisfaction_confidence_levels() -> None:
    def conf(text: str) -> tuple[int, float]:
        s = compute_signals(make_trajectory("t", [[GOOD]], closing=text))
        return s.satisfaction_count, s.satisfaction_confidence

    assert conf("ok") == (0, 0.0)
    assert conf("Thanks!") == (1, 0.6)
    assert conf("Perfect, thanks!") == (2, 0.8)
    assert conf("Perfect, that worked, thank you!") == (3, 0.95)
    opening_only = make_trajectory(
        "u", [[GOOD]], opening="Thanks in advance, check W1", closing=None
    )
    assert compute_signals(opening_only).satisfaction_count == 0  # the task is not a reaction


def test_failure_rate_and_malformed_calls() -> None:
    broken = call(
        "get_order", '{"order_id": ', "bad json", error="invalid_json", failure=FailureClass.MODEL
    )
    infra = call(
        "get_order",
        {"order_id": "W1"},
        "sandbox died",
        error="SandboxError",
        failure=FailureClass.INFRA,
    )
    s = compute_signals(make_trajectory("t", [[GOOD, broken, BAD, infra]]))
    assert s.failure_rate == pytest.approx(2 / 3, abs=TOL)  # infra call left out
    assert s.malformed_calls == 1 and s.failure
    assert compute_signals(make_trajectory("u", [])).failure_rate == 0.0


def test_loop_by_repeated_calls() -> None:
    three = compute_signals(make_trajectory("t", [[BAD]] * 3, final=None))
    assert (three.repetition_instances, three.loop) == (1, False)
    five = compute_signals(make_trajectory("u", [[BAD]] * 5, final=None))
    assert (five.repetition_instances, five.loop) == (3, True)
    spread = (
        [[BAD]] + [[call("get_item", {"order_id": f"W{i}"})] for i in range(10)] + [[BAD], [BAD]]
    )
    assert compute_signals(make_trajectory("v", spread, final=None)).repetition_instances == 0


def test_loop_by_repeated_assistant_text() -> None:
    text = "Let me check the status of your order right away for you."
    s = compute_signals(make_trajectory("t", [text, text, text, text], final=None))
    assert s.repetition_instances == 3 and s.loop
    assert bigram_jaccard(text, text) == 1.0
    assert bigram_jaccard("a", "a") == 0.0  # no bigrams, no evidence


@pytest.mark.parametrize(
    ("termination", "flag"),
    [
        (Termination.MAX_TURNS, True),
        (Termination.TOKEN_BUDGET, True),
        (Termination.TOOL_BUDGET, True),
        (Termination.EARLY_STOP, True),
        (Termination.USER_STOP, False),
        (Termination.ASSISTANT_DONE, False),
    ],
)
def test_exhaustion(termination: Termination, flag: bool) -> None:
    assert (
        compute_signals(make_trajectory("t", [[GOOD]], termination=termination)).exhaustion is flag
    )


def test_triage_weights_flags() -> None:
    traj = make_trajectory(
        "t", [[BAD]] * 9, final=None, termination=Termination.MAX_TURNS, closing=None
    )
    s = compute_signals(traj)
    assert s.failure and s.loop and s.exhaustion and s.stagnation
    assert s.triage == pytest.approx(1.0 + 1.0 + 0.75 + 0.5, abs=TOL)
    assert triage_score({k: True for k in TRIAGE_WEIGHTS}) == pytest.approx(5.25, abs=TOL)


def test_empty_trajectory_gets_defined_values() -> None:
    empty = Trajectory(
        trajectory_id="e", run_id="r", blueprint_id="b", tree_id="x", leaf_node_id="l",
        cluster_id="c", messages=[], termination=Termination.ASSISTANT_DONE,
    )  # fmt: skip
    s = compute_signals(empty)
    assert (s.misalignment_ratio, s.efficiency, s.failure_rate, s.repetition_instances) == (
        0.0,
        1.0,
        0.0,
        0,
    )
    assert s.triage == 0.0
    only_user = empty.model_copy(update={"messages": [Message(role="user", content="hi")]})
    assert compute_signals(only_user).misalignment_ratio == 0.0
