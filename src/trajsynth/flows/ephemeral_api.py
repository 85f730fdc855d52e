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

A new home's database starts as a copy of a migrated template (:mod:`trajsynth.flows.prefect_db`),
and the first new home without one saves it. ``--template`` only saves the template, from a
throw-away home, and exits (``make setup`` runs it).
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import tempfile
from typing import Any

__all__ = ["CONFIGURED", "SERVER_ENV", "main"]

CONFIGURED = "configured"
# what SubprocessASGIServer._run_uvicorn_command sets (prefect 3.8.8)
SERVER_ENV = {
    "PREFECT_UI_ENABLED": "0",
    "PREFECT__SERVER_EPHEMERAL": "1",
    "PREFECT__SERVER_FINAL": "1",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    os.environ.update(SERVER_ENV)
    if argv == ["--template"]:
        return save_template_from_scratch()
    from prefect.settings import PREFECT_API_URL

    if PREFECT_API_URL.value():
        print(CONFIGURED, flush=True)
        return 0
    sock = listening_socket()  # bound before the URL is printed: no port race
    print(f"http://127.0.0.1:{sock.getsockname()[1]}/api", flush=True)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # nobody reads our stdout any more

    import uvicorn

    config = uvicorn.Config(_app(), log_level="error", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])
    return 0


def listening_socket(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A TCP socket bound to ``host:port`` (0: a free port) for uvicorn's ``sockets=``.

    Made with ``IPPROTO_TCP`` named: asyncio sets ``TCP_NODELAY`` on an accepted connection
    only when the socket's protocol says TCP, and a plain ``socket.socket()`` says 0. Without
    it, every answer after the first on a kept-alive connection waited about 45 ms for the
    client's delayed ACK (Prefect's client keeps its connection: each API call of a run paid it).
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


def _app() -> Any:
    """Prefect's app; a new home's database seeded from the template, or saved as it."""
    from prefect.server.api.server import create_app

    from trajsynth.flows.prefect_db import home_database, seed_database, with_template

    db = home_database()
    app = create_app()
    if db is not None and not seed_database(db) and not db.exists():
        app.router.lifespan_context = with_template(app.router.lifespan_context, db)
    return app


def save_template_from_scratch() -> int:
    """Migrate a database in a throw-away home and save it as the template."""
    with tempfile.TemporaryDirectory(prefix="trajsynth-prefect-") as home:
        os.environ["PREFECT_HOME"] = home
        for key in (
            "PREFECT_API_DATABASE_CONNECTION_URL",
            "PREFECT_SERVER_DATABASE_CONNECTION_URL",
        ):
            os.environ.pop(key, None)
        from prefect.server.database import provide_database_interface
        from prefect.server.models.block_registration import run_block_auto_registration

        from trajsynth.flows.prefect_db import home_database, save_template

        db = home_database()
        if db is None:
            print("Prefect's settings name a database that is not a SQLite file: no template")
            return 0

        async def start_up() -> None:
            # what the app's lifespan does before it starts its services
            interface = provide_database_interface()
            await interface.create_db()
            async with await interface.session() as session:
                await run_block_auto_registration(session=session)
            print(f"Prefect database template: {save_template(db)}")

        asyncio.run(start_up())
    return 0


if __name__ == "__main__":
    sys.exit(main())
