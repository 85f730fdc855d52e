"""The rollout loop: user simulator, assistant and tool executor take turns (docs/design.md §3).

``run_episode`` owns the loop, the budgets and the termination reasons; the agents are plain
configurations. Model-facing failures (bad tool calls, tool errors) are recorded and the loop
goes on; infrastructure failures end the episode with class ``infra`` and are excluded later.
A request the server refuses because the conversation outgrew the model's context ends it as
``context_limit``: a stop condition like the budgets, judged as it stands, never retried.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from pydantic import JsonValue

from trajsynth.agents.assistant import Assistant
from trajsynth.agents.entropy import step_uncertainty
from trajsynth.agents.user_sim import (
    UserReply,
    UserSimulator,
    check_user_reply,
    goal_looks_met,
    scripted_user_turn,
)
from trajsynth.llm.client import ChatResult, LLMClient, context_overflow
from trajsynth.mcp_servers.readback import with_readbacks
from trajsynth.mcp_servers.tool_calls import (
    SERVER_KILLED,
    ToolResult,
    call_record,
    check_tool_call,
)
from trajsynth.schemas import (
    AgentRole,
    Blueprint,
    Budgets,
    CodeTestsPass,
    EnvState,
    FailureClass,
    InfraError,
    LLMUsage,
    Message,
    MessageRole,
    Node,
    RolloutTree,
    SnapshotHandle,
    Termination,
    ToolCall,
    ToolCallRecord,
    ToolCluster,
    ToolSpec,
    Trajectory,
    UsageTotals,
    content_id,
)

__all__ = [
    "EpisodeEnvironment",
    "EpisodeResult",
    "end_on_llm_fault",
    "run_episode",
    "usage_totals",
]

log = logging.getLogger(__name__)


class EpisodeEnvironment(Protocol):
    """What the loop needs of an environment (``mcp_servers.Environment`` provides it)."""

    cluster: ToolCluster

    @property
    def tools(self) -> list[ToolSpec]: ...

    async def call_tool(self, name: str, arguments: dict[str, JsonValue]) -> ToolResult: ...
    async def state(self) -> EnvState: ...
    async def run_check(self, check_id: str, source: str) -> bool: ...
    # a tree forks its branches from snapshots; a linear rollout never calls these
    async def snapshot(self) -> SnapshotHandle: ...
    async def restore(self, handle: SnapshotHandle) -> None: ...


@dataclass
class EpisodeResult:
    trajectory: Trajectory
    nodes: list[Node]
    tree: RolloutTree
    final_state: EnvState | None
    usage: list[LLMUsage] = field(default_factory=list)


@dataclass
class _Turn:
    """What one assistant turn added, before it becomes a Node."""

    messages: list[Message] = field(default_factory=list)
    calls: list[ToolCallRecord] = field(default_factory=list)
    usage: list[LLMUsage] = field(default_factory=list)
    step_entropy: float | None = None
    confidence: float | None = None


def usage_totals(usage: Sequence[LLMUsage]) -> list[UsageTotals]:
    by_role: dict[AgentRole, UsageTotals] = {}
    for u in usage:
        cur = by_role.get(u.role, UsageTotals(role=u.role))
        by_role[u.role] = UsageTotals(
            role=u.role,
            calls=cur.calls + 1,
            prompt_tokens=cur.prompt_tokens + u.prompt_tokens,
            completion_tokens=cur.completion_tokens + u.completion_tokens,
            latency_s=cur.latency_s + u.latency_s,
        )
    return [by_role[r] for r in AgentRole if r in by_role]


@dataclass(frozen=True)
class Episode:
    """What stays fixed while one blueprint is acted out (every path of its tree shares it)."""

    blueprint: Blueprint
    env: EpisodeEnvironment
    llm: LLMClient
    assistant: Assistant
    user_sim: UserSimulator
    budgets: Budgets
    # The tools the model is shown (``agents.context.fit_tools``, when the whole set does not
    # fit its context); None: every tool of the environment.
    shown: tuple[ToolSpec, ...] | None = None

    @property
    def tools(self) -> Sequence[ToolSpec]:
        return self.env.tools if self.shown is None else self.shown

    @property
    def tool_map(self) -> dict[str, ToolSpec]:
        # a call to a tool the model was not shown is an unknown tool, as for any other name
        return {t.name: t for t in self.tools}

    @property
    def openai_tools(self) -> list[dict[str, JsonValue]]:
        return [t.to_openai() for t in self.tools]


@dataclass
class PathState:
    """One path through the conversation so far; ``fork`` copies it for a child branch."""

    messages: list[Message]
    turns: list[_Turn] = field(default_factory=list)
    usage: list[LLMUsage] = field(default_factory=list)
    revealed: set[str] = field(default_factory=set)
    n_calls: int = 0
    generated: int = 0
    user_resamples: int = 0  # simulator draws after one that failed its checks
    user_scripted: int = 0  # user turns written from the blueprint (every draw failed)
    termination: Termination | None = None
    failure: FailureClass | None = None
    detail: str | None = None

    @property
    def done(self) -> bool:
        return self.termination is not None

    def fork(self) -> PathState:
        return PathState(
            messages=list(self.messages),
            turns=list(self.turns),
            usage=list(self.usage),
            revealed=set(self.revealed),
            n_calls=self.n_calls,
            generated=self.generated,
            user_resamples=self.user_resamples,
            user_scripted=self.user_scripted,
        )

    def end(
        self,
        termination: Termination,
        failure: FailureClass | None = None,
        detail: str | None = None,
    ) -> None:
        self.termination, self.failure, self.detail = termination, failure, detail


def end_on_llm_fault(path: PathState, exc: InfraError) -> None:
    """End ``path`` on an LLM request that failed for good: ``context_limit`` when the server
    said the conversation no longer fits the model's context (the path stops where it is and
    is judged like one that ran out of turns; a retry would send the same prompt), else
    ``infra_error`` (excluded, and its unit retried)."""
    if context_overflow(exc):
        path.end(Termination.CONTEXT_LIMIT, None, str(exc))
    else:
        path.end(Termination.INFRA_ERROR, FailureClass.INFRA, str(exc))


def opening_path(episode: Episode) -> PathState:
    """The shared prefix every rollout of a blueprint starts from: system + the user's goal."""
    return PathState(
        messages=[
            episode.assistant.system_message(episode.env.cluster),
            Message(role=MessageRole.USER, content=episode.blueprint.goal),
        ]
    )


