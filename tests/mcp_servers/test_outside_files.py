"""server-filesystem from npm, as the planner meets it: a new file named by the planner LLM
in a folder the server lists is written and seen by the end state, and a folder created
that exists is refused as a no-op.

Slow: the server is installed into its own npm prefix under tmp and started as a run starts
it (local sandbox); the planner LLM is the scripted fake (tests/fakes/llm.py).
"""

from __future__ import annotations

import pytest
from fakes.llm import ScriptedLLM, tool_call
from fakes.npm_filesystem import filesystem_cluster

from trajsynth.mcp_servers.environment import open_environment
from trajsynth.mcp_servers.listings import listed_dirs
from trajsynth.planning.admission import unseen_write
from trajsynth.planning.argfill import FILL_TOOL, fill_slots, unfilled
from trajsynth.planning.constraints import derive_constraints
from trajsynth.planning.equivalent_reads import with_equivalent_reads
from trajsynth.planning.gold import GoldFailure, run_gold_path
from trajsynth.planning.mutants import find_readback, lint_by_mutation
from trajsynth.planning.paths import PlannedPath
from trajsynth.schemas import (
    Difficulty,
    FinalState,
    LiteralArg,
    PathShape,
    PlannedCall,
    SlotArg,
    ToolCalled,
    ToolCluster,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> ToolCluster:
    return filesystem_cluster(
        tmp_path_factory.mktemp("fs"),
        {
            "meeting.txt": "Meeting at 10am with Sam about the budget.\n",
            "groceries.txt": "milk\neggs\nbread\n",
        },
    )


async def test_a_new_file_the_llm_names_is_written_and_the_end_state_sees_it(
    cluster: ToolCluster,
) -> None:
    assert "docs" in listed_dirs(cluster), cluster.arg_values
    write = PlannedPath(
        cluster_id=cluster.cluster_id,
        shape=PathShape.SINGLE,
        difficulty=Difficulty.EASY,
        steps=[
            PlannedCall(
                tool="write_file",
                args={"path": SlotArg(name="path"), "content": SlotArg(name="content")},
            )
        ],
        slots={"path": None, "content": None},
        slot_sources={"path": "schema", "content": "schema"},
    )
    fake = ScriptedLLM(
        [tool_call(FILL_TOOL, {"path": "budget-2027.txt", "content": "Rent 1200, food 300"})]
    )
    filled, _ = await fill_slots(fake.client(), cluster, write, seed=1)
    assert filled is not None and not unfilled(filled), filled
    assert filled.slots["path"] == "docs/budget-2027.txt"
    async with open_environment(cluster, sandbox_kind="local") as env:
        initial = await env.state()
        handle = await env.snapshot()
        outcome = await run_gold_path(env, cluster, filled.steps, filled.slots, initial)
        assert not isinstance(outcome, GoldFailure), outcome
        constraints = derive_constraints(
            outcome.run.calls, outcome.run.final_state, cluster, [], initial_state=initial
        )
        checked, lint = await lint_by_mutation(env, handle, cluster, outcome.run.calls, constraints)
        await env.restore(handle)
        listing = await env.call_tool("list_directory", {"path": "docs"})
    assert "budget-2027.txt" not in listing.text  # a new file: the restored state lacks it
    assert any(isinstance(c, FinalState) for c in checked), checked
    assert lint.clean and lint.final_state_catches > 0, lint


async def test_a_folder_that_exists_is_a_noop_write(cluster: ToolCluster) -> None:
    """The bench's ``create_directory docs``: nothing any probe or tried read shows moves,
    and a read of ``docs`` answers the same before and after: refused as ``noop_write``.
    Control: a folder that does not exist is seen."""
    found = {}
    for folder in ("docs", "docs/reports"):
        step = PlannedCall(tool="create_directory", args={"path": LiteralArg(value=folder)})
        async with open_environment(cluster, sandbox_kind="local") as env:
            initial = await env.state()
            handle = await env.snapshot()
            outcome = await run_gold_path(env, cluster, [step], {}, initial)
            assert not isinstance(outcome, GoldFailure), outcome
            derived = derive_constraints(
                outcome.run.calls, outcome.run.final_state, cluster, [], initial_state=initial
            )
            search = await find_readback(env, handle, cluster, outcome.run.calls)
        found[folder] = (derived, search, outcome.run.calls)
    derived, search, calls = found["docs"]
    assert not any(isinstance(c, FinalState) for c in derived) and search.check is None
    refusal = unseen_write(calls, cluster.tools, search.tried, search.unchanged)
    assert refusal.reason == "noop_write", (refusal, search)
    derived, search, _ = found["docs/reports"]
    assert any(isinstance(c, FinalState) for c in derived) or search.check is not None


async def test_the_real_servers_other_reads_of_a_file_are_alternatives(
    cluster: ToolCluster,
) -> None:
    """A read task planned from ``read_multiple_files`` accepts the server's own single-file
    reads of the same file (``read_file``, ``read_text_file``), and not the reads that name the
    file without its text (``get_file_info``, ``list_directory``)."""
    read = [
        PlannedCall(
            tool="read_multiple_files", args={"paths": LiteralArg(value=["docs/groceries.txt"])}
        )
    ]
    async with open_environment(cluster, sandbox_kind="local") as env:
        initial = await env.state()
        handle = await env.snapshot()
        outcome = await run_gold_path(env, cluster, read, {}, initial)
        assert not isinstance(outcome, GoldFailure), outcome
        derived = derive_constraints(
            outcome.run.calls,
            outcome.run.final_state,
            cluster,
            ["milk\neggs\nbread"],
            initial_state=initial,
        )
        widened = await with_equivalent_reads(env, handle, cluster, outcome.run.calls, derived)
    [check] = [c for c in widened if isinstance(c, ToolCalled)]
    found = {p.tool: p.matchers for p in check.alternatives}
    singles = {"read_file", "read_text_file"} & {t.name for t in cluster.tools}
    assert singles and set(found) == singles, found
    assert all(m == {"path": "docs/groceries.txt"} for m in found.values()), found
