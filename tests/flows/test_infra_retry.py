"""Infra retries fire: the retry condition of the unit tasks sees the
task's exception for async tasks too (``state.result()`` there is a coroutine, which made
every retry silently not happen)."""

from __future__ import annotations

import asyncio

import pytest
from prefect import flow, task
from prefect.settings import PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS, temporary_settings
from prefect.states import Failed

from trajsynth.flows.stages import _infra_only
from trajsynth.schemas import LLMError, ModelOutputError, SandboxError

pytestmark = pytest.mark.alone  # its own Prefect API must answer in time


@pytest.mark.parametrize("exc", [LLMError("500"), SandboxError("died")])
def test_infra_faults_are_retried(exc: Exception) -> None:
    # the state exactly as Prefect's engine hands it to the condition
    assert _infra_only(None, None, Failed(data=exc)) is True  # type: ignore[arg-type]


@pytest.mark.parametrize("exc", [ModelOutputError("bad json"), ValueError("a bug")])
def test_everything_else_is_not(exc: Exception) -> None:
    assert _infra_only(None, None, Failed(data=exc)) is False  # type: ignore[arg-type]


@pytest.mark.slow
def test_an_async_task_failing_twice_with_infra_faults_is_retried_to_success() -> None:
    attempts: list[str] = []

    @task(retries=2, retry_delay_seconds=0, retry_condition_fn=_infra_only)
    async def unit(kind: str) -> str:
        attempts.append(kind)
        if kind == "infra" and len(attempts) < 3:
            raise LLMError("scripted: server error 500 after retries")
        if kind == "model":
            raise ModelOutputError("scripted: the model wrote bad JSON")
        return "done"

    @flow
    async def run(kind: str) -> str:
        return await unit(kind)

    # a loaded machine starts the ephemeral API slowly (Prefect waits 20 s by default)
    with temporary_settings({PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS: 300}):
        assert asyncio.run(run("infra")) == "done"
        assert attempts == ["infra"] * 3
        attempts.clear()
        with pytest.raises(ModelOutputError):
            asyncio.run(run("model"))
    assert attempts == ["model"]  # a model fault would fail the same way again
