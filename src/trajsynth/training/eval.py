"""pass@1 and pass@k of a held-out eval, per cluster and overall (METHODS.md §15).

``summarize`` takes the tries ``agents.heldout.evaluate`` recorded: excluded tries (``infra``,
``simulator``) are left out; pass@1 gets a Wilson interval (all counted tries pooled) and
pass@k (the unbiased estimator) a bootstrap interval over tasks (``training.passk``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from trajsynth.schemas.evals import ClusterScore, EvalSummary, TaskTries, TryResult
from trajsynth.training.passk import bootstrap_pass_at_k, wilson

__all__ = ["ClusterScore", "EvalSummary", "TryResult", "summarize"]


def _tries(results: Sequence[TryResult]) -> list[TaskTries]:
    by_task: dict[str, list[TryResult]] = defaultdict(list)
    for r in results:
        by_task[r.task_id].append(r)
    return [
        TaskTries(
            task_id=tid,
            cluster_id=rs[0].cluster_id,
            n=sum(1 for r in rs if not r.excluded),
            c=sum(1 for r in rs if r.passed and not r.excluded),
        )
        for tid, rs in by_task.items()
    ]


def _score(results: Sequence[TryResult], k: int, seed: int) -> dict[str, Any]:
    """The figures ``ClusterScore`` and ``EvalSummary`` share: counts, pass@1 and pass@k."""
    tasks = _tries(results)
    n = sum(t.n for t in tasks)
    c = sum(t.c for t in tasks)
    return {
        "n_tasks": len({r.task_id for r in results}),
        "n_tries": len(results),
        "n_excluded": sum(r.excluded for r in results),
        "pass1": wilson(c, n) if n else None,
        "passk": (
            bootstrap_pass_at_k(tasks, k, seed=seed) if any(t.n >= k for t in tasks) else None
        ),
    }


def summarize(results: Sequence[TryResult], k: int, *, seed: int = 0) -> EvalSummary:
    """pass@1 (Wilson) and pass@k (unbiased, bootstrap over tasks), overall and per cluster."""
    by_cluster: dict[str, list[TryResult]] = defaultdict(list)
    for r in results:
        by_cluster[r.cluster_id].append(r)
    clusters = [
        ClusterScore(cluster_id=cid, **_score(by_cluster[cid], k, seed))
        for cid in sorted(by_cluster)
    ]
    return EvalSummary(k=k, clusters=clusters, **_score(results, k, seed))
