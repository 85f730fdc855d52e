"""The end of `synth run` explains a run that produced little: top failure reasons with
counts and what to change."""

from __future__ import annotations

from pathlib import Path

from fakes.trajectories import call, make_trajectory, make_verdict
from rich.console import Console

from trajsynth.cli.explain import little_reasons, produced_little
from trajsynth.cli.run_command import print_summary
from trajsynth.schemas import ConstraintResult, FailureClass, Termination
from trajsynth.store import Store
from trajsynth.store.summary import summarize_run

GOOD = call("get_order", {"order_id": "W1"}, {"status": "ok"})


def _store(tmp_path: Path) -> Store:
    store = Store(tmp_path / "s.duckdb")
    trajectories = [
        make_trajectory("ok1", [[GOOD]]),
        make_trajectory("m1", [[GOOD]], failure_class=FailureClass.MODEL),
        make_trajectory("m2", [[GOOD]], failure_class=FailureClass.MODEL,
                        termination=Termination.MAX_TURNS),
        make_trajectory("m3", [[GOOD]], failure_class=FailureClass.MODEL,
                        termination=Termination.MAX_TURNS),
        make_trajectory("tool1", [[GOOD]], failure_class=FailureClass.TOOL),
    ]  # fmt: skip
    store.insert("trajectories", trajectories)
    wrong_state = ConstraintResult(
        index=0, kind="state_equals", hard=True, passed=False, detail="order W1 not cancelled"
    )
    soft = ConstraintResult(index=1, kind="mentions", hard=False, passed=False)
    verdicts = [make_verdict("ok1", True)]
    for tid in ("m1", "m2", "m3", "tool1"):
        v = make_verdict(tid, False)
        verdicts.append(v.model_copy(update={"results": [wrong_state, soft]}))
    store.insert("verdicts", verdicts)
    return store


def test_reasons_count_classes_constraints_and_stops(tmp_path: Path) -> None:
    reasons = {r.what: r for r in little_reasons(_store(tmp_path), "run-1")}
    assert reasons["failure class model"].count == 3
    assert "--samples" in reasons["failure class model"].hint
    assert reasons["failure class tool"].count == 1
    assert reasons["constraint state_equals failed"].count == 4
    assert "order W1 not cancelled" in reasons["constraint state_equals failed"].hint
    assert "constraint mentions failed" not in reasons  # soft constraints do not fail a run
    assert reasons["stopped by max_turns"].count == 2
    assert "max_turns" in reasons["stopped by max_turns"].hint
    assert produced_little(passed=1, counted=5, trajectories=5)
    assert not produced_little(passed=4, counted=5, trajectories=5)


def test_the_summary_prints_the_reasons_of_a_poor_run(tmp_path: Path) -> None:
    store = _store(tmp_path)
    summary = summarize_run(store, "run-1", wall_s=1.0)
    console = Console(record=True, width=160)
    print_summary(summary, console=console, store_path=str(store.path))
    text = console.export_text()
    assert "why so little passed" in text
    assert "failure class model" in text and "stopped by max_turns" in text
    assert "raise [run.budgets] max_turns in synth.toml" in text


def test_redrawn_user_turns_are_read_by_sql_and_summed(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    a = make_trajectory("a", [[GOOD]]).model_copy(update={"user_resamples": 2})
    b = make_trajectory("b", [[GOOD]]).model_copy(update={"user_resamples": 3, "user_scripted": 1})
    store.insert("trajectories", [a, b, make_trajectory("c", [[GOOD]])])
    store.insert("verdicts", [make_verdict(t, True) for t in ("a", "b", "c")])
    rows = store.query(
        "SELECT trajectory_id, user_resamples, user_scripted FROM trajectories ORDER BY 1"
    )
    assert [(r["user_resamples"], r["user_scripted"]) for r in rows] == [(2, 0), (3, 1), (0, 0)]
    summary = summarize_run(store, "run-1", wall_s=1.0)
    assert (summary.user_resamples, summary.user_scripted) == (5, 1)
    console = Console(record=True, width=200)
    print_summary(summary, console=console, store_path=str(store.path))
    assert "5 resampled draws, 1 scripted" in console.export_text()
