"""`Store.session`: a burst of calls on one connection, and what it must not break (other
threads, other processes, the schema check that every first write makes)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest

from trajsynth.store import Store
from trajsynth.store import store as store_module


def _row(run_id: str) -> dict:
    return {"run_id": run_id, "state": "running", "config": {}, "manifest": {}}


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every ``duckdb.connect`` the store makes, by path."""
    opened: list[str] = []
    real = duckdb.connect

    def counting(database: str = ":memory:", *args, **kwargs):
        opened.append(database)
        return real(database, *args, **kwargs)

    monkeypatch.setattr(store_module.duckdb, "connect", counting)
    return opened


def test_calls_in_a_session_open_the_file_once(tmp_path: Path, connects: list[str]) -> None:
    store = Store(tmp_path / "s.duckdb")
    with store.session() as same:
        assert same is store
        store.migrate()
        store.insert("runs", [_row("r1")])
        other = Store(tmp_path / "s.duckdb")  # another object of the same file joins
        assert other.query("SELECT run_id FROM runs") == [{"run_id": "r1"}]
        other.insert("runs", [_row("r2")])
        with other.session(read_only=True):  # a nested session joins too
            assert store.counts()["runs"] == 2
    assert len(connects) == 1
    assert store.query("SELECT count(*) AS n FROM runs") == [{"n": 2}]
    assert len(connects) == 2  # after it, each call opens the file again


def test_a_rolled_back_write_in_a_session_leaves_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    store.migrate()
    with store.session():
        with pytest.raises(duckdb.Error):
            store.execute("INSERT INTO runs (run_id, state) VALUES ('r1', 'x'), ('r1', 'y')")
        store.insert("runs", [_row("r2")])
    assert [r["run_id"] for r in store.query("SELECT run_id FROM runs")] == ["r2"]


def test_a_write_in_its_own_read_only_session_is_an_error(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    store.migrate()
    with store.session(read_only=True):
        with pytest.raises(RuntimeError, match="inside a read-only session"):
            store.insert("runs", [_row("r1")])
        with pytest.raises(RuntimeError, match="inside a read-only session"), store.session():
            pass
    assert store.insert("runs", [_row("r1")]) == 1


def test_another_threads_write_waits_for_a_read_only_session(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    store.migrate()
    events: list[str] = []
    writer = threading.Thread(
        target=lambda: events.append(f"wrote {Store(store.path).insert('runs', [_row('r1')])}")
    )
    with store.session(read_only=True):
        writer.start()
        writer.join(timeout=0.3)
        assert writer.is_alive(), "the write went ahead inside the read-only session"
        assert store.query("SELECT count(*) AS n FROM runs") == [{"n": 0}]
        events.append("session ends")
    writer.join(timeout=10)
    assert events == ["session ends", "wrote 1"]


def test_a_session_waits_for_another_threads_cursor_before_closing(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    store.migrate()
    inside, release = threading.Event(), threading.Event()
    seen: list[object] = []

    def slow_reader() -> None:
        with store._connect(read_only=True) as con:  # a cursor of the session's connection
            inside.set()
            release.wait(5)
            seen.append(con.execute("SELECT count(*) FROM runs").fetchall())

    reader = threading.Thread(target=slow_reader)
    ended = threading.Event()

    def hold() -> None:
        with store.session():
            reader.start()
            inside.wait(5)
        ended.set()

    holder = threading.Thread(target=hold)
    holder.start()
    inside.wait(5)
    time.sleep(0.2)
    assert not ended.is_set(), "the session closed under a cursor in use"
    release.set()
    holder.join(timeout=10)
    reader.join(timeout=10)
    assert ended.is_set() and seen == [[(0,)]]


def test_another_process_reads_during_a_read_only_session(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    store.insert("runs", [_row("r1")])
    read = (
        "import duckdb, sys; con = duckdb.connect(sys.argv[1], read_only=True); "
        "print(con.execute('SELECT count(*) FROM runs').fetchone()[0])"
    )
    with store.session(read_only=True):
        out = subprocess.run(
            [sys.executable, "-c", read, str(store.path)], capture_output=True, text=True
        )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1"


def test_a_read_waits_out_this_process_writing_in_the_other_mode(tmp_path: Path) -> None:
    """DuckDB opens a file once per process: a read-only open while a write connection is
    open fails with "different configuration"; that is retried like a lock."""
    store = Store(tmp_path / "s.duckdb")
    store.insert("runs", [_row("r1")])
    writer = duckdb.connect(str(store.path))
    timer = threading.Timer(0.2, writer.close)
    timer.start()
    assert store.query("SELECT count(*) AS n FROM runs") == [{"n": 1}]
    timer.join()


def test_a_migrated_store_skips_the_reconcile_until_the_schema_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(tmp_path / "s.duckdb")
    store.migrate()
    comment = store.query("SELECT comment FROM duckdb_tables() WHERE table_name = 'schema_version'")
    assert comment == [{"comment": store_module.SCHEMA_FINGERPRINT}]
    reconciled: list[int] = []
    real = store_module._reconcile
    monkeypatch.setattr(store_module, "_reconcile", lambda con: reconciled.append(1) or real(con))
    Store(store.path).migrate()
    assert reconciled == []
    # a store written by a version whose row models lacked a column
    store.execute("ALTER TABLE runs DROP COLUMN summary")
    store.execute("COMMENT ON TABLE schema_version IS 'older'")
    Store(store.path).migrate()
    assert reconciled == [1]
    con = duckdb.connect(str(store.path), read_only=True)
    try:
        assert "summary" in store_module._columns(con)["runs"]
    finally:
        con.close()
