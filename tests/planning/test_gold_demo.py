"""A blueprint's gold run replayed into a demonstration that the verifier passes."""

from __future__ import annotations

import asyncio
import random

import pytest

from trajsynth.curation.faithful import named_tool
from trajsynth.curation.verify import verify
from trajsynth.mcp_servers.environment import open_environment
from trajsynth.mcp_servers.registry import get_cluster
from trajsynth.planning.cells import sample_cells
from trajsynth.planning.gold import gold_demonstration, gold_demos, template_answer
from trajsynth.planning.planner import Planner, environment_factory, plan_blueprint
from trajsynth.schemas import (
    AnswerContains,
    Blueprint,
    CallPattern,
    FunctionCall,
    Message,
    MessageRole,
    ObservedField,
    SandboxKind,
    ToolCall,
    ToolCalled,
)


async def _plan(cluster_id: str, seed: int) -> Blueprint:
    cluster = get_cluster(cluster_id)
    rng = random.Random(seed)
    for draw in range(12):
        (cell,) = sample_cells([cluster], 1, rng)
        factory = environment_factory(cluster, sandbox_kind=SandboxKind.LOCAL, seed=seed + draw)
        planned = await plan_blueprint(
            Planner(use_llm=False, gold_retries=2), None, factory, cluster, cell, seed + draw
        )
        if isinstance(planned, Blueprint):
            return planned
    raise AssertionError(f"no {cluster_id} task planned")


async def _demo(bp: Blueprint):
    cluster = get_cluster(bp.cluster_id)
    async with open_environment(cluster, sandbox_kind=SandboxKind.LOCAL, seed=bp.seed) as env:
        return await gold_demonstration(bp, env, run_id="run-gold")


@pytest.mark.slow
@pytest.mark.parametrize("cluster_id", ["shop", "calendar", "travel"])
def test_gold_replay_is_a_verified_demonstration_marked_gold(cluster_id: str) -> None:
    bp = asyncio.run(_plan(cluster_id, 11))
    trajectory, state = asyncio.run(_demo(bp))
    assert trajectory.source == "gold" and trajectory.run_id == "run-gold"
    assert [c.tool for c in trajectory.calls] == [c.tool for c in bp.gold_run.calls]
    # the real results came back from a fresh environment, as in the gold run
    assert all(c.failure_class is None for c in trajectory.calls)
    assert state is not None and state.state_hash == bp.gold_run.final_state.state_hash
    roles = [m.role for m in trajectory.messages]
    assert roles[0] is MessageRole.SYSTEM and roles[1] is MessageRole.USER
    assert MessageRole.TOOL in roles
    assert trajectory.final_answer == template_answer(bp)
    verdict = verify(trajectory, bp.constraints, state)
    assert verdict.passed, [r for r in verdict.results if not r.passed]


@pytest.mark.slow
def test_a_demonstration_lists_the_view_its_rollouts_and_evals_will_show() -> None:
    """``distractors``: the row lists the needed tools plus the N nearest, still verified."""
    bp = asyncio.run(_plan("shop", 11))
    cluster = get_cluster("shop")
    (pair,) = asyncio.run(
        gold_demos([bp], {"shop": cluster}, run_id="run-gold", sandbox_kind=SandboxKind.LOCAL,
                   distractors=2)
    )  # fmt: skip
    trajectory, verdict = pair
    listed = [t["function"]["name"] for t in trajectory.tools]
    needed = {s.tool for s in bp.tool_path}
    assert needed <= set(listed) and len(listed) == len(needed) + 2 < len(cluster.tools)
    assert verdict.passed
    # the cluster's order is kept: where a tool sits never says it is needed
    order = [t.name for t in cluster.tools]
    assert listed == [n for n in order if n in listed]


def test_a_replay_states_its_own_reading_of_a_value_that_changes() -> None:
    """The gold run read the clock at 09:47; a replay reads it again and must say what it read."""
    observed = ObservedField(tool="get_current_time", path=["datetime"])
    bp = Blueprint.model_construct(
        constraints=[AnswerContains(values=["2026-11-26T09:47:50-05:00"], observed=observed)]
    )
    call = ToolCall(id="c1", function=FunctionCall(name="get_current_time", arguments="{}"))
    messages = [
        Message(role=MessageRole.USER, content="What time is it in New York?"),
        Message(role=MessageRole.ASSISTANT, tool_calls=[call]),
        Message(role=MessageRole.TOOL, tool_call_id="c1",
                content='{"datetime": "2026-11-26T09:49:02-05:00"}'),
    ]  # fmt: skip
    # named by the field it was read from, so the answer says what the value is
    assert template_answer(bp, messages) == "The datetime is 2026-11-26T09:49:02-05:00."
    # before any reading (or with none that has the field) the gold run's value stands
    assert template_answer(bp) == "Here is what I found: 2026-11-26T09:47:50-05:00."
    assert template_answer(bp, messages[:1]).endswith("09:47:50-05:00.")


def test_the_template_answer_names_what_was_done_in_words_not_by_the_tool() -> None:
    """server-everything's ``get-sum``: "Done: get-sum went through." names the tool by its
    identifier, which ``answer_informs`` fails, so every such task failed its self-check."""
    done = ToolCalled(call=CallPattern(tool="get-sum", matchers={"a": 3, "b": 4}))
    bp = Blueprint.model_construct(constraints=[done])
    answer = template_answer(bp)
    assert "get-sum" not in answer and "get sum" in answer, answer
    assert named_tool(answer, ["get-sum"]) is None
