"""The fake LLM server behind the real ``openai`` client: deterministic, schema-valid tool
calls, the simulator's stop marker, usage and logprobs, and the per-request delay."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import jsonschema
import openai
import pytest

from fakes.llm_server import STOP_MARKER, FakeLLMServer

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add_to_cart",
            "description": "Add a product.",
            "parameters": {
                "type": "object",
                "properties": {
                    "sku": {"type": "string", "minLength": 3},
                    "qty": {"type": "integer", "minimum": 1, "maximum": 5},
                    "gift": {"type": "boolean"},
                    "size": {"enum": ["S", "M", "L"]},
                    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
                    "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                },
                "required": ["sku", "qty", "size"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_product",
            "parameters": {
                "type": "object",
                "properties": {"sku": {"type": "string"}},
                "required": ["sku"],
            },
        },
    },
]


@pytest.fixture(scope="module")
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as s:
        yield s


@pytest.fixture
def client(server: FakeLLMServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)


def test_models_lists_the_fake(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == ["fake"]


def test_tool_calls_follow_the_schema_and_are_deterministic(client: openai.OpenAI) -> None:
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    names = set()
    for seed in range(20):
        kwargs = {
            "model": "fake",
            "messages": [{"role": "user", "content": "buy a mug"}],
            "tools": TOOLS,
            "seed": seed,
        }
        first = client.chat.completions.create(**kwargs)
        again = client.chat.completions.create(**kwargs)
        assert first.model_dump(exclude={"id"}) == again.model_dump(exclude={"id"})
        assert first.choices[0].finish_reason == "tool_calls"
        call = first.choices[0].message.tool_calls[0]
        names.add(call.function.name)
        jsonschema.validate(json.loads(call.function.arguments), schemas[call.function.name])
    assert names == {"add_to_cart", "get_product"}  # the hash spreads over the tools


def test_named_tool_choice_and_none(client: openai.OpenAI) -> None:
    msgs = [{"role": "user", "content": "hi"}]
    named = client.chat.completions.create(
        model="fake",
        messages=msgs,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_product"}},
    )
    assert named.choices[0].message.tool_calls[0].function.name == "get_product"
    plain = client.chat.completions.create(
        model="fake", messages=msgs, tools=TOOLS, tool_choice="none"
    )
    assert plain.choices[0].message.tool_calls is None
    assert plain.choices[0].message.content


def test_after_a_tool_result_it_answers_and_reuses_seen_values(client: openai.OpenAI) -> None:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "get_product", "arguments": '{"sku": "x"}'},
    }
    msgs = [
        {"role": "user", "content": "find the mug"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"sku": "MUG-42", "price": 3}'},
    ]
    auto = client.chat.completions.create(model="fake", messages=msgs, tools=TOOLS)
    assert auto.choices[0].message.tool_calls is None
    assert "MUG-42" in auto.choices[0].message.content  # the answer quotes the result
    required = client.chat.completions.create(
        model="fake", messages=msgs, tools=TOOLS, tool_choice="required"
    )
    args = json.loads(required.choices[0].message.tool_calls[0].function.arguments)
    assert args["sku"] == "MUG-42"  # a value seen in a tool result, under the same key


def test_tool_arguments_are_grounded_in_what_the_user_wrote(client: openai.OpenAI) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": name,
                "parameters": {
                    "type": "object",
                    "properties": {param: {"type": "string"}},
                    "required": [param],
                },
            },
        }
        for name, param in [("find_user", "email"), ("get_order", "order_id"), ("x", "blob")]
    ]
    for seed in range(5):
        out = client.chat.completions.create(
            model="fake",
            messages=[{"role": "user", "content": "My email is a.b@example.com, order #W1008."}],
            tools=tools,
            seed=seed,
        )
        call = out.choices[0].message.tool_calls[0].function
        args = json.loads(call.arguments)
        assert call.name in {"find_user", "get_order"}  # never the tool it cannot fill
        assert args in ({"email": "a.b@example.com"}, {"order_id": "#W1008"})


def test_user_simulator_stops_after_a_couple_of_turns(client: openai.OpenAI) -> None:
    system = {"role": "system", "content": f"You are a customer ... then {STOP_MARKER}."}
    view = [system, {"role": "assistant", "content": "I want a mug."}]
    replies = []
    for turn in range(3):
        view.append({"role": "user", "content": f"Assistant message {turn}?"})
        out = client.chat.completions.create(model="fake", messages=view)
        text = out.choices[0].message.content
        replies.append(text)
        view.append({"role": "assistant", "content": text})
    assert STOP_MARKER not in replies[0]
    assert STOP_MARKER in replies[1] and STOP_MARKER in replies[2]


def test_usage_logprobs_and_n(client: openai.OpenAI) -> None:
    out = client.chat.completions.create(
        model="fake",
        messages=[{"role": "user", "content": "say something short please"}],
        logprobs=True,
        top_logprobs=3,
        n=3,
        seed=1,
    )
    assert len(out.choices) == 3
    assert out.usage.prompt_tokens == 4
    n_tokens = sum(len(c.logprobs.content) for c in out.choices)
    assert out.usage.completion_tokens == n_tokens > 0
    top = out.choices[0].logprobs.content[0].top_logprobs
    assert len(top) == 3 and top[0].logprob >= top[1].logprob


def test_bad_requests_get_a_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="fake", messages="nope")  # type: ignore[arg-type]


def test_per_request_delay() -> None:
    with FakeLLMServer(delay_s=0.2) as slow:
        client = openai.OpenAI(base_url=slow.base_url, api_key="t", max_retries=0)
        started = time.perf_counter()
        client.chat.completions.create(model="fake", messages=[{"role": "user", "content": "x"}])
        assert time.perf_counter() - started >= 0.2
        assert slow.requests == 1
