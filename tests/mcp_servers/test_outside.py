"""Outside servers: launch roots, env keys never stored, argument values, discovery
against a real MCP server started exactly as a run starts it, and the slow tier with two
servers installed from PyPI into a tmp dir."""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from trajsynth.mcp_servers.arguments import generate_arguments, param_values
from trajsynth.mcp_servers.launch import copied_file, server_env, server_mounts
from trajsynth.mcp_servers.registry import add_outside_cluster, get_cluster
from trajsynth.schemas import (
    EdgeOrigin,
    EdgeProposal,
    InputError,
    ResetMode,
    ServerKind,
    ServerSpec,
    ToolAccess,
)
from trajsynth.store import Store

NOTES_SERVER = textwrap.dedent(
    """
    import json, pathlib
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("notes")
    DB = pathlib.Path("notes.json")

    def load():
        return json.loads(DB.read_text()) if DB.exists() else {}

    @server.tool()
    def put(title: str, body: str) -> str:
        \"\"\"Keep a note under a title.\"\"\"
        notes = load(); notes[title] = body; DB.write_text(json.dumps(notes))
        return json.dumps({"title": title})

    @server.tool()
    def titles() -> str:
        \"\"\"Every note title.\"\"\"
        return json.dumps({"titles": sorted(load())})

    @server.tool()
    def cat(title: str) -> str:
        \"\"\"One note's text.\"\"\"
        notes = load()
        if title not in notes:
            raise ValueError(f"no note {title}")
        return notes[title]

    server.run()
    """
)


def test_server_mounts_find_the_venv_and_the_interpreter_prefix(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    script = venv / "bin" / "my-server"
    script.write_text(f"#!{sys.executable}\nprint(1)\n")
    script.chmod(0o755)
    mounts = server_mounts([str(script)], extra=[str(tmp_path)])
    assert str(tmp_path) in mounts  # --mount given, and the venv inside it is folded in
    assert str(venv) not in mounts
    with pytest.raises(InputError, match="--mount '/no/such/dir'"):
        server_mounts([str(script)], extra=["/no/such/dir"])


def test_env_values_come_from_the_environment_and_are_never_stored() -> None:
    spec = ServerSpec(kind=ServerKind.STDIO, command=["x"], env_keys=["API_TOKEN"])
    assert server_env(spec, {"API_TOKEN": "s3cret"}) == {"API_TOKEN": "s3cret"}
    assert "s3cret" not in spec.model_dump_json()
    with pytest.raises(InputError, match="API_TOKEN not set"):
        server_env(spec, {})


def test_copied_files_are_hashed(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one")
    first = copied_file(str(tmp_path / "a.txt"))
    (tmp_path / "a.txt").write_text("two")
    assert copied_file(str(tmp_path / "a.txt")).sha256 != first.sha256
    assert first.dest == "a.txt"


def test_argument_values_follow_the_schema() -> None:
    assert param_values("unit", {"type": "string", "enum": ["c", "f"]}) == ["c", "f"]
    assert param_values("when", {"type": "string", "format": "date"})[0] == "2025-03-14"
    assert param_values("n", {"type": "integer", "default": 7})[0] == 7
    assert param_values("repo_path", {"type": "string"}, fixed={"repo_path": "/w"})[0] == "/w"
    args = generate_arguments(
        {
            "type": "object",
            "properties": {
                "entities": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
                        "required": ["name", "n"],
                    },
                }
            },
            "required": ["entities"],
        }
    )
    assert args == {"entities": [{"name": "notes", "n": 1}]}


