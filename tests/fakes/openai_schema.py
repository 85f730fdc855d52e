"""The chat-completions request as the OpenAI API reference defines it, read strictly.

Pydantic models of ``POST /v1/chat/completions`` (openai-openapi's
``CreateChatCompletionRequest`` and its message types), with every object closed
(``extra="forbid"``): a field the spec does not give a message of that role, or the request,
is refused, as servers that validate their input refuse it. Two rules are stricter than the
spec's letter, because real servers read the request that way:

* an assistant message carries ``content`` always (``""`` or ``null`` when it only calls
  tools): llama-cpp-python's chat templates read ``message.content`` and fail without it;
* every tool message answers a call of an earlier assistant message (``tool_call_id``), and
  ``tool_choice`` / ``top_logprobs`` come only with ``tools`` / ``logprobs`` (OpenAI answers
  400 otherwise).

``check_request(body)`` raises ``pydantic.ValidationError`` for a body that breaks them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["ChatCompletionRequest", "check_request"]

_NAME = r"^[a-zA-Z0-9_-]{1,64}$"  # the spec's pattern for a function name


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TextPart(_Closed):
    type: Literal["text"]
    text: str


Content = str | list[TextPart]


class SystemMessage(_Closed):
    role: Literal["system"]
    content: Content
    name: str | None = None


class DeveloperMessage(_Closed):
    role: Literal["developer"]
    content: Content
    name: str | None = None


class UserMessage(_Closed):
    role: Literal["user"]
    content: Content
    name: str | None = None


class CalledFunction(_Closed):
    name: str
    arguments: str  # a JSON text, not an object


class ToolCallParam(_Closed):
    id: str = Field(min_length=1)
    type: Literal["function"]
    function: CalledFunction


class AssistantMessage(_Closed):
    role: Literal["assistant"]
    content: Content | None  # required key (see the module doc), null allowed beside calls
    name: str | None = None
    refusal: str | None = None
    tool_calls: list[ToolCallParam] | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _says_or_calls(self) -> AssistantMessage:
        if self.content is None and not self.tool_calls:
            raise ValueError("an assistant message without tool_calls needs content")
        return self


class ToolMessage(_Closed):
    role: Literal["tool"]
    content: Content
    tool_call_id: str = Field(min_length=1)


Message = Annotated[
    SystemMessage | DeveloperMessage | UserMessage | AssistantMessage | ToolMessage,
    Field(discriminator="role"),
]


class FunctionDefinition(_Closed):
    name: str = Field(pattern=_NAME)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    @model_validator(mode="after")
    def _object_schema(self) -> FunctionDefinition:
        if self.parameters is not None and self.parameters.get("type") != "object":
            raise ValueError("function parameters must be a JSON Schema of type object")
        return self


class ToolParam(_Closed):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(_Closed):
    name: str = Field(pattern=_NAME)


class NamedToolChoice(_Closed):
    type: Literal["function"]
    function: NamedFunction


class ChatCompletionRequest(_Closed):
    model: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    tools: list[ToolParam] | None = Field(default=None, min_length=1, max_length=128)
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    seed: int | None = None
    n: int | None = Field(default=None, ge=1, le=128)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    stop: str | list[str] | None = None
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    user: str | None = None
    stream: bool | None = None

    @model_validator(mode="after")
    def _consistent(self) -> ChatCompletionRequest:
        if self.tool_choice is not None and not self.tools:
            raise ValueError("tool_choice is only allowed when tools are specified")
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs requires logprobs to be true")
        if isinstance(self.tool_choice, NamedToolChoice):
            names = {t.function.name for t in self.tools or []}
            if self.tool_choice.function.name not in names:
                raise ValueError(f"tool_choice names {self.tool_choice.function.name!r}")
        called: set[str] = set()
        for i, message in enumerate(self.messages):
            if isinstance(message, AssistantMessage):
                called.update(c.id for c in message.tool_calls or [])
            elif isinstance(message, ToolMessage) and message.tool_call_id not in called:
                raise ValueError(
                    f"messages[{i}]: a tool message must answer a preceding tool call "
                    f"(no call has id {message.tool_call_id!r})"
                )
        return self


def check_request(body: dict[str, Any]) -> ChatCompletionRequest:
    """``body`` read as a strict server reads it; raises ``ValidationError`` if refused."""
    return ChatCompletionRequest.model_validate(body)
