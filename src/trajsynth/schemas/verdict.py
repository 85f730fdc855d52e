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
    """What the verifier decided of one trajectory, with every check's result."""

    verdict_id: str = Field(description="content id of the verdict")
    trajectory_id: str = Field(description="the trajectory judged")
    results: list[ConstraintResult] = Field(description="one result per constraint")
    passed: bool = Field(
        description="clean and correct: every hard constraint and every hygiene check held "
        "(and the model judge accepted, when set to decide)"
    )
    score: float = Field(
        ge=0.0, le=1.0, description="0.9 x passed + 0.1 x the share of soft constraints that held"
    )
    state_hash: str | None = Field(default=None, description="hash of the end state checked")
    state_diff: dict[str, JsonValue] = Field(
        default_factory=dict, description="end state against the gold run's"
    )
    excluded: bool = Field(
        default=False, description="left out of pass rates (an infra or simulator failure)"
    )
    constraints_passed: bool | None = Field(
        default=None, description="every hard constraint held (None: judged before hygiene)"
    )
    clean: bool | None = Field(
        default=None, description="every hygiene check held (None: judged before hygiene)"
    )
    hygiene: list[HygieneResult] = Field(
        default_factory=list, description="one result per hygiene check: check, passed, detail"
    )
    recovered: bool = Field(
        default=False, description="clean, with a failed call that a later call corrected"
    )
    judge: JudgeResult | None = Field(
        default=None, description="the model judge's score and reason (None: no judge)"
    )

    @property
    def failed_checks(self) -> list[str]:
        """The hygiene checks that failed, by name."""
        return [h.check for h in self.hygiene if not h.passed]
