"""A policy acts out held-out tasks, scored by the verifier that made the data (methods.md §15).

``plan_eval_tasks`` plans tasks of the given clusters from seeds the training data never
used (the planner's seeded gold path and template words, no LLM). ``evaluate`` acts each task
out ``samples`` times in a live sandboxed environment (``agents.rollout.run_episode``: the
user simulator on the run's model, the assistant on the policy) and scores every try with
``curation.verify`` against the task's constraints. Tries the verifier cannot count
(``infra``, ``simulator``) are excluded, never scored 0. ``training.eval.summarize`` turns
the tries into pass@1 and pass@k with 95% intervals.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence

from trajsynth.agents.assistant import Assistant
from trajsynth.agents.context import shown_tools
from trajsynth.agents.policy import RoleRoutedLLM
from trajsynth.agents.rollout import run_episode
from trajsynth.agents.user_sim import UserSimulator
from trajsynth.curation.verify import verify
from trajsynth.llm.client import LLMClient
from trajsynth.mcp_servers.environment import open_environment
from trajsynth.planning.cells import sample_cells
from trajsynth.planning.gold import TemplateUser
from trajsynth.planning.planner import Planner, environment_factory, plan_blueprint
from trajsynth.schemas import (
    Blueprint,
    Budgets,
    EnvState,
    FailureClass,
    InfraError,
    InputError,
    SandboxKind,
    ToolCluster,
    counts_against_policy,
    stable_hash,
)
from trajsynth.schemas.evals import TryResult

__all__ = ["EVAL_SEED_BASE", "eval_assistant", "evaluate", "plan_eval_tasks"]

log = logging.getLogger(__name__)

EVAL_SEED_BASE = 900_000_000
"""Eval tasks are planned from seeds at and above this; `synth run` seeds stay far below."""


async def plan_eval_tasks(
    clusters: Sequence[ToolCluster],
    n_per_cluster: int,
    *,
    seed: int = 0,
    sandbox_kind: SandboxKind = SandboxKind.AUTO,
    max_tries: int = 6,
    seed_base: int | None = None,
) -> list[Blueprint]:
    """``n_per_cluster`` distinct tasks per cluster, planned from held-out seeds (no LLM).

    Seeds start at ``seed_base`` (default ``EVAL_SEED_BASE``, far above any ``synth run``
    seed); the whole draw (cells and environment seeds) depends on ``seed`` and ``seed_base``,
    so another eval seed plans other exercises. A seed whose task repeats an earlier one's
    tool path and constraints (``Blueprint.signature``; one in eight of travel's) is
    skipped: it is the same exercise, its tries are not independent of the first's, and
    counting it twice would narrow pass@1's interval on nothing. Fewer than ``n_per_cluster``
    come back only when ``max_tries`` draws per task found no more. Raises ``InputError``
    naming a cluster where no task could be planned."""
    base = EVAL_SEED_BASE if seed_base is None else seed_base
    planner = Planner(use_llm=False, gold_retries=2)
    out: list[Blueprint] = []
    planned: set[str] = set()
    for ci, cluster in enumerate(clusters):
        # the cell draw (path shape, goal template, difficulty) depends on the seed base and
        # the eval seed as the environment's data does: seeded with the cluster alone, draw d
        # of the eval planner would repeat training draw d's exercise with other entities
        rng = random.Random(stable_hash([cluster.cluster_id, seed, base]))
        got = 0
        for draw in range(n_per_cluster * max_tries):
            if got >= n_per_cluster:
                break
            task_seed = base + seed * 100_003 + ci * 10_007 + draw
            (cell,) = sample_cells([cluster], 1, rng)
            factory = environment_factory(cluster, sandbox_kind=sandbox_kind, seed=task_seed)
            outcome = await plan_blueprint(planner, None, factory, cluster, cell, task_seed)
            if isinstance(outcome, Blueprint):
                signature = outcome.signature()
                if signature in planned:
                    log.debug(
                        "eval plan %s: seed %d repeats a planned task",
                        cluster.cluster_id,
                        task_seed,
                    )
                    continue
                planned.add(signature)
                out.append(outcome)
                got += 1
            else:
                log.debug("eval plan %s rejected: %s", cluster.cluster_id, outcome.reason)
        if got == 0:
            raise InputError(f"cluster {cluster.cluster_id!r}: no eval task could be planned")
    return out


def eval_assistant(embedded: bool, *, tuned: bool = False) -> Assistant:
    """The assistant of an eval. The embedded base model must call a tool after the user
    speaks (SmolLM2-135M almost never calls by itself) and is free after a tool result, so
    it answers from the result. A ``tuned`` policy (trained here, served in the layout its
    rows were rendered in) decides for itself at every turn: it learned when to call and when
    to ask, and a task whose facts the user holds back starts with a question, which
    "required" would forbid. Elsewhere (an endpoint) the assistant is free."""
    if tuned or not embedded:
        return Assistant(tool_choice_after_user="auto", tool_choice_after_tool="auto")
    return Assistant(tool_choice_after_user="required", tool_choice_after_tool="auto")


async def evaluate(
    tasks: Sequence[Blueprint],
    clusters: dict[str, ToolCluster],
    llm: LLMClient,
    *,
    samples: int,
    run_id: str,
    assistant: Assistant | None = None,
    budgets: Budgets | None = None,
    sandbox_kind: SandboxKind = SandboxKind.AUTO,
    template_user: bool = False,
    on_try: Callable[[TryResult], None] | None = None,
    context_tokens: int | None = None,
    distractors: int | None = None,
) -> list[TryResult]:
    """Act every task out ``samples`` times and verify each try (see the module doc).

    ``template_user``: the user's turns come from ``planning.gold.TemplateUser`` (reveals what
    is asked, then thanks) instead of the simulator on ``llm``: no model in the user's seat,
    so policies are compared on the assistant alone, at half the LLM calls.
    ``context_tokens``: the model's context, when known (tools fitted to it,
    ``agents.context``); ``distractors``: always list the needed tools plus that many nearest
    (``LLMConfig.distractors``: evaluate with the view the training rows were made with)."""
    if not tasks:
        raise InputError("nothing to evaluate: the split has no tasks")
    assistant = assistant or eval_assistant(True)
    budgets = budgets or Budgets(max_turns=4, max_tokens=1500)
    results: list[TryResult] = []
    for task in tasks:
        cluster = clusters[task.cluster_id]
        task_llm: LLMClient = RoleRoutedLLM(llm, TemplateUser(task)) if template_user else llm
        for sample in range(samples):
            try:
                result = await _one_try(
                    task, cluster, task_llm, assistant, budgets, run_id, sample, sandbox_kind,
                    context_tokens, distractors,
                )  # fmt: skip
            except InfraError as exc:
                result = TryResult(
                    task_id=task.blueprint_id,
                    cluster_id=task.cluster_id,
                    sample=sample,
                    passed=False,
                    score=0.0,
                    excluded=True,
                    failure_class=FailureClass.INFRA,
                    detail=str(exc)[:300],
                )
            results.append(result)
            if on_try is not None:
                on_try(result)
    return results


async def _one_try(
    task: Blueprint,
    cluster: ToolCluster,
    llm: LLMClient,
    assistant: Assistant,
    budgets: Budgets,
    run_id: str,
    sample: int,
    sandbox_kind: SandboxKind,
    context_tokens: int | None = None,
    distractors: int | None = None,
) -> TryResult:
    async with open_environment(
        cluster, sandbox_kind=sandbox_kind, seed=task.seed, tool_timeout_s=budgets.tool_timeout_s
    ) as env:
        episode = await run_episode(
            blueprint=task,
            env=env,
            llm=llm,
            assistant=assistant,
            user_sim=UserSimulator(),
            budgets=budgets,
            run_id=run_id,
            sample=sample,
            shown=shown_tools(
                task, env.tools, context_tokens=context_tokens, distractors=distractors
            ),
        )
    trajectory = episode.trajectory
    state = episode.final_state or EnvState(state_hash="unavailable", readable=False)
    verdict = verify(trajectory, task.constraints, state)
    failure = trajectory.failure_class
    excluded = verdict.excluded or (failure is not None and not counts_against_policy(failure))
    return TryResult(
        task_id=task.blueprint_id,
        cluster_id=task.cluster_id,
        sample=sample,
        passed=bool(verdict.passed) and not excluded,
        score=float(verdict.score),
        excluded=excluded,
        failure_class=str(failure) if failure is not None else None,
        detail=trajectory.failure_detail,
        tokens=trajectory.total_tokens,
        trajectory_id=trajectory.trajectory_id,
    )
