"""One Prefect flow per stage: plan, rollout (with verification), verify, curate, export, train.

The library functions stay Prefect-free (``flows.units``, ``flows.curate``, ``export``,
``training``); here they become tasks with retries where a retry helps (LLM and sandbox faults)
and cache policies keyed on their inputs, so an unchanged unit is not recomputed. Each stage
is also a flow of its own (``rollout_stage`` and so on) for running or deploying one stage
alone; ``flows.build.build_dataset`` calls the same round functions under its own task runner.

Units run on the flow's task runner (threads, Dask or Ray; ``flows.runners``) and return their
rows; the flow process writes them, one transaction per unit with its done-marker, so a
crashed run started again skips what is done and duplicates nothing.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

# `Flow.__call__` imports this module (graphviz and its ~20 modules) at a flow's first call,
# while Prefect's own threads are starting; Python 3.11's importlib race (`_ModuleLock`,
# KeyError of a thread id; fixed in 3.12) hit that import once in the slow tier. Every module
# with a flow imports this one, so it is loaded before any flow runs. (Not in
# the package's __init__: `flows.api` must start its server before Prefect is imported.)
import prefect.utilities.visualization  # noqa: F401
from prefect import Task, flow, task
from prefect.cache_policies import INPUTS, CacheKeyFnPolicy
from prefect.futures import PrefectFuture, as_completed
from pydantic import SecretStr

from trajsynth.flows.progress import expect_leaves, report
from trajsynth.flows.redraw import next_attempts, plan_budget
from trajsynth.flows.units import (
    UnitRef,
    UnitRows,
    grow_unit,
    plan_seed,
    plan_unit,
    rollout_unit_id,
    run_id_for,
    unit_failure_row,
    without_duplicate,
)
from trajsynth.planning.cells import sample_cells
from trajsynth.schemas import (
    Blueprint,
    InfraError,
    InputError,
    LLMConfig,
    RolloutMode,
    RunConfig,
    ToolCluster,
    stable_hash,
)
from trajsynth.store import Store, work_unit_row
from trajsynth.store.rows import BlueprintRow, FinalStateRow, UnitFailureRow

__all__ = [
    "curate_stage",
    "export_stage",
    "plan_round",
    "plan_stage",
    "rollout_round",
    "rollout_stage",
    "train_stage",
    "verify_stage",
]

log = logging.getLogger(__name__)


@functools.cache
def code_version() -> str:
    """A hash of trajsynth's source: a cached unit result is reused only by the same code."""
    package = Path(__file__).resolve().parents[1]
    files = sorted(package.rglob("*.py"))
    return stable_hash({str(f.relative_to(package)): f.read_bytes().hex() for f in files})


# The endpoints, key and cache folder say where and how, not what: a unit's result does not
# depend on them, and the embedded servers' ports change every run. The code does (and the
# policy is in the config, so a run with a tuned policy never reuses a base run's units).
_UNIT_CACHE = (INPUTS - "llm" - "policy_llm" - "api_key" - "cache_dir") + CacheKeyFnPolicy(
    cache_key_fn=lambda context, parameters: code_version()
)
ROLLOUT_RETRIES = 2


def _infra_only(task: Task[..., Any], task_run: Any, state: Any) -> bool:
    """Retry a unit only for infrastructure faults; anything else is a bug to see at once.

    Prefect hands the condition ``Failed(data=<the task's exception>)``; reading the
    exception from ``state.data`` works for sync and async tasks alike (``state.result()``
    is a coroutine in an async engine, which made this always False)."""
    return isinstance(getattr(state, "data", None), InfraError)


@task(
    name="plan-blueprint",
    retries=1,
    retry_delay_seconds=1,
    retry_condition_fn=_infra_only,
    cache_policy=_UNIT_CACHE,
    cache_expiration=timedelta(days=7),
)
async def plan_task(**kwargs: Any) -> UnitRows:
    return await plan_unit(**kwargs)


