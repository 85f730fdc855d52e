"""The bundled clusters, one folder each, and the server machinery they share.

A folder ``<name>/`` holds the whole cluster: ``server.py`` (a real MCP server on the SDK's
``MCPServer``, with ``server`` and its state store ``STORE``), ``seed.json`` (the seed data its
state is built from), ``cluster.py`` (``CLUSTER``, a ``BundledCluster``: domain, description,
declared edges and the domain facts the planner's words use) and ``__main__.py`` (``python -m
trajsynth.mcp_servers.servers.<name>`` serves it over stdio). Its entry point in the
``trajsynth.clusters`` group names ``CLUSTER``; that group is the only list of bundled clusters.

``_backend`` (SQLite and file state, tool annotations, errors) and ``_state`` (the canonical
state dump run inside the sandbox) are shared. Importing this package imports no server.
"""

from __future__ import annotations

__all__: list[str] = []
