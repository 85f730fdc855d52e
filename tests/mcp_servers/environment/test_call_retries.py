"""``Environment.call_tool``'s tries, with the live call scripted: the first try runs outside
tenacity, and a fault worth sending again enters tenacity's loop as its
first attempt, so the count of tries, the waits and the fault raised after the last try are
what they were. The real servers' faults are tested in ``test_environment.py``."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from trajsynth.mcp_servers.environment import Environment, ToolResult
from trajsynth.mcp_servers.environment.facade import _ServerLost
from trajsynth.mcp_servers.registry import get_cluster
from trajsynth.schemas import MCPServerError


class _Scripted(Environment):
    """An environment whose live calls answer from a script: a ToolResult or a fault."""

    def __init__(self, script: list[ToolResult | BaseException], *, attempts: int = 3) -> None:
        no_sandbox: Any = object()
        super().__init__(
            get_cluster("shop"), no_sandbox, call_attempts=attempts, retry_wait_s=0.001
        )
        self._started = True  # no server: _call_live is scripted
        self.script = script
        self.sent: list[str] = []

    async def _call_live(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        self.sent.append(name)
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step


OK = ToolResult(text="ok")


def _lost(n: int, *, delivered: bool) -> _ServerLost:
    return _ServerLost(f"lost {n}", delivered=delivered)


async def test_a_call_that_answers_is_sent_once() -> None:
    env = _Scripted([OK])
    assert await env.call_tool("get_refunds", {}) == OK
    assert (env.sent, env.retries, env.script) == (["get_refunds"], 0, [])


async def test_a_read_lost_twice_answers_the_third_try(caplog: pytest.LogCaptureFixture) -> None:
    env = _Scripted([_lost(1, delivered=True), _lost(2, delivered=True), OK])
    with caplog.at_level(logging.WARNING, logger="trajsynth.mcp_servers.environment"):
        assert await env.call_tool("get_refunds", {}) == OK
    assert (len(env.sent), env.retries) == (3, 2)
    tries = [r.getMessage() for r in caplog.records if "trying again" in r.getMessage()]
    assert [t.split("(")[0] for t in tries] == [
        "shop: try 1 of 3 failed ",
        "shop: try 2 of 3 failed ",
    ]
    assert "lost 1" in tries[0] and "lost 2" in tries[1]


async def test_a_read_lost_every_time_raises_the_last_fault_after_all_tries() -> None:
    env = _Scripted([_lost(n, delivered=True) for n in (1, 2, 3)])
    with pytest.raises(_ServerLost, match="lost 3"):
        await env.call_tool("get_refunds", {})
    assert (len(env.sent), env.retries) == (3, 2)


async def test_one_attempt_means_no_resend() -> None:
    env = _Scripted([_lost(1, delivered=False)], attempts=1)
    with pytest.raises(_ServerLost, match="lost 1"):
        await env.call_tool("get_refunds", {})
    assert (len(env.sent), env.retries) == (1, 0)


async def test_a_delivered_write_is_never_sent_again() -> None:
    env = _Scripted([_lost(1, delivered=True), OK])
    with pytest.raises(_ServerLost, match="lost 1"):
        await env.call_tool("add_to_cart", {"user_id": "u1", "product_id": "p1"})
    assert (len(env.sent), env.retries, env._writes) == (1, 0, [])


async def test_a_write_that_never_arrived_is_sent_again_and_recorded_once() -> None:
    args = {"user_id": "u1", "product_id": "p1"}
    env = _Scripted([_lost(1, delivered=False), OK])
    assert await env.call_tool("add_to_cart", args) == OK
    assert (len(env.sent), env.retries, env._writes) == (2, 1, [("add_to_cart", args)])


async def test_other_faults_are_raised_at_once() -> None:
    env = _Scripted([MCPServerError("hung; restarted")])
    with pytest.raises(MCPServerError, match="hung"):
        await env.call_tool("get_refunds", {})
    assert (len(env.sent), env.retries) == (1, 0)
