"""Held-out evaluation splits and the leakage check (docs/methods.md §15, "Evaluation").

Two kinds of split:

* ``heldout-seeds``: tasks of the clusters the policy was trained on, planned with seeds the
  training data never used (the same cells, other data and other words);
* ``loco`` (leave one cluster out): every task of one cluster is held out, and the training
  data may hold nothing of that cluster.

A task leaks when the training data holds the task itself (same blueprint id) or a task with
the same *signature*: its cluster, its tool path (the tools in order) and its constraints
(canonical JSON). A held-out seed that happens to draw the same path and the same checks is
the same exercise, so it is dropped from the split, not kept and counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import StrEnum

from pydantic import Field

from trajsynth.schemas import Blueprint, InputError, Record

__all__ = [
    "LeakageError",
    "Split",
    "SplitKind",
    "TaskKey",
    "check_no_leakage",
    "make_split",
    "task_key",
]


class SplitKind(StrEnum):
    HELDOUT_SEEDS = "heldout-seeds"
    LOCO = "loco"


class LeakageError(InputError):
    """An eval task, or one with the same tool path and constraints, is in the training data."""


class TaskKey(Record):
    """What the leakage check compares of a task."""

    task_id: str
    cluster_id: str
    seed: int
    signature: str


class Split(Record):
    """The eval tasks of a split and the tasks dropped from it (id -> why)."""

    name: str
    kind: SplitKind
    cluster: str | None = None
    eval_ids: list[str]
    dropped: dict[str, str] = Field(default_factory=dict)


def task_key(blueprint: Blueprint) -> TaskKey:
    """The task's id, cluster, seed and signature (cluster + tool path + constraints)."""
    return TaskKey(
        task_id=blueprint.blueprint_id,
        cluster_id=blueprint.cluster_id,
        seed=blueprint.seed,
        signature=blueprint.signature(),
    )


def _leak(key: TaskKey, train: Sequence[TaskKey]) -> str | None:
    for t in train:
        if t.task_id == key.task_id:
            return f"task {key.task_id} is in the training data"
        if t.signature == key.signature:
            return f"training task {t.task_id} has the same tool path and constraints"
    return None


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
    never used; ``loco`` keeps candidates of ``cluster`` and refuses training data that holds
    any task of it. Raises ``InputError`` when no task is left.
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
    dropped: dict[str, str] = {}
    for key in candidates:
        if kind is SplitKind.LOCO and key.cluster_id != cluster:
            continue
        if kind is SplitKind.HELDOUT_SEEDS:
            if key.cluster_id not in seen_clusters:
                continue
            if (key.cluster_id, key.seed) in seen_seeds:
                dropped[key.task_id] = f"seed {key.seed} was used in training"
                continue
        why = _leak(key, train)
        if why:
            dropped[key.task_id] = why
            continue
        eval_ids.append(key.task_id)
    if not eval_ids:
        where = f" of cluster {cluster!r}" if cluster else ""
        raise InputError(
            f"split {name!r} ({kind}) has no tasks{where}: {len(dropped)} candidates leaked "
            "into the training data, the rest were out of scope"
        )
    return Split(name=name, kind=kind, cluster=cluster, eval_ids=eval_ids, dropped=dropped)


def check_no_leakage(eval_tasks: Sequence[TaskKey], train: Sequence[TaskKey]) -> None:
    """Raise ``LeakageError`` naming the first eval task found in the training data."""
    for key in eval_tasks:
        why = _leak(key, train)
        if why:
            raise LeakageError(f"eval task {key.task_id} leaks: {why}")
