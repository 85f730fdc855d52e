"""The GRPO reward: verifier on a live environment per completion; parity with curation."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from fakes.inprocess_env import InProcessEnvironment

from trajsynth.agents.rollout import _execute
from trajsynth.curation.verify import verify
from trajsynth.mcp_servers.registry import get_cluster
from trajsynth.planning.planner import Planner, plan_blueprint
from trajsynth.planning.rl_tasks import blueprint_row
from trajsynth.schemas import (
    AnswerContains,
    Blueprint,
    Cell,
    Difficulty,
    EnvSpec,
    FunctionCall,
    MCPServerError,
    Message,
    MessageRole,
    PathShape,
    ReasoningMode,
    SandboxKind,
    Termination,
    ToolCall,
    Trajectory,
)
from trajsynth.training.rewards import VerifierReward, completion_trajectory
from trajsynth.training.tasks import trl_dataset
from trajsynth.training.tool_env import environment_class, sandbox_opener

pytestmark = pytest.mark.alone  # torch or transformers: every core


class _Live(InProcessEnvironment):
    """The in-process bundled server with the rest of the Environment interface."""

    def __init__(self, *a: Any, fail_on: str | None = None, **k: Any) -> None:
        super().__init__(*a, **k)
        self.fail_on = fail_on

    async def call_tool(self, name: str, arguments: Any) -> Any:
        if name == self.fail_on:
            raise MCPServerError(f"{name}: the server closed the connection; restarted")
        return await super().call_tool(name, arguments)

    async def run_check(self, check_id: str, source: str) -> bool:
        return True

    async def close(self) -> None:
        self.closed = True


def _opener(tmp_path: Path, opened: list[_Live], fail_on: str | None = None) -> Any:
    async def opener(cluster: Any, spec: EnvSpec) -> _Live:
        env = _Live(cluster.cluster_id, tmp_path, seed=spec.seed, fail_on=fail_on)
        await env.start()
        opened.append(env)
        return env

    return opener


@pytest.fixture(scope="module")
def shop_blueprint(tmp_path_factory: pytest.TempPathFactory) -> Blueprint:
    """One planned shop task (gold path, template words), shared by the tests here."""
    tmp_path = tmp_path_factory.mktemp("plan")
    cluster = get_cluster("shop")
    cell = Cell(
        cluster_id="shop",
        path_shape=PathShape("single"),
        target_mode=ReasoningMode("direct_execute"),
        difficulty=Difficulty("easy"),
    )
    bp = asyncio.run(
        plan_blueprint(
            Planner(use_llm=False),
            None,
            lambda: InProcessEnvironment("shop", tmp_path),
            cluster,
            cell,
            3,
        )
    )
    assert isinstance(bp, Blueprint), bp
    return bp


def _answer(bp: Blueprint) -> str:
    values = [v for c in bp.constraints if isinstance(c, AnswerContains) for v in c.values]
    return "Done. " + ", ".join(str(v) for v in values)


def _stored_trajectory(bp: Blueprint, tmp_path: Path) -> tuple[Trajectory, float]:
    """What the rollout loop stores for the gold path, and the curation verdict's score."""
    cluster = get_cluster("shop")
    tools = {t.name: t for t in cluster.tools}

    async def run() -> tuple[Trajectory, float]:
        env = _Live("shop", tmp_path, seed=0)
        await env.start()
        row = blueprint_row(bp, cluster)
        messages = list(row.prompt)
        records = []
        for turn, gold in enumerate(bp.gold_run.calls):
            call = ToolCall(
                id=f"c{turn}",
                function=FunctionCall(name=gold.tool, arguments=json.dumps(gold.arguments)),
            )
            messages.append(Message(role=MessageRole.ASSISTANT, tool_calls=[call]))
            record = await _execute(env, call, tools, turn)
            records.append(record)
            messages.append(
                Message(role=MessageRole.TOOL, content=record.observation, tool_call_id=call.id)
            )
        answer = _answer(bp)
        messages.append(Message(role=MessageRole.ASSISTANT, content=answer))
        trajectory = Trajectory(
            trajectory_id="t-gold",
            run_id="r",
            blueprint_id=bp.blueprint_id,
            tree_id="tree",
            leaf_node_id="leaf",
            cluster_id="shop",
            messages=messages,
            tools=[t.to_openai() for t in cluster.tools],
            calls=records,
            final_answer=answer,
            termination=Termination.ASSISTANT_DONE,
        )
        verdict = verify(trajectory, bp.constraints, await env.state())
        return trajectory, verdict.score

    return asyncio.run(run())


def _completion(trajectory: Trajectory) -> list[dict[str, Any]]:
    """The stored assistant/tool turns as TRL hands a completion to the reward."""
    out: list[dict[str, Any]] = []
    for m in trajectory.messages[2:]:
        if m.role is MessageRole.ASSISTANT:
            calls = [
                {
                    "type": "function",
                    "function": {
                        "name": c.function.name,
                        "arguments": json.loads(c.function.arguments),
                    },
                }
                for c in m.tool_calls or []
            ]
            out.append({"role": "assistant", "content": m.content or "", "tool_calls": calls})
        else:
            out.append({"role": "tool", "name": "", "content": m.content})
    return out


