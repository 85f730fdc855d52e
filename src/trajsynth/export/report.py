"""What an export wrote, and the error it raises on bad input."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from trajsynth.schemas import InputError, Record

__all__ = ["EmptySelectionError", "ExportError", "ExportReport"]


class ExportError(InputError):
    """A selected item cannot be exported; the message names it (trajectory or task id)."""


class EmptySelectionError(ExportError):
    """Nothing is selected to export (no curated round yet, or none of the kind asked for).

    Callers that may meet it before curation ran (a scheduled export, the dataset export's
    optional half) catch this type and skip; every other ``ExportError`` is a real fault.
    ``seen`` holds what the selection saw (``export.seen.SelectionSeen``) when a run is known.
    """

    def __init__(self, message: str, seen: Any = None) -> None:
        super().__init__(message)
        self.seen = seen


class ExportReport(Record):
    """One export: where it went, how many rows, which files (relative to ``out_dir``)."""

    out_dir: str
    kind: str = Field(description="'sft', 'rl' or 'dataset' (both plus the card)")
    fmt: str
    run_id: str
    round: int | None = None
    n_sft: int = 0
    n_rl: int = 0
    n_tokens: int = Field(default=0, description="SFT tokens under the tool-aware template")
    n_assistant_tokens: int = Field(default=0, description="of which trained on (mask = 1)")
    files: list[str] = Field(default_factory=list)
    seconds: float = 0.0
    refused: dict[str, int] = Field(
        default_factory=dict,
        description="selected SFT trajectories left out as not clean, counted by reason",
    )
