"""A trajectory read as a person reads it: every turn, call and result in order, long results
folded, the verdict constraint by constraint, the signals that fired."""

from __future__ import annotations

import json

from fakes.trajectories import call, make_trajectory
from fakes.transcripts import LONG, failed_verdict, shop_trajectory

from trajsynth.curation.transcript import fold, transcript
from trajsynth.schemas import Signals


def test_every_turn_call_and_result_in_order() -> None:
    t = transcript(shop_trajectory(), failed_verdict(), Signals(trajectory_id="t1", failure=True))
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


def test_fold_keeps_short_text_and_cuts_long_single_lines() -> None:
    assert fold("short") == ("short", 0)
    cut, n = fold("x" * 5000, max_chars=100)
    assert n == 0 and len(cut) == 101 and "…" in cut
