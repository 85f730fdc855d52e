"""An outside server's MCP resources as part of its end state.

Like mcp-server-sqlite: ``append_insight`` writes the memo resource ``memo://insights``, which
no tool reads. Discovery lists the server's static resources and keeps those that read the
same twice as end-state probes (``ProbeCall.resource``); a resource that moves by itself (a
clock) is none. The mutation lint's probe search can take a resource as the read-back of a
cluster saved before resources were probes.
"""

from __future__ import annotations

import time
from typing import Any

from fakes.strangers import StrangerEnvironment, stranger_cluster
from mcp.client.client import Client
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import MCPServer

from trajsynth.mcp_servers.environment import static_resources
from trajsynth.planning.constraints import derive_constraints
from trajsynth.planning.gold import GoldFailure, run_gold_path
from trajsynth.planning.mutants import lint_by_mutation
from trajsynth.schemas import FinalState, LiteralArg, PlannedCall, ProbeCall, ToolCluster
from trajsynth.schemas.constraints import readback_key

State = dict[str, Any]


def memo_db() -> tuple[MCPServer, State]:
    """A table listing, an insight memo seen only as a resource, and a clock resource."""
    state: State = {"tables": ["orders"], "memo": []}
    server = MCPServer("memo_db")

    @server.tool()
    def list_tables() -> str:
        """List all tables in the SQLite database."""
        return str([{"name": n} for n in state["tables"]])

    @server.tool()
    def append_insight(insight: str) -> str:
        """Add a business insight to the memo."""
        state["memo"].append(insight)
        return "Insight added to memo"

    @server.resource("memo://insights")
    def insights() -> str:
        """The business insights memo."""
        if not state["memo"]:
            return "No business insights have been discovered yet."
        return "Business Insights Memo\n" + "\n".join(f"- {m}" for m in state["memo"])

    @server.resource("clock://now")
    def now() -> str:
        """The server's clock, in nanoseconds."""
        return str(time.time_ns())

    @server.resource("note://{name}")
    def note(name: str) -> str:
        """A template: no probe, it needs a value."""
        return f"note {name}"

    return server, state


def _insight(text: str) -> list[PlannedCall]:
    return [PlannedCall(tool="append_insight", args={"insight": LiteralArg(value=text)})]


async def _gold(env: StrangerEnvironment, cluster: ToolCluster) -> tuple[Any, Any, list[Any]]:
    initial = await env.state()
    handle = await env.snapshot()
    outcome = await run_gold_path(env, cluster, _insight("Orders doubled in May"), {}, initial)
    assert not isinstance(outcome, GoldFailure), outcome
    constraints = derive_constraints(
        outcome.run.calls, outcome.run.final_state, cluster, [], initial_state=initial
    )
    return handle, outcome, constraints


async def test_a_static_resource_that_reads_the_same_twice_is_an_end_state_probe() -> None:
    cluster = await stranger_cluster("memo_db", memo_db)
    resources = [p.resource for p in cluster.probes if p.resource is not None]
    assert resources == ["memo://insights"]  # not the clock, not the template
    assert ProbeCall(tool="list_tables") in cluster.probes  # tool probes as before
    # the write is tagged by what its probe changed: the memo, not its name
    [insight] = [t for t in cluster.tools if t.name == "append_insight"]
    assert insight.access_source == "probe", insight.access_evidence
    assert "memo://insights" in (insight.access_evidence or "")
    assert "clock://now" not in (insight.access_evidence or "")


async def test_a_memo_write_fails_a_wrong_variant_through_its_resource() -> None:
    """Before: the end state is the tool probes only, and a run that writes another insight
    (or none) ends in the gold run's state. After: the memo resource tells them apart."""
    after = await stranger_cluster("memo_db", memo_db)
    before = after.model_copy(update={"probes": [p for p in after.probes if p.resource is None]})
    states: dict[str, dict[str, str]] = {}
    for name, cluster in (("before", before), ("after", after)):
        env = StrangerEnvironment(memo_db, cluster)
        handle = await env.snapshot()
        runs = {"gold": "Orders doubled in May", "wrong": "Orders halved in May", "none": None}
        states[name] = {}
        for run, text in runs.items():
            await env.restore(handle)
            if text is not None:
                await env.call_tool("append_insight", {"insight": text})
            states[name][run] = (await env.state()).state_hash
    assert states["before"]["gold"] == states["before"]["wrong"] == states["before"]["none"]
    assert len(set(states["after"].values())) == 3

    env = StrangerEnvironment(memo_db, after)
    handle, outcome, constraints = await _gold(env, after)
    [check] = [c for c in constraints if isinstance(c, FinalState)]
    assert check.derived_from == "gold_run.final_state"
    _, lint = await lint_by_mutation(env, handle, after, outcome.run.calls, constraints)
    assert lint.gold_passes and not lint.survived, lint
    assert lint.final_state_catches > 0, lint


async def test_the_probe_search_takes_a_resource_for_a_cluster_saved_without_one() -> None:
    """A cluster saved before resources were probes: its end state cannot see the memo, so
    no final-state check is derived; the mutation lint's search finds the memo resource."""
    found = await stranger_cluster("memo_db", memo_db)
    old = found.model_copy(update={"probes": [p for p in found.probes if p.resource is None]})
    env = StrangerEnvironment(memo_db, old)
    handle, outcome, constraints = await _gold(env, old)
    assert not any(isinstance(c, FinalState) for c in constraints)
    checked, lint = await lint_by_mutation(env, handle, old, outcome.run.calls, constraints)
    [check] = [c for c in checked if isinstance(c, FinalState)]
    assert check.probes == [ProbeCall(resource="memo://insights")]
    assert readback_key(0, check.probes[0]) in check.gold_tables
    assert lint.readback == "memo://insights" and lint.gold_passes and not lint.survived, lint
    assert lint.final_state_catches > 0, lint


async def test_a_server_without_the_resources_capability_lists_none() -> None:
    """Control: no resources capability, no resources/list request and no resource probe."""
    async with Client(Server("bare")) as client:
        assert client.session.server_capabilities.resources is None
        assert await static_resources(client.session) == []
    plain, _ = memo_db()
    async with Client(plain) as client:  # and the capability with resources lists them
        assert await static_resources(client.session) == ["clock://now", "memo://insights"]


def test_a_stored_probe_without_resource_is_a_tool_probe() -> None:
    probe = ProbeCall.model_validate({"tool": "list_tables", "arguments": {}})
    assert probe.resource is None and probe.label == "list_tables"
    assert readback_key(0, probe) == "readback0:list_tables"  # old stores keep their keys
