"""``servers._stdio.serve_stdio``: the bundled servers' stdio loop, read and written by the event
loop instead of worker threads. What the SDK's own ``run("stdio")`` guarantees still holds: a
tool's stray print or stdin read never touches the wire, a line is read whole however long,
the end of stdin ends the server, and a tool that crashes is logged (as plain lines, not
rich's table); a tool error, the model's mistake, is not. Where stdin is not a pipe it falls
back to the SDK's loop."""

from __future__ import annotations

import importlib
import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import TextContent

SERVER = '''
import sys
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from trajsynth.mcp_servers.servers._stdio import serve_stdio

server = MCPServer("noisy")

@server.tool()
def echo_length(text: str) -> int:
    """Print to stdout, read stdin (both kept off the wire), return the text's length."""
    print("stray output of a tool")
    sys.stdout.flush()
    assert sys.stdin.read() == ""
    return len(text)

@server.tool()
def fail() -> str:
    """A tool error."""
    raise ToolError("no such thing")

@server.tool()
def crash() -> str:
    """A bug in the tool."""
    raise KeyError("the bug")

serve_stdio(server)
'''


def _script(tmp_path: Path) -> Path:
    path = tmp_path / "noisy_server.py"
    path.write_text(SERVER)
    return path


@pytest.mark.slow
async def test_serves_over_pipes_and_keeps_the_wire_clean(tmp_path: Path) -> None:
    params = StdioServerParameters(command=sys.executable, args=[str(_script(tmp_path))])
    errlog_path = tmp_path / "server.log"
    with errlog_path.open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write, read_timeout_seconds=30) as session,
        ):
            await session.initialize()
            text = "x" * 300_000  # one JSON line well past asyncio's default 64 KiB line limit
            result = await session.call_tool("echo_length", {"text": text})
            assert not result.is_error, result.content
            assert result.structured_content == {"result": len(text)}
            failed = await session.call_tool("fail", {})
            assert failed.is_error
            assert isinstance(failed.content[0], TextContent)
            assert failed.content[0].text == "Error executing tool fail: no such thing"
            crashed = await session.call_tool("crash", {})
            assert crashed.is_error
            # the session still works after the stray print: nothing else reached the wire
            again = await session.call_tool("echo_length", {"text": "abc"})
            assert again.structured_content == {"result": 3}
    log = errlog_path.read_text()
    assert "stray output of a tool" in log  # a print goes to stderr
    assert "no such thing" not in log  # the model's mistake: in the result, not logged
    # the server's fault is logged, as plain lines (not rich's table)
    assert "Tool 'crash' raised an unexpected exception" in log and "KeyError: 'the bug'" in log
    assert "─" not in log and "ERROR" not in log


@pytest.mark.slow
def test_falls_back_to_the_sdk_loop_when_stdin_is_a_file(tmp_path: Path) -> None:
    # the event loop cannot watch a regular file: the SDK's threaded loop serves it
    initialize = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"}}}  # fmt: skip
    stdin = tmp_path / "requests.jsonl"
    stdin.write_text(json.dumps(initialize) + "\n")
    with stdin.open("rb") as fin:
        done = subprocess.run(
            [sys.executable, str(_script(tmp_path))],
            stdin=fin,
            capture_output=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    answer = json.loads(done.stdout.decode().splitlines()[0])
    assert answer["id"] == 0 and answer["result"]["serverInfo"]["name"] == "noisy"


@pytest.mark.parametrize("name", ["calendar", "shop", "travel"])
async def test_sqlite_cluster_tools_run_on_the_event_loop(name: str) -> None:
    # a plain `def` tool would run on a worker thread: a hop each way (servers/__init__.py)
    module = importlib.import_module(f"trajsynth.mcp_servers.servers.{name}.server")
    for tool in await module.server.list_tools():
        assert inspect.iscoroutinefunction(getattr(module, tool.name)), tool.name
