"""LLM faults: infra retries that fire (with backoff, after the server is idle), one slot per
server across event loops, any answer parsed without a crash, calls written as text parsed.

The retry tests talk to the fake OpenAI-compatible server over real HTTP (tests/fakes/
llm_server.py), which fails its first requests on demand and then answers.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from fakes.llm import ScriptedLLM, say, tool_call
from fakes.llm_server import FakeLLMServer

from trajsynth.llm import client as llm_module
from trajsynth.llm.answered import HEADER as ANSWERED_HEADER
from trajsynth.llm.client import OpenAILLMClient, split_text_calls
from trajsynth.llm.endpoints import Endpoint, SlotGate, forget_endpoint, register_endpoint
from trajsynth.schemas import AgentRole, LLMConfig, LLMError, Message, MessageRole

USER = [Message(role=MessageRole.USER, content="Add a meeting on May 1st.")]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "create_event",
            "description": "Add an event to the calendar.",
            "parameters": {
                "type": "object",
                "properties": {"date": {"type": "string"}},
                "required": ["date"],
            },
        },
    }
]


@pytest.fixture(autouse=True)
def _short_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about which faults are retried and what the server is told, not how
    long the client waits between tries (test_llm_client.py checks the real backoff)."""
    monkeypatch.setattr(llm_module, "_BACKOFF_INITIAL_S", 0.01)


def _real_client(server: FakeLLMServer, **config: Any) -> OpenAILLMClient:
    return OpenAILLMClient(LLMConfig(base_url=server.base_url, logprobs=False, **config))


def _scripted(fake: ScriptedLLM, url: str = "http://fake-faults/v1", **config: Any):
    cfg = LLMConfig(base_url=url, logprobs=False, **config)
    return OpenAILLMClient(cfg, http_client=httpx.AsyncClient(transport=fake.transport))


@pytest.fixture
def failing_twice(request: pytest.FixtureRequest) -> Iterator[FakeLLMServer]:
    with FakeLLMServer(fail_first=2, fault=request.param) as server:
        yield server


@pytest.mark.parametrize("failing_twice", ["500", "garbage", "not-a-completion"], indirect=True)
async def test_an_endpoint_that_fails_twice_then_answers_is_retried(
    failing_twice: FakeLLMServer,
) -> None:
    client = _real_client(failing_twice, max_retries=2)
    result = await client.chat(USER, role=AgentRole.ASSISTANT, tools=TOOLS, seed=1)
    await client.aclose()
    assert failing_twice.faults.failed == 2
    assert failing_twice.requests == 3  # two faults, then the answer
    assert (
        result.message.tool_calls and result.message.tool_calls[0].function.name == "create_event"
    )
    # the two waits (the first backoff, then twice it; jitter only adds) are part of the
    # call's cost
    assert result.usage.latency_s >= 3 * llm_module._BACKOFF_INITIAL_S


async def test_faults_past_the_retries_are_an_infra_error_naming_the_server() -> None:
    with FakeLLMServer(fail_first=3, fault="garbage") as server:
        client = _real_client(server, max_retries=1)
        with pytest.raises(LLMError, match="not JSON") as caught:
            await client.chat(USER, role=AgentRole.ASSISTANT)
        await client.aclose()
    assert server.base_url in str(caught.value)
    assert server.requests == 2


async def test_a_retry_after_a_timeout_waits_until_the_keeper_made_the_server_idle() -> None:
    events: list[str] = []

    def first(body: dict[str, Any]) -> Any:
        events.append("request")
        return httpx.ReadTimeout("scripted: the server is still computing")

    def second(body: dict[str, Any]) -> Any:
        events.append("request")
        return say("Done.")

    url = "http://kept-server/v1"
    register_endpoint(url, slots=1, keeper=lambda why: events.append(f"keep:{why}"))
    try:
        fake = ScriptedLLM([first, second])
        client = _scripted(fake, url, max_retries=1)
        result = await client.chat(USER, role=AgentRole.ASSISTANT)
    finally:
        forget_endpoint(url)
    fake.assert_consumed()
    assert result.message.content == "Done."
    assert events == ["request", "keep:timeout", "request"]


async def test_every_try_of_a_request_carries_its_one_id() -> None:
    """The id the embedded server files its answers under (llm.answered): the same on a
    retry, so a try it already answered is not computed again; another request, another id."""
    fake = ScriptedLLM([httpx.ReadTimeout("scripted"), say("Done."), say("Again.")])
    client = _scripted(fake, "http://ids/v1", max_retries=1)
    await client.chat(USER, role=AgentRole.ASSISTANT)
    await client.chat(USER, role=AgentRole.ASSISTANT, seed=7)
    fake.assert_consumed()
    ids = [h.get(ANSWERED_HEADER) for h in fake.headers]
    assert ids[0] and ids[0] == ids[1] and ids[2] and ids[2] != ids[0]


