"""`synth run` as a Prefect flow: plan N blueprints, act each out, verify, store.

Runs in Prefect's ephemeral mode (no server to start). Every unit of work (one blueprint
planned, one rollout judged) commits its rows and its done-marker in one transaction, so a
crashed run started again with the same config skips what is done and duplicates nothing.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NONE as NO_CACHE
from pydantic import SecretStr

from trajsynth.agents.assistant import Assistant
from trajsynth.agents.cells import sample_cells
from trajsynth.agents.llm import LLMClient, open_llm_client
from trajsynth.agents.planner import (
    Planner,
    accepted_attempt,
    environment_factory,
    plan_blueprint,
)
from trajsynth.agents.rollout import EpisodeResult, run_episode
from trajsynth.agents.user_sim import UserSimulator
from trajsynth.curation.verify import verify
from trajsynth.flows.progress import report
from trajsynth.mcp_servers.environment import open_environment
from trajsynth.mcp_servers.registry import get_cluster, list_clusters
from trajsynth.schemas import (
    Blueprint,
    BlueprintAttempt,
    Cell,
    EnvState,
    FailureClass,
    InfraError,
    RunConfig,
    ToolCluster,
    Verdict,
    counts_against_policy,
)
from trajsynth.synth.manifest import run_manifest
from trajsynth.synth.store import Store, work_unit_row
from trajsynth.synth.summary import RunSummary, summarize_run

__all__ = ["run_id_for", "synth_run"]

log = logging.getLogger(__name__)


def assistant_for(config: RunConfig) -> Assistant:
    """The assistant of a run. The embedded 135M model needs its tool use steered: it almost
    never calls a tool when free to, and repeats calls instead of answering after a result."""
    embedded = config.llm.base_url is None
    after_user = config.assistant_tool_choice or ("required" if embedded else "auto")
    after_tool = config.assistant_tool_choice_after_tool or ("none" if embedded else "auto")
    return Assistant(tool_choice_after_user=after_user, tool_choice_after_tool=after_tool)


def run_id_for(config: RunConfig) -> str:
    """The same config (seeds included) is the same run: rerunning it resumes."""
    return f"run_{config.config_hash()}"


def _cluster_rows(clusters: list[ToolCluster]) -> dict[str, list[dict[str, Any]]]:
    rows: dict[str, list[dict[str, Any]]] = {"clusters": [], "tools": [], "edges": []}
    for c in clusters:
        rows["clusters"].append(
            {
                "cluster_id": c.cluster_id,
                "domain": c.domain.value,
                "description": c.description,
                "source": c.source,
                "server": c.server.model_dump(mode="json"),
                "state_readable": c.state_readable,
                "n_tools": len(c.tools),
                "n_edges": len(c.edges),
            }
        )
        for t in c.tools:
            rows["tools"].append(
                {
                    "tool_key": f"{c.cluster_id}/{t.name}",
                    "cluster_id": c.cluster_id,
                    **t.model_dump(mode="json"),
                }
            )
        for e in c.edges:
            rows["edges"].append(
                {
                    "edge_key": (
                        f"{c.cluster_id}/{e.source}->{e.target}:{e.out_field}->{e.in_param}"
                    ),
                    "cluster_id": c.cluster_id,
                    **e.model_dump(mode="json"),
                }
            )
    return rows


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


def _usage_rows(run_id: str, owner: str, usage: list[Any]) -> list[dict[str, Any]]:
    return [
        {
            "call_key": f"{owner}#{i}",
            "run_id": run_id,
            "trajectory_id": owner,
            **u.model_dump(mode="json"),
        }
        for i, u in enumerate(usage)
    ]


@task(name="plan-blueprint", cache_policy=NO_CACHE, retries=1, retry_delay_seconds=1)
async def plan_task(
    *,
    config: RunConfig,
    run_id: str,
    round_index: int,
    task_index: int,
    cell: Any,
    cluster: ToolCluster,
    llm: LLMClient,
    store: Store,
) -> str | None:
    """Plan one blueprint; store it (or the rejection) with its done-marker. Its id or None."""
    unit = f"plan:{round_index}:{task_index}"
    seed = config.seed * 1_000_003 + round_index * 10_007 + task_index
    planner = Planner(retries=config.planner_retries)

    env_factory = environment_factory(
        cluster,
        sandbox_kind=config.sandbox,
        limits=config.sandbox_limits,
        seed=seed,
        tool_timeout_s=config.budgets.tool_timeout_s,
    )

    outcome = await plan_blueprint(
        planner, llm, env_factory, cluster, cell, seed=seed, round=round_index
    )
    attempts: list[BlueprintAttempt] = []
    blueprints: list[Blueprint] = []
    usage = list(outcome.usage)
    if isinstance(outcome, Blueprint):
        blueprints.append(outcome)
        attempts.append(accepted_attempt(outcome))
    else:
        attempts.append(outcome)
    store.insert_many(
        {
            "blueprints": [_blueprint_row(b, run_id) for b in blueprints],
            "blueprint_attempts": [_attempt_row(a, run_id) for a in attempts],
            "llm_calls": _usage_rows(run_id, f"plan:{run_id}:{round_index}:{task_index}", usage),
            "work_units": [work_unit_row(run_id, "plan", unit)],
        }
    )
    return blueprints[0].blueprint_id if blueprints else None


def _classify(result: EpisodeResult, verdict: Verdict) -> FailureClass | None:
    """A failed, counted trajectory is `tool` when a tool error is its last failing step,
    else `model` (malformed output, or a wrong final answer / end state)."""
    traj = result.trajectory
    if traj.failure_class is not None or verdict.passed:
        return traj.failure_class
    failing = [c for c in traj.calls if c.failure_class is not None]
    return failing[-1].failure_class if failing else FailureClass.MODEL


@task(name="rollout", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=2)
async def rollout_task(
    *,
    config: RunConfig,
    run_id: str,
    blueprint: Blueprint,
    sample: int,
    cluster: ToolCluster,
    llm: LLMClient,
    store: Store,
) -> dict[str, Any]:
    """One rollout of one blueprint, verified and stored. Infra faults raise, so Prefect
    retries the task; after the last retry the trajectory is stored as excluded."""
    from prefect.runtime import task_run

    attempt = int(task_run.run_count or 1)
    async with open_environment(
        cluster,
        sandbox_kind=config.sandbox,
        limits=config.sandbox_limits,
        seed=blueprint.seed,
        tool_timeout_s=config.budgets.tool_timeout_s,
    ) as env:
        result = await run_episode(
            blueprint=blueprint,
            env=env,
            llm=llm,
            assistant=assistant_for(config),
            user_sim=UserSimulator(),
            budgets=config.budgets,
            run_id=run_id,
            sample=sample,
        )
    traj = result.trajectory
    if traj.failure_class is FailureClass.INFRA and attempt <= 2:
        raise InfraError(f"rollout {traj.trajectory_id}: {traj.failure_detail}")
    state = result.final_state
    if state is None:
        state = EnvState(state_hash="unavailable", readable=False)
    verdict = verify(traj, blueprint.constraints, state)
    traj = traj.model_copy(
        update={"failure_class": _classify(result, verdict), "attempts": attempt}
    )
    unit = f"rollout:{blueprint.blueprint_id}:{sample}"
    traj_row = traj.model_dump(mode="json")
    traj_row.update(n_calls=len(traj.calls), total_tokens=traj.total_tokens)
    store.insert_many(
        {
            "trees": [
                result.tree.model_copy(
                    update={"pass_rate": None if verdict.excluded else float(verdict.passed)}
                )
            ],
            "nodes": result.nodes,
            "trajectories": [traj_row],
            "verdicts": [verdict],
            "llm_calls": _usage_rows(run_id, traj.trajectory_id, result.usage),
            "work_units": [work_unit_row(run_id, "rollout", unit)],
        }
    )
    return {
        "trajectory_id": traj.trajectory_id,
        "passed": verdict.passed,
        "counted": counts_against_policy(traj.failure_class) or verdict.passed,
    }


@flow(name="synth-run", log_prints=False, validate_parameters=False)
async def synth_run(
    config: RunConfig,
    store_path: str,
    cache_dir: str | None = None,
    clusters_dir: str | None = None,
    api_key: SecretStr | None = None,
    concurrency: int = 2,
) -> RunSummary:
    """Plan ``config.tasks`` blueprints per round, roll each out ``config.samples`` times,
    verify and store everything. Returns the run's summary (computed from the store)."""
    started = time.perf_counter()
    store = Store(Path(store_path))
    run_id = run_id_for(config)
    outside_dir = Path(clusters_dir) if clusters_dir else None
    clusters = (
        [get_cluster(name, clusters_dir=outside_dir) for name in config.clusters]
        if config.clusters
        else list_clusters(clusters_dir=outside_dir)
    )
    by_id = {c.cluster_id: c for c in clusters}
    store.start_run(
        run_id,
        config.model_dump(mode="json"),
        run_manifest(config, clusters=[c.cluster_id for c in clusters]),
    )
    store.insert_many(_cluster_rows(clusters))
    gate = asyncio.Semaphore(concurrency)
    state = "completed"
    try:
        async with open_llm_client(
            config.llm, api_key=api_key, cache_dir=Path(cache_dir) if cache_dir else None
        ) as llm:
            for round_index in range(config.rounds):
                ctx = _RoundContext(config, run_id, round_index, by_id, llm, store, gate)
                await _plan_round(ctx, clusters)
                await _rollout_round(ctx)
    except BaseException:
        state = "failed"
        raise
    finally:
        summary = summarize_run(store, run_id, wall_s=time.perf_counter() - started)
        store.finish_run(run_id, state, summary.model_dump(mode="json"))
    return summary


