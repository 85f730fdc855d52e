"""Bootstrap data for a policy that passes almost nothing: gold demonstrations (issue 18).

``gold_demos`` replays each task's gold run through the real rollout loop
(``agents.gold.gold_demonstration``) in a fresh sandboxed environment and verifies the
result with ``curation.verify``, exactly as a rollout is verified; only passing
demonstrations are returned (a gold replay that fails its own constraints says the task's
words or checks are off, and is logged).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from trajsynth.agents.gold import gold_demonstration
from trajsynth.agents.llm import LLMClient
from trajsynth.curation.verify import verify
from trajsynth.mcp_servers.environment import open_environment
from trajsynth.schemas import Blueprint, EnvState, SandboxKind, ToolCluster, Trajectory, Verdict

__all__ = ["gold_demos"]

log = logging.getLogger(__name__)


async def gold_demos(
    tasks: Sequence[Blueprint],
    clusters: dict[str, ToolCluster],
    *,
    run_id: str,
    sandbox_kind: SandboxKind = SandboxKind.AUTO,
    user_llm: LLMClient | None = None,
    words_llm: LLMClient | None = None,
) -> list[tuple[Trajectory, Verdict]]:
    """The verified gold demonstration of every task that yields one."""
    out: list[tuple[Trajectory, Verdict]] = []
    for task in tasks:
        async with open_environment(
            clusters[task.cluster_id], sandbox_kind=sandbox_kind, seed=task.seed
        ) as env:
            trajectory, state = await gold_demonstration(
                task, env, run_id=run_id, user_llm=user_llm, words_llm=words_llm
            )
        verdict = verify(
            trajectory,
            task.constraints,
            state or EnvState(state_hash="unavailable", readable=False),
        )
        if verdict.passed:
            out.append((trajectory, verdict))
        else:
            failed = [r for r in verdict.results if not r.passed]
            log.warning("gold replay of %s failed its checks: %s", task.blueprint_id, failed[:2])
    return out