async def assistant_reply(episode: Episode, path: PathState, *, seed: int) -> ChatResult:
    """One assistant turn's reply to the path so far (generated, not yet acted on).

    Raises ``InfraError`` when the LLM fails for good."""
    assistant = episode.assistant
    return await episode.llm.chat(
        path.messages,
        role=AgentRole.ASSISTANT,
        tools=episode.openai_tools,
        temperature=assistant.temperature,
        max_tokens=assistant.max_tokens,
        seed=seed,
        tool_choice=(
            assistant.tool_choice_after_user
            if path.messages[-1].role is MessageRole.USER
            else assistant.tool_choice_after_tool
        ),
    )


async def act(
    episode: Episode,
    path: PathState,
    result: ChatResult,
    *,
    user_seed: int,
    user_room: int | None = None,
) -> _Turn:
    """Append one assistant turn and what it produced to ``path``: the tool results of its
    calls, or the simulated user's answer. Sets ``path.termination`` when the path ends.
    ``user_room``: the most tokens the user's turn may generate over all its draws (a tree's
    budget); a resample that might not fit is not drawn (the turn is scripted instead)."""
    budgets = episode.budgets
    turn_index = len(path.turns)
    turn = _Turn()
    path.turns.append(turn)
    path.usage.append(result.usage)
    turn.usage.append(result.usage)
    turn.step_entropy, turn.confidence = step_uncertainty(
        result.token_logprobs, result.top_logprobs
    )
    path.generated += result.usage.completion_tokens
    reply = result.message
    path.messages.append(reply)
    turn.messages.append(reply)

    if reply.tool_calls:
        tool_map = episode.tool_map
        for call in reply.tool_calls:
            if path.n_calls >= budgets.max_tool_calls:
                path.end(Termination.TOOL_BUDGET)
                break
            path.n_calls += 1
            record = await _execute(episode.env, call, tool_map, turn_index)
            turn.calls.append(record)
            tool_msg = Message(
                role=MessageRole.TOOL,
                content=record.observation,
                tool_call_id=call.id,
                name=call.function.name,
            )
            path.messages.append(tool_msg)
            turn.messages.append(tool_msg)
            if record.failure_class is FailureClass.INFRA:
                path.end(Termination.INFRA_ERROR, FailureClass.INFRA, record.observation)
                break
            if record.error_type == SERVER_KILLED:  # the observation holds the evidence
                path.end(Termination.ENVIRONMENT_BROKEN, FailureClass.MODEL, record.observation)
                break
    else:
        # a user turn drawn after the last answer the budgets allow could never be answered:
        # the dialogue ends on the assistant's words, and the verdict reads those
        if (spent := _budget_spent(path, budgets)) is not None:
            path.end(spent)
            return turn
        checked = await _user_turn(episode, path, turn, reply.content or "", user_seed, user_room)
        if checked is None:
            return turn
        user_msg = Message(role=MessageRole.USER, content=checked.text)
        if checked.stop:
            if checked.text:
                path.messages.append(user_msg)
                turn.messages.append(user_msg)
            path.end(Termination.USER_STOP)
            return turn
        path.messages.append(user_msg)
        turn.messages.append(user_msg)
    if not path.done and (spent := _budget_spent(path, budgets)) is not None:
        path.end(spent)
    return turn


