"""Held-out evaluation splits, their strata, and the leakage check (docs/methods.md §15).

Kinds of split:

* ``heldout-seeds``: tasks of the clusters the policy was trained on, planned from seeds the
  training data never used. Each such task falls in one of two strata:

  - ``new-entities``: some training task of its cluster walks the same tool path (the tool
    names in order); the task differs in the entities it is about and in its words;
  - ``path-disjoint``: no training task of its cluster walks that tool path;

  ``new-entities`` and ``path-disjoint`` are splits of their own, holding one stratum;
* ``loco`` (leave one cluster out): every task of one cluster is held out, and the training
  data may hold nothing of that cluster.

A task's lineage (``TaskKey``) is what the check compares: its id, its signature (cluster,
tool path and constraints), its tool path, the entities its gold run touches (argument values
and slots) and its goal text. An eval task *leaks* when a training task of its cluster has
its id, its signature, or its tool path with the same goal text or the same entities: each is
the same exercise again (the same checks, the same request for the same calls, or the same
calls on the same things), so it is dropped from the split, never kept and counted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from enum import StrEnum
from typing import Any

from pydantic import Field

from trajsynth.schemas import Blueprint, InputError, Record, stable_hash

__all__ = [
    "LeakageError",
    "Split",
    "SplitKind",
    "Stratum",
    "TaskKey",
    "check_no_leakage",
    "leak",
    "make_split",
    "stratum",
    "task_key",
]


class SplitKind(StrEnum):
    HELDOUT_SEEDS = "heldout-seeds"
    NEW_ENTITIES = "new-entities"
    PATH_DISJOINT = "path-disjoint"
    LOCO = "loco"


class Stratum(StrEnum):
    """Where a held-out task stands against the training tasks."""

    NEW_ENTITIES = "new-entities"
    PATH_DISJOINT = "path-disjoint"
    LOCO = "loco"


class LeakageError(InputError):
    """An eval task, or the same exercise under another id, is in the training data."""


class TaskKey(Record):
    """A task's lineage: what the leakage check compares of it.

    ``path``, ``entities`` and ``goal`` are empty in keys written before they existed; such a
    key is still checked on id and signature."""

    task_id: str
    cluster_id: str
    seed: int
    signature: str
    path: list[str] = Field(default_factory=list)
    entities: list[str] = Field(default_factory=list)
    goal: str = ""


def _scalars(value: Any) -> Iterable[str]:
    if isinstance(value, dict):
        for v in value.values():
            yield from _scalars(v)
    elif isinstance(value, list):
        for v in value:
            yield from _scalars(v)
    elif isinstance(value, str | int | float) and not isinstance(value, bool):
        yield str(value).strip().lower()


def _goal(text: str) -> str:
    """The goal's words, case and punctuation aside, hashed (two phrasings of one request
    differ here; one template filled with one entity does not)."""
    # an email or a file name keeps its dots; a sentence's last word drops its full stop
    words = [w.strip("._-") for w in re.findall(r"[a-z0-9@._-]+", text.lower())]
    words = [w for w in words if w]
    return stable_hash(words, length=16) if words else ""


def task_key(blueprint: Blueprint) -> TaskKey:
    """The task's lineage: id, cluster, seed, signature, tool path, entities and goal."""
    entities = {v for call in blueprint.gold_run.calls for v in _scalars(call.arguments)}
    entities |= set(_scalars(blueprint.slots))
    return TaskKey(
        task_id=blueprint.blueprint_id,
        cluster_id=blueprint.cluster_id,
        seed=blueprint.seed,
        signature=blueprint.signature(),
        path=[call.tool for call in blueprint.tool_path],
        entities=sorted(e for e in entities if e),
        goal=_goal(blueprint.goal),
    )


