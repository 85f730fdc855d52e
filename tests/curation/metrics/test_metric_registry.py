"""The metric registry: ``@metric`` registers, the round's ``compute_metrics`` computes every
registered metric per trajectory or task, and a metric that raises skips only that item."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fakes.trajectories import call, make_trajectory

from trajsynth.curation.metrics import (
    METRICS,
    TaskFacts,
    TrajectoryFacts,
    compute_metrics,
    metric,
    registered_metrics,
)
from trajsynth.schemas import InputError, MetricScope, TaskTopology

GOOD = call("get_order", {"order_id": "W1"}, {"order_id": "W1", "status": "delivered"})


def test_the_bundled_metrics_are_found_by_importing_the_package() -> None:
    specs = {s.name: s for s in registered_metrics()}
    assert specs["tokens_per_success"].scope is MetricScope.TASK
    assert specs["error_recovery_rate"].scope is MetricScope.TRAJECTORY
    assert all(s.meaning and s.unit for s in specs.values())


def test_a_name_registers_once_and_an_unknown_name_lists_the_known() -> None:
    registered_metrics()
    with pytest.raises(ValueError, match="already registered"):
        metric("tokens_per_success", scope=MetricScope.TASK, meaning="m", unit="u")(lambda f: 0.0)
    with pytest.raises(InputError, match="tokens_per_success"):
        METRICS.get("no_such_metric")


@pytest.fixture
def probe_metrics() -> Iterator[list[str]]:
    """Two metrics registered for one test, removed after it."""

    @metric("_probe_steps", scope=MetricScope.TRAJECTORY, meaning="messages", unit="messages")
    def steps(t: TrajectoryFacts) -> float | None:
        if t.trajectory.trajectory_id == "bad":
            raise ZeroDivisionError("scripted")
        return len(t.trajectory.messages)

    @metric("_probe_rollouts", scope=MetricScope.TASK, meaning="rollouts", unit="rollouts")
    def rollouts(task: TaskFacts) -> float | None:
        return len(task.trajectories) or None

    names = ["_probe_steps", "_probe_rollouts"]
    yield names
    for name in names:
        METRICS._items.pop(name)
        METRICS._params.pop(name)


def test_every_registered_metric_is_computed_per_item(probe_metrics: list[str]) -> None:
    ok, bad = make_trajectory("ok", [[GOOD]], final="Done."), make_trajectory("bad", [[GOOD]])
    failed: list[tuple[str, str]] = []
    values = compute_metrics(
        [TrajectoryFacts(trajectory=ok), TrajectoryFacts(trajectory=bad)],
        [
            TaskFacts(topology=TaskTopology(task_id="t1"), trajectories=[ok, bad]),
            TaskFacts(topology=TaskTopology(task_id="t2")),  # None: no row
        ],
        run_id="run",
        round=2,
        on_error=lambda item, name, exc: failed.append((item, name)),
    )
    by = {(v.metric, v.item_id): v for v in values if v.metric in probe_metrics}
    assert by[("_probe_steps", "ok")].value == float(len(ok.messages))
    assert ("_probe_steps", "bad") not in by and failed == [("bad", "_probe_steps")]
    assert by[("_probe_rollouts", "t1")].value == 2.0 and ("_probe_rollouts", "t2") not in by
    row = by[("_probe_rollouts", "t1")]
    assert (row.run_id, row.round, row.scope, row.value_id) == (
        "run", 2, MetricScope.TASK, "task:t1:_probe_rollouts"
    )  # fmt: skip


def test_no_value_for_a_task_with_no_verdicts() -> None:
    t = make_trajectory("a", [[GOOD]])
    values = compute_metrics(
        [],
        [TaskFacts(topology=TaskTopology(task_id="t"), trajectories=[t], verdicts={})],
        run_id="r",
        round=0,
        on_error=lambda *a: pytest.fail(f"unexpected failure {a}"),
    )
    assert [v for v in values if v.metric == "tokens_per_success"] == []
