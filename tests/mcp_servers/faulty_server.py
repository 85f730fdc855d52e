"""A tiny stdio MCP server with faults on demand, for the environment tests.

State lives in memory (an outside server whose state cannot be read): ``add_item`` writes,
``list_items`` reads, ``hang`` blocks the whole server, ``die`` kills it, ``fail`` is a tool
error. It imports only ``mcp`` so it runs inside the Docker sandbox too.
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
def fail(reason: str) -> str:
    """A domain error the policy should see."""
    raise ToolError(f"refused: {reason}")


if __name__ == "__main__":
    server.run("stdio")
