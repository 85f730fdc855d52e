"""Tool-call records serialise whatever the call held (lone surrogates escaped, not lost)."""

from __future__ import annotations

import json

from trajsynth.mcp_servers.tool_calls import call_record, check_tool_call
from trajsynth.schemas import (
    FailureClass,
    FunctionCall,
    SandboxError,
    ToolCall,
    ToolCallRecord,
    ToolSpec,
    canonical_json,
)

LONE = chr(0xD800)
TOOLS = {"echo": ToolSpec(name="echo", input_schema={"type": "object"})}


def _round_trip(record: ToolCallRecord) -> ToolCallRecord:
    blob = record.model_dump_json()  # raised PydanticSerializationError before
    canonical_json(record.model_dump(mode="json")).encode("utf-8")  # what ids hash
    return ToolCallRecord.model_validate(json.loads(blob))


def test_unknown_tool_named_by_a_lone_surrogate_is_a_storable_model_failure() -> None:
    call = ToolCall(id=f"c{LONE}", function=FunctionCall(name=LONE, arguments=f'{{"a": "{LONE}"'))
    failure = check_tool_call(call, TOOLS, turn=2).failure
    assert failure is not None and failure.failure_class is FailureClass.MODEL
    back = _round_trip(failure)
    assert back.tool == "\\ud800" and back.call_id == "c\\ud800"
    assert back.raw_arguments == '{"a": "\\ud800"'
    assert "'\\\\ud800'" in back.observation or "\\ud800" in back.observation


def test_the_record_of_a_call_that_reached_the_environment_escapes_too() -> None:
    call = ToolCall(id="c1", function=FunctionCall(name=f"echo{LONE}", arguments="{}"))
    record = call_record(call, {}, SandboxError(f"boom {LONE}"), latency_s=0.1)
    back = _round_trip(record)
    assert back.tool == "echo\\ud800" and back.failure_class is FailureClass.INFRA


def test_valid_text_is_unchanged() -> None:
    call = ToolCall(id="c1", function=FunctionCall(name="échø", arguments='{"q": "😀"}'))
    failure = check_tool_call(call, TOOLS, turn=0).failure
    assert failure is not None
    assert _round_trip(failure).tool == "échø" and failure.raw_arguments == '{"q": "😀"}'
