"""The rollout loop: user simulator, assistant and tool executor take turns (DESIGN.md step 3).

``run_episode`` owns the loop, the budgets and the termination reasons; the agents are plain
configurations. Model-facing failures (bad tool calls, tool errors) are recorded and the loop
goes on; infrastructure failures end the episode with class ``infra`` and are excluded later.
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
from trajsynth.agents.llm import ChatResult, LLMClient
from trajsynth.agents.tool_calls import check_tool_call
from trajsynth.agents.user_sim import UserSimulator, check_user_reply
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
    ObsClass,
    RolloutTree,
    Termination,
    ToolCallRecord,
    ToolCluster,
    ToolSpec,
    Trajectory,
    UsageTotals,
    content_id,
)

__all__ = ["EpisodeEnvironment", "EpisodeResult", "run_episode", "usage_totals"]

log = logging.getLogger(__name__)


class _ToolResult(Protocol):
    text: str
    is_error: bool
    error_type: str | None
    structured: JsonValue


class EpisodeEnvironment(Protocol):
    """What the loop needs of an environment (``mcp_servers.Environment`` provides it)."""

    cluster: ToolCluster
    tools: list[ToolSpec]

    async def call_tool(self, name: str, arguments: dict[str, JsonValue]) -> _ToolResult: ...
    async def state(self) -> EnvState: ...
    async def run_check(self, check_id: str, source: str) -> bool: ...


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


def _obs_class(text: str, is_error: bool) -> ObsClass:
    if is_error:
        return ObsClass.ERROR
    return ObsClass.EMPTY if text.strip() in ("", "null", "[]", "{}") else ObsClass.OK


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
) -> EpisodeResult:
    """Act out one blueprint once, linearly. Ids derive from content and the run, not time."""
    started = time.perf_counter()
    tools = env.tools
    tool_map = {t.name: t for t in tools}
    openai_tools = [t.to_openai() for t in tools]
    tree_id = content_id(
        "tree", {"run_id": run_id, "blueprint_id": blueprint.blueprint_id, "sample": sample}
    )
    opening = Message(role=MessageRole.USER, content=blueprint.goal)
    messages: list[Message] = [assistant.system_message(env.cluster), opening]
    turns: list[_Turn] = []
    usage: list[LLMUsage] = []
    revealed: set[str] = set()
    n_calls = 0
    generated = 0
    termination = Termination.MAX_TURNS
    failure: FailureClass | None = None
    detail: str | None = None

    for turn_index in range(budgets.max_turns):
        turn = _Turn()
        turns.append(turn)
        if on_turn:
            on_turn(turn_index)
        try:
            result: ChatResult = await llm.chat(
                messages,
                role=AgentRole.ASSISTANT,
                tools=openai_tools,
                temperature=assistant.temperature,
                max_tokens=assistant.max_tokens,
                seed=blueprint.seed + 7919 * sample + turn_index,
                tool_choice=(
                    assistant.tool_choice_after_user
                    if messages[-1].role is MessageRole.USER
                    else assistant.tool_choice_after_tool
                ),
            )
        except InfraError as exc:
            termination, failure, detail = Termination.INFRA_ERROR, FailureClass.INFRA, str(exc)
            break
        usage.append(result.usage)
        turn.usage.append(result.usage)
        turn.step_entropy, turn.confidence = step_uncertainty(
            result.token_logprobs, result.top_logprobs
        )
        generated += result.usage.completion_tokens
        reply = result.message
        messages.append(reply)
        turn.messages.append(reply)

        if reply.tool_calls:
            for call in reply.tool_calls:
                if n_calls >= budgets.max_tool_calls:
                    termination = Termination.TOOL_BUDGET
                    break
                n_calls += 1
                record = await _execute(env, call, tool_map, turn_index)
                if record.failure_class is FailureClass.INFRA:
                    termination, failure = Termination.INFRA_ERROR, FailureClass.INFRA
                    detail = record.observation
                turn.calls.append(record)
                tool_msg = Message(
                    role=MessageRole.TOOL,
                    content=record.observation,
                    tool_call_id=call.id,
                    name=call.function.name,
                )
                messages.append(tool_msg)
                turn.messages.append(tool_msg)
                if failure is FailureClass.INFRA:
                    break
            if termination in (Termination.TOOL_BUDGET, Termination.INFRA_ERROR):
                break
        else:
            sim_view = user_sim.view(blueprint, messages[1:])
            try:
                sim = await llm.chat(
                    sim_view,
                    role=AgentRole.USER,
                    temperature=user_sim.temperature,
                    max_tokens=user_sim.max_tokens,
                    seed=blueprint.seed + 104729 * sample + turn_index,
                )
            except InfraError as exc:
                termination, failure, detail = Termination.INFRA_ERROR, FailureClass.INFRA, str(exc)
                break
            usage.append(sim.usage)
            turn.usage.append(sim.usage)
            generated += sim.usage.completion_tokens
            checked = check_user_reply(
                sim.message.content or "", blueprint, reply.content or "", revealed
            )
            if checked.role_break:
                termination, failure = Termination.SIMULATOR_ERROR, FailureClass.SIMULATOR
                detail = checked.role_break
                break
            for slot, value in blueprint.hidden_info.items():
                if str(value).lower() in checked.text.lower():
                    revealed.add(slot)
            if checked.stop:
                termination = Termination.USER_STOP
                if checked.text:
                    user_msg = Message(role=MessageRole.USER, content=checked.text)
                    messages.append(user_msg)
                    turn.messages.append(user_msg)
                break
            user_msg = Message(role=MessageRole.USER, content=checked.text)
            messages.append(user_msg)
            turn.messages.append(user_msg)
        if generated >= budgets.max_tokens:
            termination = Termination.TOKEN_BUDGET
            break

    final_state: EnvState | None = None
    if failure is not FailureClass.INFRA:
        try:
            final_state = await env.state()
            checks = {}
            for c in blueprint.constraints:
                if isinstance(c, CodeTestsPass):
                    checks[c.check_id] = await env.run_check(c.check_id, c.test_source)
            if checks:
                final_state = final_state.model_copy(update={"checks": checks})
        except InfraError as exc:
            termination, failure, detail = Termination.INFRA_ERROR, FailureClass.INFRA, str(exc)

    return _assemble(
        blueprint=blueprint,
        run_id=run_id,
        tree_id=tree_id,
        sample=sample,
        opening=opening,
        system=messages[0],
        messages=messages,
        turns=turns,
        usage=usage,
        tools=openai_tools,
        termination=termination,
        failure=failure,
        detail=detail,
        final_state=final_state,
        wall_s=time.perf_counter() - started,
    )


async def _execute(
    env: EpisodeEnvironment, call, tool_map: dict[str, ToolSpec], turn: int
) -> ToolCallRecord:
    checked = check_tool_call(call, tool_map, turn=turn)
    if checked.failure is not None:
        return checked.failure
    assert checked.arguments is not None
    t0 = time.perf_counter()
    try:
        result = await env.call_tool(call.function.name, checked.arguments)
    except InfraError as exc:
        return ToolCallRecord(
            call_id=call.id,
            tool=call.function.name,
            raw_arguments=call.function.arguments,
            arguments=checked.arguments,
            observation=f"Error: {exc}",
            obs_class=ObsClass.ERROR,
            failure_class=FailureClass.INFRA,
            error_type=type(exc).__name__,
            latency_s=time.perf_counter() - t0,
            turn=turn,
        )
    return ToolCallRecord(
        call_id=call.id,
        tool=call.function.name,
        raw_arguments=call.function.arguments,
        arguments=checked.arguments,
        observation=result.text,
        obs_class=_obs_class(result.text, result.is_error),
        failure_class=FailureClass.TOOL if result.is_error else None,
        error_type=result.error_type,
        latency_s=time.perf_counter() - t0,
        turn=turn,
    )


_NODE_VOLATILE = frozenset({"usage", "node_id", "latency_s"})


def _assemble(
    *,
    blueprint: Blueprint,
    run_id: str,
    tree_id: str,
    sample: int,
    opening: Message,
    system: Message,
    messages: list[Message],
    turns: list[_Turn],
    usage: list[LLMUsage],
    tools: list[dict[str, JsonValue]],
    termination: Termination,
    failure: FailureClass | None,
    detail: str | None,
    final_state: EnvState | None,
    wall_s: float,
) -> EpisodeResult:
    nodes: list[Node] = []
    # The root node holds the shared prefix (system + opening user message).
    root = Node(
        node_id=content_id(
            "node", {"tree_id": tree_id, "messages": [m.to_openai() for m in (system, opening)]}
        ),
        tree_id=tree_id,
        depth=0,
        messages=[system, opening],
    )
    nodes.append(root)
    parent = root
    for depth, turn in enumerate((t for t in turns if t.messages), start=1):
        key = {
            "parent_id": parent.node_id,
            "messages": [m.to_openai() for m in turn.messages],
            "calls": [c.model_dump(mode="json", exclude={"latency_s"}) for c in turn.calls],
        }
        node = Node(
            node_id=content_id("node", key),
            tree_id=tree_id,
            parent_id=parent.node_id,
            depth=depth,
            messages=turn.messages,
            calls=turn.calls,
            usage=turn.usage,
            step_entropy=turn.step_entropy,
            confidence=turn.confidence,
        )
        nodes.append(node)
        parent = node
    # a linear rollout: every node but the leaf has exactly one child
    nodes = [n.model_copy(update={"n_children": 1}) for n in nodes[:-1]] + nodes[-1:]
    leaf = nodes[-1]
    calls = [c for t in turns for c in t.calls]
    final_answer = next(
        (
            m.content
            for m in reversed(messages)
            if m.role is MessageRole.ASSISTANT and m.content and not m.tool_calls
        ),
        None,
    )
    trajectory = Trajectory(
        trajectory_id=content_id("traj", {"tree_id": tree_id, "leaf": leaf.node_id}),
        run_id=run_id,
        blueprint_id=blueprint.blueprint_id,
        tree_id=tree_id,
        leaf_node_id=leaf.node_id,
        cluster_id=blueprint.cluster_id,
        round=blueprint.round,
        seed=blueprint.seed + sample,
        node_ids=[n.node_id for n in nodes],
        messages=messages,
        tools=tools,
        calls=calls,
        final_answer=final_answer,
        termination=termination,
        failure_class=failure,
        failure_detail=detail,
        usage=usage_totals(usage),
        n_turns=sum(1 for t in turns if t.messages),
        final_state_hash=final_state.state_hash if final_state else None,
        wall_s=wall_s,
    )
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
    return EpisodeResult(trajectory, nodes, tree, final_state, usage)
