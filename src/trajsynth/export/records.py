"""Declared ``datasets`` features and the three on-disk layouts of the rows.

Features are declared, never inferred: inference merges the keys of every message dict
into one struct (and every tool's schema into another), filling the gaps with nulls.
Messages keep all five keys (``role``, ``content``, ``tool_calls``, ``tool_call_id``,
``name``; null where absent), tool-call ``arguments`` stay JSON text, each tool schema is
a ``Json()`` value (stored as JSON text, read back as a dict), and ``constraints`` and
``metadata`` are JSON text, so nothing is merged. TRL's SFTTrainer reads ``messages`` and
``tools``; the GRPO stage reads ``prompt``, ``tools``, ``env`` and ``constraints``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trajsynth.schemas import Message, RLRow, SFTRow, canonical_json

__all__ = [
    "SHARD_ROWS",
    "message_dict",
    "rl_features",
    "rl_record",
    "sft_features",
    "sft_record",
    "sharegpt_record",
    "write_jsonl",
    "write_parquet",
]

SHARD_ROWS = 5000
"""Rows per Parquet shard (``train-00000-of-0000N.parquet``)."""


def _message_feature() -> dict[str, Any]:
    from datasets import List, Value

    return {
        "role": Value("string"),
        "content": Value("string"),
        "tool_calls": List(
            {
                "id": Value("string"),
                "type": Value("string"),
                "function": {"name": Value("string"), "arguments": Value("string")},
            }
        ),
        "tool_call_id": Value("string"),
        "name": Value("string"),
    }


def sft_features() -> Any:
    from datasets import Features, Json, List, Value

    return Features(
        {
            "id": Value("string"),
            "messages": List(_message_feature()),
            "tools": List(Json()),
            "task_id": Value("string"),
            "cluster_id": Value("string"),
            "domain": Value("string"),
            "mode": Value("string"),
            "run_id": Value("string"),
            "round": Value("int32"),
            "score": Value("float64"),
            "verdict": Value("bool"),
            "cac": Value("float64"),
            "selection_score": Value("float64"),
            "metadata": Value("string"),
        }
    )


def rl_features() -> Any:
    from datasets import Features, Json, List, Value

    return Features(
        {
            "id": Value("string"),
            "prompt": List(_message_feature()),
            "tools": List(Json()),
            "env": {
                "cluster_id": Value("string"),
                "seed": Value("int64"),
                "initial_state_id": Value("string"),
            },
            "constraints": Value("string"),
            "task_id": Value("string"),
            "cluster_id": Value("string"),
            "domain": Value("string"),
            "run_id": Value("string"),
            "round": Value("int32"),
            "pass_rate": Value("float64"),
            "selection_score": Value("float64"),
            "metadata": Value("string"),
        }
    )


def message_dict(message: Message) -> dict[str, Any]:
    """A message with all five keys (null where absent), as the Parquet rows hold it."""
    return {
        "role": message.role.value,
        "content": message.content,
        "tool_calls": (
            [c.model_dump(mode="json") for c in message.tool_calls] if message.tool_calls else None
        ),
        "tool_call_id": message.tool_call_id,
        "name": message.name,
    }


def sft_record(row: SFTRow) -> dict[str, Any]:
    meta = row.metadata
    return {
        "id": row.id,
        "messages": [message_dict(m) for m in row.messages],
        "tools": list(row.tools),
        "task_id": row.task_id,
        "cluster_id": row.cluster_id,
        "domain": meta.get("domain"),
        "mode": meta.get("mode"),
        "run_id": meta.get("run_id"),
        "round": meta.get("round"),
        "score": row.score,
        "verdict": row.verdict,
        "cac": meta.get("cac"),
        "selection_score": meta.get("selection_score"),
        "metadata": canonical_json(meta),
    }


def rl_record(row: RLRow) -> dict[str, Any]:
    meta = row.metadata
    return {
        "id": row.id,
        "prompt": [message_dict(m) for m in row.prompt],
        "tools": list(row.tools),
        "env": row.env.model_dump(mode="json"),
        "constraints": canonical_json([c.model_dump(mode="json") for c in row.constraints]),
        "task_id": row.id,
        "cluster_id": row.env.cluster_id,
        "domain": meta.get("domain"),
        "run_id": meta.get("run_id"),
        "round": meta.get("round"),
        "pass_rate": meta.get("pass_rate"),
        "selection_score": meta.get("selection_score"),
        "metadata": canonical_json(meta),
    }


_SHAREGPT_ROLE = {"user": "human", "assistant": "gpt", "tool": "observation"}


def sharegpt_record(row: SFTRow) -> dict[str, Any]:
    """LLaMA-Factory's ShareGPT layout: ``conversations`` of human / gpt / function_call /
    observation turns, ``system`` and ``tools`` (JSON text) beside them."""
    system = ""
    turns: list[dict[str, str]] = []
    for m in row.messages:
        if m.role.value == "system":
            system = m.content or ""
            continue
        if m.role.value == "assistant" and m.tool_calls:
            if m.content:
                turns.append({"from": "gpt", "value": m.content})
            calls = [
                {"name": c.function.name, "arguments": json.loads(c.function.arguments)}
                for c in m.tool_calls
            ]
            value = calls[0] if len(calls) == 1 else calls
            turns.append({"from": "function_call", "value": json.dumps(value, ensure_ascii=False)})
            continue
        turns.append({"from": _SHAREGPT_ROLE[m.role.value], "value": m.content or ""})
    return {
        "id": row.id,
        "conversations": turns,
        "system": system,
        "tools": json.dumps([t.get("function", t) for t in row.tools], ensure_ascii=False),
    }


def write_parquet(records: Sequence[dict[str, Any]], features: Any, folder: Path) -> list[Path]:
    """Shards of at most ``SHARD_ROWS`` rows, written through ``datasets`` with ``features``."""
    import datasets

    folder.mkdir(parents=True, exist_ok=True)
    bars = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()  # progress belongs to the caller
    try:
        ds = datasets.Dataset.from_list(list(records), features=features)
        n = max(1, -(-len(ds) // SHARD_ROWS))
        paths = []
        for i in range(n):
            path = folder / f"train-{i:05d}-of-{n:05d}.parquet"
            ds.shard(n, i, contiguous=True).to_parquet(str(path))
            paths.append(path)
    finally:
        if bars:
            datasets.enable_progress_bars()
    return paths


def write_jsonl(records: Sequence[dict[str, Any]], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    return path
