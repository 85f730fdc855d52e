"""The units of work the stage flows hand to Prefect's task runner, as plain functions.

Each takes plain records (picklable, so a Dask or Ray worker can run it), builds its own LLM
client against the endpoint the flow resolved, and RETURNS the rows it made; the flow writes
them to the store, one transaction per unit with its done-marker. Workers never open DuckDB.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, SecretStr

from trajsynth.agents.assistant import Assistant
from trajsynth.agents.judge import JudgedTree, judge_episode, judge_tree
from trajsynth.agents.llm import LLMClient, open_llm_client
from trajsynth.agents.planner import (
    Planner,
    accepted_attempt,
    environment_factory,
    plan_blueprint,
)
from trajsynth.agents.rollout import Episode, EpisodeResult, run_episode
from trajsynth.agents.tree import TreeResult, grow_tree
from trajsynth.agents.user_sim import UserSimulator
from trajsynth.flows.progress import TurnReporter
from trajsynth.mcp_servers.environment import open_environment
from trajsynth.sandboxes.pool import SandboxPool, shared_pool
from trajsynth.schemas import (
    Blueprint,
    BlueprintAttempt,
    Cell,
    EnvState,
    FailureClass,
    InfraError,
    LLMConfig,
    LLMUsage,
    RolloutMode,
    RolloutTree,
    RunConfig,
    ToolCluster,
    Trajectory,
    content_id,
    counts_against_policy,
)

__all__ = [
    "UnitRows",
    "assistant_for",
    "failed_unit",
    "grow_unit",
    "plan_seed",
    "plan_unit",
    "rollout_unit_id",
    "run_id_for",
]

log = logging.getLogger(__name__)


class UnitRows(BaseModel):
    """What one unit of work made: rows per store table, and its done-marker."""

    model_config = ConfigDict(frozen=True)

    unit_id: str
    kind: str
    rows: dict[str, list[dict[str, Any]]]
    summary: dict[str, Any] = {}
    done: bool = True  # False: recorded but to be tried again by the next run of the config


def run_id_for(config: RunConfig) -> str:
    """The same config (seeds included) is the same run: rerunning it resumes."""
    return f"run_{config.config_hash()}"


def assistant_for(config: RunConfig) -> Assistant:
    """The assistant of a run. The embedded 135M model needs its tool use steered: it almost
    never calls a tool when free to, and repeats calls instead of answering after a result."""
    embedded = config.llm.base_url is None
    after_user = config.assistant_tool_choice or ("required" if embedded else "auto")
    after_tool = config.assistant_tool_choice_after_tool or ("none" if embedded else "auto")
    return Assistant(tool_choice_after_user=after_user, tool_choice_after_tool=after_tool)


@contextlib.asynccontextmanager
async def _client(
    llm: LLMConfig, api_key: SecretStr | None, cache_dir: str | None
) -> AsyncIterator[LLMClient]:
    if llm.base_url is None:
        raise InfraError("a unit of work needs a resolved LLM endpoint (the flow starts it)")
    async with open_llm_client(
        llm, api_key=api_key, cache_dir=Path(cache_dir) if cache_dir else None
    ) as client:
        yield client


def _usage_rows(run_id: str, owner: str, usage: list[LLMUsage]) -> list[dict[str, Any]]:
    return [
        {
            "call_key": f"{owner}#{i}",
            "run_id": run_id,
            "trajectory_id": owner,
            **u.model_dump(mode="json"),
        }
        for i, u in enumerate(usage)
    ]


# --------------------------------------------------------------------------- planning


def plan_seed(config: RunConfig, round_index: int, task_index: int) -> int:
    return config.seed * 1_000_003 + round_index * 10_007 + task_index


def sandbox_pool_for(config: RunConfig) -> SandboxPool | None:
    """This process's pool of warm sandboxes for the run's sandbox settings (None: off)."""
    if config.sandbox_pool == 0:
        return None
    return shared_pool(config.sandbox, config.sandbox_limits, max_idle=config.sandbox_pool)


def _blueprint_row(bp: Blueprint, run_id: str) -> dict[str, Any]:
    data = bp.model_dump(mode="json", exclude={"usage", "words_attempts", "reads_before_write"})
    data.update(
        run_id=run_id,
        difficulty=bp.cell.difficulty.value,
        path_shape=bp.cell.path_shape.value,
        target_mode=bp.cell.target_mode.value,
    )
    return data


def _attempt_row(attempt: BlueprintAttempt, run_id: str) -> dict[str, Any]:
    data = attempt.model_dump(mode="json", exclude={"usage", "blueprint_id", "words_source"})
    data["run_id"] = run_id
    return data


async def plan_unit(
    *,
    config: RunConfig,
    llm: LLMConfig,
    run_id: str,
    round_index: int,
    task_index: int,
    cell: Cell,
    cluster: ToolCluster,
    api_key: SecretStr | None = None,
    cache_dir: str | None = None,
) -> UnitRows:
    """Plan one blueprint (or record why it was rejected)."""
    seed = plan_seed(config, round_index, task_index)
    env_factory = environment_factory(
        cluster,
        sandbox_kind=config.sandbox,
        limits=config.sandbox_limits,
        seed=seed,
        tool_timeout_s=config.budgets.tool_timeout_s,
        pool=sandbox_pool_for(config),
    )
    async with _client(llm, api_key, cache_dir) as client:
        outcome = await plan_blueprint(
            Planner(retries=config.planner_retries),
            client,
            env_factory,
            cluster,
            cell,
            seed=seed,
            round=round_index,
        )
    blueprints = [outcome] if isinstance(outcome, Blueprint) else []
    attempt = accepted_attempt(outcome) if isinstance(outcome, Blueprint) else outcome
    owner = f"plan:{run_id}:{round_index}:{task_index}"
    return UnitRows(
        unit_id=f"plan:{round_index}:{task_index}",
        kind="plan",
        rows={
            "blueprints": [_blueprint_row(b, run_id) for b in blueprints],
            "blueprint_attempts": [_attempt_row(attempt, run_id)],
            "llm_calls": _usage_rows(run_id, owner, list(outcome.usage)),
        },
        summary={"blueprint_id": blueprints[0].blueprint_id if blueprints else None},
    )


# --------------------------------------------------------------------------- rollouts


def rollout_unit_id(blueprint_id: str, mode: RolloutMode, sample: int = 0) -> str:
    """Tree mode grows one tree per blueprint; linear mode one rollout per sample."""
    if mode is RolloutMode.TREE:
        return f"tree:{blueprint_id}"
    return f"rollout:{blueprint_id}:{sample}"


def _trajectory_row(trajectory: Trajectory) -> dict[str, Any]:
    row = trajectory.model_dump(mode="json")
    row.update(n_calls=len(trajectory.calls), total_tokens=trajectory.total_tokens)
    return row


def _state_rows(states: list[EnvState | None]) -> list[dict[str, Any]]:
    return [
        {"state_hash": s.state_hash, "state": s.model_dump(mode="json")}
        for s in states
        if s is not None and s.readable
    ]


def _judged_rows(
    run_id: str, judged: JudgedTree, owner: str, usage: list[LLMUsage]
) -> dict[str, list[dict[str, Any]]]:
    return {
        "trees": [judged.tree.model_dump(mode="json")],
        "nodes": [n.model_dump(mode="json") for n in judged.nodes],
        "trajectories": [_trajectory_row(t) for t in judged.trajectories],
        "verdicts": [v.model_dump(mode="json") for v in judged.verdicts],
        "final_states": _state_rows(judged.final_states),
        "llm_calls": _usage_rows(run_id, owner, usage),
    }


def _tree_rows(
    run_id: str, blueprint: Blueprint, result: TreeResult, attempt: int
) -> dict[str, list[dict[str, Any]]]:
    judged = judge_tree(blueprint, result, attempt)
    return _judged_rows(run_id, judged, result.tree.tree_id, result.usage)


def _linear_rows(
    run_id: str, blueprint: Blueprint, result: EpisodeResult, attempt: int
) -> dict[str, list[dict[str, Any]]]:
    judged = judge_episode(blueprint, result, attempt)
    return _judged_rows(run_id, judged, judged.trajectories[0].trajectory_id, result.usage)


def failed_unit(
    config: RunConfig, run_id: str, blueprint: Blueprint, sample: int, detail: str
) -> UnitRows:
    """A unit whose environment or LLM failed on every attempt: its tree is recorded with no
    leaves and the fault (``budget.infra_error``), nothing is counted, and it is not done."""
    mode = config.rollout_mode
    key = {"run_id": run_id, "blueprint_id": blueprint.blueprint_id}
    key.update({"mode": "tree"} if mode is RolloutMode.TREE else {"sample": sample})
    key["infra_failed"] = True  # never the id of the tree a later retry grows
    tree = RolloutTree(
        tree_id=content_id("tree", key),
        run_id=run_id,
        blueprint_id=blueprint.blueprint_id,
        round=blueprint.round,
        rollout_mode=mode.value,
        budget={"infra_error": detail[:500]},
    )
    return UnitRows(
        unit_id=rollout_unit_id(blueprint.blueprint_id, mode, sample),
        kind="rollout",
        rows={"trees": [tree.model_dump(mode="json")]},
        summary={"trajectories": 0, "infra_error": detail},
        done=False,
    )


def unit_token_budget(config: RunConfig) -> int:
    """Generated tokens one unit may spend: its own budget, capped by an even share of the
    run's (``budgets.max_run_tokens``), so the run's total can never be exceeded."""
    tree = config.rollout_mode is RolloutMode.TREE
    own = config.tree.max_tree_tokens if tree else config.budgets.max_tokens
    if config.budgets.max_run_tokens is None:
        return own
    units = config.tasks * config.rounds * (1 if tree else config.samples)
    return max(1, min(own, config.budgets.max_run_tokens // units))


async def grow_unit(
    *,
    config: RunConfig,
    llm: LLMConfig,
    run_id: str,
    blueprint: Blueprint,
    cluster: ToolCluster,
    sample: int = 0,
    attempt: int = 1,
    last_attempt: bool = True,
    api_key: SecretStr | None = None,
    cache_dir: str | None = None,
) -> UnitRows:
    """Act one blueprint out (its tree, or one linear sample), verify every leaf, and return
    the rows. An infra fault raises ``InfraError`` unless this is the last attempt; then the
    faulty leaves are kept, judged as excluded (never counted against the policy)."""
    mode = config.rollout_mode
    async with (
        _client(llm, api_key, cache_dir) as client,
        open_environment(
            cluster,
            sandbox_kind=config.sandbox,
            limits=config.sandbox_limits,
            seed=blueprint.seed,
            tool_timeout_s=config.budgets.tool_timeout_s,
            pool=sandbox_pool_for(config),
        ) as env,
    ):
        client = TurnReporter(client, blueprint.blueprint_id)  # per-turn progress (issue 20)
        assistant, user_sim = assistant_for(config), UserSimulator()
        budget = unit_token_budget(config)
        if mode is RolloutMode.TREE:
            episode = Episode(blueprint, env, client, assistant, user_sim, config.budgets)
            tree, _ = await grow_tree(
                episode,
                config.tree.model_copy(update={"max_tree_tokens": budget}),
                leaves=config.samples,
                run_id=run_id,
                reply_token_cap=assistant.max_tokens or config.llm.max_tokens,
            )
            trajectories = tree.trajectories
        else:
            result = await run_episode(
                blueprint=blueprint,
                env=env,
                llm=client,
                assistant=assistant,
                user_sim=user_sim,
                budgets=config.budgets.model_copy(update={"max_tokens": budget}),
                run_id=run_id,
                sample=sample,
                reply_token_cap=assistant.max_tokens or config.llm.max_tokens,
            )
            trajectories = [result.trajectory]
    infra = [t for t in trajectories if t.failure_class is FailureClass.INFRA]
    if infra and not last_attempt:
        raise InfraError(f"{blueprint.blueprint_id}: {infra[0].failure_detail}")
    rows = (
        _tree_rows(run_id, blueprint, tree, attempt)
        if mode is RolloutMode.TREE
        else _linear_rows(run_id, blueprint, result, attempt)
    )
    verdicts = rows["verdicts"]
    return UnitRows(
        unit_id=rollout_unit_id(blueprint.blueprint_id, mode, sample),
        kind="rollout",
        rows=rows,
        summary={
            "trajectories": len(verdicts),
            "passed": sum(1 for v in verdicts if v["passed"] and not v["excluded"]),
            "counted": sum(
                1
                for v, t in zip(verdicts, rows["trajectories"], strict=True)
                if not v["excluded"] and (v["passed"] or counts_against_policy(t["failure_class"]))
            ),
        },
    )
