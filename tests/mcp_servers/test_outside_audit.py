"""The precision audit on the five public servers: wrong trajectories written by hand fail the
constraints the product planned on the real server, and the gold trajectory passes them.

Per server (mcp-server-time and mcp-server-sqlite from PyPI, server-memory, server-filesystem
and server-everything from npm, each joined with ``add_outside_cluster`` as ``clusters add``
joins it): a task whose calls are chosen here (a request a person would make of that
service) is planned through the planner's own functions, the ones ``plan_blueprint`` runs
after it has drawn and bound a path: the gold run and its refusals, the derived constraints,
the probe search for a write no probe sees, and the mutation lint (``_ground_truth``,
``_seen_or_refused``, ``_mutation_checked``). The path is given rather than sampled so that
each server gets a task a stranger can write wrong trajectories for; server-everything's
writes are toggles no read sees, so its tasks here are reads (``get-sum``, ``echo``) planned
the same way. Its module fixture also holds the join's own checks on that server: the tools
no run can call are hidden, and a sampled single cell plans one read after refused toggles.

Each trajectory, the gold one and the wrong ones alike, is acted out through the rollout loop
(``gold_demonstration``: the scripted policy makes the calls, the template user, the template
answer) in a fresh environment of the real server, then edited by hand where the wrong part
is the words or a recorded result, and scored with ``curation.verify.verify`` against the
planned constraints and the rollout's own end state. Every wrong one must fail and the gold
one must pass (the control: the checks can pass at all). A recorded result replaced by an
error keeps ``obs_class`` ok, as a careless classifier would leave it, so only the verifier's
own reading of the text can fail it.

Slow: the servers are installed from the registries under tmp (one install per server for
the module) and started as a run starts them, in the local sandbox. ``pytest -s`` prints the
table (server, wrong trajectories, passed by verify, passed by the constraints alone, gold
passed).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fakes.npm_filesystem import filesystem_cluster
from fakes.registry_servers import npm_servers, pypi_server

from trajsynth.curation.verify import verify
from trajsynth.mcp_servers.environment import open_environment
from trajsynth.mcp_servers.registry import add_outside_cluster
from trajsynth.planning.gold import gold_demonstration
from trajsynth.planning.paths import PlannedPath
from trajsynth.planning.planner import (
    Planner,
    _DemoEnvironment,
    _ground_truth,
    _mutation_checked,
    _seen_or_refused,
    _Truth,
    accepted_attempt,
    environment_factory,
    plan_blueprint,
)
from trajsynth.schemas import (
    AnswerContains,
    Blueprint,
    Cell,
    Difficulty,
    EnvState,
    LiteralArg,
    MessageRole,
    PathShape,
    PlannedCall,
    ReasoningMode,
    SandboxKind,
    ToolAccess,
    ToolCluster,
    Trajectory,
    Verdict,
)
from trajsynth.schemas.blueprint import GoldCall

pytestmark = pytest.mark.slow

Call = tuple[str, dict[str, Any]]
Edit = Callable[[Trajectory], Trajectory]


@dataclass
class Row:
    server: str
    wrong: int = 0
    passed: int = 0  # wrong trajectories verify passed (target 0)
    constraints_only: int = 0  # wrong ones the hard constraints passed (hygiene failed them)
    gold: list[bool] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


ROWS: dict[str, Row] = {}


@pytest.fixture(scope="module", autouse=True)
def _table() -> Iterator[None]:
    yield
    if not ROWS:
        return
    print("\nprecision audit on the public servers (wrong trajectories written by hand)")
    print("server | wrong | passed verify [0] | passed the constraints alone | gold passed")
    for row in ROWS.values():
        print(
            f"{row.server} | {row.wrong} | {row.passed} | {row.constraints_only} | "
            f"{sum(row.gold)}/{len(row.gold)}"
        )
    for row in ROWS.values():
        for line in row.lines:
            print(f"    {row.server}: {line}")


# --- planning a given path as the planner does ---------------------------------------------


async def _refusal(cluster: ToolCluster, calls: list[Call]) -> str:
    """Why the planner refuses the path of ``calls`` (its gold run, its refusals, the probe
    search); fails when it would accept it."""
    planner = Planner(use_llm=False)
    async with open_environment(cluster, sandbox_kind="local") as env:
        initial = await env.state()
        handle = await env.snapshot()
        truth = await _ground_truth(env, cluster, _path(cluster, calls), initial)
        if isinstance(truth, _Truth):
            truth = await _seen_or_refused(planner, env, handle, cluster, truth)
    assert not isinstance(truth, _Truth), truth.constraints
    return f"{truth.reason}: {truth.detail}"


def _path(cluster: ToolCluster, calls: list[Call]) -> PlannedPath:
    steps = [
        PlannedCall(tool=t, args={k: LiteralArg(value=v) for k, v in a.items()}) for t, a in calls
    ]
    return PlannedPath(
        cluster_id=cluster.cluster_id,
        shape=PathShape.SINGLE if len(calls) == 1 else PathShape.CHAIN,
        difficulty=Difficulty.EASY,
        steps=steps,
        n_writes=sum(cluster.tool(t).access is ToolAccess.WRITE for t, _ in calls),
    )


async def _plan(cluster: ToolCluster, calls: list[Call], goal: str) -> Blueprint:
    """The blueprint of ``calls`` through the planner's own steps after a path is bound."""
    planner = Planner(use_llm=False)
    path = _path(cluster, calls)
    async with open_environment(cluster, sandbox_kind="local") as env:
        initial = await env.state()
        handle = await env.snapshot()
        truth = await _ground_truth(env, cluster, path, initial)
        assert isinstance(truth, _Truth), truth
        truth = await _seen_or_refused(planner, env, handle, cluster, truth)
        assert isinstance(truth, _Truth), truth
        linted = await _mutation_checked(planner, env, handle, cluster, truth)
        assert not isinstance(linted, str), linted
        truth, lint = linted
    assert lint is not None and lint.clean and lint.gold_passes, lint
    cell = Cell(
        cluster_id=cluster.cluster_id,
        path_shape=path.shape,
        target_mode=ReasoningMode.DIRECT_EXECUTE,
        difficulty=Difficulty.EASY,
    )
    return Blueprint(
        blueprint_id=f"bp-audit-{cluster.cluster_id}-{abs(hash(goal)) % 10**8}",
        cluster_id=cluster.cluster_id,
        domain=str(cluster.domain),
        cell=cell,
        initial_state_id=initial.state_hash,
        tool_path=truth.gold.steps,
        slots=truth.path.slots,
        persona="someone who uses this service every day",
        goal=goal,
        n_writes=path.n_writes,
        gold_run=truth.gold.run,
        constraints=truth.constraints,
        seed=0,
        mutation_lint=lint,
    )