async def test_a_request_given_up_on_for_good_leaves_the_server_idle() -> None:
    """After the last timeout the server is made idle too: the next request (of any unit)
    must not queue behind the abandoned one."""
    events: list[str] = []

    def timeout(body: dict[str, Any]) -> Any:
        events.append("request")
        return httpx.ReadTimeout("scripted")

    url = "http://kept-server-2/v1"
    register_endpoint(url, slots=1, keeper=lambda why: events.append(f"keep:{why}"))
    try:
        fake = ScriptedLLM([timeout, timeout])
        with pytest.raises(LLMError, match="no reply in 2 tries"):
            await _scripted(fake, url, max_retries=1).chat(USER, role=AgentRole.ASSISTANT)
    finally:
        forget_endpoint(url)
    fake.assert_consumed()
    assert events == ["request", "keep:timeout", "request", "keep:timeout"]


async def test_a_refused_request_is_not_retried_and_the_keeper_is_not_called() -> None:
    kept: list[str] = []
    url = "http://refusing-server/v1"
    register_endpoint(url, slots=1, keeper=kept.append)
    try:
        fake = ScriptedLLM([httpx.Response(400, json={"error": {"message": "bad"}})])
        with pytest.raises(LLMError, match="400"):
            await _scripted(fake, url, max_retries=3).chat(USER, role=AgentRole.ASSISTANT)
    finally:
        forget_endpoint(url)
    fake.assert_consumed()
    assert kept == []


def test_clients_on_two_event_loops_share_the_servers_one_slot() -> None:
    """Units of work run in threads, each with its own loop and client: the server still
    holds one request at a time, so a request waits in the client, not in its queue."""
    with FakeLLMServer(delay_s=0.05) as server:
        register_endpoint(server.base_url, slots=1)
        try:

            def worker() -> None:
                async def go() -> None:
                    client = _real_client(server, max_concurrency=4)
                    await asyncio.gather(
                        *(client.chat(USER, role=AgentRole.ASSISTANT, seed=i) for i in range(3))
                    )
                    await client.aclose()

                asyncio.run(go())

            threads = [threading.Thread(target=worker) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=60)
        finally:
            forget_endpoint(server.base_url)
    assert server.requests == 6
    assert server.faults.in_flight_peak == 1


async def test_a_gate_waiter_cancelled_while_waiting_gives_no_slot_away() -> None:
    gate = SlotGate(1)
    await gate.acquire()
    waiter = asyncio.ensure_future(gate.acquire())
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    gate.release()
    assert gate.in_use == 0
    async with gate.slot():
        assert gate.in_use == 1


def test_a_set_timeout_is_exactly_that_on_every_try() -> None:
    ep = Endpoint("u", SlotGate(1))
    assert [ep.timeout_for(2000, 256, 5.0, attempt=a) for a in (1, 2, 3, 4)] == [5.0] * 4
    for _ in range(10):
        ep.observe(latency_s=300.0, prompt_tokens=500, completion_tokens=100)  # 2 s a token
    assert ep.timeout_for(2000, 256, 5.0) == 5.0  # measured slow: still the setting


def test_an_unset_timeout_grows_with_the_measured_speed_and_never_below_the_floor() -> None:
    ep = Endpoint("u", SlotGate(1))
    assert ep.timeout_for(100, 64, None) == 120.0  # a small request: the floor
    assert ep.timeout_for(100, 64, None, attempt=3) == 480.0  # doubled on each retry
    cold = ep.timeout_for(2000, 256, None)
    assert cold > 120.0  # nothing measured: a long prompt gets a pessimistic prior's time
    ep.observe(latency_s=2.0, prompt_tokens=500, completion_tokens=100)  # fast
    assert ep.timeout_for(2000, 256, None) == 120.0
    for _ in range(10):
        ep.observe(latency_s=300.0, prompt_tokens=500, completion_tokens=100)  # 2 s a token
    assert ep.timeout_for(2000, 256, None) > 3 * (256 + 200) * 1.5


# -- answers of any shape ----------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b"not json at all",
        b"[1, 2, 3]",
        b'{"choices": "none"}',
        b'{"object": "error", "message": "overloaded"}',
    ],
)
async def test_an_answer_that_is_not_a_completion_is_an_llm_error(body: bytes) -> None:
    fake = ScriptedLLM([httpx.Response(200, content=body)])
    with pytest.raises(LLMError, match="not"):
        await _scripted(fake, max_retries=0).chat(USER, role=AgentRole.ASSISTANT)
    fake.assert_consumed()


async def test_fields_of_the_wrong_type_are_kept_as_text_and_calls_stay_checkable() -> None:
    completion = {
        "choices": [
            {
                "message": {
                    "content": {"oops": [1, 2]},
                    "tool_calls": [
                        "garbage",
                        {"id": 7, "function": {"name": 5, "arguments": {"date": 1}}},
                    ],
                },
                "finish_reason": 3,
                "logprobs": {"content": [{"logprob": "high"}]},
            },
            "not a choice",
        ],
        "usage": {"prompt_tokens": "many"},
    }
    fake = ScriptedLLM([httpx.Response(200, json=completion)])
    result = await _scripted(fake, max_retries=0).chat(USER, role=AgentRole.ASSISTANT, tools=TOOLS)
    message = result.message
    assert message.content == '{"oops":[1,2]}'
    calls = message.tool_calls or []
    assert [(c.function.name, c.function.arguments) for c in calls] == [
        ("", "garbage"),
        ("5", '{"date":1}'),
    ]
    # a call the server sent no id for gets one that carries a digest of the completion
    assert calls[0].id.startswith("call_") and calls[0].id.endswith("_0") and calls[1].id == "7"
    assert result.finish_reason == "3"
    assert result.token_logprobs is None
    assert result.usage.prompt_tokens > 0  # estimated: the server's count was not a number
    result.model_dump_json()  # what the cache writes


