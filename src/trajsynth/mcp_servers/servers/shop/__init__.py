"""The bundled shop cluster, one folder: ``server.py`` (the MCP server: its tools),
``state.py`` (their state store ``STORE``: tables or files, and how they are seeded),
``seed.json`` (its seed data) and ``cluster.py`` (what the cluster is, named by its entry point).

Retail shop: catalogue, cart, orders, returns and refunds, as an MCP server (docs/methods.md §2).

Importing this package imports nothing, so the sandbox can run ``python -m`` on it cheaply.
"""
