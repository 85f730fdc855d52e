"""Every request the product sends is a chat-completions request as strict servers read it.

Rollouts (linear, with a good call, a malformed call and an unknown tool; and a tree) run
against the scripted fake LLM; every request body they sent is validated by
``fakes.openai_schema``, a closed model of the OpenAI request. The controls show that the
validator refuses what strict servers refuse: an assistant tool-call message with no
``content`` (llama-cpp-python's 500) and a tool message with a field the spec does not give it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from fakes.llm import ScriptedLLM, say, tool_call
from fakes.openai_schema import check_request
from fakes.shop import InProcessShop, plan_shop_task
from pydantic import ValidationError

from trajsynth.agents.assistant import Assistant
from trajsynth.agents.rollout import Episode, run_episode
from trajsynth.agents.tree import grow_tree
from trajsynth.agents.user_sim import UserSimulator
from trajsynth.llm.client import OpenAILLMClient
from trajsynth.schemas import (
    Blueprint,
    Budgets,
    FunctionCall,
    LLMConfig,
    Message,
    MessageRole,
    ToolCall,
    TreeConfig,
)


def _client(fake: ScriptedLLM) -> OpenAILLMClient:
    config = LLMConfig(base_url="http://fake/v1", max_retries=0, logprobs=True, top_logprobs=5)
    return OpenAILLMClient(config, http_client=httpx.AsyncClient(transport=fake.transport))


@pytest.fixture
async def task(tmp_path: Path) -> Blueprint:
    return await plan_shop_task(tmp_path)


def _check_all(fake: ScriptedLLM) -> None:
    assert fake.requests, "the rollout sent no request"
    for i, body in enumerate(fake.requests):
        try:
            check_request(body)
        except ValidationError as exc:  # name the request, not only the field
            raise AssertionError(f"request {i} breaks the chat schema:\n{exc}") from exc


async def test_a_linear_rollout_sends_only_schema_valid_requests(
    task: Blueprint, tmp_path: Path
) -> None:
    gold = task.gold_run.calls[0]
    fake = ScriptedLLM(
        [
            tool_call(gold.tool, gold.arguments),
            tool_call(gold.tool, '{"query": ', raw=True),  # a malformed call, answered
            tool_call("no_such_tool", {}),
            say("Here is what I found."),
            say("Thanks. ###STOP###"),
        ]
    )
    async with InProcessShop("shop", tmp_path, seed=task.seed) as env:
        result = await run_episode(
            blueprint=task,
            env=env,
            llm=_client(fake),
            assistant=Assistant(),
            user_sim=UserSimulator(),
            budgets=Budgets(),
            run_id="run_wire",
        )
    fake.assert_consumed()
    assert len(result.trajectory.calls) == 3
    _check_all(fake)
    # the later requests carry the assistant's tool-call messages and the tool results
    last = fake.requests[3]["messages"]
    calls = [m for m in last if m["role"] == "assistant" and m.get("tool_calls")]
    assert len(calls) == 3 and all(m["content"] == "" for m in calls)
    assert [m["tool_call_id"] for m in last if m["role"] == "tool"] == [
        m["tool_calls"][0]["id"] for m in calls
    ]


async def test_a_tree_sends_only_schema_valid_requests(task: Blueprint, tmp_path: Path) -> None:
    def answer(body: dict[str, Any]) -> dict[str, Any]:
        if not body.get("tools"):
            return say("Thanks, that is all. ###STOP###")
        turns = sum(m["role"] == "assistant" for m in body["messages"])
        seed = body.get("seed", 0)
        if turns == 0:
            return tool_call("search_products", {"query": f"mug {seed % 97}"})
        return say(f"Option {seed % 97}.", probs=(0.3, 0.25, 0.2, 0.15, 0.1))

    fake = ScriptedLLM([answer] * 200)
    async with InProcessShop("shop", tmp_path, seed=task.seed) as env:
        episode = Episode(task, env, _client(fake), Assistant(), UserSimulator(), Budgets())
        result, _ = await grow_tree(
            episode, TreeConfig(deterministic=True), leaves=4, run_id="run_t", reply_token_cap=64
        )
    assert len(result.leaves) == 4
    _check_all(fake)


def _tool_call_history() -> list[Message]:
    call = ToolCall(id="call_1", function=FunctionCall(name="get_order", arguments="{}"))
    return [
        Message(role=MessageRole.USER, content="where is my order?"),
        Message(role=MessageRole.ASSISTANT, tool_calls=[call]),
        Message(role=MessageRole.TOOL, content="{}", tool_call_id="call_1", name="get_order"),
    ]


def test_the_request_body_is_schema_valid_with_every_option() -> None:
    client = OpenAILLMClient(
        LLMConfig(base_url="http://fake/v1", logprobs=True, top_logprobs=5, model="m")
    )
    tools = [
        {"type": "function", "function": {"name": "get_order", "parameters": {"type": "object"}}}
    ]
    for choice in (
        None,
        "required",
        "none",
        {"type": "function", "function": {"name": "get_order"}},
    ):
        body = client.request_body(
            _tool_call_history(), tools=tools, seed=3, n=2, tool_choice=choice
        )
        check_request(body)
    check_request(client.request_body(_tool_call_history()[:1]))


def test_the_validator_refuses_what_strict_servers_refuse() -> None:
    """Controls: the stored form of the messages (``Message.to_openai``), which the client
    sent before, is refused; so are an unanswered tool result and an unknown field."""
    stored = [m.to_openai() for m in _tool_call_history()]
    with pytest.raises(ValidationError, match="content"):  # the llama-cpp-python 500
        check_request({"model": "m", "messages": stored[:2]})
    tool_msg = {"role": "tool", "content": "{}", "tool_call_id": "call_1", "name": "get_order"}
    with pytest.raises(ValidationError, match="name"):
        check_request(
            {
                "model": "m",
                "messages": [stored[0], {**stored[1], "content": ""}, tool_msg],
            }
        )
    orphan = {"role": "tool", "content": "{}", "tool_call_id": "call_9"}
    with pytest.raises(ValidationError, match="preceding tool call"):
        check_request({"model": "m", "messages": [stored[0], orphan]})
    with pytest.raises(ValidationError, match="extra"):
        check_request({"model": "m", "messages": stored[:1], "cache_prompt": True})
    with pytest.raises(ValidationError, match="tool_choice"):
        check_request({"model": "m", "messages": stored[:1], "tool_choice": "auto"})
