"""A tool server that died running the model's program ends the rollout as the model's
failure (`environment_broken`, class `model`, counted), never as an excused infra fault."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
from fakes.llm import ScriptedLLM, tool_call
from fakes.shop import InProcessShop, plan_shop_task

from trajsynth.agents.assistant import Assistant
from trajsynth.agents.rollout import run_episode
from trajsynth.agents.user_sim import UserSimulator
from trajsynth.curation.verify import verify
from trajsynth.llm.client import OpenAILLMClient
from trajsynth.mcp_servers.environment import ToolResult
from trajsynth.mcp_servers.tool_calls import SERVER_KILLED
from trajsynth.schemas import Budgets, FailureClass, LLMConfig, Termination

EVIDENCE = (
    "the tool server died while {tool} ran the program (the server closed the connection; "
    "the sandbox is alive), so the program killed or broke it; the server was restarted"
)


class _KilledOnFirstCall(InProcessShop):
    """The shop in-process, whose first call comes back as the environment reports a server
    that died during the call with the sandbox alive."""

    killed = False

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | None) -> ToolResult:
        if not self.killed:
            self.killed = True
            return ToolResult(
                text=EVIDENCE.format(tool=name), is_error=True, error_type=SERVER_KILLED
            )
        return await super().call_tool(name, arguments)


async def test_a_killed_server_is_the_models_failure_with_the_evidence(tmp_path: Path) -> None:
    bp = await plan_shop_task(tmp_path, lambda bp: True)
    gold = bp.gold_run.calls[0]
    fake = ScriptedLLM([tool_call(gold.tool, gold.arguments)])
    config = LLMConfig(base_url="http://fake/v1", max_retries=0, logprobs=True)
    llm = OpenAILLMClient(config, http_client=httpx.AsyncClient(transport=fake.transport))
    async with _KilledOnFirstCall("shop", tmp_path, seed=bp.seed) as env:
        result = await run_episode(
            blueprint=bp,
            env=env,
            llm=llm,
            assistant=Assistant(),
            user_sim=UserSimulator(),
            budgets=Budgets(),
            run_id="run_test",
        )
    fake.assert_consumed()  # the rollout stopped at the broken environment
    traj = result.trajectory
    assert traj.termination is Termination.ENVIRONMENT_BROKEN
    assert traj.failure_class is FailureClass.MODEL  # counted: not excused as infra
    (call,) = traj.calls
    assert call.failure_class is FailureClass.MODEL and call.error_type == SERVER_KILLED
    assert call.observation == EVIDENCE.format(tool=gold.tool)
    verdict = verify(traj, bp.constraints, result.final_state)
    assert not verdict.excluded  # in the pass rate, as a failure of the policy
