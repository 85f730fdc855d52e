"""RL tasks planned on the spot from bundled clusters, for GRPO runs without an RL export.

``plan_rl_rows`` plans with the planner's seeded gold path and template words (no LLM), so the
smoke run and the GPU run need nothing but the package; ``blueprint_row`` turns any planned
task into the ``RLRow`` the RL export writes.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence

from trajsynth.agents.assistant import Assistant
from trajsynth.planning.cells import sample_cells
from trajsynth.planning.planner import Planner, environment_factory, plan_blueprint
from trajsynth.schemas import (
    Blueprint,
    EnvSpec,
    InputError,
    Message,
    MessageRole,
    RLRow,
    SandboxKind,
    ToolCluster,
)

__all__ = ["blueprint_row", "plan_rl_rows"]

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
            server=cluster.server if cluster.source == "outside" else None,
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
