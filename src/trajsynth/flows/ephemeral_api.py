"""Prefect's API server for one command, started before the command itself imports Prefect.

    python -m trajsynth.flows.ephemeral_api

Reads Prefect's settings as the command would (same environment, same working directory, same
profiles). When they name an API (``PREFECT_API_URL`` from a profile, ``prefect.toml``, ...)
it prints ``configured`` and exits. Otherwise it binds a free port on 127.0.0.1, prints the API
URL on one line, and serves Prefect's app until terminated, as Prefect's own ephemeral server
(``SubprocessASGIServer``) does: ``prefect.server.api.server:create_app`` under uvicorn, with
the UI off and the server marked ephemeral.

Why a process of our own: Prefect starts its ephemeral server only when a client first needs
it, after the command has imported Prefect and its server module (3 s here), and then waits
for it (another 3.5 s). Started first, the server boots on the other core while the command
imports, and the command talks to it as to a configured server, so it never imports Prefect's
server module at all (:func:`trajsynth.flows.api.start_api`).
"""

from __future__ import annotations

import os
import socket
import sys

__all__ = ["CONFIGURED", "SERVER_ENV", "main"]

CONFIGURED = "configured"
# what SubprocessASGIServer._run_uvicorn_command sets (prefect 3.8.8)
SERVER_ENV = {
    "PREFECT_UI_ENABLED": "0",
    "PREFECT__SERVER_EPHEMERAL": "1",
    "PREFECT__SERVER_FINAL": "1",
}


def main() -> int:
    os.environ.update(SERVER_ENV)
    from prefect.settings import PREFECT_API_URL

    if PREFECT_API_URL.value():
        print(CONFIGURED, flush=True)
        return 0
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))  # bound before the URL is printed: no port race
    print(f"http://127.0.0.1:{sock.getsockname()[1]}/api", flush=True)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # nobody reads our stdout any more

    import uvicorn

    config = uvicorn.Config(
        "prefect.server.api.server:create_app", factory=True, log_level="error", lifespan="on"
    )
    uvicorn.Server(config).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
