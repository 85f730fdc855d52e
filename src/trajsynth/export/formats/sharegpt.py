"""LLaMA-Factory's ShareGPT layout as ``train.jsonl``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from trajsynth.export import records
from trajsynth.export.formats import export_format, jsonl_rl
from trajsynth.schemas import RLRow, SFTRow


@export_format("sharegpt")
class ShareGPT:
    def write_sft(self, rows: Sequence[SFTRow], folder: Path) -> list[Path]:
        return [
            records.write_jsonl([records.sharegpt_record(r) for r in rows], folder / "train.jsonl")
        ]

    def write_rl(self, rows: Sequence[RLRow], folder: Path) -> list[Path]:
        return jsonl_rl(rows, folder)
