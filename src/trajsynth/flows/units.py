"""The units of work the stage flows hand to Prefect's task runner, as plain functions.

Each takes plain records (picklable, so a Dask or Ray worker can run it), builds its own LLM
client against the endpoint the flow resolved, and RETURNS the rows it made, typed (the store's
row models, ``store.rows``); the flow writes them with ``Store.write``, one transaction per
unit with its done-marker. Workers never open DuckDB.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, SecretStr, SerializeAsAny

from trajsynth.agents.assistant import Assistant
from trajsynth.agents.context import shown_tools
from trajsynth.agents.judge import (
    JudgedTree,
    Judgements,
    Verified,
    judge,
    judge_episode,
    judge_tree,
    leaf_outcome,
)
from trajsynth.agents.model_judge import judge_trajectories
from trajsynth.agents.policy import RoleRoutedLLM
from trajsynth.agents.rollout import Episode, EpisodeResult, run_episode
from trajsynth.agents.tree import TreeResult, grow_tree
from trajsynth.agents.user_sim import UserSimulator
from trajsynth.flows.progress import TurnReporter, leaf, unit_leaves
from trajsynth.flows.redraw import attempt_seed, attempt_unit_id
from trajsynth.llm.client import LLMClient, open_llm_client
from trajsynth.mcp_servers.environment import open_environment
from trajsynth.planning.planner import (
    Planner,
    accepted_attempt,
    environment_factory,
    plan_blueprint,
)
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
    RunConfig,
    ToolCluster,
    Trajectory,
    TrajsynthError,
    Verdict,
    content_id,
    counts_against_policy,
    stable_hash,
)
from trajsynth.store.rows import (
    BlueprintAttemptRow,
    BlueprintRow,
    FinalStateRow,
    LLMCallRow,
    NodeRow,
    Row,
    TrajectoryRow,
    TreeRow,
    UnitFailureRow,
    VerdictRow,
)

__all__ = [
    "UnitRef",
    "UnitRows",
    "assistant_for",
    "blueprint_key",
    "request_key",
    "failure_class_of",
    "grow_unit",
    "plan_seed",
    "plan_unit",
    "rollout_unit_id",
    "run_id_for",
    "unit_failure_row",
    "without_duplicate",
]

log = logging.getLogger(__name__)


class UnitRows(BaseModel):
    """What one unit of work made: its rows (row models) per store table, and its done-marker."""

    model_config = ConfigDict(frozen=True)

    unit_id: str
    kind: str
    rows: dict[str, list[SerializeAsAny[Row]]]
    summary: dict[str, Any] = {}
    done: bool = True  # False: recorded but to be tried again by the next run of the config


def run_id_for(config: RunConfig) -> str:
    """The same config (seeds included) is the same run: rerunning it resumes."""
    return f"run_{config.config_hash()}"


def assistant_for(config: RunConfig) -> Assistant:
    """The assistant of a run. The embedded 135M model needs its tool use steered: it almost
    never calls a tool when free to, and repeats calls instead of answering after a result.
    A tuned policy (``config.policy``, served in the layout it was trained in) decides for
    itself at every turn, as in ``synth eval`` (``planning.heldout.eval_assistant``): it can
    ask for what the user held back, chain calls, and answer."""
    tuned = config.policy is not None
    embedded = config.llm.base_url is None and not tuned
    after_user = config.assistant_tool_choice or ("required" if embedded else "auto")
    after_tool = config.assistant_tool_choice_after_tool or ("none" if embedded else "auto")
    return Assistant(tool_choice_after_user=after_user, tool_choice_after_tool=after_tool)


def user_for(config: RunConfig) -> UserSimulator:
    """The simulated user of a run. The embedded 135M model never writes the stop marker: left
    to it, every dialogue runs to the turn budget on small talk, and the assistant answers it
    by calling its tools again. So unless ``[run] user_stop_when_met`` says otherwise, the
    embedded user thanks and stops once the goal's mid-dialogue checks hold; an endpoint's
    model ends the dialogue itself."""
    stop = config.user_stop_when_met
    if stop is None:
        stop = config.llm.base_url is None
    return UserSimulator(resamples=config.user_resamples, stop_when_met=stop)


@contextlib.asynccontextmanager
async def _client(
    llm: LLMConfig,
    api_key: SecretStr | None,
    cache_dir: str | None,
    policy_llm: LLMConfig | None = None,
) -> AsyncIterator[LLMClient]:
    """The unit's LLM client; with ``policy_llm`` the assistant's turns go to the tuned
    policy's server and the planner's and user simulator's to ``llm`` (``RoleRoutedLLM``)."""
    for endpoint in (llm, policy_llm):
        if endpoint is not None and endpoint.base_url is None:
            raise InfraError("a unit of work needs a resolved LLM endpoint (the flow starts it)")
    cache = Path(cache_dir) if cache_dir else None
    async with open_llm_client(llm, api_key=api_key, cache_dir=cache) as client:
        if policy_llm is None:
            yield client
            return
        # the policy's server is local (llama.cpp); the run's key is for the run's endpoint
        async with open_llm_client(policy_llm, cache_dir=cache) as policy:
            yield RoleRoutedLLM(policy, client)


