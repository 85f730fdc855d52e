"""The assistant's system message (``agents.assistant``)."""

from __future__ import annotations

from trajsynth.agents.assistant import Assistant
from trajsynth.schemas import ServerKind, ServerSpec, ToolCluster


def _cluster(description: str) -> ToolCluster:
    server = ServerSpec(kind=ServerKind.STDIO, command=["memory-server"])
    return ToolCluster(
        cluster_id="memory", domain="other", server=server, tools=[], description=description
    )


def test_a_description_without_a_full_stop_ends_its_sentence() -> None:
    """An outside server's description is its name and version: "MCP server memory-server
    0.6.3 Use the tools ..." ran on in every rollout's system prompt."""
    text = Assistant().system_message(_cluster("MCP server memory-server 0.6.3")).content or ""
    assert "memory-server 0.6.3. Use the tools" in text, text
    text = Assistant().system_message(_cluster("A shop's back office.")).content or ""
    assert "back office. Use the tools" in text, text
    text = Assistant().system_message(_cluster("")).content or ""
    assert "assistant of memory. Use the tools" in text, text
