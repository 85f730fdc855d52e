"""The gold run: execute a planned path once against a fresh environment (methods.md §3 step 7).

References between calls (``RefArg``: "field ``items[0].id`` of step 2's observation") are
resolved from the observations the calls actually returned. Any tool error, or a reference that
points at nothing, rejects the path; infrastructure faults (``InfraError``) are raised, since
they say nothing about the path.
"""

from __future__ import annotations

import json
import logging
import re
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from pydantic import Field

from trajsynth.curation.canon import parse_json_maybe
from trajsynth.curation.verify import observed_reading
from trajsynth.llm.client import ChatResult, LLMClient
from trajsynth.mcp_servers.tags import name_tokens
from trajsynth.schemas import (
    AgentRole,
    AnswerContains,
    Blueprint,
    Budgets,
    EnvState,
    FunctionCall,
    GoldCall,
    GoldRun,
    InfraError,
    JsonValue,
    LiteralArg,
    LLMUsage,
    Message,
    MessageRole,
    PlannedCall,
    Record,
    RefArg,
    SlotArg,
    ToolAccess,
    ToolCall,
    ToolCalled,
    ToolCallRecord,
    ToolCluster,
    ToolSpec,
    Trajectory,
    Verdict,
)

__all__ = [
    "GoldEnvironment",
    "GoldPolicy",
    "TemplateUser",
    "answer_values",
    "gold_demonstration",
    "gold_demos",
    "template_answer",
    "GoldFailure",
    "GoldResult",
    "find_field",
    "observation_value",
    "resolve_field",
    "run_gold_path",
]

log = logging.getLogger(__name__)

_SEGMENT = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


class GoldEnvironment(Protocol):
    """What the gold run needs of ``mcp_servers.environment.Environment``."""

    async def call_tool(self, name: str, arguments: dict) -> Any: ...

    async def state(self) -> EnvState: ...


class GoldFailure(Record):
    """Why the gold run failed: the step, and the tool's error text or the missing field."""

    step: int
    tool: str
    detail: str


class GoldResult(Record):
    """A successful gold run and the path with every reference pointing at a real field,
    and the slot values it ran with (another row's, where a tool refused the first)."""

    run: GoldRun
    steps: list[PlannedCall]
    slots: dict[str, JsonValue] = Field(default_factory=dict)


def observation_value(result: Any) -> JsonValue:
    """The observation as JSON: the structured result, else the text parsed, else the text.

    >>> class R: structured = None; text = '{"price": 9.5}'
    >>> observation_value(R())
    {'price': 9.5}
    """
    structured = getattr(result, "structured", None)
    if structured is not None:
        return structured
    text = getattr(result, "text", "") or ""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _segments(path: str) -> list[str | int]:
    out: list[str | int] = []
    for name, index in _SEGMENT.findall(path.replace("[]", "[0]")):
        out.append(int(index) if index else name)
    return out


_MISSING = object()


def _get(value: Any, segments: list[str | int]) -> Any:
    for seg in segments:
        if isinstance(seg, int):
            if not isinstance(value, list) or seg >= len(value):
                return _MISSING
            value = value[seg]
        else:
            if isinstance(value, list) and value and isinstance(value[0], Mapping):
                value = value[0]  # a field of a list of objects: its first item
            if not isinstance(value, Mapping) or seg not in value:
                return _MISSING
            value = value[seg]
    return value


def resolve_field(observation: JsonValue, path: str) -> JsonValue:
    """The value at a dotted path (``items[0].id``, ``flights[].id``) of an observation.

    Raises ``KeyError`` naming the path when it points at nothing.

    >>> resolve_field({"items": [{"id": "i9"}, {"id": "i10"}]}, "items[0].id")
    'i9'
    >>> resolve_field({"result": [{"id": 3}]}, "result[].id")
    3
    """
    value = _get(observation, _segments(path))
    if value is _MISSING:
        raise KeyError(path)
    return value


