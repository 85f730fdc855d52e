"""Tokens per verified rollout of a task: the cost figure docs/design.md says decides whether a
change paid off, per task, so SQL can find the tasks that cost the most per success."""

from __future__ import annotations

from trajsynth.curation.metrics import TaskFacts, metric
from trajsynth.schemas import MetricScope


@metric(
    "tokens_per_success",
    scope=MetricScope.TASK,
    meaning="tokens of the task's counted rollouts (all roles) per rollout that passed",
    unit="tokens",
)
def tokens_per_success(task: TaskFacts) -> float | None:
    counted = [
        t
        for t in task.trajectories
        if (v := task.verdicts.get(t.trajectory_id)) is not None and not v.excluded
    ]
    passed = sum(1 for t in counted if task.verdicts[t.trajectory_id].passed)
    if not passed:
        return None  # no success: the cost per success is undefined, not infinite
    return sum(t.total_tokens for t in counted) / passed