def _run_completion(env: Any, completion: list[dict[str, Any]]) -> None:
    """Play the completion's tool calls against the environment, as TRL's tool loop does."""
    for message in completion:
        for call in message.get("tool_calls") or []:
            getattr(env, call["function"]["name"])(**call["function"]["arguments"])


@pytest.mark.slow
def test_reward_parity_with_the_curation_verdict(tmp_path: Path, shop_blueprint: Blueprint) -> None:
    bp = shop_blueprint
    stored, score = _stored_trajectory(bp, tmp_path)
    assert score == 1.0  # the gold path passes
    cluster = get_cluster("shop")
    row = trl_dataset([blueprint_row(bp, cluster)])[0]
    opened: list[_Live] = []
    env_cls = environment_class(cluster, _opener(tmp_path, opened))
    good, bad = env_cls(), env_cls()
    good.reset(**{k: v for k, v in row.items() if k != "environment"})
    bad.reset(**{k: v for k, v in row.items() if k != "environment"})
    completion = _completion(stored)
    _run_completion(good, completion)
    wrong = [{"role": "assistant", "content": "I cannot help with that.", "tool_calls": []}]
    reward = VerifierReward()
    prompts = [row["prompt"], row["prompt"]]
    got = reward(prompts, [completion, wrong], environments=[good, bad])
    assert got[0] == score
    rebuilt = completion_trajectory(row["prompt"], completion, good)
    assert [c.tool for c in rebuilt.calls] == [c.tool for c in stored.calls]
    assert [c.turn for c in rebuilt.calls] == list(range(len(stored.calls)))
    bad_verdict = reward.last_verdicts[1]
    assert bad_verdict is not None and got[1] == bad_verdict.score < score
    assert len(opened) == 2 and all(e.closed for e in opened)  # one env each, closed
    assert opened[0].workdir != opened[1].workdir


@pytest.mark.slow
def test_unshaped_reward_is_the_verdict(tmp_path: Path, shop_blueprint: Blueprint) -> None:
    bp = shop_blueprint
    cluster = get_cluster("shop")
    row = trl_dataset([blueprint_row(bp, cluster)])[0]
    env = environment_class(cluster, _opener(tmp_path, []))()
    env.reset(**row)
    got = VerifierReward(shaped=False)(
        [row["prompt"]], [[{"role": "assistant", "content": "no"}]], environments=[env]
    )
    assert got == [0.0]


@pytest.mark.slow
def test_an_infra_fault_gives_no_reward_not_zero(tmp_path: Path, shop_blueprint: Blueprint) -> None:
    bp = shop_blueprint
    cluster = get_cluster("shop")
    row = trl_dataset([blueprint_row(bp, cluster)])[0]
    first = bp.gold_run.calls[0]
    env = environment_class(cluster, _opener(tmp_path, [], fail_on=first.tool))()
    env.reset(**row)
    text = getattr(env, first.tool)(**first.arguments)
    assert text.startswith("Error:")
    assert env.calls[0].failure_class == "infra"
    completion = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": first.tool, "arguments": first.arguments}}
            ],
        },
        {"role": "tool", "name": first.tool, "content": text},
        {"role": "assistant", "content": _answer(bp)},
    ]
    assert VerifierReward()([row["prompt"]], [completion], environments=[env]) == [None]


def test_an_environment_that_cannot_open_gives_no_reward(tmp_path: Path) -> None:
    async def broken(cluster: Any, spec: EnvSpec) -> Any:
        raise MCPServerError("the sandbox did not start")

    cluster = get_cluster("shop")
    env = environment_class(cluster, broken)()
    env.reset(env={"cluster_id": "shop", "seed": 0, "initial_state_id": "x"}, constraints=[])
    assert env.search_products(query="mug").startswith("Error:")
    got = VerifierReward()([[]], [[{"role": "assistant", "content": "hi"}]], environments=[env])
    assert got == [None]


def test_bad_arguments_are_model_failures_the_policy_sees(tmp_path: Path) -> None:
    cluster = get_cluster("shop")
    env = environment_class(cluster, _opener(tmp_path, []))()
    env.reset(env={"cluster_id": "shop", "seed": 0, "initial_state_id": "x"}, constraints=[])
    text = env.search_products(nonsense=3)
    assert text.startswith("Error:")
    assert env.calls[0].failure_class == "model"
    assert env.calls[0].error_type == "schema_violation"
    with pytest.raises(ValueError, match="reserved"):
        environment_class(
            cluster.model_copy(
                update={"tools": [cluster.tools[0].model_copy(update={"name": "reset"})]}
            ),
            _opener(tmp_path, []),
        )


@pytest.mark.docker
def test_reward_parity_in_a_real_docker_sandbox(tmp_path: Path, shop_blueprint: Blueprint) -> None:
    bp = shop_blueprint
    stored, score = _stored_trajectory(bp, tmp_path)
    cluster = get_cluster("shop")
    row = trl_dataset([blueprint_row(bp, cluster)])[0]
    env = environment_class(cluster, sandbox_opener(SandboxKind.DOCKER))()
    env.reset(**row)
    completion = _completion(stored)
    _run_completion(env, completion)
    assert VerifierReward()([row["prompt"]], [completion], environments=[env]) == [score]
