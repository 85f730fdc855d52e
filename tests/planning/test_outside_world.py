"""Outside servers as the bench met them, in this process: what their gold runs and tasks
need from the server's own world.

- a showcase server (like server-everything) with toggles and a read that prints the time its
  resource was created, which moves with each restart of the server: the gold run must still
  pass its own checks, and that read is never the task's read-back;
- a database (like server-sqlite) whose table is created by an SQL statement: the statement
  is the tool's form around the names the planner LLM gives, and its tasks are drawn over a
  write no read sees (a memo); a placeholder, a tool's name or an SQL word is no name.

The file server's new paths are tested with ``planning.argfill`` (tests/planning/test_argfill.py)
and its listings with discovery (tests/mcp_servers/test_listings.py).
"""

from __future__ import annotations

import copy
import random
import re
from collections import Counter
from datetime import datetime, timedelta
from typing import Annotated, Any

from fakes.llm import ScriptedLLM, slot_filler
from fakes.strangers import StrangerEnvironment, stranger_cluster
from mcp.server.mcpserver import MCPServer
from pydantic import Field

from trajsynth.mcp_servers.environment.results import ToolResult, probe_value
from trajsynth.mcp_servers.graph import dependency_graph
from trajsynth.planning.argfill import FILL_TOOL, new_table_sql
from trajsynth.planning.constraints import derive_constraints
from trajsynth.planning.gold import GoldFailure, run_gold_path
from trajsynth.planning.mutants import lint_by_mutation
from trajsynth.planning.paths import Rejection, sample_path
from trajsynth.planning.planner import Planner, plan_blueprint
from trajsynth.schemas import (
    Blueprint,
    Cell,
    Difficulty,
    EnvState,
    FinalState,
    LiteralArg,
    PathShape,
    PlannedCall,
    ProbeCall,
    ReasoningMode,
    ServerKind,
    ServerSpec,
    SnapshotHandle,
    ToolCluster,
    ToolSpec,
)

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
    seen = probe_value(ToolResult(text=f"Resource 1: created at {now}"))
    assert seen == "Resource 1: created at <time>"
    # control: a time of day far from now is data (opening hours), not a reading
    far = (datetime.now() + timedelta(hours=7)).strftime("%H:%M:%S")
    assert probe_value(ToolResult(text=f"opens at {far}")) == f"opens at {far}"


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


def database() -> tuple[MCPServer, State]:
    """Like server-sqlite: a table is created by a CREATE TABLE statement and listed by
    ``list_tables``; an insight goes to a memo no tool reads."""
    state: State = {"tables": {"orders": ["order_id", "total"]}, "memo": []}
    server = MCPServer("database")

    @server.tool()
    def list_tables() -> str:
        """List all tables in the SQLite database."""
        return str([{"name": n} for n in sorted(state["tables"])])

    @server.tool()
    def create_table(query: Annotated[str, Field(description="CREATE TABLE SQL statement")]) -> str:
        """Create a new table in the SQLite database."""
        m = re.fullmatch(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+) \((.+)\)", query.strip())
        if m is None or m.group(1) in state["tables"]:
            return f"Error: near {query[:20]!r}: syntax error or table exists"
        state["tables"][m.group(1)] = [c.split()[0] for c in m.group(2).split(", ")]
        return f"Table {m.group(1)} created successfully"

    @server.tool()
    def append_insight(insight: str) -> str:
        """Add a business insight to the memo."""
        state["memo"].append(insight)
        return "Insight added to memo"

    return server, state


def _fill(values: dict[str, Any]) -> Any:
    return slot_filler(values, FILL_TOOL)


async def test_a_table_task_is_planned_and_its_end_state_fails_a_wrong_variant() -> None:
    """The bench's sqlite tasks were all append_insight (a memo nothing reads): the LLM's SQL
    failed every create_table gold run. The statement is the tool's form around the names
    the LLM gives, and a write a read sees is drawn more often than one no read sees."""
    cluster = await stranger_cluster("database", database)
    by = {t.name: t for t in cluster.tools}
    assert by["create_table"].access_source == "probe"  # list_tables saw its table
    assert by["append_insight"].access_source in ("name", "default")
    fake = ScriptedLLM(
        [
            _fill(
                {
                    "query": {"table": "expenses", "columns": ["item", "amount"]},
                    "insight": "Orders doubled in May",
                }
            )
        ]
        * 80  # fmt: skip
    )
    cell = Cell(
        cluster_id="database",
        path_shape=PathShape.CHAIN,
        target_mode=ReasoningMode.DIRECT_EXECUTE,
        difficulty=Difficulty.MEDIUM,
    )
    planned = [
        await plan_blueprint(
            Planner(use_llm=True),
            fake.client(),
            lambda: StrangerEnvironment(database, cluster),
            cluster,
            cell,
            seed,
        )
        for seed in range(4)
    ]
    blueprints = [b for b in planned if isinstance(b, Blueprint)]
    assert blueprints, [getattr(b, "detail", "") for b in planned]
    tables = [b for b in blueprints if "create_table" in [s.tool for s in b.tool_path]]
    assert len(tables) > len(blueprints) / 2, [[s.tool for s in b.tool_path] for b in blueprints]
    for bp in tables:
        [call] = [c for c in bp.gold_run.calls if c.tool == "create_table"]
        assert call.arguments["query"] == "CREATE TABLE expenses (item TEXT, amount TEXT)"
        assert any(isinstance(c, FinalState) for c in bp.constraints)
        assert bp.mutation_lint is not None and bp.mutation_lint.final_state_catches > 0


