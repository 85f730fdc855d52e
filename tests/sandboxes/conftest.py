"""Fixtures for the sandbox tests. The Docker ones build the image the first time (minutes)."""

from __future__ import annotations

import pytest

from trajsynth.sandboxes import DockerSandbox, ensure_image
from trajsynth.schemas import SandboxLimits

ECHO_SERVER = '''\
import os
from mcp.server.mcpserver import MCPServer

server = MCPServer(name="notes")


@server.tool()
def note(text: str) -> str:
    """Append a line to notes.txt in the work directory and return the whole file."""
    path = os.path.join(os.environ["TRAJSYNTH_WORKDIR"], "notes.txt")
    with open(path, "a") as fh:
        fh.write(text + "\\n")
    with open(path) as fh:
        return fh.read()


if __name__ == "__main__":
    server.run()
'''


@pytest.fixture
def notes_server() -> bytes:
    """A tiny stdio MCP server (mcp SDK) that keeps its state in the work directory."""
    return ECHO_SERVER.encode()


@pytest.fixture(scope="session")
def sandbox_image() -> str:
    return ensure_image()


@pytest.fixture
def docker_sandbox(sandbox_image: str):
    with DockerSandbox(
        SandboxLimits(memory_mb=128, pids=64, timeout_s=20), image=sandbox_image
    ) as sb:
        yield sb
