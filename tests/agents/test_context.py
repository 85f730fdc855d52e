"""Fitting an episode's tools into the model's context (issue 17, item 2): a generated 36-tool
cluster and the shop's real tools with the scripted fake LLM; the real embedder and a real
36-tool MCP server in the slow tier."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from fakes.llm import ScriptedLLM, say, tool_call
from fakes.shop import InProcessShop, plan_shop_task

from trajsynth.agents.assistant import Assistant
from trajsynth.agents.context import fit_tools, shown_tools, tool_budget, tool_tokens
from trajsynth.agents.llm import OpenAILLMClient
from trajsynth.agents.rollout import run_episode
from trajsynth.agents.user_sim import UserSimulator
from trajsynth.curation.verify import verify
from trajsynth.schemas import (
    AnswerContains,
    Blueprint,
    Budgets,
    FailureClass,
    LLMConfig,
    ToolSpec,
)

# Six families of six tools: a task on weather tools should be shown weather distractors.
FAMILIES = {
    "weather": "the weather forecast temperature and rain for a city",
    "invoice": "customer invoices billing amounts and payment due dates",
    "ticket": "support tickets their priority status and assignee",
    "playlist": "music playlists songs artists and albums",
    "shipment": "parcel shipments tracking numbers carriers and delivery",
    "recipe": "cooking recipes ingredients and oven times",
}
VERBS = ("get", "list", "create", "update", "delete", "search")


def _tool(family: str, verb: str) -> ToolSpec:
    return ToolSpec(
        name=f"{verb}_{family}",
        description=f"{verb.capitalize()} {FAMILIES[family]}.",
        input_schema={
            "type": "object",
            "properties": {
                "id": {"type": "string", "description": f"the {family} id"},
                "note": {"type": "string", "description": "free text, optional"},
            },
            "required": ["id"],
        },
    )


TOOLS = [_tool(f, v) for f in FAMILIES for v in VERBS]


def _blueprint(base: Blueprint, *tools: str) -> Blueprint:
    """``base`` with its tool path renamed to ``tools`` (only the path's tool names matter)."""
    steps = [s.model_copy(update={"tool": t}) for s, t in zip(base.tool_path, tools, strict=False)]
    return base.model_copy(update={"tool_path": steps})


@pytest.fixture
async def read_task(tmp_path: Path) -> Blueprint:
    return await plan_shop_task(
        tmp_path, lambda bp: any(isinstance(c, AnswerContains) for c in bp.constraints)
    )


def test_every_tool_is_shown_when_the_set_fits(read_task: Blueprint) -> None:
    total = sum(map(tool_tokens, TOOLS))
    assert len(TOOLS) == 36
    assert fit_tools(read_task, TOOLS, context_tokens=2 * total + 2) == TOOLS
    assert fit_tools(read_task, TOOLS, context_tokens=None) == TOOLS  # context unknown
    assert shown_tools(read_task, TOOLS, context_tokens=2 * total + 2) is None


def test_path_tools_and_nearest_distractors_when_the_set_does_not_fit(
    read_task: Blueprint,
) -> None:
    bp = _blueprint(read_task, "get_weather")
    context = 2048
    shown = fit_tools(bp, TOOLS, context_tokens=context, distractors=4)
    names = [t.name for t in shown]
    assert sum(map(tool_tokens, TOOLS)) > tool_budget(context)  # the whole set does not fit
    assert "get_weather" in names and len(names) == 5
    # the nearest by shared words are the other weather tools, not invoices or recipes
    assert all(n.endswith("_weather") for n in names)
    assert sum(map(tool_tokens, shown)) <= tool_budget(context)
    # the cluster's order is kept, so the position never tells which tool is needed
    assert names == [t.name for t in TOOLS if t.name in names]


def test_needed_tools_are_shown_even_over_the_budget(read_task: Blueprint) -> None:
    bp = _blueprint(read_task, "get_weather")
    shown = fit_tools(bp, TOOLS, context_tokens=512, share=0.01)
    assert [t.name for t in shown] == ["get_weather"]  # no room for a distractor


async def test_an_episode_shows_the_model_only_the_fitted_tools(
    read_task: Blueprint, tmp_path: Path
) -> None:
    """The shop's 13 real tools in a 2,048-token context: the request and the stored
    trajectory carry the path's tool plus distractors, and the rollout still passes."""
    from trajsynth.mcp_servers.registry import get_cluster

    shop = get_cluster("shop")
    shown = fit_tools(read_task, shop.tools, context_tokens=2048)
    needed = {s.tool for s in read_task.tool_path}
    assert needed <= {t.name for t in shown} and len(shown) < len(shop.tools)
    gold = read_task.gold_run.calls[0]
    values = next(c for c in read_task.constraints if isinstance(c, AnswerContains)).values
    fake = ScriptedLLM(
        [
            tool_call(gold.tool, gold.arguments),
            say("Here you go: " + ", ".join(str(v) for v in values) + "."),
            say("Thanks! ###STOP###"),
        ]
    )
    config = LLMConfig(base_url="http://fake/v1", max_retries=0)
    client = OpenAILLMClient(config, http_client=httpx.AsyncClient(transport=fake.transport))
    async with InProcessShop("shop", tmp_path, seed=read_task.seed) as env:
        result = await run_episode(
            blueprint=read_task, env=env, llm=client, assistant=Assistant(),
            user_sim=UserSimulator(), budgets=Budgets(), run_id="run_ctx", shown=shown,
        )  # fmt: skip
    fake.assert_consumed()
    sent = [t["function"]["name"] for t in fake.requests[0]["tools"]]
    assert sent == [t.name for t in shown]
    assert [t["function"]["name"] for t in result.trajectory.tools] == sent
    assert verify(result.trajectory, read_task.constraints, result.final_state).passed


async def test_a_call_to_a_tool_not_shown_is_a_model_failure(
    read_task: Blueprint, tmp_path: Path
) -> None:
    from trajsynth.mcp_servers.registry import get_cluster

    shop = get_cluster("shop")
    shown = fit_tools(read_task, shop.tools, context_tokens=2048, distractors=0)
    hidden = next(t for t in shop.tools if t not in shown)
    fake = ScriptedLLM([tool_call(hidden.name, {}), say("Sorry."), say("Bye ###STOP###")])
    config = LLMConfig(base_url="http://fake/v1", max_retries=0)
    client = OpenAILLMClient(config, http_client=httpx.AsyncClient(transport=fake.transport))
    async with InProcessShop("shop", tmp_path, seed=read_task.seed) as env:
        result = await run_episode(
            blueprint=read_task, env=env, llm=client, assistant=Assistant(),
            user_sim=UserSimulator(), budgets=Budgets(), run_id="run_ctx", shown=shown,
        )  # fmt: skip
    [call] = result.trajectory.calls
    assert call.failure_class is FailureClass.MODEL and "unknown" in call.observation.lower()


@pytest.mark.slow
def test_the_real_embedder_picks_same_topic_distractors(read_task: Blueprint) -> None:
    bp = _blueprint(read_task, "list_invoice", "update_invoice")
    shown = shown_tools(bp, TOOLS, context_tokens=2048)
    assert shown is not None
    names = {t.name for t in shown}
    assert {"list_invoice", "update_invoice"} <= names
    assert sum(n.endswith("_invoice") for n in names) >= 4  # nearest by MiniLM: invoices
