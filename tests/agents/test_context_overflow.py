"""A conversation that outgrows the server's context ends the rollout as ``context_limit``.

Each server says so in its own words (llama-cpp-python, vLLM, OpenAI, llama.cpp's
llama-server; ``fakes.llm_server.OVERFLOW_ANSWERS``). The fake OpenAI-compatible server over
real HTTP is given a context window that the first assistant turn fits and the second does
not; the rollout must stop there as ``context_limit`` (judged like a rollout out of turns),
ask once (no retry: the same prompt would not fit again), and never become an ``infra``
failure, which would fail its unit. The controls: the same rollout with room to spare goes
on past that turn, and a refusal that is not about the context stays an ``infra`` failure.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from fakes.llm import ScriptedLLM, http_error, say, tool_call
from fakes.llm_server import OVERFLOW_ANSWERS, FakeLLMServer
from fakes.shop import InProcessShop, plan_shop_task

from trajsynth.agents.assistant import Assistant
from trajsynth.agents.rollout import Episode, EpisodeResult, run_episode
from trajsynth.agents.tree import grow_tree
from trajsynth.agents.user_sim import UserSimulator
from trajsynth.curation.verify import verify
from trajsynth.llm import client as llm_module
from trajsynth.llm.client import OpenAILLMClient, context_overflow
from trajsynth.schemas import (
    AgentRole,
    Blueprint,
    Budgets,
    FailureClass,
    LLMConfig,
    LLMError,
    Message,
    MessageRole,
    Termination,
    TreeConfig,
)


@pytest.fixture
async def task(tmp_path: Path) -> Blueprint:
    return await plan_shop_task(tmp_path)


async def _linear(task: Blueprint, llm: OpenAILLMClient, tmp_path: Path) -> EpisodeResult:
    async with InProcessShop("shop", tmp_path, seed=task.seed) as env:
        try:
            return await run_episode(
                blueprint=task,
                env=env,
                llm=llm,
                assistant=Assistant(),
                user_sim=UserSimulator(),
                budgets=Budgets(),
                run_id="run_ctx",
            )
        finally:
            await llm.aclose()


def _over_http(server: FakeLLMServer) -> OpenAILLMClient:
    # retries on: a refusal that were retried would show as a second request
    config = LLMConfig(base_url=server.base_url, model="fake", max_retries=2, logprobs=True)
    return OpenAILLMClient(config)


@pytest.fixture(scope="module")
def roomy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Blueprint, list[int]]:
    """A shop task and the prompt sizes of its rollout's requests with no window: the control
    run, done once for every server's case."""
    tmp_path = tmp_path_factory.mktemp("roomy")

    async def control() -> tuple[Blueprint, list[int]]:
        task = await plan_shop_task(tmp_path)
        with FakeLLMServer() as server:
            result = await _linear(task, _over_http(server), tmp_path)
            sizes = list(server.faults.prompts)
        assert result.trajectory.termination is not Termination.CONTEXT_LIMIT
        assert result.trajectory.n_turns >= 2  # with room, the rollout goes past turn one
        return task, sizes

    return asyncio.run(control())


@pytest.mark.parametrize("server_kind", sorted(OVERFLOW_ANSWERS))
async def test_a_server_s_context_overflow_ends_the_rollout_as_context_limit(
    server_kind: str, roomy: tuple[Blueprint, list[int]], tmp_path: Path
) -> None:
    task, sizes = roomy
    max_tokens = LLMConfig().max_tokens
    # the first assistant turn fits; the second (its call's result added) does not
    n_ctx = sizes[0] + max_tokens
    assert sizes[1] + max_tokens > n_ctx
    with FakeLLMServer(n_ctx=n_ctx, overflow=server_kind) as server:
        result = await _linear(task, _over_http(server), tmp_path)
        asked, refused = len(server.faults.prompts), server.faults.refused
    traj = result.trajectory
    assert traj.termination is Termination.CONTEXT_LIMIT, traj.failure_detail
    assert traj.failure_class is None  # a stop condition, not infra: the unit does not fail
    assert (asked, refused) == (2, 1)  # refused once, never asked again
    assert "context" in (traj.failure_detail or "")
    assert len(traj.calls) == 1 and traj.n_turns == 1  # the turn that fitted is kept
    verdict = verify(traj, task.constraints, result.final_state)
    assert not verdict.excluded  # judged like a rollout that ran out of turns


