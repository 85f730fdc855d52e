"""A tuned policy served back: the assistant role on its own llama.cpp server.

``serve_policy(path)`` resolves a policy (a GGUF file, a folder holding one, or a HF model
folder, which ``training.serve.export_gguf`` converts first) and starts the embedded
llama.cpp server on it. ``RoleRoutedLLM`` sends the assistant's turns to that server and
every other role (planner, user simulator) to the run's own model, so only the policy
changes between a base and a tuned run.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from trajsynth.agents.llm import ChatResult, LLMClient, OpenAILLMClient
from trajsynth.schemas import AgentRole, InputError, LLMConfig, Message

__all__ = ["RoleRoutedLLM", "policy_gguf", "serve_policy"]

log = logging.getLogger(__name__)


class RoleRoutedLLM:
    """An ``LLMClient`` that answers the assistant role with ``policy``, the rest with ``base``."""

    def __init__(self, policy: LLMClient, base: LLMClient) -> None:
        self.policy = policy
        self.base = base

    async def chat(
        self,
        messages: Sequence[Message],
        *,
        role: AgentRole,
        tools: list[dict] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
        n: int = 1,
        tool_choice: str | dict | None = None,
    ) -> ChatResult:
        client = self.policy if role is AgentRole.ASSISTANT else self.base
        return await client.chat(
            messages,
            role=role,
            tools=tools,
            temperature=temperature,
            max_tokens=max_tokens,
            seed=seed,
            n=n,
            tool_choice=tool_choice,
        )


def policy_gguf(path: str | Path, *, work_dir: Path | None = None) -> Path:
    """The GGUF file of a policy: the file itself, the one GGUF in a folder, or a HF model
    folder converted (``<folder>/model.f16.gguf``, reused when newer than the weights).

    Raises ``InputError`` naming the path when it is not a model."""
    from trajsynth.training.models_io import resolve_model
    from trajsynth.training.serve import export_gguf

    where = resolve_model(path)
    if where.gguf_file is not None:
        return where.folder / where.gguf_file
    out = (work_dir or where.folder) / "model.f16.gguf"
    weights = sorted(where.folder.glob("*.safetensors"))
    if out.is_file() and weights and out.stat().st_mtime >= max(w.stat().st_mtime for w in weights):
        return out
    return export_gguf(where.folder, out)


@contextlib.asynccontextmanager
async def serve_policy(
    path: str | Path, llm: LLMConfig, *, startup_timeout_s: float = 180.0
) -> AsyncIterator[OpenAILLMClient]:
    """An LLM client for the policy at ``path`` on its own embedded llama.cpp server."""
    from trajsynth.agents.embedded import EmbeddedLLMServer

    gguf = policy_gguf(path)
    if not gguf.is_file():
        raise InputError(f"policy {path}: {gguf} is missing")
    server = EmbeddedLLMServer(
        model_path=gguf, model_alias=llm.model, startup_timeout_s=startup_timeout_s
    )
    server.start()
    try:
        config = llm.model_copy(update={"base_url": server.base_url})
        client = OpenAILLMClient(config, api_key=None, cache_dir=None)
        try:
            yield client
        finally:
            await client.aclose()
    finally:
        server.stop()