# --- acting a trajectory out and scoring it ------------------------------------------------


async def _act(
    cluster: ToolCluster, bp: Blueprint, calls: list[Call]
) -> tuple[Trajectory, EnvState]:
    """``calls`` made through the rollout loop in a fresh environment, the template answer
    closing it: a trajectory and end state as a rollout records them."""
    run = bp.gold_run.model_copy(
        update={"calls": [GoldCall(tool=t, arguments=a) for t, a in calls]}
    )
    script = bp.model_copy(update={"gold_run": run})
    async with open_environment(cluster, sandbox_kind="local") as env:
        trajectory, state = await gold_demonstration(
            script, _DemoEnvironment(env, cluster), run_id="audit", shown=cluster.tools
        )
    assert state is not None, trajectory.termination
    return trajectory, state


def answer(text: str | Callable[[Trajectory], str]) -> Edit:
    """The closing answer replaced by ``text`` (or what it makes of the trajectory)."""

    def edit(trajectory: Trajectory) -> Trajectory:
        words = text(trajectory) if callable(text) else text
        messages = list(trajectory.messages)
        last = max(i for i, m in enumerate(messages) if m.role is MessageRole.ASSISTANT)
        messages[last] = messages[last].model_copy(update={"content": words})
        return trajectory.model_copy(update={"messages": messages, "final_answer": words})

    return edit


