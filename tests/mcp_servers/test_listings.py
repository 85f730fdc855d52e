"""Folder listings: a file server's own listings give discovery the paths of its files and
the folders where a task may create one (``mcp_servers.listings``), on an in-process server
shaped like server-filesystem (entries printed as ``[DIR] docs``, a tree as JSON text, every
failure an ``Error: ...`` result)."""

from __future__ import annotations

import doctest
import json
import posixpath
from typing import Any

from fakes.strangers import stranger_cluster
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

from trajsynth.mcp_servers import listings
from trajsynth.mcp_servers.listings import listed_dirs

State = dict[str, Any]


def files() -> tuple[MCPServer, State]:
    """Files under ``/srv``; relative paths are read from there."""
    state: State = {
        "dirs": {"/srv", "/srv/docs"},
        "files": {"/srv/docs/meeting.txt": "Meeting at 10am", "/srv/docs/todo.txt": "milk"},
    }
    server = MCPServer("files")
    read = ToolAnnotations(readOnlyHint=True)  # annotated, as server-filesystem's tools are

    def where(path: str) -> str:
        full = posixpath.normpath(path if path.startswith("/") else f"/srv/{path}")
        return full if full == "/srv" or full.startswith("/srv/") else "/denied"

    def children(folder: str) -> list[tuple[str, bool]]:
        names = [(p, True) for p in state["dirs"] if posixpath.dirname(p) == folder != p]
        names += [(p, False) for p in state["files"] if posixpath.dirname(p) == folder]
        return sorted((posixpath.basename(p), d) for p, d in names)

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
        return "\n".join(f"[{'DIR' if d else 'FILE'}] {n}" for n, d in children(folder))

    @server.tool(annotations=read)
    def directory_tree(path: str) -> str:
        """A directory's tree as JSON."""
        folder = where(path)
        if folder not in state["dirs"]:
            return f"Error: ENOENT: no such directory, scandir '{folder}'"

        def tree(f: str) -> list[dict]:
            return [
                {"name": n, "type": "directory", "children": tree(f"{f}/{n}")}
                if d
                else {"name": n, "type": "file"}
                for n, d in children(f)
            ]

        return json.dumps(tree(folder), indent=2)

    @server.tool(annotations=read)
    def read_text_file(path: str) -> str:
        """A file's text."""
        full = where(path)
        if full not in state["files"]:
            return f"Error: ENOENT: no such file or directory, open '{full}'"
        return state["files"][full]

    @server.tool(annotations=read)
    def read_multiple_files(paths: list[str]) -> dict:
        """Several files' texts; a missing one is reported in its place."""
        out = []
        for path in paths:
            full = where(path)
            text = state["files"].get(full)
            out.append(f"{path}: Error - ENOENT: no such file, open '{path}'" if text is None
                       else f"{path}:\n{text}")  # fmt: skip
        return {"content": "\n---\n".join(out)}  # server-filesystem's structured answer

    @server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True))
    def write_file(path: str, content: str) -> str:
        """Create a new file or completely overwrite an existing file with new content."""
        full = where(path)
        if posixpath.dirname(full) not in state["dirs"]:
            return f"Error: ENOENT: no such file or directory, open '{full}'"
        state["files"][full] = content
        return f"Successfully wrote to {path}"

    return server, state


def test_the_doctests() -> None:
    assert doctest.testmod(listings).failed == 0


async def test_discovery_joins_a_listing_with_the_folder_it_listed() -> None:
    """Before, the listing tools were called with a guess (``notes.txt``), failed, and the
    files of ``docs/`` were never a value: every write task lacked a path."""
    cluster = await stranger_cluster("files", files)
    reads = cluster.arg_values.get("read_text_file", {}).get("path", [])
    assert "/srv/docs/meeting.txt" in reads and "/srv/docs/todo.txt" in reads
    # the folders the server's own listings name, each listed by the tool that named it
    assert "/srv/docs" in listed_dirs(cluster)
    # control: a listing's bare names are not paths (``meeting.txt`` names no file here)
    every = [v for params in cluster.arg_values.values() for vs in params.values() for v in vs]
    assert "meeting.txt" not in every and ["meeting.txt"] not in every
    # control: a guess quoted back inside a successful answer is no value of the world
    assert not [v for v in every if "ENOENT" in str(v)], every
    # control: a folder no listing named is never a listed folder
    assert all(d.startswith("/srv") for d in listed_dirs(cluster))