def leak(key: TaskKey, train: Sequence[TaskKey]) -> str | None:
    """Why ``key`` is the same exercise as a training task, or None when it is new."""
    for t in train:
        if t.task_id == key.task_id:
            return f"task {key.task_id} is in the training data"
        if t.signature == key.signature:
            return f"training task {t.task_id} has the same tool path and constraints"
        if t.cluster_id != key.cluster_id:
            continue
        if not key.path or t.path != key.path:
            continue
        if key.goal and t.goal == key.goal:
            return f"training task {t.task_id} asks the same words for the same tool path"
        if key.entities and t.entities == key.entities:
            return f"training task {t.task_id} calls the same tools on the same entities"
    return None


def stratum(key: TaskKey, train: Sequence[TaskKey]) -> Stratum:
    """``loco`` when no training task is of the key's cluster; else ``new-entities`` when
    one walks its tool path, ``path-disjoint`` when none does."""
    same_cluster = [t for t in train if t.cluster_id == key.cluster_id]
    if not same_cluster:
        return Stratum.LOCO
    if any(t.path == key.path for t in same_cluster):
        return Stratum.NEW_ENTITIES
    return Stratum.PATH_DISJOINT


class Split(Record):
    """The eval tasks of a split, each one's stratum, and the tasks dropped (id -> why)."""

    name: str
    kind: SplitKind
    cluster: str | None = None
    eval_ids: list[str]
    strata: dict[str, Stratum] = Field(default_factory=dict)
    dropped: dict[str, str] = Field(default_factory=dict)


def make_split(
    name: str,
    kind: SplitKind | str,
    candidates: Iterable[TaskKey],
    train: Sequence[TaskKey],
    *,
    cluster: str | None = None,
) -> Split:
    """Pick the eval tasks of a split from ``candidates``, dropping every one that leaks.

    ``heldout-seeds`` keeps candidates of the clusters seen in training whose seed training
    never used (``new-entities`` and ``path-disjoint``: those of that stratum only);
    ``loco`` keeps candidates of ``cluster`` and refuses training data that holds any task
    of it. Raises ``InputError`` when no task is left.
    """
    kind = SplitKind(kind)
    seen_clusters = {t.cluster_id for t in train}
    seen_seeds = {(t.cluster_id, t.seed) for t in train}
    if kind is SplitKind.LOCO:
        if not cluster:
            raise InputError(f"split {name!r}: leave-one-cluster-out needs a cluster")
        if cluster in seen_clusters:
            raise LeakageError(
                f"split {name!r}: the training data holds tasks of the held-out cluster {cluster!r}"
            )
    eval_ids: list[str] = []
    strata: dict[str, Stratum] = {}
    dropped: dict[str, str] = {}
    for key in candidates:
        if kind is SplitKind.LOCO and key.cluster_id != cluster:
            continue
        if kind is not SplitKind.LOCO:
            if key.cluster_id not in seen_clusters:
                continue
            if (key.cluster_id, key.seed) in seen_seeds:
                dropped[key.task_id] = f"seed {key.seed} was used in training"
                continue
        why = leak(key, train)
        if why:
            dropped[key.task_id] = why
            continue
        where = stratum(key, train)
        if kind in (SplitKind.NEW_ENTITIES, SplitKind.PATH_DISJOINT) and where != kind.value:
            continue
        eval_ids.append(key.task_id)
        strata[key.task_id] = where
    if not eval_ids:
        where = f" of cluster {cluster!r}" if cluster else ""
        raise InputError(
            f"split {name!r} ({kind}) has no tasks{where}: {len(dropped)} candidates leaked "
            "into the training data, the rest were out of scope"
        )
    return Split(
        name=name, kind=kind, cluster=cluster, eval_ids=eval_ids, strata=strata, dropped=dropped
    )


def check_no_leakage(eval_tasks: Sequence[TaskKey], train: Sequence[TaskKey]) -> None:
    """Raise ``LeakageError`` naming the first eval task found in the training data."""
    for key in eval_tasks:
        why = leak(key, train)
        if why:
            raise LeakageError(f"eval task {key.task_id} leaks: {why}")
