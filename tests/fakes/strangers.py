"""Servers nobody here wrote, as the outside-server issue met them, run in this process.

Each is the mcp SDK's high-level ``MCPServer`` whose state is a dict (so a snapshot is a deep
copy): ``gorilla`` reports every failure as an ``{"error": ...}`` result with ``isError`` unset
(a file system and a social feed); ``retail`` is a back office with two harness controls
(``reset_state``, ``get_call_log``), a call log that grows on every call, and a ``state_key``
parameter that sends a call to another namespace; ``repo`` creates branches by name (no read
lists them; ``listed_repo`` adds the listing).

``StrangerEnvironment`` is the Environment interface over one of them: results go through the
product's own ``tool_result`` (the same reading of error results as a run), the end state is
read through the cluster's probes with the product's ``probe_value`` (a resource probe over an
in-process MCP session, with the product's ``read_resource_result``), and injected parameters
(``ToolSpec.injected``) are added as the real environment adds them.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Mapping
from typing import Any

from mcp.client.client import Client
from mcp.server.mcpserver import MCPServer

from trajsynth.mcp_servers.environment.results import (
    ToolResult,
    probe_value,
    read_resource_result,
    static_resources,
    tool_result,
)
from trajsynth.mcp_servers.registry import tool_spec
from trajsynth.schemas import (
    EnvState,
    JsonValue,
    ProbeCall,
    ServerKind,
    ServerSpec,
    SnapshotHandle,
    ToolCluster,
    ToolSpec,
    canonical_json,
    stable_hash,
)

__all__ = [
    "StrangerEnvironment",
    "gorilla",
    "listed_repo",
    "notebook",
    "repo",
    "retail",
    "shelf",
    "sized_files",
    "stranger_cluster",
    "tables",
]

State = dict[str, Any]


def gorilla() -> tuple[MCPServer, State]:
    state: State = {
        "files": {"notes.txt": "call Sam", "budget.csv": "a,b"},
        "user": None,
        "tweets": [],
    }
    server = MCPServer("gorilla")

    @server.tool()
    def ls() -> dict:
        """List the files of the current directory."""
        return {"current_directory_content": sorted(state["files"])}

    @server.tool()
    def cat(file_name: str) -> dict:
        """Show a file's content."""
        if file_name not in state["files"]:
            return {"error": f"cat: {file_name}: No such file or directory"}
        return {"file_content": state["files"][file_name]}

    @server.tool()
    def mv(source: str, destination: str) -> dict:
        """Move a file."""
        if source not in state["files"]:
            return {"error": f"mv: cannot move '{source}': No such file or directory"}
        state["files"][destination] = state["files"].pop(source)
        return {"result": f"'{source}' moved to '{destination}'"}

    @server.tool()
    def authenticate_twitter(username: str, password: str) -> dict:
        """Log in to the social feed."""
        if (username, password) != ("sam", "hunter2"):
            return {"error": "Authentication failed"}
        state["user"] = username
        return {"authentication_status": True}

    @server.tool()
    def post_tweet(content: str) -> dict:
        """Post a message to the feed."""
        if state["user"] is None:
            return {"error": "User not authenticated. Please authenticate before posting."}
        state["tweets"].append({"id": len(state["tweets"]), "content": content})
        return {"id": len(state["tweets"]) - 1, "content": content}

    @server.tool()
    def comment(tweet_id: int, comment_content: str) -> dict:
        """Comment on a message."""
        if state["user"] is None:
            return {"error": "User not authenticated. Please authenticate before commenting."}
        return {"comment_status": "Comment added successfully"}

    return server, state


def retail() -> tuple[MCPServer, State]:
    state: State = {
        "users": {"u_alice": {"city": "Austin"}, "u_bob": {"city": "Boston"}},
        "scratch": {},
        "log": [],
    }
    initial = copy.deepcopy(state["users"])
    server = MCPServer("retail")

    def space(state_key: str | None) -> dict:
        return state["users"] if not state_key else state["scratch"].setdefault(state_key, {})

    @server.tool()
    def list_users(state_key: str | None = None) -> dict:
        """The customers on file."""
        state["log"].append("list_users")
        return {"user_ids": sorted(space(state_key))}

    @server.tool()
    def get_user_details(user_id: str, state_key: str | None = None) -> dict:
        """A customer's record."""
        state["log"].append("get_user_details")
        users = space(state_key)
        if user_id not in users:
            return {"error": f"user {user_id} not found"}
        return {"user_id": user_id, **users[user_id]}

    @server.tool()
    def update_address(user_id: str, city: str, state_key: str | None = None) -> dict:
        """Change a customer's city."""
        state["log"].append("update_address")
        users = space(state_key)
        if user_id not in users:
            return {"error": f"user {user_id} not found"}
        users[user_id]["city"] = city
        return {"user_id": user_id, "city": city}

    @server.tool()
    def reset_state() -> dict:
        """Harness: put the data back as it started."""
        state["users"] = copy.deepcopy(initial)
        state["log"].clear()
        return {"reset": True}

    @server.tool()
    def get_call_log() -> dict:
        """Harness: every call made so far."""
        return {"calls": list(state["log"])}

    return server, state


