"""The planner: from a cell to a blueprint whose success can be checked without a model.

docs/methods.md §3 (blueprints), steps 1-10, and §4 (constraints derived from the gold run). The
tool path is sampled in code (``planning.paths``), run once in a fresh environment to record the
ground truth (``planning.gold``), the constraints are derived from that run
(``planning.constraints``) and linted against the initial state (``curation.constraint_lint``);
only then does the planner LLM write persona, goal and hidden info (``planning.words``). A draft
that fails its checks is retried with a fresh seed; after ``retries`` the words come from a
deterministic template, and the blueprint records which. A path that cannot be bound, whose
gold run fails or whose constraints do not lint is returned as a ``BlueprintAttempt`` with the
reason — the validity rate of §6 is computed from those rows.

``Planner`` is configuration only (prompts, sampling, retries); ``plan_blueprint`` runs it.
"""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Literal, NamedTuple, Protocol

import networkx as nx
from pydantic import BaseModel, ConfigDict, Field

from trajsynth.curation.canon import leaf_paths, parse_json_maybe, value_at
from trajsynth.curation.constraint_lint import lint_constraints
from trajsynth.llm.client import LLMClient
from trajsynth.mcp_servers.environment import open_environment
from trajsynth.mcp_servers.graph import dependency_graph
from trajsynth.planning.admission import (
    Refusal,
    copied_status,
    copy_over,
    creates_existing,
    empty_read,
    look_first,
    noop_write,
    repeated_call,
    same_ends,
    two_users,
    unrelated_reads,
    unseen_write,
)
from trajsynth.planning.argfill import fill_slots, unfilled
from trajsynth.planning.constraints import derive_constraints
from trajsynth.planning.equivalent_reads import with_equivalent_reads
from trajsynth.planning.gold import (
    GoldFailure,
    GoldResult,
    observation_value,
    run_gold_path,
)
from trajsynth.planning.mutants import ReadbackSearch, find_readback, lint_by_mutation
from trajsynth.planning.paths import PlannedPath, Rejection, declared_properties, sample_path
from trajsynth.planning.words import (
    Answer,
    Words,
    WordsSpec,
    build_messages,
    check_words,
    parse_words,
    pick_answer,
    template_words,
    words_spec,
)
from trajsynth.sandboxes.pool import SandboxPool
from trajsynth.schemas import (
    AgentRole,
    Blueprint,
    BlueprintAttempt,
    Cell,
    Constraint,
    EnvState,
    FinalState,
    GoldCall,
    LLMUsage,
    MutationLint,
    ObservedField,
    PathShape,
    ProbeCall,
    ReasoningMode,
    Record,
    SandboxKind,
    SandboxLimits,
    SnapshotHandle,
    ToolAccess,
    ToolCluster,
    content_id,
    stable_hash,
)
from trajsynth.schemas.clock import reads_the_clock

__all__ = [
    "DEFAULT_PROMPT",
    "DEFAULT_SYSTEM_PROMPT",
    "EnvFactory",
    "Planner",
    "accepted_attempt",
    "environment_factory",
    "plan_blueprint",
]

log = logging.getLogger(__name__)

DEFAULT_SYSTEM_PROMPT = (
    "You write realistic requests that a user sends to a customer-service assistant. "
    "Reply with one JSON object and nothing else."
)
DEFAULT_PROMPT = """Service: {description}
What the assistant will have to do (it works out the steps itself):
{steps}
Facts the user knows:
{facts}
{question}{mode}
Write the user's side. Reply with JSON only:
{{"persona": "who the user is, in one sentence", "goal": "what the user asks for, in their own \
words, one or two sentences", "hidden_info": {{"<fact name>": "<value>"}}}}
Rules: never name a tool or function; never mention ids the user would not know; every fact \
must appear word for word in the goal or be listed in hidden_info."""


class PlannerEnvironment(Protocol):
    """What the planner needs of ``mcp_servers.environment.Environment``."""

    async def call_tool(self, name: str, arguments: dict) -> Any: ...

    async def state(self) -> EnvState: ...

    async def snapshot(self) -> SnapshotHandle: ...

    async def restore(self, handle: SnapshotHandle) -> None: ...

    async def read_probes(self, probes: list[ProbeCall]) -> EnvState: ...

    async def run_check(self, check_id: str, source: str) -> bool: ...