def _usage_rows(run_id: str, owner: str, usage: list[LLMUsage]) -> list[Row]:
    return [
        LLMCallRow.of(u, call_key=f"{owner}#{i}", run_id=run_id, trajectory_id=owner)
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


def _blueprint_row(bp: Blueprint, run_id: str) -> BlueprintRow:
    return BlueprintRow.of(
        bp,
        run_id=run_id,
        difficulty=bp.cell.difficulty.value,
        path_shape=bp.cell.path_shape.value,
        target_mode=bp.cell.target_mode.value,
    )


def _attempt_row(attempt: BlueprintAttempt, run_id: str) -> BlueprintAttemptRow:
    return BlueprintAttemptRow.of(attempt, run_id=run_id)


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
    redraw: int = 0,
) -> UnitRows:
    """Plan one blueprint (or record why it was rejected); ``redraw`` > 0: a redraw of the
    task's slot after its earlier attempts were rejected (``flows.redraw``)."""
    seed = attempt_seed(plan_seed(config, round_index, task_index), redraw)
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
    unit_id = attempt_unit_id(round_index, task_index, redraw)
    owner = f"plan:{run_id}:{unit_id.removeprefix('plan:')}"
    return UnitRows(
        unit_id=unit_id,
        kind="plan",
        rows={
            "blueprints": [_blueprint_row(b, run_id) for b in blueprints],
            "blueprint_attempts": [_attempt_row(attempt, run_id)],
            "llm_calls": _usage_rows(run_id, owner, list(outcome.usage)),
        },
        summary={
            "blueprint_id": blueprints[0].blueprint_id if blueprints else None,
            "seed": seed,
            "reason": None if blueprints else attempt.reason,
        },
    )


def blueprint_key(row: Row | Mapping[str, Any]) -> str:
    """What makes two blueprints the same task: the cluster and the gold run's calls (tools
    in order, every argument value). Cells, seeds and words do not tell them apart."""
    if isinstance(row, Row):
        row = row.model_dump(include={"cluster_id", "gold_run"})
    gold = row.get("gold_run") or {}
    if isinstance(gold, str):
        gold = json.loads(gold)
    calls = [[c.get("tool"), c.get("arguments") or {}] for c in gold.get("calls") or []]
    return stable_hash([row.get("cluster_id"), calls])


def request_key(row: Row | Mapping[str, Any]) -> str:
    """What makes two blueprints the same request to the user: the cluster, the goal's words
    (case and spacing aside) and what the user holds back. Two gold paths to one outcome
    ("Please delete the entity "Ada Lovelace"." planned over ``read_graph`` and over
    ``open_nodes``) are one task to the person asking."""
    if isinstance(row, Row):
        row = row.model_dump(include={"cluster_id", "goal", "hidden_info"})
    hidden = row.get("hidden_info") or {}
    if isinstance(hidden, str):
        hidden = json.loads(hidden)
    goal = " ".join(str(row.get("goal") or "").casefold().split())
    return stable_hash([row.get("cluster_id"), goal, hidden])