def _budget_spent(path: PathState, budgets: Budgets) -> Termination | None:
    """The budget the path has used up (tokens before turns), or None."""
    if path.generated >= budgets.max_tokens:
        return Termination.TOKEN_BUDGET
    if len(path.turns) >= budgets.max_turns:
        return Termination.MAX_TURNS
    return None


async def _user_turn(
    episode: Episode,
    path: PathState,
    turn: _Turn,
    last_assistant: str,
    seed: int,
    room: int | None = None,
) -> UserReply | None:
    """The simulated user's answer to ``last_assistant``, checked: drawn up to
    ``1 + user_sim.resamples`` times, else written from the blueprint
    (``user_sim.scripted_user_turn``). Ends ``path`` and returns None on an infra fault or when
    no valid turn could be made (``simulator``)."""
    blueprint, user_sim = episode.blueprint, episode.user_sim
    calls = [c for t in path.turns for c in t.calls]
    if user_sim.stop_when_met and goal_looks_met(
        blueprint, calls, last_assistant, episode.openai_tools
    ):
        scripted = scripted_user_turn(blueprint, last_assistant, path.revealed, goal_met=True)
        if scripted is not None and scripted[0].stop:
            path.user_scripted += 1
            return scripted[0]
    sim_view = user_sim.view(blueprint, path.messages[1:])
    failed: list[str] = []
    spent = 0
    for attempt in range(1 + user_sim.resamples):
        if attempt and (
            path.generated + user_sim.max_tokens > episode.budgets.max_tokens
            or (room is not None and spent + user_sim.max_tokens > room)
        ):
            break  # another draw could overrun the token budget: script the turn instead
        draw_seed, temperature = user_sim.draw(seed, attempt)
        try:
            sim = await episode.llm.chat(
                sim_view,
                role=AgentRole.USER,
                temperature=temperature,
                max_tokens=user_sim.max_tokens,
                seed=draw_seed,
            )
        except InfraError as exc:
            end_on_llm_fault(path, exc)
            return None
        path.usage.append(sim.usage)
        turn.usage.append(sim.usage)
        path.generated += sim.usage.completion_tokens
        spent += sim.usage.completion_tokens
        if attempt:
            path.user_resamples += 1
        checked = check_user_reply(
            sim.message.content or "", blueprint, last_assistant, path.revealed
        )
        if checked.role_break is None:
            for slot, value in blueprint.hidden_info.items():
                if str(value).lower() in checked.text.lower():
                    path.revealed.add(slot)
            return checked
        failed.append(checked.role_break)
    met = user_sim.scripted_fallback and goal_looks_met(
        blueprint, calls, last_assistant, episode.openai_tools
    )
    scripted = (
        scripted_user_turn(blueprint, last_assistant, path.revealed, goal_met=met)
        if user_sim.scripted_fallback
        else None
    )
    if scripted is None:
        detail = failed[0] if len(set(failed)) == 1 else "; ".join(dict.fromkeys(failed))
        path.end(Termination.SIMULATOR_ERROR, FailureClass.SIMULATOR, detail)
        return None
    checked, shown = scripted
    path.user_scripted += 1
    path.revealed.update(shown)
    log.debug("user turn scripted after %d failed draws: %s", len(failed), failed)
    return checked


