"""One planner request whose answer must be a call of one given function.

The planner LLM writes structured values (argument values, edge proposals) as the arguments
of a function it is made to call (``tool_choice="required"``, the only tool of the request):
servers that constrain tool calls by grammar (llama.cpp, vLLM) can then only answer with
JSON of the function's schema. What comes back is still checked by the caller.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from trajsynth.llm.client import ChatResult, LLMClient
from trajsynth.schemas import AgentRole, JsonValue, Message

__all__ = ["call_function", "function_arguments"]

log = logging.getLogger(__name__)


def function_arguments(result: ChatResult, name: str) -> dict[str, JsonValue]:
    """The arguments of the reply's first call of ``name`` as a JSON object; ``{}`` when it
    made none, or its arguments are not a JSON object."""
    for call in result.message.tool_calls or []:
        if call.function.name != name:
            continue
        try:
            data = json.loads(call.function.arguments)
        except ValueError:
            log.info("%s: the reply's arguments are not JSON", name)
            return {}
        return data if isinstance(data, dict) else {}
    return {}


async def call_function(
    llm: LLMClient,
    messages: Sequence[Message],
    tool: dict[str, Any],
    *,
    seed: int,
    temperature: float,
    max_tokens: int,
) -> tuple[dict[str, JsonValue], ChatResult]:
    """Ask the planner's model to call ``tool`` (an OpenAI function tool); returns its
    arguments (``function_arguments``) and the whole result (usage, logprobs)."""
    result = await llm.chat(
        list(messages),
        role=AgentRole.PLANNER,
        tools=[tool],
        tool_choice="required",
        temperature=temperature,
        max_tokens=max_tokens,
        seed=seed,
    )
    return function_arguments(result, tool["function"]["name"]), result
