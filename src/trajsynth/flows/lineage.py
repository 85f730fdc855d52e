"""What a model was trained on, its ancestors' data included: the leakage check's other side.

``synth sft`` (and ``synth improve``) record on the model's ``models`` row the lineage
(``training.splits.TaskKey``) of the task behind every training row, read from the
``blueprints`` table by the rows' ``task_id`` (or given, for gold demonstrations planned on
the spot), and the task ids it could not resolve. ``model_lineage`` gathers a policy's
lineage and that of every model up its ``parent`` chain: a policy tuned from a tuned model
has seen its parent's data too.

Nothing here skips silently: a policy with no ``models`` row, or whose rows name tasks this
store does not hold, comes back with ``complete = False`` and says why; ``synth eval``
refuses to score such a policy unless told to.

It lives with the flows because it reads the store and plans nothing: ``training`` may not
import ``store`` (docs/design.md, the layering), and both the CLI and ``flows.improve`` record it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import Field

from trajsynth.schemas import Blueprint, Record
from trajsynth.store import Store
from trajsynth.store.rows import ModelRow
from trajsynth.training.splits import TaskKey, task_key

__all__ = ["ModelLineage", "RowLineage", "model_lineage", "read_blueprints", "row_lineage"]

log = logging.getLogger(__name__)


class RowLineage(Record):
    """The tasks behind a model's own training rows."""

    keys: list[TaskKey] = Field(default_factory=list)
    unresolved: list[str] = Field(default_factory=list)
    run_ids: list[str] = Field(default_factory=list)


class ModelLineage(Record):
    """A policy's training tasks, its ancestors' included, and whether that is all of them."""

    model_id: str | None = None
    chain: list[str] = Field(default_factory=list)
    keys: list[TaskKey] = Field(default_factory=list)
    unresolved: list[str] = Field(default_factory=list)
    why_incomplete: str | None = None

    @property
    def complete(self) -> bool:
        return self.why_incomplete is None


def read_blueprints(
    store: Store, *, ids: Sequence[str] = (), run_ids: Sequence[str] = ()
) -> list[Blueprint]:
    """Stored blueprints by id and/or by the run that planned them."""
    if not store.path.exists() or not (ids or run_ids):
        return []
    clauses, params = [], []
    for column, values in (("blueprint_id", ids), ("run_id", run_ids)):
        if values:
            clauses.append(f"{column} IN ({', '.join('?' for _ in values)})")
            params.extend(values)

    def unreadable(key: str, exc: ValueError) -> None:
        log.warning("blueprint %s unreadable for the leakage check: %s", key, exc)

    return store.read(Blueprint, " OR ".join(clauses), params, on_error=unreadable)


def row_lineage(
    store: Store, rows: Iterable[dict[str, Any]], known: Sequence[Blueprint] = ()
) -> RowLineage:
    """The lineage of the tasks behind ``rows`` (each with ``task_id``, maybe ``run_id``):
    from ``known`` first, then the store's ``blueprints``; ids found in neither are listed."""
    rows = list(rows)
    task_ids = sorted({str(r["task_id"]) for r in rows if r.get("task_id")})
    run_ids = sorted({str(r["run_id"]) for r in rows if r.get("run_id")})
    by_id = {b.blueprint_id: b for b in known}
    missing = [t for t in task_ids if t not in by_id]
    for b in read_blueprints(store, ids=missing):
        by_id[b.blueprint_id] = b
    unresolved = [t for t in task_ids if t not in by_id]
    untasked = sum(1 for r in rows if not r.get("task_id"))
    if untasked:
        unresolved.append(f"{untasked} rows without a task id")
    keys = [task_key(by_id[t]) for t in task_ids if t in by_id]
    return RowLineage(keys=keys, unresolved=unresolved, run_ids=run_ids)


def _model_row(store: Store, path: str) -> ModelRow | None:
    """The newest models row whose folder or GGUF is ``path`` (paths compared resolved: a
    row written with a relative output dir still matches an absolute policy path)."""

    def same(stored: str | None) -> bool:
        return bool(stored) and (
            stored == path or Path(stored or "").resolve() == Path(path).resolve()
        )

    rows = sorted(store.read(ModelRow), key=lambda r: r.created_at or datetime.min, reverse=True)
    return next((r for r in rows if same(r.path) or same(r.gguf_path)), None)


def _own(store: Store, row: ModelRow) -> tuple[list[TaskKey], list[str]]:
    """One models row's own lineage; a row written before lineage was recorded falls back
    to the blueprints of the runs it names."""
    if isinstance(row.lineage, list):
        keys = [TaskKey.model_validate(k) for k in row.lineage]
        unresolved = row.unresolved if isinstance(row.unresolved, list) else []
        return keys, [str(u) for u in unresolved]
    run_ids = [str(r) for r in row.run_ids] if isinstance(row.run_ids, list) else []
    if not run_ids:
        return [], [f"model {row.model_id} records neither its rows' tasks nor its runs"]
    found = read_blueprints(store, run_ids=run_ids)
    if not found:
        return [], [f"runs {', '.join(run_ids)} of model {row.model_id} have no stored tasks"]
    return [task_key(b) for b in found], []


def model_lineage(store: Store, policy: str) -> ModelLineage:
    """Every training task of ``policy`` and of its ancestors (``models.parent``)."""
    if policy == "embedded":
        return ModelLineage()
    if not store.path.exists():
        return ModelLineage(
            why_incomplete=f"no store at {store.path} records what {policy} was trained on"
        )
    row = _model_row(store, policy)
    if row is None:
        return ModelLineage(
            why_incomplete=f"no models row in {store.path} records what {policy} was trained on"
        )
    model_id = row.model_id
    chain: list[str] = []
    unresolved: list[str] = []
    seen: dict[str, TaskKey] = {}
    current: ModelRow | None = row
    while current is not None and current.model_id not in chain:
        chain.append(current.model_id)
        keys, missing = _own(store, current)
        for k in keys:
            seen.setdefault(k.task_id, k)
        unresolved.extend(missing)
        parent = current.parent
        if not parent or parent == "embedded":
            break
        current = _model_row(store, str(parent))
        if current is None and not _is_base(str(parent)):
            unresolved.append(f"parent {parent} has no models row")
    why = None
    if unresolved:
        more = ", ..." if len(unresolved) > 1 else ""
        why = (
            f"{len(unresolved)} of its training sources are unknown to this store "
            f"({unresolved[0]}{more})"
        )
    return ModelLineage(
        model_id=model_id, chain=chain, keys=list(seen.values()), unresolved=unresolved,
        why_incomplete=why,
    )  # fmt: skip


def _is_base(parent: str) -> bool:
    """A parent that is a pretrained model, not one trained here: a GGUF file (the
    embedded model's own path, or a user's) with no models row is a base."""
    return parent.endswith(".gguf")
