"""The real embedded LLM: llama.cpp's server with SmolLM2-135M-Instruct (llm tier).

SmolLM2-135M almost never chooses a call by itself under ``tool_choice="auto"`` (see
``trajsynth.llm.chat_handler``), so the call is asked for with ``"required"``; the
answer after the tool result is left to ``"auto"``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from trajsynth.llm.client import OpenAILLMClient, open_llm_client
from trajsynth.llm.embedded import EmbeddedLLMServer, embedded_available, gguf_path
from trajsynth.schemas import (
    AgentRole,
    LLMConfig,
    LLMError,
    Message,
    MessageRole,
    ToolCall,
)

pytestmark = [pytest.mark.llm, pytest.mark.slow]

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search_products",
        "description": "Search the shop catalog",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
        },
    },
}
ASK = [
    Message(role=MessageRole.SYSTEM, content="You are a helpful assistant."),
    Message(role=MessageRole.USER, content="What is the weather in Paris? Use get_weather."),
]


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedLLMServer]:
    with EmbeddedLLMServer(startup_timeout_s=300) as srv:
        yield srv


def client_for(server: EmbeddedLLMServer, cache_dir: Path | None = None) -> OpenAILLMClient:
    config = LLMConfig(base_url=server.base_url, max_tokens=48, top_logprobs=3, timeout_s=300)
    return OpenAILLMClient(config, cache_dir=cache_dir)


def test_the_model_is_available() -> None:
    ok, why = embedded_available()
    assert ok, why
    assert gguf_path().stat().st_size > 50_000_000


async def test_required_tool_call_comes_back_parsed_with_logprobs(
    server: EmbeddedLLMServer,
) -> None:
    async with client_for(server) as client:
        result = await client.chat(
            ASK,
            role=AgentRole.ASSISTANT,
            tools=[WEATHER, SEARCH],
            tool_choice="required",
            seed=3,
        )
    assert result.finish_reason == "tool_calls"
    (call,) = result.message.tool_calls
    assert call.function.name in {"get_weather", "search_products"}
    arguments = call.function.parsed_arguments()  # grammar-constrained: real JSON
    required = "city" if call.function.name == "get_weather" else "query"
    assert isinstance(arguments[required], str)
    assert result.usage.prompt_tokens > 100  # the tool list is in the prompt
    assert result.usage.completion_tokens > 0
    assert result.usage.latency_s > 0
    # logprobs of every generated token that was fed back: the tool name, then the JSON
    assert result.token_logprobs and result.top_logprobs
    assert len(result.top_logprobs) == len(result.token_logprobs)
    assert all(lp <= 0.0 for lp in result.token_logprobs)
    assert all(len(top) == 3 for top in result.top_logprobs)
    assert len(result.token_logprobs) >= result.usage.completion_tokens - 3


async def test_named_tool_and_answer_after_the_tool_result(server: EmbeddedLLMServer) -> None:
    async with client_for(server) as client:
        named = await client.chat(
            ASK,
            role=AgentRole.ASSISTANT,
            tools=[WEATHER, SEARCH],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            seed=1,
        )
        (call,) = named.message.tool_calls
        assert call.function.name == "get_weather"
        assert "city" in call.function.parsed_arguments()

        history = [
            *ASK,
            Message(
                role=MessageRole.ASSISTANT,
                tool_calls=[ToolCall(id=call.id, function=call.function)],
            ),
            Message(
                role=MessageRole.TOOL,
                tool_call_id=call.id,
                name="get_weather",
                content=json.dumps({"temp_c": 18, "sky": "sunny"}),
            ),
        ]
        answer = await client.chat(history, role=AgentRole.ASSISTANT, tools=[WEATHER], seed=0)
    # under "auto" the model answers in words after the result, with logprobs
    assert answer.message.tool_calls is None
    assert answer.message.content and answer.message.content.strip()
    assert answer.finish_reason in {"stop", "length"}
    assert answer.token_logprobs and len(answer.token_logprobs) >= 1


async def test_plain_chat_without_tools_and_the_cache(
    server: EmbeddedLLMServer, tmp_path: Path
) -> None:
    question = [Message(role=MessageRole.USER, content="Say hello in five words.")]
    client = client_for(server, cache_dir=tmp_path)
    first = await client.chat(question, role=AgentRole.USER, seed=5, max_tokens=16)
    again = await client.chat(question, role=AgentRole.USER, seed=5, max_tokens=16)
    await client.aclose()
    assert first.message.content
    assert first.usage.cached is False and again.usage.cached is True
    assert again.message == first.message


async def test_a_deterministic_server_answers_a_seeded_request_alike_after_any_other() -> None:
    """By default the server reuses what it evaluated for the last request, which changes how
    the prompt is split into batches: the same seeded request sampled another answer after a
    different one (measured). Evaluated from an empty context, the answer is the request's
    alone: after another request, after one sharing its prefix, after itself, and in a
    fresh server (a resumed run's)."""
    system = Message(role=MessageRole.SYSTEM, content="You are a helpful shop assistant.")
    ask = [system, Message(role=MessageRole.USER, content="I want a red mug, can you find one?")]
    longer = [system, Message(role=MessageRole.USER, content="I want a red mug. Also cheap.")]
    other = [Message(role=MessageRole.USER, content="What is the capital of France?")]
    answers: list[tuple[str, Message]] = []
    for _ in range(2):
        with EmbeddedLLMServer(deterministic=True, startup_timeout_s=300) as srv:
            assert not srv.prompt_cache
            async with client_for(srv) as client:
                for messages in (ask, other, ask, longer, ask, ask):
                    for choice in ("auto", "required"):
                        result = await client.chat(
                            messages, role=AgentRole.ASSISTANT, tools=[SEARCH], seed=7,
                            temperature=0.8, tool_choice=choice,
                        )  # fmt: skip
                        if messages is ask:
                            answers.append((choice, result.message))
    for choice in ("auto", "required"):
        mine = [m for c, m in answers if c == choice]
        assert len(mine) == 8 and all(m == mine[0] for m in mine), mine


async def test_n_samples_are_filled_by_separate_requests(server: EmbeddedLLMServer) -> None:
    async with client_for(server) as client:
        result = await client.chat(
            [Message(role=MessageRole.USER, content="Name a colour.")],
            role=AgentRole.ASSISTANT,
            seed=11,
            n=2,
            max_tokens=8,
        )
    assert len(result.choices) == 2  # llama.cpp ignores n; the client asked twice
    assert all(c.message.content is not None for c in result.choices)


async def test_open_llm_client_starts_and_stops_the_embedded_server() -> None:
    config = LLMConfig(base_url=None, max_tokens=8, logprobs=False)
    async with open_llm_client(config) as client:
        base_url = client.config.base_url
        result = await client.chat(
            [Message(role=MessageRole.USER, content="Hi")], role=AgentRole.USER, seed=0
        )
        assert result.message.content is not None
    port = httpx.URL(base_url).port
    with socket.socket() as sock:  # nothing listens any more
        assert sock.connect_ex(("127.0.0.1", port)) != 0


def test_a_server_that_cannot_start_raises_with_its_log(tmp_path: Path) -> None:
    bogus = tmp_path / "not-a-model.gguf"
    bogus.write_bytes(b"this is not a gguf file")
    srv = EmbeddedLLMServer(model_path=bogus, startup_timeout_s=120)
    with pytest.raises(LLMError, match="exited with code") as info:
        srv.start()
    assert "not-a-model.gguf" in str(info.value) or "gguf" in str(info.value).lower()
    assert not srv.running


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_ctrl_c_or_a_killed_parent_stops_the_server(sig: signal.Signals) -> None:
    script = textwrap.dedent(
        """
        import time
        from trajsynth.llm.embedded import EmbeddedLLMServer
        with EmbeddedLLMServer() as server:
            print(server._proc.pid, flush=True)
            time.sleep(300)
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        # a shell may start children with SIGINT ignored; Ctrl-C needs the default handler
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        child = int(parent.stdout.readline())
        assert _alive(child)
        parent.send_signal(sig)
        parent.wait(timeout=60)
        deadline = time.monotonic() + 30
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(child)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        parent.stdout.close()


async def test_a_server_launched_early_is_taken_by_the_run_that_opens_it() -> None:
    from trajsynth.llm import embedded

    config = LLMConfig(embedded_ctx=2048)
    embedded.launch_early(config.model, config.embedded_ctx, config.embedded_deterministic)
    launched = embedded._launched[(config.model, 2048, config.embedded_deterministic)]
    assert launched.running  # returned before the model loaded: nobody waited for it
    async with open_llm_client(config) as client:
        assert client.config.base_url == launched.base_url  # taken, not a second server
        reply = await client.chat(
            ASK, role=AgentRole.ASSISTANT, tools=[WEATHER], tool_choice="required", seed=3
        )
        assert reply.message.tool_calls
    assert not launched.running  # the run that took it stopped it
    assert embedded.take_launched(config.model, 2048, config.embedded_deterministic) is None
