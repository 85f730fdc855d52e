"""Rows of the ``models`` and ``evals`` tables: what a model is and how it scored.

A model row says where the model is (HF folder and GGUF), its parent (the base it was tuned
from), the data it was trained on (run ids and a hash of the rows), its config and its
training figures, and the lineage of every training row's task (what ``synth eval``'s
leakage check compares). An eval row holds pass@1 and pass@k with their 95% intervals, per cluster
and overall, and every try. Ids are content-derived: the same parent, data and config is the
same model; the same model, split, tasks and k is the same eval.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from trajsynth.schemas import canonical_json, content_id, stable_hash
from trajsynth.schemas.evals import EvalSummary, TryResult

__all__ = ["data_hash", "eval_row", "model_row"]


def data_hash(rows: Sequence[dict[str, Any]]) -> str:
    """A hash of the training rows' messages and tools, in order."""
    return stable_hash([canonical_json([r.get("messages"), r.get("tools")]) for r in rows])


def model_row(
    *,
    path: str,
    parent: str,
    method: str,
    run_ids: Sequence[str],
    data: str,
    n_rows: int,
    n_tokens: int,
    config: dict[str, Any],
    metrics: dict[str, Any],
    gguf_path: str | None = None,
    lineage: Sequence[dict[str, Any]] = (),
    unresolved: Sequence[str] = (),
) -> dict[str, Any]:
    """``lineage``: the ``TaskKey`` (as JSON) of every task behind a training row;
    ``unresolved``: the rows' task ids no blueprint was found for."""
    model_id = content_id(
        "model", {"parent": parent, "data": data, "config": config, "method": method}
    )
    return {
        "model_id": model_id,
        "parent": parent,
        "path": path,
        "gguf_path": gguf_path,
        "method": method,
        "run_ids": list(run_ids),
        "lineage": list(lineage),
        "unresolved": list(unresolved),
        "data_hash": data,
        "n_rows": n_rows,
        "n_tokens": n_tokens,
        "config": config,
        "metrics": metrics,
        "created_at": datetime.now(UTC).replace(tzinfo=None),
    }


def eval_row(
    *,
    policy: str,
    model_id: str | None,
    split: str,
    split_kind: str,
    summary: EvalSummary,
    tries: Sequence[TryResult],
    n_dropped: int = 0,
    strata: dict[str, str] | None = None,
) -> dict[str, Any]:
    task_ids = sorted({t.task_id for t in tries})
    eval_id = content_id(
        "eval", {"policy": policy, "split": split, "tasks": task_ids, "k": summary.k}
    )

    def iv(name: str) -> dict[str, float | None]:
        value = getattr(summary, name)
        return {
            name: value.estimate if value else None,
            f"{name}_low": value.low if value else None,
            f"{name}_high": value.high if value else None,
        }

    return {
        "eval_id": eval_id,
        "model_id": model_id,
        "policy": policy,
        "split": split,
        "split_kind": split_kind,
        "k": summary.k,
        "n_tasks": summary.n_tasks,
        "n_tries": summary.n_tries,
        "n_excluded": summary.n_excluded,
        **iv("pass1"),
        **iv("passk"),
        "clusters": [c.model_dump(mode="json") for c in summary.clusters],
        "n_dropped": n_dropped,
        "strata": dict(strata or {}),
        "tries": [t.model_dump(mode="json") for t in tries],
        "created_at": datetime.now(UTC).replace(tzinfo=None),
    }
