"""Outside servers as the bench met them, in this process: what their gold runs and tasks
need from the server's own world.

- a showcase server (like server-everything) with toggles and a read that prints the time its
  resource was created, which moves with each restart of the server: the gold run must still
  pass its own checks, and that read is never the task's read-back;
- a file server (like server-filesystem) whose writes need a path to create: a new file under
  a folder its own listings name, under a name the planner LLM gives; a path outside those
  folders, a placeholder name or a name that is a tool's stays refused.
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from typing import Any

from fakes.strangers import StrangerEnvironment, stranger_cluster
from mcp.server.mcpserver import MCPServer

from trajsynth.agents.constraints import derive_constraints
from trajsynth.agents.gold import GoldFailure, run_gold_path
from trajsynth.agents.mutants import lint_by_mutation
from trajsynth.mcp_servers.environment import ToolResult, _probe_value
from trajsynth.schemas import LiteralArg, PlannedCall, ProbeCall, SnapshotHandle

State = dict[str, Any]


def showcase() -> tuple[MCPServer, State]:
    """Toggles, a sum, and a resource whose text carries the time the server started."""
    state: State = {"logging": False, "started": datetime.now().strftime("%I:%M:%S %p")}
    server = MCPServer("showcase")

    @server.tool()
    def toggle_logging() -> str:
        """Toggles simulated logging on or off."""
        state["logging"] = not state["logging"]
        return "Started logging" if state["logging"] else "Stopped logging"

    @server.tool()
    def get_sum(a: int, b: int) -> str:
        """Adds two numbers."""
        return f"The sum of {a} and {b} is {a + b}."

    @server.tool()
    def get_resource_reference() -> str:
        """A reference to a resource."""
        return f"Resource 1: a plaintext resource created at {state['started']}"

    return server, state


class Restarting(StrangerEnvironment):
    """A restore starts the server again (reset ``fresh``): its clock readings move."""

    restarts = 0

    async def restore(self, handle: SnapshotHandle) -> None:
        await super().restore(handle)
        Restarting.restarts += 1
        later = datetime.now() + timedelta(seconds=7 * Restarting.restarts)
        self.data["started"] = later.strftime("%I:%M:%S %p")


def _steps(*calls: tuple[str, dict[str, Any]]) -> list[PlannedCall]:
    return [
        PlannedCall(tool=t, args={k: LiteralArg(value=v) for k, v in a.items()}) for t, a in calls
    ]


def test_a_time_of_day_read_of_the_clock_is_masked_in_a_probe() -> None:
    now = datetime.now().strftime("%I:%M:%S %p")
    seen = _probe_value(ToolResult(text=f"Resource 1: created at {now}"))
    assert seen == "Resource 1: created at <time>"
    # control: a time of day far from now is data (opening hours), not a reading
    far = (datetime.now() + timedelta(hours=7)).strftime("%H:%M:%S")
    assert _probe_value(ToolResult(text=f"opens at {far}")) == f"opens at {far}"


async def test_a_toggle_task_on_a_server_that_restarts_passes_its_own_checks() -> None:
    """The bench's everything server: 5 of 5 blueprints were rejected as "the gold run fails
    the strengthened checks", because the probe search took a read that printed the server's
    start time for one that sees the toggle."""
    cluster = await stranger_cluster("showcase", showcase)
    env = Restarting(showcase, cluster)
    initial = await env.state()
    handle = await env.snapshot()
    outcome = await run_gold_path(
        env, cluster, _steps(("toggle_logging", {}), ("get_sum", {"a": 1, "b": 1})), {}, initial
    )
    assert not isinstance(outcome, GoldFailure), outcome
    constraints = derive_constraints(
        outcome.run.calls, outcome.run.final_state, cluster, [], initial_state=initial
    )
    _, lint = await lint_by_mutation(env, handle, cluster, outcome.run.calls, constraints)
    assert lint.gold_passes, lint
    assert "get_resource_reference" not in lint.readback
    assert lint.variants > 0 and not lint.survived
    # the cause: the read answers the same in the same state after a restart (the clock is
    # masked), so it is an end state that a replay of the gold run reads again
    probe = [ProbeCall(tool="get_resource_reference", arguments={})]
    first = await env.read_probes(probe)
    await env.restore(handle)
    assert (await env.read_probes(probe)).state_hash == first.state_hash


async def test_a_read_that_moves_with_each_restart_is_never_the_read_back() -> None:
    """Control: a read that moves with each restart and is no clock (a session id) is still
    refused as a read-back by the second gold run from the snapshot."""

    def sessions() -> tuple[MCPServer, State]:
        server, state = showcase()
        state["session"] = 0

        @server.tool()
        def get_session() -> str:
            """The server's session."""
            return f"session {state['session']}"

        return server, state

    class NewSession(StrangerEnvironment):
        async def restore(self, handle: SnapshotHandle) -> None:
            await super().restore(handle)
            self.data["session"] = copy.copy(self.data.get("session", 0)) + len(self.calls)

    cluster = await stranger_cluster("sessions", sessions)
    env = NewSession(sessions, cluster)
    initial = await env.state()
    handle = await env.snapshot()
    outcome = await run_gold_path(env, cluster, _steps(("toggle_logging", {})), {}, initial)
    assert not isinstance(outcome, GoldFailure), outcome
    constraints = derive_constraints(
        outcome.run.calls, outcome.run.final_state, cluster, [], initial_state=initial
    )
    _, lint = await lint_by_mutation(env, handle, cluster, outcome.run.calls, constraints)
    assert lint.gold_passes, lint
    assert "get_session" not in lint.readback