@task(
    name="grow-tree",
    retries=ROLLOUT_RETRIES,
    retry_delay_seconds=2,
    retry_condition_fn=_infra_only,
    cache_policy=_UNIT_CACHE,
    cache_expiration=timedelta(days=7),
)
async def rollout_task(**kwargs: Any) -> UnitRows:
    """One blueprint's tree (or one linear sample). Infra faults raise, so Prefect retries;
    on the last attempt the faulty leaves are stored as excluded. A fault that still escapes
    (no environment, no LLM client) fails the task; the flow records it (``_drain``)."""
    from prefect.runtime import task_run

    attempt = int(task_run.run_count or 1)
    return await grow_unit(**kwargs, attempt=attempt, last_attempt=attempt > ROLLOUT_RETRIES)


def _write(store: Store, run_id: str, unit: UnitRows) -> None:
    done = [work_unit_row(run_id, unit.kind, unit.unit_id)] if unit.done else []
    store.write([*(r for rows in unit.rows.values() for r in rows), *done])


def _attempts(task: Task[..., Any], exc: BaseException) -> int:
    """Tries a unit had: Prefect retries exactly the exceptions ``_infra_only`` accepts."""
    return 1 + task.retries if isinstance(exc, InfraError) else 1


def record_failure(
    store: Store, run_id: str, unit: UnitRef, exc: BaseException, *, attempts: int
) -> UnitFailureRow:
    """Store a unit given up after its retries as a ``unit_failures`` row (not done: the next
    run of the config tries it again); returns the row."""
    store.migrate()  # a stage flow run alone may open a store from before this table
    earlier = store.read(UnitFailureRow, run_id=run_id, unit_id=unit.unit_id)
    row = unit_failure_row(run_id, unit, exc, attempts=attempts, failure=len(earlier) + 1)
    store.write([row])
    log.error(
        "%s given up after %d attempt(s) (%s, retried by the next run): %s",
        unit.unit_id,
        attempts,
        row.failure_class,
        row.error,
    )
    return row


async def _drain(
    submitted: Sequence[tuple[UnitRef, PrefectFuture[Any]]],  # an async task: its UnitRows
    task: Task[..., Any],
    store: Store,
    run_id: str,
    on_done: Callable[[UnitRows | None], None],
) -> int:
    """Write each unit's rows as it finishes (in a thread: ``as_completed`` blocks). A unit
    whose task failed after its retries is recorded as data and the others go on (one
    fault must not cost a run) and ``on_done(None)`` is called for it; returns how many
    failed. A failure to write the store is no unit's: it raises."""
    refs = {id(future): ref for ref, future in submitted}

    def drain() -> int:
        failed = 0
        errors: list[BaseException] = []
        for future in as_completed([f for _, f in submitted]):
            try:
                try:
                    rows = future.result()
                except Exception as exc:  # noqa: BLE001 - classified and recorded, run goes on
                    ref = refs[id(future)]
                    record_failure(store, run_id, ref, exc, attempts=_attempts(task, exc))
                    failed += 1
                    on_done(None)  # progress moves on; nothing to write
                    continue
                on_done(rows)
            except Exception as exc:  # noqa: BLE001 - finish the others, then raise the first
                log.error("writing a unit failed: %s", exc)
                errors.append(exc)
        if errors:
            raise errors[0]
        return failed

    return await asyncio.to_thread(drain)


def _unit_writer(
    stage: str,
    store: Store,
    run_id: str,
    total: int,
    progress: dict[str, int],
    *,
    counted: str | None = None,
) -> Callable[[UnitRows | None], None]:
    """``on_done`` for ``_drain``: write a finished unit's rows, count it (and its ``counted``
    summary figure) in ``progress`` and report the stage's progress."""

    def on_done(unit: UnitRows | None) -> None:
        if unit is None:
            progress["failed"] += 1
        else:
            _write(store, run_id, unit)
            if counted:
                progress[counted] += int(unit.summary.get(counted, 0))
        progress["done"] += 1
        notes = [f"{progress[counted]} {counted}"] if counted else []
        if progress["failed"]:
            notes.append(f"{progress['failed']} failed")
        report(stage, progress["done"], total, ", ".join(notes))

    return on_done


