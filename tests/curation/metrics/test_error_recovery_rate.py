from __future__ import annotations

from fakes.trajectories import call, make_trajectory

from trajsynth.curation.metrics import TrajectoryFacts
from trajsynth.curation.metrics.error_recovery_rate import error_recovery_rate
from trajsynth.schemas import TrajectoryTopology

GOOD = call("get_order", {"order_id": "W1"}, {"order_id": "W1", "status": "delivered"})


def _facts(**topo: object) -> TrajectoryFacts:
    return TrajectoryFacts(
        trajectory=make_trajectory("a", [[GOOD]]),
        topology=TrajectoryTopology(trajectory_id="a", task_id="t", **topo),
    )


def test_recovered_errors_over_all_errors() -> None:
    assert error_recovery_rate(_facts(n_errors=4, n_recovered=1)) == 0.25


def test_no_error_or_no_topology_has_no_value() -> None:
    assert error_recovery_rate(_facts(n_errors=0)) is None
    assert error_recovery_rate(_facts(n_errors=2, included=False)) is None
    assert error_recovery_rate(TrajectoryFacts(trajectory=make_trajectory("a", [[GOOD]]))) is None