def test_a_table_name_must_be_a_name_of_the_users() -> None:
    """Controls: a placeholder table, a tool's name, SQL words, punctuation, or no usable
    column give no statement; the path is then rejected, never run with a guess."""
    cluster = ToolCluster(
        cluster_id="db",
        domain="other",
        server=ServerSpec(kind=ServerKind.STDIO, command=["db"]),
        source="outside",
        tools=[ToolSpec(name="create_table", access="write"), ToolSpec(name="list_tables")],
    )
    good = {"table": "expenses", "columns": ["item", "amount", "item"]}
    assert new_table_sql(good, cluster) == "CREATE TABLE expenses (item TEXT, amount TEXT)"
    for bad in (
        {"table": "notes", "columns": ["body"]},
        {"table": "create_table", "columns": ["body"]},
        {"table": "select", "columns": ["body"]},
        {"table": ");;", "columns": ["body"]},
        {"table": "expenses; DROP TABLE orders", "columns": ["body"]},
        {"table": "expenses", "columns": [");", "table"]},
        {"table": "expenses", "columns": "item"},
        "CREATE TABLE expenses (item TEXT)",
    ):
        assert new_table_sql(bad, cluster) is None, bad


def test_an_sql_type_or_a_blank_of_the_form_is_no_name() -> None:
    """The bench's sqlite run created ``CREATE TABLE TableName (int TEXT)``: a type name is no
    column's name and ``TableName`` is the form's blank. Control: a real name that holds such
    a word (``order_items``, ``created_date``) is the user's."""
    cluster = ToolCluster(
        cluster_id="db",
        domain="other",
        server=ServerSpec(kind=ServerKind.STDIO, command=["db"]),
        source="outside",
        tools=[ToolSpec(name="create_table", access="write"), ToolSpec(name="list_tables")],
    )
    for table in ("TableName", "table1", "my_table", "NewTable", "INT", "Varchar", "column2"):
        assert new_table_sql({"table": table, "columns": ["item"]}, cluster) is None, table
    for column in ("int", "INTEGER", "TEXT", "real", "BLOB", "VARCHAR", "numeric", "column1"):
        assert new_table_sql({"table": "expenses", "columns": [column]}, cluster) is None, column
    mixed = {"table": "expenses", "columns": ["int", "amount", "TEXT"]}
    assert new_table_sql(mixed, cluster) == "CREATE TABLE expenses (amount TEXT)"
    kept = {"table": "order_items", "columns": ["created_date", "unit_price"]}
    assert new_table_sql(kept, cluster) == (
        "CREATE TABLE order_items (created_date TEXT, unit_price TEXT)"
    )
    # a code base's class name (the sqlite bench created ``DbClientCachingSessionImpl``)
    mash = {"table": "DbClientCachingSessionImpl", "columns": ["type"]}
    assert new_table_sql(mash, cluster) is None
    columns = {"table": "expenses", "columns": ["ItemPriceCurrencyValue"]}
    assert new_table_sql(columns, cluster) is None


async def test_a_write_a_read_sees_is_drawn_more_often_than_one_no_read_sees() -> None:
    """Over 60 draws of a medium task, create_table (list_tables saw its table) is drawn
    more than twice as often as append_insight (nothing read its memo); control: with the
    same tools tagged by annotation (nothing says which a read sees) both are drawn alike."""
    cluster = await stranger_cluster("database", database)
    cell = Cell(
        cluster_id="database",
        path_shape=PathShape.CHAIN,
        target_mode=ReasoningMode.DIRECT_EXECUTE,
        difficulty=Difficulty.MEDIUM,
    )

    def draws(c: ToolCluster) -> Counter[str]:
        graph = dependency_graph(c)
        state = EnvState(state_hash="s")
        counts: Counter[str] = Counter()
        for seed in range(60):
            path = sample_path(c, graph, cell, state, random.Random(seed))
            assert not isinstance(path, Rejection), path
            counts.update(t for t in dict.fromkeys(path.tools) if c.tool(t).access == "write")
        return counts

    seen = draws(cluster)
    assert seen["create_table"] > 2 * seen["append_insight"], seen
    annotated = cluster.model_copy(
        update={
            "tools": [t.model_copy(update={"access_source": "annotation"}) for t in cluster.tools]
        }
    )
    alike = draws(annotated)
    assert alike["append_insight"] * 2 >= alike["create_table"], alike
