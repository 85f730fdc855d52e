"""Infra faults inside a rollout, with the real environment (the bundled shop server in a
LocalSandbox): a transport that drops the first two tool calls costs two restarts and two
retries, and the trajectory records no infra failure; one that always drops ends ``infra``."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import httpx
import pytest
from fakes.llm import ScriptedLLM, say, tool_call
from fakes.shop import plan_shop_task

from trajsynth.agents.assistant import Assistant
from trajsynth.agents.rollout import EpisodeResult, run_episode
from trajsynth.agents.user_sim import UserSimulator
from trajsynth.curation.verify import verify
from trajsynth.llm.client import OpenAILLMClient
from trajsynth.mcp_servers.environment import Environment
from trajsynth.mcp_servers.registry import get_cluster
from trajsynth.sandboxes import LocalSandbox
from trajsynth.schemas import (
    AnswerContains,
    Blueprint,
    Budgets,
    FailureClass,
    LLMConfig,
    SandboxLimits,
    Termination,
)

pytestmark = pytest.mark.slow

PROXY = Path(__file__).parents[1] / "fakes" / "dropping_proxy.py"


class DroppingSandbox(LocalSandbox):
    """A real LocalSandbox whose MCP server is reached through ``dropping_proxy``."""

    def __init__(self, counter: Path, drops: int) -> None:
        super().__init__(SandboxLimits(memory_mb=1024, pids=256, timeout_s=60))
        self.counter, self.drops = counter, drops

    def stdio_command(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None
    ) -> list[str]:
        inner = super().stdio_command(argv, env=env)
        return [sys.executable, str(PROXY), str(self.counter), str(self.drops), "--", *inner]


@pytest.fixture
async def read_task(tmp_path: Path) -> Blueprint:
    return await plan_shop_task(
        tmp_path, lambda bp: any(isinstance(c, AnswerContains) for c in bp.constraints)
    )


async def _run(bp: Blueprint, drops: int, tmp_path: Path) -> tuple[EpisodeResult, Environment]:
    gold = bp.gold_run.calls[0]
    values = next(c for c in bp.constraints if isinstance(c, AnswerContains)).values
    fake = ScriptedLLM(
        [
            tool_call(gold.tool, gold.arguments),
            say("Here you go: " + ", ".join(str(v) for v in values) + "."),
            say("Thanks! ###STOP###"),
        ]
    )
    config = LLMConfig(base_url="http://fake/v1", max_retries=0, logprobs=True)
    llm = OpenAILLMClient(config, http_client=httpx.AsyncClient(transport=fake.transport))
    sandbox = DroppingSandbox(tmp_path / "drops", drops)
    sandbox.start()
    env = Environment(get_cluster("shop"), sandbox, seed=bp.seed, retry_wait_s=0.05)
    async with env:
        result = await run_episode(
            blueprint=bp,
            env=env,
            llm=llm,
            assistant=Assistant(),
            user_sim=UserSimulator(),
            budgets=Budgets(),
            run_id="run_test",
        )
    return result, env


async def test_a_call_dropped_twice_answers_the_third_try(
    read_task: Blueprint, tmp_path: Path
) -> None:
    result, env = await _run(read_task, drops=2, tmp_path=tmp_path)
    assert (env.restarts, env.retries) == (2, 2)
    traj = result.trajectory
    assert traj.failure_class is None and traj.termination is Termination.USER_STOP
    assert [(c.tool, c.failure_class) for c in traj.calls] == [
        (read_task.gold_run.calls[0].tool, None)
    ]
    assert verify(traj, read_task.constraints, result.final_state).passed


async def test_a_call_always_dropped_ends_infra(read_task: Blueprint, tmp_path: Path) -> None:
    result, env = await _run(read_task, drops=10**6, tmp_path=tmp_path)
    assert (env.restarts, env.retries) == (env.call_attempts, env.call_attempts - 1)
    assert result.trajectory.failure_class is FailureClass.INFRA
