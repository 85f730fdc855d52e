"""The run summary says judged vs passed and which hygiene checks failed (store.summary)."""

from __future__ import annotations

from pathlib import Path

from fakes.store_rows import RUN, write_round
from fakes.trajectories import call, make_trajectory

from trajsynth.curation.verify import verify
from trajsynth.schemas import CallPattern, EnvState, FailureClass, ToolCalled
from trajsynth.store import Store
from trajsynth.store.summary import summarize_run

CHECK = [ToolCalled(call=CallPattern(tool="get_order", matchers={"order_id": "W1"}))]
GOOD = call("get_order", {"order_id": "W1"}, {"status": "ok"})
SAID = "Done: order W1 is checked."  # an answer that states the outcome


def test_judged_passed_and_the_hygiene_checks_that_failed(tmp_path: Path) -> None:
    clean = make_trajectory("clean", [[GOOD]], final=SAID)
    mute = make_trajectory("mute", [[GOOD]], final=None)  # held its constraint, never answered
    ghost = make_trajectory(
        "ghost",
        [[GOOD], [call("get_order returned", '{"status": "ok"}', error="unknown_tool")]],
        final=SAID,
    )
    infra = make_trajectory("infra", [[GOOD]], failure_class=FailureClass.INFRA)
    state = EnvState(state_hash="s")
    verdicts = {t.trajectory_id: verify(t, CHECK, state) for t in (clean, mute, ghost, infra)}
    store = Store(tmp_path / "s.duckdb")
    write_round(store, [clean, mute, ghost, infra], verdicts)
    summary = summarize_run(store, RUN, wall_s=1.0)
    assert (summary.trajectories, summary.judged, summary.passed) == (4, 3, 1)
    assert summary.constraints_passed == 3
    assert summary.hygiene_failed == {"answered": 1, "known_tools": 1}