def without_duplicate(unit: UnitRows, kept: Iterable[BlueprintRow]) -> UnitRows:
    """A plan unit whose blueprint repeats one of ``kept`` (``blueprint_key``: the same calls
    and values; ``request_key``: the same words and held-back facts) as a rejected attempt
    (reason ``duplicate``): the blueprint is not stored and the slot is redrawn."""
    rows = unit.rows.get("blueprints") or []
    if unit.kind != "plan" or not rows:
        return unit
    key, request = blueprint_key(rows[0]), request_key(rows[0])
    kept = list(kept)
    twin = next((k for k in kept if blueprint_key(k) == key), None)
    if twin is not None:
        detail = f"the same tool path and values as {twin.blueprint_id}"
    else:
        twin = next((k for k in kept if request_key(k) == request), None)
        if twin is None:
            return unit
        detail = f"the same request as {twin.blueprint_id} (its words and held-back facts)"
    attempts = [
        a.model_copy(update={"accepted": False, "reason": "duplicate", "detail": detail})
        for a in unit.rows.get("blueprint_attempts") or []
    ]
    return unit.model_copy(
        update={
            "rows": {**unit.rows, "blueprints": [], "blueprint_attempts": attempts},
            "summary": {**unit.summary, "blueprint_id": None, "reason": "duplicate"},
        }
    )


# --------------------------------------------------------------------------- rollouts


def rollout_unit_id(blueprint_id: str, mode: RolloutMode, sample: int = 0) -> str:
    """Tree mode grows one tree per blueprint; linear mode one rollout per sample."""
    if mode is RolloutMode.TREE:
        return f"tree:{blueprint_id}"
    return f"rollout:{blueprint_id}:{sample}"


def _trajectory_row(trajectory: Trajectory) -> TrajectoryRow:
    return TrajectoryRow.of(
        trajectory, n_calls=len(trajectory.calls), total_tokens=trajectory.total_tokens
    )


def _state_rows(states: list[EnvState | None]) -> list[FinalStateRow]:
    return [
        FinalStateRow(state_hash=s.state_hash, state=s.model_dump(mode="json"))
        for s in states
        if s is not None and s.readable
    ]


def _judged_rows(
    run_id: str, judged: JudgedTree, owner: str, usage: list[LLMUsage]
) -> dict[str, list[Row]]:
    return {
        "trees": [TreeRow.of(judged.tree)],
        "nodes": [NodeRow.of(n) for n in judged.nodes],
        "trajectories": [_trajectory_row(t) for t in judged.trajectories],
        "verdicts": [VerdictRow.of(v) for v in judged.verdicts],
        "final_states": list(_state_rows(judged.final_states)),
        "llm_calls": list(_usage_rows(run_id, owner, usage)),
    }


def _tree_rows(
    run_id: str,
    blueprint: Blueprint,
    result: TreeResult,
    attempt: int,
    judgements: Judgements | None = None,
    verified: Verified | None = None,
) -> dict[str, list[Row]]:
    judged = judge_tree(blueprint, result, attempt, judgements, verified)
    return _judged_rows(run_id, judged, result.tree.tree_id, result.usage)


def _linear_rows(
    run_id: str,
    blueprint: Blueprint,
    result: EpisodeResult,
    attempt: int,
    judgements: Judgements | None = None,
    verified: Verified | None = None,
) -> dict[str, list[Row]]:
    judged = judge_episode(blueprint, result, attempt, judgements, verified)
    return _judged_rows(run_id, judged, judged.trajectories[0].trajectory_id, result.usage)


