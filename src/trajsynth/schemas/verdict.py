"""The verifier's judgement: one result per constraint and per hygiene check, not a single
bool (docs/methods.md §4; docs/verification.md)."""

from __future__ import annotations

from pydantic import Field

from trajsynth.schemas._base import JsonValue, Record

__all__ = ["ConstraintResult", "HygieneResult", "JudgeResult", "Verdict"]


class ConstraintResult(Record):
    index: int
    kind: str
    hard: bool
    passed: bool
    detail: str = ""


class HygieneResult(Record):
    """One hygiene check (``curation.hygiene``): is the trajectory a clean example."""

    check: str
    passed: bool
    detail: str = ""


class JudgeResult(Record):
    """A model judge's soft score of a trajectory against a rubric (``[run.judge]``)."""

    model: str
    score: float | None = Field(default=None, ge=0.0, le=1.0, description="None: no score read")
    accept: bool | None = Field(default=None, description="score >= the judge's threshold")
    reason: str = ""
    decides: bool = Field(default=False, description="whether it took part in `passed`")


class Verdict(Record):
    verdict_id: str
    trajectory_id: str
    results: list[ConstraintResult]
    passed: bool = Field(
        description="clean and correct: every hard constraint and every hygiene check holds "
        "(and the model judge accepts, when it is set to decide)"
    )
    score: float = Field(ge=0.0, le=1.0, description="0.9·passed + 0.1·soft fraction")
    state_hash: str | None = None
    state_diff: dict[str, JsonValue] = Field(default_factory=dict)
    excluded: bool = Field(default=False, description="infra/simulator: not counted")
    constraints_passed: bool | None = Field(
        default=None, description="every hard constraint holds (None: judged before hygiene)"
    )
    clean: bool | None = Field(
        default=None, description="every hygiene check holds (None: judged before hygiene)"
    )
    hygiene: list[HygieneResult] = Field(default_factory=list)
    recovered: bool = Field(
        default=False, description="clean, with a failed call that a later call corrected"
    )
    judge: JudgeResult | None = None

    @property
    def failed_checks(self) -> list[str]:
        """The hygiene checks that failed, by name."""
        return [h.check for h in self.hygiene if not h.passed]
