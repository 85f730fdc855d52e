"""Per-turn progress: every assistant reply of a rollout is a `turns`
event that reaches the CLI's sink, from Prefect task threads too."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prefect import flow, task

import trajsynth.flows.stages  # noqa: F401  (loads what a flow's first call imports)
from trajsynth.flows.progress import TurnReporter, progress_sink, tick
from trajsynth.schemas import AgentRole, Message, MessageRole

pytestmark = pytest.mark.alone  # its own Prefect API must answer in time


class _Echo:
    """A client that answers every chat with its own role (no LLM: the wrapper is tested)."""

    model = "echo"

    async def chat(self, messages: Any, *, role: AgentRole, **kwargs: Any) -> str:
        return role.value


def test_turn_reporter_ticks_assistant_replies_only() -> None:
    events: list[tuple[str, int, int, str]] = []
    client = TurnReporter(_Echo(), "bp_0123456789abcdef")
    history = [
        Message(role=MessageRole.USER, content="hi"),
        Message(role=MessageRole.ASSISTANT, content="hello"),
        Message(role=MessageRole.USER, content="and?"),
    ]

    async def talk() -> None:
        assert await client.chat(history, role=AgentRole.ASSISTANT) == "assistant"
        assert await client.chat(history, role=AgentRole.USER) == "user"
        assert await client.chat(history[:1], role=AgentRole.ASSISTANT) == "assistant"

    with progress_sink(events.append):
        asyncio.run(talk())
    assert events == [
        ("turns", 1, 0, "bp_0123456789abcdef turn 2"),
        ("turns", 2, 0, "bp_0123456789abcdef turn 1"),
    ]
    assert client.model == "echo"  # everything else is the wrapped client's
    assert tick("turns") == 0  # no sink: logged, not counted


@task
def _one_turn(i: int) -> int:
    return tick("turns", f"unit {i}")


@flow
def _turns_flow() -> list[int]:
    return [f.result() for f in _one_turn.map(range(4))]


@pytest.mark.slow  # Prefect starts its ephemeral server (about 20 s)
def test_ticks_from_task_threads_reach_the_sink() -> None:
    events: list[tuple[str, int, int, str]] = []
    with progress_sink(events.append):
        counts = _turns_flow()
    assert sorted(counts) == [1, 2, 3, 4]
    assert sorted(e[1] for e in events) == [1, 2, 3, 4]
    assert {e[3] for e in events} == {f"unit {i}" for i in range(4)}
