"""Held-out evaluation records: one try of a task, pass@k with 95% intervals."""

from __future__ import annotations

from pydantic import Field

from trajsynth.schemas._base import Record

__all__ = [
    "ClusterScore",
    "EvalSummary",
    "Interval",
    "PolicyComparison",
    "TaskTries",
    "TryResult",
]


class Interval(Record):
    """A point estimate with its 95% interval."""

    estimate: float
    low: float
    high: float
    method: str


class TaskTries(Record):
    """One task's tries: ``n`` counted tries of which ``c`` passed."""

    task_id: str
    cluster_id: str = ""
    n: int = Field(ge=0)
    c: int = Field(ge=0)


class TryResult(Record):
    """One try of one task: passed or not, or excluded (not counted) and why."""

    task_id: str
    cluster_id: str
    sample: int
    passed: bool
    score: float
    excluded: bool
    failure_class: str | None = None
    detail: str | None = None
    tokens: int = 0
    trajectory_id: str = ""


class ClusterScore(Record):
    cluster_id: str
    n_tasks: int
    n_tries: int
    n_excluded: int
    pass1: Interval | None = None
    passk: Interval | None = None


class EvalSummary(Record):
    """pass@1 and pass@k with 95% intervals, overall and per cluster."""

    k: int
    n_tasks: int
    n_tries: int
    n_excluded: int
    pass1: Interval | None = None
    passk: Interval | None = None
    clusters: list[ClusterScore] = Field(default_factory=list)


class PolicyComparison(Record):
    """Policy A against policy B on the tasks both tried, paired by task.

    ``pass1_*`` are per-task pass rates averaged over the shared tasks; ``difference`` is
    A minus B with a paired bootstrap interval over tasks; ``p_value`` is the one-sided exact
    sign test that A passes more often than B, over the tasks where their rates differ.
    """

    n_tasks: int
    pass1_a: float
    pass1_b: float
    difference: Interval
    a_better: int
    b_better: int
    ties: int
    p_value: float
