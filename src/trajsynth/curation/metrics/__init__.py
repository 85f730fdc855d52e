"""Curation metrics, registered by decorator (the way inspect-ai registers its metrics).

A metric is one module in this package holding one function under ``@metric``::

    @metric("tokens_per_success", scope=MetricScope.TASK, unit="tokens",
            meaning="tokens of the task's rollouts per rollout that passed")
    def tokens_per_success(task: TaskFacts) -> float | None: ...

The round (``curation/round.py``) imports every module here, computes every registered
metric for each trajectory or task from what the round has already worked out (the facts
below), and returns one ``metric_values`` row per value, so a new metric needs no new column,
no schema field and no change to the round. ``synth stats`` lists the registered metrics.
A metric returns ``None`` where it does not apply; no row is written for it.
"""

from __future__ import annotations

import importlib
import math
import pkgutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Generic, TypeVar

from pydantic import Field

from trajsynth.schemas import (
    CACBreakdown,
    MetricScope,
    MetricValue,
    Record,
    Registry,
    Signals,
    TaskTopology,
    Trajectory,
    TrajectoryTopology,
    Verdict,
)

__all__ = [
    "METRICS",
    "Metric",
    "MetricSpec",
    "TaskFacts",
    "TrajectoryFacts",
    "compute_metrics",
    "metric",
    "registered_metrics",
]


@dataclass(frozen=True)
class TrajectoryFacts:
    """What the round knows about one trajectory when its metrics are computed."""

    trajectory: Trajectory
    verdict: Verdict | None = None
    signals: Signals | None = None
    topology: TrajectoryTopology | None = None
    complexity: CACBreakdown | None = None


@dataclass(frozen=True)
class TaskFacts:
    """What the round knows about one task (its rollouts in this round)."""

    topology: TaskTopology
    trajectories: Sequence[Trajectory] = ()
    verdicts: Mapping[str, Verdict] = field(default_factory=dict)


class MetricSpec(Record):
    """A registered metric as ``synth stats`` and the manifest show it."""

    name: str
    scope: MetricScope
    meaning: str = Field(description="one line: what the value says")
    unit: str = Field(description="what the value counts or measures (a ratio: 'share')")


F = TypeVar("F", bound=Callable[..., "float | None"])
FactsT = TypeVar("FactsT", TrajectoryFacts, TaskFacts)


@dataclass(frozen=True)
class Metric(Generic[FactsT]):
    spec: MetricSpec
    compute: Callable[[FactsT], float | None]


METRICS = Registry[Metric]("curation metric")


def metric(name: str, *, scope: MetricScope, meaning: str, unit: str) -> Callable[[F], F]:
    """Register the decorated function as the metric ``name`` (see the module docstring)."""
    spec = MetricSpec(name=name, scope=scope, meaning=meaning, unit=unit)

    def add(fn: F) -> F:
        METRICS.register(name, scope=scope.value, unit=unit)(Metric(spec, fn))
        return fn

    return add


@cache
def _import_all() -> None:
    # each metric module registers itself on import: importing the package's modules is
    # the whole discovery, so a new metric is a new file and nothing else
    for info in pkgutil.iter_modules(__path__, prefix=f"{__name__}."):
        importlib.import_module(info.name)


def registered_metrics() -> list[MetricSpec]:
    """Every registered metric's spec, sorted by name."""
    _import_all()
    return [METRICS.get(name).spec for name in METRICS.names()]


def _value(m: Metric, facts: TrajectoryFacts | TaskFacts) -> float | None:
    out = m.compute(facts)
    if out is None:
        return None
    value = float(out)
    if not math.isfinite(value):
        raise ValueError(f"metric {m.spec.name} gave {value}")
    return value


def compute_metrics(
    trajectories: Sequence[TrajectoryFacts],
    tasks: Sequence[TaskFacts],
    *,
    run_id: str,
    round: int,
    on_error: Callable[[str, str, Exception], None],
) -> list[MetricValue]:
    """Every registered metric of every trajectory and task. A metric that raises on one
    record (a ``ValueError``, ``TypeError``, ``KeyError``, ``ZeroDivisionError``, ...) gives
    no value for it and is reported to ``on_error(item_id, metric, exc)``; the rest go on."""
    _import_all()
    items: list[tuple[MetricScope, str, TrajectoryFacts | TaskFacts]] = [
        (MetricScope.TRAJECTORY, f.trajectory.trajectory_id, f) for f in trajectories
    ]
    items += [(MetricScope.TASK, f.topology.task_id, f) for f in tasks]
    out: list[MetricValue] = []
    for name in METRICS.names():
        m = METRICS.get(name)
        for scope, item_id, facts in items:
            if scope is not m.spec.scope:
                continue
            try:
                value = _value(m, facts)
            except (ArithmeticError, LookupError, TypeError, ValueError, AttributeError) as exc:
                on_error(item_id, name, exc)
                continue
            if value is not None:
                out.append(
                    MetricValue(
                        value_id=MetricValue.key_of(scope, item_id, name),
                        run_id=run_id,
                        round=round,
                        scope=scope,
                        item_id=item_id,
                        metric=name,
                        value=value,
                    )
                )
    return out
