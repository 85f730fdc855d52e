"""The dashboard's SQL: every figure on the page, aggregated inside DuckDB.

Each function takes a ``Store`` and returns rows as dicts. Every query is one read-only
connection (``Store.query``), so the page reads while a run writes (see ``store/store.py``).
Nothing here reads a ``messages`` column: the page stays fast on a store of many trajectories.

Pass rates follow docs/design.md: a verdict marked ``excluded`` (infra or simulator faults) is left
out of both the numerator and the denominator. A trajectory without a verdict is unverified.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from trajsynth.store import Store
from trajsynth.store.summary import RunSummary, summarize_run

__all__ = [
    "PAGE_QUERIES",
    "available_tables",
    "by_cluster",
    "by_mode",
    "by_round",
    "evals",
    "overview",
    "round_stats",
    "run_ids",
    "runs",
    "run_summary",
    "task_tree",
    "trajectories_of_tree",
    "tasks",
    "page",
    "time_page",
    "tokens_by_role",
    "trees_of_task",
]

Rows = list[dict[str, Any]]
Statement = tuple[str, list[Any]]

ROUND_STAT_COLUMNS = (
    "domain_entropy",
    "reasoning_mode_entropy",
    "action_complexity",
    "error_branch_ratio",
)

# One verdict per trajectory (a re-verification may add a second): passed if any passed,
# excluded if any was excluded.
_VERDICTS = """(
    SELECT trajectory_id, bool_or(passed) AS passed, bool_or(coalesce(excluded, false)) AS excluded
    FROM verdicts GROUP BY trajectory_id
)"""

# Aggregates over trajectories t left-joined with verdicts v.
_PASS_COLUMNS = """
    count(*) AS n_trajectories,
    count(v.trajectory_id) FILTER (WHERE NOT v.excluded) AS n_judged,
    count(*) FILTER (WHERE v.excluded) AS n_excluded,
    count(*) FILTER (WHERE v.passed AND NOT v.excluded) AS n_passed,
    (count(*) FILTER (WHERE v.passed AND NOT v.excluded))::DOUBLE
        / nullif(count(v.trajectory_id) FILTER (WHERE NOT v.excluded), 0) AS pass_rate"""


def _run_filter(run_id: str | None, column: str = "t.run_id") -> tuple[str, list[Any]]:
    return ("", []) if run_id is None else (f"WHERE {column} = ?", [run_id])


def available_tables(store: Store) -> set[str]:
    """Names of the tables in the store (empty when the store is new or missing)."""
    if not store.path.exists():
        return set()
    rows = store.query("SELECT table_name FROM information_schema.tables")
    return {r["table_name"] for r in rows}


def run_ids(store: Store) -> list[str]:
    """Run ids, newest first."""
    rows = store.query("SELECT run_id FROM runs ORDER BY created_at DESC NULLS LAST, run_id")
    return [r["run_id"] for r in rows]


def runs(store: Store) -> Rows:
    """Every run with its state, size and pass rate, newest first."""
    return store.query(*_runs_sql(None))


def _runs_sql(_run_id: str | None) -> Statement:
    return (
        f"""
        WITH per_run AS (
            SELECT t.run_id, count(DISTINCT t.blueprint_id) AS n_tasks, {_PASS_COLUMNS}
            FROM trajectories t LEFT JOIN {_VERDICTS} v USING (trajectory_id)
            GROUP BY t.run_id
        )
        SELECT r.run_id, r.state, r.created_at, r.updated_at,
               coalesce(p.n_tasks, 0) AS n_tasks,
               coalesce(p.n_trajectories, 0) AS n_trajectories,
               coalesce(p.n_judged, 0) AS n_judged,
               coalesce(p.n_passed, 0) AS n_passed,
               p.pass_rate
        FROM runs r LEFT JOIN per_run p USING (run_id)
        ORDER BY r.created_at DESC NULLS LAST, r.run_id
        """,
        [],
    )


def overview(store: Store, run_id: str | None) -> dict[str, Any]:
    """Headline figures: counts, pass rate, tokens and time (per passed trajectory too)."""
    return _overview_post(store.query(*_overview_sql(run_id)))


def _overview_sql(run_id: str | None) -> Statement:
    where, params = _run_filter(run_id)
    return (
        f"""
        SELECT count(DISTINCT t.blueprint_id) AS n_tasks, {_PASS_COLUMNS},
               coalesce(sum(t.total_tokens), 0) AS total_tokens
        FROM trajectories t LEFT JOIN {_VERDICTS} v USING (trajectory_id)
        {where}
        """,
        params,
    )


def _overview_post(rows: Rows) -> dict[str, Any]:
    # per-passed costs and wall time are the run summary's (``run_summary``), not sums here
    return dict(rows[0]) if rows else {}


def run_wall_s(store: Store, run_id: str) -> tuple[float, bool]:
    """The run's wall time and whether it is final: the stored run summary's ``wall_s`` once
    the run finished (what ``synth run`` printed), else the seconds from its start to its
    last committed unit (or state change). Not "until now": a run that died without
    finishing stays ``running``, and the seconds since its start grow without end (one
    such run once showed 28,370,370 s)."""
    rows = store.query(
        "SELECT r.created_at, r.updated_at, r.summary,"
        " (SELECT max(w.done_at) FROM work_units w WHERE w.run_id = r.run_id) AS last_done"
        " FROM runs r WHERE r.run_id = ?",
        [run_id],
    )
    if not rows:
        return 0.0, False
    row = rows[0]
    stored = row["summary"]
    if isinstance(stored, dict) and stored.get("wall_s") is not None:
        return float(stored["wall_s"]), True
    created = row["created_at"]
    last = max((t for t in (row["updated_at"], row["last_done"]) if t is not None), default=None)
    if created is None or last is None:
        return 0.0, False
    return max(0.0, (last - created).total_seconds()), False


def run_summary(store: Store, run_id: str) -> tuple[RunSummary, bool]:
    """The run's summary, computed by ``store.summary.summarize_run`` (the same function that
    ``synth run`` prints at its end) with the wall time of ``run_wall_s``; and whether that
    wall time is final. The dashboard's per-passed costs and wall time are read from it."""
    with store.session(read_only=True):
        wall_s, final = run_wall_s(store, run_id)
        return summarize_run(store, run_id, wall_s=wall_s), final


