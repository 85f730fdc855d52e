"""Ids on the command line: whole in every table, and any unique prefix accepted.

``resolve`` turns what the user typed into the one stored id it names: an exact id wins,
else the ids that start with it (``starts_with``, not ``LIKE``: ids hold ``_``, a LIKE
wildcard); none or several is an ``InputError`` naming the value and the candidates.
``id_column`` adds a table column whose ids are never cut: no wrap, at least as wide as
the longest id, and folded (not ellipsised) only when the terminal is narrower than one id.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from trajsynth.cli.tables import Table
from trajsynth.schemas import InputError
from trajsynth.store import Store

__all__ = ["ID_SOURCES", "id_column", "resolve"]

ID_SOURCES: dict[str, tuple[tuple[str, str], ...]] = {
    # a run may have trajectories or selections before (or without) its `runs` row
    "run": (("runs", "run_id"), ("trajectories", "run_id"), ("selections", "run_id")),
    # a task is a blueprint; `synth topo` reads its trajectories
    "task": (("blueprints", "blueprint_id"), ("trajectories", "blueprint_id")),
    "tree": (("trees", "tree_id"),),
    "trajectory": (("trajectories", "trajectory_id"),),
    "eval": (("evals", "eval_id"),),
}

_SHOWN = 5


def resolve(store: Store, kind: str, typed: str) -> str:
    """The stored ``kind`` id (run, task, tree, trajectory, eval) that ``typed`` names."""
    sources = ID_SOURCES[kind]
    union = " UNION ".join(
        f"SELECT DISTINCT {col} AS id FROM {table} WHERE starts_with({col}, ?)"
        for table, col in sources
    )
    ids = sorted({str(r["id"]) for r in store.query(union, [typed] * len(sources))})
    if typed in ids:
        return typed
    if len(ids) == 1:
        return ids[0]
    if not ids:
        raise InputError(f"no {kind} id starts with {typed!r} in {store.path}")
    shown = ", ".join(ids[:_SHOWN]) + (", ..." if len(ids) > _SHOWN else "")
    raise InputError(f"{typed!r} matches {len(ids)} {kind} ids ({shown}); give more of the id")


def id_column(table: Table, header: str, ids: Iterable[str], **kwargs: object) -> None:
    """A column for ids: kept whole (no ellipsis, no wrap at ``-``/``_``)."""
    width = max([len(header), *(len(i) for i in ids)])
    table.add_column(header, no_wrap=True, overflow="fold", min_width=width, **kwargs)  # type: ignore[arg-type]


def shrinkable(table: Table, headers: Sequence[str], **kwargs: object) -> None:
    """Columns that give way first when the table is wider than the terminal."""
    for header in headers:
        table.add_column(header, overflow="fold", **kwargs)  # type: ignore[arg-type]