@pytest.mark.slow
def test_discovery_probes_an_unannotated_server_in_the_sandbox(tmp_path: Path) -> None:
    """Tags by probing (the work dir changed -> write), value-flow edges with evidence and
    end-state probes, on a real server started in the local sandbox (bubblewrap)."""
    tmp_path.chmod(0o755)  # the sandbox's unprivileged user reads the server, as in a venv
    script = tmp_path / "notes_server.py"
    script.write_text(NOTES_SERVER)
    [c] = add_outside_cluster(
        "notes", command=[sys.executable, str(script)], clusters_dir=tmp_path / "c",
        sandbox_kind="local", reset=ResetMode.SNAPSHOT, env={"NOTES_TOKEN": "s3cret-4711"},
    )  # fmt: skip
    saved = (tmp_path / "c" / "notes.json").read_text()
    assert c.server.env_keys == ["NOTES_TOKEN"] and "s3cret-4711" not in saved
    tags = {t.name: (t.access, t.access_source) for t in c.tools}
    assert tags["put"] == (ToolAccess.WRITE, "probe")
    assert tags["titles"][0] == ToolAccess.READ
    assert tags["cat"][0] == ToolAccess.READ
    assert "changed work dir files" in (c.tool("put").access_evidence or "")
    flow = [e for e in c.edges if e.origin == EdgeOrigin.VALUE_FLOW]
    assert any(e.target == "cat" and e.in_param == "title" and e.evidence for e in flow)
    assert flow == c.edges  # a guess from names that no probe confirmed is not kept
    assert {p.tool for p in c.probes} >= {"titles"}
    assert c.state_readable
    assert get_cluster("notes", clusters_dir=tmp_path / "c") == c


BOOT_SERVER = textwrap.dedent(
    """
    import json, time
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("boot")
    BOOT = time.time_ns() % 10**12  # a boot id: differs in every process
    STARTED = time.strftime("%H:%M:%S")  # to the second, as logs and headers print it

    @server.tool()
    def status() -> str:
        \"\"\"Which boot of this server answers.\"\"\"
        return json.dumps({"boot": BOOT})

    @server.tool()
    def uptime() -> str:
        \"\"\"When this server started.\"\"\"
        return json.dumps({"started": STARTED})

    @server.tool()
    def colours() -> str:
        \"\"\"The colours on offer.\"\"\"
        return json.dumps({"colours": ["green", "red"]})

    server.run()
    """
)


@pytest.mark.slow
def test_a_probe_that_answers_with_the_server_start_is_dropped(tmp_path: Path) -> None:
    """`status` answers the same twice in one process, so only the two fresh environments, the
    second started a clock tick after the first, tell that it cannot read an end state.
    `uptime` prints its start as a time of day, a reading of the clock that every probe result
    masks (`<time>`): it reads the same in both and stays, telling no two states apart."""
    tmp_path.chmod(0o755)
    script = tmp_path / "boot_server.py"
    script.write_text(BOOT_SERVER)
    [c] = add_outside_cluster(
        "boot", command=[sys.executable, str(script)], clusters_dir=tmp_path / "c",
        sandbox_kind="local",
    )  # fmt: skip
    assert {t.name: t.access for t in c.tools} == {
        "status": ToolAccess.READ,
        "uptime": ToolAccess.READ,
        "colours": ToolAccess.READ,
    }
    assert [p.tool for p in c.probes] == ["colours", "uptime"]


# `open_ticket` returns `ref`, which `close_ticket` calls `ticket_number`: value flow (equal
# key names) cannot link them; `echo` takes any string and answers the same to every one.
TICKETS_SERVER = textwrap.dedent(
    """
    import json, pathlib
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("tickets")
    DB = pathlib.Path("tickets.json")

    def load():
        return json.loads(DB.read_text()) if DB.exists() else {}

    @server.tool()
    def open_ticket(subject: str) -> str:
        \"\"\"Open a support ticket; returns its reference.\"\"\"
        db = load(); ref = f"T-{len(db) + 1:04d}"
        db[ref] = {"subject": subject, "open": True}; DB.write_text(json.dumps(db))
        return json.dumps({"ref": ref})

    @server.tool()
    def close_ticket(ticket_number: str) -> str:
        \"\"\"Close a ticket, given the reference open_ticket returned.\"\"\"
        db = load()
        if ticket_number not in db:
            raise ValueError(f"no ticket {ticket_number}")
        db[ticket_number]["open"] = False; DB.write_text(json.dumps(db))
        return json.dumps({"closed": ticket_number})

    @server.tool()
    def echo(text: str) -> str:
        \"\"\"Acknowledge a message.\"\"\"
        return json.dumps({"said": "ok"})

    server.run()
    """
)


