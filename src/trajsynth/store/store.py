"""The DuckDB store: every record the pipeline makes, queryable in SQL.

Layout for concurrent readers: DuckDB lets one process hold a file for writing and, while it
does, no other process may open it at all. So no process keeps the file open: every write is
one short transaction (open, insert a batch, commit, close) and every read opens read-only for
one query. A run therefore holds the lock for milliseconds per batch, and ``synth query`` or the
dashboard get in between. Lock conflicts on either side are retried with backoff (tenacity).

Opening the file costs about 30 ms (DuckDB builds its catalog of functions for each new
database instance), so a burst of calls, such as a page of figures, a command's reads or a
curation round's loading, holds one connection in ``Store.session()``; every call inside it,
from any ``Store`` of the same file in this process, takes a cursor of it (under 1 ms).

Writes are ``INSERT ... ON CONFLICT DO NOTHING`` on content-derived primary keys, so rerunning
anything is safe and a crashed run resumes without duplicates.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import duckdb
from pydantic import BaseModel, TypeAdapter, ValidationError
from tenacity import retry, retry_if_exception, stop_after_delay, wait_exponential_jitter

from trajsynth.schemas import InputError
from trajsynth.store.rows import (
    RECORD_ROWS,
    ROW_MODELS,
    Row,
    RunRow,
    StoredRow,
    WorkUnitRow,
    column_types,
    model_from_row,
)

__all__ = [
    "SCHEMA_VERSION",
    "TABLES",
    "Store",
    "StoreCorruptError",
    "StoreLockedError",
    "work_unit_row",
]

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)


class StoreLockedError(InputError):
    """Another process held the store for longer than we were willing to wait."""


class StoreCorruptError(InputError):
    """The store file is damaged: cut short, or not a DuckDB file at all."""


def _damaged(path: Path, exc: duckdb.Error) -> StoreCorruptError:
    return StoreCorruptError(
        f"{path} is damaged: DuckDB cannot read it ({type(exc).__name__}: "
        f"{str(exc).splitlines()[0][:200]}); restore it from a copy, or move it aside and rerun"
    )


# table -> (primary key, {column: duckdb type}), read from the row models (store/rows.py).
# JSON columns hold nested fields; SQL reaches into them with ->, ->> and json_extract.
TABLES: dict[str, tuple[str, dict[str, str]]] = {
    name: (model.key(), column_types(model)) for name, model in ROW_MODELS.items()
}

# Columns renamed to words (readable in SQL): table -> {old name: new name}. A store written before
# the rename gets them renamed in place by migration 4, its data kept.
RENAMED: dict[str, dict[str, str]] = {
    "task_topology": {
        "p": "pass_rate",
        "ebr": "error_branch_ratio",
        "h_strat": "strategy_entropy",
        "h_strat_norm": "strategy_entropy_norm",
        "n_succ_strat": "n_success_strategies",
        "l_star": "shortest_success_len",
    },
    "trajectory_topology": {"rec": "recovered", "eff": "efficiency"},
    "scores": {"cac": "action_complexity"},
    "round_stats": {"n_succ_strat": "n_success_strategies"},
    "evolution": {
        "n": "n_accepted",
        "f": "failure_rate",
        "v": "validity",
        "p_old": "weight_old",
        "p_new": "weight_new",
    },
}


def _renamed_keys(table: str, data: dict[str, Any]) -> list[str]:
    renamed = RENAMED.get(table)
    return sorted(k for k in data if k in renamed and k not in TABLES[table][1]) if renamed else []


def _create(name: str) -> str:
    pk, cols = TABLES[name]
    columns = ", ".join(f"{col} {typ}" for col, typ in cols.items())
    return f"CREATE TABLE IF NOT EXISTS {name} ({columns}, PRIMARY KEY ({pk}))"


def _add_columns(name: str, *columns: str) -> list[str]:
    cols = TABLES[name][1]
    return [f"ALTER TABLE {name} ADD COLUMN IF NOT EXISTS {c} {cols[c]}" for c in columns]


def _columns(con: duckdb.DuckDBPyConnection) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for table, column in con.execute(
        "SELECT table_name, column_name FROM information_schema.columns"
    ).fetchall():
        out.setdefault(table, set()).add(column)
    return out


def _rename_columns(con: duckdb.DuckDBPyConnection) -> None:
    """Rename the columns of ``RENAMED`` where the store still has the old name."""
    present = _columns(con)
    for table, renames in RENAMED.items():
        for old, new in renames.items():
            have = present.get(table, set())
            if old in have and new not in have:
                con.execute(f"ALTER TABLE {table} RENAME COLUMN {old} TO {new}")


def _reconcile(con: duckdb.DuckDBPyConnection) -> None:
    """Create any table and add any column a row model has and the store lacks."""
    present = _columns(con)
    for name, (_, cols) in TABLES.items():
        if name not in present:
            con.execute(_create(name))
            continue
        for col in cols.keys() - present[name]:
            con.execute(f"ALTER TABLE {name} ADD COLUMN {col} {cols[col]}")


Migration = Callable[[duckdb.DuckDBPyConnection], None]


def _statements(*sql: str) -> Migration:
    def run(con: duckdb.DuckDBPyConnection) -> None:
        for stmt in sql:
            con.execute(stmt)

    return run


# Each migration takes the store from version i to i+1. Append, never edit. A new store runs
# them all: the first creates every table with today's columns, the rest are then no-ops.
# After them ``_reconcile`` adds what the row models gained since (a new column needs no
# migration of its own; a rename or a change of type does).
MIGRATIONS: list[Migration] = [
    _statements(*(_create(name) for name in TABLES)),
    # rollout trees: budgets and branch decisions, node values, final states
    _statements(
        *_add_columns("trees", "generated_tokens", "n_pruned", "n_passed", "budget"),
        *_add_columns("nodes", "process_reward", "n_leaves", "branch"),
        _create("final_states"),
    ),
    # curation: signals, topology, selections, round figures, evolution, embeddings
    _statements(
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
    ),
    # readable column names
    _rename_columns,
]
SCHEMA_VERSION = len(MIGRATIONS)
# What ``_reconcile`` would bring the tables to, kept as the comment of ``schema_version``:
# a store that carries it needs no reconcile (whose information_schema scan takes ~20 ms).
SCHEMA_FINGERPRINT = hashlib.sha256(
    json.dumps([SCHEMA_VERSION, TABLES, RENAMED], sort_keys=True).encode()
).hexdigest()[:16]


def _is_lock_error(exc: BaseException) -> bool:
    """Another process holds the file, or another thread of this one holds it in the other
    mode (DuckDB opens a file once per process, read-only or not): both end in milliseconds."""
    if isinstance(exc, duckdb.ConnectionException):
        return "different configuration" in str(exc)
    return isinstance(exc, duckdb.IOException) and "lock" in str(exc).lower()


# 20 ms, 40 ms, ... up to 0.5 s, each plus up to 20 ms of jitter (tenacity's default jitter
# is a whole second, which made every first retry wait about 0.4 s for a lock held for ms)
_retry_on_lock = retry(
    retry=retry_if_exception(_is_lock_error),
    wait=wait_exponential_jitter(multiplier=0.02, max=0.5, jitter=0.02),
    stop=stop_after_delay(30),
    reraise=True,
)


@contextmanager
def _damage_named(path: Path) -> Iterator[None]:
    try:
        yield
    except duckdb.IOException as exc:  # a block the file should hold is not there
        if _is_lock_error(exc):
            raise
        raise _damaged(path, exc) from exc


@dataclass
class _Held:
    """A connection that ``Store.session`` holds open for this process."""

    con: duckdb.DuckDBPyConnection
    read_only: bool
    owner: int  # the thread that opened the session
    users: int = 0  # cursors in use; this and ``closed`` are guarded by ``changed``
    closed: bool = False
    changed: threading.Condition = field(default_factory=threading.Condition)

    def wait_closed(self) -> None:
        with self.changed:
            self.changed.wait_for(lambda: self.closed)


# (process id, resolved path) -> the session's connection. The pid keeps a forked child from
# using its parent's connection.
_HELD: dict[tuple[int, str], _Held] = {}
_HELD_LOCK = threading.Lock()


def _join(key: tuple[int, str], path: Path, read_only: bool, *, use: bool) -> _Held | None:
    """The session a call on ``key`` runs in (counted as a user when ``use``), or None when
    it is to open the file itself. A write meeting another thread's read-only session waits
    for it to end; in its own thread's, it is a programming error (DuckDB cannot upgrade)."""
    while True:
        with _HELD_LOCK:
            held = _HELD.get(key)
            if held is None:
                return None
            if read_only or not held.read_only:
                if use:
                    with held.changed:
                        held.users += 1
                return held
            if held.owner == threading.get_ident():
                raise RuntimeError(f"a write to {path} inside a read-only session")
        held.wait_closed()


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