def assistant_seed(blueprint: Blueprint, sample: int, turn_index: int) -> int:
    return blueprint.seed + 7919 * sample + turn_index


def user_seed(blueprint: Blueprint, sample: int, turn_index: int) -> int:
    return blueprint.seed + 104729 * sample + turn_index


async def final_state(episode: Episode, path: PathState) -> EnvState | None:
    """The environment's state at the end of ``path`` (with code checks run), or None after
    an infra fault (which then ends the path as ``infra``)."""
    if path.failure is FailureClass.INFRA:
        return None
    try:
        state = await with_readbacks(
            episode.env, await episode.env.state(), episode.blueprint.constraints
        )
        checks = {}
        for c in episode.blueprint.constraints:
            if isinstance(c, CodeTestsPass):
                checks[c.check_id] = await episode.env.run_check(c.check_id, c.test_source)
        return state.model_copy(update={"checks": checks}) if checks else state
    except InfraError as exc:
        path.end(Termination.INFRA_ERROR, FailureClass.INFRA, str(exc))
        return None


async def run_episode(
    *,
    blueprint: Blueprint,
    env: EpisodeEnvironment,
    llm: LLMClient,
    assistant: Assistant,
    user_sim: UserSimulator,
    budgets: Budgets,
    run_id: str,
    sample: int = 0,
    on_turn: Callable[[int], None] | None = None,
    reply_token_cap: int | None = None,
    shown: Sequence[ToolSpec] | None = None,
) -> EpisodeResult:
    """Act out one blueprint once, linearly. Ids derive from content and the run, not time.

    With ``reply_token_cap`` (the most an assistant reply may generate) a turn starts only
    when it and the simulated user's answer fit in ``budgets.max_tokens``, so the budget is
    never exceeded; without it the rollout stops once the budget is reached. ``shown``: the
    tools the model sees (None: all of them; ``agents.context.fit_tools``)."""
    started = time.perf_counter()
    episode = Episode(
        blueprint, env, llm, assistant, user_sim, budgets, tuple(shown) if shown else None
    )
    tree_id = content_id(
        "tree", {"run_id": run_id, "blueprint_id": blueprint.blueprint_id, "sample": sample}
    )
    path = opening_path(episode)
    reserve = (reply_token_cap + user_sim.max_tokens) if reply_token_cap else 0
    while not path.done:
        turn_index = len(path.turns)
        if reserve and path.generated + reserve > budgets.max_tokens:
            path.end(Termination.TOKEN_BUDGET)
            break
        if on_turn:
            on_turn(turn_index)
        try:
            result = await assistant_reply(
                episode, path, seed=assistant_seed(blueprint, sample, turn_index)
            )
        except InfraError as exc:
            path.turns.append(_Turn())
            end_on_llm_fault(path, exc)
            break
        await act(episode, path, result, user_seed=user_seed(blueprint, sample, turn_index))
    state = await final_state(episode, path)
    _, nodes = path_nodes(tree_id, path)
    nodes = [n.model_copy(update={"n_children": 1}) for n in nodes[:-1]] + nodes[-1:]
    trajectory = leaf_trajectory(
        episode,
        run_id=run_id,
        tree_id=tree_id,
        seed=blueprint.seed + sample,
        path=path,
        nodes=nodes,
        final_state=state,
        wall_s=time.perf_counter() - started,
    )
    wall_s = time.perf_counter() - started
    tree = RolloutTree(
        tree_id=tree_id,
        run_id=run_id,
        blueprint_id=blueprint.blueprint_id,
        round=blueprint.round,
        rollout_mode="linear",
        n_nodes=len(nodes),
        n_leaves=1,
        total_tokens=trajectory.total_tokens,
        wall_s=wall_s,
    )
    return EpisodeResult(trajectory, nodes, tree, state, list(path.usage))