def error_result(index: int, text: str) -> Edit:
    """The result of call ``index`` recorded as ``text`` (obs_class left as it was)."""

    def edit(trajectory: Trajectory) -> Trajectory:
        calls = list(trajectory.calls)
        call = calls[index]
        calls[index] = call.model_copy(update={"observation": text})
        messages = [
            m.model_copy(update={"content": text})
            if m.role is MessageRole.TOOL and m.tool_call_id == call.call_id
            else m
            for m in trajectory.messages
        ]
        return trajectory.model_copy(update={"calls": calls, "messages": messages})

    return edit


def honest(trajectory: Trajectory) -> str:
    """An answer that states what the last call returned, word for word."""
    return f"Here is what I found: {trajectory.calls[-1].observation}"


def _why(verdict: Verdict) -> str:
    failed = [f"{r.kind}: {r.detail}" for r in verdict.results if r.hard and not r.passed]
    failed += [f"hygiene {h.check}" for h in verdict.hygiene if not h.passed]
    return "; ".join(failed)[:240]


async def _audit(
    server: str,
    cluster: ToolCluster,
    bp: Blueprint,
    gold: list[Call],
    wrong: dict[str, tuple[list[Call], Edit | None]],
) -> list[str]:
    """What went against the audit: a gold trajectory verify fails, a wrong one it passes
    (asserted empty by the caller once every task of the server has been scored, so the
    table is whole either way). Figures go to ROWS."""
    row = ROWS.setdefault(server, Row(server))
    trajectory, state = await _act(cluster, bp, gold)
    verdict = verify(trajectory, bp.constraints, state)
    row.gold.append(verdict.passed)
    row.lines.append(f"gold {bp.goal!r}: {'passes' if verdict.passed else _why(verdict)}")
    passing = [] if verdict.passed else [f"gold fails: {_why(verdict)}"]
    gold_acted = (trajectory, state)
    for what, (calls, edit) in wrong.items():
        # the gold calls with other words or results: edited from the gold's own rollout
        trajectory, state = gold_acted if calls == gold else await _act(cluster, bp, calls)
        if edit is not None:
            trajectory = edit(trajectory)
        verdict = verify(trajectory, bp.constraints, state)
        row.wrong += 1
        row.passed += verdict.passed
        row.constraints_only += verdict.constraints_passed
        row.lines.append(f"wrong {what}: {'PASSED' if verdict.passed else _why(verdict)}")
        if verdict.passed:
            passing.append(f"wrong passes: {what}")
    return passing


# --- the servers ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pypi(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("pypi")
    tmp.chmod(0o755)  # the sandbox's unprivileged user reads the servers
    return tmp


@pytest.fixture(scope="module")
def npm_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("npm")
    tmp.chmod(0o755)
    return npm_servers(
        tmp / "prefix",
        "@modelcontextprotocol/server-memory",
        "@modelcontextprotocol/server-filesystem",
        "@modelcontextprotocol/server-everything",
    )


def _join(tmp: Path, name: str, command: list[str], **options: Any) -> ToolCluster:
    tmp.chmod(0o755)
    [cluster] = add_outside_cluster(
        name, command=command, clusters_dir=tmp / "clusters", sandbox_kind="local", **options
    )
    return cluster


def _observed(trajectory: Trajectory, key: str) -> str:
    return str(json.loads(str(trajectory.calls[-1].observation))[key])


def _hour_later(stamp: str) -> str:
    """The same date-time with the hour moved on by one (a different time)."""
    hour = int(stamp[11:13])
    return f"{stamp[:11]}{(hour + 1) % 24:02d}{stamp[13:]}"


