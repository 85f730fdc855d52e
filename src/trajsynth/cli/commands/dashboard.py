"""`synth dashboard`: the web page over the store, served on loopback until Ctrl-C.

The command checks its arguments, then replaces itself with the Streamlit server (``execv``).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from trajsynth.cli.context import current_settings
from trajsynth.dashboards.server import dashboard_command
from trajsynth.schemas import InputError

__all__ = ["dashboard"]

console = Console()


def dashboard(
    store_path: Annotated[
        Path | None, typer.Option("--store", help="DuckDB store (default: settings)")
    ] = None,
    port: Annotated[int, typer.Option("--port", help="TCP port on 127.0.0.1")] = 8501,
    host: Annotated[
        str, typer.Option("--host", help="address to bind; keep loopback unless you mean it")
    ] = "127.0.0.1",
) -> None:
    """Serve the dashboard (runs, diversity per round, pass rates, cost, trees) on loopback.

    It reads the store read-only, one short connection per query, so it works while a run
    writes.
    """
    if store_path is None:
        store_path = current_settings().store_path
    if not 0 < port < 65536:
        raise InputError(f"--port {port} is not a TCP port")
    if importlib.util.find_spec("streamlit") is None:
        raise InputError('the dashboard needs streamlit: pip install -e ".[dashboard]"')
    if not store_path.exists():
        raise InputError(f"no store at {store_path} (run `synth run` first, or pass --store)")
    console.print(f"dashboard over {store_path} at http://{host}:{port}  (Ctrl-C stops it)")
    command = dashboard_command(store_path, port=port, host=host)
    # Become the server (no child left behind): Ctrl-C and SIGTERM reach Streamlit itself.
    sys.stdout.flush()
    os.execv(command[0], command)
