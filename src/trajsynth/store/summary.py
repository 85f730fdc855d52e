"""A run's summary, computed from the store with SQL (so it is the same after a resume)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from trajsynth.store import Store

__all__ = ["RunSummary", "summarize_run"]


class RunSummary(BaseModel):
    model_config = ConfigDict(frozen=True)

    run_id: str
    tasks_planned: int
    blueprints_rejected: dict[str, int]
    trajectories: int
    counted: int
    passed: int
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

    @property
    def seconds_per_verified(self) -> float | None:
        """Wall time per passed trajectory (the dashboard's "Seconds / verified")."""
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
    v = verdicts[0] if verdicts else {"n": 0, "counted": 0, "passed": 0}
    tokens = {r["role"]: int(r["tokens"] or 0) for r in usage}
    secs = {r["role"]: float(r["secs"] or 0.0) for r in usage}
    passed = int(v["passed"] or 0)
    counted = int(v["counted"] or 0)
    return RunSummary(
        run_id=run_id,
        tasks_planned=int(planned[0]["n"]) if planned else 0,
        blueprints_rejected={r["reason"]: int(r["n"]) for r in rejected},
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
        failed_units=failed_units,
        failed_unit_errors=failed_errors,
    )
