"""RL tasks for the GRPO stage: rows of the RL export, or a few planned on the spot.

``load_rl_rows`` reads an RL export (Parquet written through ``datasets``, or JSONL) into
``RLRow`` records; ``plan_rl_rows`` plans tasks itself from bundled clusters with the planner's
seeded gold path and template words (no LLM), for the smoke run. ``trl_dataset`` turns rows
into the in-memory dataset GRPOTrainer reads: ``prompt`` (OpenAI messages), ``environment``
(the cluster id: TRL picks the environment class by it), ``env`` and ``constraints`` (JSON
text, so Arrow never merges the constraint kinds into one struct filled with nulls) and ``id``.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from trajsynth.agents.assistant import Assistant
from trajsynth.agents.cells import sample_cells
from trajsynth.agents.planner import Planner, environment_factory, plan_blueprint
from trajsynth.schemas import (
    Blueprint,
    EnvSpec,
    InputError,
    Message,
    MessageRole,
    RLRow,
    SandboxKind,
    ToolCluster,
    canonical_json,
)

__all__ = ["blueprint_row", "load_rl_rows", "plan_rl_rows", "trl_dataset"]

log = logging.getLogger(__name__)


def blueprint_row(
    blueprint: Blueprint,
    cluster: ToolCluster,
    assistant: Assistant | None = None,
    *,
    env_seed: int = 0,
) -> RLRow:
    """The RL row of a planned task: system + the user's goal, tools, env spec, constraints.

    ``env_seed`` is the seed the environment's data was generated with when the task was
    planned (not the planner's seed): the reward's environment must start from the same state.
    """
    assistant = assistant or Assistant()
    return RLRow(
        id=blueprint.blueprint_id,
        prompt=[
            assistant.system_message(cluster),
            Message(role=MessageRole.USER, content=blueprint.goal),
        ],
        tools=[t.to_openai() for t in cluster.tools],
        env=EnvSpec(
            cluster_id=cluster.cluster_id,
            seed=env_seed,
            initial_state_id=blueprint.initial_state_id,
        ),
        constraints=list(blueprint.constraints),
        metadata={"cell": blueprint.cell.model_dump(mode="json"), "source": "planned"},
    )


async def plan_rl_rows(
    n: int,
    *,
    seed: int = 0,
    clusters: Sequence[ToolCluster] | None = None,
    sandbox_kind: SandboxKind = SandboxKind.LOCAL,
    max_tries: int = 8,
) -> list[RLRow]:
    """Plan ``n`` RL tasks from bundled clusters (seeded gold paths, template words, no LLM).

    Cells are drawn with ``sample_cells`` from a ``seed``-ed RNG; a rejected plan draws again,
    up to ``max_tries`` draws per task. Raises InputError when fewer than ``n`` could be planned.
    """
    from trajsynth.mcp_servers.registry import list_clusters

    pool = list(clusters) if clusters is not None else list_clusters()
    by_id = {c.cluster_id: c for c in pool}
    rng = random.Random(seed)
    planner = Planner(use_llm=False, gold_retries=2)
    rows: list[RLRow] = []
    draws = 0
    while len(rows) < n and draws < n * max_tries:
        for cell in sample_cells(pool, n - len(rows), rng):
            draws += 1
            cluster = by_id[cell.cluster_id]
            factory = environment_factory(cluster, sandbox_kind=sandbox_kind, seed=seed)
            outcome = await plan_blueprint(planner, None, factory, cluster, cell, seed + draws)
            if isinstance(outcome, Blueprint):
                rows.append(blueprint_row(outcome, cluster, env_seed=seed))
            else:
                log.info("plan %s rejected: %s", cell.cluster_id, outcome.reason)
    if len(rows) < n:
        raise InputError(f"planned only {len(rows)} of {n} RL tasks in {draws} draws")
    return rows


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

            records: Iterable[Mapping[str, Any]] = datasets.Dataset.from_parquet(str(file))  # type: ignore[assignment]
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
