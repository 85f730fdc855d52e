"""Cheap per-trajectory flags computed with no model call (docs/methods.md §7)."""

from __future__ import annotations

from trajsynth.schemas._base import Record

__all__ = ["Signals"]


class Signals(Record):
    trajectory_id: str
    misalignment_ratio: float = 0.0
    misalignment: bool = False
    efficiency: float = 1.0
    no_progress: bool = False
    stagnation: bool = False
    disengagement: bool = False
    satisfaction_count: int = 0
    satisfaction_confidence: float = 0.0
    satisfaction: bool = False
    failure_rate: float = 0.0
    malformed_calls: int = 0
    failure: bool = False
    repetition_instances: int = 0
    loop: bool = False
    exhaustion: bool = False
    triage: float = 0.0