# --------------------------------------------------------------------------- plan


async def plan_round(
    *,
    config: RunConfig,
    llm: LLMConfig,
    run_id: str,
    round_index: int,
    clusters: Sequence[ToolCluster],
    store: Store,
    weights: dict[str, dict[str, float]] | None = None,
    api_key: SecretStr | None = None,
    cache_dir: str | None = None,
) -> int:
    """Plan ``config.tasks`` blueprints for one round, redrawing rejected ones while the
    round's attempt budget lasts (``flows.redraw``); returns the attempts run now."""
    by_id = {c.cluster_id: c for c in clusters}
    rng = random.Random(config.seed * 7_919 + round_index)
    cells = sample_cells(list(clusters), config.tasks, rng, weights)
    seeds = [plan_seed(config, round_index, i) for i in range(len(cells))]
    budget = plan_budget(config)
    given_up: set[str] = set()
    ran = 0
    while True:
        attempts, filled, spent = next_attempts(
            cells, seeds, clusters=list(clusters), round_index=round_index,
            config_seed=config.seed, budget=budget, done=store.done_units(run_id, "plan"),
            accepted_seeds=_accepted_seeds(store, run_id, round_index), given_up=given_up,
            weights=weights,
        )  # fmt: skip
        report("plan", filled, len(cells), f"{spent} attempts of {budget}")
        if not attempts:
            break
        submitted = [
            (
                UnitRef(
                    kind="plan",
                    unit_id=a.unit_id,
                    round=round_index,
                    cluster_id=a.cell.cluster_id,
                ),
                plan_task.submit(
                    config=config,
                    llm=llm,
                    run_id=run_id,
                    round_index=round_index,
                    task_index=a.slot,
                    cell=a.cell,
                    cluster=by_id[a.cell.cluster_id],
                    api_key=api_key,
                    cache_dir=cache_dir,
                    redraw=a.redraw,
                ),
            )
            for a in attempts
        ]
        wave = {"filled": filled, "spent": spent}

        def on_done(unit: UnitRows | None, wave: dict[str, int] = wave) -> None:
            if unit is not None:
                # an outside cluster's blueprint the run already holds (same calls and values;
                # a small world repeats itself) is not kept: its slot is redrawn
                unit = without_duplicate(unit, _kept_blueprints(store, run_id, unit, by_id))
                _write(store, run_id, unit)
                wave["filled"] += int(unit.summary.get("blueprint_id") is not None)
            wave["spent"] += 1
            report("plan", wave["filled"], len(cells), f"{wave['spent']} attempts of {budget}")

        await _drain(submitted, plan_task, store, run_id, on_done)
        ran += len(attempts)
        done = store.done_units(run_id, "plan")
        given_up |= {a.unit_id for a in attempts if a.unit_id not in done}
    return ran


def _kept_blueprints(
    store: Store, run_id: str, unit: UnitRows, clusters: Mapping[str, ToolCluster] | None = None
) -> list[BlueprintRow]:
    """The run's stored blueprints of the unit's cluster (their ids and gold runs); none for
    a bundled cluster of ``clusters`` (whose seed data rarely repeats a task, and whose runs
    a resumed run must match blueprint for blueprint)."""
    rows = [r for r in unit.rows.get("blueprints") or [] if isinstance(r, BlueprintRow)]
    if not rows or not store.path.exists():
        return []
    cluster = (clusters or {}).get(rows[0].cluster_id or "")
    if cluster is not None and cluster.source != "outside":
        return []
    return store.read(BlueprintRow, run_id=run_id, cluster_id=rows[0].cluster_id)


def _accepted_seeds(store: Store, run_id: str, round_index: int) -> set[int]:
    if not store.path.exists():
        return set()
    rows = store.query(
        "SELECT seed FROM blueprints WHERE run_id = ? AND round = ?", [run_id, round_index]
    )
    return {int(r["seed"]) for r in rows}


