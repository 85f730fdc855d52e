"""A tuned policy served back: the assistant role on its own llama.cpp server.

``serve_policy(gguf)`` starts the embedded llama.cpp server on a policy's GGUF (a HF model
folder is converted first by ``training.serve.policy_gguf``). ``RoleRoutedLLM`` sends the
assistant's turns to that server and every other role (planner, user simulator) to the
run's own model, so only the policy changes between a base and a tuned run.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from trajsynth.llm.client import ChatResult, LLMClient, OpenAILLMClient
from trajsynth.schemas import AgentRole, InputError, LLMConfig, Message

__all__ = ["RoleRoutedLLM", "serve_policy"]

log = logging.getLogger(__name__)


class RoleRoutedLLM:
    """An ``LLMClient`` that answers the assistant role with ``policy``, the rest with ``base``."""

    def __init__(self, policy: LLMClient, base: LLMClient) -> None:
        self.policy = policy
        self.base = base

    async def chat(
        self, messages: Sequence[Message], *, role: AgentRole, **options: Any
    ) -> ChatResult:
        """``LLMClient.chat``: ``options`` (tools, sampling) pass through unchanged."""
        client = self.policy if role is AgentRole.ASSISTANT else self.base
        return await client.chat(messages, role=role, **options)


@contextlib.asynccontextmanager
async def serve_policy(
    gguf: str | Path, llm: LLMConfig, *, startup_timeout_s: float = 180.0
) -> AsyncIterator[OpenAILLMClient]:
    """An LLM client for the policy GGUF at ``gguf`` on its own embedded llama.cpp server."""
    from trajsynth.llm.embedded import EmbeddedLLMServer

    path = Path(gguf)
    if not (path.is_file() and path.suffix == ".gguf"):
        raise InputError(f"policy {gguf} is not a .gguf file (convert a HF model folder first)")
    server = EmbeddedLLMServer(
        model_path=path,
        model_alias=llm.model,
        n_ctx=llm.embedded_ctx,  # [llm] embedded_ctx holds for a policy's server too
        startup_timeout_s=startup_timeout_s,
    )
    server.start()
    try:
        client = OpenAILLMClient(llm.model_copy(update={"base_url": server.base_url}))
        try:
            yield client
        finally:
            await client.aclose()
    finally:
        server.stop()