EnvFactory = Callable[[], AbstractAsyncContextManager[PlannerEnvironment]]
"""Opens a fresh environment of the cluster in its initial state (``async with``)."""


class Planner(BaseModel):
    """How the planner writes blueprints: prompts, sampling and retries (configuration only)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    prompt_template: str = Field(
        default=DEFAULT_PROMPT,
        description="str.format template: {description} {steps} {facts} {question} {mode}",
    )
    temperature: float = Field(default=0.7, ge=0.0, le=2.0)
    max_tokens: int = Field(default=256, ge=16)
    retries: int = Field(default=2, ge=0, description="LLM drafts after the first, then template")
    use_llm: bool = Field(default=True, description="False: template words only, no LLM call")
    path_tries: int = Field(default=8, ge=1, description="drafts of the path per sampling")
    # 14: on the bundled clusters (60 attempts, template words, in-process) attempts rejected
    # for their gold run fell from 14 with 6 retries to 9 with 14 and 7 with 24; a retry
    # restores a snapshot in the open sandbox, cheaper than a redraw's new unit
    gold_retries: int = Field(
        default=14, ge=0, description="new paths after a failed gold run (environment restored)"
    )
    min_turns: int = Field(default=4, ge=1)
    mutation_lint: Literal["outside", "all", "off"] = Field(
        default="outside",
        description="which clusters' blueprints face the mutation lint (planning.mutants)",
    )


def _rng(cluster: ToolCluster, cell: Cell, seed: int, round_: int) -> random.Random:
    return random.Random(
        stable_hash([cluster.cluster_id, cell.model_dump(mode="json"), seed, round_])
    )


def _attempt(
    cluster: ToolCluster,
    cell: Cell,
    seed: int,
    round_: int,
    reason: str,
    detail: str = "",
    usage: list[LLMUsage] | None = None,
) -> BlueprintAttempt:
    key = {"cluster_id": cluster.cluster_id, "cell": cell.model_dump(mode="json"), "seed": seed}
    key["round"] = round_
    log.debug("blueprint rejected for %s seed %d: %s %s", cell, seed, reason, detail[:200])
    return BlueprintAttempt(
        attempt_id=content_id("bpa", key),
        cluster_id=cluster.cluster_id,
        cell=cell,
        seed=seed,
        round=round_,
        accepted=False,
        reason=reason,
        detail=detail,
        usage=usage or [],
    )


def accepted_attempt(blueprint: Blueprint) -> BlueprintAttempt:
    """The ``blueprint_attempt`` row of an accepted blueprint (for the validity rate, §6); its
    detail lists the paths tried and refused before the blueprint's."""
    key = {
        "cluster_id": blueprint.cluster_id,
        "cell": blueprint.cell.model_dump(mode="json"),
        "seed": blueprint.seed,
        "round": blueprint.round,
    }
    return BlueprintAttempt(
        attempt_id=content_id("bpa", key),
        cluster_id=blueprint.cluster_id,
        cell=blueprint.cell,
        seed=blueprint.seed,
        round=blueprint.round,
        accepted=True,
        detail=" | ".join(blueprint.refused_paths),
        blueprint_id=blueprint.blueprint_id,
        words_source=blueprint.words_source,
        usage=blueprint.usage,
    )


# The words as a JSON schema the model must fill (a small model's free text rarely parses).
# Offered as the one tool of the request with tool_choice "required", so servers that
# constrain tool calls by grammar (llama.cpp, vLLM) can only answer with this object.
WORDS_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "write_user_request",
        "description": "The user's side of the conversation, in the user's own words.",
        "parameters": {
            "type": "object",
            "properties": {
                "persona": {"type": "string", "description": "who the user is, one sentence"},
                "goal": {
                    "type": "string",
                    "description": "what the user asks for, first person, one or two sentences",
                },
                "hidden_info": {
                    "type": "object",
                    "description": "facts the user reveals only when asked",
                    "additionalProperties": {"type": "string"},
                },
            },
            "required": ["persona", "goal"],
        },
    },
}


def _reply_text(result: Any) -> str | None:
    """The words tool's JSON arguments when the model called it, else the reply text."""
    for call in result.message.tool_calls or []:
        if call.function.name == WORDS_TOOL["function"]["name"]:
            return call.function.arguments
    return result.message.content