def round_stats(store: Store, run_id: str | None, tables: set[str] | None = None) -> Rows:
    """Per round: domain and reasoning-mode entropy, action complexity, error branch ratio.

    Empty when the store has no ``round_stats`` table yet (curation has not run). With no run
    chosen, rounds of all runs are averaged.
    """
    tables = available_tables(store) if tables is None else tables
    if "round_stats" not in tables:
        return []
    return store.query(*_round_stats_sql(run_id))


def _round_stats_sql(run_id: str | None) -> Statement:
    cols = ", ".join(f"avg({c}) AS {c}" for c in ROUND_STAT_COLUMNS)
    where, params = _run_filter(run_id, "run_id")
    return (
        f"""
        SELECT round, sum(n_trajectories) AS n_trajectories, avg(pass_rate) AS pass_rate, {cols}
        FROM round_stats {where} GROUP BY round ORDER BY round
        """,
        params,
    )


def by_cluster(store: Store, run_id: str | None) -> Rows:
    """Trajectories, pass rate and mean tokens per tool cluster."""
    return store.query(*_by_cluster_sql(run_id))


def _by_cluster_sql(run_id: str | None) -> Statement:
    where, params = _run_filter(run_id)
    return (
        f"""
        SELECT t.cluster_id, {_PASS_COLUMNS}, avg(t.total_tokens) AS mean_tokens
        FROM trajectories t LEFT JOIN {_VERDICTS} v USING (trajectory_id)
        {where} GROUP BY t.cluster_id ORDER BY n_trajectories DESC, t.cluster_id
        """,
        params,
    )


