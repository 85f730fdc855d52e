"""Parquet through ``datasets``: the layout TRL and the HF chat templates read (the default)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from trajsynth.export import records
from trajsynth.export.formats import export_format
from trajsynth.schemas import RLRow, SFTRow


@export_format("parquet")
class Parquet:
    def write_sft(self, rows: Sequence[SFTRow], folder: Path) -> list[Path]:
        recs = [records.sft_record(r) for r in rows]
        return records.write_parquet(recs, records.sft_features(), folder)

    def write_rl(self, rows: Sequence[RLRow], folder: Path) -> list[Path]:
        recs = [records.rl_record(r) for r in rows]
        return records.write_parquet(recs, records.rl_features(), folder)