def work_unit_row(run_id: str, kind: str, unit_id: str) -> WorkUnitRow:
    """The done-marker of one unit of work; write it in the same batch as the unit's rows."""
    return WorkUnitRow(unit_id=unit_id, run_id=run_id, kind=kind, done_at=_now())


class Store:
    """A DuckDB file. Cheap to construct; holds no connection between calls."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._key = str(self.path.resolve())
        self._migrated = False

    def _ensure_migrated(self) -> None:
        if not self._migrated:
            self.migrate()

    # --- connections -----------------------------------------------------------------
    @contextmanager
    def session(self, *, read_only: bool = False) -> Iterator[Store]:
        """Hold one connection to the file for a burst of calls; yields this store.

        Every call inside, from any thread and any ``Store`` of the same file in this
        process, runs on a cursor of it instead of opening the file (about 30 ms each).
        While it lasts, no other process may write (``read_only``) or open the file at all
        (a write session), so keep it to a burst: not around LLM calls or embeddings. A
        session inside another of the same file joins it. A write inside a read-only session
        raises ``RuntimeError`` in the session's thread and waits for its end in another.
        """
        key = (os.getpid(), self._key)
        if _join(key, self.path, read_only, use=False) is not None:
            yield self
            return
        held: _Held | None = None
        try:
            with self._open(read_only=read_only) as con:
                held = _Held(con, read_only, threading.get_ident())
                with _HELD_LOCK:
                    _HELD[key] = held
                try:
                    yield self
                finally:
                    with _HELD_LOCK:
                        del _HELD[key]
                    with held.changed:  # another thread may still be on a cursor of it
                        held.changed.wait_for(lambda: held.users == 0)
        finally:
            if held is not None:  # closed now: a writer waiting for it may open the file
                with held.changed:
                    held.closed = True
                    held.changed.notify_all()

    @contextmanager
    def _connect(self, *, read_only: bool) -> Iterator[duckdb.DuckDBPyConnection]:
        held = _join((os.getpid(), self._key), self.path, read_only, use=True)
        if held is None:
            with self._open(read_only=read_only) as con:
                yield con
            return
        try:
            cursor = held.con.cursor()
            try:
                with _damage_named(self.path):
                    yield cursor
            finally:
                cursor.close()
        finally:
            with held.changed:
                held.users -= 1
                held.changed.notify_all()

    @contextmanager
    def _open(self, *, read_only: bool) -> Iterator[duckdb.DuckDBPyConnection]:
        if read_only and not self.path.exists():
            raise InputError(f"no store at {self.path} (run `synth run` first)")
        if not read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            con = _retry_on_lock(duckdb.connect)(str(self.path), read_only=read_only)
        except duckdb.Error as exc:
            if _is_lock_error(exc):
                raise
            raise _damaged(self.path, exc) from exc
        try:
            with _damage_named(self.path):
                yield con
        finally:
            con.close()

    def migrate(self) -> int:
        """Create or upgrade the tables; returns the schema version."""
        with self._connect(read_only=False) as con:
            con.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER)")
            row = con.execute(
                "SELECT (SELECT max(version) FROM schema_version), comment FROM duckdb_tables() "
                "WHERE table_name = 'schema_version' AND schema_name = 'main'"
            ).fetchone()
            current = row[0] if row and row[0] is not None else 0
            if current == SCHEMA_VERSION and row and row[1] == SCHEMA_FINGERPRINT:
                self._migrated = True
                return SCHEMA_VERSION
            if current > SCHEMA_VERSION:
                raise InputError(
                    f"{self.path} has schema version {current}, newer than this trajsynth "
                    f"({SCHEMA_VERSION}); upgrade trajsynth"
                )
            for version in range(current, SCHEMA_VERSION):
                con.execute("BEGIN")
                MIGRATIONS[version](con)
                con.execute("INSERT INTO schema_version VALUES (?)", [version + 1])
                con.execute("COMMIT")
            _reconcile(con)
            con.execute(f"COMMENT ON TABLE schema_version IS '{SCHEMA_FINGERPRINT}'")
        self._migrated = True
        return SCHEMA_VERSION

    # --- writes ----------------------------------------------------------------------
    def insert(self, table: str, rows: Iterable[BaseModel | dict[str, Any]]) -> int:
        """Insert rows (records or dicts), skipping ids already present. One transaction."""
        return self.insert_many({table: rows})

    def insert_many(self, batches: Mapping[str, Iterable[BaseModel | dict[str, Any]]]) -> int:
        """Insert into several tables in ONE transaction: all of it commits or none does.

        Returns the number of new rows. Rows go in as Arrow tables (``insert_bulk``):
        ``executemany`` costs milliseconds per row, which a tree's nodes would pay.
        """
        return self.insert_bulk(batches)

    @_retry_on_lock
    def insert_bulk(
        self,
        batches: Mapping[str, Iterable[BaseModel | dict[str, Any]]],
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
            stamps = [c for c in names if cols[c] == "TIMESTAMP"]
            for row in rows:
                if isinstance(row, Row) and (isinstance(row, StoredRow) or row.__record__ is None):
                    data = dict(row)  # its columns hold text, numbers and JSON data already
                elif isinstance(row, BaseModel):
                    data = row.model_dump(mode="json")
                    # a datetime as itself: Arrow takes no ISO text for a TIMESTAMP
                    data.update({c: getattr(row, c) for c in stamps if c in data})
                else:
                    data = row
                if not isinstance(row, BaseModel) and _renamed_keys(table, data):
                    # a column's old name would otherwise be stored as NULL; keys that are no
                    # column at all are left out, as rows carry extra fields on purpose
                    old = _renamed_keys(table, data)[0]
                    raise InputError(
                        f"{table} has no column {old!r} (renamed {RENAMED[table][old]!r})"
                    )
                for c in names:
                    columns[c].append(_to_cell(data.get(c), cols[c]))
            if columns[names[0]]:
                arrays = [pa.array(columns[c], type=_ARROW_TYPES[cols[c]]()) for c in names]
                prepared.append((table, names, pa.Table.from_arrays(arrays, names=names)))
        if not prepared and not delete:
            return 0
        with self.session():  # a first write checks the schema on the same connection
            self._ensure_migrated()
            return self._insert_prepared(prepared, delete)

    def _insert_prepared(
        self, prepared: list[tuple[str, list[str], Any]], delete: Sequence[tuple[str, Any]]
    ) -> int:
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

    def write(
        self,
        rows: Iterable[Row],
        *,
        delete: Sequence[tuple[str, Sequence[Any]]] = (),
        **more: Iterable[Row],
    ) -> int:
        """Insert row models into their tables in ONE transaction; returns the new rows.

        Rows of any mix of tables go in together (each model names its table), so a unit's
        records and its done-marker commit at once. ``delete`` statements (SQL, params) run
        first in the same transaction: a slice of a table replaced at once (a round curated
        again).
        """
        batches: dict[str, list[Row]] = {}
        for row in (*rows, *(r for group in more.values() for r in group)):
            if not isinstance(row, Row):
                raise TypeError(f"Store.write takes row models, not {type(row).__name__}")
            batches.setdefault(type(row).__table__, []).append(row)
        return self.insert_bulk(dict(batches), delete=delete) if batches or delete else 0

    def read(
        self,
        model: type[M],
        where: str = "",
        params: Sequence[Any] = (),
        /,
        *,
        on_error: Callable[[str, ValidationError], None] | None = None,
        shared: Sequence[str] = (),
        **equal: Any,
    ) -> list[M]:
        """Rows of a table as models, ordered by key: ``where`` (SQL) and ``column=value``
        filters on its columns. ``model`` is a row model, or a record a row model is derived
        from (``Trajectory``, ``Verdict``, ...): then each row comes back as the record, its
        NULL columns (a row of an older release) left to the record's defaults.

        A row the record cannot take is passed to ``on_error`` (its key and why) and left
        out; without ``on_error`` it raises. ``shared`` names a record's fields whose value
        many rows repeat (a trajectory's tool schemas, the same for every rollout of a
        task): each distinct value is validated once and shared.

        >>> Store(path).read(TaskTopologyRow, run_id=run_id, round=0)  # doctest: +SKIP
        >>> Store(path).read(Verdict, trajectory_id=tid)  # doctest: +SKIP
        """
        row = model if issubclass(model, Row) else RECORD_ROWS.get(model)
        if row is None:
            raise TypeError(f"{model.__name__} is neither a row model nor stored whole")
        unknown = set(equal) - set(row.model_fields)
        if unknown:
            raise InputError(
                f"{row.__table__} has no column {sorted(unknown)[0]!r}; "
                f"one of: {', '.join(row.model_fields)}"
            )
        clauses = [f"{col} = ?" for col in equal] + ([f"({where})"] if where else [])
        where_sql = (" WHERE " + " AND ".join(clauses)) if clauses else ""
        values = [*equal.values(), *params]
        if model is row:
            sql = f"SELECT {', '.join(row.model_fields)} FROM {row.__table__}"
            rows = self.query(sql + where_sql + f" ORDER BY {row.key()}", values)
            return [model.model_validate(r) for r in rows]
        return self._read_records(model, row, where_sql, values, on_error, shared)

    def _read_records(
        self,
        record: type[M],
        row: type[Row],
        where_sql: str,
        values: list[Any],
        on_error: Callable[[str, ValidationError], None] | None,
        shared: Sequence[str],
    ) -> list[M]:
        # each row as one JSON document: pydantic validates JSON text twice as fast as the
        # dicts json.loads would make of it; a shared field comes as its own text
        key = row.key()
        fields = [f for f in record.model_fields if f in row.model_fields and f not in shared]
        apart = "".join(f", {f}::VARCHAR AS {f}" for f in shared)
        rows = self.query(
            f"SELECT {key} AS _key, to_json(struct_pack({', '.join(fields)}))::VARCHAR AS _doc"
            f"{apart} FROM {row.__table__}{where_sql} ORDER BY {key}",
            values,
        )
        annotations = {f: record.model_fields[f].annotation for f in shared}
        adapters = {
            f: TypeAdapter[Any](a if a is not None else Any) for f, a in annotations.items()
        }
        seen: dict[tuple[str, str], Any] = {}
        out: list[M] = []
        for r in rows:
            try:
                item = record.model_validate_json(r["_doc"])
                update = {}
                for f in shared:
                    if r[f] is not None:
                        if (f, r[f]) not in seen:
                            seen[f, r[f]] = adapters[f].validate_json(r[f])
                        update[f] = seen[f, r[f]]
                out.append(item.model_copy(update=update) if update else item)
            except ValidationError:
                # NULLs where the record has defaults, or a truly bad row: field by field,
                # the NULLs dropped, naming the first bad field
                try:
                    doc = json.loads(r["_doc"])
                    doc.update({f: json.loads(r[f]) for f in shared if r[f] is not None})
                    out.append(model_from_row(record, doc))
                except ValidationError as exc:
                    if on_error is None:
                        raise
                    on_error(str(r["_key"]), exc)
        return out

    @_retry_on_lock
    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Run one write statement (updates of run state and the like)."""
        with self.session():
            self._ensure_migrated()
            with self._connect(read_only=False) as con:
                con.execute(sql, list(params))

    # --- runs --------------------------------------------------------------------------
    def start_run(self, run_id: str, config: dict[str, Any], manifest: dict[str, Any]) -> bool:
        """Record a run (or find it again on resume). True when it was new."""
        with self.session():
            return self._start_run(run_id, config, manifest)

    def _start_run(self, run_id: str, config: dict[str, Any], manifest: dict[str, Any]) -> bool:
        self.migrate()
        now = _now()
        run = RunRow(
            run_id=run_id,
            created_at=now,
            updated_at=now,
            state="running",
            config=config,
            manifest=manifest,
        )
        added = self.write([run])
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
        return {r.unit_id for r in self.read(WorkUnitRow, run_id=run_id, kind=kind)}

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
        with self.session(read_only=True):
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
