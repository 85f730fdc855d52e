"""Early stopping of rollouts during GRPO, critic-free ESPO variant (docs/methods.md §11).

``rho_t = ln p_max,t - ln p(a_t)`` is a token's surrogate regret, ``C_j`` its sum over the
assistant turns so far, ``q(j)`` the 95th percentile of ``C_j`` over successful rollouts of the
same cluster (last 2 rounds, at least 30 of them, else stopping is off). A rollout stops after
turn ``j`` when ``C_j > (1 + m)·q(j)`` for ``P`` consecutive turns and ``j >= j_min``. A stopped
rollout keeps its place in the group as a failure (reward ``r_fail``); tokens saved are
estimated from the group's mean length.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "EarlyStopRule",
    "ReferenceCurves",
    "StopDecision",
    "token_regret",
    "tokens_saved",
]


def token_regret(logits: Sequence[float] | np.ndarray, sampled: int) -> tuple[float, float, float]:
    """``(rho, H, mu)`` of one token from its logits (docs/methods.md §11, token example).

    >>> [round(v, 5) for v in token_regret([2.0, 1.0, 0.0], 1)]
    [1.0, 0.8324, 0.42479]
    """
    z = np.asarray(logits, dtype=float)
    logp = z - z.max()
    logp = logp - np.log(np.exp(logp).sum())
    p = np.exp(logp)
    rho = float(logp.max() - logp[sampled])
    entropy = float(-(p * logp).sum())
    return rho, entropy, entropy + float(logp.max())


@dataclass(frozen=True)
class StopDecision:
    stopped: bool
    stop_turn: int | None  # 1-based turn after which the rollout stops
    thresholds: tuple[float, ...]


@dataclass(frozen=True)
class EarlyStopRule:
    """The turn rule of docs/methods.md §11 (defaults ``m = 0.2, P = 2, j_min = 2``).

    >>> EarlyStopRule().decide([2.5, 7.0, 10.1], [3.0, 5.5, 8.0, 10.0]).stop_turn
    3
    """

    margin: float = 0.2
    patience: int = 2
    j_min: int = 2

    def decide(self, cumulative: Sequence[float], reference: Sequence[float]) -> StopDecision:
        """Walk the turns of one rollout: ``cumulative[j-1] = C_j``, ``reference[j-1] = q(j)``.

        Turns beyond the reference curve are never stopped (no successful rollout got there).
        """
        thresholds = tuple((1.0 + self.margin) * q for q in reference)
        run = 0
        for j, c in enumerate(cumulative, start=1):
            if j > len(thresholds):
                break
            run = run + 1 if c > thresholds[j - 1] else 0
            if run >= self.patience and j >= self.j_min:
                return StopDecision(True, j, thresholds)
        return StopDecision(False, None, thresholds)


@dataclass
class ReferenceCurves:
    """``q(j)`` per cluster from the ``C_j`` curves of successful rollouts (last ``rounds``)."""

    min_successes: int = 30
    percentile: float = 95.0
    rounds: int = 2
    _curves: dict[str, deque[list[list[float]]]] = field(default_factory=lambda: defaultdict(deque))

    def add_round(self, cluster_id: str, successful_curves: Sequence[Sequence[float]]) -> None:
        rounds = self._curves[cluster_id]
        rounds.append([list(c) for c in successful_curves])
        while len(rounds) > self.rounds:
            rounds.popleft()

    def reference(self, cluster_id: str) -> list[float] | None:
        """``q(j)`` for j = 1.. (while at least ``min_successes`` curves reach turn j), or None
        when the cluster has too few successful rollouts (early stopping off there)."""
        curves = [c for rnd in self._curves.get(cluster_id, ()) for c in rnd]
        if len(curves) < self.min_successes:
            return None
        out = []
        for j in range(max((len(c) for c in curves), default=0)):
            values = [c[j] for c in curves if len(c) > j]
            if len(values) < self.min_successes:
                break
            out.append(float(np.percentile(values, self.percentile)))
        return out or None


def tokens_saved(stopped_lengths: Sequence[int], group_lengths: Sequence[int]) -> int:
    """Tokens early stopping saved: per stopped rollout, the group's mean length (over the
    rollouts that ran to the end) minus what it had generated, never below 0."""
    if not stopped_lengths or not group_lengths:
        return 0
    mean = float(np.mean(group_lengths))
    return int(round(sum(max(0.0, mean - n) for n in stopped_lengths)))
