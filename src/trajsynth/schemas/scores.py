"""Curation scores of one trajectory (METHODS.md §5, §8)."""

from __future__ import annotations

from trajsynth.schemas._base import Record

__all__ = ["Scores"]


class Scores(Record):
    trajectory_id: str
    mode: str | None = None
    mode_codebook: str | None = None
    cac: float = 0.0
    n_steps: int = 0
    n_distinct_tools: int = 0
    max_dep_depth: int = 0
    n_bound_args: int = 0
    n_conditional: int = 0
    signature: str | None = None
    recovered: bool = False
    efficiency: float | None = None
    sft_score: float | None = None
    duplicate_of: str | None = None
