"""Cheap per-trajectory flags computed with no model call (docs/methods.md §7)."""

from __future__ import annotations

from pydantic import Field

from trajsynth.schemas._base import Record

__all__ = ["Signals"]


class Signals(Record):
    trajectory_id: str = Field(description="the trajectory")
    misalignment_ratio: float = Field(
        default=0.0, description="share of turns the user had to correct"
    )
    misalignment: bool = Field(default=False, description="misalignment above its threshold")
    efficiency: float = Field(default=1.0, description="planned calls over calls made")
    no_progress: bool = Field(default=False, description="steps that changed nothing")
    stagnation: bool = Field(default=False, description="the conversation stopped moving")
    disengagement: bool = Field(default=False, description="the user gave up")
    satisfaction_count: int = Field(default=0, description="satisfaction phrases of the user")
    satisfaction_confidence: float = Field(
        default=0.0, description="how sure the satisfaction flag is"
    )
    satisfaction: bool = Field(default=False, description="the user said the task was done")
    failure_rate: float = Field(default=0.0, description="share of tool calls that failed")
    malformed_calls: int = Field(default=0, description="tool calls that did not parse")
    failure: bool = Field(default=False, description="failure rate above its threshold")
    repetition_instances: int = Field(default=0, description="repeated identical calls")
    loop: bool = Field(default=False, description="a call repeated past its threshold")
    exhaustion: bool = Field(default=False, description="a budget ran out")
    triage: float = Field(default=0.0, description="how much the trajectory wants a look (0-1)")
