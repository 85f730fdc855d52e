"""Hand-built trajectories and verdicts for curation tests (no rollout engine, no LLM).

``make_trajectory("r1", [[call("get_order", {"order_id": "W1"}, {"status": "ok"})], "Which?"])``
gives a rollout whose first assistant turn calls ``get_order`` and whose second asks the user;
``final`` adds the closing assistant answer. Messages and ``ToolCallRecord``s agree, as the
rollout loop writes them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trajsynth.schemas import (
    FailureClass,
    FunctionCall,
    Message,
    MessageRole,
    ObsClass,
    Termination,
    ToolCall,
    ToolCallRecord,
    Trajectory,
    Verdict,
)

__all__ = ["Call", "call", "make_trajectory", "make_verdict", "methods_example", "verdicts_for"]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": "",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
        },
    }
    for name in ("get_order", "get_item", "list_items", "cancel_order", "add_item")
]


@dataclass(frozen=True)
class Call:
    tool: str
    args: Mapping[str, Any] | str
    obs: Any = "ok"
    error: str | None = None  # error_type; the call's class is error when set
    failure: FailureClass | None = None


def call(
    tool: str,
    args: Mapping[str, Any] | str | None = None,
    obs: Any = "ok",
    *,
    error: str | None = None,
    failure: FailureClass | None = None,
) -> Call:
    return Call(tool, {} if args is None else args, obs, error, failure)


def make_trajectory(
    tid: str,
    turns: Sequence[Sequence[Call] | str],
    *,
    task_id: str = "task-1",
    final: str | None = "Here is what I found.",
    replies: Mapping[int, str] | None = None,
    closing: str | None = "Thanks!",
    opening: str = "Please check my order W1.",
    termination: Termination = Termination.USER_STOP,
    failure_class: FailureClass | None = None,
) -> Trajectory:
    """A trajectory: one assistant turn per item (calls, or a text question), then ``final``."""
    replies = replies or {}
    messages = [
        Message(role=MessageRole.SYSTEM, content="You are a helpful assistant."),
        Message(role=MessageRole.USER, content=opening),
    ]
    records: list[ToolCallRecord] = []
    n = 0
    for index, turn in enumerate(turns):
        if isinstance(turn, str):
            messages.append(Message(role=MessageRole.ASSISTANT, content=turn))
            messages.append(Message(role=MessageRole.USER, content=replies.get(index, "Sure.")))
            continue
        tool_calls = []
        for c in turn:
            n += 1
            raw = c.args if isinstance(c.args, str) else json.dumps(c.args)
            tool_calls.append(
                ToolCall(id=f"{tid}-c{n}", function=FunctionCall(name=c.tool, arguments=raw))
            )
        messages.append(Message(role=MessageRole.ASSISTANT, content=None, tool_calls=tool_calls))
        for tc, c in zip(tool_calls, turn, strict=True):
            text = c.obs if isinstance(c.obs, str) else json.dumps(c.obs)
            parsed: Any = None
            if isinstance(c.args, str):
                try:
                    parsed = json.loads(c.args)
                except ValueError:
                    parsed = None
            else:
                parsed = dict(c.args)
            is_error = c.error is not None
            if is_error:
                text = text if text.startswith("Error") else f"Error: {text}"
            cls = (
                ObsClass.ERROR
                if is_error
                else (ObsClass.EMPTY if text.strip() in ("", "[]", "{}", "null") else ObsClass.OK)
            )
            failure = c.failure or (FailureClass.TOOL if is_error else None)
            records.append(
                ToolCallRecord(
                    call_id=tc.id,
                    tool=c.tool,
                    raw_arguments=tc.function.arguments,
                    arguments=parsed if isinstance(parsed, dict) else None,
                    observation=text,
                    obs_class=cls,
                    failure_class=failure,
                    error_type=c.error,
                    turn=index,
                )
            )
            messages.append(
                Message(role=MessageRole.TOOL, content=text, tool_call_id=tc.id, name=c.tool)
            )
        if index in replies:
            messages.append(Message(role=MessageRole.USER, content=replies[index]))
    n_turns = len(turns)
    if final is not None:
        messages.append(Message(role=MessageRole.ASSISTANT, content=final))
        n_turns += 1
        if closing is not None:
            messages.append(Message(role=MessageRole.USER, content=closing))
    return Trajectory(
        trajectory_id=tid,
        run_id="run-1",
        blueprint_id=task_id,
        tree_id=f"tree-{tid}",
        leaf_node_id=f"leaf-{tid}",
        cluster_id="shop",
        messages=messages,
        tools=TOOLS,
        calls=records,
        final_answer=final,
        termination=termination,
        failure_class=failure_class,
        n_turns=n_turns,
    )


def make_verdict(
    tid: str, passed: bool, *, excluded: bool = False, recovered: bool = False
) -> Verdict:
    """``recovered``: the verifier saw every failed call corrected by a later one."""
    return Verdict(
        verdict_id=f"v-{tid}",
        trajectory_id=tid,
        results=[],
        passed=passed,
        score=1.0 if passed else 0.0,
        excluded=excluded,
        recovered=recovered and passed,
    )


def verdicts_for(
    outcomes: Mapping[str, bool], *, recovered: Sequence[str] = ()
) -> dict[str, Verdict]:
    return {tid: make_verdict(tid, ok, recovered=tid in recovered) for tid, ok in outcomes.items()}


def methods_example() -> tuple[list[Trajectory], dict[str, Verdict]]:
    """docs/methods.md §8: r1, r2: A→B→C; r3: A→E→B→C; r4: A→E→F."""
    order = {"order_id": "W1", "status": "delivered"}
    good = call("get_order", {"order_id": "W1"}, order)
    bad = call("get_order", {"order_id": "X9"}, "no such order", error="not_found")
    trajectories = [
        make_trajectory("r1", [[good]]),
        make_trajectory("r2", [[good]]),
        make_trajectory("r3", [[bad], [good]]),
        make_trajectory("r4", [[bad]], final="Sorry, I could not find it."),
    ]
    verdicts = verdicts_for({"r1": True, "r2": True, "r3": True, "r4": False})
    return trajectories, verdicts