def round_blueprints(store: Store, run_id: str, round_index: int) -> list[Blueprint]:
    return store.read(Blueprint, run_id=run_id, round=round_index)


# --------------------------------------------------------------------------- rollout


async def rollout_round(
    *,
    config: RunConfig,
    llm: LLMConfig,
    run_id: str,
    round_index: int,
    clusters: Sequence[ToolCluster],
    store: Store,
    api_key: SecretStr | None = None,
    cache_dir: str | None = None,
    policy_llm: LLMConfig | None = None,
) -> int:
    """Grow (and verify) every blueprint of the round; returns the units run now.
    ``policy_llm``: the tuned policy's endpoint for the assistant role (``config.policy``)."""
    by_id = {c.cluster_id: c for c in clusters}
    blueprints = round_blueprints(store, run_id, round_index)
    samples = 1 if config.rollout_mode is RolloutMode.TREE else config.samples
    done = store.done_units(run_id, "rollout")
    jobs = [
        (bp, s)
        for bp in blueprints
        for s in range(samples)
        if rollout_unit_id(bp.blueprint_id, config.rollout_mode, s) not in done
    ]
    total = len(blueprints) * samples
    progress = {"done": total - len(jobs), "trajectories": 0, "failed": 0}
    report("rollout", progress["done"], total)
    # the leaves bar's total from the start (each unit announces itself again when it starts)
    per_unit = config.samples if config.rollout_mode is RolloutMode.TREE else 1
    expect_leaves(
        {rollout_unit_id(bp.blueprint_id, config.rollout_mode, s): per_unit for bp, s in jobs}
    )
    submitted = [
        (
            UnitRef(
                kind="rollout",
                unit_id=rollout_unit_id(bp.blueprint_id, config.rollout_mode, s),
                round=round_index,
                cluster_id=bp.cluster_id,
                blueprint_id=bp.blueprint_id,
            ),
            rollout_task.submit(
                config=config,
                llm=llm,
                run_id=run_id,
                blueprint=bp,
                cluster=by_id[bp.cluster_id],
                sample=s,
                api_key=api_key,
                cache_dir=cache_dir,
                policy_llm=policy_llm,
            ),
        )
        for bp, s in jobs
    ]

    on_done = _unit_writer("rollout", store, run_id, total, progress, counted="trajectories")
    await _drain(submitted, rollout_task, store, run_id, on_done)
    return len(jobs)


# --------------------------------------------------------------------------- stage flows


def _clusters(config: RunConfig, clusters_dir: str | None) -> list[ToolCluster]:
    from trajsynth.mcp_servers.registry import get_cluster, list_clusters

    outside = Path(clusters_dir) if clusters_dir else None
    if config.clusters:
        return [get_cluster(name, clusters_dir=outside) for name in config.clusters]
    return list_clusters(clusters_dir=outside)


def _stage_args(
    config: RunConfig, llm: LLMConfig, store_path: str, round_index: int, clusters_dir: str | None
) -> dict[str, Any]:
    """What a stage flow run on its own passes to its round function."""
    return {
        "config": config,
        "llm": llm,
        "run_id": run_id_for(config),
        "round_index": round_index,
        "clusters": _clusters(config, clusters_dir),
        "store": Store(store_path),
    }


@flow(name="plan-stage", log_prints=False, validate_parameters=False)
async def plan_stage(
    config: RunConfig,
    llm: LLMConfig,
    store_path: str,
    round_index: int = 0,
    clusters_dir: str | None = None,
    cache_dir: str | None = None,
) -> int:
    """Plan one round of a run into the store (``llm`` must name a running endpoint)."""
    return await plan_round(
        **_stage_args(config, llm, store_path, round_index, clusters_dir), cache_dir=cache_dir
    )


