"""Entropy helpers (docs/methods.md §1.1) and the §5.1 / §5.2 worked examples."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trajsynth.curation.entropy import (
    counts_of,
    effective_number,
    entropy,
    entropy_stats,
    normalized_entropy,
)

TOL = 1e-4


def test_domain_entropy_example_5_1() -> None:
    # retail 50, travel 30, finance 20 over a catalog of 3 domains
    counts = {"retail": 50, "travel": 30, "finance": 20}
    assert entropy(counts) == pytest.approx(1.02965, abs=TOL)
    assert normalized_entropy(counts, 3) == pytest.approx(0.93723, abs=TOL)
    stats = entropy_stats(counts, 3)
    assert (stats.k, stats.n) == (3, 100)
    assert stats.effective == pytest.approx(math.exp(1.02965), abs=1e-3)


def test_mode_entropy_example_5_2_counts_empty_modes_in_k() -> None:
    # K = 4 modes, counts (6, 3, 1, 0) over 10 trajectories
    assert entropy([6, 3, 1, 0]) == pytest.approx(0.89795, abs=TOL)
    assert normalized_entropy([6, 3, 1, 0], 4) == pytest.approx(0.64773, abs=TOL)
    # the same counts without the empty mode still normalise by the declared K = 4
    assert normalized_entropy([6, 3, 1], 4) == pytest.approx(0.64773, abs=TOL)
    assert normalized_entropy([6, 3, 1], 3) > 0.8


def test_declared_support_below_observed_is_raised_not_exceeding_one() -> None:
    assert normalized_entropy([1, 1, 1, 1], 2) == pytest.approx(1.0)
    assert entropy_stats([1, 1, 1, 1], 2).k == 4


def test_degenerate_inputs_have_defined_values() -> None:
    assert entropy([]) == 0.0
    assert entropy([0, 0, 0]) == 0.0
    assert normalized_entropy([], 9) == 0.0
    assert normalized_entropy([10], 1) == 0.0
    assert normalized_entropy([10], 0) == 0.0
    assert effective_number([]) == 1.0
    assert effective_number(np.array([2, 2, 2, 2])) == pytest.approx(4.0)
    with pytest.raises(ValueError):
        entropy([-1, 2])


def test_uniform_is_one_and_concentrated_is_lower() -> None:
    assert normalized_entropy([5] * 7, 7) == pytest.approx(1.0)
    assert normalized_entropy([30, 1, 1, 1, 1, 1, 1], 7) < 0.5


def test_counts_of_drops_unassigned() -> None:
    assert counts_of(["a", None, "b", "a"]) == {"a": 2, "b": 1}
