"""The summary's `tasks planned` row: planned of asked, attempts of the budget, and why short."""

from __future__ import annotations

from trajsynth.cli.run_command import planned_line
from trajsynth.store import Store
from trajsynth.store.summary import RunSummary, summarize_run


def _summary(**fields: object) -> RunSummary:
    base = {
        "run_id": "run_x", "tasks_planned": 20, "blueprints_rejected": {}, "trajectories": 0,
        "counted": 0, "passed": 0, "pass_rate": None, "failures_by_class": {},
        "terminations": {}, "tokens_by_role": {}, "llm_seconds_by_role": {},
        "tokens_per_verified": None, "wall_s": 1.0, "llm_s": 0.0, "tool_calls": 0,
        "median_tool_ms": None,
    }  # fmt: skip
    return RunSummary(**{**base, **fields})


def test_a_complete_round_says_its_attempts_and_budget() -> None:
    line = planned_line(_summary(tasks_asked=20, plan_attempts=27, plan_budget=60,
                                 blueprints_rejected={"gold_run_error": 7}))  # fmt: skip
    assert line == "20 of 20 asked (27 attempts of 60 allowed)"


def test_a_shortfall_names_its_reasons() -> None:
    line = planned_line(
        _summary(tasks_planned=17, tasks_asked=20, plan_attempts=60, plan_budget=60,
                 blueprints_rejected={"gold_run_error": 31, "shape_unsupported": 12})
    )  # fmt: skip
    assert line == (
        "17 of 20 asked (60 attempts of 60 allowed); short by 3 "
        "(rejected: gold_run_error: 31, shape_unsupported: 12)"
    )


def test_a_run_without_its_config_shows_the_count_alone() -> None:
    assert planned_line(_summary(tasks_planned=5)) == "5"


def test_the_summary_reads_asked_and_budget_from_the_stored_config(tmp_path) -> None:
    from trajsynth.schemas import RunConfig

    store = Store(tmp_path / "s.duckdb")
    store.migrate()
    config = RunConfig(tasks=4, rounds=2, plan_attempts=10).model_dump(mode="json")
    store.insert("runs", [{"run_id": "run_x", "state": "done", "config": config}])
    summary = summarize_run(store, "run_x", wall_s=1.0)
    assert (summary.tasks_asked, summary.plan_budget, summary.plan_attempts) == (8, 20, 0)