async def test_unpaired_surrogates_and_huge_integers_do_not_break_the_answer() -> None:
    body = (
        '{"choices": [{"message": {"role": "assistant", "content": "a\\ud800b",'
        ' "tool_calls": [{"id": "c1", "function": {"name": "create_event",'
        ' "arguments": "{\\"date\\": \\"\\\\ud800\\"}"}}]}, "finish_reason": "tool_calls"}],'
        ' "big": ' + "9" * 5000 + "}"
    )
    fake = ScriptedLLM([httpx.Response(200, content=body.encode())])
    result = await _scripted(fake, max_retries=0).chat(USER, role=AgentRole.ASSISTANT, tools=TOOLS)
    assert result.message.content == "a\ufffdb"
    assert result.raw["big"] == "9" * 5000  # kept as its digits
    result.model_dump_json()


# -- calls written as text ---------------------------------------------------------------


async def test_the_embedded_servers_call_syntax_in_the_text_becomes_a_call() -> None:
    leaked = 'functions.create_event:\n{"date": "2024-05-01"}'
    fake = ScriptedLLM([say(leaked)])
    result = await _scripted(fake, max_retries=0).chat(USER, role=AgentRole.ASSISTANT, tools=TOOLS)
    assert result.message.content is None
    calls = result.message.tool_calls or []
    assert [(c.function.name, c.function.arguments) for c in calls] == [
        ("create_event", '{"date": "2024-05-01"}')
    ]
    assert result.finish_reason == "tool_calls"


async def test_a_made_up_tool_result_from_the_real_server_is_neither_content_nor_a_call() -> None:
    """The embedded SmolLM2's own answer (llm tier, seed 0, asked for words after a
    create_event result): it wrote the prompt's tool-result syntax. It must not stay as
    content, and it is no call either (a call to "create_event returned" taught nothing but
    junk): the turn is an empty answer, which the verifier's hygiene fails."""
    real = 'functions.create_event returned:\n{"date": "2024-05-01", "title": "Dentist"}'
    fake = ScriptedLLM([say(real)])
    result = await _scripted(fake, max_retries=0).chat(USER, role=AgentRole.ASSISTANT, tools=TOOLS)
    assert result.message.content is None
    assert result.message.tool_calls is None
    assert result.raw["choices"][0]["message"]["content"] == real  # the server's text is kept


async def test_words_before_a_call_stay_and_a_broken_call_is_still_a_call() -> None:
    fake = ScriptedLLM([say('I will add it.\nfunctions.create_event:\n{"date": ')])
    result = await _scripted(fake, max_retries=0).chat(USER, role=AgentRole.ASSISTANT, tools=TOOLS)
    assert result.message.content == "I will add it."
    calls = result.message.tool_calls or []
    assert [(c.function.name, c.function.arguments) for c in calls] == [
        ("create_event", '{"date":')
    ]


async def test_without_tools_the_text_is_left_alone() -> None:
    text = 'functions.create_event:\n{"date": "2024-05-01"}'
    fake = ScriptedLLM([say(text)])
    result = await _scripted(fake, max_retries=0).chat(USER, role=AgentRole.USER)
    assert result.message.content == text
    assert result.message.tool_calls is None


def test_split_text_calls_forms() -> None:
    assert split_text_calls("Nothing to call here.") == ("Nothing to call here.", [])
    two = 'functions.a:\n{"x": 1}\nfunctions.b:\n{}'
    assert split_text_calls(two) == (None, [("a", '{"x": 1}'), ("b", "{}")])
    tagged = 'Ok <tool_call>{"name": "a", "arguments": "{}"}</tool_call>'
    assert split_text_calls(tagged) == ("Ok", [("a", "{}")])
    assert split_text_calls("<tool_call>not json") == (None, [("", "not json")])


async def test_a_tool_call_step_still_parses_as_before() -> None:
    fake = ScriptedLLM([tool_call("create_event", {"date": "2024-05-01"})])
    result = await _scripted(fake, max_retries=0).chat(USER, role=AgentRole.ASSISTANT, tools=TOOLS)
    assert (result.message.tool_calls or [])[0].function.parsed_arguments() == {
        "date": "2024-05-01"
    }


def test_the_sdk_does_no_retries_of_its_own() -> None:
    """Retries belong to the client (after the server is idle); the SDK's would not wait."""
    client = OpenAILLMClient(LLMConfig(base_url="http://x/v1", max_retries=5))

    async def sdk() -> openai.AsyncOpenAI:
        return client._state().client

    assert asyncio.run(sdk()).max_retries == 0
