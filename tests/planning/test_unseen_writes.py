"""A write task is accepted only when a final-state check can see what its write did.

An outside gold run whose writes leave every end-state probe reading as the initial state
had it gets the probe search (``planning.mutants.find_readback``); when no read it tries
changes either, the path is refused and another drawn (``planning.admission.unseen_write``):

- ``noop_write``: the write's target is there to be seen and the write left it as it was (a
  folder created that exists, read the same by ``list_directory`` before and after; a
  customer moved to the city she lives in, where discovery saw that write change a read);
- ``unseen_write``: nothing reads what the write does (server-everything's logging toggle).

The bench met all three: their tasks were held by call checks alone, which a run that
did nothing right but call the tool passes.
"""

from __future__ import annotations

import posixpath
from typing import Any

from fakes.llm import ScriptedLLM, slot_filler
from fakes.strangers import StrangerEnvironment, listed_repo, retail, stranger_cluster
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

from trajsynth.planning.admission import unseen_write
from trajsynth.planning.argfill import FILL_TOOL
from trajsynth.planning.constraints import derive_constraints
from trajsynth.planning.gold import GoldFailure, run_gold_path
from trajsynth.planning.mutants import find_readback
from trajsynth.planning.planner import Planner, plan_blueprint
from trajsynth.schemas import (
    Blueprint,
    BlueprintAttempt,
    Cell,
    Difficulty,
    FinalState,
    GoldCall,
    LiteralArg,
    PathShape,
    PlannedCall,
    ReasoningMode,
    ToolCluster,
    ToolSpec,
)

State = dict[str, Any]


def showcase() -> tuple[MCPServer, State]:
    """Like server-everything: a logging toggle nothing reads back, and a sum."""
    state: State = {"logging": False}
    server = MCPServer("showcase")

    @server.tool()
    def toggle_logging() -> str:
        """Toggles simulated logging on or off."""
        state["logging"] = not state["logging"]
        return "Started logging" if state["logging"] else "Stopped logging"

    @server.tool()
    def get_tiny_image() -> str:
        """A tiny image."""
        return "iVBORw0KGgo"

    return server, state


def folders() -> tuple[MCPServer, State]:
    """Like server-filesystem (tests/mcp_servers/test_listings.py): folders under ``/srv``,
    annotated tools, every failure an ``Error: ...`` result, and a folder created by path
    with no error when it exists ("make sure a directory exists")."""
    state: State = {"dirs": {"/srv": ["docs"], "/srv/docs": ["meeting.txt"]}}
    server = MCPServer("folders")
    read = ToolAnnotations(readOnlyHint=True)

    def where(path: str) -> str:
        full = posixpath.normpath(path if path.startswith("/") else f"/srv/{path}")
        return full if full == "/srv" or full.startswith("/srv/") else "/denied"

    @server.tool(annotations=read)
    def list_allowed_directories() -> str:
        """The directories this server may read and write."""
        return "Allowed directories:\n/srv"

    @server.tool(annotations=read)
    def list_directory(path: str) -> str:
        """The entries of a directory."""
        folder = where(path)
        if folder not in state["dirs"]:
            return f"Error: ENOENT: no such directory, scandir '{folder}'"
        entries = state["dirs"][folder]
        return "\n".join(f"[{'FILE' if '.' in e else 'DIR'}] {e}" for e in entries) or "(empty)"

    @server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
    def create_directory(path: str) -> str:
        """Create a new directory or make sure a directory exists."""
        folder = where(path)
        parent, name = posixpath.split(folder)
        if folder == "/denied" or parent not in state["dirs"]:
            return f"Error: access denied or no parent: {path}"
        if folder not in state["dirs"] and name in state["dirs"][parent]:
            return f"Error: EEXIST: file already exists, mkdir '{folder}'"
        if folder not in state["dirs"]:
            state["dirs"][folder] = []
            state["dirs"][posixpath.dirname(folder)].append(posixpath.basename(folder))
        return f"Successfully created directory {path}"

    return server, state


def _cell(difficulty: Difficulty = Difficulty.EASY) -> Cell:
    return Cell(
        cluster_id="x",
        path_shape=PathShape.SINGLE,
        target_mode=ReasoningMode.DIRECT_EXECUTE,
        difficulty=difficulty,
    )


async def _plan(
    cluster: ToolCluster, make: Any, seeds: range, llm: Any = None, **planner: Any
) -> list[Blueprint | BlueprintAttempt]:
    return [
        await plan_blueprint(
            Planner(use_llm=llm is not None, **planner),
            llm,
            lambda: StrangerEnvironment(make, cluster),
            cluster,
            _cell(),
            seed,
        )  # fmt: skip
        for seed in seeds
    ]


def _with_writes(planned: list[Blueprint | BlueprintAttempt]) -> list[Blueprint]:
    return [b for b in planned if isinstance(b, Blueprint) and b.n_writes]


async def test_a_toggle_no_read_sees_is_no_task_target() -> None:
    """Control: with the lint off (nothing searched, nothing refused) the same cells yield
    toggle tasks, held by their calls alone."""
    cluster = await stranger_cluster("showcase", showcase)
    planned = await _plan(cluster, showcase, range(3))
    assert not _with_writes(planned), planned
    # the toggle's paths are refused; a unit may then try one read (planner._one_read), and
    # an accepted read keeps the paths refused before it
    details = [p.detail if isinstance(p, BlueprintAttempt) else " | ".join(p.refused_paths)
               for p in planned]  # fmt: skip
    assert all("[unseen_write] toggle_logging" in d for d in details), details
    off = _with_writes(await _plan(cluster, showcase, range(3), mutation_lint="off"))
    assert off and not any(isinstance(c, FinalState) for b in off for c in b.constraints)