@dataclass(frozen=True)
class _RoundContext:
    config: RunConfig
    run_id: str
    round_index: int
    clusters: dict[str, ToolCluster]
    llm: LLMClient
    store: Store
    gate: asyncio.Semaphore


async def _plan_round(ctx: _RoundContext, clusters: list[ToolCluster]) -> None:
    rng = random.Random(ctx.config.seed * 7_919 + ctx.round_index)
    cells = sample_cells(clusters, ctx.config.tasks, rng)
    done = ctx.store.done_units(ctx.run_id, "plan")
    todo = [(i, c) for i, c in enumerate(cells) if f"plan:{ctx.round_index}:{i}" not in done]
    progress = {"done": len(cells) - len(todo)}
    report("plan", progress["done"], len(cells))

    async def plan_one(i: int, cell: Cell) -> None:
        async with ctx.gate:
            await plan_task(
                config=ctx.config,
                run_id=ctx.run_id,
                round_index=ctx.round_index,
                task_index=i,
                cell=cell,
                cluster=ctx.clusters[cell.cluster_id],
                llm=ctx.llm,
                store=ctx.store,
            )
        progress["done"] += 1
        report("plan", progress["done"], len(cells), cell.cluster_id)

    await asyncio.gather(*(plan_one(i, c) for i, c in todo))


