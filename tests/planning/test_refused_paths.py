"""Every path a planning unit refused is a record, and a single cell of a server whose writes
no check can see is planned as one read.

A unit tries several paths: one refused (``unseen_write``, ``noop_write``, a gold error) and
then another accepted used to leave no trace of the first, so the bench's "paths refused"
counted refused units only. The accepted attempt's detail now lists the paths refused
before its blueprint, in the format of a refused unit's detail, and the run summary and the
bench count them (``store.summary.refused_in``).

``showcase`` is server-everything as the bench met it: two toggles nothing reads back (their
paths are refused as ``unseen_write``), and plain reads (a sum, an echo). Its single cells
used to become a read then a toggle, refused every time; after two such refusals the cell is
one read whose answer is checked, as on a read-only server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fakes.strangers import StrangerEnvironment, stranger_cluster
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

from trajsynth.curation.verify import answer_contains_value
from trajsynth.mcp_servers.discovery import Discovery
from trajsynth.mcp_servers.registry import unusable_tools
from trajsynth.planning import planner as planner_module
from trajsynth.planning.planner import Planner, accepted_attempt, plan_blueprint
from trajsynth.schemas import (
    AnswerContains,
    Blueprint,
    BlueprintAttempt,
    Cell,
    Difficulty,
    PathShape,
    ReasoningMode,
    ToolCluster,
)
from trajsynth.store import Store
from trajsynth.store.rows import BlueprintAttemptRow
from trajsynth.store.summary import paths_refused, refused_in

State = dict[str, Any]


def showcase() -> tuple[MCPServer, State]:
    """Like server-everything: annotated toggles nothing reads back, a sum and an echo."""
    state: State = {"logging": False, "updates": False}
    server = MCPServer("showcase")
    read = ToolAnnotations(readOnlyHint=True, idempotentHint=True)
    write = ToolAnnotations(readOnlyHint=False, idempotentHint=False)

    @server.tool(annotations=write)
    def toggle_simulated_logging() -> str:
        """Toggles simulated, random-leveled logging on or off."""
        state["logging"] = not state["logging"]
        return "Started logging" if state["logging"] else "Stopped logging"

    @server.tool(annotations=write)
    def toggle_subscriber_updates() -> str:
        """Toggles simulated resource subscription updates on or off."""
        state["updates"] = not state["updates"]
        return "Started updates" if state["updates"] else "Stopped updates"

    @server.tool(annotations=read)
    def get_sum(a: float, b: float) -> str:
        """Returns the sum of two numbers."""
        return f"The sum of {a:g} and {b:g} is {a + b:g}."

    @server.tool(annotations=read)
    def echo(message: str) -> str:
        """Echoes back the input string."""
        return f"Echo: {message}"

    return server, state


def _cell(mode: ReasoningMode = ReasoningMode.DIRECT_EXECUTE) -> Cell:
    return Cell(
        cluster_id="showcase",
        path_shape=PathShape.SINGLE,
        target_mode=mode,
        difficulty=Difficulty.EASY,
    )


async def _plan(cluster: ToolCluster, seed: int, cell: Cell | None = None) -> Any:
    return await plan_blueprint(
        Planner(use_llm=False),
        None,
        lambda: StrangerEnvironment(showcase, cluster),
        cluster,
        cell or _cell(),
        seed,
    )


async def test_a_refused_path_then_an_accepted_one_are_both_stored(tmp_path: Path) -> None:
    """The toggles' paths are refused as ``unseen_write``, then a single read is accepted:
    the accepted attempt's row, written and read back, lists the refused paths."""
    cluster = await stranger_cluster("showcase", showcase)
    planned = [await _plan(cluster, seed) for seed in range(3)]
    blueprints = [b for b in planned if isinstance(b, Blueprint)]
    assert blueprints, planned
    bp = next(b for b in blueprints if b.refused_paths)
    reasons = [p[1 : p.index("]")] for p in bp.refused_paths]
    assert "unseen_write" in reasons, bp.refused_paths
    store = Store(tmp_path / "s.duckdb")
    store.write([BlueprintAttemptRow.of(accepted_attempt(bp), run_id="run_x")])
    [row] = store.read(BlueprintAttempt, run_id="run_x")
    assert row.accepted and row.blueprint_id is None  # the planner's additions stay in memory
    tried = refused_in(row.detail, row.reason, row.accepted)
    assert tried == reasons, row.detail
    every, inside = paths_refused([(row.reason, row.detail, row.accepted)])
    assert every == inside and every["unseen_write"] == reasons.count("unseen_write") > 0


