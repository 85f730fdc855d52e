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


def test_paths_refused_count_those_inside_accepted_units(tmp_path: Path) -> None:
    """A unit that refused a path and then planned a task counts that path; a refused unit
    counts each path its detail lists."""
    from trajsynth.schemas import BlueprintAttempt, Cell
    from trajsynth.store.rows import BlueprintAttemptRow

    cell = Cell(
        cluster_id="c", path_shape="single", target_mode="direct_execute", difficulty="easy"
    )
    attempts = [
        BlueprintAttempt(
            attempt_id="bpa_1", cluster_id="c", cell=cell, seed=1, accepted=True,
            detail="[unseen_write] toggle({}): no probe | [noop_write] mkdir(docs): same",
        ),
        BlueprintAttempt(
            attempt_id="bpa_2", cluster_id="c", cell=cell, seed=2, accepted=False,
            reason="unseen_write", detail="[unseen_write] toggle({}): no probe",
        ),
    ]  # fmt: skip
    store = Store(tmp_path / "s.duckdb")
    store.write([BlueprintAttemptRow.of(a, run_id=RUN) for a in attempts])
    summary = summarize_run(store, RUN, wall_s=1.0)
    assert summary.paths_refused == {"unseen_write": 2, "noop_write": 1}
    assert summary.paths_refused_accepted == {"unseen_write": 1, "noop_write": 1}
    assert summary.blueprints_rejected == {"unseen_write": 1}  # units, as before
