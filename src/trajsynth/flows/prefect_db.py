"""A migrated, empty Prefect database kept once per Prefect version and copied into new homes.

Prefect's server migrates a new SQLite database on its first start: about 4.5 s of the 7 s a
new home's API takes to answer here, against 2.4 s for a home that has its database (and
that wait comes before a command's first LLM request). So the first new home on a
machine keeps its database, freshly migrated and before any command has written to it, as a
template, and the next new home starts from a copy; Prefect's own start-up migration then finds
the database at its head and has nothing to do. ``make setup`` saves the template too
(``python -m trajsynth.flows.ephemeral_api --template``), so the first ``make run`` on a fresh
machine starts from a copy as well.

Only Prefect's default kind of database is touched: a SQLite file the settings name that does
not exist yet. A configured Postgres, an in-memory database or an existing file is left as it is.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
import os
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from trajsynth.schemas.paths import cache_dir

__all__ = ["home_database", "save_template", "seed_database", "template_path", "with_template"]

log = logging.getLogger(__name__)

_SQLITE = "sqlite+aiosqlite:///"


def home_database() -> Path | None:
    """The SQLite file Prefect's server will use, or None when it uses something else."""
    from prefect.settings import get_current_settings

    url = get_current_settings().server.database.connection_url
    value = url.get_secret_value() if url is not None else ""
    if not value.startswith(_SQLITE) or "?" in value or ":memory:" in value:
        return None
    return Path(value.removeprefix(_SQLITE))


def template_path() -> Path:
    """Keyed by Prefect's version: its migrations change with it."""
    return cache_dir() / "prefect" / f"prefect-{importlib.metadata.version('prefect')}.db"


def _untouched(db: Path) -> bool:
    return not any(Path(f"{db}{suffix}").exists() for suffix in ("", "-wal", "-journal"))


def _copy(src: Path, dest: Path) -> None:
    """SQLite's online backup: a consistent copy even while Prefect writes to ``src``."""
    with (
        contextlib.closing(sqlite3.connect(src)) as source,
        contextlib.closing(sqlite3.connect(dest)) as target,
    ):
        source.backup(target)


def seed_database(db: Path, template: Path | None = None) -> bool:
    """Copy the template to ``db`` when ``db`` does not exist yet; True when it did."""
    template = template or template_path()
    if not template.is_file() or not _untouched(db):
        return False
    db.parent.mkdir(parents=True, exist_ok=True)
    tmp = db.with_name(f".{db.name}.{os.getpid()}.seed")
    try:
        _copy(template, tmp)
        os.link(tmp, db)  # never over a database another process created meanwhile
    except FileExistsError:
        return False
    except (OSError, sqlite3.Error) as exc:
        log.warning("Prefect database template %s not used: %s", template, exc)
        return False
    finally:
        tmp.unlink(missing_ok=True)
    return True


def save_template(db: Path, template: Path | None = None) -> Path:
    """A copy of ``db`` saved as the template, replacing any older one atomically."""
    template = template or template_path()
    template.parent.mkdir(parents=True, exist_ok=True)
    tmp = template.with_name(f".{template.name}.{os.getpid()}.tmp")
    try:
        _copy(db, tmp)
        os.replace(tmp, template)
    finally:
        tmp.unlink(missing_ok=True)
    return template


Lifespan = Callable[[Any], contextlib.AbstractAsyncContextManager[Any]]


def with_template(lifespan: Lifespan, db: Path) -> Lifespan:
    """Prefect's app lifespan, saving ``db`` as the template once start-up (migrations, block
    registration) is done and before the first request can write to it."""

    @contextlib.asynccontextmanager
    async def saving(app: Any) -> AsyncIterator[Any]:
        async with lifespan(app) as state:
            try:
                save_template(db)
            except (OSError, sqlite3.Error) as exc:  # a cache we cannot write costs time only
                log.warning("Prefect database template not saved: %s", exc)
            yield state

    return saving