async def model_judgements(
    config: RunConfig,
    llm: LLMConfig,
    api_key: SecretStr | None,
    trajectories: list[Trajectory],
    cache_dir: str | None = None,
) -> tuple[Judgements, list[LLMUsage]]:
    """The model judge's results for ``trajectories`` (``[run.judge]``; empty when off).
    The judge's endpoint is ``judge.base_url`` (its key from the variable ``api_key_env``
    names; the run's key never leaves for another endpoint), else the run's own."""
    judge_cfg = config.judge
    if not judge_cfg.enabled or not trajectories:
        return {}, []
    if judge_cfg.base_url is None:
        endpoint, key = llm, api_key
    else:
        endpoint = llm.model_copy(update={"base_url": judge_cfg.base_url, "logprobs": False})
        value = os.environ.get(judge_cfg.api_key_env) if judge_cfg.api_key_env else None
        key = SecretStr(value) if value else None
    endpoint = endpoint.model_copy(
        update={"model": judge_cfg.model or endpoint.model, "timeout_s": judge_cfg.timeout_s}
    )
    cache = Path(cache_dir) if cache_dir else None
    async with open_llm_client(endpoint, api_key=key, cache_dir=cache) as client:
        counting = _CountingLLM(client)
        results = await judge_trajectories(counting, trajectories, judge_cfg, model=endpoint.model)
    return results, counting.usage


class _CountingLLM:
    """The judge's client, keeping each call's usage (the verifier role's cost)."""

    def __init__(self, inner: LLMClient) -> None:
        self.inner = inner
        self.usage: list[LLMUsage] = []

    async def chat(self, *args: Any, **kwargs: Any) -> Any:
        result = await self.inner.chat(*args, **kwargs)
        self.usage.append(result.usage)
        return result


class UnitRef(BaseModel):
    """Which unit a submitted task is: what a failure row needs when its task raised."""

    model_config = ConfigDict(frozen=True)

    kind: str
    unit_id: str
    round: int
    cluster_id: str | None = None
    blueprint_id: str | None = None


def failure_class_of(exc: BaseException) -> str:
    """The taxonomy's class of an exception (``schemas.failures``); ``error`` for one that has
    none (a bug), so it is recorded and retried like the rest instead of ending the run."""
    known = exc.failure_class if isinstance(exc, TrajsynthError) else None
    return known.value if known is not None else "error"


def unit_failure_row(
    run_id: str, unit: UnitRef, exc: BaseException, *, attempts: int, failure: int
) -> UnitFailureRow:
    """The ``unit_failures`` row of a unit given up after ``attempts`` tries: its class, the
    error on one line, and which failure of the unit it is (the unit is not marked done, so
    the next run of the config tries it again and a second failure is a second row)."""
    lines = str(exc).strip().splitlines()
    message = f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    # a lone surrogate (model output quoted in an error) cannot be stored as UTF-8
    message = message.encode("utf-8", "replace").decode("utf-8")[:300]
    key = {"run_id": run_id, "unit_id": unit.unit_id, "failure": failure}
    return UnitFailureRow(
        failure_id=content_id("fail", key),
        run_id=run_id,
        round=unit.round,
        kind=unit.kind,
        unit_id=unit.unit_id,
        blueprint_id=unit.blueprint_id,
        cluster_id=unit.cluster_id,
        failure=failure,
        failure_class=failure_class_of(exc),
        error_type=type(exc).__name__,
        error=message,
        attempts=attempts,
        failed_at=datetime.now(UTC).replace(tzinfo=None),
    )


