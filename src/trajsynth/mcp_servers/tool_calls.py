"""Untrusted model output -> checked tool calls -> call records.

Bad JSON, an unknown tool or arguments that break the tool's schema become a recorded failed
step of class ``model`` with an error message the policy sees; never a crash. A checked call
that reached the environment becomes its record with :func:`call_record` (the rollout loop
and GRPO's tool environment both build their records here).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Protocol

import jsonschema
from pydantic import JsonValue

from trajsynth.schemas import (
    FailureClass,
    InfraError,
    ObsClass,
    ToolCall,
    ToolCallRecord,
    ToolSpec,
)

__all__ = [
    "SERVER_KILLED",
    "CheckedCall",
    "ToolResult",
    "call_record",
    "check_tool_call",
    "obs_class",
    "storable_text",
]


class CheckedCall:
    """A tool call after checking: either ``arguments`` to send, or a ready failure record."""

    __slots__ = ("arguments", "call", "failure")

    def __init__(
        self,
        call: ToolCall,
        arguments: dict[str, JsonValue] | None,
        failure: ToolCallRecord | None,
    ) -> None:
        self.call = call
        self.arguments = arguments
        self.failure = failure


SERVER_KILLED = "server_killed"
"""``error_type`` of a call during which the tool server died while running the model's
program, the sandbox alive: class ``model`` (the policy sabotaged its environment), with the
evidence in the observation; never an infra fault excused from the pass rate."""

_SURROGATE = re.compile("[\ud800-\udfff]")


def storable_text(text: str) -> str:
    r"""``text`` with every surrogate code point (which UTF-8, JSON writers and DuckDB refuse)
    written as its escape ``\uXXXX``; valid text is unchanged, and nothing is lost.

    >>> storable_text("ok"), storable_text("a\ud800b")
    ('ok', 'a\\ud800b')
    """
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _failure(call: ToolCall, turn: int, error_type: str, message: str, args=None) -> ToolCallRecord:
    # the record must serialise whatever the call held: a caller that skips the response
    # parser can hand over a tool name or arguments with lone surrogates
    return ToolCallRecord(
        call_id=storable_text(call.id),
        tool=storable_text(call.function.name),
        raw_arguments=storable_text(call.function.arguments),
        arguments=args,
        observation=storable_text(f"Error: {message}"),
        obs_class=ObsClass.ERROR,
        failure_class=FailureClass.MODEL,
        error_type=error_type,
        turn=turn,
    )


def check_tool_call(call: ToolCall, tools: Mapping[str, ToolSpec], *, turn: int) -> CheckedCall:
    """Parse and validate one tool call the model made.

    >>> from trajsynth.schemas import FunctionCall
    >>> tools = {"get_order": ToolSpec(name="get_order", input_schema={
    ...     "type": "object", "properties": {"order_id": {"type": "string"}},
    ...     "required": ["order_id"]})}
    >>> bad = ToolCall(id="c1", function=FunctionCall(name="get_order", arguments='{"order_id": '))
    >>> check_tool_call(bad, tools, turn=0).failure.error_type
    'invalid_json'
    >>> args = '{"order_id": "#W1"}'
    >>> ok = ToolCall(id="c2", function=FunctionCall(name="get_order", arguments=args))
    >>> check_tool_call(ok, tools, turn=0).arguments
    {'order_id': '#W1'}
    """
    name = call.function.name
    spec = tools.get(name)
    if spec is None:
        known = ", ".join(sorted(tools)) or "none"
        return CheckedCall(
            call,
            None,
            _failure(call, turn, "unknown_tool", f"unknown tool {name!r}; tools: {known}"),
        )
    try:
        args = json.loads(call.function.arguments or "{}")
    except json.JSONDecodeError as exc:
        return CheckedCall(
            call,
            None,
            _failure(call, turn, "invalid_json", f"arguments are not valid JSON ({exc.msg})"),
        )
    except (ValueError, RecursionError) as exc:  # an integer past Python's digit limit, depth
        why = str(exc) if isinstance(exc, ValueError) else "nested too deeply"
        return CheckedCall(
            call, None, _failure(call, turn, "invalid_json", f"arguments cannot be read ({why})")
        )
    if not isinstance(args, dict):
        return CheckedCall(
            call, None, _failure(call, turn, "invalid_json", "arguments must be a JSON object")
        )
    problem = _unstorable(args)
    if problem is not None:
        return CheckedCall(call, None, _failure(call, turn, "invalid_json", problem))
    validator = jsonschema.Draft202012Validator(spec.input_schema)
    errors = sorted(validator.iter_errors(args), key=lambda e: list(e.path))
    if errors:
        where = ".".join(str(p) for p in errors[0].path) or "arguments"
        return CheckedCall(
            call,
            args,
            _failure(call, turn, "schema_violation", f"{where}: {errors[0].message}", args=args),
        )
    return CheckedCall(call, args, None)


MAX_ARGUMENT_DEPTH = 32
"""Deepest nesting of arguments accepted; deeper is a ``model`` failure, not a crash later
(JSON encoders, schema validation and pydantic recurse)."""


def _unstorable(args: dict[str, JsonValue]) -> str | None:
    """Why parsed arguments cannot be validated, stored and hashed, or None.

    JSON parsers accept what later steps refuse: nesting deeper than the encoders recurse,
    unpaired surrogates (``"\\ud800"``) that UTF-8 cannot encode, and NaN or infinite
    numbers that strict JSON (DuckDB) cannot hold.

    >>> _unstorable({"a": [1, {"b": "x"}]}) is None
    True
    >>> _unstorable({"a": chr(0xD800)})
    'arguments contain an unpaired surrogate (U+D800-U+DFFF)'
    """
    stack: list[tuple[object, int]] = [(args, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > MAX_ARGUMENT_DEPTH:
                return f"arguments nest deeper than {MAX_ARGUMENT_DEPTH} levels"
            items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
            stack.extend((item, depth + 1) for item in items)
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return "arguments contain an unpaired surrogate (U+D800-U+DFFF)"
        elif isinstance(value, float) and not math.isfinite(value):
            return "arguments contain a number JSON cannot hold (NaN or infinite)"
    return None


class ToolResult(Protocol):
    """What an environment's ``call_tool`` returns (``mcp_servers.Environment`` does)."""

    text: str
    is_error: bool
    error_type: str | None
    structured: JsonValue


