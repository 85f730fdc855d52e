"""The Prefect database template: a new home starts from a migrated copy;
an existing database, a configured Postgres or a database being created is never touched."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from trajsynth.flows import prefect_db


def _db(path: Path, rows: int) -> Path:
    with sqlite3.connect(path) as con:
        con.execute("create table block_type (name text)")
        con.executemany("insert into block_type values (?)", [(f"b{i}",) for i in range(rows)])
    return path


def _rows(path: Path) -> int:
    with sqlite3.connect(path) as con:
        return con.execute("select count(*) from block_type").fetchone()[0]


def test_a_new_home_gets_a_copy_of_the_template(tmp_path: Path) -> None:
    template = prefect_db.save_template(_db(tmp_path / "live.db", 3), tmp_path / "t" / "p.db")
    home = tmp_path / "home" / "prefect.db"
    assert prefect_db.seed_database(home, template)
    assert _rows(home) == 3
    assert [p.name for p in home.parent.iterdir()] == ["prefect.db"]  # no temporary left


@pytest.mark.parametrize("present", ["prefect.db", "prefect.db-wal", "prefect.db-journal"])
def test_a_database_that_exists_or_is_being_made_is_left_alone(
    tmp_path: Path, present: str
) -> None:
    template = prefect_db.save_template(_db(tmp_path / "live.db", 3), tmp_path / "t.db")
    home = tmp_path / "home"
    home.mkdir()
    (home / present).write_bytes(b"theirs")
    assert not prefect_db.seed_database(home / "prefect.db", template)
    assert (home / present).read_bytes() == b"theirs"


def test_no_template_no_copy(tmp_path: Path) -> None:
    assert not prefect_db.seed_database(tmp_path / "prefect.db", tmp_path / "none.db")
    assert not (tmp_path / "prefect.db").exists()


def test_a_newer_template_replaces_the_old_one(tmp_path: Path) -> None:
    template = tmp_path / "t.db"
    prefect_db.save_template(_db(tmp_path / "a.db", 1), template)
    prefect_db.save_template(_db(tmp_path / "b.db", 5), template)
    assert _rows(template) == 5


def test_only_a_sqlite_file_is_a_home_database(tmp_path: Path) -> None:
    from prefect.settings import PREFECT_API_DATABASE_CONNECTION_URL, temporary_settings

    file = tmp_path / "p.db"
    for url, expected in [
        (f"sqlite+aiosqlite:///{file}", file),
        ("postgresql+asyncpg://u:p@db:5432/prefect", None),
        ("sqlite+aiosqlite:///file::memory:?cache=shared&uri=true", None),
    ]:
        with temporary_settings({PREFECT_API_DATABASE_CONNECTION_URL: url}):
            assert prefect_db.home_database() == expected, url


def _start_and_check(home: Path, cache: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env |= {"PREFECT_HOME": str(home), "XDG_CACHE_HOME": str(cache)}
    script = (
        "from trajsynth.flows import api\napi.start_api()\napi.wait_api(timeout_s=180)\n"
        "from prefect.client.orchestration import get_client\n"
        "with get_client(sync_client=True) as c:\n    assert c.api_healthcheck() is None\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.slow
def test_the_first_new_home_saves_the_template_and_the_next_starts_from_it(
    tmp_path: Path,
) -> None:
    cache = tmp_path / "cache"
    _start_and_check(tmp_path / "home-a", cache)
    [template] = (cache / "trajsynth" / "prefect").glob("prefect-*.db")
    with sqlite3.connect(template) as con:
        assert con.execute("select count(*) from block_type").fetchone()[0] > 0  # registered
        assert con.execute("select count(*) from flow_run").fetchone()[0] == 0
        con.execute("create table seeded_from_template (x)")  # a mark to find in home B
    _start_and_check(tmp_path / "home-b", cache)
    with sqlite3.connect(tmp_path / "home-b" / "prefect.db") as con:
        tables = {r[0] for r in con.execute("select name from sqlite_master")}
    assert "seeded_from_template" in tables  # and Prefect's start-up accepted the copy


@pytest.mark.slow
def test_the_setup_step_saves_a_template_from_a_throwaway_home(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "trajsynth.flows.ephemeral_api", "--template"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    [template] = (tmp_path / "trajsynth" / "prefect").glob("prefect-*.db")
    assert str(template) in done.stdout
    with sqlite3.connect(template) as con:
        assert con.execute("select count(*) from block_type").fetchone()[0] > 0
        assert con.execute("select version_num from alembic_version").fetchone()
