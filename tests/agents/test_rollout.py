"""The rollout loop with the scripted fake LLM and the shop cluster's real tools in-process.

A planned blueprint is acted out, then judged by the real verifier: what is asserted is the
stored behaviour (verdict, failure class, termination), not which calls were made.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from fakes.llm import ScriptedLLM, say, tool_call
from fakes.shop import InProcessShop, plan_shop_task

from trajsynth.agents.assistant import Assistant
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
    Termination,
)


def _client(fake: ScriptedLLM) -> OpenAILLMClient:
    config = LLMConfig(base_url="http://fake/v1", max_retries=0, logprobs=True)
    return OpenAILLMClient(config, http_client=httpx.AsyncClient(transport=fake.transport))


@pytest.fixture
async def read_task(tmp_path: Path) -> Blueprint:
    return await plan_shop_task(
        tmp_path, lambda bp: any(isinstance(c, AnswerContains) for c in bp.constraints)
    )


def _gold_call(bp: Blueprint) -> Any:
    gold = bp.gold_run.calls[0]
    return tool_call(gold.tool, gold.arguments)


def _answer(bp: Blueprint) -> str:
    values = next(c for c in bp.constraints if isinstance(c, AnswerContains)).values
    return "Here you go: " + ", ".join(str(v) for v in values) + "."


# the simulator as it was before resampling: a reply that fails the checks ends the rollout
STRICT_USER = UserSimulator(resamples=0, scripted_fallback=False)


async def _run(
    bp: Blueprint,
    fake: ScriptedLLM,
    tmp_path: Path,
    user_sim: UserSimulator | None = None,
    **budget: Any,
):
    async with InProcessShop("shop", tmp_path, seed=bp.seed) as env:
        return await run_episode(
            blueprint=bp,
            env=env,
            llm=_client(fake),
            assistant=Assistant(),
            user_sim=user_sim or UserSimulator(),
            budgets=Budgets(**budget),
            run_id="run_test",
        )


async def test_a_correct_rollout_passes_verification(read_task: Blueprint, tmp_path: Path) -> None:
    fake = ScriptedLLM([_gold_call(read_task), say(_answer(read_task)), say("Thanks! ###STOP###")])
    result = await _run(read_task, fake, tmp_path)
    fake.assert_consumed()
    traj = result.trajectory
    assert traj.termination is Termination.USER_STOP
    assert [c.tool for c in traj.calls] == [read_task.gold_run.calls[0].tool]
    verdict = verify(traj, read_task.constraints, result.final_state)
    assert verdict.passed and verdict.score == pytest.approx(1.0)
    # the request carried the tools, and every node records role-tagged usage
    assert fake.requests[0]["tools"][0]["type"] == "function"
    roles = {u.role.value for n in result.nodes for u in n.usage}
    assert roles == {"assistant", "user"}
    assert result.nodes[1].step_entropy is not None  # logprobs became a step entropy
    assert (
        result.nodes[0].parent_id is None and result.nodes[1].parent_id == result.nodes[0].node_id
    )


async def test_malformed_call_is_a_recorded_model_failure(
    read_task: Blueprint, tmp_path: Path
) -> None:
    gold = read_task.gold_run.calls[0]
    fake = ScriptedLLM(
        [
            tool_call(gold.tool, '{"query": ', raw=True),
            tool_call("no_such_tool", {}),
            say("I could not find it."),
            say("ok ###STOP###"),
        ]
    )
    result = await _run(read_task, fake, tmp_path)
    calls = result.trajectory.calls
    assert [c.error_type for c in calls] == ["invalid_json", "unknown_tool"]
    assert all(c.failure_class is FailureClass.MODEL for c in calls)
    assert calls[0].raw_arguments == '{"query": '  # the raw output is kept
    tool_msgs = [m for m in result.trajectory.messages if m.role.value == "tool"]
    assert tool_msgs[0].content.startswith("Error: arguments are not valid JSON")
    assert not verify(result.trajectory, read_task.constraints, result.final_state).passed


async def test_llm_timeout_is_infra_and_excluded(read_task: Blueprint, tmp_path: Path) -> None:
    fake = ScriptedLLM([httpx.ReadTimeout("scripted")])
    result = await _run(read_task, fake, tmp_path)
    traj = result.trajectory
    assert traj.termination is Termination.INFRA_ERROR
    assert traj.failure_class is FailureClass.INFRA
    assert result.final_state is None


async def test_simulator_speaking_as_assistant_ends_with_simulator_class(
    read_task: Blueprint, tmp_path: Path
) -> None:
    fake = ScriptedLLM([say("How can I help?"), say("Assistant: I will look that up for you.")])
    result = await _run(read_task, fake, tmp_path, STRICT_USER)
    assert result.trajectory.termination is Termination.SIMULATOR_ERROR
    assert result.trajectory.failure_class is FailureClass.SIMULATOR
    assert verify(result.trajectory, read_task.constraints, result.final_state).excluded


async def test_tool_budget_is_never_exceeded(read_task: Blueprint, tmp_path: Path) -> None:
    call = _gold_call(read_task)
    fake = ScriptedLLM([call, call, call])
    result = await _run(read_task, fake, tmp_path, max_tool_calls=2)
    assert len(result.trajectory.calls) == 2
    assert result.trajectory.termination is Termination.TOOL_BUDGET


async def test_same_script_gives_same_ids(read_task: Blueprint, tmp_path: Path) -> None:
    def script() -> ScriptedLLM:
        return ScriptedLLM(
            [_gold_call(read_task), say(_answer(read_task)), say("Thanks ###STOP###")]
        )

    a = await _run(read_task, script(), tmp_path / "a")
    b = await _run(read_task, script(), tmp_path / "b")
    assert a.trajectory.trajectory_id == b.trajectory.trajectory_id
    assert [n.node_id for n in a.nodes] == [n.node_id for n in b.nodes]
    assert json.loads(a.trajectory.model_dump_json())["wall_s"] >= 0


async def test_simulator_echoing_the_assistant_is_a_role_break(
    read_task: Blueprint, tmp_path: Path
) -> None:
    text = "The lowest fare for this route on that date is 157.69 dollars in economy."
    fake = ScriptedLLM([say(text), say(text)])
    result = await _run(read_task, fake, tmp_path, STRICT_USER)
    assert result.trajectory.failure_class is FailureClass.SIMULATOR
    assert "echoed" in (result.trajectory.failure_detail or "")


# --- a user turn that fails the checks is drawn again, then scripted ----------

ECHOED = "The lowest fare for this route on that date is 157.69 dollars in economy."


def _user_requests(fake: ScriptedLLM) -> list[dict[str, Any]]:
    return [r for r in fake.requests if "tools" not in r]


async def test_an_echoing_user_turn_is_drawn_again(read_task: Blueprint, tmp_path: Path) -> None:
    fake = ScriptedLLM(
        [say(ECHOED), say(ECHOED), say(ECHOED), say("That is not what I asked. ###STOP###")]
    )
    result = await _run(read_task, fake, tmp_path)
    fake.assert_consumed()
    traj = result.trajectory
    assert traj.failure_class is None and traj.termination is Termination.USER_STOP
    assert (traj.user_resamples, traj.user_scripted) == (2, 0)
    draws = _user_requests(fake)
    assert len({(r.get("seed"), r.get("temperature")) for r in draws}) == 3  # each draw differs
    assert traj.messages[-1].content == "That is not what I asked."
    # the failed draws are paid for (user role), and only the kept one is in the dialogue
    assert sum(u.calls for u in traj.usage if u.role.value == "user") == 3
    assert not verify(traj, read_task.constraints, result.final_state).excluded


async def test_a_user_that_always_echoes_gets_a_scripted_turn(
    read_task: Blueprint, tmp_path: Path
) -> None:
    user = UserSimulator(resamples=2)
    fake = ScriptedLLM(
        [say(ECHOED), say(ECHOED), say(ECHOED), say(ECHOED)]
        + [_gold_call(read_task), say(_answer(read_task)), say("Thanks! ###STOP###")]
    )
    result = await _run(read_task, fake, tmp_path, user)
    fake.assert_consumed()
    traj = result.trajectory
    assert traj.failure_class is None and traj.termination is Termination.USER_STOP
    assert (traj.user_resamples, traj.user_scripted) == (2, 1)
    scripted = traj.messages[3]
    assert scripted.role.value == "user" and scripted.content
    assert ECHOED not in scripted.content
    for value in read_task.hidden_info.values():  # nothing was asked: nothing revealed
        assert str(value).lower() not in scripted.content.lower()
    assert verify(traj, read_task.constraints, result.final_state).passed


RAMBLE = "That is a lovely story about the shop, tell me more about the weather there."


async def test_a_user_that_never_stops_rambles_to_the_turn_budget(
    read_task: Blueprint, tmp_path: Path
) -> None:
    # the control for stop_when_met: a small user model that never writes the marker, and an
    # assistant that answers the ramble by asking the tool again
    fake = ScriptedLLM([_gold_call(read_task), say(_answer(read_task)), say(RAMBLE)] * 2)
    result = await _run(read_task, fake, tmp_path, max_turns=4)
    fake.steps.pop()  # the last answer used the turn budget: no user turn was drawn after it
    fake.assert_consumed()
    traj = result.trajectory
    assert traj.termination is Termination.MAX_TURNS and traj.messages[-1].role.value == "assistant"
    verdict = verify(traj, read_task.constraints, result.final_state)
    assert not verdict.passed
    assert [h.check for h in verdict.hygiene if not h.passed] == [
        "no_redundant_call", "unique_call_ids"
    ]  # fmt: skip


async def test_an_answer_on_the_last_turn_ends_the_dialogue_without_a_user_draw(
    read_task: Blueprint, tmp_path: Path
) -> None:
    """A user turn after the last answer the budget allows could never be answered: it is not
    drawn, and the dialogue is judged on the assistant's words (formerly it ended on the
    user's turn, unanswered, and failed whatever the answer was)."""
    fake = ScriptedLLM([_gold_call(read_task), say(_answer(read_task))])
    result = await _run(read_task, fake, tmp_path, max_turns=2)
    fake.assert_consumed()
    traj = result.trajectory
    assert traj.termination is Termination.MAX_TURNS and traj.messages[-1].role.value == "assistant"
    assert verify(traj, read_task.constraints, result.final_state).passed
    # the control: a wrong last answer is judged as wrong
    fake = ScriptedLLM([_gold_call(read_task), say("I could not find anything, sorry.")])
    result = await _run(read_task, fake, tmp_path, max_turns=2)
    assert not verify(result.trajectory, read_task.constraints, result.final_state).passed


