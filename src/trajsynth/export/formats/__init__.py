"""Export formats, one module each, registered by decorator (``@export_format("name")``).

A new format is one file in this folder: a class with ``write_sft(rows, folder)`` and
``write_rl(rows, folder)`` returning the files it wrote. Every module here is imported when
the package is, so its decorator runs; nothing else lists the formats.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from trajsynth.schemas import Registry, RLRow, SFTRow

__all__ = ["EXPORT_FORMATS", "ExportFormat", "export_format", "jsonl_rl"]


class ExportFormat(Protocol):
    def write_sft(self, rows: Sequence[SFTRow], folder: Path) -> list[Path]: ...

    def write_rl(self, rows: Sequence[RLRow], folder: Path) -> list[Path]: ...


EXPORT_FORMATS: Registry[ExportFormat] = Registry("format")


def export_format(name: str) -> Callable[[type], type]:
    """Register a format class under ``name`` (an instance is stored)."""

    def register(cls: type) -> type:
        EXPORT_FORMATS.register(name)(cls())
        return cls

    return register


def jsonl_rl(rows: Sequence[RLRow], folder: Path) -> list[Path]:
    """RL rows as ``train.jsonl``: OpenAI messages without nulls (the JSONL formats share it)."""
    from trajsynth.export import records

    recs = [records.rl_record(r) for r in rows]
    for rec in recs:
        rec["prompt"] = [{k: v for k, v in m.items() if v is not None} for m in rec["prompt"]]
    return [records.write_jsonl(recs, folder / "train.jsonl")]


for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