def _tickets_server(tmp_path: Path) -> Path:
    tmp_path.chmod(0o755)  # the sandbox's unprivileged user reads the server, as in a venv
    script = tmp_path / "tickets_server.py"
    script.write_text(TICKETS_SERVER)
    return script


@pytest.mark.slow
def test_a_proposed_edge_is_kept_only_when_a_probe_confirms_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Proposals (here scripted, as an LLM would send them) become edges
    only when the target accepts the value the source returned and a made-up value does not
    get the same answer; the others are rejected with the reason."""
    script = _tickets_server(tmp_path)
    seen: dict[str, list[str]] = {}

    async def propose(tools, returned):  # noqa: ANN001, ANN202 - a discovery.Proposer
        seen.update(returned)
        return [
            EdgeProposal(source="open_ticket", out_field="ref", target="close_ticket",
                         in_param="ticket_number", why="the reference is the ticket number"),
            EdgeProposal(source="open_ticket", out_field="ref", target="echo", in_param="text"),
            EdgeProposal(source="close_ticket", out_field="closed", target="open_ticket",
                         in_param="subject"),
            EdgeProposal(source="open_ticket", out_field="ref", target="nope", in_param="x"),
        ]  # fmt: skip

    with caplog.at_level(logging.INFO, logger="trajsynth.mcp_servers.registry"):
        [c] = add_outside_cluster(
            "tickets", command=[sys.executable, str(script)], clusters_dir=tmp_path / "c",
            sandbox_kind="local", reset=ResetMode.SNAPSHOT, propose=propose,
        )  # fmt: skip
    assert "ref" in seen["open_ticket"]  # the proposer saw what probing saw returned
    assert not [e for e in c.edges if e.origin == EdgeOrigin.VALUE_FLOW and e.target != "echo"]
    [edge] = [e for e in c.edges if e.origin == EdgeOrigin.LLM]
    assert (edge.source, edge.target, edge.in_param) == ("open_ticket", "close_ticket",
                                                         "ticket_number")  # fmt: skip
    assert edge.verified and "proposed by the LLM" in (edge.evidence or "")
    assert 'open_ticket returned ref="T-0' in (edge.evidence or "")
    assert "a made-up value failed" in (edge.evidence or "")
    logged = caplog.text
    assert (
        "open_ticket.ref -> echo(text) rejected" in logged
        and "accepts a made-up text too" in logged
    )
    assert "close_ticket.closed -> open_ticket(subject) rejected" in logged
    assert "does not name two tools" in logged
    assert get_cluster("tickets", clusters_dir=tmp_path / "c") == c


@pytest.mark.slow
@pytest.mark.llm
def test_clusters_add_with_llm_edges_on_the_embedded_model(tmp_path: Path) -> None:
    """`synth clusters add --llm-edges`: the embedded model proposes, probes decide; whatever
    it proposed, every saved edge is a confirmed one with its evidence."""
    script = _tickets_server(tmp_path)
    added = subprocess.run(
        [sys.executable, "-m", "trajsynth.cli", "clusters", "add", "tickets", "--llm-edges",
         "--sandbox", "local", "--reset", "snapshot", "--", sys.executable, str(script)],
        cwd=tmp_path, env={**os.environ, "COLUMNS": "200"}, capture_output=True, text=True,
        timeout=600, check=False,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr[-2000:]
    assert "edge proposals:" in added.stderr  # the model was asked, inside discovery
    saved = json.loads((tmp_path / "data/clusters/tickets.json").read_text())
    for edge in saved["edges"]:
        assert edge["verified"] and edge["evidence"], edge
    assert all(e["target"] != "echo" for e in saved["edges"] if e["origin"] == "llm")


# name -> (package, what else to pin, arguments): mcp-server-time and mcp-server-sqlite from
# PyPI, each into its own venv (the sqlite server needs the 1.x SDK); the database path is
# relative: the sandbox work dir.
REGISTRY = {
    "time": ("mcp-server-time", [], []),
    "sqlite": ("mcp-server-sqlite", ["mcp<2"], ["--db-path", "test.db"]),
}


def _install(tmp_path: Path, name: str) -> list[str]:
    """One registry server in its own venv; skip when the registry cannot be reached. The
    venv is made without pip and filled by this interpreter's pip (``--python``): the same
    install, without bootstrapping a second pip into each venv first."""
    package, extra, args = REGISTRY[name]
    venv = tmp_path / package
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin/python"), "install", "-q",
         package, *extra],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if pip.returncode != 0:
        pytest.skip(f"PyPI unreachable or {package} failed to install: {pip.stderr[-300:]}")
    return [str(venv / "bin" / package), *args]


def _world(tmp_path: Path, name: str) -> list[str]:
    """The flags that give a server the data a user's would have: the sqlite server opens a
    copy of a small expenses database (an empty one has nothing a task could be about)."""
    if name != "sqlite":
        return []
    db = tmp_path / "expenses.db"
    with sqlite3.connect(db) as con:
        con.execute(
            "CREATE TABLE expenses (id INTEGER PRIMARY KEY, item TEXT, category TEXT, amount REAL)"
        )
        con.executemany(
            "INSERT INTO expenses (item, category, amount) VALUES (?, ?, ?)",
            [("Train to Lyon", "travel", 84.5), ("Team lunch", "meals", 126.0),
             ("Printer paper", "office", 23.9), ("Hotel Lyon", "travel", 212.0)],
        )  # fmt: skip
    return ["--copy", f"{db}:test.db", "--reset", "snapshot"]


@pytest.mark.slow
@pytest.mark.llm
def test_two_registry_servers_join_and_yield_trajectories(
    tmp_path: Path, prefect_api: dict[str, str]
) -> None:
    """Both servers installed from PyPI, added, then acted out in one `synth run` over the
    two clusters (two tasks each, as two runs of two tasks did: one run's start, planning
    and Prefect API instead of two)."""
    env = {**os.environ, **prefect_api, "COLUMNS": "200"}
    (tmp_path / "synth.toml").write_text("[llm]\nembedded_ctx = 8192\n")
    # both installs start at once (network and unpacking): the sqlite server installs while
    # the time server is added
    with ThreadPoolExecutor(max_workers=2) as pool:
        installs = {name: pool.submit(_install, tmp_path, name) for name in REGISTRY}
        for name, install in installs.items():
            cmd = install.result()
            added = subprocess.run(
                [sys.executable, "-m", "trajsynth.cli", "clusters", "add", name,
                 *_world(tmp_path, name), "--", *cmd],
                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
            )  # fmt: skip
            assert added.returncode == 0, added.stderr[-2000:]
            saved = json.loads((tmp_path / "data/clusters" / f"{name}.json").read_text())
            assert saved["probes"], name
    ran = subprocess.run(
        [sys.executable, "-m", "trajsynth.cli", "run", "--clusters", ",".join(REGISTRY),
         "--tasks", str(2 * len(REGISTRY)), "--samples", "1", "--rollout", "linear"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-3000:]
    store = Store(tmp_path / "data" / "synth.duckdb")
    per_cluster = store.query(
        "SELECT b.cluster_id, count(DISTINCT b.blueprint_id) AS tasks, "
        "count(t.trajectory_id) AS trajectories FROM blueprints b "
        "LEFT JOIN trajectories t USING (blueprint_id) GROUP BY b.cluster_id"
    )
    by_cluster = {r["cluster_id"]: r for r in per_cluster}
    assert sorted(by_cluster) == sorted(REGISTRY), per_cluster  # each server got its tasks
    for name in REGISTRY:  # a task or a rollout may fail (recorded; the run goes on), not all
        assert by_cluster[name]["trajectories"] >= 1, per_cluster


@pytest.mark.slow
async def test_copied_state_is_read_by_probes_and_restored_by_snapshots(tmp_path: Path) -> None:
    """--copy puts the user's files in the sandbox work dir (the originals never change), the
    probes read the end state, and a snapshot restores it (reset=snapshot restarts the server)."""
    tmp_path.chmod(0o755)  # the sandbox's unprivileged user reads the server, as in a venv
    script = tmp_path / "notes_server.py"
    script.write_text(NOTES_SERVER)
    seed = tmp_path / "seed"
    seed.mkdir()
    (seed / "notes.json").write_text(json.dumps({"groceries": "milk"}))
    [c] = add_outside_cluster(
        "notes", command=[sys.executable, str(script)], clusters_dir=tmp_path / "c",
        sandbox_kind="local", copies=[f"{seed / 'notes.json'}:notes.json"],
    )  # fmt: skip
    assert c.server.reset is ResetMode.SNAPSHOT  # copied files are the state
    assert [x.dest for x in c.server.copies] == ["notes.json"]
    from trajsynth.mcp_servers.environment import open_environment

    async with open_environment(c, sandbox_kind="local") as env:
        start = await env.state()
        assert start.readable
        listed = await env.call_tool("titles", {})
        assert "groceries" in listed.text
        handle = await env.snapshot()
        assert not (await env.call_tool("put", {"title": "todo", "body": "call Sam"})).is_error
        changed = await env.state()
        assert changed.state_hash != start.state_hash
        await env.restore(handle)
        assert (await env.state()).state_hash == start.state_hash
    async with open_environment(c, sandbox_kind="local") as other:
        assert (await other.state()).state_hash == start.state_hash  # same state, same hash
    assert json.loads((seed / "notes.json").read_text()) == {"groceries": "milk"}


def test_state_outside_the_sandbox_is_warned_about(tmp_path: Path) -> None:
    from trajsynth.mcp_servers.launch import state_outside_warnings

    host = ServerSpec(kind=ServerKind.STDIO, command=["srv"], on_host=True)
    assert any("--on-host-state-not-isolated" in w for w in state_outside_warnings(host))
    http = ServerSpec(kind=ServerKind.HTTP, url="http://127.0.0.1:9/mcp")
    assert any("cannot be reset" in w for w in state_outside_warnings(http))
    repo = ServerSpec(kind=ServerKind.STDIO, command=["git-mcp", str(tmp_path)])
    [warning] = state_outside_warnings(repo)
    assert str(tmp_path) in warning and "--copy" in warning
    assert state_outside_warnings(ServerSpec(kind=ServerKind.STDIO, command=["srv"])) == []


def test_a_command_the_sandbox_cannot_find_fails_at_add_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="--on-host-state-not-isolated") as info:
        add_outside_cluster(
            "ghost", command=["/no/such/bin/server"], clusters_dir=tmp_path, sandbox_kind="local"
        )
    assert "/no/such/bin/server" in str(info.value) and "--mount" in str(info.value)


def test_docker_mounts_add_node_and_refuse_what_the_container_user_cannot_reach(
    tmp_path: Path,
) -> None:
    """Docker is the default sandbox where a server can run in the container: node from the
    host's /usr/bin is mounted as a file; a venv on an interpreter under a folder others
    cannot enter (a pyenv python under /root), or a system python, keeps the local sandbox."""
    from trajsynth.mcp_servers.launch import docker_mounts

    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    script = tmp_path / "server.js"
    script.write_text("#!/usr/bin/env node\n")
    mounts, why = docker_mounts(["node", str(script)], [str(tmp_path)])
    assert why is None and str(Path(node).resolve()) in mounts and str(tmp_path) in mounts
    plain = tmp_path / "srv"
    plain.write_text("binary\n")
    plain.chmod(0o755)
    _, why = docker_mounts([str(plain)], ["/root/.pyenv/versions/3.11.7"])
    assert why is not None and "/root" in why
    _, why = docker_mounts(["/usr/bin/python3", "-m", "srv"], [])
    assert why is not None and "system folders" in why


@pytest.mark.slow
@pytest.mark.docker
def test_a_node_server_joins_in_docker_by_default(tmp_path: Path) -> None:
    """server-memory from npm, added with the default sandbox: it runs in a container (node
    and its npm prefix mounted read-only), is probed there, and every episode and every
    restored branch starts from an empty graph."""
    import asyncio

    from trajsynth.mcp_servers.environment import open_environment
    from trajsynth.mcp_servers.launch import MountedDockerSandbox

    tmp_path.chmod(0o755)
    npm = subprocess.run(
        ["npm", "install", "--silent", "--prefix", str(tmp_path / "npm"),
         "@modelcontextprotocol/server-memory"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    if npm.returncode != 0:
        pytest.skip(f"npm registry unreachable: {npm.stderr[-300:]}")
    command = ["node", str(tmp_path / "npm/node_modules/.bin/mcp-server-memory")]
    [c] = add_outside_cluster(
        "memory", command=command, clusters_dir=tmp_path / "c",
        env={"MEMORY_FILE_PATH": "/tmp/memory.jsonl"},
    )  # fmt: skip
    assert {"create_entities", "open_nodes"} <= set(c.tool_names)
    assert any(e.origin == EdgeOrigin.VALUE_FLOW for e in c.edges)

    notes = {"entities": [{"name": "notes", "entityType": "note", "observations": ["hi"]}]}

    async def graph(env: object) -> str:
        result = await env.call_tool("read_graph", {})  # type: ignore[attr-defined]
        assert result.is_error is False
        return result.text

    async def episodes() -> type:
        """The graph lives in the container's /tmp, where the server's own files are mounted
        too (pytest's tmp_path): a branch restored to the root, and the pool's next episode,
        start from an empty graph."""
        os.environ["MEMORY_FILE_PATH"] = "/tmp/memory.jsonl"
        async with open_environment(c) as env:
            root = await env.snapshot()
            assert not (await env.call_tool("create_entities", notes)).is_error
            assert "notes" in await graph(env)
            await env.restore(root)
            assert "notes" not in await graph(env)
            assert not (await env.call_tool("create_entities", notes)).is_error
            sandbox = type(env.sandbox)
        async with open_environment(c) as env:
            assert "notes" not in await graph(env)
        return sandbox

    assert asyncio.run(episodes()) is MountedDockerSandbox


def test_host_folders_in_the_command_are_copied_and_the_command_rewritten(tmp_path: Path) -> None:
    from trajsynth.mcp_servers.launch import host_folder_copies

    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    docs = tmp_path / "docs"
    docs.mkdir()
    command = [str(venv / "srv"), "--repository", str(repo), f"--root={docs}", str(venv), "."]
    rewritten, copies, fixed = host_folder_copies(command)
    assert rewritten == [str(venv / "srv"), "--repository", "repo", "--root=docs", str(venv), "."]
    assert copies == [f"{repo}:repo", f"{docs}:docs"]  # the executable's own folder stays
    assert fixed == {"repo_path": "repo"}  # a git repository: its tools take the copy
    mounted, none, _ = host_folder_copies([str(venv / "srv"), str(docs)], mounts=[str(docs)])
    assert none == [] and mounted[-1] == str(docs)  # --mount keeps it mounted


def test_discovery_that_probes_nothing_says_why_and_what_fixes_it() -> None:
    from trajsynth.mcp_servers.discovery import Discovery
    from trajsynth.mcp_servers.registry import probe_warnings
    from trajsynth.schemas import ProbeCall, ToolSpec

    tools = [
        ToolSpec(
            name="get_user",
            input_schema={"type": "object", "properties": {"user_id": {"type": "string"}},
                          "required": ["user_id"]},
        )
    ]  # fmt: skip
    stderr = "server stderr: fatal: detected dubious ownership in repository at '/r'"
    found = Discovery(tools=tools, edges=[], probes=[], arg_values={}, notes=[stderr])
    warnings = probe_warnings(found, tools)
    assert "could probe nothing" in warnings[0]
    assert any("dubious ownership" in w for w in warnings)
    assert any("--arg user_id=VALUE" in w for w in warnings)
    found.probes = [ProbeCall(tool="get_user", arguments={"user_id": "u1"})]
    assert probe_warnings(found, tools) == []
