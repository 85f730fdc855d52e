"""The DuckDB store: every record the pipeline makes, queryable in SQL.

Layout for concurrent readers: DuckDB lets one process hold a file for writing and, while it
does, no other process may open it at all. So no process keeps the file open: every write is
one short transaction (open, insert a batch, commit, close) and every read opens read-only for
one query. A run therefore holds the lock for milliseconds per batch, and ``synth query`` or the
dashboard get in between. Lock conflicts on either side are retried with backoff (tenacity).

Writes are ``INSERT ... ON CONFLICT DO NOTHING`` on content-derived primary keys, so rerunning
anything is safe and a crashed run resumes without duplicates.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
from pydantic import BaseModel
from tenacity import retry, retry_if_exception, stop_after_delay, wait_exponential_jitter

from trajsynth.schemas import InputError

__all__ = ["SCHEMA_VERSION", "TABLES", "Store", "StoreLockedError", "work_unit_row"]

log = logging.getLogger(__name__)


class StoreLockedError(InputError):
    """Another process held the store for longer than we were willing to wait."""


# table -> (primary key, {column: duckdb type}). JSON columns hold nested fields; SQL reaches
# into them with ->, ->> and json_extract.
TABLES: dict[str, tuple[str, dict[str, str]]] = {
    "runs": (
        "run_id",
        {
            "run_id": "VARCHAR",
            "created_at": "TIMESTAMP",
            "updated_at": "TIMESTAMP",
            "state": "VARCHAR",
            "config": "JSON",
            "manifest": "JSON",
            "summary": "JSON",
        },
    ),
    "clusters": (
        "cluster_id",
        {
            "cluster_id": "VARCHAR",
            "domain": "VARCHAR",
            "description": "VARCHAR",
            "source": "VARCHAR",
            "server": "JSON",
            "state_readable": "BOOLEAN",
            "n_tools": "INTEGER",
            "n_edges": "INTEGER",
        },
    ),
    "tools": (
        "tool_key",
        {
            "tool_key": "VARCHAR",
            "cluster_id": "VARCHAR",
            "name": "VARCHAR",
            "access": "VARCHAR",
            "description": "VARCHAR",
            "input_schema": "JSON",
            "output_schema": "JSON",
        },
    ),
    "edges": (
        "edge_key",
        {
            "edge_key": "VARCHAR",
            "cluster_id": "VARCHAR",
            "source": "VARCHAR",
            "target": "VARCHAR",
            "out_field": "VARCHAR",
            "in_param": "VARCHAR",
            "score": "DOUBLE",
            "origin": "VARCHAR",
            "verified": "BOOLEAN",
        },
    ),
    "blueprints": (
        "blueprint_id",
        {
            "blueprint_id": "VARCHAR",
            "run_id": "VARCHAR",
            "round": "INTEGER",
            "cluster_id": "VARCHAR",
            "domain": "VARCHAR",
            "cell": "JSON",
            "difficulty": "VARCHAR",
            "path_shape": "VARCHAR",
            "target_mode": "VARCHAR",
            "initial_state_id": "VARCHAR",
            "tool_path": "JSON",
            "slots": "JSON",
            "persona": "VARCHAR",
            "goal": "VARCHAR",
            "hidden_info": "JSON",
            "uses_code_tool": "BOOLEAN",
            "n_writes": "INTEGER",
            "gold_run": "JSON",
            "constraints": "JSON",
            "max_turns": "INTEGER",
            "seed": "BIGINT",
            "words_source": "VARCHAR",
        },
    ),
    "blueprint_attempts": (
        "attempt_id",
        {
            "attempt_id": "VARCHAR",
            "run_id": "VARCHAR",
            "round": "INTEGER",
            "cluster_id": "VARCHAR",
            "cell": "JSON",
            "seed": "BIGINT",
            "accepted": "BOOLEAN",
            "reason": "VARCHAR",
            "detail": "VARCHAR",
        },
    ),
    "trees": (
        "tree_id",
        {
            "tree_id": "VARCHAR",
            "run_id": "VARCHAR",
            "blueprint_id": "VARCHAR",
            "round": "INTEGER",
            "rollout_mode": "VARCHAR",
            "n_nodes": "INTEGER",
            "n_leaves": "INTEGER",
            "pass_rate": "DOUBLE",
            "total_tokens": "BIGINT",
            "wall_s": "DOUBLE",
            "generated_tokens": "BIGINT",
            "n_pruned": "INTEGER",
            "n_passed": "INTEGER",
            "budget": "JSON",
        },
    ),
    "nodes": (
        "node_id",
        {
            "node_id": "VARCHAR",
            "tree_id": "VARCHAR",
            "parent_id": "VARCHAR",
            "depth": "INTEGER",
            "messages": "JSON",
            "calls": "JSON",
            "usage": "JSON",
            "step_entropy": "DOUBLE",
            "confidence": "DOUBLE",
            "branch_probability": "DOUBLE",
            "n_children": "INTEGER",
            "snapshot_id": "VARCHAR",
            "prune_reason": "VARCHAR",
            "value": "DOUBLE",
            "advantage": "DOUBLE",
            "process_reward": "DOUBLE",
            "n_leaves": "INTEGER",
            "branch": "JSON",
        },
    ),
    "final_states": (
        "state_hash",
        {
            "state_hash": "VARCHAR",
            "state": "JSON",
        },
    ),
    "trajectories": (
        "trajectory_id",
        {
            "trajectory_id": "VARCHAR",
            "run_id": "VARCHAR",
            "blueprint_id": "VARCHAR",
            "tree_id": "VARCHAR",
            "leaf_node_id": "VARCHAR",
            "cluster_id": "VARCHAR",
            "round": "INTEGER",
            "seed": "BIGINT",
            "node_ids": "JSON",
            "messages": "JSON",
            "tools": "JSON",
            "calls": "JSON",
            "final_answer": "VARCHAR",
            "termination": "VARCHAR",
            "failure_class": "VARCHAR",
            "failure_detail": "VARCHAR",
            "attempts": "INTEGER",
            "usage": "JSON",
            "n_turns": "INTEGER",
            "n_calls": "INTEGER",
            "total_tokens": "BIGINT",
            "final_state_hash": "VARCHAR",
            "wall_s": "DOUBLE",
            "source": "VARCHAR",  # issue 18: 'rollout' or 'gold' (a replayed gold run)
        },
    ),
    "verdicts": (
        "verdict_id",
        {
            "verdict_id": "VARCHAR",
            "trajectory_id": "VARCHAR",
            "results": "JSON",
            "passed": "BOOLEAN",
            "score": "DOUBLE",
            "state_hash": "VARCHAR",
            "state_diff": "JSON",
            "excluded": "BOOLEAN",
        },
    ),
    "scores": (
        "trajectory_id",
        {
            "trajectory_id": "VARCHAR",
            "mode": "VARCHAR",
            "mode_codebook": "VARCHAR",
            "cac": "DOUBLE",
            "n_steps": "INTEGER",
            "n_distinct_tools": "INTEGER",
            "max_dep_depth": "INTEGER",
            "n_bound_args": "INTEGER",
            "n_conditional": "INTEGER",
            "signature": "VARCHAR",
            "recovered": "BOOLEAN",
            "efficiency": "DOUBLE",
            "sft_score": "DOUBLE",
            "duplicate_of": "VARCHAR",
            "run_id": "VARCHAR",
            "round": "INTEGER",
            "mode_label": "VARCHAR",
            "mode_cosine": "DOUBLE",
            "mode_reason": "VARCHAR",
            "rule_label": "VARCHAR",
            "accepted": "BOOLEAN",
            "domain": "VARCHAR",
            "digest_key": "VARCHAR",
        },
    ),
    # --- curation (issue 7): one row per trajectory / task / decision / round / option -------
    # round_stats: the figures of the dataset after the round (accepted trajectories of rounds
    # <= round; ``report`` is that DiversityReport), ``round_report`` the round's own report,
    # ``curation`` the CurationReport (counts, skips) of ``synth.curate.curate_round``.
    # evolution: ``round`` is the round the weights are FOR (computed after round - 1).
    # embeddings: ``text_hash`` hashes the model id and the text, so models never collide.
    "signals": (
        "trajectory_id",
        {
            "trajectory_id": "VARCHAR",
            "run_id": "VARCHAR",
            "round": "INTEGER",
            "misalignment_ratio": "DOUBLE",
            "misalignment": "BOOLEAN",
            "efficiency": "DOUBLE",
            "no_progress": "BOOLEAN",
            "stagnation": "BOOLEAN",
            "disengagement": "BOOLEAN",
            "satisfaction_count": "INTEGER",
            "satisfaction_confidence": "DOUBLE",
            "satisfaction": "BOOLEAN",
            "failure_rate": "DOUBLE",
            "malformed_calls": "INTEGER",
            "failure": "BOOLEAN",
            "repetition_instances": "INTEGER",
            "loop": "BOOLEAN",
            "exhaustion": "BOOLEAN",
            "triage": "DOUBLE",
        },
    ),
    "task_topology": (
        "task_id",
        {
            "task_id": "VARCHAR",
            "run_id": "VARCHAR",
            "round": "INTEGER",
            "cluster_id": "VARCHAR",
            "n_rollouts": "INTEGER",
            "n_excluded": "INTEGER",
            "n_success": "INTEGER",
            "p": "DOUBLE",
            "n_nodes": "INTEGER",
            "n_edges": "INTEGER",
            "n_branch_points": "INTEGER",
            "n_branch_edges": "INTEGER",
            "n_error_branch_edges": "INTEGER",
            "ebr": "DOUBLE",
            "h_strat": "DOUBLE",
            "h_strat_norm": "DOUBLE",
            "n_signatures": "INTEGER",
            "n_succ_strat": "INTEGER",
            "l_star": "INTEGER",
            "rl_score": "DOUBLE",
            "in_rl_pool": "BOOLEAN",
            "graph": "JSON",
        },
    ),
    "trajectory_topology": (
        "trajectory_id",
        {
            "trajectory_id": "VARCHAR",
            "run_id": "VARCHAR",
            "round": "INTEGER",
            "task_id": "VARCHAR",
            "included": "BOOLEAN",
            "skip_reason": "VARCHAR",
            "success": "BOOLEAN",
            "signature": "VARCHAR",
            "signature_len": "INTEGER",
            "path_len": "INTEGER",
            "n_errors": "INTEGER",
            "n_recovered": "INTEGER",
            "rec": "BOOLEAN",
            "eff": "DOUBLE",
            "redundancy": "DOUBLE",
        },
    ),
    "selections": (
        "selection_id",
        {
            "selection_id": "VARCHAR",
            "run_id": "VARCHAR",
            "kind": "VARCHAR",
            "item_id": "VARCHAR",
            "task_id": "VARCHAR",
            "round": "INTEGER",
            "selected": "BOOLEAN",
            "score": "DOUBLE",
            "rank": "INTEGER",
            "reason": "VARCHAR",
            "components": "JSON",
            "config_hash": "VARCHAR",
        },
    ),
    "round_stats": (
        "round_key",
        {
            "round_key": "VARCHAR",
            "run_id": "VARCHAR",
            "round": "INTEGER",
            "input_hash": "VARCHAR",
            "n_trajectories": "INTEGER",
            "n_verified": "INTEGER",
            "n_accepted": "INTEGER",
            "pass_rate": "DOUBLE",
            "n_tasks": "INTEGER",
            "domain_entropy": "DOUBLE",
            "domain_entropy_norm": "DOUBLE",
            "cluster_entropy_norm": "DOUBLE",
            "reasoning_mode_entropy": "DOUBLE",
            "reasoning_mode_entropy_norm": "DOUBLE",
            "action_complexity": "DOUBLE",
            "error_branch_ratio": "DOUBLE",
            "strategic_heterogeneity": "DOUBLE",
            "n_succ_strat": "DOUBLE",
            "n_recovered": "INTEGER",
            "n_duplicates": "INTEGER",
            "n_sft_selected": "INTEGER",
            "n_rl_selected": "INTEGER",
            "mode_codebook": "VARCHAR",
            "skips": "JSON",
            "timings": "JSON",
            "report": "JSON",
            "round_report": "JSON",
            "curation": "JSON",
        },
    ),
    "mode_codebooks": (
        "codebook_id",
        {
            "codebook_id": "VARCHAR",
            "run_id": "VARCHAR",
            "round": "INTEGER",
            "version": "VARCHAR",
            "kind": "VARCHAR",
            "n_fit": "INTEGER",
            "silhouette": "DOUBLE",
            "fallback_reason": "VARCHAR",
            "record": "JSON",
        },
    ),
    "evolution": (
        "change_id",
        {
            "change_id": "VARCHAR",
            "run_id": "VARCHAR",
            "round": "INTEGER",
            "level": "VARCHAR",
            "parent": "VARCHAR",
            "option": "VARCHAR",
            "n": "INTEGER",
            "f": "DOUBLE",
            "v": "DOUBLE",
            "p_old": "DOUBLE",
            "p_new": "DOUBLE",
            "reason": "VARCHAR",
            "detail": "JSON",
        },
    ),
    "embeddings": (
        "text_hash",
        {
            "text_hash": "VARCHAR",
            "model": "VARCHAR",
            "vector": "FLOAT[]",
        },
    ),
    "llm_calls": (
        "call_key",
        {
            "call_key": "VARCHAR",
            "run_id": "VARCHAR",
            "trajectory_id": "VARCHAR",
            "role": "VARCHAR",
            "model": "VARCHAR",
            "prompt_tokens": "INTEGER",
            "completion_tokens": "INTEGER",
            "latency_s": "DOUBLE",
            "cached": "BOOLEAN",
        },
    ),
    "work_units": (
        "unit_id",
        {
            "unit_id": "VARCHAR",
            "run_id": "VARCHAR",
            "kind": "VARCHAR",
            "done_at": "TIMESTAMP",
        },
    ),
    # --- issue 18 (the training loop): trained models and their held-out evals ------------
    "models": (
        "model_id",
        {
            "model_id": "VARCHAR",
            "parent": "VARCHAR",
            "path": "VARCHAR",
            "gguf_path": "VARCHAR",
            "method": "VARCHAR",
            "run_ids": "JSON",
            "data_hash": "VARCHAR",
            "n_rows": "INTEGER",
            "n_tokens": "BIGINT",
            "config": "JSON",
            "metrics": "JSON",
            "created_at": "TIMESTAMP",
        },
    ),
    "evals": (
        "eval_id",
        {
            "eval_id": "VARCHAR",
            "model_id": "VARCHAR",
            "policy": "VARCHAR",
            "split": "VARCHAR",
            "split_kind": "VARCHAR",
            "k": "INTEGER",
            "n_tasks": "INTEGER",
            "n_tries": "INTEGER",
            "n_excluded": "INTEGER",
            "pass1": "DOUBLE",
            "pass1_low": "DOUBLE",
            "pass1_high": "DOUBLE",
            "passk": "DOUBLE",
            "passk_low": "DOUBLE",
            "passk_high": "DOUBLE",
            "clusters": "JSON",
            "tries": "JSON",
            "created_at": "TIMESTAMP",
        },
    ),
}


def _create(name: str) -> str:
    pk, cols = TABLES[name]
    columns = ", ".join(f"{col} {typ}" for col, typ in cols.items())
    return f"CREATE TABLE IF NOT EXISTS {name} ({columns}, PRIMARY KEY ({pk}))"


def _add_columns(name: str, *columns: str) -> list[str]:
    cols = TABLES[name][1]
    return [f"ALTER TABLE {name} ADD COLUMN IF NOT EXISTS {c} {cols[c]}" for c in columns]


# Each migration takes the store from version i to i+1. Append, never edit. A new store runs
# them all: the first creates every table with today's columns, the rest are then no-ops.
MIGRATIONS: list[list[str]] = [
    [_create(name) for name in TABLES],
    # rollout trees (issue 5): budgets and branch decisions, node values, final states
    [
        *_add_columns("trees", "generated_tokens", "n_pruned", "n_passed", "budget"),
        *_add_columns("nodes", "process_reward", "n_leaves", "branch"),
        _create("final_states"),
    ],
    # curation (issue 7): signals, topology, selections, round figures, evolution, embeddings
    [
        *_add_columns(
            "scores",
            "run_id",
            "round",
            "mode_label",
            "mode_cosine",
            "mode_reason",
            "rule_label",
            "accepted",
            "domain",
            "digest_key",
        ),  # fmt: skip
        *(
            _create(name)
            for name in (
                "signals",
                "task_topology",
                "trajectory_topology",
                "selections",
                "round_stats",
                "mode_codebooks",
                "evolution",
                "embeddings",
            )
        ),
    ],
]
# issue 18 (the training loop): models, evals, and where a trajectory came from
MIGRATIONS.append([*_add_columns("trajectories", "source"), _create("models"), _create("evals")])
SCHEMA_VERSION = len(MIGRATIONS)


def _is_lock_error(exc: BaseException) -> bool:
    return isinstance(exc, duckdb.IOException) and "lock" in str(exc).lower()


_retry_on_lock = retry(
    retry=retry_if_exception(_is_lock_error),
    wait=wait_exponential_jitter(multiplier=0.02, max=0.5),
    stop=stop_after_delay(30),
    reraise=True,
)


def _to_cell(value: Any, typ: str) -> Any:
    if typ == "JSON":
        return None if value is None else json.dumps(value, ensure_ascii=False, default=str)
    return value


def _arrow_types() -> dict[str, Any]:
    import pyarrow as pa

    return {
        "VARCHAR": pa.string,
        "JSON": pa.string,
        "INTEGER": pa.int32,
        "BIGINT": pa.int64,
        "DOUBLE": pa.float64,
        "BOOLEAN": pa.bool_,
        "TIMESTAMP": lambda: pa.timestamp("us"),
        "FLOAT[]": lambda: pa.list_(pa.float32()),
    }


class _LazyArrowTypes(dict[str, Any]):
    def __missing__(self, key: str) -> Any:
        self.update(_arrow_types())
        return dict.__getitem__(self, key)


_ARROW_TYPES = _LazyArrowTypes()


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def work_unit_row(run_id: str, kind: str, unit_id: str) -> dict[str, Any]:
    """The done-marker of one unit of work; insert it in the same batch as the unit's rows."""
    return {"unit_id": unit_id, "run_id": run_id, "kind": kind, "done_at": _now()}


