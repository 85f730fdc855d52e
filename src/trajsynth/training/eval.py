"""pass@1 and pass@k of a held-out eval, per cluster and overall (METHODS.md §15).

``summarize`` takes the tries ``agents.heldout.evaluate`` recorded: excluded tries (``infra``,
``simulator``) are left out; pass@1 gets a Wilson interval (all counted tries pooled) and
pass@k (the unbiased estimator) a bootstrap interval over tasks (``training.passk``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from trajsynth.schemas.evals import ClusterScore, EvalSummary, Interval, TaskTries, TryResult
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


def _score(
    results: Sequence[TryResult], k: int, seed: int
) -> tuple[Interval | None, Interval | None]:
    tasks = _tries(results)
    n = sum(t.n for t in tasks)
    c = sum(t.c for t in tasks)
    pass1 = wilson(c, n) if n else None
    passk = bootstrap_pass_at_k(tasks, k, seed=seed) if any(t.n >= k for t in tasks) else None
    return pass1, passk


def summarize(results: Sequence[TryResult], k: int, *, seed: int = 0) -> EvalSummary:
    """pass@1 (Wilson) and pass@k (unbiased, bootstrap over tasks), overall and per cluster."""
    by_cluster: dict[str, list[TryResult]] = defaultdict(list)
    for r in results:
        by_cluster[r.cluster_id].append(r)
    clusters = []
    for cid in sorted(by_cluster):
        rs = by_cluster[cid]
        p1, pk = _score(rs, k, seed)
        clusters.append(
            ClusterScore(
                cluster_id=cid,
                n_tasks=len({r.task_id for r in rs}),
                n_tries=len(rs),
                n_excluded=sum(r.excluded for r in rs),
                pass1=p1,
                passk=pk,
            )
        )
    p1, pk = _score(results, k, seed)
    return EvalSummary(
        k=k,
        n_tasks=len({r.task_id for r in results}),
        n_tries=len(results),
        n_excluded=sum(r.excluded for r in results),
        pass1=p1,
        passk=pk,
        clusters=clusters,
    )