async def test_a_refusal_that_is_not_about_the_context_stays_infra(
    task: Blueprint, tmp_path: Path
) -> None:
    fake = ScriptedLLM([http_error(400, "Invalid value for 'temperature': must be <= 2")])
    config = LLMConfig(base_url="http://fake/v1", max_retries=0, logprobs=False)
    llm = OpenAILLMClient(config, http_client=httpx.AsyncClient(transport=fake.transport))
    result = await _linear(task, llm, tmp_path)
    assert result.trajectory.termination is Termination.INFRA_ERROR
    assert result.trajectory.failure_class is FailureClass.INFRA


def _vllm_overflow() -> httpx.Response:
    status, body = OVERFLOW_ANSWERS["vllm"](2048, 2100, 128)
    return httpx.Response(status, json=body)


async def test_the_user_simulator_s_request_overflowing_ends_as_context_limit(
    task: Blueprint, tmp_path: Path
) -> None:
    fake = ScriptedLLM([say("Which colour would you like?"), _vllm_overflow()])
    config = LLMConfig(base_url="http://fake/v1", max_retries=1)
    llm = OpenAILLMClient(config, http_client=httpx.AsyncClient(transport=fake.transport))
    result = await _linear(task, llm, tmp_path)
    fake.assert_consumed()  # the refused request was not sent again
    assert result.trajectory.termination is Termination.CONTEXT_LIMIT
    assert result.trajectory.failure_class is None


async def test_a_tree_branch_that_overflows_is_a_context_limit_leaf(
    task: Blueprint, tmp_path: Path
) -> None:
    gold = task.gold_run.calls[0]

    def answer(body: dict) -> object:
        if any(m["role"] == "tool" for m in body["messages"]):
            return _vllm_overflow()  # every turn after a tool result outgrows the context
        return tool_call(gold.tool, gold.arguments)

    fake = ScriptedLLM([answer] * 40)
    config = LLMConfig(base_url="http://fake/v1", max_retries=1, logprobs=True)
    llm = OpenAILLMClient(config, http_client=httpx.AsyncClient(transport=fake.transport))
    async with InProcessShop("shop", tmp_path, seed=task.seed) as env:
        episode = Episode(task, env, llm, Assistant(), UserSimulator(), Budgets())
        result, _ = await grow_tree(
            episode, TreeConfig(deterministic=True), leaves=2, run_id="run_t", reply_token_cap=64
        )
    assert result.leaves
    assert {t.termination for t in result.trajectories} == {Termination.CONTEXT_LIMIT}
    assert all(t.failure_class is None for t in result.trajectories)


async def test_the_client_flags_every_server_s_overflow_and_asks_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(llm_module, "_BACKOFF_INITIAL_S", 0.01)  # the control's one retry
    user = [Message(role=MessageRole.USER, content="a long conversation")]
    for kind, answer in sorted(OVERFLOW_ANSWERS.items()):
        status, body = answer(4096, 4000, 256)
        # logprobs not known yet: a refusal of the length must not be taken for one of them
        fake = ScriptedLLM([httpx.Response(status, json=body)])
        config = LLMConfig(base_url="http://fake/v1", max_retries=3, logprobs=True)
        client = OpenAILLMClient(config, http_client=httpx.AsyncClient(transport=fake.transport))
        with pytest.raises(LLMError) as info:
            await client.chat(user, role=AgentRole.ASSISTANT)
        fake.assert_consumed()
        assert context_overflow(info.value), kind
        assert "does not fit the model's context" in str(info.value), kind
    # the control: a 500 that is not about the context is retried, then an infra fault
    fake = ScriptedLLM([http_error(500, "CUDA error: out of memory")] * 2)
    config = LLMConfig(base_url="http://fake/v1", max_retries=1, logprobs=False)
    client = OpenAILLMClient(config, http_client=httpx.AsyncClient(transport=fake.transport))
    with pytest.raises(LLMError) as info:
        await client.chat(user, role=AgentRole.ASSISTANT)
    fake.assert_consumed()
    assert not context_overflow(info.value)