async def test_a_single_read_task_of_a_server_with_unseen_writes_checks_its_answer() -> None:
    """The accepted task is one read with an answer check (the sum or the echo) that the
    mutation lint's wrong variants fail; no toggle is in it."""
    cluster = await stranger_cluster("showcase", showcase)
    blueprints = [
        b for b in [await _plan(cluster, s) for s in range(3)] if isinstance(b, Blueprint)
    ]
    assert blueprints
    for bp in blueprints:
        assert [s.tool for s in bp.tool_path] in (["get_sum"], ["echo"]), bp.tool_path
        assert bp.n_writes == 0
        answers = [c for c in bp.constraints if isinstance(c, AnswerContains)]
        assert answers, bp.constraints
        right = " ".join(str(v) for a in answers for v in a.values)
        assert all(answer_contains_value(right, v) for a in answers for v in a.values)
        # a wrong answer (another sum, another echo) fails the check
        assert not all(answer_contains_value("It is 999999.", v) for a in answers for v in a.values)
        assert bp.mutation_lint is not None and not bp.mutation_lint.survived


async def test_control_without_the_single_read_no_task_is_planned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Control: with the single read never asked for, the same cells plan a read then a
    toggle, refused every time (the bench's 0 of 9)."""
    cluster = await stranger_cluster("showcase", showcase)
    monkeypatch.setattr(planner_module, "ONE_READ_AFTER", 10**6)
    planned = [await _plan(cluster, seed) for seed in range(3)]
    assert not any(isinstance(p, Blueprint) for p in planned), planned
    assert all("[unseen_write]" in p.detail for p in planned), planned


async def test_a_cell_that_needs_a_write_gets_no_single_read() -> None:
    """verify_after_write asks for a write: its cell is not turned into a read."""
    cluster = await stranger_cluster("showcase", showcase)
    planned = await _plan(cluster, 0, _cell(ReasoningMode.VERIFY_AFTER_WRITE))
    assert isinstance(planned, BlueprintAttempt) and planned.reason == "unseen_write", planned


def test_refused_paths_are_counted_from_old_and_new_details() -> None:
    rows = [
        ("", "[noop_write] create_directory: same | [unseen_write] toggle: none", True),
        ("unseen_write", "[unseen_write] toggle: none | [unseen_write] toggle: none", False),
        ("mutation_lint", "a -> b: wrong variants pass: drop", False),  # an older store's row
        ("", "", True),
    ]
    every, inside = paths_refused(rows)
    assert every == {"unseen_write": 3, "noop_write": 1, "mutation_lint": 1}
    assert inside == {"unseen_write": 1, "noop_write": 1}


def test_tools_no_run_can_call_are_unusable() -> None:
    """A task-only tool and an open-world tool whose every probe failed are hidden; a tool
    that failed for want of data (no open-world hint) and one that succeeded are kept."""
    raw = [
        {"name": "research", "execution": {"taskSupport": "required"}},
        {"name": "gzip", "annotations": {"openWorldHint": True}},
        {"name": "fetch_ok", "annotations": {"openWorldHint": True}},
        {"name": "get_order", "annotations": {"readOnlyHint": True}},
    ]
    found = Discovery(
        tools=[], edges=[], probes=[], arg_values={},
        failed={"research": "requires task augmentation", "gzip": "fetch failed",
                "get_order": "no such order"},
    )  # fmt: skip
    unusable = unusable_tools(raw, found)
    assert set(unusable) == {"research", "gzip"}, unusable
    assert "fetch failed" in unusable["gzip"] and "taskSupport" in unusable["research"]
    assert unusable_tools(raw, None) == {"research": unusable["research"]}
