"""A run's summary, computed from the store with SQL (so it is the same after a resume)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

from trajsynth.store import Store

__all__ = ["RunSummary", "paths_refused", "refused_in", "summarize_run"]

# a path's entry in an attempt's detail: "[reason] what was tried: why", joined by " | "
_TRIED = re.compile(r"(?:^|\s\|\s)\[([a-z_]+)\]\s")


def refused_in(detail: str, reason: str = "", accepted: bool = False) -> list[str]:
    """The reasons of the paths an attempt tried and refused, one per path, read from its
    detail (``planning.planner``); a refused attempt whose detail lists none (a store older
    than the list, a rejection after the gold loop) counts its own reason once.

    >>> refused_in("[unseen_write] toggle({}): no probe | [gold_run_error] a -> b: failed")
    ['unseen_write', 'gold_run_error']
    >>> refused_in("wrong variants pass: drop", "mutation_lint")
    ['mutation_lint']
    >>> refused_in("", "", accepted=True)
    []
    """
    found = _TRIED.findall(detail or "")
    if found or accepted or not reason:
        return found
    return [reason]


def paths_refused(rows: Iterable[tuple[str, str, bool]]) -> tuple[Counter[str], Counter[str]]:
    """Paths refused per reason over attempts ``(reason, detail, accepted)``: over all of
    them, and over the accepted ones alone (paths refused inside a unit that then planned a
    task)."""
    every: Counter[str] = Counter()
    inside: Counter[str] = Counter()
    for reason, detail, accepted in rows:
        found = refused_in(detail, reason, accepted)
        every.update(found)
        if accepted:
            inside.update(found)
    return every, inside


class RunSummary(BaseModel):
    model_config = ConfigDict(frozen=True)

    run_id: str
    tasks_planned: int
    blueprints_rejected: dict[str, int]
    # tasks the run asked for (tasks x rounds), planning attempts made (redraws included) and
    # the attempts its budget allowed (None: a run recorded without its config)
    tasks_asked: int | None = None
    plan_attempts: int = 0
    plan_budget: int | None = None
    trajectories: int
    counted: int  # judged: counted by the verifier (not an infra or simulator failure)
    passed: int  # clean and correct (hard constraints and hygiene)
    pass_rate: float | None
    failures_by_class: dict[str, int]
    terminations: dict[str, int]
    # simulator draws made again after a reply failed its checks, and user turns scripted from
    # the blueprint when every draw failed (the cost of a weak user simulator)
    user_resamples: int = 0
    user_scripted: int = 0
    tokens_by_role: dict[str, int]
    llm_seconds_by_role: dict[str, float]
    tokens_per_verified: float | None
    wall_s: float
    llm_s: float
    tool_calls: int
    median_tool_ms: float | None
    # units given up after their retries and not done since (the next run retries them)
    failed_units: dict[str, int] = {}
    failed_unit_errors: list[str] = []  # the most frequent error lines, with their counts
    # judged trajectories whose hard constraints held (clean or not), and the judged
    # trajectories each hygiene check failed (docs/verification.md)
    constraints_passed: int = 0
    hygiene_failed: dict[str, int] = {}
    # the mutation lint over the run's blueprints (planning.mutants): blueprints linted, those
    # no wrong variant passes, variants replayed, caught by the planned checks, checks added
    mutation_lint: dict[str, int] = {}
    # paths refused per reason, every path a planning unit tried (an accepted unit's refused
    # paths too, from its attempt's detail), and those inside units that planned a task
    paths_refused: dict[str, int] = {}
    paths_refused_accepted: dict[str, int] = {}

    @property
    def judged(self) -> int:
        """Trajectories the verifier counted (infra and simulator failures are not)."""
        return self.counted

    @property
    def seconds_per_verified(self) -> float | None:
        """Wall time per passed trajectory (the dashboard's "Seconds / passed")."""
        return self.wall_s / self.passed if self.passed else None


# each outstanding unit's latest failure: a unit that failed and later succeeded is done
_OUTSTANDING = """
SELECT * FROM unit_failures f
WHERE f.run_id = ? AND f.unit_id NOT IN (SELECT unit_id FROM work_units WHERE run_id = ?)
QUALIFY row_number() OVER (PARTITION BY f.unit_id ORDER BY f.failure DESC) = 1
"""


def _failed_units(store: Store, run_id: str, top: int = 3) -> tuple[dict[str, int], list[str]]:
    has = store.query(
        "SELECT count(*) AS n FROM information_schema.tables WHERE table_name = 'unit_failures'"
    )
    if not has or not has[0]["n"]:  # a store from before the table
        return {}, []
    by_class = store.query(
        f"SELECT failure_class AS k, count(*) AS n FROM ({_OUTSTANDING}) GROUP BY 1 ORDER BY 1",
        [run_id, run_id],
    )
    errors = store.query(
        f"SELECT error, count(*) AS n FROM ({_OUTSTANDING}) GROUP BY 1 ORDER BY n DESC, error "
        f"LIMIT {int(top)}",
        [run_id, run_id],
    )
    return {r["k"]: int(r["n"]) for r in by_class}, [f"{r['n']} x {r['error']}" for r in errors]


def _asked(store: Store, run_id: str) -> tuple[int | None, int | None]:
    """Tasks asked and the planning budget, from the run's stored config."""
    from trajsynth.schemas import RunConfig

    rows = store.query("SELECT config FROM runs WHERE run_id = ?", [run_id])
    if not rows or not rows[0]["config"]:
        return None, None
    try:
        config = RunConfig.model_validate(rows[0]["config"])
    except ValueError:
        return None, None
    return config.tasks * config.rounds, config.plan_budget() * config.rounds


def _mutation_lint(store: Store, run_id: str) -> dict[str, int]:
    """The mutation lint's figures summed over the run's blueprints; empty when none ran (or
    the store predates the column)."""
    has = store.query(
        "SELECT count(*) AS n FROM information_schema.columns "
        "WHERE table_name = 'blueprints' AND column_name = 'mutation_lint'"
    )
    if not has or not has[0]["n"]:
        return {}
    rows = store.query(
        "SELECT count(*) AS blueprints, "
        "count(*) FILTER (WHERE json_array_length(mutation_lint->'survived') = 0 "
        "AND CAST(mutation_lint->>'gold_passes' AS BOOLEAN)) AS clean, "
        "sum(CAST(mutation_lint->>'variants' AS INTEGER)) AS variants, "
        "sum(CAST(mutation_lint->>'caught_first' AS INTEGER)) AS caught_first, "
        "sum(json_array_length(mutation_lint->'strengthened')) AS strengthened "
        "FROM blueprints WHERE run_id = ? AND mutation_lint IS NOT NULL",
        [run_id],
    )
    if not rows or not rows[0]["blueprints"]:
        return {}
    return {k: int(v or 0) for k, v in rows[0].items()}


def summarize_run(store: Store, run_id: str, *, wall_s: float) -> RunSummary:
    """The figures ``synth run`` prints at its end, read on one connection."""
    with store.session(read_only=True):
        return _summarize_run(store, run_id, wall_s=wall_s)


def _summarize_run(store: Store, run_id: str, *, wall_s: float) -> RunSummary:
    q = store.query
    planned = q("SELECT count(*) AS n FROM blueprints WHERE run_id = ?", [run_id])
    rejected = q(
        "SELECT reason, count(*) AS n FROM blueprint_attempts WHERE run_id = ? AND NOT accepted "
        "GROUP BY reason ORDER BY n DESC",
        [run_id],
    )
    verdicts = q(
        "SELECT count(*) AS n, count(*) FILTER (WHERE NOT v.excluded) AS counted, "
        "count(*) FILTER (WHERE v.passed AND NOT v.excluded) AS passed "
        "FROM trajectories t JOIN verdicts v USING (trajectory_id) WHERE t.run_id = ?",
        [run_id],
    )
    hygiene = q(
        "SELECT count(*) FILTER (WHERE v.constraints_passed) AS constraints_passed "
        "FROM trajectories t JOIN verdicts v USING (trajectory_id) "
        "WHERE t.run_id = ? AND NOT v.excluded",
        [run_id],
    )
    checks = q(
        "SELECT h->>'check' AS k, count(DISTINCT t.trajectory_id) AS n "
        "FROM trajectories t JOIN verdicts v USING (trajectory_id), "
        "unnest(CAST(coalesce(v.hygiene, '[]') AS JSON[])) AS u(h) "
        "WHERE t.run_id = ? AND NOT v.excluded AND NOT CAST(h->>'passed' AS BOOLEAN) "
        "GROUP BY 1 ORDER BY 1",
        [run_id],
    )
    failures = q(
        "SELECT coalesce(failure_class, 'none') AS k, count(*) AS n FROM trajectories "
        "WHERE run_id = ? GROUP BY 1",
        [run_id],
    )
    terms = q(
        "SELECT termination AS k, count(*) AS n FROM trajectories WHERE run_id = ? GROUP BY 1",
        [run_id],
    )
    sim = q(
        "SELECT sum(user_resamples) AS r, sum(user_scripted) AS s FROM trajectories "
        "WHERE run_id = ?",
        [run_id],
    )
    usage = q(
        "SELECT role, sum(prompt_tokens + completion_tokens) AS tokens, sum(latency_s) AS secs "
        "FROM llm_calls WHERE run_id = ? GROUP BY role",
        [run_id],
    )
    tools = q(
        "SELECT count(*) AS n, median(CAST(c->>'latency_s' AS DOUBLE)) * 1000 AS ms "
        "FROM trajectories t, unnest(CAST(t.calls AS JSON[])) AS u(c) WHERE t.run_id = ?",
        [run_id],
    )
    failed_units, failed_errors = _failed_units(store, run_id)
    asked, budget = _asked(store, run_id)
    attempts = q("SELECT count(*) AS n FROM blueprint_attempts WHERE run_id = ?", [run_id])
    every, inside = paths_refused(
        (r["reason"] or "", r["detail"] or "", bool(r["accepted"]))
        for r in q(
            "SELECT reason, detail, accepted FROM blueprint_attempts WHERE run_id = ?", [run_id]
        )
    )
    lint = _mutation_lint(store, run_id)
    v = verdicts[0] if verdicts else {"n": 0, "counted": 0, "passed": 0}
    tokens = {r["role"]: int(r["tokens"] or 0) for r in usage}
    secs = {r["role"]: float(r["secs"] or 0.0) for r in usage}
    passed = int(v["passed"] or 0)
    counted = int(v["counted"] or 0)
    return RunSummary(
        run_id=run_id,
        tasks_planned=int(planned[0]["n"]) if planned else 0,
        blueprints_rejected={r["reason"]: int(r["n"]) for r in rejected},
        tasks_asked=asked,
        plan_attempts=int(attempts[0]["n"]) if attempts else 0,
        plan_budget=budget,
        trajectories=int(v["n"] or 0),
        counted=counted,
        passed=passed,
        pass_rate=passed / counted if counted else None,
        failures_by_class={r["k"]: int(r["n"]) for r in failures if r["k"] != "none"},
        terminations={r["k"]: int(r["n"]) for r in terms},
        user_resamples=int(sim[0]["r"] or 0) if sim else 0,
        user_scripted=int(sim[0]["s"] or 0) if sim else 0,
        tokens_by_role=tokens,
        llm_seconds_by_role=secs,
        tokens_per_verified=sum(tokens.values()) / passed if passed else None,
        wall_s=wall_s,
        llm_s=sum(secs.values()),
        tool_calls=int(tools[0]["n"]) if tools else 0,
        median_tool_ms=float(tools[0]["ms"]) if tools and tools[0]["ms"] is not None else None,
        mutation_lint=lint,
        paths_refused=dict(every.most_common()),
        paths_refused_accepted=dict(inside.most_common()),
        failed_units=failed_units,
        failed_unit_errors=failed_errors,
        constraints_passed=int(hygiene[0]["constraints_passed"] or 0) if hygiene else 0,
        hygiene_failed={r["k"]: int(r["n"]) for r in checks},
    )