def find_field(observation: JsonValue, field: str) -> str | None:
    """A concrete path to ``field`` in ``observation``: the path itself when it resolves,
    else the nearest key named like its last segment (breadth first, first list items), else
    ``id`` inside a container named after the field (``product_id`` -> ``products[0].id``).

    >>> find_field({"order": {"total": 5}}, "total")
    'order.total'
    >>> find_field({"products": [{"id": "P1"}]}, "product_id")
    'products[0].id'
    """
    if _get(observation, _segments(field)) is not _MISSING:
        return field.replace("[]", "[0]")
    segments = [s for s in _segments(field) if isinstance(s, str)]
    if not segments:
        return None
    leaf = segments[-1]
    holder = leaf[: -len("_id")] if leaf.endswith("_id") else None
    fallback: str | None = None
    queue: deque[tuple[Any, str, str | None]] = deque([(observation, "", None)])
    while queue:
        value, path, key = queue.popleft()
        if isinstance(value, list):
            if value:
                queue.append((value[0], f"{path}[0]", key))
            continue
        if not isinstance(value, Mapping):
            continue
        if leaf in value and value[leaf] is not None:
            return f"{path}.{leaf}".lstrip(".")
        if fallback is None and holder and "id" in value and key and key.startswith(holder):
            fallback = f"{path}.id".lstrip(".")
        for k, v in value.items():
            if isinstance(v, Mapping | list):
                queue.append((v, f"{path}.{k}".lstrip("."), str(k)))
    return fallback


def _fit(value: JsonValue, schema: Mapping[str, Any]) -> JsonValue:
    """A referenced value shaped for the parameter: one item wrapped for an array param,
    the first item of a list for a scalar param."""
    kinds: set[str] = set()
    raw = schema.get("type")
    if isinstance(raw, str):
        kinds.add(raw)
    for option in schema.get("anyOf") or []:
        if isinstance(option, Mapping) and isinstance(option.get("type"), str):
            kinds.add(option["type"])
    if "array" in kinds and not isinstance(value, list):
        return [value]
    if kinds and "array" not in kinds and isinstance(value, list) and value:
        return value[0]
    return value


# later items of a referenced list tried when a tool refuses the first
OTHER_ITEMS = 4


def _other_items(
    observations: Sequence[JsonValue], bindings: Mapping[str, Any]
) -> list[tuple[str, RefArg]]:
    """(param, reference) for each reference through a list's item (the first, or the one
    the binder pointed at): the same field of the list's next items (up to ``OTHER_ITEMS``
    each), then of the items before it, that hold a value."""
    out: list[tuple[str, RefArg]] = []
    for name, arg in bindings.items():
        found = re.search(r"\[(\d+)\]", arg.field) if isinstance(arg, RefArg) else None
        if found is None:
            continue
        head, tail, first = arg.field[: found.start()], arg.field[found.end() :], int(found[1])
        # the binder's index is a guess at the tool's order (the state's): the items before
        # it are tried too, after the ones that follow
        later = range(first + 1, first + OTHER_ITEMS + 1)
        for k in [*later, *range(first)]:
            path = f"{head}[{k}]{tail}"
            value = _get(observations[arg.step], _segments(path))
            if value is not _MISSING and value not in (None, "", [], {}):
                out.append((name, RefArg(step=arg.step, field=path)))
    return out


class _NoChange:
    """A write's result that changed nothing, read by the gold run as a refusal."""

    is_error = True
    structured = None

    def __init__(self, tool: str, arguments: Mapping[str, JsonValue]) -> None:
        shown = ", ".join(f"{k}={v!r}" for k, v in arguments.items())
        self.text = f"{tool}({shown}) changed nothing: the value is already what it sets"


