"""open_sandbox: the kind asked for, and the automatic fallback to LocalSandbox."""

from __future__ import annotations

import docker
import pytest
from docker.errors import DockerException

from trajsynth.sandboxes import LocalSandbox, engine, open_sandbox
from trajsynth.sandboxes.factory import docker_unusable
from trajsynth.schemas import SandboxError, SandboxKind, SandboxLimits


@pytest.fixture
def dead_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(**_: object) -> docker.DockerClient:
        raise DockerException("Error while fetching server API version: connection refused")

    monkeypatch.setattr(engine, "_client", None)
    monkeypatch.setattr(engine.docker, "from_env", refuse)


def test_local_kind_gives_a_started_local_sandbox() -> None:
    with open_sandbox(SandboxKind.LOCAL, SandboxLimits()) as sb:
        assert isinstance(sb, LocalSandbox)
        assert sb.exec(["echo", "hi"]).stdout == "hi\n"


def test_kind_may_be_a_string() -> None:
    with open_sandbox("local", SandboxLimits(memory_mb=256)) as sb:
        assert sb.limits.memory_mb == 256


def test_auto_falls_back_to_local_with_a_notice(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with open_sandbox(SandboxKind.AUTO, SandboxLimits(), image="trajsynth-sandbox:nope") as sb:
        assert isinstance(sb, LocalSandbox)
        assert sb.exec(["true"]).exit_code == 0
    assert "using LocalSandbox because" in caplog.text


def test_dead_engine_says_what_to_run(dead_engine: None) -> None:
    with pytest.raises(SandboxError, match="make docker"):
        engine.docker_client()
    assert "does not answer" in docker_unusable()
    with pytest.raises(SandboxError, match="not reachable"):
        open_sandbox(SandboxKind.DOCKER, SandboxLimits(), image="trajsynth-sandbox:x")


def test_auto_with_a_dead_engine_is_local(
    dead_engine: None, caplog: pytest.LogCaptureFixture
) -> None:
    with open_sandbox(SandboxKind.AUTO, SandboxLimits()) as sb:
        assert isinstance(sb, LocalSandbox)
