"""Killing a sandbox's bundled code MCP server from outside the code tool, as a program
that got past its guard would: what the environment's fault handling is tested against."""

from __future__ import annotations

import subprocess
import sys

from trajsynth.sandboxes import DockerSandbox, Sandbox

__all__ = ["kill_code_server"]


def kill_code_server(sb: Sandbox) -> None:
    """SIGKILL the sandbox's code MCP server from outside the code tool: what a program
    that got past the guard would do (the attribution does not depend on how)."""
    scan = (
        "import os, signal, sys\n"
        "for pid in os.listdir('/proc'):\n"
        "    if not pid.isdigit() or int(pid) == os.getpid():\n"
        "        continue\n"
        "    try:\n"
        "        cmd = open(f'/proc/{pid}/cmdline', 'rb').read().replace(b'\\0', b' ')\n"
        "    except OSError:\n"
        "        continue\n"
        "    if all(m.encode() in cmd for m in sys.argv[1:]):\n"
        "        os.kill(int(pid), signal.SIGKILL)\n"
        "        print(pid)\n"
    )
    if isinstance(sb, DockerSandbox):  # the agent's commands are not guarded
        res = sb.exec([sb.python, "-c", scan, "trajsynth.mcp_servers.servers.code"])
    else:  # the server's bubblewrap, on the host: its command line names this work dir
        res = subprocess.run(  # type: ignore[assignment]
            [sys.executable, "-c", scan, "trajsynth.mcp_servers.servers.code", sb.workdir],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
    assert res.stdout.strip(), "no code server found to kill"
