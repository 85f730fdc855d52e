"""No model output crashes anything, fuzzed with hypothesis.

Each case is one HTTP answer of the LLM: bytes that are not JSON, JSON that is not a
completion, or a completion whose message holds any content and any tool calls, with
arguments that are valid JSON, broken JSON, an integer of thousands of digits, nesting
thousands deep, escaped unpaired surrogates, NaN, or a call written as text. The answer goes
through the real ``openai`` client into ``OpenAILLMClient.chat``, the tree's sibling and
action keys, one assistant turn of the rollout loop against the shop cluster's real tools
(in process), the node and trajectory records, their content ids, and their strict-JSON,
UTF-8 encoding (what the store writes). Every case must end as an answer the loop recorded
(a bad call as a ``model`` failure) or, for an answer that is not a completion, as an
``LLMError`` (infra); any other exception fails the test. The fast tier runs 300 cases, the
slow tier 10,000.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fakes.llm_server import schema_value
from fakes.shop import SHOP, InProcessShop, plan_shop_task
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from trajsynth.agents.assistant import Assistant
from trajsynth.agents.rollout import Episode, act, leaf_trajectory, opening_path, path_nodes
from trajsynth.agents.tree import _action_key, _sibling_key
from trajsynth.agents.user_sim import UserSimulator
from trajsynth.llm.client import ChatResult, OpenAILLMClient
from trajsynth.schemas import (
    AgentRole,
    Blueprint,
    Budgets,
    LLMConfig,
    LLMError,
    MessageRole,
    content_id,
    stable_hash,
)

TOOL_NAMES = [t.name for t in SHOP.tools]

# Hypothesis warns when it writes a repr of 30+ kB (a failing case's arguments, nesting
# thousands deep); under ``filterwarnings = error`` that warning would replace the case's own
# exception in the report.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Generating overly large repr:hypothesis.errors.HypothesisWarning"
)

# -- what a model (or a broken server) may send ---------------------------------------------

surrogates = st.integers(0xD800, 0xDFFF).map(chr)
texts = st.one_of(
    st.text(max_size=40),
    st.lists(st.one_of(st.characters(), surrogates), max_size=12).map("".join),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    texts,
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)


def _deep(depth: int, opener: str) -> str:
    if opener == '{"q": [':  # nesting under a key
        return '{"q": ' + _deep(depth, "[") + "}"
    closer = {"[": "]", '{"a":': "}"}[opener]
    return opener * depth + "1" + closer * depth


argument_texts = st.one_of(
    json_values.map(lambda v: json.dumps(v)),  # valid JSON of any shape
    st.dictionaries(st.sampled_from(["query", "sku", "qty", "order_id"]), json_values).map(
        json.dumps
    ),
    st.dictionaries(
        st.sampled_from(["query", "sku", "qty", "order_id", "email"]),
        st.one_of(st.text(max_size=12), st.integers(-5, 50)),
    ).map(json.dumps),  # often valid for a shop tool: the call reaches the tools
    texts,  # anything at all
    st.integers(4300, 6000).map(lambda n: '{"qty": ' + "9" * n + "}"),  # past int() limits
    # built after the draw: a strategy holding the strings would carry 50 kB in its repr
    st.tuples(st.integers(30, 5000), st.sampled_from(["[", '{"a":', '{"q": ['])).map(
        lambda t: _deep(*t)
    ),
    st.sampled_from(
        ['{"query": "\\ud800"}', '{"\\udfff": 1}', '{"qty": NaN}', '{"qty": 1e999}', '{"query": ']
    ),
)
# calls valid for a shop tool's schema (from the fake server's schema walker), which reach
# the tools and come back as results or tool errors
valid_calls = st.tuples(st.sampled_from(SHOP.tools), st.integers(0, 2**32)).map(
    lambda t: {
        "id": f"call_{t[1]}",
        "type": "function",
        "function": {
            "name": t[0].name,
            "arguments": json.dumps(schema_value(t[0].input_schema, t[1])),
        },
    }
)
names = st.one_of(
    st.sampled_from(TOOL_NAMES),
    st.sampled_from(TOOL_NAMES),
    st.sampled_from(TOOL_NAMES),
    texts,
    json_values,
)
proper_calls = st.fixed_dictionaries(
    {"function": st.fixed_dictionaries({"name": names, "arguments": argument_texts})},
    optional={"id": st.one_of(texts, st.integers()), "type": st.just("function")},
)
tool_call_values = st.one_of(valid_calls, valid_calls, proper_calls, proper_calls, json_values)
contents = st.one_of(
    st.none(),
    texts,
    json_values,
    st.tuples(st.sampled_from(TOOL_NAMES + ["nope"]), argument_texts).map(
        lambda c: f"Sure.\nfunctions.{c[0]}:\n{c[1]}"  # a call written as text
    ),
    st.tuples(st.sampled_from(TOOL_NAMES), argument_texts).map(
        lambda c: f'<tool_call>{{"name": "{c[0]}", "arguments": {c[1]}}}</tool_call>'
    ),
)
proper_messages = st.fixed_dictionaries(
    {"role": st.just("assistant"), "content": contents},
    optional={
        "tool_calls": st.one_of(
            st.lists(tool_call_values, min_size=1, max_size=3),
            st.lists(tool_call_values, min_size=1, max_size=3),
            json_values,
        )
    },
)
messages = st.one_of(proper_messages, proper_messages, json_values)  # or not an object
logprobs = st.one_of(
    st.none(),
    json_values,
    st.lists(
        st.fixed_dictionaries(
            {"logprob": st.one_of(st.floats(), json_values)},
            optional={
                "top_logprobs": st.one_of(
                    json_values, st.lists(st.builds(dict, logprob=st.floats()))
                )
            },
        ),
        max_size=4,
    ).map(lambda c: {"content": c}),
)
proper_choices = st.fixed_dictionaries(
    {"message": messages},
    optional={"finish_reason": json_values, "logprobs": logprobs, "index": json_values},
)
choices = st.one_of(proper_choices, proper_choices, proper_choices, json_values)
completions = st.fixed_dictionaries(
    {"choices": st.lists(choices, min_size=1, max_size=2)},
    optional={"usage": json_values, "id": json_values, "model": json_values},
)


def _encoded(value: Any) -> bytes:
    # ensure_ascii writes unpaired surrogates as \\udxxx escapes, as a server may
    return json.dumps(value, ensure_ascii=True).encode()


answers = st.one_of(
    completions.map(_encoded),
    completions.map(_encoded),
    completions.map(_encoded),
    json_values.map(_encoded),  # JSON that is not a completion
    st.binary(max_size=64),  # not JSON
)

# -- the pipeline a case goes through --------------------------------------------------------

_USER_STOP = {
    "id": "chatcmpl-user",
    "object": "chat.completion",
    "created": 0,
    "model": "fuzz",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Thanks, that is all. ###STOP###"},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 10, "completion_tokens": 8, "total_tokens": 18},
}


class _Harness:
    """One loop, one client, one shop and one blueprint for every case of a test. The LLM
    is an ``httpx.MockTransport`` behind the real ``openai`` client (as ``fakes.llm``):
    the assistant's request gets the case's answer, the user simulator's a stop."""

    def __init__(self, blueprint: Blueprint, tmp: Path) -> None:
        self.blueprint = blueprint
        self.loop = asyncio.new_event_loop()
        self.answer: bytes = b""
        config = LLMConfig(base_url="http://fuzz/v1", max_retries=0, logprobs=True)
        transport = httpx.MockTransport(self._respond)
        self.client = OpenAILLMClient(config, http_client=httpx.AsyncClient(transport=transport))
        self.env = InProcessShop("shop", tmp, seed=blueprint.seed)
        self.outcomes: Counter[str] = Counter()
        self.loop.run_until_complete(self.env.__aenter__())

    def _respond(self, request: httpx.Request) -> httpx.Response:
        if json.loads(request.content).get("tools"):
            return httpx.Response(200, content=self.answer)
        return httpx.Response(200, json=_USER_STOP)

    def close(self) -> None:
        self.loop.run_until_complete(self.env.__aexit__(None, None, None))
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()

    def run(self, answer: bytes) -> list[str]:
        """The case's recorded outcomes: one per call, or how the turn ended without one."""
        self.answer = answer
        outcomes = self.loop.run_until_complete(self._case())
        self.outcomes.update(outcomes)
        return outcomes

    async def _case(self) -> list[str]:
        episode = Episode(
            self.blueprint, self.env, self.client, Assistant(), UserSimulator(), Budgets()
        )
        path = opening_path(episode)
        try:
            result = await self.client.chat(
                path.messages, role=AgentRole.ASSISTANT, tools=episode.openai_tools, seed=1
            )
        except LLMError:
            return ["infra: not a completion"]
        _check_result(result)
        await act(episode, path, result, user_seed=1)
        _, nodes = path_nodes("tree_fuzz", path)
        trajectory = leaf_trajectory(
            episode,
            run_id="run_fuzz",
            tree_id="tree_fuzz",
            seed=0,
            path=path,
            nodes=nodes,
            final_state=None,
            wall_s=0.0,
        )
        for record in [trajectory, *nodes]:
            row = record.model_dump(mode="json")
            json.dumps(row, allow_nan=False, ensure_ascii=False).encode("utf-8")
            record.model_dump_json()
            content_id("x", record)
        for message in trajectory.messages:
            if message.role is MessageRole.ASSISTANT and message.content:
                assert "\nfunctions." not in "\n" + message.content, message.content
        if not trajectory.calls:
            return ["answer in words"]
        return [f"call: {c.failure_class or 'ok'} {c.error_type or ''}" for c in trajectory.calls]


