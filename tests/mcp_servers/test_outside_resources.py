"""A real outside server's MCP resources as end-state probes: joined as a run starts it
(a stdio process in the local sandbox), its memo resource becomes a probe, its clock resource
does not, and the Environment's end state sees a write that changes only the memo."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from trajsynth.mcp_servers.registry import add_outside_cluster

MEMO_SERVER = textwrap.dedent(
    """
    import pathlib, time
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("memo")
    MEMO = pathlib.Path("memo.txt")

    @server.tool()
    def append_insight(insight: str) -> str:
        \"\"\"Add a business insight to the memo.\"\"\"
        with MEMO.open("a") as f:
            f.write(f"- {insight}\\n")
        return "Insight added to memo"

    @server.tool()
    def list_tables() -> str:
        \"\"\"List all tables.\"\"\"
        return "orders"

    @server.resource("memo://insights")
    def insights() -> str:
        \"\"\"The insights memo.\"\"\"
        return MEMO.read_text() if MEMO.exists() else "No insights yet."

    @server.resource("clock://now")
    def now() -> str:
        \"\"\"The clock in nanoseconds.\"\"\"
        return str(time.time_ns())

    server.run()
    """
)


@pytest.mark.slow
async def test_a_memo_resource_is_a_probe_and_its_write_moves_the_end_state(
    tmp_path: Path,
) -> None:
    tmp_path.chmod(0o755)  # the sandbox's unprivileged user reads the server, as in a venv
    script = tmp_path / "memo_server.py"
    script.write_text(MEMO_SERVER)
    [c] = add_outside_cluster(
        "memo", command=[sys.executable, str(script)], clusters_dir=tmp_path / "c",
        sandbox_kind="local",
    )  # fmt: skip
    assert [p.resource for p in c.probes if p.resource] == ["memo://insights"]
    [insight] = [t for t in c.tools if t.name == "append_insight"]
    assert insight.access_source == "probe", insight.access_evidence
    from trajsynth.mcp_servers.environment import open_environment

    async with open_environment(c, sandbox_kind="local") as env:
        assert await env.list_resources() == ["clock://now", "memo://insights"]
        start = await env.state()
        handle = await env.snapshot()
        await env.call_tool("append_insight", {"insight": "Orders doubled in May"})
        gold = await env.state()
        assert gold.state_hash != start.state_hash
        [row] = [r for k, v in gold.tables.items() if k.endswith(":memo://insights") for r in v]
        assert "Orders doubled in May" in str(row["result"])
        await env.restore(handle)
        await env.call_tool("append_insight", {"insight": "Orders halved in May"})
        assert (await env.state()).state_hash not in (start.state_hash, gold.state_hash)
