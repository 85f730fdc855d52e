"""The optional model judge (``[run.judge]``): a soft score beside the verdict, deciding
``passed`` only when the user sets it to."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from fakes.llm import ScriptedLLM, say
from fakes.llm_server import FakeLLMServer

from trajsynth.agents.judge import judge
from trajsynth.agents.model_judge import judge_trajectories, judge_trajectory, read_score
from trajsynth.llm.client import OpenAILLMClient
from trajsynth.schemas import (
    Blueprint,
    CallPattern,
    EnvState,
    FailureClass,
    FunctionCall,
    JudgeConfig,
    LLMConfig,
    Message,
    MessageRole,
    Termination,
    ToolCall,
    ToolCalled,
    ToolCallRecord,
    Trajectory,
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "delete_file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]
ARGS = json.dumps({"path": "README.md"})
CLEAN = Trajectory(
    trajectory_id="t-clean",
    run_id="r",
    blueprint_id="b",
    tree_id="tr",
    leaf_node_id="n",
    cluster_id="code",
    messages=[
        Message(role=MessageRole.USER, content="Delete README.md."),
        Message(
            role=MessageRole.ASSISTANT,
            tool_calls=[
                ToolCall(id="c1", function=FunctionCall(name="delete_file", arguments=ARGS))
            ],
        ),
        Message(role=MessageRole.TOOL, content='{"deleted": true}', tool_call_id="c1"),
        Message(role=MessageRole.ASSISTANT, content="README.md is deleted."),
    ],
    tools=TOOLS,
    calls=[
        ToolCallRecord(
            call_id="c1",
            tool="delete_file",
            raw_arguments=ARGS,
            arguments={"path": "README.md"},
            observation='{"deleted": true}',
        )  # fmt: skip
    ],
    final_answer="README.md is deleted.",
    termination=Termination.ASSISTANT_DONE,
)
# judge() reads only the blueprint's constraints
BLUEPRINT = Blueprint.model_construct(
    blueprint_id="b",
    constraints=[ToolCalled(call=CallPattern(tool="delete_file", matchers={"path": "README.md"}))],
)
STATE = EnvState(state_hash="s")


def _client(fake: ScriptedLLM) -> OpenAILLMClient:
    config = LLMConfig(base_url="http://fake/v1", model="judge-model", max_retries=0)
    return OpenAILLMClient(config, http_client=httpx.AsyncClient(transport=fake.transport))


def test_read_score() -> None:
    assert read_score("SCORE: 0.25\nThe user was not answered.") == 0.25
    assert read_score("Score = 1 because it is fine") == 1.0
    assert read_score("I would give it a 7/10.") is None
    assert read_score("SCORE: 3") is None  # out of range: no score, never a pass


async def test_the_judge_reads_the_rubric_and_the_transcript_and_scores() -> None:
    fake = ScriptedLLM([say("SCORE: 0.9 - reached, answered, faithful.")])
    config = JudgeConfig(enabled=True, rubric="Judge it. Reply SCORE: x.")
    result = await judge_trajectory(_client(fake), CLEAN, config, model="judge-model")
    fake.assert_consumed()
    assert (result.score, result.accept, result.decides) == (0.9, True, False)
    request = fake.requests[0]
    assert request["messages"][0] == {"role": "system", "content": "Judge it. Reply SCORE: x."}
    body = request["messages"][1]["content"]
    assert "ASSISTANT CALLS delete_file(" in body and "TOOL RESULT" in body
    assert "ASSISTANT: README.md is deleted." in body and "Tools offered: delete_file" in body
    assert "tools" not in request and request["temperature"] == 0.0


async def test_the_judge_decides_passed_only_when_set_to() -> None:
    fake = ScriptedLLM([say("SCORE: 0.2 - the answer is not faithful."), say("SCORE: 0.2")])
    client = _client(fake)
    off = await judge_trajectory(client, CLEAN, JudgeConfig(enabled=True), model="m")
    on = await judge_trajectory(client, CLEAN, JudgeConfig(enabled=True, decides=True), model="m")
    _, alone = judge(BLUEPRINT, CLEAN, STATE, 1)
    _, stored = judge(BLUEPRINT, CLEAN, STATE, 1, {CLEAN.trajectory_id: off})
    _, decided = judge(BLUEPRINT, CLEAN, STATE, 1, {CLEAN.trajectory_id: on})
    assert alone.passed and alone.judge is None
    assert stored.passed and stored.judge == off and stored.score == alone.score
    assert not decided.passed and decided.judge.accept is False
    assert decided.constraints_passed and decided.clean  # what the judge overruled stays


async def test_a_verdict_given_as_the_leaf_ended_is_judged_with_the_model_judge_not_again() -> None:
    """The progress line verified the leaf already: judging the unit adds the model judge's
    result to that verdict instead of verifying the trajectory a second time."""
    fake = ScriptedLLM([say("SCORE: 0.2")])
    on = await judge_trajectory(
        _client(fake), CLEAN, JudgeConfig(enabled=True, decides=True), model="m"
    )
    _, first = judge(BLUEPRINT, CLEAN, STATE, 1)
    marked = first.model_copy(update={"score": 0.123})  # tells the kept verdict apart
    _, kept = judge(BLUEPRINT, CLEAN, STATE, 1, None, {CLEAN.trajectory_id: marked})
    # a verdict kept for another trajectory is not this one's: verified here
    _, judged = judge(BLUEPRINT, CLEAN, STATE, 1, {CLEAN.trajectory_id: on}, {"t-other": marked})
    assert kept == marked
    assert judged.judge == on and judged.results == first.results and not judged.passed


async def test_infra_and_simulator_failures_are_not_judged_and_a_dead_judge_gives_no_pass() -> None:
    fake = ScriptedLLM([httpx.ConnectError("scripted")])
    excluded = CLEAN.model_copy(
        update={"trajectory_id": "t-sim", "failure_class": FailureClass.SIMULATOR}
    )
    config = JudgeConfig(enabled=True, decides=True)
    results = await judge_trajectories(_client(fake), [excluded, CLEAN], config, model="m")
    assert list(results) == ["t-clean"]
    dead = results["t-clean"]
    assert dead.score is None and dead.accept is None and "unavailable" in dead.reason
    _, verdict = judge(BLUEPRINT, CLEAN, STATE, 1, results)
    assert not verdict.passed


@pytest.fixture(scope="module")
def fake_server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


async def test_against_the_fake_llm_server_over_http(fake_server: FakeLLMServer) -> None:
    """Any OpenAI-compatible endpoint: the fake server answers without a score, which is
    stored as such and, when the judge decides, fails the trajectory."""
    config = LLMConfig(base_url=fake_server.base_url, model="fake", max_retries=0)
    async with OpenAILLMClient(config) as client:
        result = await judge_trajectory(
            client, CLEAN, JudgeConfig(enabled=True, decides=True), model="fake"
        )
    assert result.score is None and result.reason.startswith("no SCORE in the answer:")
    _, verdict = judge(BLUEPRINT, CLEAN, STATE, 1, {CLEAN.trajectory_id: result})
    assert verdict.judge == result and not verdict.passed


@pytest.mark.llm
@pytest.mark.slow
async def test_against_the_embedded_llama_cpp_server() -> None:
    """The real embedded SmolLM2 as the judge: a request it answers in words, stored with
    the score it gave or none (a 135M model rarely follows the format)."""
    from trajsynth.llm.embedded import EmbeddedLLMServer

    with EmbeddedLLMServer(startup_timeout_s=300) as server:
        config = LLMConfig(base_url=server.base_url, max_tokens=48, timeout_s=300)
        async with OpenAILLMClient(config) as client:
            result = await judge_trajectory(
                client, CLEAN, JudgeConfig(enabled=True, max_tokens=48), model=config.model
            )
    assert result.model == config.model and result.reason
    assert result.score is None or 0.0 <= result.score <= 1.0
    assert (result.accept is None) == (result.score is None)
