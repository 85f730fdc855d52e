"""A tiny stdio MCP server with faults on demand, for the environment tests.

State lives in memory (an outside server whose state cannot be read): ``add_item`` writes,
``list_items`` reads, ``hang`` blocks the whole server, ``die`` kills it, ``fail`` is a tool
error, ``flaky`` kills it the first ``failures`` times it is called (counted in a file, which
outlives the process) and then answers, ``add_then_die`` writes and then kills it. It
imports only ``mcp`` so it runs inside the Docker sandbox too.
"""

import os
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel

server = MCPServer("faulty")
ITEMS: list[str] = []


class Added(BaseModel):
    item_id: str
    count: int


@server.tool(annotations=ToolAnnotations(read_only_hint=False))
def add_item(name: str) -> Added:
    """Add an item to the in-memory list."""
    ITEMS.append(name)
    return Added(item_id=name, count=len(ITEMS))


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def list_items() -> list[str]:
    """The items added so far."""
    return list(ITEMS)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def hang(seconds: float) -> str:
    """Block the server (not just this call) for ``seconds``."""
    time.sleep(seconds)
    return "woke up"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def die() -> str:
    """Exit the server process at once."""
    os._exit(7)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def flaky(counter: str, failures: int) -> str:
    """Exit the server while ``counter`` (a file, if it exists: discovery's probes find it
    harmless) holds fewer than ``failures`` lines, adding one each time."""
    if not os.path.exists(counter):
        return "not armed"
    with open(counter, "r+") as f:
        seen = len(f.read().splitlines())
        if seen < failures:
            f.write("died\n")
            f.flush()
            os._exit(7)
    return f"answered after {seen} failures"


@server.tool(annotations=ToolAnnotations(read_only_hint=False))
def add_then_die(name: str) -> str:
    """Add an item, then exit before answering: the write may count, so it is not resent."""
    ITEMS.append(name)
    os._exit(7)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def fail(reason: str) -> str:
    """A domain error the policy should see."""
    raise ToolError(f"refused: {reason}")


if __name__ == "__main__":
    server.run("stdio")
