"""OpenAILLMClient against the scripted fake behind the real openai client (fast tier)."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import diskcache
import httpx
import pytest
from fakes.llm import ScriptedLLM, UnexpectedLLMCall, http_error, say, tool_call, tool_calls
from pydantic import SecretStr

from trajsynth.agents.entropy import step_uncertainty, token_entropy
from trajsynth.llm.client import (
    LLMBadRequestError,
    LLMClient,
    OpenAILLMClient,
    _content_text,
    request_key,
)
from trajsynth.schemas import (
    AgentRole,
    FunctionCall,
    LLMConfig,
    LLMError,
    Message,
    MessageRole,
    ToolCall,
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search_products",
            "description": "Search the catalog",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        },
    }
]
USER = [
    Message(role=MessageRole.SYSTEM, content="You are a shop assistant."),
    Message(role=MessageRole.USER, content="I need a red mug."),
]


def make_client(
    fake: ScriptedLLM,
    *,
    cache_dir: Path | None = None,
    api_key: SecretStr | None = None,
    **config: object,
) -> OpenAILLMClient:
    settings = {"base_url": "http://fake/v1", "model": "fake-model", "max_retries": 0, **config}
    return OpenAILLMClient(
        LLMConfig(**settings),
        api_key=api_key,
        cache_dir=cache_dir,
        http_client=httpx.AsyncClient(transport=fake.transport),
    )


def test_client_satisfies_the_protocol() -> None:
    assert isinstance(make_client(ScriptedLLM([])), LLMClient)


async def test_tool_call_parses_into_message_with_usage_and_role() -> None:
    fake = ScriptedLLM([tool_call("search_products", {"query": "red mug"})])
    client = make_client(fake)
    result = await client.chat(USER, role=AgentRole.ASSISTANT, tools=TOOLS, seed=7)
    fake.assert_consumed()

    assert result.finish_reason == "tool_calls"
    assert result.message.role == MessageRole.ASSISTANT
    assert result.message.content is None
    (call,) = result.message.tool_calls
    assert call.function.name == "search_products"
    assert call.function.parsed_arguments() == {"query": "red mug"}
    # usage as the server counted it (fake: words of the prompt and of the answer)
    assert result.usage.role == AgentRole.ASSISTANT
    assert result.usage.model == "fake-model"
    # the fake's tokens: "You are a shop assistant ." + "I need a red mug ."
    assert result.usage.prompt_tokens == 12
    # search_products { " query " : " red mug " }
    assert result.usage.completion_tokens == 11
    assert result.usage.cached is False
    assert result.usage.latency_s > 0
    # the request on the wire
    sent = fake.requests[0]
    assert sent["tools"][0]["function"]["name"] == "search_products"
    assert sent["tool_choice"] == "auto"
    assert sent["seed"] == 7
    assert sent["messages"][1] == {"role": "user", "content": "I need a red mug."}
    assert sent["logprobs"] is True and sent["top_logprobs"] == 5


async def test_malformed_arguments_are_kept_raw() -> None:
    broken = '{"query": "red mug", "qty": '
    fake = ScriptedLLM([tool_call("search_products", broken, raw=True)])
    result = await make_client(fake).chat(USER, role=AgentRole.ASSISTANT, tools=TOOLS)
    fake.assert_consumed()
    assert result.message.tool_calls[0].function.arguments == broken
    with pytest.raises(ValueError):
        result.message.tool_calls[0].function.parsed_arguments()


async def test_parallel_calls_and_history_round_trip() -> None:
    fake = ScriptedLLM(
        [tool_calls([("search_products", {"query": "mug"}), ("search_products", {"query": "cup"})])]
    )
    history = [
        *USER,
        Message(
            role=MessageRole.ASSISTANT,
            tool_calls=[ToolCall(id="c1", function=FunctionCall(name="search_products"))],
        ),
        Message(role=MessageRole.TOOL, tool_call_id="c1", name="search_products", content="[]"),
    ]
    result = await make_client(fake).chat(history, role=AgentRole.ASSISTANT, tools=TOOLS)
    assert [c.function.parsed_arguments()["query"] for c in result.message.tool_calls] == [
        "mug",
        "cup",
    ]
    sent = fake.requests[0]["messages"]
    # content "" beside tool calls: llama.cpp refuses null, llama-cpp-python's templates
    # need the key; the tool message carries only the fields the chat schema gives it
    assert sent[2]["content"] == ""
    assert sent[3] == {"role": "tool", "tool_call_id": "c1", "content": "[]"}


async def test_logprobs_reach_the_result_and_give_step_entropy() -> None:
    probs = [0.5, 0.25]
    fake = ScriptedLLM([say("a red mug", probs=probs)])
    result = await make_client(fake, top_logprobs=2).chat(USER, role=AgentRole.ASSISTANT)
    assert result.token_logprobs == pytest.approx([math.log(0.5)] * 3)
    assert len(result.top_logprobs) == 3
    for top in result.top_logprobs:
        assert top == pytest.approx([math.log(0.5), math.log(0.25)])
    entropy, confidence = step_uncertainty(result.token_logprobs, result.top_logprobs)
    assert entropy == pytest.approx(token_entropy([math.log(0.5), math.log(0.25)]))
    assert entropy == pytest.approx(1.5 * math.log(2))
    assert confidence == pytest.approx(0.5)


async def test_logprobs_no_softmax_could_give_are_dropped() -> None:
    answer = {k: v for k, v in say("a red mug").items() if k != "_probs"}
    answer["choices"][0]["logprobs"] = {"content": [{"token": "a", "logprob": -1e300}]}
    fake = ScriptedLLM([httpx.Response(200, json=answer)])  # sent as is, logprobs and all
    result = await make_client(fake).chat(USER, role=AgentRole.ASSISTANT)
    assert result.message.content == "a red mug"
    assert result.token_logprobs is None and result.top_logprobs is None


async def test_logprobs_off_sends_none_and_returns_none() -> None:
    fake = ScriptedLLM([say("hello")])
    result = await make_client(fake, logprobs=False).chat(USER, role=AgentRole.USER)
    assert "logprobs" not in fake.requests[0] and "top_logprobs" not in fake.requests[0]
    assert result.token_logprobs is None and result.top_logprobs is None


async def test_server_refusing_logprobs_is_asked_without_them_from_then_on() -> None:
    def refuse_logprobs(body: dict) -> object:
        if body.get("logprobs"):
            return http_error(400, "logprobs are not supported")
        return say("fine")

    fake = ScriptedLLM([refuse_logprobs, refuse_logprobs, refuse_logprobs])
    client = make_client(fake)
    first = await client.chat(USER, role=AgentRole.ASSISTANT)
    second = await client.chat(
        [*USER, Message(role=MessageRole.USER, content="and?")], role=AgentRole.ASSISTANT
    )
    fake.assert_consumed()
    assert first.message.content == second.message.content == "fine"
    assert first.token_logprobs is None
    # one refused request, its retry without logprobs, then the next call asks without them
    assert ["logprobs" in r for r in fake.requests] == [True, False, False]


async def test_a_500_naming_logprobs_is_answered_without_them_even_after_they_worked() -> None:
    """llama-cpp-python with ``--logits_all false``: its chat handler passes logprobs on only
    for some turns (a word answer, not a tool call), which then fail with a 500 naming them;
    retried as a server fault, every such turn was an infra failure."""
    refusal = "logprobs is not supported for models created with logits_all=False"

    def words_refuse_logprobs(body: dict) -> object:
        if body.get("logprobs"):
            return http_error(500, refusal)
        return say("fine")

    fake = ScriptedLLM([say("ok"), words_refuse_logprobs, words_refuse_logprobs])
    client = make_client(fake, max_retries=3)
    await client.chat(USER, role=AgentRole.ASSISTANT)  # logprobs came back: known to work
    answer = await client.chat([*USER, *USER], role=AgentRole.ASSISTANT)
    fake.assert_consumed()
    assert answer.message.content == "fine"
    assert ["logprobs" in r for r in fake.requests] == [True, True, False]
    # the control: a 500 that does not name them stays a server fault, retried
    other = ScriptedLLM([say("ok"), http_error(500, "out of memory"), say("again")])
    client = make_client(other, max_retries=1)
    await client.chat(USER, role=AgentRole.ASSISTANT)
    await client.chat([*USER, *USER], role=AgentRole.ASSISTANT)
    other.assert_consumed()
    assert ["logprobs" in r for r in other.requests] == [True, True, True]


async def test_other_bad_request_is_not_retried_and_flags_context_overflow() -> None:
    fake = ScriptedLLM(
        [
            say("ok"),  # a first call shows logprobs work
            http_error(400, "Requested tokens (5000) exceed context window of 4096"),
        ]
    )
    client = make_client(fake, max_retries=3)
    await client.chat(USER, role=AgentRole.ASSISTANT)
    with pytest.raises(LLMBadRequestError) as info:
        await client.chat([*USER, *USER], role=AgentRole.ASSISTANT)
    fake.assert_consumed()
    assert info.value.status_code == 400
    assert info.value.context_overflow is True
    assert isinstance(info.value, LLMError)


async def test_cache_hit_costs_no_request_and_survives_a_new_client(tmp_path: Path) -> None:
    fake = ScriptedLLM([tool_call("search_products", {"query": "red mug"})])
    client = make_client(fake, cache_dir=tmp_path)
    first = await client.chat(USER, role=AgentRole.ASSISTANT, tools=TOOLS, seed=1)
    again = await client.chat(USER, role=AgentRole.USER, tools=TOOLS, seed=1)
    await client.aclose()
    # a re-run: a fresh client on the same cache directory, and a script with no steps
    rerun_fake = ScriptedLLM([])
    rerun = make_client(rerun_fake, cache_dir=tmp_path)
    third = await rerun.chat(USER, role=AgentRole.ASSISTANT, tools=TOOLS, seed=1)
    await rerun.aclose()

    fake.assert_consumed()
    rerun_fake.assert_consumed()
    assert len(fake.requests) == 1 and rerun_fake.requests == []
    for hit in (again, third):
        assert hit.message == first.message
        assert hit.usage.cached is True
        assert hit.usage.latency_s == 0.0
        assert hit.usage.prompt_tokens == first.usage.prompt_tokens
        assert hit.request_hash == first.request_hash
    assert again.usage.role == AgentRole.USER  # the role of the call, not of the cached one
    assert first.usage.cached is False


async def test_different_seed_or_messages_miss_the_cache(tmp_path: Path) -> None:
    fake = ScriptedLLM([say("one"), say("two"), say("three")])
    client = make_client(fake, cache_dir=tmp_path)
    a = await client.chat(USER, role=AgentRole.ASSISTANT, seed=1)
    b = await client.chat(USER, role=AgentRole.ASSISTANT, seed=2)
    c = await client.chat(USER[:1], role=AgentRole.ASSISTANT, seed=1)
    await client.aclose()
    fake.assert_consumed()
    assert [a.message.content, b.message.content, c.message.content] == ["one", "two", "three"]
    assert len({a.request_hash, b.request_hash, c.request_hash}) == 3


def test_request_key_covers_the_full_request() -> None:
    client = make_client(ScriptedLLM([]))
    base = client.request_body(USER, tools=TOOLS, seed=1)
    assert request_key(base) == request_key(client.request_body(USER, tools=TOOLS, seed=1))
    variants = [
        client.request_body(USER, tools=None, seed=1),
        client.request_body(USER, tools=TOOLS, seed=1, temperature=0.1),
        client.request_body(USER, tools=TOOLS, seed=1, max_tokens=9),
        client.request_body(USER, tools=TOOLS, seed=1, n=2),
        make_client(ScriptedLLM([]), model="other").request_body(USER, tools=TOOLS, seed=1),
    ]
    assert len({request_key(base), *(request_key(v) for v in variants)}) == 6


async def test_5xx_then_success_is_retried_after_the_wait_the_server_asked() -> None:
    fake = ScriptedLLM(
        [
            http_error(503, "busy", headers={"retry-after-ms": "1"}),
            http_error(500, "oops", headers={"retry-after-ms": "1"}),
            say("recovered"),
        ]
    )
    result = await make_client(fake, max_retries=2).chat(USER, role=AgentRole.ASSISTANT)
    fake.assert_consumed()
    assert result.message.content == "recovered"
    assert len(fake.requests) == 3


async def test_429_honours_retry_after() -> None:
    fake = ScriptedLLM([http_error(429, "slow down", headers={"retry-after": "0.3"}), say("ok")])
    client = make_client(fake, max_retries=1)
    start = time.perf_counter()
    result = await client.chat(USER, role=AgentRole.ASSISTANT)
    waited = time.perf_counter() - start
    fake.assert_consumed()
    assert result.message.content == "ok"
    assert waited >= 0.3
    assert result.usage.latency_s >= 0.3  # the wait is part of the call's cost


async def test_timeouts_after_retries_raise_llm_error() -> None:
    fake = ScriptedLLM([httpx.ReadTimeout("scripted"), httpx.ReadTimeout("scripted")])
    client = make_client(fake, max_retries=1)
    with pytest.raises(LLMError, match="timed out"):
        await client.chat(USER, role=AgentRole.ASSISTANT)
    fake.assert_consumed()


async def test_5xx_after_retries_raise_llm_error_naming_role() -> None:
    fake = ScriptedLLM([http_error(502, "bad gateway", headers={"retry-after-ms": "1"})] * 2)
    with pytest.raises(LLMError, match=r"planner.*502"):
        await make_client(fake, max_retries=1).chat(USER, role=AgentRole.PLANNER)
    fake.assert_consumed()


async def test_connection_refused_is_llm_error() -> None:
    fake = ScriptedLLM([httpx.ConnectError("refused")])
    with pytest.raises(LLMError, match="cannot connect"):
        await make_client(fake).chat(USER, role=AgentRole.ASSISTANT)


async def test_calling_past_the_script_fails_loudly() -> None:
    fake = ScriptedLLM([say("only one")])
    client = make_client(fake)
    await client.chat(USER, role=AgentRole.ASSISTANT)
    with pytest.raises(UnexpectedLLMCall):
        await client.chat(USER[:1], role=AgentRole.ASSISTANT)
    with pytest.raises(AssertionError, match="past the end"):
        fake.assert_consumed()


def test_unused_steps_fail_assert_consumed() -> None:
    fake = ScriptedLLM([say("never asked")])
    with pytest.raises(AssertionError, match="never used"):
        fake.assert_consumed()


async def test_concurrency_limit_is_respected() -> None:
    in_flight = 0
    peak = 0

    async def slow(body: dict) -> dict:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.05)
        in_flight -= 1
        return say(body["messages"][-1]["content"])

    fake = ScriptedLLM([slow] * 6)
    client = make_client(fake, max_concurrency=2)
    questions = [Message(role=MessageRole.USER, content=f"q{i}") for i in range(6)]
    results = await asyncio.gather(*(client.chat([q], role=AgentRole.USER) for q in questions))
    fake.assert_consumed()
    assert peak == 2
    assert sorted(r.message.content for r in results) == [f"q{i}" for i in range(6)]


async def test_requests_per_minute_limit_holds_back_the_next_request() -> None:
    fake = ScriptedLLM([say("a"), say("b")])
    client = make_client(fake, requests_per_minute=1)
    await client.chat(USER, role=AgentRole.USER)
    task = asyncio.create_task(client.chat(USER[:1], role=AgentRole.USER))
    await asyncio.sleep(0.3)
    assert not task.done()  # one request a minute: the second waits for the bucket
    assert len(fake.requests) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_tokens_per_minute_limit_holds_back_the_next_request() -> None:
    fake = ScriptedLLM([say("a"), say("b")])
    client = make_client(fake, tokens_per_minute=300, max_tokens=256)
    await client.chat(USER, role=AgentRole.USER)  # ~270 estimated tokens of 300
    task = asyncio.create_task(client.chat(USER[:1], role=AgentRole.USER))
    await asyncio.sleep(0.3)
    assert not task.done()
    assert len(fake.requests) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_missing_usage_is_counted() -> None:
    fake = ScriptedLLM([{**say("one two three"), "usage": None}])
    result = await make_client(fake, logprobs=False).chat(USER, role=AgentRole.ASSISTANT)
    assert result.usage.completion_tokens == 4  # ceil(13 characters / 4)
    assert result.usage.prompt_tokens > 0


async def test_n_samples_filled_one_at_a_time_when_server_ignores_n() -> None:
    fake = ScriptedLLM([say("first"), say("second"), say("third")])
    result = await make_client(fake).chat(USER, role=AgentRole.ASSISTANT, seed=10, n=3)
    fake.assert_consumed()
    assert [c.message.content for c in result.choices] == ["first", "second", "third"]
    assert result.message.content == "first"
    assert [r.get("seed") for r in fake.requests] == [10, 11, 12]
    assert fake.requests[0]["n"] == 3 and "n" not in fake.requests[1]
    assert result.usage.completion_tokens == 3


async def test_api_key_never_reaches_cache_or_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "sk-test-DO-NOT-LEAK-4f2a9c"
    seen_auth: list[str] = []

    def answer(body: dict) -> object:
        return say("hello")

    fake = ScriptedLLM([answer, http_error(401, "invalid api key")])
    transport = fake.transport

    async def spy(request: httpx.Request) -> httpx.Response:
        seen_auth.append(request.headers.get("authorization", ""))
        return await transport.handle_async_request(request)

    caplog.set_level(logging.DEBUG)
    client = OpenAILLMClient(
        LLMConfig(base_url="http://fake/v1", max_retries=0),
        api_key=SecretStr(secret),
        cache_dir=tmp_path,
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(spy)),
    )
    result = await client.chat(USER, role=AgentRole.ASSISTANT)
    with pytest.raises(LLMError) as info:
        await client.chat(USER[:1], role=AgentRole.ASSISTANT)
    await client.aclose()

    assert seen_auth == [f"Bearer {secret}"] * 2  # the key did go to the server
    assert secret not in caplog.text
    assert secret not in str(info.value) and secret not in repr(client)
    assert secret not in result.model_dump_json()
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert files, "the cache wrote nothing"
    for path in files:
        assert secret.encode() not in path.read_bytes(), path
    assert json.dumps(fake.requests).find(secret) == -1


async def test_one_client_serves_two_event_loops() -> None:
    fake = ScriptedLLM([say("in loop one"), say("in loop two")])
    client = make_client(fake, max_concurrency=1)

    def run_once(text: str) -> str:
        async def go() -> str:
            result = await client.chat(
                [Message(role=MessageRole.USER, content=text)], role=AgentRole.USER
            )
            return result.message.content or ""

        return asyncio.run(go())

    # asyncio.run needs a thread without a running loop
    first = await asyncio.to_thread(run_once, "a")
    second = await asyncio.to_thread(run_once, "b")
    fake.assert_consumed()
    assert (first, second) == ("in loop one", "in loop two")


def test_fake_serves_the_sync_sdk_as_in_the_style_guide() -> None:
    import openai

    fake = ScriptedLLM(
        [
            tool_call("search_products", {"query": "red mug"}),
            tool_call("add_to_cart", '{"sku": "M-1", "qty": ', raw=True),
            say("Your cart has one red mug."),
            httpx.ReadTimeout("scripted"),
        ]
    )
    client = openai.OpenAI(
        base_url="http://fake/v1",
        api_key="test",
        max_retries=0,
        http_client=httpx.Client(transport=fake.transport),
    )
    ask = {"model": "m", "messages": [{"role": "user", "content": "mug"}], "tools": TOOLS}
    first = client.chat.completions.create(**ask)
    second = client.chat.completions.create(**ask)
    third = client.chat.completions.create(**ask)
    with pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(**ask)
    fake.assert_consumed()
    assert first.choices[0].message.tool_calls[0].function.arguments == '{"query": "red mug"}'
    assert second.choices[0].message.tool_calls[0].function.arguments == '{"sku": "M-1", "qty": '
    assert third.choices[0].message.content == "Your cart has one red mug."
    assert first.usage.completion_tokens > 0
    assert fake.requests[0]["tools"][0]["function"]["name"] == "search_products"


def test_the_backoff_doubles_from_half_a_second_with_a_quarter_jitter() -> None:
    from tenacity import RetryCallState

    from trajsynth.llm.client import _backoff

    def wait(attempt: int) -> float:
        state = RetryCallState(retry_object=None, fn=None, args=(), kwargs={})  # type: ignore[arg-type]
        state.attempt_number = attempt
        return _backoff(state)

    for attempt, base in [(1, 0.5), (2, 1.0), (3, 2.0), (6, 8.0), (9, 8.0)]:
        assert base <= wait(attempt) <= base * 1.25


def test_the_wait_a_server_asks_for_is_read_as_the_sdk_reads_it() -> None:
    from email.utils import format_datetime

    from trajsynth.llm.client import _retry_after_s

    in_30_s = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert _retry_after_s(httpx.Headers({"retry-after-ms": "250"})) == 0.25
    assert _retry_after_s(httpx.Headers({"retry-after-ms": "250", "retry-after": "3"})) == 0.25
    assert _retry_after_s(httpx.Headers({"retry-after": "1.5"})) == 1.5
    assert 28 <= (_retry_after_s(httpx.Headers({"retry-after": in_30_s})) or 0) <= 30
    for unusable in ({}, {"retry-after": "soon"}, {"retry-after": "-1"}, {"retry-after": "600"}):
        assert _retry_after_s(httpx.Headers(unusable)) is None


async def test_a_tool_result_the_model_wrote_is_never_a_call() -> None:
    # what SmolLM2 writes after a delete: the prompt's result syntax, imitated as its answer
    echo = 'functions.search_products returned:\n{"results": [{"sku": "M-1"}]}'
    fake = ScriptedLLM([say(echo), say("Found it.\n" + echo + "\nAnything else?")])
    client = make_client(fake)
    first = await client.chat(USER, role=AgentRole.ASSISTANT, tools=TOOLS, seed=1)
    second = await client.chat(USER, role=AgentRole.ASSISTANT, tools=TOOLS, seed=2)
    fake.assert_consumed()
    assert first.message.tool_calls is None and first.message.content is None
    assert first.finish_reason == "stop"
    # the words before the made-up result stay; the result and what follows it go
    assert second.message.tool_calls is None and second.message.content == "Found it."


async def test_a_call_written_as_text_before_a_made_up_result_stays_a_call() -> None:
    text = (
        'functions.search_products:\n{"query": "red mug"}\n'
        'functions.search_products returned:\n{"results": []}'
    )
    fake = ScriptedLLM([say(text)])
    result = await make_client(fake).chat(USER, role=AgentRole.ASSISTANT, tools=TOOLS, seed=1)
    (call,) = result.message.tool_calls
    assert call.function.name == "search_products"
    assert call.function.parsed_arguments() == {"query": "red mug"}
    assert result.message.content is None


async def test_a_raw_newline_inside_an_argument_string_stays_raw_and_is_a_model_failure() -> None:
    """What 11 calls on outside servers held before the argument grammar excluded control
    characters from strings: the client keeps the text as written (no repair), and the
    call is recorded as invalid JSON, a ``model`` failure the verifier's hygiene then sees."""
    from trajsynth.mcp_servers.tool_calls import check_tool_call
    from trajsynth.schemas import FailureClass, ToolSpec

    raw = '{"query": "red\nmug"}'  # a real newline inside the string
    fake = ScriptedLLM([tool_call("search_products", raw, raw=True)])
    result = await make_client(fake).chat(USER, role=AgentRole.ASSISTANT, tools=TOOLS, seed=1)
    (call,) = result.message.tool_calls
    assert call.function.arguments == raw
    spec = ToolSpec(name="search_products", input_schema=TOOLS[0]["function"]["parameters"])
    failure = check_tool_call(call, {"search_products": spec}, turn=0).failure
    assert failure is not None and failure.error_type == "invalid_json"
    assert failure.failure_class is FailureClass.MODEL