@flow(name="rollout-stage", log_prints=False, validate_parameters=False)
async def rollout_stage(
    config: RunConfig,
    llm: LLMConfig,
    store_path: str,
    round_index: int = 0,
    clusters_dir: str | None = None,
    cache_dir: str | None = None,
) -> int:
    """Grow and verify the round's planned blueprints (``llm`` must name a running endpoint)."""
    return await rollout_round(
        **_stage_args(config, llm, store_path, round_index, clusters_dir), cache_dir=cache_dir
    )


@flow(name="verify-stage", log_prints=False, validate_parameters=False)
def verify_stage(store_path: str, run_id: str) -> dict[str, int]:
    """Judge a run's stored trajectories again from their stored final states (after a
    change of the verifier or of constraints) and report how many verdicts would differ."""
    from trajsynth.curation.verify import verify
    from trajsynth.schemas import EnvState, Trajectory, Verdict

    store = Store(store_path)
    in_run = "SELECT {} FROM trajectories WHERE run_id = ?"
    with store.session(read_only=True):
        trajectories = store.read(Trajectory, run_id=run_id)
        verdicts = store.read(
            Verdict, f"trajectory_id IN ({in_run.format('trajectory_id')})", [run_id]
        )
        constraints = {
            b.blueprint_id: b.constraints
            for b in store.read(
                Blueprint,
                f"blueprint_id IN ({in_run.format('blueprint_id')})",
                [run_id],
                on_error=lambda key, exc: None,
            )
        }
        states = {
            s.state_hash: s.state
            for s in store.read(
                FinalStateRow, f"state_hash IN ({in_run.format('final_state_hash')})", [run_id]
            )
        }
    by_id = {t.trajectory_id: t for t in trajectories}
    checked = changed = 0
    for stored in verdicts:
        trajectory = by_id[stored.trajectory_id]
        state = states.get(trajectory.final_state_hash or "")
        if state is None or trajectory.blueprint_id not in constraints:
            continue
        verdict = verify(
            trajectory, constraints[trajectory.blueprint_id], EnvState.model_validate(state)
        )
        checked += 1
        changed += int(verdict.passed != stored.passed)
    return {"checked": checked, "changed": changed}


@task(name="curate-round", retries=0)
def curate_task(store_path: str, run_id: str, round_index: int, config: RunConfig) -> Any:
    from trajsynth.flows.curate import curate_round

    return curate_round(Store(store_path), run_id, round_index, config.curation)


@flow(name="curate-stage", log_prints=False, validate_parameters=False)
def curate_stage(store_path: str, run_id: str, round_index: int, config: RunConfig) -> Any:
    """Signals, topology, diversity and selection of one round (``flows.curate``)."""
    return curate_task(store_path, run_id, round_index, config)


@flow(name="export-stage", log_prints=False, validate_parameters=False)
def export_stage(
    store_path: str, out_dir: str, run_id: str | None = None, overwrite: bool = True
) -> Any:
    """Write the SFT and RL datasets and their card (``export``)."""
    from trajsynth.export import EmptySelectionError, export_dataset

    try:
        return export_dataset(Store(store_path), Path(out_dir), run_id=run_id, overwrite=overwrite)
    except EmptySelectionError as exc:
        # a scheduled export that fires before curation selected anything has nothing to
        # write; that is not a failure of the deployment
        log.warning("export skipped: %s", exc)
        return {"skipped": str(exc)}


@flow(name="train-stage", log_prints=False, validate_parameters=False)
def train_stage(config_path: str | None = None, smoke: bool = False) -> dict[str, Any]:
    """GRPO (``training``) on the RL rows of a TOML config, or the CPU smoke setting."""
    from trajsynth.training.grpo import load_train_config, run_grpo
    from trajsynth.training.run import smoke_config

    if smoke:
        config = smoke_config()
    elif config_path:
        config = load_train_config(Path(config_path))
    else:
        raise InputError("train-stage needs config_path or smoke=True")
    result = run_grpo(config)
    return {
        "steps": len(result.steps),
        "seconds_per_step": result.seconds_per_step,
        "rewards": [s.reward for s in result.steps],
        "output_dir": result.output_dir,
    }