async def _execute(
    env: EpisodeEnvironment, call: ToolCall, tool_map: dict[str, ToolSpec], turn: int
) -> ToolCallRecord:
    checked = check_tool_call(call, tool_map, turn=turn)
    if checked.failure is not None:
        return checked.failure
    assert checked.arguments is not None
    t0 = time.perf_counter()
    outcome: ToolResult | InfraError
    try:
        outcome = await env.call_tool(call.function.name, checked.arguments)
    except InfraError as exc:
        outcome = exc
    return call_record(
        call, checked.arguments, outcome, latency_s=time.perf_counter() - t0, turn=turn
    )


def root_node(tree_id: str, path: PathState) -> Node:
    """The root holds the shared prefix (system + opening user message)."""
    prefix = path.messages[:2]
    return Node(
        node_id=content_id(
            "node", {"tree_id": tree_id, "messages": [m.to_openai() for m in prefix]}
        ),
        tree_id=tree_id,
        depth=0,
        messages=prefix,
    )


def child_node(parent: Node, turn: _Turn, **fields: object) -> Node:
    """The node of one turn; its id derives from its parent and its content, so two
    children that said and saw exactly the same thing are one node."""
    key = {
        "parent_id": parent.node_id,
        "messages": [m.to_openai() for m in turn.messages],
        "calls": [c.model_dump(mode="json", exclude={"latency_s"}) for c in turn.calls],
    }
    return Node(
        node_id=content_id("node", key),
        tree_id=parent.tree_id,
        parent_id=parent.node_id,
        depth=parent.depth + 1,
        messages=turn.messages,
        calls=turn.calls,
        usage=turn.usage,
        step_entropy=turn.step_entropy,
        confidence=turn.confidence,
        **fields,  # type: ignore[arg-type]
    )


def path_nodes(tree_id: str, path: PathState) -> tuple[Node, list[Node]]:
    """The root and the chain of nodes of a linear path (root first)."""
    root = root_node(tree_id, path)
    nodes = [root]
    for turn in path.turns:
        if turn.messages:
            nodes.append(child_node(nodes[-1], turn))
    return root, nodes


def leaf_trajectory(
    episode: Episode,
    *,
    run_id: str,
    tree_id: str,
    seed: int,
    path: PathState,
    nodes: Sequence[Node],
    final_state: EnvState | None,
    wall_s: float,
) -> Trajectory:
    """The root-to-leaf path ``nodes`` as a trajectory row."""
    blueprint = episode.blueprint
    leaf = nodes[-1]
    final_answer = next(
        (
            m.content
            for m in reversed(path.messages)
            if m.role is MessageRole.ASSISTANT and m.content and not m.tool_calls
        ),
        None,
    )
    return Trajectory(
        trajectory_id=content_id("traj", {"tree_id": tree_id, "leaf": leaf.node_id}),
        run_id=run_id,
        blueprint_id=blueprint.blueprint_id,
        tree_id=tree_id,
        leaf_node_id=leaf.node_id,
        cluster_id=blueprint.cluster_id,
        round=blueprint.round,
        seed=seed,
        node_ids=[n.node_id for n in nodes],
        messages=path.messages,
        tools=episode.openai_tools,
        calls=[c for t in path.turns for c in t.calls],
        final_answer=final_answer,
        termination=path.termination or Termination.MAX_TURNS,
        failure_class=path.failure,
        failure_detail=path.detail,
        usage=usage_totals(path.usage),
        n_turns=sum(1 for t in path.turns if t.messages),
        user_resamples=path.user_resamples,
        user_scripted=path.user_scripted,
        final_state_hash=final_state.state_hash if final_state else None,
        wall_s=wall_s,
    )
