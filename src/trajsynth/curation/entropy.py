"""Entropy over a declared support (docs/methods.md §1.1).

``H(p) = -sum_i p_i ln p_i`` with ``p_i = c_i / sum c`` (nats, ``0 ln 0 = 0``), and
``H_norm(p; K) = H(p) / ln K`` when ``K >= 2`` else 0. ``K`` is the size of the DECLARED
support (domains in the catalog, modes in the frozen codebook), not the number of categories
observed, so a dataset that never touches half the catalog scores below 1. ``exp(H)`` is the
effective number of categories reported in the dataset card.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from trajsynth.schemas import EntropyStats

__all__ = ["counts_of", "effective_number", "entropy", "entropy_stats", "normalized_entropy"]

log = logging.getLogger(__name__)

# the keys are labels of any kind: only the values count
Counts = Mapping[Any, float] | Sequence[float] | np.ndarray


def _counts_array(counts: Counts) -> np.ndarray:
    values = counts.values() if isinstance(counts, Mapping) else counts
    arr = np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=float)
    arr = arr[np.isfinite(arr)]
    if (arr < 0).any():
        raise ValueError("counts must be non-negative")
    return arr


def counts_of(labels: Iterable[Hashable | None]) -> Counter[Hashable]:
    """Counts of the labels, ``None`` (unassigned, unknown) left out.

    >>> dict(counts_of(["a", "b", "a", None]))
    {'a': 2, 'b': 1}
    """
    return Counter(label for label in labels if label is not None)


def entropy(counts: Counts) -> float:
    """Shannon entropy in nats of the distribution the counts give (docs/methods.md §1.1).

    Empty or all-zero counts give 0.

    >>> round(entropy([50, 30, 20]), 5)
    1.02965
    >>> entropy([]), entropy([0, 0]), entropy([7])
    (0.0, 0.0, 0.0)
    """
    import scipy.stats  # here: importing it costs 0.7 s, which every `synth` command paid

    arr = _counts_array(counts)
    if arr.sum() <= 0:
        return 0.0
    return max(0.0, float(scipy.stats.entropy(arr)))  # normalises the counts; natural log


def normalized_entropy(counts: Counts, k: int) -> float:
    """``H / ln K`` over a declared support of ``k`` categories; 0 when ``k < 2`` (§1.1).

    If more categories were observed than ``k`` declares, the declared size is too small (a
    label outside the catalog): ``K`` is raised to the observed number and a warning logged,
    so the value stays within [0, 1].

    >>> round(normalized_entropy([50, 30, 20], 3), 5)
    0.93723
    >>> round(normalized_entropy([6, 3, 1, 0], 4), 5)
    0.64773
    >>> normalized_entropy([5], 1)
    0.0
    """
    arr = _counts_array(counts)
    observed = int((arr > 0).sum())
    if observed > k:
        log.warning("declared support K=%d is smaller than the %d categories seen", k, observed)
        k = observed
    if k < 2:
        return 0.0
    return min(1.0, entropy(arr) / math.log(k))


def effective_number(counts: Counts) -> float:
    """``exp(H)``: the effective number of categories (docs/methods.md §1.1).

    >>> effective_number([1, 1, 1, 1])
    4.0
    """
    return float(round(math.exp(entropy(counts)), 12))


def entropy_stats(counts: Counts, k: int) -> EntropyStats:
    """``H``, ``H_norm`` over the declared ``k``, ``exp(H)`` and the count, in one record.

    >>> s = entropy_stats({"retail": 50, "travel": 30, "finance": 20}, 3)
    >>> round(s.h, 5), round(s.h_norm, 5), s.k, s.n
    (1.02965, 0.93723, 3, 100)
    """
    arr = _counts_array(counts)
    h = entropy(arr)
    return EntropyStats(
        h=h,
        h_norm=normalized_entropy(arr, k),
        k=max(k, int((arr > 0).sum())),
        effective=float(round(math.exp(h), 12)),
        n=int(round(arr.sum())),
    )
