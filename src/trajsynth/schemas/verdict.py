"""The verifier's judgement: one result per constraint, not a single bool (docs/methods.md §4)."""

from __future__ import annotations

from pydantic import Field

from trajsynth.schemas._base import JsonValue, Record

__all__ = ["ConstraintResult", "Verdict"]


class ConstraintResult(Record):
    index: int
    kind: str
    hard: bool
    passed: bool
    detail: str = ""


class Verdict(Record):
    verdict_id: str
    trajectory_id: str
    results: list[ConstraintResult]
    passed: bool = Field(description="all hard constraints pass")
    score: float = Field(ge=0.0, le=1.0, description="0.9·passed + 0.1·soft fraction")
    state_hash: str | None = None
    state_diff: dict[str, JsonValue] = Field(default_factory=dict)
    excluded: bool = Field(default=False, description="infra/simulator: not counted")
