"""A rollout tree against the code cluster's real MCP server in a real Docker sandbox: every
branch starts from a restore of its branch point, so siblings never see each other's files."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from fakes.llm import ScriptedLLM, say, tool_call

from trajsynth.agents.assistant import Assistant
from trajsynth.agents.rollout import Episode
from trajsynth.agents.tree import grow_tree
from trajsynth.agents.user_sim import UserSimulator
from trajsynth.llm.client import OpenAILLMClient
from trajsynth.mcp_servers.environment import open_environment
from trajsynth.mcp_servers.registry import get_cluster
from trajsynth.schemas import (
    Blueprint,
    Budgets,
    Cell,
    Difficulty,
    EnvState,
    GoldRun,
    LLMConfig,
    PathShape,
    ReasoningMode,
    SandboxKind,
    SandboxLimits,
    TreeConfig,
)

LOW = (0.97, 0.01, 0.01, 0.005, 0.005)
HIGH = (0.3, 0.25, 0.2, 0.15, 0.1)
STOP = say("Thanks, that is all. ###STOP###")


def _policy(body: dict[str, Any]) -> dict[str, Any]:
    if not body.get("tools"):
        return STOP
    turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
    seed = body.get("seed", 0) % 9973
    if turns == 0:  # the root's samples each write their own file
        return tool_call("write_file", {"path": f"a{seed}.txt", "content": "a"}, probs=LOW)
    if turns == 1:  # uncertain after the first result: the branch writes a second file
        return tool_call("write_file", {"path": f"b{seed}.txt", "content": "b"}, probs=HIGH)
    if turns == 2:
        return tool_call("list_files", {}, probs=LOW)
    return say("Both files are written.", probs=LOW)


@pytest.mark.docker
async def test_sibling_branches_never_see_each_others_writes() -> None:
    cluster = get_cluster("code")
    blueprint = Blueprint(
        blueprint_id="bp_isolation",
        cluster_id="code",
        domain=cluster.domain,
        cell=Cell(
            cluster_id="code",
            path_shape=PathShape.CHAIN,
            target_mode=ReasoningMode.DIRECT_EXECUTE,
            difficulty=Difficulty.EASY,
        ),
        initial_state_id="s0",
        tool_path=[],
        persona="a developer",
        goal="Write two files and show me the folder.",
        gold_run=GoldRun(calls=[], initial_state_hash="s0", final_state=EnvState(state_hash="s0")),
        constraints=[],
        seed=0,
    )
    fake = ScriptedLLM([_policy] * 200)
    llm = OpenAILLMClient(
        LLMConfig(base_url="http://fake/v1", max_retries=0, logprobs=True),
        http_client=httpx.AsyncClient(transport=fake.transport),
    )
    async with open_environment(
        cluster, sandbox_kind=SandboxKind.DOCKER, limits=SandboxLimits(), seed=0
    ) as env:
        episode = Episode(blueprint, env, llm, Assistant(), UserSimulator(), Budgets())
        result, _ = await grow_tree(
            episode, TreeConfig(deterministic=True), leaves=4, run_id="run_t", reply_token_cap=64
        )
    assert len(result.leaves) == 4
    assert sorted(n.n_children for n in result.nodes if n.depth == 1) == [2, 2]
    listings = []
    for traj in result.trajectories:
        written = {c.arguments["path"] for c in traj.calls if c.tool == "write_file"}
        listing = next(c.observation for c in traj.calls if c.tool == "list_files")
        seen = set(re.findall(r"[ab]\d+\.txt", listing))
        assert seen == written, (written, listing)  # its own two files, no sibling's
        listings.append(frozenset(seen))
    assert len(set(listings)) == 4
