"""Fitting an episode's tools into the model's context: a generated 36-tool
cluster and the shop's real tools with the scripted fake LLM; the real embedder and a real
36-tool MCP server in the slow tier."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
import pytest
from fakes.llm import ScriptedLLM, say, tool_call
from fakes.shop import InProcessShop, plan_shop_task

from trajsynth.agents.assistant import Assistant
from trajsynth.agents.context import fit_tools, shown_tools, tool_budget, tool_tokens
from trajsynth.agents.rollout import run_episode
from trajsynth.agents.user_sim import UserSimulator
from trajsynth.curation.verify import verify
from trajsynth.llm.client import OpenAILLMClient
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


def test_a_fixed_view_lists_the_needed_tools_and_n_nearest_even_when_all_fit(
    read_task: Blueprint,
) -> None:
    """``LLMConfig.distractors``: training rows and evals list the same short view."""
    bp = _blueprint(read_task, "list_invoice")
    total = sum(map(tool_tokens, TOOLS))
    for context in (None, 2 * total + 2):  # unknown, and large enough for every tool
        shown = fit_tools(bp, TOOLS, context_tokens=context, distractors=2, always=True)
        names = [t.name for t in shown]
        assert len(names) == 3 and "list_invoice" in names
        assert all(n.endswith("_invoice") for n in names)
    # no distractor at all: the needed tools alone
    only = fit_tools(bp, TOOLS, context_tokens=None, distractors=0, always=True)
    assert [t.name for t in only] == ["list_invoice"]
    # a view as large as the whole set is no view: every tool, as without the option
    assert shown_tools(bp, TOOLS, context_tokens=None, distractors=len(TOOLS)) is None


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


# A generated server of 36 tools (six record kinds, six verbs each) on the real MCP SDK: the
# cluster is too large for a 2,048-token context, so every episode shows a subset.
MANY_TOOLS_SERVER = """
import json, pathlib
from mcp.server.mcpserver import MCPServer

server = MCPServer("office")
KINDS = {KINDS!r}
DB = pathlib.Path("office.json")

def load():
    # one record per kind to start with: the planner binds values the server's reads return
    if DB.exists():
        return json.loads(DB.read_text())
    return {{k: {{f"{{k}}-1": f"first {{k}}"}} for k in KINDS}}

def save(db):
    DB.write_text(json.dumps(db))

def register(kind, about):
    def create(title: str) -> str:
        db = load(); key = f"{{kind}}-{{len(db[kind]) + 1}}"; db[kind][key] = title; save(db)
        return json.dumps({{"id": key, "title": title}})
    def get(id: str) -> str:
        db = load()
        if id not in db[kind]:
            raise ValueError(f"no {{kind}} {{id}}")
        return json.dumps({{"id": id, "title": db[kind][id]}})
    def list_() -> str:
        return json.dumps({{"items": [{{"id": k, "title": v}} for k, v in load()[kind].items()]}})
    def update(id: str, title: str) -> str:
        db = load()
        if id not in db[kind]:
            raise ValueError(f"no {{kind}} {{id}}")
        db[kind][id] = title; save(db)
        return json.dumps({{"id": id, "title": title}})
    def delete(id: str) -> str:
        db = load()
        if db[kind].pop(id, None) is None:
            raise ValueError(f"no {{kind}} {{id}}")
        save(db)
        return json.dumps({{"deleted": id}})
    def search(query: str) -> str:
        hits = [{{"id": k, "title": v}} for k, v in load()[kind].items() if query in v]
        return json.dumps({{"items": hits}})
    for verb, fn in (("create", create), ("get", get), ("list", list_), ("update", update),
                     ("delete", delete), ("search", search)):
        server.tool(name=f"{{verb}}_{{kind}}", description=f"{{verb.capitalize()}} {{about}}.")(fn)

for kind, about in KINDS.items():
    register(kind, about)
server.run()
"""


@pytest.mark.slow
async def test_a_36_tool_server_fits_a_small_context_end_to_end(tmp_path: Path) -> None:
    """A real 36-tool MCP server joined as an outside cluster, a blueprint planned in the
    sandbox, and a unit grown as ``synth run`` grows it with a 2,048-token embedded context
    (the fake LLM over HTTP in the model's seat): the stored trajectory lists the path's tools
    and a few distractors, not all 36, and the fake LLM was sent exactly those."""
    from fakes.llm_server import FakeLLMServer

    from trajsynth.flows.units import grow_unit
    from trajsynth.mcp_servers.registry import add_outside_cluster
    from trajsynth.planning.planner import Planner, environment_factory, plan_blueprint
    from trajsynth.schemas import Cell, Difficulty, PathShape, ReasoningMode, RolloutMode, RunConfig

    tmp_path.chmod(0o755)  # the sandbox's unprivileged user reads the server, as in a venv
    script = tmp_path / "office_server.py"
    script.write_text(MANY_TOOLS_SERVER.format(KINDS=FAMILIES))
    import mcp

    # the venv the SDK lives in (a worktree's venv can layer on another) is mounted read-only
    sdk_venv = Path(mcp.__file__).resolve().parents[4]
    [cluster] = add_outside_cluster(
        "office", command=[sys.executable, str(script)], clusters_dir=tmp_path / "c",
        sandbox_kind="local", mounts=[str(sdk_venv)],
    )  # fmt: skip
    assert len(cluster.tools) == 36
    cell = Cell(
        cluster_id="office", path_shape=PathShape.SINGLE,
        target_mode=ReasoningMode.DIRECT_EXECUTE, difficulty=Difficulty.EASY,
    )  # fmt: skip
    factory = environment_factory(cluster, sandbox_kind="local")
    blueprint = None
    for seed in range(6):
        planned = await plan_blueprint(Planner(use_llm=False), None, factory, cluster, cell, seed)
        if isinstance(planned, Blueprint):
            blueprint = planned
            break
    assert blueprint is not None, planned
    config = RunConfig(
        tasks=1, samples=1, rollout_mode=RolloutMode.LINEAR, sandbox="local", sandbox_pool=0,
        llm=LLMConfig(embedded_ctx=2048, max_retries=0),
    )  # fmt: skip
    with FakeLLMServer() as server:
        rows = await grow_unit(
            config=config,
            llm=config.llm.model_copy(update={"base_url": server.base_url}),
            run_id="run_ctx",
            blueprint=blueprint,
            cluster=cluster,
        )
    [trajectory] = rows.rows["trajectories"]
    tools = trajectory.tools
    shown = [
        t["function"]["name"] for t in (json.loads(tools) if isinstance(tools, str) else tools)
    ]
    needed = {s.tool for s in blueprint.tool_path}
    assert needed <= set(shown) and len(shown) <= len(needed) + 4 < 36
    assert sum(tool_tokens(cluster.tool(n)) for n in shown) <= tool_budget(2048)
