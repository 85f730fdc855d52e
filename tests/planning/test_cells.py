"""Cell draws follow the clusters' configured shares (docs/methods.md §6): every cluster its share
of a round, not only on average over many rounds."""

from __future__ import annotations

import random
import statistics
from collections import Counter

import pytest

from trajsynth.mcp_servers.registry import get_cluster
from trajsynth.planning.cells import cluster_shares, sample_cells

BUNDLED = [get_cluster(name) for name in ("calendar", "code", "shop", "travel")]


def _counts(n: int, seed: int, weights: dict | None = None) -> Counter[str]:
    return Counter(c.cluster_id for c in sample_cells(BUNDLED, n, random.Random(seed), weights))


def test_twenty_cells_give_each_bundled_cluster_five_for_every_seed() -> None:
    # independent draws left shop with 0 of 20 for `synth run`'s seed 0 (and 3 seeds in 300)
    for seed in range(300):
        assert _counts(20, seed * 7_919) == {c.cluster_id: 5 for c in BUNDLED}, seed


@pytest.mark.parametrize("n", [6, 10, 13])
def test_a_share_that_does_not_divide_is_floor_or_ceil_and_unbiased(n: int) -> None:
    share = n / 4
    per_seed = [_counts(n, seed) for seed in range(400)]
    for name in ("calendar", "code", "shop", "travel"):
        counts = [c[name] for c in per_seed]
        assert set(counts) <= {int(share), int(share) + 1}
        assert statistics.fmean(counts) == pytest.approx(share, abs=0.12)


def test_configured_weights_set_the_shares() -> None:
    weights = {"domain": {"retail": 2.0, "travel": 1.0, "code": 1.0, "productivity": 0.0}}
    shares = cluster_shares(BUNDLED, weights)
    assert shares == pytest.approx({"shop": 0.5, "travel": 0.25, "code": 0.25, "calendar": 0.0})
    for seed in range(50):
        assert _counts(20, seed, weights) == {"shop": 10, "travel": 5, "code": 5}


def test_draws_are_deterministic_and_vary_with_the_seed() -> None:
    assert sample_cells(BUNDLED, 20, random.Random(3)) == sample_cells(
        BUNDLED, 20, random.Random(3)
    )
    assert sample_cells(BUNDLED, 20, random.Random(3)) != sample_cells(
        BUNDLED, 20, random.Random(4)
    )
