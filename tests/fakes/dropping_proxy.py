"""A stdio pass-through in front of an MCP server that drops the connection on its first
``N`` ``tools/call`` requests: the server is killed and the pipe closes before any answer.

``python dropping_proxy.py COUNTER N -- SERVER_ARGV...``. Drops are counted in the file
``COUNTER`` so that the restarted server (a new proxy) knows how many happened.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def main() -> None:
    counter, drops, argv = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[4:]
    # the server answers straight to our stdout; we only watch what is sent to it
    server = subprocess.Popen(argv, stdin=subprocess.PIPE)
    assert server.stdin is not None
    for line in sys.stdin.buffer:
        if b'"tools/call"' in line:
            seen = len(counter.read_text().splitlines()) if counter.exists() else 0
            if seen < drops:
                counter.write_text("dropped\n" * (seen + 1))
                server.kill()
                os._exit(1)
        server.stdin.write(line)
        server.stdin.flush()
    server.stdin.close()
    sys.exit(server.wait())


if __name__ == "__main__":
    main()