def by_mode(store: Store, run_id: str | None) -> Rows:
    """Trajectories and pass rate per reasoning mode (``scores.mode``; unscored apart)."""
    return store.query(*_by_mode_sql(run_id))


def _by_mode_sql(run_id: str | None) -> Statement:
    where, params = _run_filter(run_id)
    return (
        f"""
        SELECT coalesce(s.mode, '(unscored)') AS mode, {_PASS_COLUMNS}
        FROM trajectories t LEFT JOIN {_VERDICTS} v USING (trajectory_id)
        LEFT JOIN scores s USING (trajectory_id)
        {where} GROUP BY 1 ORDER BY n_trajectories DESC, mode
        """,
        params,
    )


def by_round(store: Store, run_id: str | None) -> Rows:
    """Pass rate, tokens and time per round (from the trajectories themselves).

    ``trajectory_s`` sums the trajectories' own seconds: rollouts of a tree share a prefix and
    run side by side, so this is not wall time (that is the run summary's ``wall_s``)."""
    return store.query(*_by_round_sql(run_id))


def _by_round_sql(run_id: str | None) -> Statement:
    where, params = _run_filter(run_id)
    return (
        f"""
        SELECT t.round, {_PASS_COLUMNS},
               coalesce(sum(t.total_tokens), 0) AS total_tokens,
               coalesce(sum(t.wall_s), 0) AS trajectory_s
        FROM trajectories t LEFT JOIN {_VERDICTS} v USING (trajectory_id)
        {where} GROUP BY t.round ORDER BY t.round
        """,
        params,
    )


def tokens_by_role(store: Store, run_id: str | None) -> Rows:
    """LLM calls, tokens and latency per role (planner, user, assistant, verifier)."""
    return store.query(*_tokens_by_role_sql(run_id))


def _tokens_by_role_sql(run_id: str | None) -> Statement:
    where, params = _run_filter(run_id, "run_id")
    return (
        f"""
        SELECT role, count(*) AS calls,
               coalesce(sum(prompt_tokens), 0) AS prompt_tokens,
               coalesce(sum(completion_tokens), 0) AS completion_tokens,
               coalesce(sum(latency_s), 0) AS latency_s
        FROM llm_calls {where} GROUP BY role ORDER BY role
        """,
        params,
    )


def evals(store: Store, tables: set[str] | None = None, limit: int = 50) -> Rows:
    """Held-out evals of policies (the ``evals`` table), newest first: pass@1 and
    pass@k with their bootstrap intervals over tasks. Not per run: an eval scores a
    policy on tasks no run trained on. Empty when the store has no ``evals`` table yet."""
    tables = available_tables(store) if tables is None else tables
    if "evals" not in tables:
        return []
    return store.query(
        """
        SELECT e.eval_id, e.policy, e.model_id, m.parent, e.split, e.k, e.n_tasks, e.n_tries,
               e.n_excluded, e.pass1, e.pass1_low, e.pass1_high,
               e.passk, e.passk_low, e.passk_high, e.created_at
        FROM evals e LEFT JOIN models m USING (model_id)
        ORDER BY e.created_at DESC NULLS LAST, e.eval_id LIMIT ?
        """,
        [limit],
    )


def tasks(store: Store, run_id: str | None, limit: int = 500) -> Rows:
    """Tasks (blueprints) with trajectories; those with both outcomes first (they teach most)."""
    return store.query(*_tasks_sql(run_id, limit))


def _tasks_sql(run_id: str | None, limit: int = 500) -> Statement:
    where, params = _run_filter(run_id)
    return (
        f"""
        SELECT t.blueprint_id, any_value(t.cluster_id) AS cluster_id, {_PASS_COLUMNS}
        FROM trajectories t LEFT JOIN {_VERDICTS} v USING (trajectory_id)
        {where} GROUP BY t.blueprint_id
        ORDER BY (pass_rate > 0 AND pass_rate < 1) DESC NULLS LAST, n_trajectories DESC,
                 t.blueprint_id
        LIMIT {int(limit)}
        """,
        params,
    )