async def _write_words(
    planner: Planner,
    llm: LLMClient | None,
    spec: WordsSpec,
    seed: int,
    *,
    constrained: bool = False,
) -> tuple[Words, Literal["llm", "template"], int, list[LLMUsage], list[str]]:
    """LLM drafts until one passes the checks, else the template (docs/methods.md §3 steps 9-10).

    Returns the words, their source, the number of LLM drafts, the LLM usage and the problems
    of the last rejected draft.
    """
    usage: list[LLMUsage] = []
    problems: list[str] = []
    drafts = 0
    if planner.use_llm and llm is not None:
        messages = build_messages(planner.system_prompt, planner.prompt_template, spec)
        for k in range(planner.retries + 1):
            drafts += 1
            result = await llm.chat(
                messages,
                role=AgentRole.PLANNER,
                temperature=planner.temperature,
                max_tokens=planner.max_tokens,
                seed=(seed * 1009 + k) % 2**31,
                **({"tools": [WORDS_TOOL], "tool_choice": "required"} if constrained else {}),
            )
            usage.append(result.usage)
            words = parse_words(_reply_text(result), spec)
            if words is None:
                problems = ["parse: no JSON object with a goal in the reply"]
                continue
            problems = check_words(words, spec)
            if not problems:
                return words, "llm", drafts, usage, []
            log.debug("planner draft %d rejected: %s", k, problems)
    return template_words(spec), "template", drafts, usage, problems


class _Failure(NamedTuple):
    """Why a path's gold run or lint failed, and the tool that failed (None: no one tool)."""

    reason: str
    detail: str
    tool: str | None = None


# How much a tool whose call failed in this environment counts against being drawn again in
# the same unit (as if it had been used this many more times: its walk weight / (1 + this)).
# A tool refused in one path (a cart that is empty, a user who does not organize the event)
# is usually refused again by the same initial state, so the next paths go elsewhere.
FAILED_TOOL_PENALTY = 8


def _tried(failures: list[_Failure], last: _Failure | None = None) -> str:
    """Every refused path of a unit, ``[reason] detail`` joined by `` | `` (an attempt's
    detail; the bench and the summary count the paths refused by each reason)."""
    return " | ".join(f"[{f.reason}] {f.detail}" for f in [*failures, *([last] if last else [])])


# refused paths of a single cell on an outside server after which it is planned as one read
# (paths.sample_path's ``one_read``): its two-call paths were refused for their write (unseen,
# a no-op, failing, without a value) or for a second read that asks another question
ONE_READ_AFTER = 2


def _one_read(cluster: ToolCluster, cell: Cell, failures: list[_Failure]) -> bool:
    """Whether the cell's next path is one read: a single cell on an outside server whose
    two-call paths were refused ``ONE_READ_AFTER`` times, in a mode a read can realise."""
    writes = _write_tools(cluster)
    blamed = [f for f in failures if f.tool in writes or f.reason == "unrelated_reads"]
    return (
        cluster.source == "outside"
        and cell.path_shape is PathShape.SINGLE
        and cell.target_mode
        not in (ReasoningMode.VERIFY_AFTER_WRITE, ReasoningMode.EXPLORE_THEN_COMMIT)
        and len(blamed) >= ONE_READ_AFTER
    )


def _avoiding(uses: Mapping[str, int] | None, failures: list[_Failure]) -> dict[str, int]:
    """``uses`` with each failed tool counted ``FAILED_TOOL_PENALTY`` times more."""
    out = dict(uses or {})
    for failure in failures:
        if failure.tool is not None:
            out[failure.tool] = out.get(failure.tool, 0) + FAILED_TOOL_PENALTY
    return out


class _Truth(Record):
    """A path whose gold run succeeded and whose derived constraints lint clean."""

    path: PlannedPath
    gold: GoldResult
    answer: Answer | None
    constraints: list[Constraint]
    # the probe search made for a write no probe saw (``_seen_or_refused``): its read-back,
    # the reads tried; None when it did not run (the lint then searches itself)
    readback: FinalState | None = None
    readback_tried: int | None = None


