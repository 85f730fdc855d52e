"""Share of a trajectory's failing tool calls that it later recovered from (docs/methods.md §8's
e(τ) over its errors): how well the policy handles its own mistakes, per trajectory."""

from __future__ import annotations

from trajsynth.curation.metrics import TrajectoryFacts, metric
from trajsynth.schemas import MetricScope


@metric(
    "error_recovery_rate",
    scope=MetricScope.TRAJECTORY,
    meaning="failing tool calls later recovered over all failing tool calls (NULL: no error)",
    unit="share",
)
def error_recovery_rate(trajectory: TrajectoryFacts) -> float | None:
    topo = trajectory.topology
    if topo is None or not topo.included or topo.n_errors == 0:
        return None
    return topo.n_recovered / topo.n_errors