def trees_of_task(store: Store, task_id: str) -> Rows:
    """The rollout trees grown for one task."""
    return store.query(
        """
        SELECT tree_id, round, rollout_mode, n_nodes, n_leaves, pass_rate, total_tokens, wall_s
        FROM trees WHERE blueprint_id = ? ORDER BY round, tree_id
        """,
        [task_id],
    )


def task_tree(store: Store, tree_id: str, max_nodes: int = 400) -> tuple[Rows, Rows]:
    """One tree's nodes (no messages) and its leaves' outcomes, for drawing."""
    nodes = store.query(
        f"""
        SELECT node_id, parent_id, depth, value, prune_reason, n_children, step_entropy,
               json_extract_string(calls, '$[0].tool') AS tool,
               json_array_length(calls) AS n_calls
        FROM nodes WHERE tree_id = ? ORDER BY depth, node_id LIMIT {int(max_nodes)}
        """,
        [tree_id],
    )
    leaves = store.query(
        f"""
        SELECT t.leaf_node_id, t.trajectory_id, t.termination, v.passed, v.excluded
        FROM trajectories t LEFT JOIN {_VERDICTS} v USING (trajectory_id)
        WHERE t.tree_id = ?
        """,
        [tree_id],
    )
    return nodes, leaves


def trajectories_of_tree(store: Store, tree_id: str) -> Rows:
    """One tree's trajectories with their outcome, for the table linking to transcripts."""
    return store.query(
        f"""
        SELECT t.trajectory_id, t.leaf_node_id, t.termination, t.failure_class,
               t.total_tokens, v.passed, v.excluded
        FROM trajectories t LEFT JOIN {_VERDICTS} v USING (trajectory_id)
        WHERE t.tree_id = ? ORDER BY t.trajectory_id
        """,
        [tree_id],
    )


# The queries one load of the main page runs (the task section adds its own on demand):
# name -> (SQL builder, post-processing of its rows).
_PAGE: dict[str, tuple[Callable[[str | None], Statement], Callable[[Rows], Any]]] = {
    "runs": (_runs_sql, list),
    "overview": (_overview_sql, _overview_post),
    "round_stats": (_round_stats_sql, list),
    "by_cluster": (_by_cluster_sql, list),
    "by_mode": (_by_mode_sql, list),
    "by_round": (_by_round_sql, list),
    "tokens_by_role": (_tokens_by_role_sql, list),
    "tasks": (_tasks_sql, list),
}
PAGE_QUERIES = tuple(_PAGE)


def page(store: Store, run_id: str | None, tables: set[str] | None = None) -> dict[str, Any]:
    """Every figure of the main page, from ONE read-only connection and snapshot.

    ``round_stats`` is empty when the store has no such table (``tables``: from
    ``available_tables``, looked up when not given).
    """
    tables = available_tables(store) if tables is None else tables
    out: dict[str, Any] = {name: [] for name in _PAGE} | {"overview": _overview_post([])}
    if "trajectories" not in tables:  # a new or foreign file: nothing to show yet
        return out
    names = [n for n in _PAGE if n != "round_stats" or "round_stats" in tables]
    results = store.query_many([_PAGE[n][0](run_id) for n in names])
    for name, rows in zip(names, results, strict=True):
        out[name] = _PAGE[name][1](rows)
    return out


def time_page(store: Store, run_id: str | None) -> dict[str, float]:
    """Seconds one uncached main-page load spends in SQL: the table lookup, the page's queries
    on one connection, and each query alone on its own connection (``bench/dashboard.py``)."""
    start = time.perf_counter()
    tables = available_tables(store)
    out = {"available_tables": time.perf_counter() - start}
    start = time.perf_counter()
    page(store, run_id, tables)
    out["page (one connection)"] = time.perf_counter() - start
    for name, (sql, _) in _PAGE.items():
        if name == "round_stats" and name not in tables:
            continue
        start = time.perf_counter()
        store.query(*sql(run_id))
        out[name] = time.perf_counter() - start
    return out