async def _volatile_answer(
    env: PlannerEnvironment, call: GoldCall, answer: Answer
) -> ObservedField | None:
    """Where the answer lies in ``call``'s observation, when the value changes between reads
    (docs/methods.md §4, ``answer_contains``); None when it is stable.

    Two tests: the value reads the clock (``reads_the_clock``), or the same read-only call,
    made again, returns something else there (a fresh token, a counter). Either way the
    gold run's copy cannot be the value a later episode's answer must state.
    """
    observation = parse_json_maybe(call.observation)
    paths = leaf_paths(observation, answer.value)
    by_field = [p for p in paths if p and p[-1] == answer.field]
    if not (by_field or paths):
        return None  # an aggregate (a count, a lowest price): not read from one place
    where = (by_field or paths)[0]
    if not reads_the_clock(answer.value):
        result = await env.call_tool(call.tool, dict(call.arguments))
        if getattr(result, "is_error", False):
            return None  # no second reading to compare with
        try:
            if value_at(parse_json_maybe(observation_value(result)), where) == answer.value:
                return None
        except KeyError:
            pass
    log.debug("answer %s of %s changes between reads: checked per episode", where, call.tool)
    return ObservedField(tool=call.tool, path=where, matchers=dict(call.arguments))


async def _ground_truth(
    env: PlannerEnvironment, cluster: ToolCluster, path: PlannedPath, initial: EnvState
) -> _Truth | _Failure:
    """Run the path (§3 step 7), derive its constraints (§4) and lint them; or why not."""
    outcome = await run_gold_path(
        env, cluster, path.steps, path.slots, initial, alternatives=path.alternatives
    )
    route = " -> ".join(path.tools)
    if isinstance(outcome, GoldFailure):
        detail = f"{route}: step {outcome.step} ({outcome.tool}): {outcome.detail}"
        return _Failure("gold_run_error", detail, outcome.tool)
    write_tools = _write_tools(cluster)
    calls = outcome.run.calls
    rows = [row for table in initial.tables.values() for row in table]
    refused = (
        two_users(calls)
        or repeated_call(calls, write_tools)
        or same_ends(calls)
        or noop_write(calls, write_tools, rows)
        or creates_existing(calls, write_tools, rows)
        or copy_over(calls, write_tools, rows)
        or copied_status(calls, write_tools)
    )
    if refused:
        return _Failure(*refused)
    if outcome.slots != path.slots:  # a tool refused a value; the run used another row's
        path = path.model_copy(update={"slots": outcome.slots})
    answer = None
    observed = None
    unrelated = unrelated_reads(outcome.steps, path.n_writes, outcome.run.calls, path.slots)
    if unrelated:
        return _Failure(*unrelated)
    if path.n_writes == 0:
        last = declared_properties(cluster.tool(outcome.steps[-1].tool))
        answer = pick_answer(outcome.run.calls, path.slots, inputs=list(last))
        if answer is not None:
            observed = await _volatile_answer(env, outcome.run.calls[-1], answer)
    constraints = derive_constraints(
        outcome.run.calls,
        outcome.run.final_state,
        cluster,
        [answer.value] if answer is not None else [],
        initial_state=initial,
        answer_observed=observed,
    )
    issues = lint_constraints(constraints, initial, cluster.tools)
    if issues:
        writes = [
            c.tool for c in outcome.run.calls if cluster.tool(c.tool).access is ToolAccess.WRITE
        ]
        return _Failure("constraint_lint", f"{route}: " + "; ".join(issues), (writes or [None])[-1])
    # after the lint: a path whose constraints a do-nothing run passes is the lint's to name
    empty = empty_read(calls, write_tools)
    if empty:
        return _Failure(*empty)
    return _Truth(path=path, gold=outcome, answer=answer, constraints=constraints)