def repo() -> tuple[MCPServer, State]:
    state: State = {"branches": ["main"], "head": "main"}
    server = MCPServer("repo")

    @server.tool()
    def git_status() -> str:
        """The working tree's status."""
        return f"On branch {state['head']}\nnothing to commit, working tree clean"

    @server.tool()
    def git_create_branch(branch_name: str, base_branch: str = "main") -> str:
        """Create a branch."""
        if branch_name in state["branches"]:
            return f"Error: a branch named '{branch_name}' already exists"
        state["branches"].append(branch_name)
        return f"Created branch '{branch_name}' from '{base_branch}'"

    @server.tool()
    def git_checkout(branch_name: str) -> str:
        """Switch branches."""
        if branch_name not in state["branches"]:
            return f"Error: pathspec '{branch_name}' did not match any branch"
        state["head"] = branch_name
        return f"Switched to branch '{branch_name}'"

    return server, state


def listed_repo() -> tuple[MCPServer, State]:
    """``repo`` with a read that lists the branches (mcp-server-git's ``git_branch``): a
    branch created is seen by the end state, so a branch task is one a final-state check
    holds (``repo`` alone has no such read: its branch writes are no task's target)."""
    server, state = repo()

    @server.tool()
    def git_branch() -> str:
        """List the branches."""
        return "\n".join(("* " if b == state["head"] else "  ") + b for b in state["branches"])

    return server, state


def notebook() -> tuple[MCPServer, State]:
    """A knowledge graph like server-memory, with no read that lists it all: its entities are
    seen only by name (``open_nodes``) or by a search."""
    state: State = {"entities": {"Ada Lovelace": {"type": "person", "notes": ["mathematician"]}}}
    server = MCPServer("notebook")

    @server.tool()
    def create_entities(entities: list[dict[str, Any]]) -> dict:
        """Create entities in the knowledge graph."""
        made = []
        for e in entities:
            name = str(e.get("name", ""))
            if name and name not in state["entities"]:
                state["entities"][name] = {
                    "type": str(e.get("entityType", "")),
                    "notes": list(e.get("observations") or []),
                }
                made.append(name)
        return {"created": made}

    @server.tool()
    def open_nodes(names: list[str]) -> dict:
        """The entities with these names."""
        found = [{"name": n, **state["entities"][n]} for n in names if n in state["entities"]]
        return {"entities": found}

    @server.tool()
    def search_nodes(query: str) -> dict:
        """Entities whose name holds the query."""
        return {"names": sorted(n for n in state["entities"] if query.lower() in n.lower())}

    return server, state


def tables() -> tuple[MCPServer, State]:
    """A database like server-sqlite: a table a probe creates has columns a read then lists,
    and a table that does not exist is described as having none (no error)."""
    state: State = {"tables": {"orders": ["order_id", "total"]}}
    server = MCPServer("tables")

    @server.tool()
    def list_tables() -> dict:
        """The tables of the database."""
        return {"tables": [{"name": n} for n in sorted(state["tables"])]}

    @server.tool()
    def describe_table(table_name: str) -> dict:
        """A table's columns."""
        return {"columns": [{"name": c} for c in state["tables"].get(table_name, [])]}

    @server.tool()
    def create_table(name: str) -> dict:
        """Create a table with an id and a body."""
        state["tables"].setdefault(name, ["id", "body"])
        return {"created": name}

    return server, state


def sized_files() -> tuple[MCPServer, State]:
    """A file store whose listing shows names and sizes: a write of another text of the same
    length lists the same."""
    state: State = {"files": {"meeting.txt": "Meeting at 10am with Sam."}}
    server = MCPServer("sized")

    @server.tool()
    def list_files() -> dict:
        """List the files with their sizes."""
        return {"files": [{"name": n, "size": len(t)} for n, t in sorted(state["files"].items())]}

    @server.tool()
    def write_file(path: str, content: str) -> dict:
        """Create or overwrite a file."""
        state["files"][path] = content
        return {"result": f"Successfully wrote to {path}"}

    return server, state


