"""A trajectory read as a person reads it: every turn, call and result in order, long results
folded, the verdict constraint by constraint, the signals that fired."""

from __future__ import annotations

import json

from fakes.trajectories import call, make_trajectory
from rich.console import Console

from trajsynth.curation.transcript import fold, transcript
from trajsynth.schemas import ConstraintResult, Signals, Verdict
from trajsynth.synth.commands.transcript import render_transcript

LONG = json.dumps([{"sku": f"S{i}", "name": f"item {i}"} for i in range(40)], indent=1)


def _trajectory():
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


def _verdict() -> Verdict:
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


def test_every_turn_call_and_result_in_order() -> None:
    t = transcript(_trajectory(), _verdict(), Signals(trajectory_id="t1", failure=True))
    kinds = [e.kind for e in t.entries]
    assert kinds == ["system", "user", "call", "result", "call", "call", "result", "result",
                     "assistant", "user", "assistant", "user"]  # fmt: skip
    first_call = t.entries[2]
    assert first_call.name == "get_order" and json.loads(first_call.arguments or "") == {
        "order_id": "W1"
    }
    cancel = t.entries[7]
    assert cancel.name == "cancel_order" and cancel.error and "no" in cancel.text
    listing = t.entries[6]
    assert listing.folded_lines > 100 and "…" in listing.text and len(listing.text) < len(LONG)
    assert [(c.kind, c.passed) for c in t.constraints] == [
        ("tool_called", True), ("final_state", False)
    ]  # fmt: skip
    assert t.constraints[1].why.startswith("orders.W1.status") and t.passed is False
    assert t.signals_fired == ["failure"]


def test_an_unverified_trajectory_with_unparsable_arguments_still_reads() -> None:
    trajectory = make_trajectory("t2", [[call("get_order", '{"order_id": W1', "bad")]])
    t = transcript(trajectory)
    assert t.passed is None and t.constraints == [] and t.signals_fired == []
    assert t.entries[2].arguments == '{"order_id": W1'  # the raw text, as the model wrote it


def test_the_terminal_shows_roles_calls_results_and_why_a_constraint_failed() -> None:
    console = Console(width=120, record=True, color_system=None)
    console.print(render_transcript(transcript(_trajectory(), _verdict())))
    text = console.export_text()
    expected = [
        "FAILED", "user: Please check my order W1.", "→ get_order(", "← cancel_order: Error",
        "more lines folded", "final_state", "expected cancelled, got shipped",
        "assistant: Which order do you mean?",
    ]  # fmt: skip
    assert [e for e in expected if e not in text] == []


def test_fold_keeps_short_text_and_cuts_long_single_lines() -> None:
    assert fold("short") == ("short", 0)
    cut, n = fold("x" * 5000, max_chars=100)
    assert n == 0 and len(cut) == 101 and "…" in cut