def obs_class(text: str, is_error: bool) -> ObsClass:
    """The observation class of a tool result: error, empty, or ok."""
    if is_error:
        return ObsClass.ERROR
    return ObsClass.EMPTY if text.strip() in ("", "null", "[]", "{}") else ObsClass.OK


def call_record(
    call: ToolCall,
    arguments: dict[str, JsonValue],
    outcome: ToolResult | InfraError,
    *,
    latency_s: float,
    turn: int = 0,
) -> ToolCallRecord:
    """The record of a checked call that reached the environment: its result, or the infra
    fault that stopped it."""
    common = {
        "call_id": storable_text(call.id),
        "tool": storable_text(call.function.name),
        "raw_arguments": storable_text(call.function.arguments),
        "arguments": arguments,
        "latency_s": latency_s,
        "turn": turn,
    }
    if isinstance(outcome, InfraError):
        return ToolCallRecord(
            **common,
            observation=storable_text(f"Error: {outcome}"),
            obs_class=ObsClass.ERROR,
            failure_class=FailureClass.INFRA,
            error_type=type(outcome).__name__,
        )
    return ToolCallRecord(
        **common,
        observation=storable_text(outcome.text),
        obs_class=obs_class(outcome.text, outcome.is_error),
        failure_class=(
            FailureClass.MODEL
            if outcome.error_type == SERVER_KILLED
            else FailureClass.TOOL
            if outcome.is_error
            else None
        ),
        error_type=outcome.error_type,
    )