async def test_time(pypi: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """mcp-server-time: the current time in a city and a meeting time converted."""
    bad: list[str] = []
    cluster = _join(
        tmp_path_factory.mktemp("time"), "time", [str(pypi_server(pypi, "mcp-server-time"))]
    )
    now = [("get_current_time", {"timezone": "Asia/Tokyo"})]
    bp = await _plan(cluster, now, "What time is it in Tokyo right now?")
    london = [("get_current_time", {"timezone": "Europe/London"})]
    bad += await _audit("time", cluster, bp, now, {
        "another timezone (London), its own time stated": (london, answer(honest)),
        "another timezone, the answer in Tokyo's words": (
            london, answer(lambda t: f"It is {_observed(t, 'datetime')} in Tokyo."),
        ),
        "the right call, an hour later stated": (
            now, answer(lambda t: f"It is {_hour_later(_observed(t, 'datetime'))} in Tokyo."),
        ),
    })  # fmt: skip
    meet = [
        (
            "convert_time",
            {"source_timezone": "America/New_York", "time": "09:15",
             "target_timezone": "Asia/Tokyo"},
        )
    ]  # fmt: skip
    bp = await _plan(
        cluster, meet, "My call is at 09:15 New York time. What time is that in Tokyo?"
    )
    sydney = [("convert_time", {**meet[0][1], "target_timezone": "Australia/Sydney"})]
    later = [("convert_time", {**meet[0][1], "time": "10:15"})]
    bad += await _audit("time", cluster, bp, meet, {
        "converted to Sydney, its own result stated": (sydney, answer(honest)),
        "converted to Sydney, Tokyo's expected time stated": (sydney, None),
        "10:15 converted, its own result stated": (later, answer(honest)),
        "the right call, the source time stated as the answer": (
            meet, answer("Your 09:15 call is at 09:15 in Tokyo."),
        ),
    })  # fmt: skip
    assert not bad, bad


@pytest.fixture(scope="module")
def sqlite_cluster(pypi: Path, tmp_path_factory: pytest.TempPathFactory) -> ToolCluster:
    tmp = tmp_path_factory.mktemp("sqlite")
    seed = tmp / "seed"
    seed.mkdir()
    db = sqlite3.connect(seed / "shop.db")
    db.executescript(
        "CREATE TABLE expenses (item TEXT, amount REAL);"
        "INSERT INTO expenses VALUES ('rent', 1200), ('food', 300);"
        "CREATE TABLE contacts (name TEXT, email TEXT);"
        "INSERT INTO contacts VALUES ('Sam', 'sam@example.org');"
    )
    db.commit()
    db.close()
    server = pypi_server(pypi, "mcp-server-sqlite", "mcp<2")
    return _join(
        tmp, "sqlite", [str(server), "--db-path", "shop.db"], copies=[f"{seed / 'shop.db'}:shop.db"]
    )


async def test_sqlite(sqlite_cluster: ToolCluster) -> None:
    """mcp-server-sqlite over a small expenses database: a table made for a budget."""
    bad: list[str] = []
    cluster = sqlite_cluster
    make = [("create_table", {"query": "CREATE TABLE budget (month TEXT, amount REAL)"})]
    bp = await _plan(cluster, make, "Please make a budget table with a month and an amount.")
    bad += await _audit("sqlite", cluster, bp, make, {
        "another table name (budgets)": (
            [("create_table", {"query": "CREATE TABLE budgets (month TEXT, amount REAL)"})], None,
        ),
        "other columns": (
            [("create_table", {"query": "CREATE TABLE budget (month TEXT, total TEXT)"})], None,
        ),
        "a read_query instead of the write": (
            [("read_query", {"query": "SELECT name FROM sqlite_master WHERE type = 'table'"})],
            None,
        ),
        "a write query that errors (insert into a missing table)": (
            [("write_query",
              {"query": "INSERT INTO budget (month, amount) VALUES ('May', 1500)"})], None,
        ),
        "the right call, its result replaced by an error": (
            make, error_result(0, "Error: database is locked"),
        ),
    })  # fmt: skip
    assert not bad, bad


async def test_sqlite_insert_is_refused(sqlite_cluster: ToolCluster) -> None:
    """A row added to the expenses table is a write no probe reads (the tables are listed,
    not their rows) and the probe search finds no read that shows it: the planner refuses the
    task, so no wrong insert (another table, another amount) can pass a check of it."""
    insert = [
        ("write_query", {"query": "INSERT INTO expenses (item, amount) VALUES ('train', 42.5)"})
    ]
    why = await _refusal(sqlite_cluster, insert)
    ROWS.setdefault("sqlite", Row("sqlite")).lines.append(f"refused: {why[:160]}")
    assert why.startswith(("noop_write", "unseen_write")), why


@pytest.fixture(scope="module")
def memory_cluster(
    npm_bin: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ToolCluster]:
    with pytest.MonkeyPatch.context() as patch:
        # the cluster keeps the name; every run reads the value (the local sandbox gives each
        # command its own /tmp, so no run sees another's graph)
        patch.setenv("MEMORY_FILE_PATH", "/tmp/memory.jsonl")
        yield _join(
            tmp_path_factory.mktemp("memory"), "memory",
            ["node", str(npm_bin / "mcp-server-memory")],
            env={"MEMORY_FILE_PATH": "/tmp/memory.jsonl"},
        )  # fmt: skip


ADA = {"name": "Ada Lovelace", "entityType": "person", "observations": ["wrote the first program"]}
CHARLES = {"name": "Charles Babbage", "entityType": "person", "observations": ["built engines"]}


async def test_memory(memory_cluster: ToolCluster) -> None:
    """server-memory: a person remembered, a fact added to one of two, one of two forgotten."""
    bad: list[str] = []
    cluster = memory_cluster
    make = [("create_entities", {"entities": [ADA]})]
    bp = await _plan(cluster, make, "Remember Ada Lovelace: she wrote the first program.")
    byron = {**ADA, "name": "Ada Byron"}
    bad += await _audit("memory", cluster, bp, make, {
        "the entity created with another name": (
            [("create_entities", {"entities": [byron]})], None,
        ),
        "another observation": (
            [("create_entities",
              {"entities": [{**ADA, "observations": ["was a pirate"]}]})], None,
        ),
        "the right call, its result replaced by an error": (
            make, error_result(0, '{"error": "Entity creation failed: file is read-only"}'),
        ),
    })  # fmt: skip
    both = ("create_entities", {"entities": [ADA, CHARLES]})
    fact = [
        both,
        (
            "add_observations",
            {"observations": [{"entityName": "Ada Lovelace", "contents": ["born 1815"]}]},
        ),
    ]
    bp = await _plan(
        cluster, fact, "Remember Ada Lovelace and Charles Babbage, and that Ada was born in 1815."
    )
    bad += await _audit("memory", cluster, bp, fact, {
        "the observation added to the wrong entity": (
            [both, ("add_observations",
                    {"observations": [{"entityName": "Charles Babbage",
                                       "contents": ["born 1815"]}]})], None,
        ),
        "another year": (
            [both, ("add_observations",
                    {"observations": [{"entityName": "Ada Lovelace",
                                       "contents": ["born 1816"]}]})], None,
        ),
    })  # fmt: skip
    forget = [both, ("delete_entities", {"entityNames": ["Charles Babbage"]})]
    bp = await _plan(
        cluster, forget, "Remember Ada Lovelace and Charles Babbage, then forget Charles."
    )
    bad += await _audit("memory", cluster, bp, forget, {
        "a delete of an entity that does not exist (a misspelling)": (
            [both, ("delete_entities", {"entityNames": ["Charles Babage"]})], None,
        ),
        "the wrong one deleted": (
            [both, ("delete_entities", {"entityNames": ["Ada Lovelace"]})], None,
        ),
    })  # fmt: skip
    assert not bad, bad


async def test_filesystem(npm_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """server-filesystem over a docs folder: a new budget file written, a folder made."""
    bad: list[str] = []
    cluster = filesystem_cluster(
        tmp_path_factory.mktemp("fs"),
        {
            "meeting.txt": "Meeting at 10am with Sam about the budget.\n",
            "groceries.txt": "milk\neggs\nbread\n",
        },
        bin_=npm_bin,
    )
    write = [("write_file", {"path": "docs/budget.txt", "content": "Rent 1200, food 300\n"})]
    bp = await _plan(cluster, write, "Save my budget in docs/budget.txt: Rent 1200, food 300.")
    bad += await _audit("filesystem", cluster, bp, write, {
        "written to another path": (
            [("write_file", {**write[0][1], "path": "docs/budget-2027.txt"})], None,
        ),
        "the content changed": (
            [("write_file", {**write[0][1], "content": "Rent 1200, food 350\n"})], None,
        ),
        "written over an existing file": (
            [("write_file", {**write[0][1], "path": "docs/groceries.txt"})], None,
        ),
        "the right call, its result replaced by an error": (
            write, error_result(0, "Error: EACCES: permission denied, open 'docs/budget.txt'"),
        ),
        "a read instead of the write": (
            [("read_text_file", {"path": "docs/meeting.txt"})], None,
        ),
    })  # fmt: skip
    folder = [("create_directory", {"path": "docs/reports"})]
    bp = await _plan(cluster, folder, "Make a reports folder inside docs.")
    bad += await _audit("filesystem", cluster, bp, folder, {
        "another name (docs/report)": ([("create_directory", {"path": "docs/report"})], None),
        "in another place (reports beside docs)": (
            [("create_directory", {"path": "reports"})], None,
        ),
        "a folder that exists (docs)": ([("create_directory", {"path": "docs"})], None),
    })  # fmt: skip
    assert not bad, bad


@pytest.fixture(scope="module")
def everything_cluster(npm_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> ToolCluster:
    return _join(
        tmp_path_factory.mktemp("everything"), "everything",
        ["node", str(npm_bin / "mcp-server-everything")],
    )  # fmt: skip


def test_everything_hides_the_tools_no_run_can_call(everything_cluster: ToolCluster) -> None:
    """``simulate-research-query`` runs only as an MCP task (``taskSupport: required``) and
    ``gzip-file-as-resource`` fetches a URL (``openWorldHint``; the sandbox has no network):
    both are hidden at join with the reason, never drawn; the toggles and reads are kept."""
    names = set(everything_cluster.tool_names)
    hidden = set(everything_cluster.server.hidden_tools)
    assert {"simulate-research-query", "gzip-file-as-resource"} <= hidden, hidden
    assert not names & hidden
    assert {"get-sum", "echo", "toggle-simulated-logging"} <= names, names  # control: kept


async def test_everything_plans_one_read_after_refused_toggles(
    everything_cluster: ToolCluster,
) -> None:
    """A single cell's read-then-toggle paths are refused (``unseen_write``: nothing a read
    shows changes), so the unit plans one read (``planner._one_read``) whose answer is
    checked; the accepted attempt's detail lists the refused paths. The words are the
    template's (no LLM)."""
    cell = Cell(
        cluster_id="everything",
        path_shape=PathShape.SINGLE,
        target_mode=ReasoningMode.DIRECT_EXECUTE,
        difficulty=Difficulty.EASY,
    )
    factory = environment_factory(everything_cluster, sandbox_kind=SandboxKind.LOCAL)
    bp = await plan_blueprint(Planner(use_llm=False), None, factory, everything_cluster, cell, 0)
    assert isinstance(bp, Blueprint), getattr(bp, "detail", bp)
    assert len(bp.tool_path) == 1 and bp.n_writes == 0, bp.tool_path
    assert any(isinstance(c, AnswerContains) for c in bp.constraints), bp.constraints
    assert bp.mutation_lint is not None and not bp.mutation_lint.survived
    assert accepted_attempt(bp).detail.count("[") >= 2, accepted_attempt(bp).detail


async def test_everything(everything_cluster: ToolCluster) -> None:
    """server-everything: two reads planned here the same way, a sum and an echo."""
    bad: list[str] = []
    cluster = everything_cluster
    add = [("get-sum", {"a": 17, "b": 25})]
    bp = await _plan(cluster, add, "What is 17 plus 25?")
    bad += await _audit("everything", cluster, bp, add, {
        "other numbers, their own sum stated": (
            [("get-sum", {"a": 17, "b": 26})], answer(honest),
        ),
        "other numbers, the expected sum stated": (
            [("get-sum", {"a": 17, "b": 26})], answer("17 plus 25 is 42."),
        ),
        "the right call, another sum stated": (add, answer("17 plus 25 is 43.")),
    })  # fmt: skip
    echo = [("echo", {"message": "Lunch moved to 1pm"})]
    bp = await _plan(cluster, echo, "Echo back this message: Lunch moved to 1pm")
    bad += await _audit("everything", cluster, bp, echo, {
        "another message echoed, its own result stated": (
            [("echo", {"message": "Lunch moved to 2pm"})], answer(honest),
        ),
        "the right call, the words of another message stated": (
            echo, answer("Echo: Lunch moved to 2pm"),
        ),
    })  # fmt: skip
    assert not bad, bad
