"""``ServerConnection``'s check of results against the tool's output schema: kept for outside
servers (the SDK's check, a broken result raises), skipped for bundled ones, whose server
validates the structured content with the model the schema comes from.

The server here speaks raw JSON-RPC, so it can send what an ``MCPServer`` never would."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trajsynth.mcp_servers.client import ServerConnection, stdio_transport

BROKEN_SERVER = r"""
import json, sys
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method = msg["method"]
    if method == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"],
                  "capabilities": {"tools": {}}, "serverInfo": {"name": "broken", "version": "0"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "count", "inputSchema": {"type": "object"},
                             "outputSchema": SCHEMA}]}
    else:
        result = {"content": [{"type": "text", "text": "{\"n\": \"many\"}"}],
                  "structuredContent": {"n": "many"}}
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
"""


async def _call(tmp_path: Path, *, check_results: bool) -> object:
    script = tmp_path / "broken_server.py"
    script.write_text(BROKEN_SERVER)
    conn = ServerConnection(
        stdio_transport([sys.executable, str(script)]),
        label="broken",
        start_timeout_s=30,
        check_results=check_results,
    )
    await conn.open()
    try:
        return await conn.session.call_tool("count", {})
    finally:
        await conn.close()


async def test_an_outside_servers_result_is_checked_against_its_output_schema(
    tmp_path: Path,
) -> None:
    with pytest.raises(RuntimeError, match="Invalid structured content returned by tool count"):
        await _call(tmp_path, check_results=True)


async def test_a_bundled_servers_result_is_left_to_the_server(tmp_path: Path) -> None:
    result = await _call(tmp_path, check_results=False)
    assert getattr(result, "structured_content", None) == {"n": "many"}
