"""Chat messages in the OpenAI format, the layout TRL and the HF chat templates read."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Literal

from pydantic import Field

from trajsynth.schemas._base import JsonValue, Record

__all__ = ["FunctionCall", "Message", "MessageRole", "ToolCall"]


class MessageRole(StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class FunctionCall(Record):
    name: str
    # A JSON *string*, as on the wire: model output is untrusted and may not parse.
    arguments: str = "{}"

    def parsed_arguments(self) -> dict[str, JsonValue]:
        """The arguments as a dict; raises ``ValueError`` when they are not a JSON object
        (also for JSON nested past the parser's recursion limit)."""
        try:
            value = json.loads(self.arguments or "{}")
        except RecursionError as exc:
            raise ValueError("tool arguments are nested too deeply") from exc
        if not isinstance(value, dict):
            raise ValueError(f"tool arguments must be a JSON object, got {type(value).__name__}")
        return value


class ToolCall(Record):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(Record):
    role: MessageRole
    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = Field(default=None, description="tool name on tool messages")

    def to_openai(self) -> dict[str, JsonValue]:
        """The message as the OpenAI API and the chat templates take it (no null fields)."""
        return self.model_dump(mode="json", exclude_none=True)
