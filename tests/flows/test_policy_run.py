"""`synth run --policy`: the tuned policy answers the assistant's turns on its own server while
the planner and the user simulator keep the run's model.

Fast tier: two fake OpenAI-compatible servers over real HTTP stand in for the run's model and
the policy's llama.cpp server; a unit's client routes each role to one of them, and a rollout
unit grown through it records which model answered each turn. Slow tier: a real
`synth run --policy` on a copy of the embedded GGUF.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from fakes.llm_server import FakeLLMServer
from fakes.shop import SHOP, InProcessShop, plan_shop_task

from trajsynth.flows import units
from trajsynth.flows.build import policy_endpoint
from trajsynth.flows.units import _client, assistant_for, grow_unit
from trajsynth.schemas import (
    AgentRole,
    LLMConfig,
    Message,
    MessageRole,
    PolicyRef,
    RolloutMode,
    RunConfig,
    SandboxKind,
)
from trajsynth.store import Store
from trajsynth.store.manifest import run_manifest

POLICY = PolicyRef(path="/m/model.f16.gguf", gguf="/m/model.f16.gguf", model_id="model_abc")


@pytest.fixture
def servers() -> Iterator[tuple[FakeLLMServer, FakeLLMServer]]:
    with (
        FakeLLMServer(model="fake") as base,
        FakeLLMServer(model="policy:model_abc") as policy,
    ):
        yield base, policy


def test_a_run_without_a_policy_keeps_its_id_and_a_policy_changes_it() -> None:
    plain = RunConfig(tasks=2)
    tuned = plain.model_copy(update={"policy": POLICY})
    assert "policy" not in plain.model_dump(mode="json", exclude_none=True)
    assert tuned.config_hash() != plain.config_hash()  # a policy run never resumes a base run
    other = tuned.model_copy(update={"policy": POLICY.model_copy(update={"model_id": "m2"})})
    assert other.config_hash() != tuned.config_hash()
    manifest = run_manifest(tuned, clusters=["shop"])
    assert manifest["policy"]["model_id"] == "model_abc"
    assert run_manifest(plain, clusters=["shop"])["policy"] is None


def test_the_policy_server_is_asked_under_the_policy_name_with_the_runs_sampling() -> None:
    config = RunConfig(policy=POLICY, llm=LLMConfig(temperature=0.9, base_url="http://x/v1"))
    endpoint = policy_endpoint(config, config.llm)
    assert endpoint.model == "policy:model_abc" and endpoint.temperature == 0.9
    assert endpoint.base_url is None  # its own embedded server, not the run's endpoint
    # a tuned policy, served in the layout it was trained in, decides at every turn
    assistant = assistant_for(config)
    assert (assistant.tool_choice_after_user, assistant.tool_choice_after_tool) == (
        "auto",
        "auto",
    )
    base = assistant_for(RunConfig())
    assert base.tool_choice_after_tool == "none"  # the embedded base model is unchanged


def test_each_role_goes_to_its_own_server(servers: tuple[FakeLLMServer, FakeLLMServer]) -> None:
    base, policy = servers
    run_llm = LLMConfig(base_url=base.base_url, model="fake", max_retries=0)
    policy_llm = LLMConfig(base_url=policy.base_url, model="policy:model_abc", max_retries=0)
    said = [Message(role=MessageRole.USER, content="Find me a red mug.")]

    async def ask() -> tuple[str, str]:
        async with _client(run_llm, None, None, policy_llm) as client:
            a = await client.chat(said, role=AgentRole.ASSISTANT)
            u = await client.chat(said, role=AgentRole.USER)
        return a.usage.model, u.usage.model

    assistant_model, user_model = asyncio.run(ask())
    assert (assistant_model, user_model) == ("policy:model_abc", "fake")
    assert (policy.requests, base.requests) == (1, 1)


def test_a_rollout_unit_records_the_policy_as_the_assistants_model(
    servers: tuple[FakeLLMServer, FakeLLMServer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, policy = servers
    task = asyncio.run(plan_shop_task(tmp_path))

    @contextlib.asynccontextmanager
    async def in_process(*args: object, **kwargs: object) -> AsyncIterator[InProcessShop]:
        async with InProcessShop("shop", tmp_path, seed=task.seed) as env:
            yield env

    monkeypatch.setattr(units, "open_environment", in_process)  # no sandbox in the fast tier
    config = RunConfig(
        tasks=1,
        samples=1,
        rollout_mode=RolloutMode.LINEAR,
        sandbox=SandboxKind.LOCAL,
        sandbox_pool=0,
        llm=LLMConfig(base_url=base.base_url, model="fake"),
        policy=POLICY,
    )
    policy_llm = LLMConfig(base_url=policy.base_url, model="policy:model_abc")
    unit = asyncio.run(
        grow_unit(
            config=config,
            llm=config.llm,
            run_id="run_policy",
            blueprint=task,
            cluster=SHOP,
            policy_llm=policy_llm,
        )
    )
    calls = unit.rows["llm_calls"]
    by_role = {(c.role, c.model) for c in calls}
    assert ("assistant", "policy:model_abc") in by_role
    assert all(model == "policy:model_abc" for role, model in by_role if role == "assistant")
    assert all(model == "fake" for role, model in by_role if role != "assistant")
    assert policy.requests >= 1
    assert len(unit.rows["trajectories"]) == 1 and len(unit.rows["verdicts"]) == 1


@pytest.mark.slow
def test_a_path_that_is_not_a_model_is_one_line_and_exit_2(tmp_path: Path) -> None:
    not_model = tmp_path / "notes.txt"
    not_model.write_text("hello")
    proc = subprocess.run(
        [sys.executable, "-m", "trajsynth.cli", "run", "--tasks", "1", "--policy", str(not_model)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "is not a model" in lines[0] and "notes.txt" in lines[0]
    assert not (tmp_path / "data" / "synth.duckdb").exists()  # nothing started, nothing written


@pytest.mark.slow
@pytest.mark.llm
@pytest.mark.docker
def test_synth_run_with_the_embedded_gguf_copy_as_policy(
    tmp_path: Path, prefect_api: dict[str, str]
) -> None:
    from trajsynth.llm.chat_template import default_gguf_path

    gguf = tmp_path / "policy" / "tuned.gguf"
    gguf.parent.mkdir()
    shutil.copy(default_gguf_path(), gguf)
    # docker: this checkout's local sandbox cannot see the layered venv's packages
    env = {**os.environ, **prefect_api, "SYNTH_SANDBOX__KIND": "docker"}
    run = [sys.executable, "-m", "trajsynth.cli", "run", "--tasks", "1", "--samples", "1"]
    run += ["--rollout", "linear", "--clusters", "shop", "--seed", "3", "--policy", str(gguf)]
    proc = subprocess.run(run, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert "assistant: policy" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    store = Store(tmp_path / "data" / "synth.duckdb")
    (row,) = store.query("SELECT state, config, manifest FROM runs")
    assert row["state"] == "completed"
    assert row["manifest"]["policy"]["gguf"] == str(gguf.resolve())
    assert row["config"]["policy"]["path"] == str(gguf.resolve())
    models = store.query("SELECT DISTINCT role, model FROM llm_calls")
    assistant = {m["model"] for m in models if m["role"] == "assistant"}
    assert assistant == {"policy:tuned"}, models
    assert all(m["model"] != "policy:tuned" for m in models if m["role"] != "assistant")