def shelf() -> tuple[MCPServer, State]:
    """Like server-filesystem: two reads of a file's text (one of several files at once), and
    reads that name the file without its text. A missing file answers ``Error: ENOENT``."""
    state: State = {
        "files": {"docs/groceries.txt": "milk\neggs\nbread\n", "docs/meeting.txt": "At 10am."}
    }
    server = MCPServer("shelf")

    def missing(path: str) -> str:
        return f"Error: ENOENT: no such file or directory, open '{path}'"

    @server.tool()
    def read_multiple_files(paths: list[str]) -> str:
        """Read the contents of several files at once."""
        return "\n---\n".join(f"{p}:\n{state['files'].get(p) or missing(p)}" for p in paths)

    @server.tool()
    def read_text_file(path: str) -> str:
        """Read the complete contents of a file as text."""
        return state["files"].get(path) or missing(path)

    @server.tool()
    def get_file_info(path: str) -> str:
        """Size and name of a file."""
        if path not in state["files"]:
            return missing(path)
        return f"name: {path.rsplit('/', 1)[-1]}\nsize: {len(state['files'][path])}"

    @server.tool()
    def list_directory(path: str) -> str:
        """List the files in a folder."""
        return "\n".join(f"[FILE] {p}" for p in sorted(state["files"]) if p.startswith(path))

    return server, state


class StrangerEnvironment:
    """The Environment interface over an in-process stranger (module doc)."""

    def __init__(
        self, make: Callable[[], tuple[MCPServer, State]], cluster: ToolCluster | None = None
    ) -> None:
        self.server, self.data = make()
        self.cluster = cluster
        self.sandbox = None  # discovery's file view finds no sandbox: read results only
        self._snapshots: dict[str, State] = {}
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def __aenter__(self) -> StrangerEnvironment:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def list_specs(self) -> list[ToolSpec]:
        return [tool_spec(t) for t in await self.server.list_tools()]

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | None) -> ToolResult:
        args = dict(arguments or {})
        if self.cluster is not None:
            with contextlib.suppress(KeyError):
                args.update(self.cluster.tool(name).injected)
        self.calls.append((name, args))
        return tool_result(await self.server.call_tool(name, args))

    async def state(self) -> EnvState:
        if self.cluster is None or not self.cluster.probes:
            return EnvState(state_hash=stable_hash(self.calls), readable=False)
        return await self.read_probes(self.cluster.probes)

    async def list_resources(self) -> list[str]:
        """The product's listing of static resources, over an in-process MCP session."""
        async with Client(self.server) as client:
            return await static_resources(client.session)

    async def read_probes(self, probes: list[ProbeCall]) -> EnvState:
        tables: dict[str, list[dict[str, JsonValue]]] = {}
        for i, probe in enumerate(probes):
            if probe.resource is not None:
                async with Client(self.server) as client:
                    result = await read_resource_result(client.session, probe.resource)
            else:
                result = await self.call_tool(probe.tool, dict(probe.arguments))
            tables[f"probe{i}:{probe.label}"] = [
                {
                    "arguments": canonical_json(probe.arguments),
                    "is_error": result.is_error,
                    "result": probe_value(result),
                }
            ]
        return EnvState(state_hash=stable_hash(tables, length=64), tables=tables, readable=True)

    async def snapshot(self) -> SnapshotHandle:
        snapshot_id = f"snap{len(self._snapshots)}"
        self._snapshots[snapshot_id] = copy.deepcopy(self.data)
        return SnapshotHandle(snapshot_id=snapshot_id, sandbox_id="stranger")

    async def restore(self, handle: SnapshotHandle) -> None:
        saved = copy.deepcopy(self._snapshots[handle.snapshot_id])
        self.data.clear()
        self.data.update(saved)


async def stranger_cluster(
    name: str,
    make: Callable[[], tuple[MCPServer, State]],
    *,
    hide: list[str] | None = None,
    hide_params: list[str] | None = None,
    args: dict[str, JsonValue] | None = None,
) -> ToolCluster:
    """The cluster ``clusters add`` would save for the stranger: the product's hiding
    (``visible_tools``) and discovery (tags, values, probes) on a fresh instance."""
    from trajsynth.mcp_servers.discovery import discover
    from trajsynth.mcp_servers.hidden import visible_tools

    server = ServerSpec(
        kind=ServerKind.STDIO,
        command=[name],
        args=dict(args or {}),
        hidden_params=sorted(hide_params or []),
    )
    env = StrangerEnvironment(make)
    shown, hidden = visible_tools(
        await env.list_specs(),
        hide=hide or (),
        hide_params=server.hidden_params,
        fixed=server.args,
    )
    server = server.model_copy(update={"hidden_tools": sorted(hidden)})
    provisional = ToolCluster(
        cluster_id=name, domain="other", server=server, tools=shown, source="outside"
    )
    env.cluster = provisional
    found = await discover(env, shown, fixed=server.args)
    return provisional.model_copy(
        update={
            "tools": found.tools,
            "edges": found.edges,
            "probes": found.probes,
            "arg_values": found.arg_values,
            "state_readable": bool(found.probes),
        }
    )