def context_tokens(config: RunConfig) -> int | None:
    """The model's context when the run knows it: the embedded server's ``embedded_ctx``
    (an endpoint's own context is not known here; its tools are all shown)."""
    return config.llm.embedded_ctx if config.llm.base_url is None else None


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
    policy_llm: LLMConfig | None = None,
) -> UnitRows:
    """Act one blueprint out (its tree, or one linear sample), verify every leaf, and return
    the rows. An infra fault raises ``InfraError`` unless this is the last attempt; then the
    faulty leaves are kept, judged as excluded (never counted against the policy), when
    other leaves were grown whole; a unit whose every leaf hit one raises even then.
    ``policy_llm``: the tuned policy's resolved endpoint, for the assistant role only."""
    mode = config.rollout_mode
    label = rollout_unit_id(blueprint.blueprint_id, mode, sample)
    verified: dict[str, Verdict] = {}  # each leaf is verified once, as it ends
    # a retry announces its leaves again; an attempt that raises gives back what it did not grow
    with unit_leaves(label, config.samples if mode is RolloutMode.TREE else 1):
        async with (
            _client(llm, api_key, cache_dir, policy_llm) as client,
            open_environment(
                cluster,
                sandbox_kind=config.sandbox,
                limits=config.sandbox_limits,
                seed=blueprint.seed,
                tool_timeout_s=config.budgets.tool_timeout_s,
                pool=sandbox_pool_for(config),
            ) as env,
        ):
            client = TurnReporter(client, blueprint.blueprint_id)  # a line that moves every turn
            assistant = assistant_for(config)
            user_sim = user_for(config)
            budget = unit_token_budget(config)
            shown = shown_tools(
                blueprint,
                env.tools,
                context_tokens=context_tokens(config),
                distractors=config.llm.distractors,
            )
            if mode is RolloutMode.TREE:
                episode = Episode(
                    blueprint, env, client, assistant, user_sim, config.budgets,
                    tuple(shown) if shown else None,
                )  # fmt: skip
                tree, _ = await grow_tree(
                    episode,
                    config.tree.model_copy(update={"max_tree_tokens": budget}),
                    leaves=config.samples,
                    run_id=run_id,
                    reply_token_cap=assistant.max_tokens or config.llm.max_tokens,
                    on_leaf=lambda grown: _report_leaf(
                        blueprint, attempt, label, grown.trajectory, grown.final_state, verified
                    ),
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
                    shown=shown,
                )
                trajectories = [result.trajectory]
                _report_leaf(
                    blueprint, attempt, label, result.trajectory, result.final_state, verified
                )
        infra = [t for t in trajectories if t.failure_class is FailureClass.INFRA]
        if infra and (not last_attempt or len(infra) == len(trajectories)):
            # a unit with no leaf but infra faults made nothing: it fails (recorded by the flow,
            # not done, so the next run grows it again) rather than storing a tree of nothing
            raise InfraError(f"{blueprint.blueprint_id}: {infra[0].failure_detail}")
        judgements, judge_usage = await model_judgements(
            config, llm, api_key, trajectories, cache_dir
        )
        if mode is RolloutMode.TREE:
            rows = _tree_rows(run_id, blueprint, tree, attempt, judgements, verified)
        else:
            rows = _linear_rows(run_id, blueprint, result, attempt, judgements, verified)
        if judge_usage:
            owner = f"judge:{rollout_unit_id(blueprint.blueprint_id, mode, sample)}"
            rows["llm_calls"] += _usage_rows(run_id, owner, judge_usage)
        return UnitRows(
            unit_id=rollout_unit_id(blueprint.blueprint_id, mode, sample),
            kind="rollout",
            rows=rows,
            summary=_rollout_summary(rows),
        )


def _rollout_summary(rows: Mapping[str, list[Row]]) -> dict[str, Any]:
    """A rollout unit's leaves: how many, passed, counted against the policy."""
    verdicts = [v for v in rows["verdicts"] if isinstance(v, VerdictRow)]
    trajectories = [t for t in rows["trajectories"] if isinstance(t, TrajectoryRow)]
    return {
        "trajectories": len(verdicts),
        "passed": sum(1 for v in verdicts if v.passed and not v.excluded),
        "counted": sum(
            1
            for v, t in zip(verdicts, trajectories, strict=True)
            if not v.excluded
            and (v.passed or counts_against_policy(_failure_class(t.failure_class)))
        ),
    }


def _failure_class(value: str | None) -> FailureClass | None:
    return FailureClass(value) if value else None


def _report_leaf(
    blueprint: Blueprint,
    attempt: int,
    label: str,
    trajectory: Trajectory,
    state: EnvState | None,
    verified: dict[str, Verdict],
) -> None:
    """Verifies a leaf as it ends and shows its outcome; the verdict is kept in ``verified``
    for the stored rows, which add the model judge's result (if any) once the unit is done."""
    judged, verdict = judge(blueprint, trajectory, state, attempt)
    verified[trajectory.trajectory_id] = verdict
    leaf(label, leaf_outcome(judged, verdict))
