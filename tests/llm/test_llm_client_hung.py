"""An endpoint that accepts a request and never answers: bounded, reported, one clear line.

The server here is a real loopback socket that accepts every connection and never writes a
byte (what a wedged inference server looks like from the client), driven through the real
openai client.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from trajsynth.llm import waiting
from trajsynth.llm.client import OpenAILLMClient
from trajsynth.llm.waiting import Waiting, wait_listener
from trajsynth.schemas import AgentRole, LLMConfig, LLMError, Message, MessageRole

USER = [Message(role=MessageRole.USER, content="hello")]


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A base URL whose server accepts connections and reads requests, never answering."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(conn)  # kept open, never written to

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()
        listener.close()


def test_a_silent_endpoint_is_given_up_on_within_the_set_timeout_and_said_so(
    silent_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(waiting, "FIRST_NOTICE_S", 0.1)
    monkeypatch.setattr(waiting, "NOTICE_EVERY_S", 0.1)
    config = LLMConfig(base_url=silent_server, timeout_s=0.4, max_retries=1, logprobs=False)
    client = OpenAILLMClient(config)
    notices: list[Waiting] = []
    errors: list[tuple[float, str]] = []

    async def ask() -> None:
        with wait_listener(notices.append):
            for _ in range(3):
                began = time.monotonic()
                try:
                    await client.chat(USER, role=AgentRole.ASSISTANT)
                except LLMError as exc:
                    errors.append((time.monotonic() - began, str(exc)))
        await client.aclose()

    began = time.monotonic()
    asyncio.run(ask())
    wall = time.monotonic() - began
    # two tries of 0.4 s and one backoff (0.5-0.625 s) each, then the dead endpoint fails
    # fast: about 3 s (bounds generous for a loaded machine), where the floor-and-double
    # timeout gave this request 198 + 396 s
    assert wall < 30.0, wall
    (first, line), (second, _), (third, fast_line) = errors
    assert 0.8 <= first < 10.0 and 0.8 <= second < 10.0, errors
    assert line == (
        f"{silent_server} (assistant): timed out after retries: no reply in 2 tries of 0.4, "
        "0.4 s ([run.llm] timeout_s = 0.4, max_retries = 1); the endpoint accepted the request "
        "and answered nothing"
    )
    assert third < 1.0 and "not asked: the endpoint answered none" in fast_line
    # while waiting, the listener heard it, on each try, and when each try ended
    waits = [n for n in notices if not n.done]
    assert {n.attempt for n in waits} == {1, 2} and all(n.attempts == 2 for n in waits)
    assert waits[0].line().startswith("waiting for the assistant's reply, 0 s (try 1 of 2; ")
    assert "retried at 0.4 s)" in waits[0].line()
    assert sum(n.done for n in notices) == 4  # one per try of the two requests asked


def test_without_a_listener_a_long_wait_goes_to_the_log(
    silent_server: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(waiting, "FIRST_NOTICE_S", 0.1)
    monkeypatch.setattr(waiting, "NOTICE_EVERY_S", 0.1)
    monkeypatch.setattr(waiting, "LOG_EVERY_S", 10.0)
    client = OpenAILLMClient(
        LLMConfig(base_url=silent_server, timeout_s=0.5, max_retries=0, logprobs=False)
    )

    async def ask() -> None:
        with pytest.raises(LLMError, match="no reply in 1 tries of 0.5 s"):
            await client.chat(USER, role=AgentRole.USER)
        await client.aclose()

    with caplog.at_level("WARNING", logger="trajsynth.llm.waiting"):
        asyncio.run(ask())
    lines = [r.getMessage() for r in caplog.records if r.name == "trajsynth.llm.waiting"]
    assert len(lines) == 1 and lines[0].startswith("waiting for the user's reply")
