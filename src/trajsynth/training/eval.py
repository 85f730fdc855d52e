"""pass@1 and pass@k of a held-out eval, per cluster and overall (docs/methods.md §15).

``summarize`` takes the tries ``planning.heldout.evaluate`` recorded: excluded tries (``infra``,
``simulator``) are left out; pass@1 is the mean over tasks of each task's pass rate and
pass@k the mean of the unbiased estimator, each with a bootstrap interval over tasks
(``training.passk``). Tasks, not tries, are the independent units: the tries of one task
share its difficulty, so a Wilson interval over pooled tries would be too narrow.

``compare`` says whether one policy beats another on the same tasks. Two pass@1 intervals
that overlap do not mean "no difference", and pooled tries are not independent (the tries of
one task share its difficulty), so the comparison is paired by task: the difference of
per-task pass rates with a bootstrap interval over tasks, and an exact sign test over the
tasks where the two policies' rates differ.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from scipy.stats import binomtest

from trajsynth.schemas.evals import (
    ClusterScore,
    EvalSummary,
    PolicyComparison,
    TaskTries,
    TryResult,
)
from trajsynth.training.passk import bootstrap_mean, bootstrap_pass_at_k

__all__ = ["ClusterScore", "EvalSummary", "PolicyComparison", "TryResult", "compare", "summarize"]


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
    counted = [t for t in tasks if t.n]
    return {
        "n_tasks": len({r.task_id for r in results}),
        "n_tries": len(results),
        "n_excluded": sum(r.excluded for r in results),
        "pass1": (
            bootstrap_mean([t.c / t.n for t in counted], seed=seed, method="bootstrap over tasks")
            if counted
            else None
        ),
        "passk": (
            bootstrap_pass_at_k(tasks, k, seed=seed) if any(t.n >= k for t in tasks) else None
        ),
    }


def summarize(results: Sequence[TryResult], k: int, *, seed: int = 0) -> EvalSummary:
    """pass@1 and pass@k (unbiased), each with a bootstrap interval over tasks, overall and
    per cluster."""
    by_cluster: dict[str, list[TryResult]] = defaultdict(list)
    for r in results:
        by_cluster[r.cluster_id].append(r)
    clusters = [
        ClusterScore(cluster_id=cid, **_score(by_cluster[cid], k, seed))
        for cid in sorted(by_cluster)
    ]
    return EvalSummary(k=k, clusters=clusters, **_score(results, k, seed))


def _rates(results: Sequence[TryResult]) -> dict[str, float]:
    """Each task's pass rate over its counted tries; tasks with none are left out."""
    return {t.task_id: t.c / t.n for t in _tries(results) if t.n}


def compare(
    a: Sequence[TryResult],
    b: Sequence[TryResult],
    *,
    resamples: int = 2000,
    seed: int = 0,
) -> PolicyComparison:
    """Policy A's tries against policy B's, paired by task (the tasks both have counted
    tries of). Raises ``ValueError`` when they share none.

    >>> def tries(task, passed):
    ...     return [TryResult(task_id=task, cluster_id="c", sample=i, passed=p, score=float(p),
    ...                       excluded=False) for i, p in enumerate(passed)]
    >>> a = [*tries("t1", [1, 1]), *tries("t2", [1, 0]), *tries("t3", [0, 0])]
    >>> b = [*tries("t1", [0, 0]), *tries("t2", [0, 0]), *tries("t3", [0, 0])]
    >>> c = compare(a, b)
    >>> (c.n_tasks, c.pass1_a, c.pass1_b, c.a_better, c.b_better, c.ties, c.p_value)
    (3, 0.5, 0.0, 2, 0, 1, 0.25)
    """
    rates_a, rates_b = _rates(a), _rates(b)
    shared = sorted(rates_a.keys() & rates_b.keys())
    if not shared:
        raise ValueError("the two evals share no task with counted tries: nothing to pair")
    diffs = [rates_a[t] - rates_b[t] for t in shared]
    a_better = sum(d > 0 for d in diffs)
    b_better = sum(d < 0 for d in diffs)
    m = len(diffs)
    difference = bootstrap_mean(
        diffs, resamples=resamples, seed=seed, method="paired bootstrap over tasks"
    )
    differing = a_better + b_better
    p_value = (
        binomtest(a_better, differing, 0.5, alternative="greater").pvalue if differing else 1.0
    )
    return PolicyComparison(
        n_tasks=m,
        pass1_a=sum(rates_a[t] for t in shared) / m,
        pass1_b=sum(rates_b[t] for t in shared) / m,
        difference=difference,
        a_better=a_better,
        b_better=b_better,
        ties=m - differing,
        p_value=float(p_value),
    )
