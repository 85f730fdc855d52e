"""The SQLite backend the bundled servers share: seeding, transactions, tool tags, errors.

A server's state is one SQLite file, ``$TRAJSYNTH_WORKDIR/<name>.sqlite``, created on first use
from the cluster's seed data (``seed.json`` in its folder) perturbed by ``random.Random(seed)``
with ``seed = $TRAJSYNTH_SEED`` (default 0). Every tool call opens its own connection and commits
or rolls back as one transaction, so a snapshot restored under a running server is seen by the
next call and a failed call leaves no partial change.

This module runs inside the sandbox and imports only the stdlib at import time (``mcp`` is
imported where a tool needs it), so dumping state (``_state``) stays fast: it never loads a server.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import ToolAnnotations
    from pydantic import BaseModel

    ModelT = TypeVar("ModelT", bound=BaseModel)

__all__ = [
    "SEED_ENV",
    "STATE_URI",
    "WORKDIR_ENV",
    "Column",
    "FileStore",
    "Store",
    "Table",
    "canonical_json",
    "dump_files",
    "dump_sqlite",
    "env_seed",
    "env_workdir",
    "fail",
    "serve_state",
    "from_row",
    "ignored_path",
    "insert",
    "load_seed_data",
    "money",
    "next_id",
    "one",
    "one_or_fail",
    "read_tool",
    "write_tool",
]

WORKDIR_ENV = "TRAJSYNTH_WORKDIR"
SEED_ENV = "TRAJSYNTH_SEED"


def env_workdir() -> Path:
    """The sandbox work directory: ``$TRAJSYNTH_WORKDIR``, else the current directory."""
    return Path(os.environ.get(WORKDIR_ENV) or os.getcwd())


def env_seed() -> int:
    """The state seed: ``$TRAJSYNTH_SEED`` (an integer), default 0."""
    raw = os.environ.get(SEED_ENV, "").strip()
    if not raw:
        return 0
    try:
        return int(raw)
    except ValueError as exc:
        raise ValueError(f"{SEED_ENV} must be an integer, got {raw!r}") from exc


def canonical_json(data: Any) -> str:
    """Sorted keys, no whitespace: the same as ``trajsynth.schemas.canonical_json``."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def load_seed_data(path: Path) -> dict[str, Any]:
    """A cluster's seed data (the ``seed.json`` in its folder)."""
    with path.open(encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def fail(message: str) -> ToolError:
    """A domain error the model sees as an ``isError`` result (raise the return value).

    The SDK turns a ``ToolError`` into ``CallToolResult(is_error=True)`` whose text is
    ``Error executing tool <name>: <message>``; any other exception would reach the model only
    as ``Error executing tool <name>``.
    """
    from mcp.server.mcpserver.exceptions import ToolError

    return ToolError(message)


def read_tool(title: str) -> ToolAnnotations:
    """Annotations of a tool that changes nothing."""
    from mcp.types import ToolAnnotations

    return ToolAnnotations(title=title, read_only_hint=True, open_world_hint=False)


def write_tool(
    title: str, *, destructive: bool = False, idempotent: bool = False
) -> ToolAnnotations:
    """Annotations of a tool that changes state (``destructive``: it removes or undoes)."""
    from mcp.types import ToolAnnotations

    return ToolAnnotations(
        title=title,
        read_only_hint=False,
        destructive_hint=destructive,
        idempotent_hint=idempotent,
        open_world_hint=False,
    )


@dataclass(frozen=True)
class Column:
    name: str
    sql_type: str = "TEXT"
    nullable: bool = False


@dataclass(frozen=True)
class Table:
    """One table: columns, primary key, and the volatile columns the state hash leaves out."""

    name: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    volatile: frozenset[str] = frozenset()

    def ddl(self) -> str:
        cols = [f"{c.name} {c.sql_type}{'' if c.nullable else ' NOT NULL'}" for c in self.columns]
        cols.append(f"PRIMARY KEY ({', '.join(self.primary_key)})")
        return f"CREATE TABLE {self.name} ({', '.join(cols)})"

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


META = Table(
    "meta",
    (Column("key"), Column("value")),
    ("key",),
)

Seeder = Callable[[dict[str, Any], random.Random], Mapping[str, Sequence[Mapping[str, Any]]]]


@dataclass
class Store:
    """A cluster's SQLite state: its tables, how to seed them, and one-transaction access.

    ``seeder(seed_data, rng)`` returns rows per table, ``seed_data`` read from ``seed_file``;
    ``meta`` rows record the seed, the fixed clock (``now`` from the seed data) and the seed
    data's sha256.
    """

    name: str
    tables: tuple[Table, ...]
    seeder: Seeder
    seed_file: Path
    _seeded: set[Path] = field(default_factory=set, repr=False)

    def path(self, workdir: Path | None = None) -> Path:
        return (workdir or env_workdir()) / f"{self.name}.sqlite"

    def exists(self, workdir: Path | None = None) -> bool:
        return self.path(workdir).is_file()

    def ensure(self, workdir: Path | None = None, seed: int | None = None) -> Path:
        """Create and seed the state file if it does not exist yet; return its path."""
        path = self.path(workdir)
        if path in self._seeded and path.is_file():
            return path
        if not path.is_file():
            self._create(path, env_seed() if seed is None else seed)
        self._seeded.add(path)
        return path

    def _create(self, path: Path, seed: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = load_seed_data(self.seed_file)
        rows = self.seeder(data, random.Random(seed))
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        tmp.unlink(missing_ok=True)
        conn = sqlite3.connect(tmp)
        try:
            with conn:
                for table in (META, *self.tables):
                    conn.execute(table.ddl())
                seed_sha = hashlib.sha256(canonical_json(data).encode()).hexdigest()
                volatile = {t.name: sorted(t.volatile) for t in self.tables if t.volatile}
                meta = {"cluster": self.name, "seed": str(seed), "now": data["now"]}
                meta["seed_data_sha256"] = seed_sha
                meta["volatile_columns"] = canonical_json(volatile)
                conn.executemany("INSERT INTO meta VALUES (?, ?)", sorted(meta.items()))
                for table in self.tables:
                    for row in rows.get(table.name, ()):
                        insert(conn, table.name, row)
        finally:
            conn.close()
        os.replace(tmp, path)

    @contextmanager
    def tx(self, workdir: Path | None = None) -> Iterator[sqlite3.Connection]:
        """One transaction: committed when the block ends, rolled back when it raises."""
        path = self.ensure(workdir)
        conn = sqlite3.connect(path, timeout=10.0)
        conn.row_factory = sqlite3.Row
        try:
            with conn:
                yield conn
        finally:
            conn.close()

    def now(self, conn: sqlite3.Connection) -> str:
        """The cluster's fixed clock (ISO 8601): timestamps stay reproducible across runs."""
        return str(conn.execute("SELECT value FROM meta WHERE key = 'now'").fetchone()[0])

    def dump(self, workdir: Path | None = None) -> dict[str, Any]:
        """Canonical state: every table's rows sorted by primary key, volatile columns removed."""
        return dump_sqlite(self.path(workdir))


def dump_sqlite(path: Path) -> dict[str, Any]:
    """Canonical state of a cluster's SQLite file, read from the file alone.

    Tables (by name) come from ``sqlite_master``, primary keys from ``PRAGMA table_info``, and
    the volatile columns from the ``volatile_columns`` row of ``meta``; ``state_hash`` is the
    sha256 of the canonical JSON of the tables.
    """
    if not path.is_file():
        raise FileNotFoundError(path)
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'volatile_columns'").fetchone()
        volatile: dict[str, list[str]] = json.loads(row[0]) if row else {}
        names = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]
        tables: dict[str, list[dict[str, Any]]] = {}
        for name in names:
            info = conn.execute(f"PRAGMA table_info({name})").fetchall()
            pk = [r["name"] for r in sorted(info, key=lambda r: r["pk"]) if r["pk"]]
            order = ", ".join(pk or [r["name"] for r in info])
            drop = set(volatile.get(name, ()))
            tables[name] = [
                {k: v for k, v in zip(r.keys(), tuple(r), strict=True) if k not in drop}
                for r in conn.execute(f"SELECT * FROM {name} ORDER BY {order}")
            ]
    finally:
        conn.close()
    digest = hashlib.sha256(canonical_json(tables).encode()).hexdigest()
    return {"state_hash": digest, "tables": tables}


def insert(conn: sqlite3.Connection, table: str, row: Mapping[str, Any]) -> None:
    """Insert one row given as a mapping of column to value."""
    cols = ", ".join(row)
    marks = ", ".join("?" for _ in row)
    conn.execute(f"INSERT INTO {table} ({cols}) VALUES ({marks})", tuple(row.values()))


def one(conn: sqlite3.Connection, sql: str, params: Sequence[Any] = ()) -> sqlite3.Row | None:
    """The first row of a query, or None."""
    row: sqlite3.Row | None = conn.execute(sql, tuple(params)).fetchone()
    return row


def one_or_fail(
    conn: sqlite3.Connection, sql: str, params: Sequence[Any], message: str
) -> sqlite3.Row:
    """The first row of a query; none is a domain error with ``message`` (see ``fail``)."""
    row = one(conn, sql, params)
    if row is None:
        raise fail(message)
    return row


def from_row(model: type[ModelT], row: sqlite3.Row | Mapping[str, Any], **given: Any) -> ModelT:
    """``model`` from the row's columns of the same names as its fields; ``given`` fields
    (derived or converted values) are taken as they are instead."""
    return model(**{k: row[k] for k in model.model_fields if k not in given}, **given)


def next_id(conn: sqlite3.Connection, table: str, column: str, prefix: str, start: int) -> str:
    """The next sequential id ``prefix + n`` (n > every existing one, >= ``start``).

    Ids depend only on the state, never on time, so replaying the same calls into the same
    initial state gives the same ids (and the same state hash).
    """
    rows = conn.execute(
        f"SELECT {column} FROM {table} WHERE {column} LIKE ?", (f"{prefix}%",)
    ).fetchall()
    numbers = [int(s[len(prefix) :]) for (s,) in rows if s[len(prefix) :].isdigit()]
    return f"{prefix}{max([start - 1, *numbers]) + 1}"


def money(value: float) -> float:
    """Round an amount to cents."""
    return round(value + 0.0, 2)


# ---------------------------------------------------------------- file-based state (code cluster)

PRIVATE_DIR = ".trajsynth"
IGNORED_DIRS = frozenset(
    {PRIVATE_DIR, "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
)
IGNORED_SUFFIXES = (".pyc", ".pyo")
TEXT_IN_STATE_BYTES = 65_536

FileSeeder = Callable[[dict[str, Any], random.Random], Mapping[str, str]]


def ignored_path(rel: Path) -> bool:
    """Whether a work-directory path is outside the state (caches, the private dir)."""
    return any(part in IGNORED_DIRS for part in rel.parts) or rel.suffix in IGNORED_SUFFIXES


@dataclass
class FileStore:
    """A cluster whose state is the files under the work directory (same API as ``Store``).

    ``seeder(seed_data, rng)`` returns the files to write (relative path -> text) on first
    start, ``seed_data`` read from ``seed_file``; a marker ``.trajsynth/<name>.json`` records
    the seed and the fixed clock.
    """

    name: str
    seeder: FileSeeder
    seed_file: Path

    def marker(self, workdir: Path | None = None) -> Path:
        return (workdir or env_workdir()) / PRIVATE_DIR / f"{self.name}.json"

    def exists(self, workdir: Path | None = None) -> bool:
        return self.marker(workdir).is_file()

    def ensure(self, workdir: Path | None = None, seed: int | None = None) -> Path:
        """Write the seeded files once; return the work directory."""
        root = workdir or env_workdir()
        marker = self.marker(root)
        if marker.is_file():
            return root
        seed = env_seed() if seed is None else seed
        data = load_seed_data(self.seed_file)
        for rel, text in self.seeder(data, random.Random(seed)).items():
            target = root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        meta = {
            "cluster": self.name,
            "seed": str(seed),
            "now": data["now"],
            "seed_data_sha256": hashlib.sha256(canonical_json(data).encode()).hexdigest(),
        }
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(canonical_json(meta), encoding="utf-8")
        return root

    def dump(self, workdir: Path | None = None) -> dict[str, Any]:
        return dump_files(workdir or env_workdir(), self.name)


STATE_URI = "trajsynth://state"
"""The MCP resource a bundled server serves its canonical state at (``serve_state``)."""


def serve_state(server: Any, store: Store | FileStore) -> None:
    """Serve ``store.dump()`` as the MCP resource ``STATE_URI`` on ``server`` (an
    ``MCPServer``; not imported here, so dumping keeps to the stdlib).

    The environment reads the state over the session it already holds (a few milliseconds)
    instead of starting an interpreter in the sandbox per read (45 ms in Docker, 83 ms in the
    local sandbox, measured by ``bench/environment.py``); the dump still runs inside the
    sandbox, in the server's process. Resources are never shown to the model: it gets tools.
    """

    @server.resource(
        STATE_URI,
        name="trajsynth-state",
        mime_type="application/json",
        description="This environment's canonical state, for trajsynth's verifier.",
    )
    def canonical_state() -> str:
        return canonical_json(store.dump())


def dump_files(root: Path, name: str) -> dict[str, Any]:
    """Canonical state of a file cluster: one row per file (path, size, sha256, text if small).

    Caches and ``.trajsynth/`` are left out; ``meta`` comes from the seed marker.
    """
    marker = root / PRIVATE_DIR / f"{name}.json"
    meta = json.loads(marker.read_text(encoding="utf-8"))
    files = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if not path.is_file() or path.is_symlink() or ignored_path(rel):
            continue
        data = path.read_bytes()
        text: str | None = None
        if len(data) <= TEXT_IN_STATE_BYTES:
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                text = None
        files.append(
            {
                "path": rel.as_posix(),
                "size": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "text": text,
            }
        )
    tables = {"files": files, "meta": [{"key": k, "value": meta[k]} for k in sorted(meta)]}
    digest = hashlib.sha256(canonical_json(tables).encode()).hexdigest()
    return {"state_hash": digest, "tables": tables}