async def run_gold_path(
    env: GoldEnvironment,
    cluster: ToolCluster,
    steps: list[PlannedCall],
    slots: Mapping[str, JsonValue],
    initial_state: EnvState,
    alternatives: Mapping[int, Sequence[Mapping[str, JsonValue]]] | None = None,
) -> GoldResult | GoldFailure:
    """Run ``steps`` in order in ``env`` (already in its initial state) (docs/methods.md §3 step 7).

    Literal and slot arguments are filled in; a ``RefArg`` is read from the observation of
    its step (``find_field`` makes it concrete, and the returned path stores the concrete
    field). The first tool error or dangling reference ends the run with a ``GoldFailure``.
    """
    calls: list[GoldCall] = []
    observations: list[JsonValue] = []
    resolved: list[PlannedCall] = []
    slots = dict(slots)
    # a write must change the state it can be read from; an outside server's probes may not
    # see every write (a login kept in the session), so only a bundled cluster's full state
    # is watched
    watch = cluster.source != "outside" and cluster.state_readable and initial_state.readable
    for i, step in enumerate(steps):
        props = cluster.tool(step.tool).input_schema.get("properties") or {}
        arguments: dict[str, JsonValue] = {}
        bindings = dict(step.args)
        for name, arg in step.args.items():
            if isinstance(arg, LiteralArg):
                arguments[name] = arg.value
            elif isinstance(arg, SlotArg):
                if arg.name not in slots:
                    return GoldFailure(step=i, tool=step.tool, detail=f"no slot {arg.name!r}")
                arguments[name] = slots[arg.name]
            else:
                assert isinstance(arg, RefArg)
                if arg.step >= i:
                    return GoldFailure(step=i, tool=step.tool, detail=f"{name}: forward ref")
                path = find_field(observations[arg.step], arg.field)
                if path is None:
                    detail = f"{name}: no field {arg.field!r} in the output of step {arg.step}"
                    return GoldFailure(step=i, tool=step.tool, detail=detail)
                value = resolve_field(observations[arg.step], path)
                if value is None or value in ("", [], {}):
                    # an empty list or value passes nothing on: the step it feeds would act on
                    # nothing (create_entities(entities=[])), so the reference dangles here
                    detail = f"{name}: {arg.field!r} is empty in the output of step {arg.step}"
                    return GoldFailure(step=i, tool=step.tool, detail=detail)
                schema = props.get(name) if isinstance(props, Mapping) else None
                arguments[name] = _fit(value, schema if isinstance(schema, Mapping) else {})
                bindings[name] = RefArg(step=arg.step, field=path)
        writes = watch and cluster.tool(step.tool).access is ToolAccess.WRITE

        async def call(
            args: dict[str, JsonValue], writes: bool = writes, tool: str = step.tool
        ) -> Any:
            before = (await env.state()).state_hash if writes else None
            out = await env.call_tool(tool, args)
            # a write that changed nothing (change_seat to the seat already held)
            # demonstrates nothing: refused as a tool refusal is, so the step's other values
            # are tried (it changed nothing, so a retry is safe)
            unchanged = (
                writes
                and not getattr(out, "is_error", False)
                and (await env.state()).state_hash == before
            )
            return _NoChange(tool, args) if unchanged else out

        result = await call(arguments)
        is_error = bool(getattr(result, "is_error", False))
        if is_error:
            # the tool refused the first item of a list it was handed (run_tests on the data
            # file list_files named first): the same reference to a later item, the first
            # the tool accepts (a refused call changes nothing)
            for name, ref in _other_items(observations, bindings):
                schema = props.get(name) if isinstance(props, Mapping) else None
                value = resolve_field(observations[ref.step], ref.field)
                retry = {
                    **arguments,
                    name: _fit(value, schema if isinstance(schema, Mapping) else {}),
                }
                again = await call(retry)
                if not getattr(again, "is_error", False):
                    result, arguments, is_error = again, retry, False
                    bindings[name] = ref
                    break
        if is_error:
            # the tool refused a value drawn from the state (the user does not organize that
            # event, that booking's fare allows no seat change): the step's own slots from
            # the table's other rows, as the binder ranked them
            tried = alternatives.get(i, []) if alternatives is not None else []
            for override in tried:
                retry = {**arguments}
                for name, arg in step.args.items():
                    if isinstance(arg, SlotArg) and arg.name in override:
                        retry[name] = override[arg.name]
                if retry == arguments:
                    continue
                again = await call(retry)
                if not getattr(again, "is_error", False):
                    result, arguments, is_error = again, retry, False
                    slots.update(override)
                    break
        observation = observation_value(result)
        calls.append(
            GoldCall(
                tool=step.tool, arguments=arguments, observation=observation, is_error=is_error
            )
        )
        if is_error:
            text = getattr(result, "text", "") or str(observation)
            return GoldFailure(step=i, tool=step.tool, detail=text[:500])
        observations.append(observation)
        resolved.append(PlannedCall(tool=step.tool, args=bindings))
    final = await env.state()
    run = GoldRun(calls=calls, final_state=final, initial_state_hash=initial_state.state_hash)
    return GoldResult(run=run, steps=resolved, slots=slots)


