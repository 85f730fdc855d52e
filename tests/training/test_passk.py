"""pass@k (the unbiased estimator) and its 95% intervals."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from trajsynth.schemas.evals import TaskTries
from trajsynth.training.passk import (
    bootstrap_pass_at_k,
    pass_at_k,
    split_pass_at_k,
    wilson,
)


@pytest.mark.parametrize(("n", "c", "k"), [(5, 2, 2), (8, 3, 4), (10, 1, 3), (6, 0, 2), (6, 6, 6)])
def test_pass_at_k_equals_the_exact_count_over_all_k_subsets(n: int, c: int, k: int) -> None:
    tries = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    exact = sum(any(tries[i] for i in s) for s in subsets) / len(subsets)
    assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)
    assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k))


def test_pass_at_k_is_unbiased_over_simulated_tasks() -> None:
    # draw n tries of a task whose true pass probability is p; the mean estimate of pass@k
    # matches 1 - (1 - p)^k, where the naive "any pass among the first k" would also be
    # unbiased but pass@1 from n tries pooled must equal the plain success rate
    rng = random.Random(3)
    p, n, k = 0.3, 6, 3
    estimates = [pass_at_k(n, sum(rng.random() < p for _ in range(n)), k) for _ in range(20000)]
    assert sum(estimates) / len(estimates) == pytest.approx(1 - (1 - p) ** k, abs=0.01)
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)


def test_pass_at_k_refuses_impossible_counts() -> None:
    with pytest.raises(ValueError, match="at least 4 tries"):
        pass_at_k(3, 1, 4)
    with pytest.raises(ValueError, match="within 0..n"):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError, match="k must be"):
        pass_at_k(3, 1, 0)


def test_wilson_matches_the_textbook_values_and_stays_in_bounds() -> None:
    # Wilson 95% for 8/10: (0.4902, 0.9433); for 0/10 the upper bound is 0.2775
    iv = wilson(8, 10)
    assert (round(iv.low, 4), round(iv.high, 4)) == (0.4902, 0.9433)
    zero, full = wilson(0, 10), wilson(10, 10)
    assert zero.low == 0.0 and zero.high == pytest.approx(0.2775, abs=1e-4)
    assert full.high == 1.0 and full.low == pytest.approx(1 - 0.2775, abs=1e-4)
    with pytest.raises(ValueError, match="at least one counted try"):
        wilson(0, 0)


def test_bootstrap_interval_brackets_the_split_estimate_and_is_seeded() -> None:
    tasks = [TaskTries(task_id=f"t{i}", n=4, c=c) for i, c in enumerate([0, 1, 4, 2, 0, 3, 0, 1])]
    iv = bootstrap_pass_at_k(tasks, 2, seed=1)
    assert iv.estimate == pytest.approx(split_pass_at_k(tasks, 2))
    assert 0.0 <= iv.low < iv.estimate < iv.high <= 1.0
    assert iv == bootstrap_pass_at_k(tasks, 2, seed=1)
    one = [TaskTries(task_id="t", n=4, c=4)]
    assert bootstrap_pass_at_k(one, 1).low == 1.0
    with pytest.raises(ValueError, match="no task has 5 counted tries"):
        bootstrap_pass_at_k(tasks, 5)
