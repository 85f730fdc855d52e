"""The bundled business clusters, each a real MCP server on the SDK's ``MCPServer``.

``shop`` (retail), ``travel``, ``calendar`` (calendar and email) and ``code`` (a Python
interpreter with a work directory). Each module exposes ``CLUSTER_META``, ``server`` and
``STORE`` and runs as ``python -m trajsynth.mcp_servers.servers.<name>`` over stdio. Importing
this package imports no server (they load on demand with ``load_server``).
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["BUNDLED", "load_server", "server_module"]

BUNDLED = ("shop", "travel", "calendar", "code")


def server_module(name: str) -> str:
    """The dotted module path that serves bundled cluster ``name``."""
    if name not in BUNDLED:
        raise ValueError(f"unknown bundled cluster '{name}'; expected one of {', '.join(BUNDLED)}")
    return f"{__name__}.{name}"


def load_server(name: str) -> ModuleType:
    """Import the server module of bundled cluster ``name`` (``CLUSTER_META``, ``server``)."""
    return importlib.import_module(server_module(name))