def _check_result(result: ChatResult) -> None:
    _sibling_key(result)
    _action_key(result)
    stable_hash(result.model_dump(mode="json"))
    ChatResult.model_validate_json(result.model_dump_json())  # the cache's round trip
    for lp in result.token_logprobs or []:
        assert math.isfinite(lp)


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Harness]:
    tmp = tmp_path_factory.mktemp("fuzz")
    blueprint = asyncio.run(plan_shop_task(tmp))
    h = _Harness(blueprint, tmp)
    yield h
    h.close()
    print(f"\nfuzz outcomes ({sum(h.outcomes.values())} cases):")
    for outcome, count in h.outcomes.most_common():
        print(f"  {count:6d}  {outcome}")


# a case ends as exactly these: an infra error (not a completion), words, or calls that are ok
# or a recorded model/tool failure (never infra or simulator: the policy's output caused them)
_RECORDED = ("infra: not a completion", "answer in words", "call: ok ", "call: model ",
             "call: tool ")  # fmt: skip


def _assert_recorded(outcomes: list[str]) -> None:
    assert outcomes, "the case recorded nothing"
    assert all(o.startswith(_RECORDED) for o in outcomes), outcomes


# logprobs near the float limit once overflowed the step entropy's mean (CI, stop 32)
_HUGE_LOGPROBS = (
    b'{"choices": [{"message": null, "logprobs": {"content": [{"logprob": -8.988465674311579e+307},'
    b' {"logprob": -8.98846567431158e+307}]}}]}'
)

_FUZZ = {
    "deadline": None,
    "derandomize": True,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}


@settings(max_examples=100, **_FUZZ)  # the fast tier; 10,000 in the slow one
@given(answer=answers)
@example(answer=_HUGE_LOGPROBS)
def test_no_model_output_crashes_the_turn(harness: _Harness, answer: bytes) -> None:
    _assert_recorded(harness.run(answer))


@pytest.mark.slow
@settings(max_examples=10_000, **_FUZZ)
@given(answer=answers)
@example(answer=_HUGE_LOGPROBS)
def test_no_model_output_crashes_the_turn_10k(harness: _Harness, answer: bytes) -> None:
    _assert_recorded(harness.run(answer))