async def test_calls_written_as_text_on_two_turns_never_share_an_id() -> None:
    text = 'functions.search_products:\n{"query": "mug"}'
    fake = ScriptedLLM([say(text), say(text + "s")])
    client = make_client(fake)
    first = await client.chat(USER, role=AgentRole.ASSISTANT, tools=TOOLS, seed=1)
    second = await client.chat(USER, role=AgentRole.ASSISTANT, tools=TOOLS, seed=2)
    ids = [c.id for r in (first, second) for c in r.message.tool_calls]
    assert len(set(ids)) == 2 and all(i.startswith("call_") for i in ids)


@pytest.mark.parametrize("stored", ["not json", 42], ids=["broken-text", "not-text"])
async def test_an_unreadable_cache_entry_is_dropped_and_asked_again(
    tmp_path: Path, stored: object
) -> None:
    fake = ScriptedLLM([say("first")])
    client = make_client(fake, cache_dir=tmp_path)
    await client.chat(USER, role=AgentRole.ASSISTANT, seed=1)
    await client.aclose()
    with diskcache.Cache(str(tmp_path)) as cache:
        (key,) = list(cache)
        cache.set(key, stored)
    again = ScriptedLLM([say("again")])
    rerun = make_client(again, cache_dir=tmp_path)
    result = await rerun.chat(USER, role=AgentRole.ASSISTANT, seed=1)
    await rerun.aclose()
    again.assert_consumed()
    assert result.message.content == "again" and result.usage.cached is False
    with diskcache.Cache(str(tmp_path)) as cache:  # the fresh answer replaced the bad entry
        assert json.loads(cache[key])["message"]["content"] == "again"


@pytest.mark.parametrize(
    ("content", "text"),
    [
        ([{"type": "text", "text": "a red "}, {"type": "text", "text": "mug"}], "a red mug"),
        # a part that is not text: the whole content kept as JSON, nothing dropped
        (
            [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "u"}}],
            '[{"text":"see","type":"text"},{"image_url":{"url":"u"},"type":"image_url"}]',
        ),
        (["a bare string"], '["a bare string"]'),
        (None, None),
    ],
    ids=["text-parts", "mixed-parts", "not-parts", "none"],
)
def test_content_parts_become_one_text(content: list[Any] | None, text: str | None) -> None:
    assert _content_text(content) == text
