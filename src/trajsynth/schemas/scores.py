"""Curation scores of one trajectory (docs/methods.md §5, §8): the one definition of the
``scores`` table's columns. The round builds a ``Scores`` per trajectory and the store's
``ScoreRow`` is this model under a table name, so a column is declared here only."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import Field

from trajsynth.schemas._base import Record

__all__ = ["MetricScope", "MetricValue", "Scores"]


def _c(meaning: str) -> Any:
    # every column but the key may be NULL: a row written by an older release lacks it
    return Field(default=None, description=meaning)


class Scores(Record):
    trajectory_id: str = Field(description="the trajectory")
    mode: str | None = _c("reasoning mode (codebook cluster)")
    mode_codebook: str | None = _c("the codebook that assigned it")
    action_complexity: float | None = _c("cumulative action complexity (docs/methods.md §5)")
    n_steps: int | None = _c("tool-calling steps")
    n_distinct_tools: int | None = _c("distinct tools called")
    max_dep_depth: int | None = _c("deepest dependency chain along the path")
    n_bound_args: int | None = _c("arguments fed from earlier outputs")
    n_conditional: int | None = _c("steps that depend on a condition")
    signature: str | None = _c("hash of the strategy (quotient-graph path)")
    recovered: bool | None = _c("passed an error and still succeeded")
    efficiency: float | None = _c("shortest success length over its own (successes only)")
    sft_score: float | None = _c("the SFT selection score")
    duplicate_of: str | None = _c("the near-duplicate it repeats (NULL: none)")
    run_id: str | None = _c("the run")
    round: int | None = _c("the round")
    mode_label: str | None = _c("the mode's majority label")
    mode_cosine: float | None = _c("cosine to the mode's centre")
    mode_reason: str | None = _c("how the mode was assigned")
    rule_label: str | None = _c("the rule-based reasoning label")
    accepted: bool | None = _c("verified and counted in the dataset")
    domain: str | None = _c("the cluster's domain")
    digest_key: str | None = _c("key of the text embedded for the mode")


class MetricScope(StrEnum):
    TRAJECTORY = "trajectory"
    TASK = "task"


class MetricValue(Record):
    """One registered curation metric's value for one trajectory or task: the
    ``metric_values`` table, long so that a new metric needs no new column."""

    value_id: str = Field(description="the scope, the item and the metric's name")
    run_id: str | None = _c("the run")
    round: int | None = _c("the round")
    scope: MetricScope | None = _c("trajectory or task")
    item_id: str | None = _c("the trajectory id or task (blueprint) id")
    metric: str | None = _c("the metric's registered name (`synth stats` lists them)")
    value: float | None = _c("the metric's value, in the metric's unit")

    @staticmethod
    def key_of(scope: MetricScope, item_id: str, metric: str) -> str:
        return f"{scope.value}:{item_id}:{metric}"