async def test_a_move_to_the_city_the_user_lives_in_is_a_noop_write() -> None:
    """The retail server's binder moves Alice to Austin, where she lives: discovery saw
    ``update_address`` change ``get_user_details``, and this run changed nothing it reads."""
    cluster = await stranger_cluster(
        "retail", retail, hide_params=["state_key"], args={"user_id": "u_alice"}
    )
    planned = await _plan(cluster, retail, range(2))
    refused = [p for p in planned if isinstance(p, BlueprintAttempt)]
    assert len(refused) == 2 and all(p.reason == "noop_write" for p in refused), planned
    assert '"city": "Austin"' in refused[0].detail and "discovery saw" in refused[0].detail


async def test_a_folder_that_exists_is_a_noop_write_and_a_new_one_is_seen() -> None:
    cluster = await stranger_cluster("folders", folders)
    assert cluster.tool("create_directory").access == "write", cluster.tools
    outcomes: dict[str, Any] = {}
    for folder in ("docs", "reports"):
        env = StrangerEnvironment(folders, cluster)
        initial = await env.state()
        handle = await env.snapshot()
        step = PlannedCall(tool="create_directory", args={"path": LiteralArg(value=folder)})
        outcome = await run_gold_path(env, cluster, [step], {}, initial)
        assert not isinstance(outcome, GoldFailure), outcome
        derived = derive_constraints(
            outcome.run.calls, outcome.run.final_state, cluster, [], initial_state=initial
        )
        found = await find_readback(env, handle, cluster, outcome.run.calls)
        outcomes[folder] = (derived, found, outcome.run.calls)
    derived, found, calls = outcomes["docs"]
    assert not any(isinstance(c, FinalState) for c in derived) and found.check is None
    assert any("list_directory" in u and "docs" in u for u in found.unchanged), found
    refusal = unseen_write(calls, cluster.tools, found.tried, found.unchanged)
    assert refusal.reason == "noop_write" and refusal.tool == "create_directory", refusal
    # control: a folder that does not exist is made, and a read sees it
    derived, found, _ = outcomes["reports"]
    seen = any(isinstance(c, FinalState) for c in derived) or found.check is not None
    assert seen, (derived, found)


async def test_the_planner_refuses_the_folder_that_exists() -> None:
    """End to end: the binder takes ``docs`` from the listing for ``create_directory``; the
    path is refused as ``noop_write``, not accepted with call checks alone (the attempt's
    reason is its last path's; the detail lists every path tried, with its reason)."""
    cluster = await stranger_cluster("folders", folders)
    planned = await _plan(cluster, folders, range(2))
    assert not _with_writes(planned), planned
    for attempt in planned:
        assert isinstance(attempt, BlueprintAttempt), attempt
        # refused by the create of a path shown existing (``admission.creates_existing``)
        # before the probes are compared
        assert "[noop_write] create_directory -> " in attempt.detail, attempt
        assert "create_directory(path='/srv/docs') creates what was shown existing" in (
            attempt.detail
        )


async def test_a_write_a_read_sees_is_accepted_with_a_state_check_that_fails_a_wrong_run() -> None:
    """Control for the refusals: a branch the model names, listed by ``git_branch``."""
    cluster = await stranger_cluster("repo", listed_repo, hide_params=[], args={})
    fake = ScriptedLLM([slot_filler({"branch_name": "release-2.0"}, FILL_TOOL)] * 40)
    blueprints = _with_writes(await _plan(cluster, listed_repo, range(2), fake.client()))
    assert blueprints
    for bp in blueprints:
        assert any(isinstance(c, FinalState) for c in bp.constraints)
        assert bp.mutation_lint is not None and bp.mutation_lint.final_state_catches > 0


def test_the_refusal_reason_says_what_was_seen() -> None:
    tools = [
        ToolSpec(name="toggle", access="write", access_source="annotation"),
        ToolSpec(
            name="move",
            access="write",
            access_source="probe",
            access_evidence='move({"city":"London"}) changed get_user result',
        ),
        ToolSpec(name="get_user"),
    ]
    toggle = [GoldCall(tool="toggle", arguments={}, observation="Started")]
    unseen = unseen_write(toggle, tools, tried=3)
    assert unseen.reason == "unseen_write" and "3 reads" in unseen.detail
    assert unseen.tool == "toggle"
    # the same toggle, with a read naming what it named read the same before and after
    assert unseen_write(toggle, tools, 3, ["get_user(x)"]).reason == "noop_write"
    move = [GoldCall(tool="move", arguments={"city": "Austin"}, observation="ok")]
    moved = unseen_write(move, tools, tried=0)
    assert moved.reason == "noop_write" and "discovery saw move" in moved.detail
    # a failed write is no write: the refusal names the one that ran
    failed = GoldCall(tool="move", arguments={"city": "x"}, observation="Error", is_error=True)
    assert unseen_write([failed, *toggle], tools, tried=1).reason == "unseen_write"