async def plan_blueprint(
    planner: Planner,
    llm: LLMClient | None,
    env_factory: EnvFactory,
    cluster: ToolCluster,
    cell: Cell,
    seed: int,
    round: int = 0,  # noqa: A002 - the pipeline's name for it
    *,
    graph: nx.DiGraph | None = None,
    uses: Mapping[str, int] | None = None,
) -> Blueprint | BlueprintAttempt:
    """Plan one blueprint for ``cell`` (docs/methods.md §3 steps 1-10, §4), or say why not.

    Seeded by (cluster, cell, seed, round): the same inputs sample the same path. Steps: open
    a fresh environment, sample and bind a path from its initial state, run it (a failed gold
    run restores the environment and samples again, ``gold_retries`` times), derive the
    constraints and lint them against the initial state, then write the words. Rejections:
    ``unbindable_param``, ``no_write``, ``path_too_short``, ``shape_unsupported``,
    ``no_entry_tool`` (from path sampling), ``gold_run_error``, ``two_users``, ``repeated_call``,
    ``same_ends``, ``unrelated_reads``,
    ``constraint_lint`` (the last of the paths tried; the detail lists every try),
    ``copy_over``, ``copied_status``,
    ``noop_write`` and ``unseen_write`` (an outside write whose effect no probe and no read
    the probe search tried shows: ``admission.unseen_write``),
    ``mutation_lint``, ``mode_unrealised`` (explore_then_commit on a path that reads nothing
    before its first write), ``words_check``, ``self_check`` (the blueprint's own gold
    demonstration fails the verifier, hygiene included; docs/planning.md). Infrastructure faults
    (``InfraError``: sandbox, MCP server, LLM) are raised for the caller to retry.
    """
    rng = _rng(cluster, cell, seed, round)
    graph = graph if graph is not None else dependency_graph(cluster)
    async with env_factory() as env:
        initial = await env.state()
        handle = await env.snapshot() if planner.gold_retries else None
        failures: list[_Failure] = []
        fill_usage: list[LLMUsage] = []
        truth: _Truth | None = None
        for attempt in range(planner.gold_retries + 1):
            sampled = sample_path(
                cluster, graph, cell, initial, rng, _avoiding(uses, failures),
                tries=planner.path_tries, one_read=_one_read(cluster, cell, failures),
            )  # fmt: skip
            if isinstance(sampled, Rejection):
                if failures:  # earlier paths failed their gold run or lint; report those
                    break
                return _attempt(cluster, cell, seed, round, sampled.reason, sampled.detail)
            outcome = None
            filled_failure: _Failure | None = None
            if cluster.source == "outside" and planner.use_llm and llm is not None:
                # values only the schema describes are written by the LLM under that schema;
                # the schema's own values run when the LLM's fail the gold run
                filled, used = await fill_slots(
                    llm, cluster, sampled, seed=(seed * 1013 + attempt) % 2**31,
                    temperature=planner.temperature, max_tokens=planner.max_tokens,
                )  # fmt: skip
                fill_usage += used
                if isinstance(filled, Refusal):  # every value drawn was a blank
                    outcome = _Failure(*filled)
                elif filled is not None:
                    outcome = await _ground_truth(env, cluster, filled, initial)
                    if not isinstance(outcome, _Truth) and handle is not None:
                        log.debug("LLM-filled values failed (%s); the schema's run", outcome)
                        filled_failure = outcome
                        await env.restore(handle)
                        outcome = None
            if outcome is None and unfilled(sampled) and filled_failure is not None:
                # the LLM's values ran and failed, and the schema has none to try: the path
                # failed for what the run said (a tool the client cannot call, a refused value)
                outcome = filled_failure
            elif outcome is None and unfilled(sampled):
                # a value only a made-up record could give and the LLM gave none
                missing = ", ".join(unfilled(sampled))
                detail = f"{' -> '.join(sampled.tools)}: no value for {missing}"
                outcome = _Failure("unbindable_param", detail, sampled.tools[-1])
            if outcome is None:
                outcome = await _ground_truth(env, cluster, sampled, initial)
            if isinstance(outcome, _Truth):
                outcome = await _seen_or_refused(planner, env, handle, cluster, outcome)
            if isinstance(outcome, _Truth):
                truth = outcome
                break
            failures.append(outcome)
            if handle is None or attempt == planner.gold_retries:
                break
            await env.restore(handle)
        if truth is None:
            reason = failures[-1].reason
            return _attempt(cluster, cell, seed, round, reason, _tried(failures), fill_usage)

        def refused(reason: str, detail: str, usage: list[LLMUsage]) -> BlueprintAttempt:
            # after the gold loop: the paths refused in it stay in the detail, this one last
            if failures:
                detail = _tried(failures, _Failure(reason, detail))
            return _attempt(cluster, cell, seed, round, reason, detail, usage)

        linted = await _mutation_checked(planner, env, handle, cluster, truth)
        if isinstance(linted, str):
            return refused("mutation_lint", linted, fill_usage)
        truth, mutation = linted
        if handle is not None and _lint_wanted(planner, cluster):
            read_by_any = await with_equivalent_reads(
                env, handle, cluster, truth.gold.run.calls, list(truth.constraints)
            )
            truth = truth.model_copy(update={"constraints": read_by_any})
        if cell.target_mode is ReasoningMode.EXPLORE_THEN_COMMIT:
            ordered = look_first(truth.gold.run.calls, _write_tools(cluster), truth.constraints)
            if isinstance(ordered, Refusal):
                return refused(ordered.reason, ordered.detail, fill_usage)
            truth = truth.model_copy(update={"constraints": ordered})
        path, gold, answer = truth.path, truth.gold, truth.answer

        spec = words_spec(
            cluster,
            cell.target_mode,
            gold.steps,
            path.slots,
            gold.run.calls,
            answer,
            initial_state=initial,
            slot_sources=path.slot_sources,
        )
        words, source, drafts, usage, problems = await _write_words(
            planner, llm, spec, seed, constrained=cluster.source == "outside"
        )
        usage = fill_usage + usage
        if source == "template":
            final_problems = check_words(words, spec)
            if final_problems:
                detail = "; ".join(final_problems + [f"last draft: {p}" for p in problems])
                return refused("words_check", detail, usage)

        extra_turns = 1 if spec.hidden_slot or spec.stale else 0
        meaning = {
            "cluster_id": cluster.cluster_id,
            "cell": cell.model_dump(mode="json"),
            "tool_path": [s.model_dump(mode="json") for s in gold.steps],
            "slots": path.slots,
            "seed": seed,
            "gold_hash": gold.run.final_state.state_hash,
        }
        blueprint = Blueprint(
            blueprint_id=content_id("bp", meaning),
            cluster_id=cluster.cluster_id,
            domain=str(cluster.domain),
            cell=cell,
            initial_state_id=initial.state_hash,
            tool_path=gold.steps,
            slots=path.slots,
            persona=words.persona,
            goal=words.goal,
            hidden_info=words.hidden_info,
            uses_code_tool=path.uses_code_tool,
            n_writes=path.n_writes,
            gold_run=gold.run,
            constraints=truth.constraints,
            max_turns=max(planner.min_turns, len(gold.steps) + 2 + extra_turns),
            seed=seed,
            round=round,
            words_source=source,
            words_attempts=drafts,
            reads_before_write=path.reads_before_write,
            usage=usage,
            mutation_lint=mutation,
            refused_paths=[f"[{f.reason}] {f.detail}" for f in failures],
        )
        failed = await _self_check(env, handle, env_factory, cluster, blueprint)
        if failed:
            return refused("self_check", failed, usage)
        return blueprint


