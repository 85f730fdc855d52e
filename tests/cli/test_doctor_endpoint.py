"""`synth doctor --base-url URL --model M`: one endpoint checked with the requests a run sends.

Against the fake OpenAI-compatible server over real HTTP (it returns calls in ``tool_calls``,
honours ``tool_choice``, sends logprobs and ``n`` choices) every check passes; the controls
are a URL where nothing listens (one required check fails, exit 1) and a run configured
without logprobs (a gap, with what the run does instead).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.cli import SynthRunner
from fakes.llm_server import FakeLLMServer

from trajsynth.cli.endpoint_check import _reachable, check_endpoint
from trajsynth.llm.embedded import free_port

ORDER = ["reachable", "chat", "tool calls", "tool_choice", "logprobs", "n", "max_tokens"]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(honour_max_tokens=True) as server:
        yield server


def test_a_capable_endpoint_passes_every_check(fake: FakeLLMServer) -> None:
    checks = check_endpoint(fake.base_url, "fake")
    assert [c.check for c in checks] == ORDER
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    by_name = {c.check: c for c in checks}
    assert by_name["tool calls"].detail.startswith("returned through tools")
    assert by_name["logprobs"].run_does.startswith("branches the tree on step entropy")
    assert by_name["n"].detail == "n=2 returned 2 choice(s)"


def test_a_server_that_ignores_max_tokens_is_named_with_what_bounds_a_turn() -> None:
    """llama-cpp-python's chatml-function-calling decodes a call's arguments with no limit;
    the fake that ignores ``max_tokens`` stands for it (the control: the fake above cuts)."""
    with FakeLLMServer() as unbounded:
        checks = {c.check: c for c in check_endpoint(unbounded.base_url, "fake")}
    check = checks["max_tokens"]
    assert not check.ok and not check.required  # a warning: the run still works
    assert "tokens came back" in check.detail
    assert "--n_ctx" in check.run_does and "assistant_tool_choice_after_tool" in check.run_does
    assert all(c.ok for name, c in checks.items() if name != "max_tokens")


def test_a_model_the_server_does_not_list_is_named(fake: FakeLLMServer) -> None:
    first = check_endpoint(fake.base_url, "gpt-oss")[0]
    assert first.ok and "not 'gpt-oss'" in first.detail and "--model" in first.run_does


def test_without_logprobs_the_run_branches_by_disagreement(fake: FakeLLMServer) -> None:
    logprobs = check_endpoint(fake.base_url, "fake", logprobs=False)[4]
    assert logprobs.check == "logprobs" and not logprobs.ok and not logprobs.required
    assert "disagreement" in logprobs.run_does


def test_the_cli_prints_json_and_fails_when_nothing_answers(
    synth: SynthRunner, tmp_path: Path, fake: FakeLLMServer
) -> None:
    ok = synth("doctor", "--base-url", fake.base_url, "--model", "fake", "--json", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert [c["check"] for c in json.loads(ok.stdout)] == ORDER
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    down = synth("doctor", "--base-url", url, "--json", cwd=tmp_path)
    assert down.returncode == 1
    (check,) = json.loads(down.stdout)
    assert (
        check["check"] == "reachable"
        and not check["ok"]
        and "refuses to start" in check["run_does"]
    )
    table = synth("doctor", "--base-url", fake.base_url, "--model", "fake", cwd=tmp_path)
    assert table.returncode == 0 and "tool_choice" in table.stdout


def test_a_busy_server_is_reachable_not_missing() -> None:
    """A server that accepts the connection but does not answer yet (llama.cpp computing
    another request) is there: the run must not refuse to start."""
    with socket.create_server(("127.0.0.1", 0)) as busy:
        url = f"http://127.0.0.1:{busy.getsockname()[1]}/v1"
        check = _reachable(url, "m", None, timeout_s=0.5)
    assert check.ok and "busy" in check.detail
