"""Canonical state of a bundled cluster's environment (docs/methods.md §1.2, §4 ``final_state``).

``python -m trajsynth.mcp_servers.servers._state <name> [--init] [--workdir DIR] [--seed N]``
prints the canonical JSON of an ``EnvState``: ``{"state_hash": ..., "tables": {...}}``. Rows are
sorted by primary key and volatile columns (creation timestamps) are left out, so the hash is
sha256 of the canonical JSON of the tables and two environments in the same state hash the same.
``--init`` creates and seeds the state when it does not exist yet (it starts no server); without
it a missing state is an error (exit status 3).

``<name>`` is a cluster folder under ``trajsynth.mcp_servers.servers`` (the last part of its
``ServerSpec.module``). Runs inside the sandbox, where there are no entry points: the folder is
the only thing asked. Dumping reads the state alone (the SQLite file records its own volatile
columns; a file cluster's state is marked by ``.trajsynth/<name>.json``), so it imports only
the stdlib; ``--init`` imports the module that holds the folder's ``STORE`` for its seeder:
``state.py`` where the folder has one (the bundled four: no ``mcp``), else ``server.py``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import re
import sys
from pathlib import Path
from typing import Any, Protocol

from trajsynth.mcp_servers.servers._backend import (
    PRIVATE_DIR,
    canonical_json,
    dump_files,
    dump_sqlite,
    env_seed,
    env_workdir,
)

__all__ = ["NoStateError", "dump_state", "main", "state_exists", "state_store"]

_PACKAGE = "trajsynth.mcp_servers.servers"  # not __name__: this runs as __main__ too
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class NoStateError(FileNotFoundError):
    """The work directory holds no state for the cluster (not seeded, server never started)."""


class _StateStore(Protocol):
    def exists(self, workdir: Path | None = None) -> bool: ...
    def ensure(self, workdir: Path | None = None, seed: int | None = None) -> Any: ...
    def dump(self, workdir: Path | None = None) -> dict[str, Any]: ...


def state_store(name: str) -> _StateStore:
    """The state store of bundled cluster ``name``: the ``STORE`` of its ``state`` module, or
    of its ``server`` module when the folder keeps its state there."""
    module = importlib.import_module(_check(name))
    store: _StateStore = module.STORE
    return store


def _check(name: str) -> str:
    """The module that holds cluster ``name``'s ``STORE``; ValueError unless ``name`` is a
    cluster folder here (it names a path in the work dir)."""
    if _NAME.match(name):
        for part in ("state", "server"):
            try:
                if importlib.util.find_spec(f"{_PACKAGE}.{name}.{part}"):
                    return f"{_PACKAGE}.{name}.{part}"
            except ModuleNotFoundError:
                break  # no such folder
    raise ValueError(f"unknown bundled cluster '{name}': no {_PACKAGE}.{name}.server module")


def _file_cluster(name: str, root: Path) -> bool:
    # checked before the SQLite file: a program in the code cluster may write `<name>.sqlite`
    return (root / PRIVATE_DIR / f"{name}.json").is_file()


def state_exists(name: str, workdir: str | Path) -> bool:
    """Whether ``workdir`` holds seeded state of cluster ``name``."""
    _check(name)
    root = Path(workdir)
    return _file_cluster(name, root) or (root / f"{name}.sqlite").is_file()


def dump_state(
    name: str, workdir: str | Path, *, init: bool = False, seed: int | None = None
) -> dict[str, Any]:
    """The canonical state of cluster ``name`` in ``workdir`` as ``{"state_hash", "tables"}``.

    ``init=True`` seeds the state first if it is missing (with ``seed``, default
    ``$TRAJSYNTH_SEED`` or 0); otherwise a missing state raises ``NoStateError``.
    """
    root = Path(workdir)
    if not state_exists(name, root):
        if not init:
            raise NoStateError(f"no {name} state in {root}: start the server or use --init")
        state_store(name).ensure(root, seed)
    if _file_cluster(name, root):
        return dump_files(root, name)
    return dump_sqlite(root / f"{name}.sqlite")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trajsynth.mcp_servers.servers._state",
        description="Print the canonical state (EnvState JSON) of a bundled cluster.",
    )
    parser.add_argument("name", help="the cluster's folder under " + _PACKAGE)
    parser.add_argument("--init", action="store_true", help="create and seed the state if missing")
    parser.add_argument("--workdir", type=Path, default=None, help="default: $TRAJSYNTH_WORKDIR")
    parser.add_argument("--seed", type=int, default=None, help="default: $TRAJSYNTH_SEED or 0")
    args = parser.parse_args(argv)
    try:
        _check(args.name)
    except ValueError as exc:
        parser.error(str(exc))
    workdir = args.workdir or env_workdir()
    seed = env_seed() if args.seed is None else args.seed
    try:
        state = dump_state(args.name, workdir, init=args.init, seed=seed)
    except NoStateError as exc:
        sys.stderr.write(f"{exc}\n")
        return 3
    sys.stdout.write(canonical_json(state) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