class Store:
    """A DuckDB file. Cheap to construct; holds no connection between calls."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._migrated = False

    def _ensure_migrated(self) -> None:
        if not self._migrated:
            self.migrate()

    # --- connections -----------------------------------------------------------------
    @contextmanager
    def _connect(self, *, read_only: bool) -> Iterator[duckdb.DuckDBPyConnection]:
        if read_only and not self.path.exists():
            raise InputError(f"no store at {self.path} (run `synth run` first)")
        if not read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        con = _retry_on_lock(duckdb.connect)(str(self.path), read_only=read_only)
        try:
            yield con
        finally:
            con.close()

    def migrate(self) -> int:
        """Create or upgrade the tables; returns the schema version."""
        with self._connect(read_only=False) as con:
            con.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER)")
            row = con.execute("SELECT max(version) FROM schema_version").fetchone()
            current = row[0] if row and row[0] is not None else 0
            if current > SCHEMA_VERSION:
                raise InputError(
                    f"{self.path} has schema version {current}, newer than this trajsynth "
                    f"({SCHEMA_VERSION}); upgrade trajsynth"
                )
            for version in range(current, SCHEMA_VERSION):
                con.execute("BEGIN")
                for stmt in MIGRATIONS[version]:
                    con.execute(stmt)
                con.execute("INSERT INTO schema_version VALUES (?)", [version + 1])
                con.execute("COMMIT")
        self._migrated = True
        return SCHEMA_VERSION

    # --- writes ----------------------------------------------------------------------
    def insert(self, table: str, rows: Iterable[BaseModel | dict[str, Any]]) -> int:
        """Insert rows (records or dicts), skipping ids already present. One transaction."""
        return self.insert_many({table: rows})

    def insert_many(self, batches: dict[str, Iterable[BaseModel | dict[str, Any]]]) -> int:
        """Insert into several tables in ONE transaction: all of it commits or none does.

        Returns the number of new rows. Rows go in as Arrow tables (``insert_bulk``):
        ``executemany`` costs milliseconds per row, which a tree's nodes would pay.
        """
        return self.insert_bulk(batches)

    @_retry_on_lock
    def insert_bulk(
        self,
        batches: dict[str, Iterable[BaseModel | dict[str, Any]]],
        *,
        delete: Sequence[tuple[str, Sequence[Any]]] = (),
    ) -> int:
        """``insert_many`` for large batches: rows go in as one Arrow table per table.

        Same semantics (ONE transaction, ``ON CONFLICT DO NOTHING``, returns the new rows),
        about 100x faster than ``executemany`` for 10,000 rows; values must already have
        their column's type (an int for INTEGER, a list of floats for FLOAT[]). ``delete``
        statements (SQL, params) run first in the same transaction, so a caller can replace
        a slice of a table atomically (curation re-deriving one round).
        """
        import pyarrow as pa

        prepared: list[tuple[str, list[str], Any]] = []
        for table, rows in batches.items():
            if table not in TABLES:
                raise KeyError(f"unknown table {table!r}")
            _, cols = TABLES[table]
            names = list(cols)
            columns: dict[str, list[Any]] = {c: [] for c in names}
            for row in rows:
                data = row.model_dump(mode="json") if isinstance(row, BaseModel) else row
                for c in names:
                    columns[c].append(_to_cell(data.get(c), cols[c]))
            if columns[names[0]]:
                arrays = [pa.array(columns[c], type=_ARROW_TYPES[cols[c]]()) for c in names]
                prepared.append((table, names, pa.Table.from_arrays(arrays, names=names)))
        if not prepared and not delete:
            return 0
        self._ensure_migrated()
        with self._connect(read_only=False) as con:
            con.execute("BEGIN")
            try:
                for sql, params in delete:
                    con.execute(sql, list(params)).fetchall()
                before = {t: _count_all(con, t) for t, _, _ in prepared}
                for table, names, arrow in prepared:
                    con.register("_bulk_rows", arrow)
                    cols_sql = ", ".join(names)
                    con.execute(
                        f"INSERT INTO {table} ({cols_sql}) SELECT {cols_sql} FROM _bulk_rows "
                        "ON CONFLICT DO NOTHING"
                    ).fetchall()
                    con.unregister("_bulk_rows")
                added = sum(_count_all(con, t) - before[t] for t, _, _ in prepared)
                con.execute("COMMIT")
            except duckdb.Error:
                con.execute("ROLLBACK")
                raise
        return added

    @_retry_on_lock
    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Run one write statement (updates of run state and the like)."""
        self._ensure_migrated()
        with self._connect(read_only=False) as con:
            con.execute(sql, list(params))

    # --- runs --------------------------------------------------------------------------
    def start_run(self, run_id: str, config: dict[str, Any], manifest: dict[str, Any]) -> bool:
        """Record a run (or find it again on resume). True when it was new."""
        self.migrate()
        now = _now()
        added = self.insert(
            "runs",
            [
                {
                    "run_id": run_id,
                    "created_at": now,
                    "updated_at": now,
                    "state": "running",
                    "config": config,
                    "manifest": manifest,
                    "summary": None,
                }
            ],
        )
        if not added:
            self.execute(
                "UPDATE runs SET state = 'running', updated_at = ? WHERE run_id = ?", [now, run_id]
            )
        return bool(added)

    def finish_run(self, run_id: str, state: str, summary: dict[str, Any]) -> None:
        self.execute(
            "UPDATE runs SET state = ?, updated_at = ?, summary = ? WHERE run_id = ?",
            [state, _now(), json.dumps(summary, default=str), run_id],
        )

    def done_units(self, run_id: str, kind: str) -> set[str]:
        if not self.path.exists():
            return set()
        rows = self.query(
            "SELECT unit_id FROM work_units WHERE run_id = ? AND kind = ?", [run_id, kind]
        )
        return {r["unit_id"] for r in rows}

    # --- reads -------------------------------------------------------------------------
    @_retry_on_lock
    def query(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Run one read-only query; rows as dicts, JSON columns decoded."""
        with self._connect(read_only=True) as con:
            try:
                cur = con.execute(sql, list(params))
            except duckdb.CatalogException as exc:
                if "schema_version" not in _tables(con):
                    return []
                raise InputError(str(exc).splitlines()[0]) from None
            desc = cur.description or []
            cols = [d[0] for d in desc]
            json_cols = {d[0] for d in desc if str(d[1]) == "JSON"}
            out = []
            for row in cur.fetchall():
                item = dict(zip(cols, row, strict=True))
                for col in json_cols:
                    if item[col] is not None:
                        item[col] = json.loads(item[col])
                out.append(item)
            return out

    @_retry_on_lock
    def query_many(
        self, statements: Sequence[tuple[str, Sequence[Any]]]
    ) -> list[list[dict[str, Any]]]:
        """Run several read-only queries on ONE connection, in one transaction (one lock wait,
        one snapshot); rows as ``query`` gives them. For pages that ask many questions at once.
        """
        if not statements:
            return []
        with self._connect(read_only=True) as con:
            results = []
            con.execute("BEGIN TRANSACTION READ ONLY")
            for sql, params in statements:
                try:
                    cur = con.execute(sql, list(params))
                except duckdb.CatalogException as exc:
                    raise InputError(str(exc).splitlines()[0]) from None
                desc = cur.description or []
                cols = [d[0] for d in desc]
                json_cols = [i for i, d in enumerate(desc) if str(d[1]) == "JSON"]
                rows = []
                for row in cur.fetchall():
                    values = list(row)
                    for i in json_cols:
                        if values[i] is not None:
                            values[i] = json.loads(values[i])
                    rows.append(dict(zip(cols, values, strict=True)))
                results.append(rows)
            con.execute("COMMIT")
            return results

    @_retry_on_lock
    def query_table(self, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Run a user's SQL read-only; columns and rows (for ``synth query``)."""
        with self._connect(read_only=True) as con:
            try:
                cur = con.execute(sql)
            except duckdb.Error as exc:
                raise InputError(f"SQL error: {str(exc).splitlines()[0]}") from None
            cols = [d[0] for d in cur.description] if cur.description else []
            return cols, cur.fetchall()

    def get(self, table: str, key: str) -> dict[str, Any] | None:
        if table not in TABLES:
            raise InputError(f"unknown kind {table!r}; one of: {', '.join(TABLES)}")
        pk, _ = TABLES[table]
        rows = self.query(f"SELECT * FROM {table} WHERE {pk} = ? OR {pk} LIKE ?", [key, key + "%"])
        if len(rows) > 1:
            raise InputError(f"{key!r} matches {len(rows)} {table}; give more of the id")
        return rows[0] if rows else None

    def counts(self) -> dict[str, int]:
        if not self.path.exists():
            return {}
        out = {}
        for table in TABLES:
            rows = self.query(f"SELECT count(*) AS n FROM {table}")
            out[table] = rows[0]["n"] if rows else 0
        return out


def _count(con: duckdb.DuckDBPyConnection, table: str) -> int:
    row = con.execute(f"SELECT count(*) FROM {table}").fetchone()
    return int(row[0]) if row else 0


def _count_all(con: duckdb.DuckDBPyConnection, table: str) -> int:
    """``_count`` that drains its result (a pending result blocks ``register``)."""
    rows = con.execute(f"SELECT count(*) FROM {table}").fetchall()
    return int(rows[0][0]) if rows else 0


def _tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {
        r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()
    }
