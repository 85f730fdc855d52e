"""RL tasks for the GRPO stage: rows of the RL export (or rows the caller planned with
``planning.rl_tasks.plan_rl_rows``).

``load_rl_rows`` reads an RL export (Parquet written through ``datasets``, or JSONL) into
``RLRow`` records. ``trl_dataset`` turns rows
into the in-memory dataset GRPOTrainer reads: ``prompt`` (OpenAI messages), ``environment``
(the cluster id: TRL picks the environment class by it), ``env`` and ``constraints`` (JSON
text, so Arrow never merges the constraint kinds into one struct filled with nulls) and ``id``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from trajsynth.schemas import (
    InputError,
    RLRow,
    TrainConfig,
    canonical_json,
)

__all__ = ["export_rows", "load_rl_rows", "trl_dataset"]

log = logging.getLogger(__name__)


def _row_dict(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A row as read back from Parquet/JSONL: JSON-text columns parsed, Arrow's null-filled
    merged keys dropped."""
    data = dict(raw)
    for key in ("prompt", "tools", "env", "constraints", "metadata"):
        if isinstance(data.get(key), str):
            data[key] = json.loads(data[key])
    data["prompt"] = [
        {k: v for k, v in m.items() if v is not None} for m in data.get("prompt") or []
    ]
    constraints = []
    for c in data.get("constraints") or []:
        c = json.loads(c) if isinstance(c, str) else c
        constraints.append({k: v for k, v in c.items() if v is not None})
    data["constraints"] = constraints
    data["metadata"] = data.get("metadata") or {}
    return {k: v for k, v in data.items() if k in RLRow.model_fields}


def export_rows(config: TrainConfig) -> list[RLRow]:
    """The RL export at ``config.tasks``, cut to ``config.n_tasks`` when that is set."""
    if not config.tasks:
        raise InputError(
            "no RL tasks: set `tasks` to an RL export folder, or pass rows "
            "(`synth train` plans them with planning.rl_tasks.plan_rl_rows)"
        )
    rows = load_rl_rows(Path(config.tasks))
    return rows[: config.n_tasks] if config.n_tasks else rows


def load_rl_rows(path: Path) -> list[RLRow]:
    """RL rows from an export folder or file (``*.parquet`` through ``datasets``, or
    ``*.jsonl``). Raises InputError naming the file and row that does not parse."""
    path = Path(path)
    files = (
        sorted(path.rglob("*.parquet")) + sorted(path.rglob("*.jsonl")) if path.is_dir() else [path]
    )
    if not files:
        raise InputError(f"{path}: no *.parquet or *.jsonl RL rows found")
    rows: list[RLRow] = []
    for file in files:
        if file.suffix == ".parquet":
            import datasets

            # datasets leaves Dataset.__iter__ unannotated, so pyright takes its row type from
            # every format's branch; with no format set (as here) a row is a dict
            records: Iterable[Mapping[str, Any]] = datasets.Dataset.from_parquet(str(file))  # pyright: ignore[reportAssignmentType]
        else:
            records = (json.loads(line) for line in file.read_text().splitlines() if line.strip())
        for i, raw in enumerate(records):
            try:
                rows.append(RLRow.model_validate(_row_dict(raw)))
            except (ValueError, TypeError, KeyError) as exc:
                raise InputError(f"{file}: row {i} is not an RL row: {exc}") from exc
    if not rows:
        raise InputError(f"{path}: the RL export is empty")
    return rows


def trl_dataset(rows: Sequence[RLRow]) -> Any:
    """The ``datasets.Dataset`` GRPOTrainer trains on (one row per task)."""
    import datasets

    return datasets.Dataset.from_list(
        [
            {
                "id": row.id,
                "prompt": [m.to_openai() for m in row.prompt],
                "environment": row.env.cluster_id,
                "env": canonical_json(row.env.model_dump(mode="json")),
                "constraints": canonical_json([c.model_dump(mode="json") for c in row.constraints]),
            }
            for row in rows
        ]
    )
