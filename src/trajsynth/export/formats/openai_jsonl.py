"""OpenAI fine-tuning JSONL: ``train.jsonl`` (``messages`` + ``tools``) and
``metadata.jsonl`` beside it with the rest of each row."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from trajsynth.export import records
from trajsynth.export.formats import export_format, jsonl_rl
from trajsynth.schemas import RLRow, SFTRow


@export_format("openai-jsonl")
class OpenAIJsonl:
    def write_sft(self, rows: Sequence[SFTRow], folder: Path) -> list[Path]:
        main = [
            {"messages": [m.to_openai() for m in r.messages], "tools": list(r.tools)} for r in rows
        ]
        meta = []
        for r in rows:
            rec = records.sft_record(r)
            del rec["messages"], rec["tools"]
            meta.append(rec)
        return [
            records.write_jsonl(main, folder / "train.jsonl"),
            records.write_jsonl(meta, folder / "metadata.jsonl"),
        ]

    def write_rl(self, rows: Sequence[RLRow], folder: Path) -> list[Path]:
        return jsonl_rl(rows, folder)
