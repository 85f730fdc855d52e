"""The bundled clusters, one folder each, and the server machinery they share.

A folder ``<name>/`` holds the whole cluster: ``server.py`` (a real MCP server on the SDK's
``MCPServer``: ``server`` and its tools, which import their state), ``state.py`` (the state store
``STORE``: the SQLite tables or the files, and the seeder that builds them; it imports no ``mcp``),
``seed.json`` (the seed data its state is built from), ``cluster.py`` (``CLUSTER``, a
``BundledCluster``: domain, description, declared edges and the domain facts the planner's words
use) and ``__main__.py`` (``python -m trajsynth.mcp_servers.servers.<name>`` serves it over stdio).
Its entry point in the ``trajsynth.clusters`` group names ``CLUSTER``; that group is the only list
of bundled clusters.

``_backend`` (SQLite and file state, tool annotations, errors) and ``_state`` (the canonical
state dump run inside the sandbox) are shared, and ``_stdio`` serves a cluster over stdio.
Importing this package imports no server.

The SQLite clusters' tools are ``async def`` with a synchronous body (one short SQLite
transaction): the SDK runs a plain ``def`` tool on a worker thread, a hop there and back that
cost ~100-150 µs of each call, and an environment sends one request at a time, so the thread
bought nothing. A tool that may run long (the code cluster runs programs) stays a ``def``.
"""

from __future__ import annotations

__all__: list[str] = []