async def _rollout_round(ctx: _RoundContext) -> None:
    rows = ctx.store.query(
        "SELECT * EXCLUDE (run_id, difficulty, path_shape, target_mode) "
        "FROM blueprints WHERE run_id = ? AND round = ? ORDER BY blueprint_id",
        [ctx.run_id, ctx.round_index],
    )
    blueprints = [
        Blueprint.model_validate({k: v for k, v in r.items() if v is not None}) for r in rows
    ]
    done = ctx.store.done_units(ctx.run_id, "rollout")
    samples = ctx.config.samples
    jobs = [
        (bp, s)
        for bp in blueprints
        for s in range(samples)
        if f"rollout:{bp.blueprint_id}:{s}" not in done
    ]
    total = len(blueprints) * samples
    progress = {"done": total - len(jobs)}
    report("rollout", progress["done"], total)

    async def roll_one(bp: Blueprint, sample: int) -> None:
        async with ctx.gate:
            await rollout_task(
                config=ctx.config,
                run_id=ctx.run_id,
                blueprint=bp,
                sample=sample,
                cluster=ctx.clusters[bp.cluster_id],
                llm=ctx.llm,
                store=ctx.store,
            )
        progress["done"] += 1
        report("rollout", progress["done"], total, bp.cluster_id)

    await asyncio.gather(*(roll_one(bp, s) for bp, s in jobs))
