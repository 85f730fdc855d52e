"""pass@k and its 95% intervals (methods.md §15, "Evaluation"; the estimator is Chen et al. 2021).

Every held-out task is tried ``n`` times and ``c`` of the tries pass the verifier. For one task
the unbiased estimate of pass@k (the chance that at least one of ``k`` tries drawn without
replacement from the ``n`` passes) is ``1 - C(n - c, k) / C(n, k)``, computed as a running
product so it never overflows. A split's pass@k is the mean over its tasks.

Intervals (two kinds, both 95%):

* ``wilson`` for pass@1 over all tries pooled (``c`` successes in ``N`` Bernoulli tries); it
  stays inside [0, 1] and is not degenerate at 0 or N successes, which is where a 135M
  policy lives.
* ``bootstrap`` for pass@k of a split: tasks are resampled with replacement (tries within a
  task are not independent of each other, tasks are), percentile interval, seeded.

Tries that the verifier could not judge (``infra`` and ``simulator`` failures) are excluded
before any of this (docs/design.md: never counted against the policy); the caller passes ``n`` as
the counted tries only.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from trajsynth.schemas.evals import Interval, TaskTries

__all__ = [
    "Interval",
    "TaskTries",
    "bootstrap_mean",
    "bootstrap_pass_at_k",
    "pass_at_k",
    "split_pass_at_k",
    "wilson",
]

Z95 = 1.959963984540054


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task with ``c`` of ``n`` tries passing (Chen et al. 2021).

    >>> pass_at_k(4, 0, 1), pass_at_k(4, 4, 1), pass_at_k(4, 1, 1), pass_at_k(4, 1, 4)
    (0.0, 1.0, 0.25, 1.0)
    >>> round(pass_at_k(5, 2, 2), 3)
    0.7
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if n < k:
        raise ValueError(f"pass@{k} needs at least {k} tries per task, got {n}")
    if not 0 <= c <= n:
        raise ValueError(f"passed tries c={c} must be within 0..n={n}")
    if n - c < k:
        return 1.0
    # 1 - prod_{i=n-c+1}^{n} (1 - k / i): C(n-c, k) / C(n, k) without big binomials
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


def wilson(successes: int, trials: int, z: float = Z95) -> Interval:
    """Wilson score interval of a proportion (95% by default).

    >>> iv = wilson(0, 10); (iv.estimate, iv.low, round(iv.high, 3))
    (0.0, 0.0, 0.278)
    """
    if trials <= 0:
        raise ValueError("an interval needs at least one counted try")
    if not 0 <= successes <= trials:
        raise ValueError(f"successes={successes} must be within 0..trials={trials}")
    p = successes / trials
    denom = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    # at 0 or N successes the bound is exactly 0 or 1 (rounding would leave 1e-16 off)
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return Interval(estimate=p, low=low, high=high, method="wilson")


def split_pass_at_k(tasks: Sequence[TaskTries], k: int) -> float:
    """Mean pass@k over the tasks that have at least ``k`` counted tries."""
    usable = [t for t in tasks if t.n >= k]
    if not usable:
        raise ValueError(f"no task has {k} counted tries")
    return sum(pass_at_k(t.n, t.c, k) for t in usable) / len(usable)


def bootstrap_pass_at_k(
    tasks: Sequence[TaskTries], k: int, *, resamples: int = 2000, seed: int = 0
) -> Interval:
    """pass@k of a split with a 95% percentile bootstrap interval over tasks (seeded)."""
    usable = [t for t in tasks if t.n >= k]
    if not usable:
        raise ValueError(f"no task has {k} counted tries")
    values = [pass_at_k(t.n, t.c, k) for t in usable]
    return bootstrap_mean(values, resamples=resamples, seed=seed)


def bootstrap_mean(
    values: Sequence[float], *, resamples: int = 2000, seed: int = 0, method: str = "bootstrap"
) -> Interval:
    """The mean of per-task ``values`` with a 95% percentile bootstrap interval (seeded)."""
    rng = random.Random(seed)
    m = len(values)
    means = sorted(sum(values[rng.randrange(m)] for _ in range(m)) / m for _ in range(resamples))
    lo = means[int(0.025 * (resamples - 1))]
    hi = means[int(math.ceil(0.975 * (resamples - 1)))]
    return Interval(estimate=sum(values) / m, low=lo, high=hi, method=method)
