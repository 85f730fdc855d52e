"""The run that passed junk, replayed end to end on the scripted fake LLM (fast tier).

On the embedded defaults SmolLM2 made one real call, then answered every later turn with the
prompt's tool-result syntax (``functions.<tool> returned: {...}``) and never spoke to the
user. The parser made calls to "<tool> returned" of that text, the constraints held after the
first call, and the export wrote the trajectory with its last tool result dropped and one
call id three times. Here the same model output goes through the real client, rollout loop,
verifier, store and SFT export: no pseudo-call is made, the trajectory does not pass, and a
selection of it (as the old curation made) is refused by the export with its reasons.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from fakes.export_store import select
from fakes.llm import ScriptedLLM, say, tool_call
from fakes.shop import InProcessShop, plan_shop_task
from fakes.store_rows import RUN, write_round

from trajsynth.agents.assistant import Assistant
from trajsynth.agents.judge import judge_episode
from trajsynth.agents.rollout import run_episode
from trajsynth.agents.user_sim import UserSimulator
from trajsynth.export import EmptySelectionError, sft_rows
from trajsynth.llm.client import OpenAILLMClient
from trajsynth.schemas import Blueprint, Budgets, LLMConfig
from trajsynth.store import Store


def _client(fake: ScriptedLLM) -> OpenAILLMClient:
    config = LLMConfig(base_url="http://fake/v1", max_retries=0, logprobs=True)
    return OpenAILLMClient(config, http_client=httpx.AsyncClient(transport=fake.transport))


def _smollm2(bp: Blueprint) -> Any:
    """What SmolLM2 did: the gold call first; after any tool result or user turn, the
    result syntax of the prompt echoed as its answer; the simulated user asks again."""
    gold = bp.gold_run.calls[0]
    echo = f"functions.{gold.tool} returned:\n" + json.dumps({"ok": True, "id": "X-1"})

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        if "tools" not in body:  # the user simulator
            return say("Did that work?")
        if not any(m.get("role") == "tool" for m in body["messages"]):
            return tool_call(gold.tool, gold.arguments)
        return say(echo)

    return respond


@pytest.fixture
async def task(tmp_path: Path) -> Blueprint:
    return await plan_shop_task(tmp_path)


async def test_the_echoed_tool_result_case_exports_nothing(task: Blueprint, tmp_path: Path) -> None:
    fake = ScriptedLLM([_smollm2(task)] * 12)
    async with InProcessShop("shop", tmp_path, seed=task.seed) as env:
        result = await run_episode(
            blueprint=task,
            env=env,
            llm=_client(fake),
            assistant=Assistant(tool_choice_after_user="required", tool_choice_after_tool="none"),
            user_sim=UserSimulator(),
            budgets=Budgets(max_turns=4),
            run_id=RUN,
        )
    judged = judge_episode(task, result, attempt=1)
    (trajectory,) = judged.trajectories
    (verdict,) = judged.verdicts

    # the parser made no call of the echoed results: one call, to a tool that exists
    tools = {t["function"]["name"] for t in trajectory.tools}
    assert [c.tool for c in trajectory.calls] == [task.gold_run.calls[0].tool]
    assert all(c.tool in tools for c in trajectory.calls)
    # it never answered the user: it does not pass, whatever its constraints say
    assert not verdict.passed and "answered" in verdict.failed_checks
    assert verdict.clean is False

    # stored and selected as the old curation did, the export still refuses it
    store = Store(tmp_path / "s.duckdb")
    write_round(store, [trajectory], {trajectory.trajectory_id: verdict})
    store.insert_many({"selections": [select("sft", trajectory.trajectory_id, task.blueprint_id)]})
    refused: dict[str, int] = {}
    with pytest.raises(EmptySelectionError, match="refused as not a clean example"):
        sft_rows(store, RUN, refused=refused)
    assert refused["hygiene:answered"] == 1 and refused["not passed"] == 1