# --------------------------------------------------------------------------- demonstrations
# A blueprint's gold run replayed into a full demonstration trajectory (SFT data for a policy
# that passes almost nothing): the real
# rollout loop (``agents.rollout.run_episode``) acts the task out with a scripted assistant
# that makes the gold calls in order (their real results come from a fresh environment in
# the task's initial state), asks first for what the user holds back, and then answers with
# the values the constraints check. User turns come from the simulator on the run's model,
# or, without one, from ``TemplateUser`` (reveals what is asked, then thanks). The result is
# verified like any rollout and carries ``source="gold"``.


def _chat(message: Message, role: AgentRole, model: str) -> ChatResult:
    return ChatResult(
        message=message,
        usage=LLMUsage(role=role, model=model),
        finish_reason="tool_calls" if message.tool_calls else "stop",
    )


def _readings(messages: Sequence[Message]) -> list[ToolCallRecord]:
    """The tool calls of an episode so far with their results, as the verifier reads them (a
    reading that changes between reads is matched on the call's arguments)."""
    calls = {
        call.id: call.function
        for m in messages
        if m.role == MessageRole.ASSISTANT
        for call in m.tool_calls or []
    }
    records = []
    for m in messages:
        if m.role != MessageRole.TOOL:
            continue
        function = calls.get(m.tool_call_id or "")
        raw = function.arguments if function is not None else "{}"
        arguments = parse_json_maybe(raw)
        records.append(
            ToolCallRecord(
                call_id=m.tool_call_id or "",
                tool=m.name or (function.name if function is not None else ""),
                raw_arguments=raw,
                arguments=arguments if isinstance(arguments, dict) else None,
                observation=m.content or "",
            )
        )
    return records


def answer_values(blueprint: Blueprint, messages: Sequence[Message] = ()) -> list[str]:
    """The values the task's answer must state (its ``answer_contains`` constraints); a value
    that changes between reads is taken from the episode's own call in ``messages``."""
    values: list[str] = []
    for c in blueprint.constraints:
        if not isinstance(c, AnswerContains):
            continue
        if c.observed is not None and messages:
            try:
                values.append(str(observed_reading(_readings(messages), c.observed)))
                continue
            except LookupError:
                pass
        values.extend(str(v) for v in c.values)
    return values


def _field_named(observations: Sequence[JsonValue], value: str) -> str | None:
    """The name of the field that holds ``value`` in the latest observation that has it."""

    def walk(node: Any, key: str | None) -> str | None:
        if isinstance(node, Mapping):
            for k, v in node.items():
                found = walk(v, str(k))
                if found:
                    return found
        elif isinstance(node, list):
            for v in node:
                found = walk(v, key)
                if found:
                    return found
        elif node is not None and not isinstance(node, bool) and str(node) == value:
            return key
        return None

    for observation in reversed(observations):
        parsed = observation
        if isinstance(observation, str):
            try:
                parsed = json.loads(observation)
            except ValueError:
                continue
        found = walk(parsed, None)
        if found:
            return found
    return None