def _write_tools(cluster: ToolCluster) -> set[str]:
    return {t.name for t in cluster.tools if t.access is ToolAccess.WRITE}


class _DemoEnvironment:
    """The planner's environment as the rollout loop reads one: the cluster and its tools
    beside the calls (a bundled cluster's tools are its spec's)."""

    def __init__(self, env: PlannerEnvironment, cluster: ToolCluster) -> None:
        self.env = env
        self.cluster = cluster
        self.tools = cluster.tools

    async def call_tool(self, name: str, arguments: dict) -> Any:
        return await self.env.call_tool(name, arguments)

    async def state(self) -> EnvState:
        return await self.env.state()

    async def read_probes(self, probes: list[ProbeCall]) -> EnvState:
        return await self.env.read_probes(probes)

    async def run_check(self, check_id: str, source: str) -> bool:
        return await self.env.run_check(check_id, source)


async def _self_check(
    env: PlannerEnvironment,
    handle: SnapshotHandle | None,
    env_factory: EnvFactory,
    cluster: ToolCluster,
    blueprint: Blueprint,
) -> str | None:
    """Why the blueprint's own gold demonstration fails the product's verifier (hygiene
    included), or None when it passes.

    The demonstration (``planning.gold.gold_demonstration``: the gold calls replayed through the
    real rollout loop, the template user, the template answer) is the best trajectory the
    task admits; when the verifier rejects it, the task's constraints and words disagree (an
    answer that names nothing the user asked, words the path does not honour) and no rollout
    of it can be a clean example. Runs in the planning environment restored to the initial
    state, or a fresh one when there is no snapshot.
    """
    from trajsynth.curation.verify import verify
    from trajsynth.planning.gold import gold_demonstration

    async def run(target: PlannerEnvironment) -> str | None:
        demo_env = _DemoEnvironment(target, cluster)
        trajectory, state = await gold_demonstration(
            blueprint, demo_env, run_id="self-check", shown=cluster.tools
        )
        if state is None:
            return f"the gold demonstration ended without a state ({trajectory.termination})"
        verdict = verify(trajectory, blueprint.constraints, state)
        if verdict.passed:
            return None
        failed = [f"{r.kind}: {r.detail}"[:200] for r in verdict.results if r.hard and not r.passed]
        failed += [f"hygiene {h.check}: {h.detail}"[:200] for h in verdict.hygiene if not h.passed]
        return "the gold demonstration fails the verifier: " + "; ".join(failed or ["no checks"])

    route = " -> ".join(s.tool for s in blueprint.tool_path)
    if handle is not None:
        await env.restore(handle)
        failed = await run(env)
    else:
        async with env_factory() as fresh:
            failed = await run(fresh)
    return f"{route}: {failed}" if failed else None


