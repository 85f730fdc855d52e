"""One rollout environment: an MCP server process inside a sandbox, and its state.

docs/design.md §3 ("the tool executor"): one server process per environment, spoken to over
stdio with the SDK's ``ClientSession`` (through ``Sandbox.stdio_command``, e.g. ``docker exec
-i``). Every call has a timeout. A server that hangs or dies is restarted and the call raises
``MCPServerError`` (an ``infra`` failure, never blamed on the policy); a tool's own error comes
back as ``ToolResult(is_error=True)`` (a ``tool`` failure the policy sees; docs/style.md §3).

``Environment`` (``facade``) is the one door, whatever the server: its life (start, restart,
close), the calls and their tries, checks, and the sandbox. What differs by server kind is one
side object of it: ``bundled.BundledServer`` (a bundled cluster: ``python -m`` of our package in
the sandbox, its state served or dumped from the work directory, snapshots the sandbox's) or
``outside.OutsideServer`` (an outside server: the user's command, a URL or the host; its state
read through probe calls; reset by snapshot or by replaying writes). ``results`` reads what a
server answered, and ``opening`` opens an environment in a sandbox. Without a readable state,
``state()`` is ``readable=False`` with the hash of the successful writes.
"""

from trajsynth.mcp_servers.environment.bundled import STATE_MODULE
from trajsynth.mcp_servers.environment.facade import Environment
from trajsynth.mcp_servers.environment.opening import OpenEnvironment, open_environment
from trajsynth.mcp_servers.environment.results import (
    ToolResult,
    read_resource_result,
    static_resources,
    tool_result,
)

__all__ = [
    "STATE_MODULE",
    "Environment",
    "OpenEnvironment",
    "ToolResult",
    "open_environment",
    "read_resource_result",
    "static_resources",
    "tool_result",
]
