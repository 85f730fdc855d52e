"""A request that waits for its reply shows up in the progress display as a `waiting` event
(the listener `progress_sink` installs for `llm.waiting`), from the request's own loop."""

from __future__ import annotations

import asyncio
import re
import socket

import pytest

from trajsynth.flows.progress import progress_sink
from trajsynth.llm import waiting
from trajsynth.llm.client import OpenAILLMClient
from trajsynth.schemas import AgentRole, LLMConfig, LLMError, Message, MessageRole


def test_a_long_wait_is_a_waiting_event_and_its_end_clears_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(waiting, "FIRST_NOTICE_S", 0.1)
    monkeypatch.setattr(waiting, "NOTICE_EVERY_S", 0.1)
    events: list[tuple[str, int, int, str]] = []
    with socket.socket() as silent:  # accepts (the kernel's backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        client = OpenAILLMClient(
            LLMConfig(base_url=url, timeout_s=0.5, max_retries=0, logprobs=False)
        )

        async def ask() -> None:
            with pytest.raises(LLMError):
                await client.chat(
                    [Message(role=MessageRole.USER, content="hi")], role=AgentRole.ASSISTANT
                )
            await client.aclose()

        with progress_sink(events.append):
            asyncio.run(ask())
    waits = [e for e in events if e[0] == "waiting"]
    assert waits, events
    assert all(total == 0 for _, _, total, _ in waits)
    assert re.fullmatch(
        rf"waiting for the assistant's reply, \d+ s \(try 1 of 1; given up at 0\.5 s\) "
        rf"from {re.escape(url)}",
        waits[0][3],
    ), waits[0]
    assert waits[-1][3] == ""  # the try ended: the line is cleared
    assert [e for e in events if e[0] != "waiting"] == []