def _lint_wanted(planner: Planner, cluster: ToolCluster) -> bool:
    return planner.mutation_lint == "all" or (
        planner.mutation_lint == "outside" and cluster.source == "outside"
    )


async def _seen_or_refused(
    planner: Planner,
    env: PlannerEnvironment,
    handle: SnapshotHandle | None,
    cluster: ToolCluster,
    truth: _Truth,
) -> _Truth | _Failure:
    """An outside gold run whose writes no end-state probe saw (its probed state is the
    initial state's) keeps the read-back the probe search finds for it; when none is found
    it is refused (``admission.unseen_write``: ``noop_write`` or ``unseen_write``) and the
    loop draws another path, the tool counted against. A write task is accepted only when a
    final-state check can see what it did. Needs the initial snapshot, as the lint does."""
    calls = truth.gold.run.calls
    writes = _write_tools(cluster)
    if (
        cluster.source != "outside"
        or handle is None
        or not _lint_wanted(planner, cluster)
        or not any(c.tool in writes and not c.is_error for c in calls)
        or any(isinstance(c, FinalState) for c in truth.constraints)
    ):
        return truth
    found = await find_readback(env, handle, cluster, calls)
    if found.check is None:
        return _Failure(*unseen_write(calls, cluster.tools, found.tried, found.unchanged))
    return truth.model_copy(update={"readback": found.check, "readback_tried": found.tried})


async def _mutation_checked(
    planner: Planner,
    env: PlannerEnvironment,
    handle: SnapshotHandle | None,
    cluster: ToolCluster,
    truth: _Truth,
) -> tuple[_Truth, MutationLint | None] | str:
    """The truth with constraints the mutation lint strengthened and its figures, or why the
    blueprint is rejected (a wrong variant of its gold run still passes). Needs the initial
    snapshot; without one (``gold_retries=0``) the lint does not run."""
    if not _lint_wanted(planner, cluster) or handle is None:
        return truth, None
    searched = (
        ReadbackSearch(truth.readback, truth.readback_tried)
        if truth.readback_tried is not None
        else None
    )
    constraints, lint = await lint_by_mutation(
        env, handle, cluster, truth.gold.run.calls, list(truth.constraints), searched=searched
    )
    route = " -> ".join(truth.path.tools)
    if not lint.gold_passes:
        return f"{route}: the gold run fails the strengthened checks"
    if lint.survived:
        return f"{route}: wrong variants pass: " + "; ".join(lint.survived)
    if constraints != truth.constraints:
        issues = lint_constraints(constraints, await _initial_state(env, handle), cluster.tools)
        if issues:
            return f"{route}: strengthened checks do not lint: " + "; ".join(issues)
    return truth.model_copy(update={"constraints": constraints}), lint


async def _initial_state(env: PlannerEnvironment, handle: SnapshotHandle) -> EnvState:
    await env.restore(handle)
    return await env.state()


def environment_factory(
    cluster: ToolCluster,
    *,
    sandbox_kind: SandboxKind = SandboxKind.AUTO,
    limits: SandboxLimits | None = None,
    seed: int = 0,
    tool_timeout_s: float = 20.0,
    pool: SandboxPool | None = None,
) -> EnvFactory:
    """An ``EnvFactory`` that opens a fresh sandboxed environment of ``cluster`` each time
    (in a reset sandbox from ``pool`` when given)."""

    @asynccontextmanager
    async def open_fresh() -> AsyncIterator[PlannerEnvironment]:
        env = await open_environment(
            cluster,
            sandbox_kind=sandbox_kind,
            limits=limits,
            seed=seed,
            tool_timeout_s=tool_timeout_s,
            pool=pool,
        )
        try:
            yield env
        finally:
            await env.close()

    return open_fresh