def template_answer(blueprint: Blueprint, messages: Sequence[Message] = ()) -> str:
    """A plain closing answer that says what was done and states every value the
    constraints check, each named by the field it was read from ("The booking id is BK9.").

    A bare list of values ("Here is what I found: confirmed.") says nothing a user can act
    on, and teaches a model to answer that way."""
    values = answer_values(blueprint, messages)
    done = list(
        dict.fromkeys(
            " ".join(name_tokens(c.call.tool))  # "get sum", never the identifier "get-sum"
            for c in getattr(blueprint, "constraints", [])
            if isinstance(c, ToolCalled) and c.hard
        )
    )
    gold = getattr(blueprint, "gold_run", None)
    observations: list[JsonValue] = [r.observation for r in _readings(messages)] or [
        c.observation for c in (gold.calls if gold is not None else [])
    ]
    named, unnamed = [], []
    for value in values:
        field = _field_named(observations, value)
        if field:
            named.append(f"the {field.replace('_', ' ')} is {value}")
        else:
            unnamed.append(value)
    parts = []
    if done:
        parts.append("Done: " + " and ".join(done) + " went through.")
    if named:
        text = "; ".join(named)
        parts.append(text[0].upper() + text[1:] + ".")
    if unnamed:
        parts.append("Here is what I found: " + ", ".join(unnamed) + ".")
    if not parts:
        return "All done: I have taken care of that for you."
    return " ".join(parts)


class GoldPolicy:
    """A scripted assistant (an ``LLMClient`` for the assistant role) replaying a gold run.

    Other roles go to ``others`` (the user simulator's model); with none, ``TemplateUser``.
    ``words`` (the planner's model) may phrase the final answer; a phrasing that drops a
    checked value is replaced by ``template_answer``.
    """

    def __init__(
        self,
        blueprint: Blueprint,
        others: LLMClient | None = None,
        words: LLMClient | None = None,
    ) -> None:
        self.blueprint = blueprint
        self.others = others or TemplateUser(blueprint)
        self.words = words
        self.asked = not blueprint.hidden_info
        self.next_call = 0
        self.answered = False

    async def chat(
        self, messages: Sequence[Message], *, role: AgentRole, **options: Any
    ) -> ChatResult:
        """``LLMClient.chat``: ``options`` (tools, sampling) pass through unchanged."""
        if role is not AgentRole.ASSISTANT:
            return await self.others.chat(messages, role=role, **options)
        return await self._assistant_turn(messages)

    async def _assistant_turn(self, messages: Sequence[Message]) -> ChatResult:
        bp = self.blueprint
        if not self.asked:
            self.asked = True
            wanted = ", ".join(k.replace("_", " ") for k in bp.hidden_info)
            text = f"Sure, I can help with that. Could you tell me your {wanted}?"
            return _chat(
                Message(role=MessageRole.ASSISTANT, content=text), AgentRole.ASSISTANT, "gold"
            )
        calls = bp.gold_run.calls
        if self.next_call < len(calls):
            gold = calls[self.next_call]
            self.next_call += 1
            call = ToolCall(
                id=f"call_gold_{self.next_call}",
                function=FunctionCall(name=gold.tool, arguments=json.dumps(gold.arguments)),
            )
            msg = Message(role=MessageRole.ASSISTANT, content=None, tool_calls=[call])
            return _chat(msg, AgentRole.ASSISTANT, "gold")
        self.answered = True
        return _chat(
            Message(role=MessageRole.ASSISTANT, content=await self._answer_words(messages)),
            AgentRole.ASSISTANT,
            "gold",
        )

    async def _answer_words(self, messages: Sequence[Message]) -> str:
        fallback = template_answer(self.blueprint, messages)
        if self.words is None:
            return fallback
        prompt = (
            "Rewrite this reply to a customer in one friendly sentence, keeping every value "
            f"exactly as written:\n{fallback}"
        )
        try:
            result = await self.words.chat(
                [Message(role=MessageRole.USER, content=prompt)],
                role=AgentRole.PLANNER,
                temperature=0.3,
                max_tokens=80,
            )
        except InfraError:
            return fallback
        text = (result.message.content or "").strip()
        values = answer_values(self.blueprint, messages)
        if not text or any(v.lower() not in text.lower() for v in values):
            return fallback
        return text