async def test_a_user_stops_when_served_without_a_draw(
    read_task: Blueprint, tmp_path: Path
) -> None:
    fake = ScriptedLLM([_gold_call(read_task), say(_answer(read_task))])
    result = await _run(read_task, fake, tmp_path, UserSimulator(stop_when_met=True))
    fake.assert_consumed()  # no user draw was asked for
    traj = result.trajectory
    assert traj.termination is Termination.USER_STOP and traj.user_scripted == 1
    assert verify(traj, read_task.constraints, result.final_state).passed


async def test_a_wrong_answer_does_not_stop_the_user(read_task: Blueprint, tmp_path: Path) -> None:
    fake = ScriptedLLM(
        [_gold_call(read_task), say("I could not find anything, sorry."), say(RAMBLE)] * 2
    )
    result = await _run(read_task, fake, tmp_path, UserSimulator(stop_when_met=True), max_turns=4)
    traj = result.trajectory
    assert traj.termination is Termination.MAX_TURNS and traj.user_scripted == 0
    assert not verify(traj, read_task.constraints, result.final_state).passed


async def test_a_scripted_user_stops_once_the_goal_looks_met(
    read_task: Blueprint, tmp_path: Path
) -> None:
    # the answer is given, then the simulator parrots it: formerly an excluded trajectory
    # whose verdict passed; now the scripted user thanks and stops
    answer = _answer(read_task) + " It is the cheapest option available on that day for you."
    fake = ScriptedLLM([_gold_call(read_task), say(answer)] + [say(answer)] * 4)
    result = await _run(read_task, fake, tmp_path)
    fake.assert_consumed()
    traj = result.trajectory
    assert traj.termination is Termination.USER_STOP and traj.failure_class is None
    assert (traj.user_resamples, traj.user_scripted) == (3, 1)
    assert "###STOP###" not in (traj.messages[-1].content or "")
    verdict = verify(traj, read_task.constraints, result.final_state)
    assert verdict.passed and not verdict.excluded


async def test_without_the_fallback_every_failed_draw_is_a_simulator_failure(
    read_task: Blueprint, tmp_path: Path
) -> None:
    fake = ScriptedLLM([say(ECHOED), say(ECHOED), say(ECHOED)])
    user = UserSimulator(resamples=1, scripted_fallback=False)
    result = await _run(read_task, fake, tmp_path, user)
    fake.assert_consumed()
    traj = result.trajectory
    assert traj.failure_class is FailureClass.SIMULATOR and traj.user_resamples == 1
    assert "echoed" in (traj.failure_detail or "")