class TemplateUser:
    """A user simulator without a model: reveals the held-back facts when asked, then
    thanks the assistant and stops (``###STOP###``)."""

    def __init__(self, blueprint: Blueprint) -> None:
        self.blueprint = blueprint

    async def chat(self, messages: Sequence[Message], *, role: AgentRole, **_: Any) -> ChatResult:
        last = next((m for m in reversed(messages) if m.content), None)
        asking = last is not None and "?" in (last.content or "")
        if asking and self.blueprint.hidden_info:
            text = " ".join(
                f"My {k.replace('_', ' ')} is {v}." for k, v in self.blueprint.hidden_info.items()
            )
        else:
            text = "Thanks, that is all I needed. ###STOP###"
        return _chat(Message(role=MessageRole.ASSISTANT, content=text), role, "template")


async def gold_demonstration(
    blueprint: Blueprint,
    env: Any,
    *,
    run_id: str,
    assistant: Any = None,
    user_llm: LLMClient | None = None,
    words_llm: LLMClient | None = None,
    shown: Sequence[ToolSpec] | None = None,
) -> tuple[Trajectory, EnvState | None]:
    """Replay ``blueprint``'s gold run in ``env`` (fresh, in the task's initial state) as a
    full demonstration; returns the trajectory (``source="gold"``) and the final state.
    ``shown``: the tools the demonstration lists (None: every tool; ``agents.context``)."""
    from trajsynth.agents.assistant import Assistant
    from trajsynth.agents.rollout import run_episode
    from trajsynth.agents.user_sim import UserSimulator

    extra = 1 if blueprint.hidden_info else 0
    turns = len(blueprint.gold_run.calls) + 1 + extra
    result = await run_episode(
        blueprint=blueprint,
        env=env,
        llm=GoldPolicy(blueprint, user_llm, words_llm),
        assistant=assistant or Assistant(),
        user_sim=UserSimulator(),
        budgets=Budgets(max_turns=turns, max_tool_calls=max(turns, 1), max_tokens=100_000),
        run_id=f"{run_id}:gold",
        shown=shown,
    )
    trajectory = result.trajectory.model_copy(update={"source": "gold", "run_id": run_id})
    return trajectory, result.final_state


async def gold_demos(
    tasks: Sequence[Blueprint],
    clusters: Mapping[str, ToolCluster],
    *,
    run_id: str,
    sandbox_kind: Any = None,
    user_llm: LLMClient | None = None,
    words_llm: LLMClient | None = None,
    distractors: int | None = None,
) -> list[tuple[Trajectory, Verdict]]:
    """The verified gold demonstration of every task that yields one: each replayed in a
    fresh sandboxed environment and verified with ``curation.verify`` exactly as a rollout
    is. A replay that fails its own constraints (the task's words or checks are off) is
    logged and left out. ``distractors``: list the needed tools plus that many nearest
    (``LLMConfig.distractors``), as the rollouts and evals the rows go with do."""
    from trajsynth.agents.context import shown_tools
    from trajsynth.curation.verify import verify
    from trajsynth.mcp_servers.environment import open_environment
    from trajsynth.schemas import SandboxKind

    kind = sandbox_kind or SandboxKind.AUTO
    out: list[tuple[Trajectory, Verdict]] = []
    for task in tasks:
        async with open_environment(
            clusters[task.cluster_id], sandbox_kind=kind, seed=task.seed
        ) as env:
            trajectory, state = await gold_demonstration(
                task,
                env,
                run_id=run_id,
                user_llm=user_llm,
                words_llm=words_llm,
                shown=shown_tools(task, env.tools, context_tokens=None, distractors=distractors),
            )
        final = state or EnvState(state_hash="unavailable", readable=False)
        verdict = verify(trajectory, task.constraints, final)
        if verdict.passed:
            out.append((trajectory, verdict))
        else:
            failed = [r for r in verdict.results if not r.passed]
            log.warning("gold replay of %s failed its checks: %s", task.blueprint_id, failed[:2])
    return out
